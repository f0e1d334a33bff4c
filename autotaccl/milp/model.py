"""A solver-neutral MILP: columns with bounds and types, sparse linear rows, indicator records, a MIP start.

Rows are collected as COO triplets and handed to a backend as one CSR matrix; nothing here imports a
solver. Indicators ``binary = value  =>  row`` stay symbolic: Gurobi takes them natively, HiGHS gets a
big-M row whose M comes from the variable bounds (:meth:`Model.big_m_rows`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import scipy.sparse as sp

INF = float("inf")
SENSES = ("<=", ">=", "==")
KINDS = ("C", "I", "B")


@dataclass(frozen=True)
class Indicator:
    """``x[binary] == value  =>  sum(coefs * x[cols]) sense rhs``."""

    binary: int
    value: int
    cols: tuple[int, ...]
    coefs: tuple[float, ...]
    sense: str
    rhs: float


class Model:
    """Build by appending; every ``add_*`` returns column or row indices (numpy ints)."""

    def __init__(self, name: str = "model") -> None:
        self.name = name
        self._lb: list[float] = []
        self._ub: list[float] = []
        self._kind: list[str] = []
        self._obj: list[float] = []
        self._names: list[str] = []
        self._ri: list[np.ndarray] = []     # COO row indices, one array per add_row(s) call
        self._ci: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self._sense: list[str] = []
        self._rhs: list[float] = []
        self.indicators: list[Indicator] = []
        self.objective_constant = 0.0
        self.start: dict[int, float] = {}
        self.makespan: tuple[tuple[int, ...], tuple[float, ...]] = ((), ())

    # ------------------------------------------------------------------ columns
    def add_var(self, lb: float = 0.0, ub: float = INF, kind: str = "C", obj: float = 0.0, name: str = "") -> int:
        return int(self.add_vars(1, lb, ub, kind, obj, name)[0])

    def add_vars(self, n: int, lb: float | Sequence[float] = 0.0, ub: float | Sequence[float] = INF,
                 kind: str = "C", obj: float | Sequence[float] = 0.0, name: str = "") -> np.ndarray:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        first = len(self._lb)
        lbs = np.broadcast_to(np.asarray(lb, dtype=float), (n,))
        ubs = np.broadcast_to(np.asarray(ub, dtype=float), (n,))
        if kind == "B":
            lbs, ubs = np.maximum(lbs, 0.0), np.minimum(ubs, 1.0)
        if np.any(lbs > ubs):
            raise ValueError(f"variable {name or first}: lower bound above upper bound")
        self._lb.extend(lbs.tolist())
        self._ub.extend(ubs.tolist())
        self._kind.extend([kind] * n)
        self._obj.extend(np.broadcast_to(np.asarray(obj, dtype=float), (n,)).tolist())
        self._names.extend([f"{name}[{i}]" if n > 1 else name for i in range(n)] if name else [""] * n)
        return np.arange(first, first + n)

    def set_objective(self, cols: Iterable[int], coefs: Iterable[float], constant: float = 0.0) -> None:
        """Replace the (minimised) objective."""
        self._obj = [0.0] * len(self._lb)
        for c, v in zip(cols, coefs):
            self._obj[int(c)] += float(v)
        self.objective_constant = constant

    def set_bounds(self, col: int, lb: float, ub: float) -> None:
        self._lb[col], self._ub[col] = float(lb), float(ub)

    # ------------------------------------------------------------------ rows
    def add_row(self, cols: Sequence[int], coefs: Sequence[float], sense: str, rhs: float) -> int:
        """``sum(coefs * x[cols]) sense rhs``; repeated columns are summed."""
        if sense not in SENSES:
            raise ValueError(f"sense must be one of {SENSES}, not {sense!r}")
        row = len(self._sense)
        cols = np.asarray(cols, dtype=np.int64)
        self._ri.append(np.full(len(cols), row, dtype=np.int64))
        self._ci.append(cols)
        self._vals.append(np.broadcast_to(np.asarray(coefs, dtype=float), cols.shape).copy())
        self._sense.append(sense)
        self._rhs.append(float(rhs))
        return row

    def add_indicator(self, binary: int, value: int, cols: Sequence[int], coefs: Sequence[float],
                      sense: str, rhs: float) -> None:
        if self._kind[binary] != "B":
            raise ValueError(f"indicator variable {binary} is not binary")
        if sense not in SENSES or value not in (0, 1):
            raise ValueError("indicator needs value 0/1 and a sense of <=, >=, ==")
        coefs = np.broadcast_to(np.asarray(coefs, dtype=float), (len(cols),))
        self.indicators.append(Indicator(int(binary), int(value), tuple(int(c) for c in cols),
                                         tuple(float(v) for v in coefs), sense, float(rhs)))

    def set_start(self, cols: Iterable[int], values: Iterable[float]) -> None:
        """MIP start values (partial starts are allowed)."""
        for c, v in zip(cols, values):
            self.start[int(c)] = float(v)

    def set_makespan(self, cols: Sequence[int], coefs: Sequence[float]) -> None:
        """The expression a known lower bound applies to (``SolverOptions.stop_at`` stops on it)."""
        self.makespan = (tuple(int(c) for c in cols), tuple(float(v) for v in coefs))

    def makespan_of(self, values: Sequence[float]) -> float | None:
        """The makespan expression at ``values`` (a full solution); None if the model declares none."""
        cols, coefs = self.makespan
        return float(sum(values[c] * v for c, v in zip(cols, coefs))) if cols else None

    # ------------------------------------------------------------------ views
    @property
    def num_vars(self) -> int:
        return len(self._lb)

    @property
    def num_rows(self) -> int:
        return len(self._sense)

    @property
    def num_constraints(self) -> int:
        """Linear rows plus indicator constraints (what a licence counts)."""
        return len(self._sense) + len(self.indicators)

    @property
    def lb(self) -> np.ndarray:
        return np.asarray(self._lb, dtype=float)

    @property
    def ub(self) -> np.ndarray:
        return np.asarray(self._ub, dtype=float)

    @property
    def kinds(self) -> np.ndarray:
        return np.asarray(self._kind)

    @property
    def objective(self) -> np.ndarray:
        return np.asarray(self._obj, dtype=float)

    @property
    def senses(self) -> np.ndarray:
        return np.asarray(self._sense)

    @property
    def rhs(self) -> np.ndarray:
        return np.asarray(self._rhs, dtype=float)

    def matrix(self) -> sp.csr_matrix:
        """The linear rows as CSR (duplicates summed)."""
        if self._ri:
            ri, ci, vals = np.concatenate(self._ri), np.concatenate(self._ci), np.concatenate(self._vals)
        else:
            ri = ci = np.zeros(0, dtype=np.int64)
            vals = np.zeros(0)
        m = sp.coo_matrix((vals, (ri, ci)), shape=(self.num_rows, self.num_vars)).tocsr()
        m.sum_duplicates()
        return m

    def big_m_rows(self) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        """Indicators as linear rows ``lo <= A x <= hi`` with per-row big-M from the variable bounds.

        ``b = 1 => a.x <= r`` becomes ``a.x + M b <= r + M`` with ``M = max(a.x) - r``; ``b = 0`` uses
        ``a.x - M b <= r``; ``>=`` mirrors it with ``M = r - min(a.x)``; ``==`` gives both rows.
        Raises ValueError when a needed activity bound is infinite.
        """
        lb, ub = self.lb, self.ub
        ri: list[int] = []
        ci: list[int] = []
        vals: list[float] = []
        lo: list[float] = []
        hi: list[float] = []
        for k, ind in enumerate(self.indicators):
            a = np.asarray(ind.coefs)
            cols = np.asarray(ind.cols, dtype=np.int64)
            act_max = float(np.sum(np.where(a > 0, a * ub[cols], a * lb[cols]))) if len(cols) else 0.0
            act_min = float(np.sum(np.where(a > 0, a * lb[cols], a * ub[cols]))) if len(cols) else 0.0
            for sense in (("<=", ">=") if ind.sense == "==" else (ind.sense,)):
                m = act_max - ind.rhs if sense == "<=" else ind.rhs - act_min
                if not np.isfinite(m):
                    raise ValueError(f"indicator {k}: the variables of its row need finite bounds for big-M")
                if m <= 0:
                    continue            # the row holds for every value of its variables
                row = len(lo)
                sign = 1.0 if sense == "<=" else -1.0
                # sign*(a.x) + M*(b or 1-b) <= sign*r + M   (b=value activates the row)
                bcoef = m if ind.value == 1 else -m
                rhs = sign * ind.rhs + (m if ind.value == 1 else 0.0)
                ri.extend([row] * (len(cols) + 1))
                ci.extend(cols.tolist() + [ind.binary])
                vals.extend((sign * a).tolist() + [bcoef])
                lo.append(-INF)
                hi.append(rhs)
        mat = sp.coo_matrix((vals, (ri, ci)), shape=(len(lo), self.num_vars)).tocsr()
        mat.sum_duplicates()
        return mat, np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)

    def row_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The linear rows as ``lo <= A x <= hi``."""
        rhs, senses = self.rhs, self.senses
        lo = np.where(senses == "<=", -INF, rhs)
        hi = np.where(senses == ">=", INF, rhs)
        return lo, hi
