"""Ceilings on what any algorithm can achieve on a topology (``peers-and-bounds.md`` §2).

Per collective a latency bound (the alpha-weighted diameter) and a bandwidth bound from the capacity graph:
max-flow for AllGather (ReduceScatter on the reversed graph, AllReduce the two composed), a multicommodity
flow LP for AllToAll, min-cut from the root for Broadcast; :func:`switch_bounds` with in-switch reduction.
``bound_time_us`` combines them; ``efficiency`` derates arcs to give the simulator's ceiling. How each is
computed: ``docs/internals.md``."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Mapping

import networkx as nx

from .model.collectives import canonical_name
from .model.protocols import edge_latency
from .model.switch import COLLECTIVES as SWITCH_COLLECTIVES
from .model.topology import capacity_graph

log = logging.getLogger(__name__)

_TOL = 1e-9
_CACHE: dict[tuple, "Bounds"] = {}


@dataclass(frozen=True)
class Bounds:
    algbw_GBps: float
    latency_us: float


def bounds(graph: nx.DiGraph, collective_name: str, efficiency: Mapping[str, float] | None = None,
           hop_us: tuple[float, float] = (0.0, 0.0)) -> Bounds:
    """Bandwidth and latency ceilings of ``collective_name`` on ``graph`` (cached per graph and collective),
    every arc derated by ``efficiency[its link class]`` when given (classes not named keep their rate), every
    edge's latency raised by ``hop_us`` (inside a node, across the network) when given."""
    name = canonical_name(collective_name)
    derate = tuple(sorted((efficiency or {}).items()))
    hops = tuple(hop_us)
    key = (graph.graph.get("name"), name, _fingerprint(graph), derate, hops)
    if key not in _CACHE:
        _CACHE[key] = _compute(graph, name, dict(derate), hops)
        log.debug("bounds %s %s: %s", key[0], name, _CACHE[key])
    return _CACHE[key]


_FREE = 1e12       # GB/s: an arc no cut is ever bound by


def switch_bounds(graph: nx.DiGraph, collective_name: str, efficiency: Mapping[str, float] | None = None,
                  hop_us: tuple[float, float] = (0.0, 0.0), switch_efficiency: float = 1.0) -> Bounds | None:
    """:func:`bounds` when the switch may reduce and multicast (module docstring), its GPU ports further
    derated by ``switch_efficiency``; None where the profile's switch cannot (no ``nccl.nvls``) or for
    another collective."""
    name = canonical_name(collective_name)
    profile = graph.graph.get("profile")
    if name not in SWITCH_COLLECTIVES or profile is None or profile.nccl.nvls is None or not profile.switches:
        return None
    today = bounds(graph, name, efficiency, hop_us)
    if name != "allreduce":
        return today
    key = ("switch", graph.graph.get("name"), _fingerprint(graph), tuple(sorted((efficiency or {}).items())),
           tuple(hop_us), switch_efficiency)
    if key not in _CACHE:
        _CACHE[key] = Bounds(_switch_allreduce(graph, efficiency or {}, switch_efficiency), today.latency_us)
    return _CACHE[key]


def _switch_allreduce(graph: nx.DiGraph, efficiency: Mapping[str, float], switch_efficiency: float) -> float:
    """The AllReduce algbw ceiling with in-switch reduction: the least of every GPU's ports (``S`` each
    way) and of the RS + AG composition over the graph with the switches' ports free."""
    cap = capacity_graph(graph).copy()
    classes = {s.link_class for s in graph.graph["profile"].switches}
    gpus = sorted(graph.nodes)
    members = set(gpus)
    ports_of_switches = []
    for u, v, d in cap.edges(data=True):
        cls = d.get("link_class") or ""
        d["capacity"] *= efficiency.get(cls, 1.0)
        if cls in classes and (u in members) != (v in members):
            d["capacity"] *= switch_efficiency
            ports_of_switches.append((u, v))
    free = cap.copy()
    for u, v in ports_of_switches:
        free.edges[u, v]["capacity"] = _FREE
    ports = min(min(sum(c for _, _, c in cap.out_edges(g, data="capacity")),
                    sum(c for _, _, c in cap.in_edges(g, data="capacity"))) for g in gpus)
    if graph.graph.get("nodes", 1) == 1:
        return ports
    ag = len(gpus) / _gather(free, gpus)
    rs = len(gpus) / _gather(free.reverse(copy=True), gpus)
    return min(ports, 1 / (1 / ag + 1 / rs))


