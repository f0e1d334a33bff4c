"""Runners measure an algorithm: ``runner = get_runner(name)``, then
``runner.measure(algorithm, sizes, build_options(runner, {...}))``.

Every runner returns a long-form :class:`pandas.DataFrame`, one row per (size, in-place mode), with
the columns :data:`runners.results.COLUMNS` (nccl-tests' semantics and formulas). The contract is in
:mod:`runners.contract`; runners are found by name in the ``autotaccl.runners`` entry-point group
(:mod:`runners.registry`): ``sim``, ``mpi``, ``nccl-tests``, ``mscclpp`` and any a site installs.
"""
from __future__ import annotations

from runners.contract import MSCCL_XML, MSCCLPP_PLAN, BaselineRunner, Runner, RuntimeFile, build_options, options_dict
from runners.registry import get_runner, runner_names
from runners.results import COLUMNS

__all__ = ["COLUMNS", "MSCCL_XML", "MSCCLPP_PLAN", "BaselineRunner", "Runner", "RuntimeFile", "build_options", "get_runner",
           "options_dict", "runner_names"]
