"""Lowering the IR to an MSCCL XML program: buffers, steps, thread blocks, channels, then the writer."""
