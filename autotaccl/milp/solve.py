"""Pick a backend for a model and solve it."""
from __future__ import annotations

import logging

from .gurobi import LICENCE_LIMIT, GurobiUnavailable, LicenceLimitError, solve_gurobi
from .highs import solve_highs
from .model import Model
from .solution import Solution, SolverOptions

log = logging.getLogger(__name__)


def solve(model: Model, options: SolverOptions = SolverOptions()) -> Solution:
    """Solve ``model``; ``auto`` uses Gurobi only when the model fits its size-limited licence.

    The returned Solution names the solver used and, for ``auto``, why.
    """
    if options.solver == "highs":
        return solve_highs(model, options)
    if options.solver == "gurobi":
        return solve_gurobi(model, options)
    too_big = _over_licence(model)
    if too_big:
        return solve_highs(model, options, f"gurobi licence limit {LICENCE_LIMIT} exceeded ({too_big}): used highs")
    try:
        return solve_gurobi(model, options, "fits the gurobi licence: used gurobi")
    except LicenceLimitError as err:     # a licence with different limits than the pip one
        return solve_highs(model, options, f"gurobi refused the model ({err}): used highs")
    except (ImportError, GurobiUnavailable) as err:
        return solve_highs(model, options, f"gurobi unavailable ({err}): used highs")


def _over_licence(model: Model) -> str:
    parts = []
    if model.num_vars > LICENCE_LIMIT:
        parts.append(f"{model.num_vars} variables")
    if model.num_constraints > LICENCE_LIMIT:
        parts.append(f"{model.num_constraints} constraints")
    return ", ".join(parts)
