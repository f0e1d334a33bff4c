"""Gurobi backend: gurobipy's matrix API with native indicator constraints."""
from __future__ import annotations

import logging
import time

import numpy as np

from .model import Model
from .solution import Solution, SolverOptions

log = logging.getLogger(__name__)

# The pip wheel's size-limited licence (ecosystem.md §4.3).
LICENCE_LIMIT = 2000


class GurobiUnavailable(RuntimeError):
    """gurobipy could not start or run (no licence, expired licence, ...)."""


class LicenceLimitError(GurobiUnavailable):
    """Gurobi refused the model because of its licence's size limit."""


def solve_gurobi(model: Model, options: SolverOptions, message: str = "") -> Solution:
    import gurobipy as gp
    from gurobipy import GRB

    began = time.perf_counter()
    try:
        return _solve(gp, GRB, model, options, message, began)
    except gp.GurobiError as err:
        if err.errno == 10010:
            raise LicenceLimitError(str(err)) from None
        raise GurobiUnavailable(f"gurobi error {err.errno}: {err}") from None


def _solve(gp, GRB, model: Model, options: SolverOptions, message: str, began: float) -> Solution:
    n = model.num_vars
    with gp.Env(empty=True) as env:
        env.setParam("OutputFlag", 0)
        env.start()
        with gp.Model(model.name, env=env) as m:
            m.Params.TimeLimit = float(options.time_limit)
            m.Params.MIPGap = float(options.mip_gap)
            m.Params.Threads = int(options.threads)
            m.Params.Seed = 0
            kinds = model.kinds
            vtype = np.where(kinds == "B", GRB.BINARY, np.where(kinds == "I", GRB.INTEGER, GRB.CONTINUOUS))
            x = m.addMVar(n, lb=model.lb, ub=model.ub, vtype=vtype, obj=model.objective)
            if model.num_rows:
                sense = np.array([{"<=": GRB.LESS_EQUAL, ">=": GRB.GREATER_EQUAL, "==": GRB.EQUAL}[s]
                                  for s in model.senses])
                m.addMConstr(model.matrix(), x, sense, model.rhs)
            xs = x.tolist()
            gsense = {"<=": GRB.LESS_EQUAL, ">=": GRB.GREATER_EQUAL, "==": GRB.EQUAL}
            for ind in model.indicators:
                expr = gp.LinExpr(list(ind.coefs), [xs[c] for c in ind.cols])
                m.addGenConstrIndicator(xs[ind.binary], bool(ind.value), expr, gsense[ind.sense], ind.rhs)
            m.ObjCon = model.objective_constant
            if model.start:
                start = np.full(n, GRB.UNDEFINED)
                for c, v in model.start.items():
                    start[c] = v
                x.Start = start
            reached = _stop_at_bound(GRB, model, options, xs)
            m.optimize(reached.callback)
            status = m.Status
            has_sol = m.SolCount > 0
            values = np.asarray(x.X, dtype=float) if has_sol else None
            objective = float(m.ObjVal) if has_sol else None
    if status == GRB.OPTIMAL:
        kind = "optimal"
    elif status in (GRB.INFEASIBLE, GRB.INF_OR_UNBD):
        kind, values, objective = "infeasible", None, None
        message = _join(message, "the model is infeasible")
    elif reached.value is not None and has_sol and status == GRB.INTERRUPTED:
        kind = "at_bound"
        message = _join(message, f"stopped: incumbent makespan {reached.value:.6g} within the gap of the known "
                                 f"bound (<= {options.stop_at:.6g})")
    elif status in (GRB.TIME_LIMIT, GRB.INTERRUPTED, GRB.SOLUTION_LIMIT, GRB.NODE_LIMIT, GRB.ITERATION_LIMIT):
        kind = "time_limit" if has_sol else "error"
        if not has_sol:
            message = _join(message, f"time limit {options.time_limit:g} s reached with no feasible solution")
    else:
        kind = "time_limit" if has_sol else "error"
        message = _join(message, f"gurobi ended with status {status}")
    seconds = time.perf_counter() - began
    log.debug("gurobi %s: %s in %.2fs", model.name, kind, seconds)
    return Solution(kind, objective, values, "gurobi", seconds, n, model.num_constraints, message)


class _StopAtBound:
    """A Gurobi callback that terminates once a new incumbent's makespan is at most ``stop_at``."""

    def __init__(self, GRB, stop_at: float | None, variables: list, coefs: tuple[float, ...]) -> None:
        self.GRB, self.stop_at, self.variables, self.coefs = GRB, stop_at, variables, coefs
        self.value: float | None = None

    def callback(self, gm, where) -> None:
        if self.stop_at is None or not self.variables or where != self.GRB.Callback.MIPSOL:
            return
        value = float(sum(v * c for v, c in zip(gm.cbGetSolution(self.variables), self.coefs)))
        if value <= self.stop_at:
            self.value = value
            gm.terminate()


def _stop_at_bound(GRB, model: Model, options: SolverOptions, xs: list) -> _StopAtBound:
    cols, coefs = model.makespan
    return _StopAtBound(GRB, options.stop_at, [xs[c] for c in cols], coefs)


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b
