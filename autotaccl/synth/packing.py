"""Throughput-optimal spanning out-trees for AllGather (ForestColl's idea, ``peers-and-bounds.md`` §1.5).

Per root, weighted spanning out-trees over the rank graph's links whose load on every capacity-graph arc
stays within ``ratio * capacity``; the packing that minimises ``ratio`` meets the AllGather bound
(:func:`autotaccl.bounds.gather_ratio`). Solved by column generation: the restricted LP on HiGHS, and
Edmonds' cheapest arborescence under its duals as the next column. Why links stand in for switches, and
the tie-breaks among optima: ``docs/internals.md``."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping, Sequence

import networkx as nx

log = logging.getLogger(__name__)

Edge = tuple[int, int]
MAX_ROUNDS = 200        # column-generation rounds (each adds one tree per root); convergence takes far fewer
TOL = 1e-9
DEPTH_COST = 1e-3       # per edge and hop of its tail from the root: far below any price, a tie-break
LINK_WEIGHT = 1e-5      # the busiest link's load against the ratio: ratio first, then spread over links


@dataclass(frozen=True)
class Tree:
    """A spanning out-tree of ``root``: its edges parents first, carrying ``weight`` of its data."""
    root: int
    edges: tuple[Edge, ...]
    weight: float


@dataclass(frozen=True)
class Packing:
    """Trees of every root (weights summing to one per root); ``ratio``: the largest arc load over its rate
    (capacity x efficiency), the time per unit of a rank's data at that rate."""
    trees: tuple[Tree, ...]
    ratio: float


def pack_trees(graph: nx.DiGraph, links: Sequence[Edge], reverse: bool = False,
               senders: Mapping[int, frozenset[int]] | None = None,
               efficiency: Mapping[str, float] | None = None) -> Packing:
    """The least-ratio tree packing over ``links`` (rank pairs, a subset of ``graph``'s edges).

    ``reverse``: for an AllGather that will run backwards (a ReduceScatter): tree edge ``u -> v``
    loads the arcs of the link ``v -> u`` (links without a reverse are left out).
    ``senders``: root -> the ranks that may carry its data off its node (absent: any).
    ``efficiency``: link class -> share of the line rate (the simulator's derating), 1 where absent.
    """
    gpn, ranks = graph.graph["gpus_per_node"], graph.number_of_nodes()
    cap = graph.graph["capacity"]
    usable = sorted((u, v) for u, v in links if graph.has_edge(*((v, u) if reverse else (u, v))))
    arcs_of = {e: graph.edges[(e[1], e[0]) if reverse else e]["resources"] for e in usable}
    senders = dict(senders or {})
    shifts = _node_shifts(graph, set(usable), senders)
    roots = list(range(gpn)) if len(shifts) > 1 else list(range(ranks))
    arc_ids = {a: i for i, a in enumerate(sorted({a for arcs in arcs_of.values() for a in arcs}, key=str))}
    rate = [_rate(cap, a, efficiency) for a in sorted(arc_ids, key=arc_ids.get)]

    def translate(e: Edge, s: int) -> Edge:
        return ((e[0] + s) % ranks, (e[1] + s) % ranks)

    # rows of the LP: every arc (load <= ratio * rate), then every link (load <= the busiest link's load,
    # minimised second: spread over many links, each a connection of its own in the simulator and runtime)
    link_ids = {e: len(rate) + i for i, e in enumerate(sorted({translate(e, s) for e in usable for s in shifts}))}
    # per link, the rows it and its translates load (a tree of a first-node root stands for all translates)
    load_of = {e: [i for s in shifts for i in (*(arc_ids[a] for a in arcs_of[translate(e, s)]),
                                              link_ids[translate(e, s)])] for e in usable}
    allowed = {r: [e for e in usable if _may_use(e, r, gpn, senders)] for r in roots}
    hops = {r: _hops(r, allowed[r]) for r in roots}
    columns: list[tuple[int, tuple[Edge, ...]]] = []
    seen: set[tuple[int, tuple[Edge, ...]]] = set()
    prices = [1.0 / c for c in rate] + [0.0] * len(link_ids)     # start: trees of the widest links
    duals: dict[int, float] = {}
    weights: list[float] = []
    ratio = float("inf")
    for _ in range(MAX_ROUNDS):
        added = 0
        for r in roots:
            tree = _cheapest_tree(r, ranks, allowed[r], {e: sum(prices[a] for a in load_of[e]) for e in allowed[r]}, hops[r])
            cost = sum(prices[a] for e in tree for a in load_of[e])
            if (r, tree) not in seen and (r not in duals or cost < duals[r] - TOL * max(1.0, abs(duals[r]))):
                seen.add((r, tree))
                columns.append((r, tree))
                added += 1
        if not added:
            break
        weights, ratio, prices, duals = _restricted_lp(columns, roots, load_of, rate, len(link_ids))
    else:
        log.warning("tree packing on %s: stopped after %d rounds at ratio %.6g (not proven optimal)",
                    graph.graph.get("name"), MAX_ROUNDS, ratio)
    trees = tuple(Tree(r, breadth_first(r, sorted(edges)), w) for (r, edges), w in zip(columns, weights) if w > TOL)
    trees = _normalised(trees)
    expanded = tuple(Tree((t.root + s) % ranks, tuple(translate(e, s) for e in t.edges), t.weight)
                     for s in shifts for t in trees)
    log.debug("tree packing on %s: %d trees, ratio %.6g", graph.graph.get("name"), len(expanded), ratio)
    return Packing(expanded, ratio)


