"""One MILP description, two backends (HiGHS by default, Gurobi when its licence admits the model)."""
from .model import INF, Indicator, Model
from .solution import Solution, SolverOptions
from .solve import solve

__all__ = ["INF", "Indicator", "Model", "Solution", "SolverOptions", "solve"]
