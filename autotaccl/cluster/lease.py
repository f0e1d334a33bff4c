"""Measurement leases: two benchmarks never run on the same hosts at the same time.

Synthesis runs in parallel on every worker; a measurement first takes a lease on each host it occupies
(the runner says which: ``Runner.hosts(options)``), through ``locks``, in sorted order. The lease
window (wall-clock start/end, hosts) is returned so trials can record it.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from . import locks


@dataclass
class Window:
    hosts: tuple[str, ...]
    start: float = 0.0           # time.time() once every lease is held
    end: float = 0.0             # time.time() just before they are released
    waited: float = 0.0          # seconds spent waiting for the leases


@contextmanager
def measuring(storage: str, out_dir: str | Path, hosts: Sequence[str]) -> Iterator[Window]:
    """Hold the leases of ``hosts`` for the duration of the block."""
    window = Window(tuple(hosts))
    asked = time.time()
    with locks.hold_all(storage, out_dir, [f"host:{h}" for h in window.hosts]):
        window.start = time.time()
        window.waited = window.start - asked
        try:
            yield window
        finally:
            window.end = time.time()