def packing_ratio(graph: nx.DiGraph, trees: Sequence[Tree], reverse: bool = False,
                  efficiency: Mapping[str, float] | None = None) -> float:
    """The largest load of any capacity-graph arc over its rate (capacity x efficiency) under ``trees``
    (tree edge ``u -> v`` loads the arcs of link ``v -> u`` when ``reverse``)."""
    cap = graph.graph["capacity"]
    load: dict = {}
    for t in trees:
        for u, v in t.edges:
            for a in graph.edges[(v, u) if reverse else (u, v)]["resources"]:
                load[a] = load.get(a, 0.0) + t.weight
    return max(w / _rate(cap, a, efficiency) for a, w in load.items())


def _rate(cap: nx.DiGraph, arc, efficiency: Mapping[str, float] | None) -> float:
    """An arc's rate: its capacity derated by its link class's efficiency (1 where absent)."""
    return cap.edges[arc]["capacity"] * (efficiency or {}).get(cap.edges[arc].get("link_class") or "", 1.0)


# --------------------------------------------------------------------------- pieces


def _may_use(e: Edge, root: int, gpn: int, senders: Mapping[int, frozenset[int]]) -> bool:
    """The sender restriction: the root's data leaves its node only from its senders."""
    u, v = e
    node = root // gpn
    if u // gpn != node or v // gpn == node or root not in senders:
        return True
    return u in senders[root]


def _node_shifts(graph: nx.DiGraph, links: set[Edge], senders: Mapping[int, frozenset[int]]) -> list[int]:
    """Rank offsets (multiples of a node) that map the links, their capacities and the senders onto
    themselves: every offset when the nodes are alike, else only 0."""
    gpn, ranks = graph.graph["gpus_per_node"], graph.number_of_nodes()
    cap = graph.graph["capacity"]
    shifts = list(range(0, ranks, gpn))

    def signature(e: Edge) -> tuple:
        return tuple(sorted(cap.edges[a]["capacity"] for a in graph.edges[e]["resources"]))

    for s in shifts[1:]:
        for u, v in links:
            moved = ((u + s) % ranks, (v + s) % ranks)
            if moved not in links or signature(moved) != signature((u, v)):
                return [0]
        for r, allowed in senders.items():
            if senders.get((r + s) % ranks) != frozenset((g + s) % ranks for g in allowed):
                return [0]
    return shifts


def _cheapest_tree(root: int, ranks: int, links: Sequence[Edge], cost: Mapping[Edge, float],
                   hops: Mapping[int, int]) -> tuple[Edge, ...]:
    """The cheapest spanning out-tree of ``root`` over ``links``, its edges sorted.

    A tiny cost per edge, growing with its tail's hops from the root, prefers shallow trees among
    equally priced ones (a piece's pipeline fill grows with its tree's depth)."""
    import numpy as np

    weights = np.full((ranks, ranks), np.inf)
    for u, v in links:
        weights[u, v] = cost[(u, v)] + DEPTH_COST * (1 + hops.get(u, ranks))
    parent = _arborescence(weights, root)
    return tuple(sorted((int(parent[v]), v) for v in range(ranks) if v != root))


def _arborescence(weights, root: int):
    """Chu-Liu/Edmonds on a dense cost matrix (``inf``: no edge): each vertex's parent (-1 for ``root``).

    Every vertex takes its cheapest incoming edge; a cycle among those is contracted into one vertex
    (edges into it priced by what they save over the cycle edge they replace), the smaller problem
    solved, and the cycle opened where the chosen edge enters it."""
    import numpy as np

    n = len(weights)
    w = weights.copy()
    w[:, root] = np.inf
    np.fill_diagonal(w, np.inf)
    parent = w.argmin(axis=0)
    others = np.arange(n) != root
    if np.isinf(w[parent, np.arange(n)][others]).any():
        raise ValueError(f"rank {root} cannot reach every rank over these links")
    parent[root] = -1
    cycle = _cycle(parent)
    if cycle is None:
        return parent
    inside = np.zeros(n, dtype=bool)
    inside[cycle] = True
    rest = np.flatnonzero(~inside)
    m = len(rest)
    reduced = np.full((m + 1, m + 1), np.inf)
    reduced[:m, :m] = w[np.ix_(rest, rest)]
    saving = w[np.ix_(rest, cycle)] - w[parent[cycle], cycle][None, :]
    enters = saving.argmin(axis=1)
    reduced[:m, m] = saving[np.arange(m), enters]
    leaving = w[np.ix_(cycle, rest)]
    leaves = leaving.argmin(axis=0)
    reduced[m, :m] = leaving[leaves, np.arange(m)]
    sub = _arborescence(reduced, int(np.flatnonzero(rest == root)[0]))
    out = parent.copy()
    for i, v in enumerate(rest):
        p = sub[i]
        out[v] = -1 if p < 0 else (cycle[leaves[i]] if p == m else rest[p])
    u = sub[m]
    out[cycle[enters[u]]] = rest[u]
    return out


