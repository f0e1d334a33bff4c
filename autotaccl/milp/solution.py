"""Solver options and the solver-neutral result."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

Solver = Literal["auto", "highs", "gurobi"]
SOLVERS: tuple[Solver, ...] = get_args(Solver)


@dataclass(frozen=True)
class SolverOptions:
    solver: Solver = "auto"
    time_limit: float = 600.0       # seconds
    mip_gap: float = 1e-4           # relative
    threads: int = 1
    # stop once an incumbent's makespan expression (Model.set_makespan) is at most this: a known lower
    # bound times (1 + gap) leaves nothing worth searching for (status "at_bound"); None: never
    stop_at: float | None = None

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, not {self.solver!r}")
        if self.time_limit <= 0 or self.mip_gap < 0 or self.threads < 1 or (self.stop_at is not None
                                                                              and not self.stop_at >= 0):
            raise ValueError(f"invalid solver options {self}")


@dataclass(frozen=True)
class Solution:
    status: str                     # optimal | at_bound | time_limit | infeasible | error
    objective: float | None
    values: np.ndarray | None       # one value per model column; None without an incumbent
    solver: str                     # highs | gurobi
    seconds: float
    variables: int
    constraints: int
    message: str = ""


class NoSolutionError(RuntimeError):
    """The solver stopped (time limit) before it found any feasible solution."""


@dataclass(frozen=True)
class StageReport:
    """What one synthesis stage cost: wall time, model size, how it ended and which solver ran it."""
    seconds: float
    variables: int
    constraints: int
    status: str          # optimal | time_limit | heuristic | ...
    solver: str          # highs | gurobi | heuristic name
    message: str = ""
