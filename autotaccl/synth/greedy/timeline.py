"""The greedy engine's timelines: reservations of the capacity-graph arcs every sketch link holds.

A transfer on a link holds every arc in the link's ``resources`` for its whole duration, the same
exclusive resources the simulator serialises on, priced at one pipelined round
(:func:`autotaccl.simulate.rounds`) so the alpha/bandwidth trade-off matches what the simulator
charges. A :class:`Planner` answers "when can this chunk cross this link at the earliest" (a fresh
transfer in the first gap, or, with batching, joining a transfer already booked there: one alpha for
several chunks) and books the answer; strategies decide which links each chunk takes.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from ...simulate import rounds
from ...sketch.logical import LogicalTopology

EPS = 1e-9


@dataclass
class Booking:
    """One transfer on one link: its chunks and its reserved interval."""
    edge: tuple[int, int]
    start: float
    end: float
    chunks: list[int]
    order: int


@dataclass
class Timeline:
    """Reserved intervals of one arc, sorted by start, never overlapping."""
    starts: list[float] = field(default_factory=list)
    items: list[Booking] = field(default_factory=list)

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

    def add(self, b: Booking) -> None:
        i = bisect_right(self.starts, b.start)
        self.starts.insert(i, b.start)
        self.items.insert(i, b)

    def room_after(self, b: Booking, new_end: float) -> bool:
        """Can ``b`` (booked here) grow to end at ``new_end`` without touching the next booking?"""
        i = bisect_left(self.starts, b.start)
        while i < len(self.items) and self.items[i] is not b:
            i += 1
        nxt = self.items[i + 1] if i + 1 < len(self.items) else None
        return nxt is None or nxt.start >= new_end - EPS


class Planner:
    """Reservation state shared by all chunks of one schedule."""

    def __init__(self, lt: LogicalTopology, batching: bool, reverse: bool = False, window: int | None = None) -> None:
        """``reverse``: plan an AllGather that will run backwards (:mod:`autotaccl.synth.reductions`): each
        sketch link is priced as its physical reverse, which the reversed transfer uses, and links without
        one are skipped."""
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
        self.timelines = [Timeline() for _ in arc_ids]
        self.on_edge: dict[tuple[int, int], list[Booking]] = {e: [] for e in self.arcs}
        self.bookings: list[Booking] = []

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
        b = Booking(e, start, end, list(chunks), len(self.bookings))
        self.bookings.append(b)
        self.on_edge[e].append(b)
        for a in self.arcs[e]:
            self.timelines[a].add(b)
        return end

    def option(self, u: int, v: int, ready: float) -> tuple[float, Booking | None, float]:
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

    def commit(self, chunk: int, u: int, v: int, option: tuple[float, Booking | None, float]) -> float:
        """Book ``chunk`` on (u, v) as :meth:`option` found (joining a booked transfer or a fresh one); its arrival."""
        arrival, join, start = option
        if join is not None:
            join.end = arrival
            join.chunks.append(chunk)
            return arrival
        return self.book([chunk], (u, v), start)
