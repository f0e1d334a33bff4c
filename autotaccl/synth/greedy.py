"""The fast engine (``--engine greedy``): no MILP; a few constructions, the simulator picks the best.

Every construction books transfers on reservation timelines of the capacity-graph arcs each link
holds, the same exclusive resources the simulator serialises on, at the cost of one pipelined round
(:func:`autotaccl.simulate.rounds`), so the alpha/bandwidth trade-off matches what the simulator charges:

* ``earliest``: chunk by chunk (interleaved by owner), an AllGather/Broadcast tree grows from the
  ranks it has reached by the rank it can reach soonest, an AllToAll chunk takes its earliest-arrival
  path (A*); a hop books the first gap of its arcs or joins a transfer already booked on that link
  (one alpha for several chunks, what wins at small sizes);
* ``balanced`` / ``bottleneck``: routes for the least-loaded arcs (Prim trees, one network entry per
  node; A* paths; rip-up-and-reroute), then list scheduling in which a transfer takes every chunk
  waiting for its link (what wins at large sizes);
* ``doubling`` / ``relay``: Bruck exchanges where the sketch makes nodes complete graphs (switches),
  across nodes between same-index peers, or through the sketch's relay pairs.

ReduceScatter runs an AllGather backwards over the sketch links' reverses (copies become reduces),
as TACCL's combine does; AllReduce is that followed by the AllGather. Inter-node hops respect the
sketch's sender map. :func:`greedy` simulates every applicable variant in two list orders (dependency
depth, planned start), and every baseline the sketch admits, at the target size and returns the
fastest; every result passes ``verify``.
The sketch's symmetry and enforce_ordering hints are not needed here and are ignored.
"""
from __future__ import annotations

import heapq
import logging
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace
from typing import Callable

from ..errors import InfeasibleError
from ..model.algorithm import Algorithm, Transfer, verify
from ..model.collectives import Collective
from ..simulate import rounds
from ..sketch.logical import LogicalTopology

log = logging.getLogger(__name__)

EPS = 1e-9


@dataclass
class _Booking:
    """One transfer on one link: its chunks and its reserved interval."""
    edge: tuple[int, int]
    start: float
    end: float
    chunks: list[int]
    order: int


@dataclass
class _Timeline:
    """Reserved intervals of one arc, sorted by start, never overlapping."""
    starts: list[float] = field(default_factory=list)
    items: list[_Booking] = field(default_factory=list)

    def earliest(self, t: float, d: float) -> float:
        """First time >= t where this arc is free for d."""
        i = max(0, bisect_right(self.starts, t) - 1)
        for b in self.items[i:]:
            if b.end <= t + EPS:
                continue
            if b.start >= t + d - EPS:
                return t
            t = b.end
        return t

    def add(self, b: _Booking) -> None:
        i = bisect_right(self.starts, b.start)
        self.starts.insert(i, b.start)
        self.items.insert(i, b)

    def room_after(self, b: _Booking, new_end: float) -> bool:
        """Can ``b`` (booked here) grow to end at ``new_end`` without touching the next booking?"""
        i = bisect_left(self.starts, b.start)
        while i < len(self.items) and self.items[i] is not b:
            i += 1
        nxt = self.items[i + 1] if i + 1 < len(self.items) else None
        return nxt is None or nxt.start >= new_end - EPS


