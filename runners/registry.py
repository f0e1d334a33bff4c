"""Runners by name, from the ``autotaccl.runners`` entry-point group: the shipped ones and a site's own.

autotaccl declares ``sim``, ``mpi`` and ``nccl-tests`` in its ``pyproject.toml``; a site ships a runner
by declaring its class in the same group of its own package::

    [project.entry-points."autotaccl.runners"]
    slurm-gpu = "site_runners.gpu:GpuRunner"
"""
from __future__ import annotations

import dataclasses
from importlib.metadata import EntryPoint, entry_points

from autotaccl.errors import InputError

from runners.contract import Runner

GROUP = "autotaccl.runners"


def runner_entry_points() -> dict[str, EntryPoint]:
    """Name -> entry point of every installed runner; two packages claiming one name is an error."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        if ep.name in found and found[ep.name].value != ep.value:
            raise InputError(f"entry points {GROUP}", ep.name,
                             f"one runner per name ({found[ep.name].value} and {ep.value} both claim it)")
        found.setdefault(ep.name, ep)
    return found


def runner_names() -> list[str]:
    return sorted(runner_entry_points())


def get_runner(name: str) -> Runner:
    """The runner called ``name``, checked against the contract (:mod:`runners.contract`)."""
    eps = runner_entry_points()
    if name not in eps:
        raise InputError("--runner", repr(name), f"one of: {', '.join(sorted(eps))}" if eps else
                         "an installed runner (none is: `pip install -e .` registers sim, mpi and nccl-tests)")
    ep = eps[name]
    where = f"entry point {name} = {ep.value}"
    try:
        cls = ep.load()
    except (ImportError, AttributeError) as err:
        raise InputError(where, "runner", f"an importable runner class ({err})") from None
    runner = cls()
    if not isinstance(runner, Runner) or runner.name != name:
        raise InputError(where, "runner", f"a runner named {name!r} with name, real_hardware, runtime_file, "
                                          "Options, hosts() and measure() (runners/contract.py)")
    options = runner.Options
    if not (dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen):
        raise InputError(where, "Options", "a frozen dataclass")
    return runner
