"""Runners measure an algorithm: ``get_runner("sim" | "mpi" | "nccl-tests").measure(algorithm, sizes, **options)``.

Every runner returns a long-form :class:`pandas.DataFrame`, one row per (size, in-place mode), with
the columns :data:`runners.results.COLUMNS` (nccl-tests' semantics and formulas).
"""
from __future__ import annotations

from autotaccl.errors import InputError

from runners.results import COLUMNS

RUNNERS = ("sim", "mpi", "nccl-tests")


def get_runner(name: str):
    """The runner called ``name``; it has ``name`` and ``measure(algorithm, sizes, **options)``."""
    if name == "sim":
        from runners.sim import SimRunner
        return SimRunner()
    if name == "mpi":
        from runners.mpi import MpiRunner
        return MpiRunner()
    if name == "nccl-tests":
        from runners.nccl_tests import NcclTestsRunner
        return NcclTestsRunner()
    raise InputError("--runner", repr(name), f"one of: {', '.join(RUNNERS)}")


__all__ = ["COLUMNS", "RUNNERS", "get_runner"]