def bound_time_us(b: Bounds, size: float) -> float:
    """The least time (µs) of any algorithm at nccl-tests size ``size`` bytes."""
    return max(b.latency_us, size / (b.algbw_GBps * 1e3))


def bound_algbw(b: Bounds, size: int) -> float:
    """The algbw ceiling (GB/s) at nccl-tests size ``size`` bytes."""
    return size / bound_time_us(b, size) / 1e3


def _fingerprint(graph: nx.DiGraph) -> int:
    cap = capacity_graph(graph)
    arcs = sorted((str(u), str(v), d["capacity"], d["alpha_us"]) for u, v, d in cap.edges(data=True))
    edges = sorted((u, v, d["alpha_us"]) for u, v, d in graph.edges(data=True))
    return hash((tuple(arcs), tuple(edges)))


def _compute(graph: nx.DiGraph, name: str, efficiency: Mapping[str, float], hop_us: tuple[float, float]) -> Bounds:
    cap = capacity_graph(graph)
    if efficiency:
        cap = cap.copy()
        for _, _, d in cap.edges(data=True):
            d["capacity"] = d["capacity"] * efficiency.get(d.get("link_class") or "", 1.0)
    gpus = sorted(graph.nodes)
    if name == "broadcast":
        root = gpus[0]
        reach = nx.single_source_dijkstra_path_length(graph, root, weight=lambda u, v, d: edge_latency(d, hop_us))
        latency = max(reach[v] for v in gpus[1:])
        return Bounds(min(nx.maximum_flow_value(cap, root, v) for v in gpus[1:]), latency)
    latency = alpha_diameter(graph, hop_us)
    if name == "allgather":
        return Bounds(len(gpus) / _gather(cap, gpus), latency)
    if name == "reducescatter":
        return Bounds(len(gpus) / _gather(cap.reverse(copy=True), gpus), latency)
    if name == "allreduce":
        ag = len(gpus) / _gather(cap, gpus)
        rs = len(gpus) / _gather(cap.reverse(copy=True), gpus)
        return Bounds(1 / (1 / ag + 1 / rs), latency)
    return Bounds(1 / alltoall_tau(cap, gpus), latency)


# --------------------------------------------------------------------------- pieces


def alpha_diameter(graph: nx.DiGraph, hop_us: tuple[float, float] = (0.0, 0.0)) -> float:
    """Longest shortest-latency path between two GPUs over the topology's edges (µs), each edge's alpha
    raised by ``hop_us`` (inside a node, across the network).

    scipy's Dijkstra relaxes the same edges in the same float arithmetic as networkx's, so the distances
    are the same numbers, computed in C (576 ranks: seconds instead of minutes).
    """
    import numpy as np
    from scipy.sparse.csgraph import dijkstra

    matrix, _ = _sparse(graph, [edge_latency(d, hop_us) for _, _, d in graph.edges(data=True)], np.float64)
    dist = dijkstra(matrix, directed=True)
    off = ~np.eye(len(dist), dtype=bool)
    if not np.isfinite(dist[off]).all():
        raise ValueError(f"{graph.graph.get('name')}: some GPU cannot reach another")
    return float(dist[off].max())


def gather_ratio(cap: nx.DiGraph, gpus: list) -> float:
    """``x*`` = max over cuts S (some GPU inside, some outside) of |S ∩ GPUs| / capacity leaving S."""
    n = len(gpus)
    source = ("__source",)
    flow = nx.DiGraph()
    flow.add_edges_from((u, v) for u, v in cap.edges)
    flow.add_edges_from(((source, g) for g in gpus), capacity=1.0)
    # start from the single-GPU cuts S = V - {v}: (N-1) / (capacity into v)
    ratio = max((n - 1) / sum(cap.edges[u, v]["capacity"] for u in cap.predecessors(v)) for v in gpus)
    for _ in range(100):
        for u, v, c in cap.edges(data="capacity"):
            flow.edges[u, v]["capacity"] = ratio * c
        cut = _violated_cut(flow, source, gpus, n)
        if cut is None:
            return ratio
        inside = sum(1 for g in gpus if g in cut)
        leaving = sum(c for u, v, c in cap.edges(data="capacity") if u in cut and v not in cut)
        better = inside / leaving
        if better <= ratio * (1 + _TOL):
            return ratio
        ratio = better
    raise RuntimeError("cut-ratio iteration did not converge")


