"""HiGHS backend: numpy/CSR arrays straight into highspy; indicators become big-M rows."""
from __future__ import annotations

import ctypes
import logging
import os
import sys
import time

import highspy
import numpy as np

from .model import Model
from .solution import Solution, SolverOptions

log = logging.getLogger(__name__)

_KIND = {"C": highspy.HighsVarType.kContinuous, "I": highspy.HighsVarType.kInteger,
         "B": highspy.HighsVarType.kInteger}


def quiet_highs() -> highspy.Highs:
    """A silent ``highspy.Highs``: its constructor prints HiGHS' banner from C before any option can be
    set, so it runs with file descriptor 1 on /dev/null (C's buffers flushed before it is restored)."""
    libc = ctypes.CDLL(None)
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            sys.stdout.flush()
            libc.fflush(None)
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
            libc.fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h


def solve_highs(model: Model, options: SolverOptions, message: str = "") -> Solution:
    began = time.perf_counter()
    n = model.num_vars
    h = quiet_highs()
    h.setOptionValue("time_limit", float(options.time_limit))
    h.setOptionValue("mip_rel_gap", float(options.mip_gap))
    h.setOptionValue("threads", int(options.threads))
    h.setOptionValue("random_seed", 0)
    h.addVars(n, model.lb, model.ub)
    obj = model.objective
    idx = np.arange(n, dtype=np.int32)
    if n:
        h.changeColsCost(n, idx, obj)
    kinds = model.kinds
    integer = np.flatnonzero(kinds != "C").astype(np.int32)
    if len(integer):
        h.changeColsIntegrality(len(integer), integer, np.array([_KIND[k] for k in kinds[integer]]))
    for mat, (lo, hi) in ((model.matrix(), model.row_bounds()), _big_m(model)):
        if mat.shape[0]:
            h.addRows(mat.shape[0], lo, hi, mat.nnz, mat.indptr.astype(np.int32), mat.indices.astype(np.int32),
                      mat.data.astype(float))
    if model.start and len(integer):
        cols = np.fromiter(model.start.keys(), dtype=np.int32)
        h.setSolution(len(cols), cols, np.fromiter(model.start.values(), dtype=float))
    reached = _stop_at_bound(h, model, options)
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    has_sol = info.primal_solution_status == 2   # kSolutionStatusFeasible
    values = np.asarray(h.getSolution().col_value, dtype=float) if has_sol else None
    objective = float(info.objective_function_value) + model.objective_constant if has_sol else None
    S = highspy.HighsModelStatus
    if status == S.kOptimal:
        kind = "optimal"
    elif status in (S.kInfeasible, S.kUnboundedOrInfeasible):
        kind, values, objective = "infeasible", None, None
        message = _join(message, "the model is infeasible")
    elif reached and has_sol and status in (S.kInterrupt, S.kHighsInterrupt):
        kind = "at_bound"
        message = _join(message, f"stopped: incumbent makespan {reached[0]:.6g} within the gap of the known "
                                 f"bound (<= {options.stop_at:.6g})")
    elif status in (S.kTimeLimit, S.kInterrupt, S.kIterationLimit, S.kSolutionLimit):
        kind = "time_limit" if has_sol else "error"
        if not has_sol:
            message = _join(message, f"time limit {options.time_limit:g} s reached with no feasible solution")
    else:
        kind = "optimal" if has_sol and status == S.kObjectiveBound else "error"
        message = _join(message, f"highs ended with status {h.modelStatusToString(status)}")
    seconds = time.perf_counter() - began
    log.debug("highs %s: %s in %.2fs (%d vars, %d cons)", model.name, kind, seconds, n, model.num_constraints)
    return Solution(kind, objective, values, "highs", seconds, n, model.num_constraints, message)


def _stop_at_bound(h: highspy.Highs, model: Model, options: SolverOptions) -> list[float]:
    """Interrupt the search once an incumbent's makespan is at most ``options.stop_at``; the returned list
    receives that makespan (stays empty when the model declares none, no stop is asked for, or none came)."""
    reached: list[float] = []
    if options.stop_at is None or not model.makespan[0]:
        return reached

    def improving(event) -> None:
        value = model.makespan_of(event.data_out.mip_solution)
        if value is not None and value <= options.stop_at and not reached:
            reached.append(value)

    def interrupt(event) -> None:
        if reached:
            event.interrupt()

    h.cbMipImprovingSolution.subscribe(improving)
    h.cbMipInterrupt.subscribe(interrupt)
    return reached


def _big_m(model: Model):
    mat, lo, hi = model.big_m_rows()
    return mat, (lo, hi)


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b
