"""The routing MILP (taccl.md §4): which candidate sends each chunk takes, its arrival times, the makespan.

Columns are orbits under the sketch's symmetry (one column per orbit of sends and of arrivals), rows
are written for one representative chunk per orbit. Per representative chunk: every destination
receives it once (other ranks at most once), a rank forwards only what it received, and a send's
indicator orders the arrivals at its ends by its cost. The makespan ``T`` bounds every arrival at a
destination and the load of every shared resource (NVLink bundle, switch port, PCIe hop, NIC). The
objective is ``T`` plus small tie-breaks: least total traffic, and the sketch's switch or min-max terms.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ...milp import Model
from ...sketch.logical import LogicalTopology
from .symmetry import Orbits
from .trees import Send


@dataclass(frozen=True)
class RoutingModel:
    """The built model and the column maps the warm start and the extraction read."""
    model: Model
    triples: list[Send]                          # every candidate send
    arrivals: list[tuple[int, int]]              # every (chunk, rank) with an arrival column
    sources: Mapping[int, int]                   # chunk -> its source rank
    reps: list[int]                              # one chunk per symmetry orbit: the rows are written for these
    candidates: Mapping[int, list[tuple[int, int]]]
    cost: Mapping[tuple[int, int], float]        # link -> uncontended cost of one chunk (µs)
    col_x: Mapping[Send, int]                    # send -> its binary column
    col_a: Mapping[tuple[int, int], int]         # (chunk, rank) -> its arrival column
    T: int                                       # the makespan column
    load: Mapping                                # resource -> {send column: bandwidth time}
    objective: Mapping[int, float]
    unit: float                                  # the weight of one tie-break term


def build(lt: LogicalTopology, options, cand: Mapping[int, list[tuple[int, int]]], perms) -> RoutingModel:
    """The routing model over the candidate links ``cand`` (chunk -> links), with ``perms`` substituted.

    ``options``: the :class:`~.route.RoutingOptions` weights (``load_alpha``, ``traffic_weight``, ``tie_weight``).
    """
    coll = lt.collective
    C = coll.num_chunks
    triples = [(c, u, v) for c in range(C) for u, v in cand[c]]
    sources = {c: next(iter(coll.precondition(c))) for c in range(C)}
    ranks_of = {c: sorted({sources[c]} | {v for _, v in cand[c]}) for c in range(C)}
    arr_items = [(c, r) for c in range(C) for r in ranks_of[c]]
    x_of, a_of, reps = _orbits(triples, arr_items, C, perms)

    m = Model("routing")
    horizon = _horizon(lt, triples)
    nx_, na = max(x_of.values(), default=-1) + 1, max(a_of.values(), default=-1) + 1
    X = m.add_vars(nx_, kind="B", name="x")
    A = m.add_vars(na, 0.0, horizon, name="arrival")
    T = m.add_var(0.0, horizon, name="T")
    col_x = {t: int(X[i]) for t, i in x_of.items()}
    col_a = {k: int(A[i]) for k, i in a_of.items()}
    for c in range(C):
        m.set_bounds(col_a[(c, sources[c])], 0.0, 0.0)

    cost = {(u, v): lt.cost_us(u, v) for c in range(C) for u, v in cand[c]}
    rows = _RowSet(m)
    _tree_rows(coll, m, rows, cand, reps, sources, ranks_of, col_x, col_a, cost, T)

    # load on every shared resource (NVLink bundle, switch port, PCIe hop, NIC)
    load: dict = {}
    alpha = {e: float(lt.graph.edges[e]["alpha_us"]) for e in cost}
    share = {e: cost[e] - (1.0 - options.load_alpha) * alpha[e] for e in cost}
    for c, u, v in triples:
        for arc in lt.resources(u, v):
            load.setdefault(arc, {}).setdefault(col_x[(c, u, v)], 0.0)
            load[arc][col_x[(c, u, v)]] += share[(u, v)]
    for arc, terms in sorted(load.items(), key=lambda kv: str(kv[0])):
        cols = list(terms)
        rows.add([T] + cols, [1.0] + [-terms[k] for k in cols], ">=", 0.0)

    if lt.enforce_ordering:
        _enforce_ordering(lt, m, cand, sources, col_x, col_a, cost, reps)

    objective, unit = _objective(lt, m, rows, options, triples, col_x, cost, share, load, T, horizon)
    m.set_makespan([T], [1.0])      # T >= every arrival and every resource's bandwidth time: above the bound
    return RoutingModel(m, triples, arr_items, sources, reps, cand, cost, col_x, col_a, T, load, objective, unit)


def _tree_rows(coll, m: Model, rows: _RowSet, cand, reps, sources, ranks_of, col_x, col_a, cost, T: int) -> None:
    """Per representative chunk: each destination receives it once (others at most once), a rank forwards
    only what it received, a send orders the arrivals at its ends by its cost, and T bounds the arrivals."""
    for c in reps:
        src, post = sources[c], coll.postcondition(c)
        into: dict[int, list[int]] = {}
        for u, v in cand[c]:
            into.setdefault(v, []).append(col_x[(c, u, v)])
        for r in ranks_of[c]:
            if r == src:
                continue
            cols = into.get(r, [])
            rows.add(cols, [1.0] * len(cols), "==" if r in post else "<=", 1.0)
            if r in post:
                rows.add([T, col_a[(c, r)]], [1.0, -1.0], ">=", 0.0)
        for u, v in cand[c]:
            x = col_x[(c, u, v)]
            if u != src:                                   # forward only what arrived
                cols = into.get(u, [])
                rows.add([x] + cols, [1.0] + [-1.0] * len(cols), "<=", 0.0)
            m.add_indicator(x, 1, [col_a[(c, v)], col_a[(c, u)]], [1.0, -1.0], ">=", cost[(u, v)])


def _objective(lt: LogicalTopology, m: Model, rows: _RowSet, options, triples, col_x, cost, share, load, T: int,
               horizon: float) -> tuple[dict[int, float], float]:
    """The makespan plus tie-breaks (least traffic; the sketch's switch or min-max terms), set on ``m``;
    returns it and the weight of one tie-break term."""
    objective = {T: 1.0}
    unit = options.tie_weight * float(np.mean(list(cost.values()))) if cost else 0.0
    # tie-break: least total traffic (once arrivals bound T, loads are slack and nothing else would stop
    # a chunk from crossing the network twice, which costs dearly at sizes where bandwidth dominates)
    for c, u, v in triples:
        col = col_x[(c, u, v)]
        objective[col] = objective.get(col, 0.0) + options.traffic_weight * share[(u, v)]
    if lt.intranode_strategy == "switch":
        sign = 1.0 if lt.switch_objective == "uc-min" else -1.0
        for y in _unique_connections(lt, m, triples, col_x):
            objective[y] = objective.get(y, 0.0) + sign * unit
    elif lt.intranode_strategy in ("minmax", "maxmin"):
        u_col = m.add_var(0.0, horizon, name="link_util")
        intra = {arc: terms for arc, terms in load.items()
                 if any(lt.graph.edges[u, v]["kind"] != "net" and arc in lt.resources(u, v) for u, v in lt.edges)}
        for arc, terms in intra.items():
            cols = list(terms)
            rows.add([u_col] + cols, [1.0] + [-terms[k] for k in cols],
                     ">=" if lt.intranode_strategy == "minmax" else "<=", 0.0)
        objective[u_col] = unit if lt.intranode_strategy == "minmax" else -unit
    m.set_objective(list(objective), list(objective.values()))
    return objective, unit


def _orbits(triples: list[Send], arr_items: list[tuple[int, int]], C: int, perms):
    """Column numbers of the orbits of sends and of arrivals under the symmetry group, and one chunk per orbit."""
    tri_orb = Orbits(triples)
    tri_set = set(triples)
    arr_orb = Orbits(arr_items)
    chunk_orb = Orbits(range(C))
    for sigma, cmap in perms:
        for c, u, v in triples:
            image = (cmap[c], sigma[u], sigma[v])
            if image not in tri_set:     # the path sets are built from symmetric data, so this cannot happen
                raise AssertionError(f"symmetry image {image} of {(c, u, v)} is not a candidate")
            tri_orb.union((c, u, v), image)
        for c, r in arr_items:
            arr_orb.union((c, r), (cmap[c], sigma[r]))
        for c in range(C):
            chunk_orb.union(c, cmap[c])
    return tri_orb.index(), arr_orb.index(), sorted({chunk_orb.find(c) for c in range(C)})


class _RowSet:
    """Adds rows to a model, skipping exact duplicates (symmetry substitution produces many)."""

    def __init__(self, m: Model) -> None:
        self.m, self.seen = m, set()

    def add(self, cols, coefs, sense, rhs) -> None:
        merged: dict[int, float] = {}
        for c, v in zip(cols, coefs):
            merged[int(c)] = merged.get(int(c), 0.0) + v
        key = (tuple(sorted(merged.items())), sense, rhs)
        if key in self.seen or not merged:
            return
        self.seen.add(key)
        self.m.add_row(list(merged), list(merged.values()), sense, rhs)


def _horizon(lt: LogicalTopology, triples) -> float:
    """An upper bound on any sensible arrival time: every candidate transfer done one after another."""
    return float(sum(lt.cost_us(u, v) for _, u, v in triples)) + 1.0


def _enforce_ordering(lt, m, cand, sources, col_x, col_a, cost, reps) -> None:
    """On a sender's network links, its own chunks arrive before the chunks it relays (taccl.md §4.6)."""
    gpn = lt.graph.graph["gpus_per_node"]
    rep_set = set(reps)
    ub = m.ub
    by_link: dict[tuple[int, int], list[int]] = {}
    for c, edges in cand.items():
        for u, v in edges:
            if u // gpn != v // gpn and u // gpn == sources[c] // gpn:
                by_link.setdefault((u, v), []).append(c)
    for (u, v), chunks in by_link.items():
        own = [c for c in chunks if sources[c] == u]
        relayed = [c for c in chunks if sources[c] != u]
        for c in relayed:
            if c not in rep_set:
                continue
            for cs in own:
                # x[cs] = 1 and x[c] = 1  =>  a[c, v] >= a[cs, v] + cost
                big = ub[col_a[(c, v)]] + cost[(u, v)]
                m.add_indicator(col_x[(cs, u, v)], 1, [col_a[(c, v)], col_a[(cs, v)], col_x[(c, u, v)]],
                                [1.0, -1.0, -big], ">=", cost[(u, v)] - big)


def _unique_connections(lt, m, triples, col_x) -> list[int]:
    """One binary per used intra-node switch connection: y >= x[c, u, v] for all c, y <= sum_c x."""
    by_edge: dict[tuple[int, int], set[int]] = {}
    for c, u, v in triples:
        if lt.graph.edges[u, v]["kind"] == "switch":
            by_edge.setdefault((u, v), set()).add(col_x[(c, u, v)])
    ys = []
    for edge in sorted(by_edge):
        y = m.add_var(kind="B", name=f"uc{edge}")
        cols = sorted(by_edge[edge])
        for x in cols:
            m.add_row([y, x], [1.0, -1.0], ">=", 0.0)
        m.add_row([y] + cols, [1.0] + [-1.0] * len(cols), "<=", 0.0)
        ys.append(y)
    return ys