def reception_ratio(cap: nx.DiGraph, gpus: list) -> float:
    """Max over the GPUs ``X`` fed by one vertex that can feed them more than it is fed (0 if none) of
    ``|X| * (N - 1)`` / the rate at which ``X``'s GPUs can receive, all together, from anywhere: each GPU
    receives ``N - 1`` units itself, since a vertex that is no GPU cannot copy them."""
    n, members = len(gpus), set(gpus)
    ratio = 0.0
    for w in cap.nodes:
        fed = {v for v in cap.successors(w) if v in members}
        if w in members or len(fed) < 2 or sum(cap.edges[w, v]["capacity"] for v in fed) <= \
                sum(c for _, _, c in cap.in_edges(w, data="capacity")):
            continue
        sink, source = ("__sink",), ("__source",)
        flow = nx.DiGraph()       # X's GPUs receive into copies of themselves, which drain to the sink
        flow.add_edges_from(((u, (v, "in") if v in fed else v, {"capacity": c})
                             for u, v, c in cap.edges(data="capacity")))
        flow.add_edges_from((source, g) for g in gpus)
        flow.add_edges_from(((v, "in"), sink) for v in fed)
        ratio = max(ratio, len(fed) * (n - 1) / nx.maximum_flow_value(flow, source, sink))
    return ratio


def _gather(cap: nx.DiGraph, gpus: list) -> float:
    """The AllGather ratio on ``cap``: the larger of :func:`gather_ratio` and :func:`reception_ratio`."""
    return max(gather_ratio(cap, gpus), reception_ratio(cap, gpus))


def _violated_cut(flow: nx.DiGraph, source, gpus: list, n: int) -> set | None:
    """The source side of a min cut below ``n`` for some GPU, or None if every GPU can receive ``n``.

    A GPU that scipy's integer max-flow (in C) shows to receive enough on capacities rounded *down*
    receives at least as much on the real ones, so it needs no exact check; only the others go to
    networkx's exact (and slow) minimum cut, which finds the same cut as it always did.
    """
    import numpy as np
    from scipy.sparse.csgraph import maximum_flow

    scale = (2 ** 31 - 1) // (2 * n)        # every flow stays below n * scale: int32 never overflows
    rounded = [min(math.floor(c * scale), n * scale) for _, _, c in flow.edges(data="capacity")]
    matrix, index = _sparse(flow, rounded, np.int32)
    for v in gpus:
        if maximum_flow(matrix, index[source], index[v]).flow_value >= n * scale * (1 - 1e-7):
            continue
        value, (side, _) = nx.minimum_cut(flow, source, v)
        if value < n * (1 - 1e-7):
            return side
    return None


def _sparse(graph: nx.DiGraph, values: list, dtype):
    """``graph`` as a scipy CSR matrix holding ``values`` (one per edge, in edge order), and its vertex index."""
    import numpy as np
    from scipy.sparse import csr_matrix

    index = {v: i for i, v in enumerate(graph.nodes)}
    rows = [index[u] for u, _ in graph.edges]
    cols = [index[v] for _, v in graph.edges]
    return csr_matrix((np.array(values, dtype=dtype), (rows, cols)), shape=(len(index), len(index))), index


def alltoall_tau(cap: nx.DiGraph, gpus: list) -> float:
    """Min time per byte of a rank's buffer (µs·GB/s units: 1/GBps) to route every AllToAll demand."""
    import numpy as np                       # imported here: scipy slows every CLI start-up
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    n = len(gpus)
    nodes = list(cap.nodes)
    index = {v: i for i, v in enumerate(nodes)}
    arcs = list(cap.edges(data="capacity"))
    m, nv = len(arcs), len(nodes)
    tau = n * m                              # variable layout: f[s, e] at s*m + e, then tau
    rows, cols, vals = [], [], []
    b_eq = np.zeros(n * nv)
    for s, src in enumerate(gpus):
        for e, (u, v, _) in enumerate(arcs):
            rows += [s * nv + index[u], s * nv + index[v]]
            cols += [s * m + e, s * m + e]
            vals += [1.0, -1.0]
        for dst in gpus:
            b_eq[s * nv + index[dst]] = (n - 1) / n if dst == src else -1 / n
    a_eq = coo_matrix((vals, (rows, cols)), shape=(n * nv, n * m + 1)).tocsr()
    rows, cols, vals = [], [], []
    for e, (_, _, c) in enumerate(arcs):
        rows += [e] * (n + 1)
        cols += [s * m + e for s in range(n)] + [tau]
        vals += [1.0] * n + [-c]
    a_ub = coo_matrix((vals, (rows, cols)), shape=(m, n * m + 1)).tocsr()
    cost = np.zeros(n * m + 1)
    cost[tau] = 1.0
    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(m), A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"AllToAll flow LP failed: {res.message}")
    return float(res.x[tau])
