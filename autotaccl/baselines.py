"""Hand-written baselines in the IR, on the topology graph's links: what a synthesized algorithm must beat.

``ring`` (NCCL's rings, one per channel), ``tree`` (NCCL's double binary tree for AllReduce),
``hierarchical`` (rings inside and across nodes), ``direct`` (every rank to every other, relayed where no
edge exists) and ``two-step`` (node-aware AllToAll). Each schedule is described in ``docs/internals.md``."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Iterable, Literal, NamedTuple, Sequence, get_args

import networkx as nx

from .errors import ParameterError
from .model.algorithm import Algorithm, Transfer, renumber_steps
from .model.collectives import Collective, canonical_name
from .model.protocols import Protocol
from .model.topology import num_ranks
from .simulate import PROTOCOLS, Costs, algorithm_costs, link_efficiency, protocol_terms, simulate_below, simulate_sizes

log = logging.getLogger(__name__)

BaselineName = Literal["ring", "tree", "hierarchical", "direct", "two-step"]
ALGORITHMS: tuple[BaselineName, ...] = get_args(BaselineName)
MAX_CHANNELS = 64       # each channel multiplies the transfers
_FOR = {"ring": ("allgather", "reducescatter", "allreduce", "broadcast"),
        "tree": ("allreduce", "broadcast"),
        "hierarchical": ("allgather", "reducescatter", "allreduce"),
        "direct": ("alltoall", "allgather", "broadcast"),
        "two-step": ("alltoall",)}


_CHANNELED = ("ring", "tree")
MAX_DISTINCT = 16       # distinct channels a baseline is simulated with; more are instances of them


class _NotApplicable(Exception):
    """The baseline cannot be built on this graph; the message says why."""


# --------------------------------------------------------------------------- public API


def baseline(graph: nx.DiGraph, collective_name: str, algorithm_name: str, channels: int = 1) -> Algorithm:
    """The baseline ``algorithm_name`` for ``collective_name`` on ``graph``.

    Raises ParameterError naming ``algorithm`` if the baseline does not exist or does not apply
    (wrong collective, one node for a multi-node scheme, or links that cannot carry it).
    """
    name = canonical_name(collective_name)
    algo = str(algorithm_name).strip().lower()
    if algo not in ALGORITHMS:
        raise ParameterError("algorithm", repr(algorithm_name), f"one of: {', '.join(ALGORITHMS)}")
    if name not in _FOR[algo]:
        raise ParameterError("algorithm", algo, f"an algorithm for {name}: {', '.join(_names_for(name))}")
    if isinstance(channels, bool) or not isinstance(channels, int) or not 1 <= channels <= MAX_CHANNELS:
        raise ParameterError("channels", str(channels), f"a whole number in 1..{MAX_CHANNELS}")
    if channels != 1 and algo not in _CHANNELED:
        raise ParameterError("channels", str(channels), f"1 for {algo} (only {' and '.join(_CHANNELED)} take channels)")
    try:
        return _BUILDERS[algo](graph, name, channels)
    except _NotApplicable as why:
        raise ParameterError("algorithm", algo, f"an algorithm that fits {graph.graph.get('name')} ({why})") from None


def applicable_baselines(graph: nx.DiGraph, collective_name: str) -> list[str]:
    """Names of the baselines that can be built for ``collective_name`` on ``graph``."""
    name = canonical_name(collective_name)
    out = []
    for algo in _names_for(name):
        try:
            _BUILDERS[algo](graph, name, 1)
        except _NotApplicable as why:
            log.info("baseline %s does not apply to %s on %s: %s", algo, name, graph.graph.get("name"), why)
        else:
            out.append(algo)
    return out


class BaselineRun(NamedTuple):
    """How fast a baseline runs at one size, and how: protocol, channels (distinct rings or tree pairs)
    and instances (copies of those channels side by side)."""

    time_us: float
    protocol: str
    channels: int
    instances: int


def ways_through_node(graph: nx.DiGraph) -> int:
    """How many equally good ways a multi-node ring or tree has through a node (NIC crossings); 1 on one node."""
    try:
        return len(_layout(graph).paths)
    except _NotApplicable:
        return 1


def channel_options(graph: nx.DiGraph, algo: str) -> list[tuple[int, int]]:
    """``(channels, instances)`` a baseline is tried with: one channel, and NCCL's channel count (the
    profile's ``nccl.channels``) as distinct rings or tree pairs (two ring directions per way through a
    node, at most ``MAX_DISTINCT``) times instances of them. Only rings and trees take channels."""
    if algo not in _CHANNELED:
        return [(1, 1)]
    profile = graph.graph.get("profile")
    nccl = profile.nccl.channels if profile is not None else graph.graph["gpus_per_node"]
    ways = ways_through_node(graph) * (2 if algo == "ring" else 1)
    distinct = max(1, min(nccl, MAX_DISTINCT, ways))
    options = {(1, 1), (distinct, max(1, nccl // distinct))}
    if algo == "ring":
        options.add((min(2, nccl), 1))       # one ring each way
    return sorted(options)


SIMULATED = 2          # ways per size that best_runs simulates: those with the best closed-form estimates


def best_runs(graph: nx.DiGraph, collective_name: str, algo: str, sizes: Sequence[int]) -> list[BaselineRun]:
    """Per size, the fastest simulated way to run baseline ``algo`` over :func:`channel_options` and
    protocols. The ways are ranked by the closed form (:func:`autotaccl.simulate.estimate`) and the best
    ``SIMULATED`` of them simulated: a 16-channel ring on 32 ranks has 30,000 transfers."""
    ways = _ways(graph, collective_name, algo)
    best: list[BaselineRun | None] = [None] * len(sizes)
    for w, at in _chosen(ways, graph, sizes).items():
        way = ways[w]
        for i, r in zip(at, simulate_sizes(way.algorithm, graph, [sizes[i] for i in at], way.protocol, way.instances)):
            if best[i] is None or r.time_us < best[i].time_us:
                best[i] = BaselineRun(r.time_us, way.protocol, way.channels, way.instances)
    return best


class _Way(NamedTuple):
    """One way to run a baseline, with its closed-form costs (for ranking the ways)."""
    algorithm: Algorithm
    protocol: str
    channels: int
    instances: int
    costs: Costs
    terms: Protocol


def _ways(graph: nx.DiGraph, collective_name: str, algo: str) -> list[_Way]:
    """Every ``(channels, instances)`` of :func:`channel_options` under every protocol, each built once."""
    ways = []
    for channels, instances in channel_options(graph, algo):
        algorithm = baseline(graph, collective_name, algo, channels)
        for protocol in PROTOCOLS:
            ways.append(_Way(algorithm, protocol, channels, instances, algorithm_costs(algorithm, graph, protocol),
                             protocol_terms(graph, protocol)))
    return ways


def _chosen(ways: list[_Way], graph: nx.DiGraph, sizes: Sequence[int]) -> dict[int, list[int]]:
    """Way -> the indices of the sizes it is simulated at: per size the ``SIMULATED`` best closed forms."""
    efficiency = link_efficiency(graph)
    chosen: dict[int, list[int]] = {}
    for i, size in enumerate(sizes):
        score = [w.costs.latency_us(w.terms) + w.costs.bandwidth_us(size, w.terms, efficiency, w.instances)
                 for w in ways]
        for w in sorted(range(len(ways)), key=score.__getitem__)[:SIMULATED]:
            chosen.setdefault(w, []).append(i)
    return chosen


def best_baseline(graph: nx.DiGraph, collective_name: str, size: int):
    """``(name, algorithm, SimResult)`` of the applicable baseline the simulator finds fastest at ``size``,
    over its channel options (:func:`channel_options`) and protocols."""
    return best_baselines(graph, collective_name, [size])[0]


def best_baselines(graph: nx.DiGraph, collective_name: str, sizes: Sequence[int]) -> list[tuple]:
    """:func:`best_baseline` at each of ``sizes``, every baseline built once. The ways :func:`best_runs`
    would simulate are taken in its order (the earlier wins a tie); a way whose floor
    (:func:`autotaccl.simulate.simulate_below`) is not below the best so far is not simulated, as it
    cannot replace it: the choice is the same."""
    best: list[tuple | None] = [None] * len(sizes)
    for algo in applicable_baselines(graph, collective_name):
        ways = _ways(graph, collective_name, algo)
        for w, at in _chosen(ways, graph, sizes).items():
            way = ways[w]
            for i in at:
                limit = math.inf if best[i] is None else best[i][2].time_us / (1 - 1e-9)
                _, result = simulate_below(way.algorithm, graph, sizes[i], limit, way.protocol, way.instances)
                if result is not None and (best[i] is None or result.time_us < best[i][2].time_us):
                    best[i] = (algo, way.algorithm, result)
    if any(b is None for b in best):
        raise ParameterError("collective", canonical_name(collective_name),
                             f"a collective some baseline can run on {graph.graph.get('name')}")
    return best


def _names_for(collective: str) -> list[str]:
    return [a for a in ALGORITHMS if collective in _FOR[a]]


# --------------------------------------------------------------------------- the machine's shape


@dataclass(frozen=True)
class _Layout:
    """Where the baselines may go: node-local Hamiltonian cycle, and the paths a multi-node ring takes."""

    nodes: int
    gpn: int
    cycle: tuple[int, ...]                # local indices; cycle[p] -> cycle[p+1] are links inside every node
    paths: tuple[tuple[int, ...], ...]    # equally good ways through a node: enter at path[0], leave at path[-1]
    mirrored: bool = False                # odd nodes run the path backwards (a ring crosses on one rail)

    @property
    def path(self) -> tuple[int, ...]:
        return self.paths[0]

    def ranks(self, node: int, local: Sequence[int]) -> list[int]:
        return [node * self.gpn + g for g in local]

    def ring(self, variant: int = 0) -> list[int]:
        """The whole machine's ring: the cycle on one node, else a path through every node in turn.

        Different ``variant`` numbers cross between nodes at different GPUs (other NICs) where the
        profile offers equally good ones.
        """
        if self.nodes == 1:
            return self.ranks(0, self.cycle)
        path = self.paths[variant % len(self.paths)]
        back = path[::-1] if self.mirrored else path
        return [r for n in range(self.nodes) for r in self.ranks(n, back if n % 2 else path)]


@lru_cache(maxsize=32)
def _layout(graph: nx.DiGraph) -> _Layout:
    """The node-local cycle and the multi-node ring paths (graphs hash by identity: cached per graph)."""
    gpn, nodes = graph.graph["gpus_per_node"], graph.graph["nodes"]
    cycle = _hamiltonian_cycle(graph, gpn)
    if cycle is None:
        raise _NotApplicable("no ring through the links inside a node")
    if nodes == 1:
        # a chain (tree, broadcast) drops the slowest link of the cycle
        cut = min(range(len(cycle)), key=lambda p: _bw(graph, cycle[p], cycle[(p + 1) % len(cycle)]))
        return _Layout(1, gpn, tuple(cycle), (tuple(cycle[cut + 1:] + cycle[:cut + 1]),))

    def crossing(a: int, b: int) -> tuple | None:  # local GPU a of one node -> local GPU b of the next
        if not graph.has_edge(a, gpn + b):
            return None
        net = graph.edges[a, gpn + b]
        return net["bandwidth_GBps"], -net["alpha_us"]

    # A layout's score: its ring's crossings, worst first, then the intra-node link it leaves out.
    scored = []
    for p in range(len(cycle)):  # leave a node at e = cycle[p], enter the next at s = cycle[p+1]
        e, s = cycle[p], cycle[(p + 1) % len(cycle)]
        path = tuple(cycle[p + 1:] + cycle[:p + 1])
        cut = -_bw(graph, e, s) if e != s else 0.0
        plain = crossing(e, s)
        if plain:
            scored.append((((plain,) * nodes, cut, 1), path))
        # mirrored: odd nodes run the path backwards, so crossings join equal GPUs (e -> e, s -> s: one
        # rail each), as NCCL's rings enter and leave a node through one NIC; with an odd node count the
        # closing crossing is plain. Plain wins ties.
        ee, ss = crossing(e, e), crossing(s, s)
        if ee and ss and (plain or nodes % 2 == 0) and all(graph.has_edge(b, a) for a, b in zip(path, path[1:])):
            hops = [ee] * (nodes // 2) + [ss] * (nodes // 2) + [plain] * (nodes % 2)
            scored.append(((tuple(sorted(hops)), cut, 0), path))
    if not scored:
        raise _NotApplicable("no NIC link leaves a node where the ring could continue to the next")
    top = max(score for score, _ in scored)
    paths = tuple(path for score, path in scored if score == top)
    return _Layout(nodes, gpn, tuple(cycle), paths, mirrored=not top[-1])


def _bw(graph: nx.DiGraph, u: int, v: int) -> float:
    return graph.edges[u, v]["bandwidth_GBps"] if graph.has_edge(u, v) else 0.0


def _hamiltonian_cycle(graph: nx.DiGraph, gpn: int, budget: int = 200_000) -> list[int] | None:
    """A directed Hamiltonian cycle of node 0's local links with the largest bottleneck bandwidth we find.

    Depth-first search with Warnsdorff's rule, tried over the edges of at least each bandwidth in
    turn, fastest first; ``budget`` bounds the work per attempt.
    """
    if gpn == 1:
        return [0]
    local = {u: {v: d["bandwidth_GBps"] for v, d in graph.adj[u].items() if v < gpn} for u in range(gpn)}
    for threshold in sorted({bw for nbrs in local.values() for bw in nbrs.values()}, reverse=True):
        adj = {u: [v for v, bw in nbrs.items() if bw >= threshold] for u, nbrs in local.items()}
        if any(not vs for vs in adj.values()):
            continue
        found = _cycle_search(adj, gpn, budget, local)
        if found:
            return found
    return None


def _cycle_search(adj: dict[int, list[int]], n: int, budget: int, bw: dict) -> list[int] | None:
    path, seen, work = [0], {0}, [0]

    def onward(v: int) -> int:
        return sum(1 for w in adj[v] if w not in seen)

    def dfs() -> bool:
        work[0] += 1
        if work[0] > budget:
            return False
        u = path[-1]
        if len(path) == n:
            return 0 in adj[u]
        for v in sorted((v for v in adj[u] if v not in seen), key=lambda v: (-bw[u][v], onward(v), v)):
            path.append(v)
            seen.add(v)
            if dfs():
                return True
            path.pop()
            seen.discard(v)
        return False

    return path if dfs() else None


# --------------------------------------------------------------------------- building blocks


def _check(graph: nx.DiGraph, ring: Sequence[int]) -> None:
    """Every hop of the closed ``ring`` must be an edge."""
    for u, v in zip(ring, list(ring[1:]) + [ring[0]]):
        if u != v and not graph.has_edge(u, v):
            raise _NotApplicable(f"no link from rank {u} to rank {v}")


def _ring_allgather(ring: Sequence[int], pieces: Sequence[tuple[int, ...]], step0: int) -> list[Transfer]:
    """Piece ``p`` starts on ``ring[p]``; after ``L-1`` steps every ring member holds every piece."""
    n = len(ring)
    return [Transfer(pieces[(p - s) % n], ring[p], ring[(p + 1) % n], step0 + s)
            for s in range(n - 1) for p in range(n)]


def _ring_reducescatter(ring: Sequence[int], pieces: Sequence[tuple[int, ...]], step0: int) -> list[Transfer]:
    """Piece ``p`` ends fully reduced on ``ring[p]``: it starts at ``p+1`` and is reduced along the ring."""
    n = len(ring)
    return [Transfer(pieces[(p - s - 1) % n], ring[p], ring[(p + 1) % n], step0 + s, "reduce")
            for s in range(n - 1) for p in range(n)]


def _ring_allreduce(ring: Sequence[int], pieces: Sequence[tuple[int, ...]], step0: int) -> list[Transfer]:
    return _ring_reducescatter(ring, pieces, step0) + _ring_allgather(ring, pieces, step0 + len(ring) - 1)


def _tree_levels(parent: dict[int, int | None]) -> tuple[dict[int, int], dict[int, int]]:
    """Height (leaves 0) and depth (root 0) of every vertex of a rooted tree given by ``parent``."""
    children: dict[int, list[int]] = {v: [] for v in parent}
    for v, p in parent.items():
        if p is not None:
            children[p].append(v)
    height: dict[int, int] = {}
    depth: dict[int, int] = {}
    root = next(v for v, p in parent.items() if p is None)
    order, stack = [], [(root, 0)]
    while stack:
        v, d = stack.pop()
        depth[v] = d
        order.append(v)
        stack.extend((c, d + 1) for c in children[v])
    for v in reversed(order):
        height[v] = 1 + max((height[c] for c in children[v]), default=-1)
    return height, depth


def _tree_allreduce(parent: dict[int, int | None], slots: Sequence[int], step0: int) -> list[Transfer]:
    """Reduce every slot up the tree to its root and broadcast it back down, one slot per pipeline stage."""
    height, depth = _tree_levels(parent)
    top = max(height.values())
    out = []
    for j, c in enumerate(slots):
        out += [Transfer((c,), v, p, step0 + height[v] + j, "reduce") for v, p in parent.items() if p is not None]
        out += [Transfer((c,), p, v, step0 + top + j + depth[v] - 1) for v, p in parent.items() if p is not None]
    return out


def _tree_broadcast(parent: dict[int, int | None], chunks: Sequence[int], step0: int) -> list[Transfer]:
    _, depth = _tree_levels(parent)
    return [Transfer((c,), p, v, step0 + j + depth[v] - 1)
            for j, c in enumerate(chunks) for v, p in parent.items() if p is not None]


def _paths(graph: nx.DiGraph, src: int, within: Iterable[int] | None = None) -> dict[int, list[int]]:
    """Shortest paths from ``src`` (fewest hops, ties: faster links), optionally only through ``within``.

    They form a tree, so relays of one source share their first hops. A direct edge always wins.
    """
    view = graph.subgraph(within) if within is not None else graph
    if view.out_degree(src) == view.number_of_nodes() - 1:   # an edge to every other rank: no search needed
        return {src: [src], **{dst: [src, dst] for dst in view.successors(src)}}
    return nx.single_source_dijkstra_path(view, src, weight=lambda u, v, d: 1.0 + 1e-3 / d["bandwidth_GBps"])


def _reach(paths: dict[int, list[int]], src: int, dst: int) -> list[int]:
    if dst not in paths:
        raise _NotApplicable(f"no path from rank {src} to rank {dst}")
    return paths[dst]


def _hops(path: Sequence[int], chunk: int, step0: int) -> list[Transfer]:
    return [Transfer((chunk,), u, v, step0 + h) for h, (u, v) in enumerate(zip(path, path[1:]))]


def _assemble(transfers: Iterable[Transfer]) -> tuple[Transfer, ...]:
    """Program order = step order; transfers of one step between the same ranks on one channel become one."""
    merged: dict[tuple, list[int]] = {}
    for t in sorted(transfers, key=lambda t: t.step):
        merged.setdefault((t.step, t.src, t.dst, t.op, t.link, t.channel), []).extend(c for c in t.chunks)
    return renumber_steps(Transfer(tuple(dict.fromkeys(chunks)), src, dst, step, op, link, channel=channel)
                          for (step, src, dst, op, link, channel), chunks in merged.items())


def _on(channel: int, transfers: Iterable[Transfer]) -> list[Transfer]:
    return [replace(t, channel=channel) for t in transfers]


def _algorithm(graph: nx.DiGraph, algo: str, collective: Collective, transfers: Iterable[Transfer],
               **metadata) -> Algorithm:
    return Algorithm(f"{algo}-{collective.name}", collective, _assemble(transfers), graph.graph.get("name", ""),
                     {"baseline": algo, **metadata})


def _ranks(graph: nx.DiGraph) -> int:
    ranks = num_ranks(graph)
    if ranks < 2:
        raise _NotApplicable("a collective needs at least two ranks")
    return ranks


# --------------------------------------------------------------------------- the baselines


def _build_ring(graph: nx.DiGraph, name: str, channels: int) -> Algorithm:
    R = _ranks(graph)
    lay = _layout(graph)
    # channels 2m and 2m+1 run opposite ways through the m-th crossing: each leaves a node by another GPU's NIC
    rings = [lay.ring(i - i % 2)[::1 - 2 * (i % 2)] for i in range(channels)]
    for ring in rings:
        _check(graph, ring)
    if name == "broadcast":
        k = R * channels
        coll = Collective(name, R, k)
        out = []
        for i, ring in enumerate(rings):  # a pipelined chain from the root
            start = ring.index(coll.root)
            chain = ring[start:] + ring[:start]
            out += [Transfer((j,), chain[p], chain[p + 1], j // channels + p, channel=i)
                    for j in range(i, k, channels) for p in range(R - 1)]
        return _algorithm(graph, "ring", coll, out, channels=channels)
    coll = Collective(name, R, channels)
    build = {"allgather": _ring_allgather, "reducescatter": _ring_reducescatter, "allreduce": _ring_allreduce}[name]
    out = []
    for i, ring in enumerate(rings):
        out += _on(i, build(ring, [(r * channels + i,) for r in ring], 0))
    return _algorithm(graph, "ring", coll, out, channels=channels)


def _binary_tree(order: Sequence[int]) -> dict[int, int | None]:
    """In-order binary tree over ``order``: position i (1-based) sits at the level of its trailing zeros."""
    def tz(i: int) -> int:
        return (i & -i).bit_length()

    parent: dict[int, int | None] = {}

    def build(lo: int, hi: int, up: int | None) -> None:
        if lo > hi:
            return
        mid = max(range(lo, hi + 1), key=tz)
        parent[order[mid - 1]] = up
        build(lo, mid - 1, order[mid - 1])
        build(mid + 1, hi, order[mid - 1])

    build(1, len(order), None)
    return parent


def _double_tree(graph: nx.DiGraph, variant: int = 0) -> list[dict[int, int | None]]:
    """NCCL's two trees over all ranks: chains inside nodes, complementary binary trees across them.

    Different ``variant`` numbers run the chains through other equally good paths, so the trees cross
    between nodes at other GPUs (NCCL's channels spread over the NICs)."""
    lay = _layout(graph)
    nodes = list(range(lay.nodes))
    path = lay.paths[variant % len(lay.paths)]
    # even node count: mirror; odd: shift by one (so leaves of one tree are mostly inner in the other)
    other = nodes[::-1] if lay.nodes % 2 == 0 else nodes[1:] + nodes[:1]
    trees = []
    for t, (order, chain) in enumerate(((nodes, path), (other, path[::-1]))):
        across = _binary_tree(order)
        parent: dict[int, int | None] = {}
        for n in nodes:
            ranks = lay.ranks(n, chain)
            up = across[n]
            parent[ranks[0]] = None if up is None else up * lay.gpn + chain[0]
            for a, b in zip(ranks, ranks[1:]):
                parent[b] = a
        for v, p in parent.items():
            if p is not None and not (graph.has_edge(v, p) and graph.has_edge(p, v)):
                raise _NotApplicable(f"tree {t} needs links between ranks {v} and {p}")
        trees.append(parent)
    return trees


def _reroot(parent: dict[int, int | None], root: int) -> dict[int, int | None]:
    tree = nx.Graph((v, p) for v, p in parent.items() if p is not None)
    tree.add_nodes_from(parent)
    return {root: None, **{v: p for p, v in nx.bfs_edges(tree, root)}}


def _build_tree(graph: nx.DiGraph, name: str, channels: int) -> Algorithm:
    R = _ranks(graph)
    trees = _double_tree(graph)
    if name == "broadcast":
        coll = Collective(name, R, R)
        return _algorithm(graph, "tree", coll, _tree_broadcast(_reroot(trees[0], coll.root), range(R), 0))
    coll = Collective(name, R, channels)
    out = []
    for c in range(channels):   # channel c: every channels-th slot, half on each of its two trees
        pair = trees if c == 0 else _double_tree(graph, c)
        slots = list(range(c, coll.num_chunks, channels))
        half = (len(slots) + 1) // 2
        out += _on(c, _tree_allreduce(pair[0], slots[:half], 0) + _tree_allreduce(pair[1], slots[half:], 0))
    return _algorithm(graph, "tree", coll, out, channels=channels)


def _build_hierarchical(graph: nx.DiGraph, name: str, channels: int) -> Algorithm:
    R = _ranks(graph)
    lay = _layout(graph)
    if lay.nodes < 2:
        raise _NotApplicable("hierarchical needs at least two nodes")
    G, N = lay.gpn, lay.nodes
    coll = Collective(name, R, 1)
    inside = [lay.ranks(n, lay.cycle) for n in range(N)]
    across = {j: [n * G + j for n in range(N)] for j in range(G)}
    for ring in inside:
        _check(graph, ring)
    for ring in across.values():
        _check(graph, ring)

    def blocks(local: Sequence[int]) -> list[tuple[int, ...]]:  # slot n*G + j for all n, per local GPU j
        return [tuple(n * G + j for n in range(N)) for j in local]

    def singles(ring: Sequence[int]) -> list[tuple[int, ...]]:
        return [(r,) for r in ring]

    out: list[Transfer] = []
    if name == "allgather":
        for ring in across.values():
            out += _ring_allgather(ring, singles(ring), 0)
        for ring in inside:
            out += _ring_allgather(ring, blocks(lay.cycle), N - 1)
    elif name == "reducescatter":
        for ring in inside:
            out += _ring_reducescatter(ring, blocks(lay.cycle), 0)
        for ring in across.values():
            out += _ring_reducescatter(ring, singles(ring), G - 1)
    else:
        for ring in inside:
            out += _ring_reducescatter(ring, blocks(lay.cycle), 0)
        for ring in across.values():
            out += _ring_allreduce(ring, singles(ring), G - 1)
        for ring in inside:
            out += _ring_allgather(ring, blocks(lay.cycle), G - 1 + 2 * (N - 1))
    return _algorithm(graph, "hierarchical", coll, out)


def _build_direct(graph: nx.DiGraph, name: str, channels: int) -> Algorithm:
    R = _ranks(graph)
    coll = Collective(name, R, 1)
    out: list[Transfer] = []
    for s in ([coll.root] if name == "broadcast" else range(R)):
        paths = _paths(graph, s)
        if name == "alltoall":
            for d in range(R):
                if d != s:
                    out += _hops(_reach(paths, s, d), s * R + d, 0)
            continue
        # AllGather / Broadcast: the shortest-path tree from the source; every relay keeps its copy
        parent: dict[int, int | None] = {s: None}
        for d in range(R):
            if d != s:
                parent[d] = _reach(paths, s, d)[-2]
        out += _tree_broadcast(parent, [0 if name == "broadcast" else s], 0)
    return _algorithm(graph, "direct", coll, out)


def _build_two_step(graph: nx.DiGraph, name: str, channels: int) -> Algorithm:
    R = _ranks(graph)
    lay = _layout(graph)
    if lay.nodes < 2:
        raise _NotApplicable("two-step needs at least two nodes")
    G, N = lay.gpn, lay.nodes
    coll = Collective(name, R, 1)
    local_paths = {}
    for n in range(N):
        members = range(n * G, (n + 1) * G)
        for s in members:
            paths = _paths(graph, s, members)
            for d in members:
                if s != d:
                    local_paths[s, d] = _reach(paths, s, d)
    gather = max((len(p) - 1 for p in local_paths.values()), default=0)
    out: list[Transfer] = []
    for s in range(R):
        a, i = divmod(s, G)
        for d in range(R):
            b, j = divmod(d, G)
            if s == d:
                continue
            chunk = s * R + d
            if a == b:
                out += _hops(local_paths[s, d], chunk, 0)
                continue
            peer, far = a * G + j, b * G + j   # gather on the local GPU j, cross once to GPU j of node b
            if not graph.has_edge(peer, far):
                raise _NotApplicable(f"no NIC link from rank {peer} to rank {far}")
            if peer != s:
                out += _hops(local_paths[s, peer], chunk, 0)
            out.append(Transfer((chunk,), peer, far, gather))
    return _algorithm(graph, "two-step", coll, out)


_BUILDERS = {"ring": _build_ring, "tree": _build_tree, "hierarchical": _build_hierarchical,
             "direct": _build_direct, "two-step": _build_two_step}
