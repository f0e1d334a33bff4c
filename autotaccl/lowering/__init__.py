"""Lowering the IR to MSCCL XML (and, via :mod:`autotaccl.xmlcheck`, checking and importing XML)."""
