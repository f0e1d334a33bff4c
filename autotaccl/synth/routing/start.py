"""The routing MILP's warm start: the given routing (e.g. the greedy schedule's sends) if it fits the
model's symmetry and candidates, else one cheapest-arrival tree per chunk; it also tightens the time bounds.
"""
from __future__ import annotations

import heapq
import logging

from ...sketch.logical import LogicalTopology
from .model import RoutingModel

log = logging.getLogger(__name__)


def warm_start(lt: LogicalTopology, b: RoutingModel, given: dict[int, dict[int, int]] | None) -> str:
    """Set the MIP start on ``b.model`` and return where it came from: "given", "shortest-path" or "none".

    ``given``: chunk -> {rank: parent} (:func:`~.trees.start_trees`), or None.
    """
    m, T, objective, unit = b.model, b.T, b.objective, b.unit
    start, start_from = None, "none"
    if given is not None:
        start = _tree_start(lt, b, {c: given[c] for c in b.reps})
        if start is None:
            log.info("routing: the given start is not symmetric under the sketch's rotations; dropped")
        else:
            start_from = "given"
    if start is None:
        start = _shortest_path_start(lt, b)
        start_from = "shortest-path" if start is not None else "none"
    if start is not None:
        # the start's makespan bounds every useful time (plus what the tie-break terms could be worth),
        # which keeps the big-M rows of the arrival indicators tight
        cols, values = start
        given_values = dict(zip(cols, values))
        t_start = given_values[T]
        traffic = sum(coef * given_values.get(col, 0.0) for col, coef in objective.items() if col != T and coef > 0)
        tight = t_start + traffic + abs(unit) * (len(objective) + 1) + 1e-6
        times = set(b.col_a.values()) | {T}
        ub = m.ub
        for col in times:
            if ub[col] > 0:
                m.set_bounds(col, 0.0, tight)
        m.set_start(cols, [min(v, tight) if c in times else v for c, v in zip(cols, values)])
    return start_from


def _shortest_path_start(lt: LogicalTopology, b: RoutingModel):
    """A feasible MIP start: per chunk, a cheapest-arrival tree (Dijkstra) inside its candidates.

    Symmetric chunks get symmetric trees only by luck, so a start that conflicts on a shared column is dropped.
    """
    trees: dict[int, dict[int, int]] = {}
    for c in b.reps:
        out: dict[int, list[int]] = {}
        for u, v in b.candidates[c]:
            out.setdefault(u, []).append(v)
        src = b.sources[c]
        best = {src: 0.0}
        parent: dict[int, int] = {}
        heap = [(0.0, src)]
        done = set()
        while heap:
            t, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            for v in sorted(out.get(u, ())):
                if t + b.cost[(u, v)] < best.get(v, float("inf")) - 1e-12:
                    best[v], parent[v] = t + b.cost[(u, v)], u
                    heapq.heappush(heap, (best[v], v))
        needed = set()
        for r in lt.collective.postcondition(c) - {src}:
            while r != src and r not in needed:
                needed.add(r)
                r = parent[r]
        trees[c] = {v: parent[v] for v in needed}
    return _tree_start(lt, b, trees)


def _tree_start(lt: LogicalTopology, b: RoutingModel, trees: dict[int, dict[int, int]]):
    """Column values for one tree per representative chunk (``trees[c]``: rank -> parent), or None when
    the trees disagree on a column that symmetry shares, or use a link outside the candidates."""
    gpn = lt.graph.graph["gpus_per_node"]
    cost, col_x, col_a = b.cost, b.col_x, b.col_a
    values: dict[int, float] = {}
    for c in b.reps:
        tree, src = trees[c], b.sources[c]
        if any((u, v) not in cost or (c, u, v) not in col_x for v, u in tree.items()):
            return None
        arrive = {src: 0.0}

        def at(r: int) -> float:
            if r not in arrive:
                u = tree[r]
                arrive[r] = at(u) + cost[(u, r)]
                if lt.enforce_ordering and u != src and u // gpn == src // gpn != r // gpn:
                    # relayed after the sender's own chunks, which arrive at cost (sent at time 0)
                    arrive[r] = max(arrive[r], 2 * cost[(u, r)])
            return arrive[r]

        for v in tree:
            at(v)
        for u, v in b.candidates[c]:
            if not _put(values, col_x[(c, u, v)], 1.0 if tree.get(v) == u else 0.0):
                return None
        for r in {src} | {v for _, v in b.candidates[c]}:
            # unreached ranks get arrival 0 (never read: nothing forwards from them)
            if not _put(values, col_a[(c, r)], arrive.get(r, 0.0)):
                return None
    span = 0.0
    for terms in b.load.values():
        span = max(span, sum(coef * values.get(col, 0.0) for col, coef in terms.items()))
    arrivals = [values[col_a[(c, r)]] for c in b.reps for r in lt.collective.postcondition(c) if (c, r) in col_a]
    values[b.T] = max([span] + arrivals)
    cols = sorted(values)
    return cols, [values[k] for k in cols]


def _put(values: dict[int, float], col: int, value: float) -> bool:
    old = values.get(col)
    if old is None:
        values[col] = value
        return True
    return abs(old - value) < 1e-9
