"""Lowering the IR to an MSCCL++ plan: layout, thread blocks and their order, numbering, then the check."""
