"""Python's cyclic garbage collector paused while a stage builds millions of short-lived objects.

Synthesis, lowering and simulation allocate transfers, steps and events by the million and make no
reference cycles worth collecting, yet the collector's passes over them cost much of their time, for no
memory saved (the figures: ``benchmarks/results/synthesis.md``, carried over). Reference counting still frees every object as it goes; the collection the stage put off runs
once after it.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block (or decorated function) with the cyclic collector off, and on again after it if it
    was on before."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