def _cycle(parent) -> list[int] | None:
    """Some cycle of the parent pointers (vertices in order), or None."""
    state = [0] * len(parent)          # 0 unseen, 1 on the current walk, 2 done
    for start in range(len(parent)):
        walk, v = [], start
        while v >= 0 and state[v] == 0:
            state[v] = 1
            walk.append(v)
            v = int(parent[v])
        if v >= 0 and state[v] == 1:
            return walk[walk.index(v):]
        for x in walk:
            state[x] = 2
    return None


def _restricted_lp(columns, roots, load_of, rate, links):
    """Weights and ratio of the best packing of these columns, with the row prices and root duals.

    Variables: the column weights, the ratio, the busiest link's load (weighed ``LINK_WEIGHT``). Solved
    by highspy directly (scipy's ``linprog`` wraps the same HiGHS, but importing scipy is slow)."""
    import highspy
    import numpy as np
    from scipy.sparse import coo_matrix, vstack

    from ..milp.highs import quiet_highs

    n, m = len(columns), len(rate)
    root_row = {r: i for i, r in enumerate(roots)}
    rows, cols, vals = [], [], []
    for j, (_, edges) in enumerate(columns):
        counts: dict[int, int] = {}
        for e in edges:
            for a in load_of[e]:
                counts[a] = counts.get(a, 0) + 1
        for a, k in counts.items():
            rows.append(a)
            cols.append(j)
            vals.append(float(k))
    rows += list(range(m + links))
    cols += [n] * m + [n + 1] * links
    vals += [-c for c in rate] + [-1.0] * links
    loads = coo_matrix((vals, (rows, cols)), shape=(m + links, n + 2))
    sums = coo_matrix(([1.0] * n, ([root_row[r] for r, _ in columns], list(range(n)))), shape=(len(roots), n + 2))
    matrix = vstack([loads, sums]).tocsr()
    lower = np.concatenate([np.full(m + links, -np.inf), np.ones(len(roots))])   # loads <= 0, each root's sum = 1
    upper = np.concatenate([np.zeros(m + links), np.ones(len(roots))])
    cost = np.zeros(n + 2)
    cost[n], cost[n + 1] = 1.0, LINK_WEIGHT
    h = quiet_highs()
    h.setOptionValue("threads", 1)
    h.addVars(n + 2, np.zeros(n + 2), np.full(n + 2, np.inf))
    h.changeColsCost(n + 2, np.arange(n + 2, dtype=np.int32), cost)
    h.addRows(matrix.shape[0], lower, upper, matrix.nnz, matrix.indptr.astype(np.int32),
              matrix.indices.astype(np.int32), matrix.data.astype(float))
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"tree packing LP failed: {h.modelStatusToString(h.getModelStatus())}")
    solution = h.getSolution()
    x, y = list(solution.col_value), list(solution.row_dual)
    prices = [max(0.0, -v) for v in y[:m + links]]
    duals = {r: float(y[m + links + root_row[r]]) for r in roots}
    return x[:n], float(x[n]), prices, duals


def _normalised(trees: tuple[Tree, ...]) -> tuple[Tree, ...]:
    """Weights rescaled to sum to exactly one per root (the LP's are within its tolerance)."""
    total: dict[int, float] = {}
    for t in trees:
        total[t.root] = total.get(t.root, 0.0) + t.weight
    return tuple(Tree(t.root, t.edges, t.weight / total[t.root]) for t in trees)


def _hops(root: int, links: Sequence[Edge]) -> dict[int, int]:
    """Hops from ``root`` to every rank it reaches over ``links``."""
    out: dict[int, list[int]] = {}
    for u, v in links:
        out.setdefault(u, []).append(v)
    hops, frontier = {root: 0}, [root]
    while frontier:
        nxt = []
        for u in frontier:
            for v in out.get(u, ()):
                if v not in hops:
                    hops[v] = hops[u] + 1
                    nxt.append(v)
        frontier = nxt
    return hops


def breadth_first(root: int, edges: Sequence[Edge]) -> tuple[Edge, ...]:
    """A tree's edges, breadth first from ``root`` (each sender reached before its edges), each node's
    children in their order in ``edges``."""
    children: dict[int, list[int]] = {}
    for u, v in edges:
        children.setdefault(u, []).append(v)
    out, frontier = [], [root]
    while frontier:
        out += [(u, v) for u in frontier for v in children.get(u, ())]
        frontier = [v for u in frontier for v in children.get(u, ())]
    return tuple(out)
