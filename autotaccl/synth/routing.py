"""Stage 1: which links each chunk crosses (TACCL's routing MILP, taccl.md §4, compact and fixed).

Differences from the reference, on purpose:

* Variables exist only for transfers ``(chunk, src, dst)`` the sketch and the topology allow, on paths
  that stay within ``slack`` hops of the shortest route *inside the sketch* (the reference prunes by
  hop count on the physical graph and ignores the sender map, which makes some sketches infeasible).
* Symmetry removes variables: every orbit of transfers (and of arrival times) under the sketch's
  rotations is one column.
* Single-node sketches work; ``minmax``/``maxmin`` and non-``uc`` switch strategies have objectives.
* Load bounds are per shared resource (the capacity-graph arcs an edge holds: NVLink bundle, switch
  port, PCIe hop, NIC), each transfer costing its bandwidth time (its alpha goes into arrivals only,
  like the reference's ``invbw`` loads: batching pays one alpha for many chunks), so a NIC shared by several logical
  links is counted once.

The objective is the makespan bound ``T >= arrival(c, r)`` and ``T >= load(resource)``.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..errors import InfeasibleError
from ..milp import Model, SolverOptions, solve
from ..milp.solution import NoSolutionError, StageReport
from ..sketch.logical import LogicalTopology

log = logging.getLogger(__name__)

Send = tuple[int, int, int]          # (chunk, src, dst)


@dataclass(frozen=True)
class RoutingOptions:
    milp: SolverOptions = SolverOptions()
    slack: int | None = None         # extra hops allowed beyond the sketch's shortest route; None = auto:
                                     # 1 while that keeps at most `auto_slack_limit` candidates, else 0
    auto_slack_limit: int = 4_000   # transfer columns (after symmetry) that slack 1 may create
    load_alpha: float = 0.0           # share of a transfer's alpha charged to resource loads (arrivals pay it
                                     # whole): batching and pipelining pay one alpha for many chunks, and
                                     # charging it per chunk makes the model spread chunks over slow links
    traffic_weight: float = 1e-3     # weight of the summed bandwidth time of all transfers, per transfer
    tie_weight: float = 1e-3         # weight of the unique-connection / min-max terms, relative to one transfer
    start: tuple[Send, ...] | None = None   # a known routing (e.g. the greedy schedule's sends) as the MIP start;
                                            # its links join the candidates; symmetric chunks take their
                                            # orbit representative's tree (a non-symmetric start is dropped)


@dataclass(frozen=True)
class Routing:
    """Each chunk's tree of transfers, with the routing model's arrival times (a relaxation)."""
    sends: tuple[Send, ...]                      # sorted by chunk, then estimated arrival
    arrival: Mapping[tuple[int, int], float]     # (chunk, rank) -> estimated arrival time (µs)
    makespan: float                              # the stage-1 bound
    report: StageReport
    reverse: bool = False                        # routed on the reversed graph (for combine)

    def parents(self) -> dict[tuple[int, int], int]:
        """(chunk, rank) -> the rank it receives the chunk from."""
        return {(c, v): u for c, u, v in self.sends}


# --------------------------------------------------------------------------- sketch-restricted candidates


def chunk_edges(lt: LogicalTopology, chunk: int, slack: int = 0) -> list[tuple[int, int]]:
    """The (src, dst) links chunk ``chunk`` may cross: sketch rules, then the slack-limited path set.

    Raises InfeasibleError naming the chunk, the unreachable rank and why.
    """
    coll, g = lt.collective, lt.graph
    gpn = g.graph["gpus_per_node"]
    pre, post = coll.precondition(chunk), coll.postcondition(chunk)
    if len(pre) != 1:
        raise ValueError(f"routing needs one source per chunk; {coll.name} has {len(pre)} (use combine)")
    (src,) = pre
    home = src // gpn
    nodes = {r // gpn for r in pre | post}
    senders = lt.senders.get(chunk)
    allowed = []
    for u, v in lt.edges:
        nu, nv = u // gpn, v // gpn
        if nu not in nodes or nv not in nodes or v == src:
            continue
        if nu != nv:
            if nv == home:                                  # never come back into the source node
                continue
            if nu == home and senders is not None and u not in senders:
                continue
        allowed.append((u, v))
    out_adj: dict[int, list[int]] = {}
    in_adj: dict[int, list[int]] = {}
    for u, v in allowed:
        out_adj.setdefault(u, []).append(v)
        in_adj.setdefault(v, []).append(u)
    d_src = _bfs(src, out_adj)
    for r in sorted(post - {src}):
        if r not in d_src:
            raise InfeasibleError(_why_unreachable(lt, chunk, src, r, senders))
    # distance of every rank to each destination (reverse BFS)
    targets = sorted(post - {src})
    d_to = {q: _bfs(q, in_adj) for q in targets}
    keep = []
    for u, v in allowed:
        if u not in d_src:
            continue
        if any(v in d_to[q] and d_src[u] + 1 + d_to[q][v] <= d_src[q] + slack for q in targets):
            keep.append((u, v))
    return sorted(keep)


def _bfs(start: int, adj: Mapping[int, list[int]]) -> dict[int, int]:
    dist = {start: 0}
    todo = deque([start])
    while todo:
        u = todo.popleft()
        for v in adj.get(u, ()):
            if v not in dist:
                dist[v] = dist[u] + 1
                todo.append(v)
    return dist


def _why_unreachable(lt: LogicalTopology, chunk: int, src: int, dst: int, senders) -> str:
    gpn = lt.graph.graph["gpus_per_node"]
    if src // gpn != dst // gpn:
        out = sorted(u for u, v in lt.edges if u // gpn == src // gpn and v // gpn == dst // gpn)
        if not out:
            return (f"chunk {chunk} cannot go from rank {src} to rank {dst}: the sketch allows no link from node "
                    f"{src // gpn} to node {dst // gpn}")
        if senders is not None and not set(out) & set(senders):
            return (f"chunk {chunk} cannot go from rank {src} to rank {dst}: the sender map lets it leave node "
                    f"{src // gpn} only through rank(s) {sorted(senders)}, but the sketch's links to node "
                    f"{dst // gpn} start at rank(s) {out}")
    return (f"chunk {chunk} cannot go from rank {src} to rank {dst}: the sketch's links do not connect them "
            f"({len(lt.edges)} links allowed)")


# --------------------------------------------------------------------------- symmetry


def symmetry_permutations(lt: LogicalTopology) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The sketch's rotations that are automorphisms of the logical topology, as (rank map, chunk map).

    A rotation ``[offset, size]`` maps ``r -> (r mod size + offset) mod size + (r div size) * size``.
    Rotations that do not preserve the allowed links, their costs and kinds, the chunk structure and
    the sender map are dropped (logged), so the substitution never changes the problem.
    """
    coll = lt.collective
    R, n_chunks = coll.ranks, coll.num_chunks
    key = {}
    for c in range(n_chunks):
        key[(coll.precondition(c), coll.postcondition(c), c % coll.chunkup)] = c
    out = []
    for offset, size in lt.symmetry:
        if size <= 0 or R % size:
            log.warning("symmetry [%d, %d] ignored: size does not divide %d ranks", offset, size, R)
            continue
        sigma = tuple((r % size + offset) % size + (r // size) * size for r in range(R))
        if sigma == tuple(range(R)):
            continue
        reason = _check_automorphism(lt, sigma)
        chunk_map = []
        if not reason:
            for c in range(n_chunks):
                image = key.get((frozenset(sigma[r] for r in coll.precondition(c)),
                                 frozenset(sigma[r] for r in coll.postcondition(c)), c % coll.chunkup))
                if image is None:
                    reason = f"chunk {c} has no image"
                    break
                chunk_map.append(image)
        if not reason:
            for c, s in lt.senders.items():
                if lt.senders.get(chunk_map[c]) != frozenset(sigma[r] for r in s):
                    reason = f"the sender map of chunk {c} is not symmetric"
                    break
        if reason:
            log.warning("symmetry [%d, %d] ignored: %s", offset, size, reason)
            continue
        out.append((sigma, tuple(chunk_map)))
    return out


def _check_automorphism(lt: LogicalTopology, sigma: tuple[int, ...]) -> str:
    for u, v in lt.edges:
        a, b = sigma[u], sigma[v]
        if (a, b) not in lt.edges:
            return f"link {u}->{v} maps to {a}->{b}, which the sketch does not allow"
        e, f = lt.graph.edges[u, v], lt.graph.edges[a, b]
        if e["kind"] != f["kind"] or abs(lt.cost_us(u, v) - lt.cost_us(a, b)) > 1e-9 * max(1.0, lt.cost_us(u, v)):
            return f"link {u}->{v} and its image {a}->{b} differ in kind or cost"
    return ""


def _group_order(perms) -> int:
    """How many rank permutations the symmetry generators produce (the identity included)."""
    if not perms:
        return 1
    ident = tuple(range(len(perms[0][0])))
    seen, todo = {ident}, [ident]
    while todo:
        p = todo.pop()
        for sigma, _ in perms:
            q = tuple(sigma[i] for i in p)
            if q not in seen:
                seen.add(q)
                todo.append(q)
    return len(seen)


class _Orbits:
    """Union-find over hashable items; ``index`` numbers the orbits 0, 1, ..."""

    def __init__(self, items) -> None:
        self.parent = {x: x for x in items}

    def find(self, x):
        p = self.parent
        while p[x] != x:
            p[x] = p[p[x]]
            x = p[x]
        return x

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def index(self) -> dict:
        roots: dict = {}
        return {x: roots.setdefault(self.find(x), len(roots)) for x in sorted(self.parent)}


# --------------------------------------------------------------------------- the model


def route(lt: LogicalTopology, options: RoutingOptions = RoutingOptions()) -> Routing:
    """Stage 1: solve the routing MILP and return each chunk's tree of transfers."""
    began = time.perf_counter()
    coll = lt.collective
    C = coll.num_chunks
    perms = symmetry_permutations(lt)
    slack = 1 if options.slack is None else options.slack
    cand = {c: chunk_edges(lt, c, slack) for c in range(C)}
    if options.slack is None and sum(map(len, cand.values())) > options.auto_slack_limit * _group_order(perms):
        slack = 0
        cand = {c: chunk_edges(lt, c, slack) for c in range(C)}
    given = _start_trees(lt, options.start) if options.start else None
    if given is not None:
        extra = {(c, u, v) for c, tree in given.items() for v, u in tree.items() if (u, v) not in cand[c]}
        todo = list(extra)
        while todo:                       # keep the candidate sets symmetric: add the images too
            c, u, v = todo.pop()
            for sigma, cmap in perms:
                image = (cmap[c], sigma[u], sigma[v])
                if image not in extra:
                    extra.add(image)
                    todo.append(image)
        for c, u, v in extra:
            cand[c].append((u, v))
        cand = {c: sorted(set(edges)) for c, edges in cand.items()}
    triples = [(c, u, v) for c in range(C) for u, v in cand[c]]
    sources = {c: next(iter(coll.precondition(c))) for c in range(C)}

    # orbits of transfers, arrivals and chunks under the symmetry group
    tri_orb = _Orbits(triples)
    tri_set = set(triples)
    ranks_of = {c: sorted({sources[c]} | {v for _, v in cand[c]}) for c in range(C)}
    arr_items = [(c, r) for c in range(C) for r in ranks_of[c]]
    arr_orb = _Orbits(arr_items)
    chunk_orb = _Orbits(range(C))
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
    x_of = tri_orb.index()
    a_of = arr_orb.index()
    reps = sorted({chunk_orb.find(c) for c in range(C)})

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

    start, start_from = None, "none"
    if given is not None:
        start = _tree_start(lt, {c: given[c] for c in reps}, cand, reps, sources, cost, col_x, col_a, T, load)
        if start is None:
            log.info("routing: the given start is not symmetric under the sketch's rotations; dropped")
        else:
            start_from = "given"
    if start is None:
        start = _greedy_start(lt, cand, reps, sources, cost, col_x, col_a, T, load)
        start_from = "shortest-path" if start is not None else "none"
    if start is not None:
        # the start's makespan bounds every useful time (plus what the tie-break terms could be worth),
        # which keeps the big-M rows of the arrival indicators tight
        cols, values = start
        given_values = dict(zip(cols, values))
        t_start = given_values[T]
        traffic = sum(coef * given_values.get(col, 0.0) for col, coef in objective.items() if col != T and coef > 0)
        tight = t_start + traffic + abs(unit) * (len(objective) + 1) + 1e-6
        times = set(col_a.values()) | {T}
        ub = m.ub
        for col in times:
            if ub[col] > 0:
                m.set_bounds(col, 0.0, tight)
        m.set_start(cols, [min(v, tight) if c in times else v for c, v in zip(cols, values)])
    sol = solve(m, options.milp)
    if sol.status == "infeasible":
        raise InfeasibleError(f"the routing model is infeasible for {coll.name} on {lt.graph.graph.get('name')}: "
                              f"the sketch's ordering or relay rules cannot all hold ({sol.message})")
    if sol.values is None:
        raise NoSolutionError(f"routing: {sol.message} ({sol.solver}, {sol.variables} variables)")
    vals = sol.values
    sends = sorted(((c, u, v) for c, u, v in triples if vals[col_x[(c, u, v)]] > 0.5),
                   key=lambda s: (s[0], vals[col_a[(s[0], s[2])]], s[1], s[2]))
    arrival = {(c, r): float(vals[col_a[(c, r)]]) for c, r in arr_items}
    _check_trees(lt, sends, sources)
    report = StageReport(time.perf_counter() - began, sol.variables, sol.constraints, sol.status, sol.solver,
                         f"slack {slack}; start {start_from}" + (f"; {sol.message}" if sol.message else ""))
    log.info("routing: %d sends, bound %.1f us, %s", len(sends), sol.objective or 0.0, report)
    return Routing(tuple(sends), arrival, float(vals[T]), report)


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


def _greedy_start(lt, cand, reps, sources, cost, col_x, col_a, T, load):
    """A feasible MIP start: per chunk, a cheapest-arrival tree (Dijkstra) inside its candidates.

    Symmetric chunks get symmetric trees only by luck, so a start that conflicts on a shared column is dropped.
    """
    import heapq

    trees: dict[int, dict[int, int]] = {}
    for c in reps:
        out: dict[int, list[int]] = {}
        for u, v in cand[c]:
            out.setdefault(u, []).append(v)
        src = sources[c]
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
                if t + cost[(u, v)] < best.get(v, float("inf")) - 1e-12:
                    best[v], parent[v] = t + cost[(u, v)], u
                    heapq.heappush(heap, (best[v], v))
        needed = set()
        for r in lt.collective.postcondition(c) - {src}:
            while r != src and r not in needed:
                needed.add(r)
                r = parent[r]
        trees[c] = {v: parent[v] for v in needed}
    return _tree_start(lt, trees, cand, reps, sources, cost, col_x, col_a, T, load)


def _start_trees(lt: LogicalTopology, sends) -> dict[int, dict[int, int]] | None:
    """chunk -> {rank: parent} from a routing's sends (first arrival kept), or None if it is not a routing."""
    coll = lt.collective
    trees: dict[int, dict[int, int]] = {c: {} for c in range(coll.num_chunks)}
    for c, u, v in sends:
        if not 0 <= c < coll.num_chunks or (u, v) not in lt.edges:
            log.info("routing: start send %s is not a link of the sketch; start dropped", (c, u, v))
            return None
        trees[c].setdefault(v, u)
    try:
        _check_trees(lt, [(c, u, v) for c, tree in trees.items() for v, u in tree.items()],
                     {c: next(iter(coll.precondition(c))) for c in trees})
    except AssertionError as err:
        log.info("routing: the start is not a routing (%s); dropped", err)
        return None
    return trees


def _tree_start(lt, trees, cand, reps, sources, cost, col_x, col_a, T, load):
    """Column values for one tree per representative chunk (``trees[c]``: rank -> parent), or None when
    the trees disagree on a column that symmetry shares, or use a link outside the candidates."""
    gpn = lt.graph.graph["gpus_per_node"]
    values: dict[int, float] = {}
    for c in reps:
        tree, src = trees[c], sources[c]
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
        for u, v in cand[c]:
            if not _put(values, col_x[(c, u, v)], 1.0 if tree.get(v) == u else 0.0):
                return None
        for r in {src} | {v for _, v in cand[c]}:
            # unreached ranks get arrival 0 (never read: nothing forwards from them)
            if not _put(values, col_a[(c, r)], arrive.get(r, 0.0)):
                return None
    span = 0.0
    for terms in load.values():
        span = max(span, sum(coef * values.get(col, 0.0) for col, coef in terms.items()))
    arrivals = [values[col_a[(c, r)]] for c in reps for r in lt.collective.postcondition(c) if (c, r) in col_a]
    values[T] = max([span] + arrivals)
    cols = sorted(values)
    return cols, [values[k] for k in cols]


def _put(values: dict[int, float], col: int, value: float) -> bool:
    old = values.get(col)
    if old is None:
        values[col] = value
        return True
    return abs(old - value) < 1e-9


def _check_trees(lt: LogicalTopology, sends, sources) -> None:
    """Every destination gets each chunk once, from a rank that had it (guards the model's correctness)."""
    coll = lt.collective
    got: dict[int, dict[int, int]] = {}
    for c, u, v in sends:
        if v in got.setdefault(c, {}):
            raise AssertionError(f"routing sends chunk {c} to rank {v} twice")
        got[c][v] = u
    for c in range(coll.num_chunks):
        have = got.get(c, {})
        for r in coll.postcondition(c) - {sources[c]}:
            if r not in have:
                raise AssertionError(f"routing leaves rank {r} without chunk {c}")
        for v, u in have.items():
            seen = set()
            while u != sources[c]:
                if u in seen or u not in have:
                    raise AssertionError(f"routing forwards chunk {c} from rank {u}, which never receives it")
                seen.add(u)
                u = have[u]