class _Planner:
    """Reservation state shared by all chunks of one schedule."""

    def __init__(self, lt: LogicalTopology, batching: bool, reverse: bool = False, window: int | None = None) -> None:
        """``reverse``: plan an AllGather that will run backwards (TACCL's combine): each sketch link is
        priced as its physical reverse, which the reversed transfer uses, and links without one are skipped."""
        self.lt = lt
        self.batching = batching
        self.window = window or 1 << 30   # at most this many chunks per batch (default: no cap)
        self.one_entry = True
        self._to: dict[int, dict[int, float]] = {}
        g = lt.graph
        self.gpn = g.graph["gpus_per_node"]
        self.piece = lt.chunk_bytes / rounds(lt.chunk_bytes) if lt.chunk_bytes > 0 else 0.0
        arc_ids: dict = {}
        self.arcs: dict[tuple[int, int], tuple[int, ...]] = {}
        self.alpha: dict[tuple[int, int], float] = {}
        self.beta: dict[tuple[int, int], float] = {}
        self.out: dict[int, list[int]] = {r: [] for r in g.nodes}
        for u, v in sorted(lt.edges):
            if reverse and not g.has_edge(v, u):
                continue
            data = g.edges[v, u] if reverse else g.edges[u, v]
            self.arcs[u, v] = tuple(arc_ids.setdefault(a, len(arc_ids)) for a in data["resources"])
            self.alpha[u, v] = float(data["alpha_us"])
            self.beta[u, v] = self.piece / (float(data["bandwidth_GBps"]) * 1e3)
            self.out[u].append(v)
        self.timelines = [_Timeline() for _ in arc_ids]
        self.on_edge: dict[tuple[int, int], list[_Booking]] = {e: [] for e in self.arcs}
        self.bookings: list[_Booking] = []

    def allowed(self, chunk: int, owner_node: int, u: int, v: int) -> bool:
        """The sender restriction: a chunk leaves its source node only through its senders."""
        if u // self.gpn != owner_node or v // self.gpn == owner_node:
            return True
        senders = self.lt.senders.get(chunk)
        return senders is None or u in senders

    def to(self, dst: int) -> dict[int, float]:
        """Uncontended time from every rank to ``dst`` (cached): the A* heuristic of path searches."""
        if dst not in self._to:
            into: dict[int, list[int]] = {}
            for u, v in self.arcs:
                into.setdefault(v, []).append(u)
            dist = {dst: 0.0}
            heap = [(0.0, dst)]
            while heap:
                d, v = heapq.heappop(heap)
                if d > dist[v]:
                    continue
                for u in into.get(v, ()):
                    nd = d + self.alpha[u, v] + self.beta[u, v]
                    if nd < dist.get(u, float("inf")):
                        dist[u] = nd
                        heapq.heappush(heap, (nd, u))
            self._to[dst] = dist
        return self._to[dst]

    def reentry(self, u: int, v: int, entered: set[int]) -> bool:
        """Would (u, v) carry a chunk into a node it has already entered? A tree crosses into each node once."""
        return self.one_entry and u // self.gpn != v // self.gpn and v // self.gpn in entered

    def slot(self, e: tuple[int, int], t: float, d: float) -> float:
        """First time >= t when every arc of link e is free for d."""
        while True:
            nt = t
            for a in self.arcs[e]:
                nt = self.timelines[a].earliest(nt, d)
            if nt <= t + EPS:
                return t
            t = nt

    def book(self, chunks: list[int], e: tuple[int, int], start: float) -> float:
        """A fresh transfer of ``chunks`` on e at ``start``; returns its end."""
        end = start + self.alpha[e] + len(chunks) * self.beta[e]
        b = _Booking(e, start, end, list(chunks), len(self.bookings))
        self.bookings.append(b)
        self.on_edge[e].append(b)
        for a in self.arcs[e]:
            self.timelines[a].add(b)
        return end

    def option(self, u: int, v: int, ready: float) -> tuple[float, _Booking | None, float]:
        """Earliest arrival at v over (u, v) for a chunk at u from ``ready``: (arrival, join target, start)."""
        e = (u, v)
        d = self.alpha[e] + self.beta[e]
        arcs = self.arcs[e]
        t = self.slot(e, ready, d)
        best = (t + d, None, t)
        if self.batching:
            grow = self.beta[e]
            for b in self.on_edge[e]:
                if b.start + EPS < ready or b.end + grow >= best[0] - EPS or len(b.chunks) >= self.window:
                    continue
                if all(self.timelines[a].room_after(b, b.end + grow) for a in arcs):
                    best = (b.end + grow, b, b.start)
        return best

    def commit(self, chunk: int, u: int, v: int, option: tuple[float, _Booking | None, float]) -> float:
        arrival, join, start = option
        if join is not None:
            join.end = arrival
            join.chunks.append(chunk)
            return arrival
        return self.book([chunk], (u, v), start)

    # ------------------------------------------------------------------ routing one chunk

    def tree(self, chunk: int, root: int, targets: set[int]) -> None:
        """Grow ``chunk``'s multicast tree from ``root`` until it covers ``targets``."""
        node = root // self.gpn
        reached = {root: 0.0}
        entered = {node}
        heap: list[tuple[float, int, int, int]] = []
        count = 0

        def push(u: int) -> None:
            nonlocal count
            for v in self.out[u]:
                if v not in reached and self.allowed(chunk, node, u, v) and not self.reentry(u, v, entered):
                    heapq.heappush(heap, (self.option(u, v, reached[u])[0], count, u, v))
                    count += 1

        push(root)
        missing = set(targets) - {root}
        while missing and heap:
            est, _, u, v = heapq.heappop(heap)
            if v in reached or self.reentry(u, v, entered):
                continue
            opt = self.option(u, v, reached[u])
            if opt[0] > est + EPS:
                heapq.heappush(heap, (opt[0], count, u, v))
                count += 1
                continue
            reached[v] = self.commit(chunk, u, v, opt)
            entered.add(v // self.gpn)
            missing.discard(v)
            push(v)
        if missing:
            v = min(missing)
            raise InfeasibleError(f"no route from GPU {root} to GPU {v} (node {v // self.gpn}) under this sketch")

    def path(self, chunk: int, src: int, dst: int) -> None:
        """Book ``chunk`` on the earliest-arrival path from ``src`` to ``dst`` (inside the two nodes first)."""
        def arrival(u: int, v: int, t: float) -> float:
            return self.option(u, v, t)[0]

        for scope in ({src // self.gpn, dst // self.gpn}, None):
            hops = _cheapest_path(self, chunk, src, dst, arrival, scope)
            if hops is not None:
                break
        else:
            raise InfeasibleError(f"no route from GPU {src} to GPU {dst} (node {dst // self.gpn}) under this sketch")
        t = 0.0
        for u, v in hops:   # book hop by hop: earlier hops may have taken an arc a later one wanted
            t = self.commit(chunk, u, v, self.option(u, v, t))


def _cheapest_path(planner: "_Planner", chunk: int, src: int, dst: int, cost: Callable[[int, int, float], float],
                   scope: set[int] | None = None) -> list[tuple[int, int]] | None:
    """Hops of the cheapest ``src -> dst`` path over the links the sketch allows ``chunk``, or None.

    ``cost(u, v, c)`` is the cost on reaching ``v`` from ``u`` reached at cost ``c``; A* with the
    uncontended time still to go (``planner.to(dst)``, never more than any cost) as the heuristic.
    ``scope`` limits the search to those nodes.
    """
    node = src // planner.gpn
    h = planner.to(dst)
    best, parent = {src: 0.0}, {}
    heap = [(h.get(src, 0.0), src)]
    done: set[int] = set()
    while heap:
        _, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        if u == dst:
            break
        for v in planner.out[u]:
            if v in done or v not in h or (scope is not None and v // planner.gpn not in scope):
                continue
            if not planner.allowed(chunk, node, u, v):
                continue
            c = cost(u, v, best[u])
            if c < best.get(v, float("inf")) - EPS:
                best[v], parent[v] = c, u
                heapq.heappush(heap, (c + h[v], v))
    if dst not in done:
        return None
    hops = []
    v = dst
    while v != src:
        hops.append((parent[v], v))
        v = parent[v]
    return hops[::-1]


# --------------------------------------------------------------------------- load-balanced routes


class _Loads:
    """Routes chosen for balance rather than speed: every hop adds its duration to the arcs it holds."""

    def __init__(self, planner: _Planner, squared: bool = False) -> None:
        self.p = planner
        self.squared = squared
        self.load = [0.0] * len(planner.timelines)

    def weight(self, u: int, v: int) -> float:
        """``balanced``: the busiest arc's load with one more chunk on (u, v). ``bottleneck``: what that
        chunk adds to the busiest arc's squared load, d * (2 * load + d), so loaded resources dominate."""
        d = self.p.alpha[u, v] + self.p.beta[u, v]
        load = max(self.load[a] for a in self.p.arcs[u, v])
        return d * (2 * load + d) if self.squared else load + d

    def use(self, hops: list[tuple[int, int]], sign: float = 1.0) -> None:
        for u, v in hops:
            d = sign * (self.p.alpha[u, v] + self.p.beta[u, v])
            for a in self.p.arcs[u, v]:
                self.load[a] += d

    def tree(self, chunk: int, root: int, targets: set[int]) -> list[tuple[int, int]]:
        """Prim's growth from ``root``: always the least-loaded next hop, shallow first on ties."""
        p = self.p
        node = root // p.gpn
        depth = {root: 0}
        entered = {node}
        hops: list[tuple[int, int]] = []
        heap: list[tuple[float, int, int, int]] = []

        def push(u: int) -> None:
            for v in p.out[u]:
                if v not in depth and p.allowed(chunk, node, u, v) and not p.reentry(u, v, entered):
                    heapq.heappush(heap, (self.weight(u, v), depth[u], u, v))

        push(root)
        missing = set(targets) - {root}
        while missing and heap:
            w, _, u, v = heapq.heappop(heap)
            if v in depth or p.reentry(u, v, entered):
                continue
            now = self.weight(u, v)
            if now > w + EPS:
                heapq.heappush(heap, (now, depth[u], u, v))
                continue
            depth[v] = depth[u] + 1
            entered.add(v // p.gpn)
            hops.append((u, v))
            self.use([(u, v)])
            missing.discard(v)
            push(v)
        if missing:
            v = min(missing)
            raise InfeasibleError(f"no route from GPU {root} to GPU {v} (node {v // p.gpn}) under this sketch")
        return hops

    def path(self, chunk: int, src: int, dst: int) -> list[tuple[int, int]]:
        """The path whose hops' loaded weights sum least."""
        hops = _cheapest_path(self.p, chunk, src, dst, lambda u, v, d: d + self.weight(u, v))
        if hops is None:
            raise InfeasibleError(f"no route from GPU {src} to GPU {dst} (node {dst // self.p.gpn}) under this sketch")
        self.use(hops)
        return hops


def _list_schedule(planner: _Planner, routes: list[tuple[int, int, list[tuple[int, int]]]]) -> None:
    """Book fixed routes (chunk, root, hops) hop by hop, earliest-ready first, each in its earliest gap.

    With batching, a transfer also takes every other chunk waiting for the same link that is ready by
    the time the link is free (one alpha for all of them).
    """
    children: dict[tuple[int, int], list[tuple[int, int]]] = {}
    heap: list[tuple[float, int, int, int, int]] = []
    waiting: dict[tuple[int, int], dict[int, float]] = {}   # link -> chunk -> ready time

    def ready_at(chunk: int, u: int, t: float, order: int) -> None:
        for x, y in children.get((chunk, u), ()):
            heapq.heappush(heap, (t, order, chunk, x, y))
            waiting.setdefault((x, y), {})[chunk] = t

    orders = {}
    for order, (chunk, root, hops) in enumerate(routes):
        orders[chunk] = order
        for u, v in hops:
            children.setdefault((chunk, u), []).append((u, v))
    for chunk, root, _ in routes:
        ready_at(chunk, root, 0.0, orders[chunk])
    while heap:
        ready, order, chunk, u, v = heapq.heappop(heap)
        e = (u, v)
        queue = waiting.get(e, {})
        if chunk not in queue:
            continue                                   # already left in an earlier batch
        if not planner.batching:
            del queue[chunk]
            ready_at(chunk, v, planner.commit(chunk, u, v, planner.option(u, v, ready)), order)
            continue
        arrival, join, start = planner.option(u, v, ready)
        if join is not None:
            del queue[chunk]
            ready_at(chunk, v, planner.commit(chunk, u, v, (arrival, join, start)), order)
            continue
        if start > ready + EPS:
            # the link is busy until `start`: decide then, when every chunk ready by then is known
            heapq.heappush(heap, (start, order, chunk, u, v))
            continue
        batch = [chunk]
        for _ in range(4):   # taking more chunks makes the transfer longer, which may move its slot
            batch = [chunk] + sorted((c for c, t in queue.items() if c != chunk and t <= start + EPS),
                                     key=lambda c: (queue[c], orders[c]))[:planner.window - 1]
            d = planner.alpha[e] + len(batch) * planner.beta[e]
            later = planner.slot(e, ready, d)
            if later <= start + EPS:
                break
            start = later
        else:
            batch = [c for c in batch if queue[c] <= start + EPS]
            start = planner.slot(e, ready, planner.alpha[e] + len(batch) * planner.beta[e])
        end = planner.book(batch, e, start)
        for c in batch:
            del queue[c]
            ready_at(c, v, end, orders[c])


# --------------------------------------------------------------------------- the schedule


def _jobs(coll: Collective):
    """(chunk, source, destinations-or-None) in the interleaved order chunks are placed."""
    k, R = coll.chunkup, coll.ranks
    if coll.name == "broadcast":
        return [(c, coll.root, None) for c in range(coll.num_chunks)]
    if coll.name == "allgather":
        return [(r * k + i, r, None) for i in range(k) for r in range(R)]
    if coll.name == "alltoall":   # every source's chunk for its shift-th peer before anyone's next peer
        return [((s * R + (s + shift) % R) * k + i, s, (s + shift) % R)
                for i in range(k) for shift in range(1, R) for s in range(R)]
    raise ValueError(f"greedy plans copies only, not {coll.name}")


class NotApplicable(Exception):
    """A structured strategy does not fit this sketch (the other strategies still do)."""


def _bruck(members: list[int], blocks: dict[int, list[int]]) -> list[list[tuple[int, int, list[int]]]]:
    """Bruck's all-gather among ``members`` (each starting with ``blocks[m]``), as steps of (src, dst, chunks).

    After step k member i holds the blocks of members i .. i+2^(k+1)-1 (cyclically): ceil(log2 n)
    steps, one transfer per member per step, for any n.
    """
    n = len(members)
    steps = []
    k = 1
    while k < n:
        count = min(k, n - k)
        steps.append([(members[(i + k) % n], members[i],
                       [c for t in range(count) for c in blocks[members[(i + k + t) % n]]]) for i in range(n)])
        k *= 2
    return steps


def _doubling(planner: _Planner) -> None:
    """AllGather by exchange: Bruck across nodes between same-index GPUs, then Bruck inside every node.

    Applies when the sketch links every GPU to its peers of the same local index on every other node
    (e.g. direct-map) and makes each node a complete graph (a switch); otherwise NotApplicable.
    """
    coll = planner.lt.collective
    if coll.name != "allgather":
        raise NotApplicable("doubling builds AllGathers")
    gpn, k = planner.gpn, coll.chunkup
    nodes = coll.ranks // gpn
    own = {r: list(range(r * k, r * k + k)) for r in range(coll.ranks)}
    phases = []
    if nodes > 1:
        for g in range(gpn):
            peers = [n * gpn + g for n in range(nodes)]
            for u in peers:
                for v in peers:
                    if u != v and ((u, v) not in planner.arcs or any(not planner.allowed(c, u // gpn, u, v)
                                                                      for c in own[u])):
                        raise NotApplicable(f"no sketch link {u}->{v} for an inter-node exchange")
            phases.append(_bruck(peers, own))
    held = {r: [c for n in range(nodes) for c in own[n * gpn + r % gpn]] for r in range(coll.ranks)}
    phases += [_bruck(members, held) for members in _complete_nodes(planner, nodes)]
    # inter-node phases run side by side, then the intra-node ones: merge their steps
    split = gpn if nodes > 1 else 0
    arrival: dict[tuple[int, int], float] = {}
    _book_phases(planner, phases[:split], arrival)
    _book_phases(planner, phases[split:], arrival)


def _book_phases(planner: _Planner, phases: list[list[list[tuple[int, int, list[int]]]]],
                 arrival: dict[tuple[int, int], float]) -> None:
    """Book phases that run side by side (step i of each before step i+1 of any), each transfer as soon
    as its chunks are at its source and its link is free."""
    for step in range(max((len(p) for p in phases), default=0)):
        for phase in phases:
            for src, dst, chunks in phase[step] if step < len(phase) else ():
                if not chunks:
                    continue
                ready = max(arrival.get((src, c), 0.0) for c in chunks)
                d = planner.alpha[src, dst] + len(chunks) * planner.beta[src, dst]
                end = planner.book(chunks, (src, dst), planner.slot((src, dst), ready, d))
                for c in chunks:
                    arrival[dst, c] = end


def _complete_nodes(planner: _Planner, nodes: int) -> list[list[int]]:
    gpn = planner.gpn
    out = []
    for n in range(nodes):
        members = list(range(n * gpn, (n + 1) * gpn))
        if any(u != v and (u, v) not in planner.arcs for u in members for v in members):
            raise NotApplicable(f"node {n} is not a complete graph under the sketch")
        out.append(members)
    return out


def _relay(planner: _Planner) -> None:
    """AllGather through the sketch's relays: Bruck inside each node, then every node's chunks cross to
    every other node spread over the sketch's sender->receiver pairs (senders respected, loads balanced),
    then Bruck inside each node over what arrived."""
    coll = planner.lt.collective
    gpn, k = planner.gpn, coll.chunkup
    nodes = coll.ranks // gpn
    if coll.name != "allgather" or nodes < 2:
        raise NotApplicable("relay builds multi-node AllGathers")
    groups = _complete_nodes(planner, nodes)
    own = {r: list(range(r * k, r * k + k)) for r in range(coll.ranks)}
    arrival: dict[tuple[int, int], float] = {}
    _book_phases(planner, [_bruck(m, own) for m in groups], arrival)
    received: dict[int, list[int]] = {r: [] for r in range(coll.ranks)}
    sent: dict[int, int] = {r: 0 for r in range(coll.ranks)}
    crossings = []
    for n in range(nodes):
        for m in range(nodes):
            if n == m:
                continue
            pairs = [(u, v) for u in groups[n] for v in groups[m] if (u, v) in planner.arcs]
            batches: dict[tuple[int, int], list[int]] = {}
            for r in groups[n]:
                for c in own[r]:
                    options = [(u, v) for u, v in pairs if planner.allowed(c, n, u, v)]
                    if not options:
                        raise InfeasibleError(f"no route from GPU {r} to node {m} under this sketch")
                    u, v = min(options, key=lambda p: (sent[p[0]] + len(received[p[1]]), p))
                    sent[u] += 1
                    received[v].append(c)
                    batches.setdefault((u, v), []).append(c)
            crossings += [(u, v, chunks) for (u, v), chunks in sorted(batches.items())]
    _book_phases(planner, [[crossings]], arrival)
    _book_phases(planner, [_bruck(m, received) for m in groups], arrival)


def _hierarchy(planner: _Planner) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """AllGather routes that share structure, so list scheduling can batch them: a chunk spreads over
    its node on its owner's shortest-path tree, crosses once into every other node over an allowed
    sender->receiver pair (the one most used so far, else the nearest: crossings funnel into few
    links and travel in batches), and spreads there on the receiver's shortest-path tree."""
    coll = planner.lt.collective
    if coll.name not in ("allgather", "broadcast"):
        raise NotApplicable("hierarchy builds AllGathers and Broadcasts")
    gpn = planner.gpn
    nodes = coll.ranks // gpn
    cost = {e: planner.alpha[e] + planner.beta[e] for e in planner.arcs}

    def spt(root: int) -> tuple[dict[int, float], list[tuple[int, int]]]:
        dist, parent, heap = {root: 0.0}, {}, [(0.0, root)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist[u]:
                continue
            for v in planner.out[u]:
                if v // gpn == root // gpn and d + cost[u, v] < dist.get(v, float("inf")) - EPS:
                    dist[v], parent[v] = d + cost[u, v], u
                    heapq.heappush(heap, (dist[v], v))
        if len(dist) < gpn:
            raise NotApplicable(f"node {root // gpn} is not connected from GPU {root} under the sketch")
        return dist, sorted(((parent[v], v) for v in parent), key=lambda e: dist[e[1]])

    trees = {r: spt(r) for r in range(coll.ranks)}
    used: dict[tuple[int, int], int] = {}
    routes = []
    for chunk, owner, _ in _jobs(coll):
        n = owner // gpn
        dist, hops = trees[owner]
        hops = list(hops)
        for m in range(nodes):
            if m == n:
                continue
            pairs = [(u, v) for (u, v) in planner.arcs if u // gpn == n and v // gpn == m
                     and planner.allowed(chunk, n, u, v)]
            if not pairs:
                raise InfeasibleError(f"no route from GPU {owner} to node {m} under this sketch")
            u, v = min(pairs, key=lambda e: (-used.get(e, 0), dist[e[0]] + cost[e], e))
            used[u, v] = used.get((u, v), 0) + 1
            hops += [(u, v)] + trees[v][1]
        routes.append((chunk, owner, hops))
    return routes


def _plan(lt: LogicalTopology, batching: bool, strategy: str, reverse: bool = False,
          window: int | None = None) -> list[_Booking]:
    planner = _Planner(lt, batching, reverse, window)
    everyone = set(range(lt.collective.ranks))
    jobs = _jobs(lt.collective)
    if strategy == "doubling":
        _doubling(planner)
    elif strategy == "relay":
        _relay(planner)
    elif strategy == "hierarchy":
        _list_schedule(planner, _hierarchy(planner))
    elif strategy == "earliest":
        for chunk, src, dst in jobs:
            if dst is None:
                planner.tree(chunk, src, everyone)
            else:
                planner.path(chunk, src, dst)
    else:
        loads = _Loads(planner, squared=strategy == "bottleneck")

        def route(chunk: int, src: int, dst: int | None) -> list[tuple[int, int]]:
            return loads.tree(chunk, src, everyone) if dst is None else loads.path(chunk, src, dst)

        routes = [route(chunk, src, dst) for chunk, src, dst in jobs]
        passes = REROUTE_PASSES if lt.collective.num_chunks * len(lt.edges) <= BIG else 0
        for _ in range(passes):   # rip up and reroute each chunk against everyone else's final load
            for i, (chunk, src, dst) in enumerate(jobs):
                loads.use(routes[i], -1.0)
                routes[i] = route(chunk, src, dst)
        _list_schedule(planner, [(chunk, src, hops) for (chunk, src, _), hops in zip(jobs, routes)])
    return planner.bookings


def _transfers(bookings: list[_Booking]) -> list[Transfer]:
    ordered = sorted(bookings, key=lambda b: (b.start, b.order))
    return [Transfer(tuple(sorted(b.chunks)), b.edge[0], b.edge[1], 0, "copy", 0, b.start) for b in ordered]


def _reverse(transfers: list[Transfer]) -> list[Transfer]:
    """The AllGather run backwards: every copy u->v becomes a reduce v->u, last first."""
    end = max(t.start_us for t in transfers) if transfers else 0.0
    return [Transfer(t.chunks, t.dst, t.src, 0, "reduce", t.link, end - t.start_us) for t in reversed(transfers)]


def time_steps(transfers: list[Transfer]) -> tuple[Transfer, ...]:
    """Planned-start order with TACCL's step rule: a step closes before a transfer touching a value
    written within it (the simulator's priorities then follow the plan exactly)."""
    step, written = 0, set()
    out = []
    for t in sorted(transfers, key=lambda t: t.start_us):
        touched = {(t.src, c) for c in t.chunks} | {(t.dst, c) for c in t.chunks}
        if touched & written:
            step, written = step + 1, set()
        written |= {(t.dst, c) for c in t.chunks}
        out.append(Transfer(t.chunks, t.src, t.dst, step, t.op, t.link, t.start_us))
    return tuple(out)


def assign_steps(transfers: list[Transfer]) -> tuple[Transfer, ...]:
    """Steps by dependency depth: a transfer's step is one more than that of every earlier transfer it
    must follow (it reads or writes a value that one wrote, or overwrites a value that one read).

    Transfers are then ordered by (step, planned start), which keeps every dependency in list order,
    so steps never decrease and the number of steps is the longest dependency chain.
    """
    writer: dict[tuple[int, int], int] = {}            # (rank, chunk) -> step of its last write
    reader: dict[tuple[int, int], int] = {}            # (rank, chunk) -> latest step that read it
    staged = []
    for i, t in enumerate(transfers):
        reads = [(t.src, c) for c in t.chunks] + ([(t.dst, c) for c in t.chunks] if t.op == "reduce" else [])
        writes = [(t.dst, c) for c in t.chunks]
        step = 1 + max([writer.get(x, -1) for x in reads + writes] + [reader.get(x, -1) for x in writes])
        for x in reads:
            reader[x] = max(reader.get(x, -1), step)
        for x in writes:
            writer[x] = step
        staged.append((step, i, t))
    staged.sort(key=lambda s: (s[0], s[1]))
    return tuple(Transfer(t.chunks, t.src, t.dst, step, t.op, t.link, t.start_us) for step, _, t in staged)


REROUTE_PASSES = 2
START_ORDER_HANDICAP = 0.02   # prefer the dependency-depth order (far fewer steps) unless start order is 2% faster
BIG = 50_000    # (chunks x links) beyond which greedy() tries fewer variants (64 GPUs: seconds)

STRATEGIES = ("earliest", "balanced", "bottleneck", "hierarchy", "doubling", "relay")


def greedy_schedule(lt: LogicalTopology, batching: bool = True, strategy: str = "earliest",
                    window: int | None = None) -> Algorithm:
    """One greedy schedule of ``lt.collective`` on ``lt`` (verified).

    ``earliest`` routes every chunk where it arrives soonest (best when latency dominates);
    ``balanced`` / ``bottleneck`` route for the least-loaded arcs (linear / squared load), then
    list-schedule (best when bandwidth dominates);
    ``hierarchy`` shares per-rank shortest-path trees and one crossing per node so chunks batch;
    ``doubling`` exchanges ever larger blocks (Bruck) where the sketch gives complete nodes and direct
    inter-node peers; ``relay`` gathers each node, crosses over the sketch's relay pairs and gathers
    again, on complete nodes (both raise NotApplicable elsewhere).
    """
    coll = lt.collective
    if coll.is_reduction:
        # ReduceScatter: the AllGather with the same chunk numbering (chunk c rooted at rank c // chunkup)
        # run backwards over the reverse links, as TACCL's combine does; AllReduce appends the AllGather
        gather_lt = replace(lt, collective=Collective("allgather", coll.ranks, coll.chunkup))
        transfers = _reverse(_transfers(_plan(gather_lt, batching, strategy, True, window)))
        if coll.name == "allreduce":
            shift = max((t.start_us for t in transfers), default=0.0) + 1e-6
            transfers += [Transfer(t.chunks, t.src, t.dst, 0, t.op, t.link, t.start_us + shift)
                          for t in _transfers(_plan(gather_lt, batching, strategy, False, window))]
    else:
        transfers = _transfers(_plan(lt, batching, strategy, False, window))
    name = f"{coll.name}-{lt.graph.graph.get('name', 'topology')}-greedy"
    algorithm = Algorithm(name, coll, assign_steps(transfers), lt.graph.graph.get("name", ""),
                          {"engine": "greedy", "strategy": strategy, "batching": batching, "order": "depth",
                           "chunk_bytes": lt.chunk_bytes})
    verify(algorithm, lt.graph)
    return algorithm



def sketch_baselines(lt: LogicalTopology) -> list[Algorithm]:
    """The baselines (ring, direct, ...) of ``lt.collective`` that the sketch admits (at the sketch's chunk-up):
    every transfer on a sketch link (a reduce on its reverse), chunks leaving their node only through their senders."""
    from ..baselines import applicable_baselines, baseline

    coll, gpn = lt.collective, lt.graph.graph["gpus_per_node"]
    out = []
    for name in applicable_baselines(lt.graph, coll.name):
        algorithm = baseline(lt.graph, coll.name, name)
        k = coll.chunkup // max(1, algorithm.collective.chunkup)
        if k > 1 and algorithm.collective.chunkup * k == coll.chunkup:
            # the sketch's chunk-up: chunk c of the baseline is chunks c*k .. c*k+k-1 (same owner and
            # destinations), carried together
            algorithm = replace(algorithm, collective=coll, transfers=tuple(
                replace(t, chunks=tuple(c * k + j for c in t.chunks for j in range(k))) for t in algorithm.transfers))
        if algorithm.collective != coll:
            continue
        fits = True
        for t in algorithm.transfers:
            if ((t.src, t.dst) if t.op == "copy" else (t.dst, t.src)) not in lt.edges:
                fits = False
                break
            if t.src // gpn != t.dst // gpn:
                inner = t.src if t.op == "copy" else t.dst      # the rank on the owner's side of the crossing
                for c in t.chunks:
                    owner = c // coll.chunkup if coll.is_reduction else min(coll.precondition(c))
                    if c in lt.senders and inner // gpn == owner // gpn and inner not in lt.senders[c]:
                        fits = False
            if not fits:
                break
        if fits:
            out.append(replace(algorithm, metadata={**algorithm.metadata, "engine": "greedy",
                                                    "strategy": f"baseline {name}", "chunk_bytes": lt.chunk_bytes}))
    return out


def greedy(lt: LogicalTopology, size: int, batching: bool = True, window: int | None = None) -> Algorithm:
    """The best of the greedy variants at ``size`` bytes, judged by the simulator.

    ``batching`` (the sketch's contiguity) lets a routed transfer carry several chunks, at most ``window``
    (default: no cap; a cap of 6, TACCL's window, costs up to 4x at 1 KiB on AllToAll). The blocks of the
    structured strategies are never capped.
    """
    from ..simulate import simulate

    best: tuple[float, Algorithm] | None = None
    big = lt.collective.num_chunks * len(lt.edges) > BIG
    for strategy in STRATEGIES:
        if big and strategy == "earliest":
            continue    # its time-aware searches cost the most and it wins mostly on small instances
        routed = strategy in ("earliest", "balanced", "bottleneck", "hierarchy")
        variants = (True, False) if batching and routed and not big else (batching,)
        for batch in variants:
            try:
                algorithm = greedy_schedule(lt, batch, strategy, window)
            except NotApplicable as why:
                log.debug("greedy %s: %s", strategy, why)
                continue
            # the same schedule in two list orders: by dependency depth (few steps) or by planned start
            timed = replace(algorithm, transfers=time_steps(list(algorithm.transfers)),
                            metadata={**algorithm.metadata, "order": "start"})
            for candidate in (algorithm, timed):
                try:
                    time_us = simulate(candidate, lt.graph, size).time_us
                except RuntimeError as err:   # a simulator fault must not sink synthesis: skip the variant
                    log.warning("greedy %s (%s order): the simulator failed (%s); variant skipped",
                                strategy, candidate.metadata.get("order"), err)
                    continue
                log.debug("greedy %s batching=%s order=%s: %.3f us", strategy, batch,
                          candidate.metadata.get("order"), time_us)
                if candidate is timed:
                    time_us *= 1 + START_ORDER_HANDICAP
                if best is None or time_us < best[0] - EPS:
                    best = (time_us, candidate)
    for candidate in sketch_baselines(lt):
        # a baseline the sketch admits is a candidate too: the engine never returns something slower
        try:
            time_us = simulate(candidate, lt.graph, size).time_us
        except RuntimeError as err:
            log.warning("greedy: the simulator failed on baseline %s (%s)", candidate.metadata.get("strategy"), err)
            continue
        if best is None or time_us < best[0] - EPS:
            best = (time_us, candidate)
    if best is None:
        raise RuntimeError("the simulator could evaluate no greedy variant")
    verify(best[1], lt.graph)
    return best[1]
