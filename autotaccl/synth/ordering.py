"""Stage 2: a total order of the routed transfers on every shared resource (taccl.md §5).

Every heuristic is a list schedule over the routed segments ``(chunk, src, dst)``; they differ only in
which ready segment goes first (taccl.md §5.3's keys: 10 ``longest-first``, 13 ``own-node-first``,
14 ``own-node-earliest``, 15 ``earliest-first``, 5 ``backward``, 12 / 18 for combine). Unlike the
reference, stage-1 times are not the primary key (they are mostly ties). The list schedule's times seed
stage 3."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Mapping

from ..milp.solution import StageReport
from ..sketch import TACCL_HEURISTICS
from ..sketch.logical import LogicalTopology
from .routing import Routing, Send

log = logging.getLogger(__name__)

NAMES = {**TACCL_HEURISTICS, 12: "combine-sum", 18: "combine-branch"}     # plus combine's own two
NUMBERS = {v: k for k, v in NAMES.items()}


@dataclass(frozen=True)
class Ordering:
    heuristic: int
    start: Mapping[Send, float]                   # list-schedule start time of every transfer (µs)
    resource_order: Mapping[object, tuple[Send, ...]]  # capacity arc -> transfers holding it, in order
    makespan: float
    report: StageReport

    def link_order(self, src: int, dst: int) -> tuple[int, ...]:
        """The chunks crossing ``src -> dst`` in order."""
        return tuple(c for c, u, v in sorted((s for s in self.start if s[1] == src and s[2] == dst),
                                             key=lambda s: (self.start[s], s)))


def default_heuristic(lt: LogicalTopology, combine: bool = False) -> int:
    """taccl.md §5.4: 12 for combine, 10 with switches, 14 across nodes, else 5."""
    if combine:
        return 12
    if lt.intranode_strategy == "switch":
        return 10
    if lt.graph.graph["nodes"] > 1:
        return 14
    return 5


def heuristic_number(heuristic: int | str | None, lt: LogicalTopology, combine: bool = False) -> int:
    if heuristic is None or heuristic == "auto":
        return default_heuristic(lt, combine)
    number = NUMBERS.get(heuristic, heuristic)
    if isinstance(number, str) and number.isdigit():
        number = int(number)
    if number not in NAMES:
        raise ValueError(f"unknown ordering heuristic {heuristic!r}; use one of {sorted(NAMES)} or {sorted(NUMBERS)}")
    return int(number)


def order(lt: LogicalTopology, routing: Routing, heuristic: int | str | None = "auto") -> Ordering:
    """Stage 2: order every resource's transfers with a TACCL heuristic (number or name)."""
    began = time.perf_counter()
    h = heuristic_number(heuristic, lt, combine=routing.reverse)
    tree = _Tree(lt, routing.sends)
    if h == 5:
        start = _backward(lt, tree)
    else:
        start = _forward(lt, tree, h)
    if lt.enforce_ordering:
        start = _own_first(lt, tree, start)
    makespan = max((start[s] + tree.cost[s] for s in start), default=0.0)
    res: dict[object, list[Send]] = {}
    for s in sorted(start, key=lambda s: (start[s], s)):
        for arc in lt.resources(s[1], s[2]):
            res.setdefault(arc, []).append(s)
    report = StageReport(time.perf_counter() - began, 0, 0, "heuristic", f"heuristic {h} ({NAMES[h]})")
    log.info("ordering: heuristic %d, list-schedule makespan %.1f us", h, makespan)
    return Ordering(h, start, {a: tuple(v) for a, v in res.items()}, makespan, report)


class _Tree:
    """The routing as per-chunk trees with the path metrics the heuristics sort by."""

    def __init__(self, lt: LogicalTopology, sends: tuple[Send, ...]) -> None:
        coll = lt.collective
        self.R, self.G = coll.ranks, lt.graph.graph["gpus_per_node"]
        self.cost = {s: lt.cost_us(s[1], s[2]) for s in sends}
        self.children: dict[Send, list[Send]] = {s: [] for s in sends}
        self.parent: dict[Send, Send | None] = {}
        by_dst = {(c, v): (c, u, v) for c, u, v in sends}
        for s in sends:
            c, u, _ = s
            p = by_dst.get((c, u))
            self.parent[s] = p
            if p is not None:
                self.children[p].append(s)
        self.source = {c: next(iter(coll.precondition(c))) for c in range(coll.num_chunks)}
        self.sends = sends
        # remaining work below a segment: longest path (to_travel), sum over leaf paths (to_travel_sum)
        self.to_travel: dict[Send, float] = {}
        self.to_travel_sum: dict[Send, float] = {}
        self.leaves: dict[Send, int] = {}
        for s in reversed(self._topological()):
            kids = self.children[s]
            self.leaves[s] = sum(self.leaves[k] for k in kids) or 1
            self.to_travel[s] = self.cost[s] + max((self.to_travel[k] for k in kids), default=0.0)
            self.to_travel_sum[s] = self.cost[s] * self.leaves[s] + sum(self.to_travel_sum[k] for k in kids)
        self.travelled: dict[Send, float] = {}
        for s in self._topological():
            p = self.parent[s]
            self.travelled[s] = 0.0 if p is None else self.travelled[p] + self.cost[p]

    def _topological(self) -> list[Send]:
        out = [s for s in self.sends if self.parent[s] is None]
        i = 0
        while i < len(out):
            out.extend(self.children[out[i]])
            i += 1
        return out

    def own_node(self, s: Send) -> int:
        c, u, v = s
        return 0 if u // self.G == v // self.G == self.source[c] // self.G else 1

    def tie(self, s: Send) -> tuple:
        c, u, v = s
        return ((u - v) % self.R, v % self.G, u % self.G, v // self.G, c)


def _forward(lt: LogicalTopology, tree: _Tree, h: int) -> dict[Send, float]:
    """List scheduling forward in time; the heuristic's key picks among ready segments."""
    def key(s: Send, t: float) -> tuple:
        if h == 10:
            return (-tree.to_travel[s], t) + tree.tie(s)
        if h == 13:
            return (-tree.to_travel[s], t, tree.own_node(s)) + tree.tie(s)
        if h == 14:
            return (t, tree.own_node(s), -tree.to_travel[s]) + tree.tie(s)
        if h == 15:
            return (t, -tree.to_travel[s]) + tree.tie(s)
        if h == 12:
            return (-tree.to_travel_sum[s], t) + tree.tie(s)
        return (-tree.to_travel[s] * tree.leaves[s], t) + tree.tie(s)      # 18: branch work

    ready = {s: 0.0 for s in tree.sends if tree.parent[s] is None}
    return _list_schedule(lt, tree, ready, tree.children, key, serialize_branches=h in (12, 18))


def _backward(lt: LogicalTopology, tree: _Tree) -> dict[Send, float]:
    """Heuristic 5: schedule from the leaves towards the sources (reverse time), then mirror."""
    parent_of = {s: ([tree.parent[s]] if tree.parent[s] is not None else []) for s in tree.sends}
    waiting = {s: len(tree.children[s]) for s in tree.sends}

    def key(s: Send, t: float) -> tuple:
        return (t, -tree.travelled[s]) + tree.tie(s)

    ready = {s: 0.0 for s in tree.sends if not tree.children[s]}
    rev = _list_schedule(lt, tree, ready, parent_of, key, waiting=waiting)
    end = max((rev[s] + tree.cost[s] for s in rev), default=0.0)
    return {s: end - rev[s] - tree.cost[s] for s in rev}


def _list_schedule(lt, tree: _Tree, ready: dict[Send, float], successors, key, serialize_branches=False,
                   waiting: dict[Send, int] | None = None) -> dict[Send, float]:
    """Greedy list scheduling on capacity arcs.

    ``ready`` maps a segment to its data-ready time; after a segment ends, each successor whose
    ``waiting`` count drops to zero becomes ready at the latest end among its predecessors.
    Repeatedly pick the ready segment with the smallest key and start it as early as its data and
    arcs allow (TACCL's rule: the key, not the start time, decides; arcs' free times only move forward).
    """
    free: dict[object, float] = {}
    branch_free: dict[tuple[int, int], float] = {}
    start: dict[Send, float] = {}
    waiting = dict(waiting) if waiting is not None else {}
    ready_at: dict[Send, float] = {}
    pending = dict(ready)

    def earliest(s: Send) -> float:
        t = pending[s]
        for arc in lt.resources(s[1], s[2]):
            t = max(t, free.get(arc, 0.0))
        if serialize_branches:
            t = max(t, branch_free.get((s[0], s[1]), 0.0))
        return t

    while pending:
        times = {s: earliest(s) for s in pending}
        best = min(pending, key=lambda s: key(s, times[s]))
        t = times[best]
        del pending[best]
        start[best] = t
        end = t + tree.cost[best]
        for arc in lt.resources(best[1], best[2]):
            free[arc] = end
        if serialize_branches:
            branch_free[(best[0], best[1])] = end
        for nxt in successors[best]:
            ready_at[nxt] = max(ready_at.get(nxt, 0.0), end)
            left = waiting.get(nxt, 1) - 1
            waiting[nxt] = left
            if left <= 0:
                pending[nxt] = ready_at[nxt]
    return start


def _own_first(lt: LogicalTopology, tree: _Tree, start: dict[Send, float]) -> dict[Send, float]:
    """enforce_ordering: on each network link out of a node, the sender's own chunks go first.

    Reorders the start times of the affected segments on that link (keeping the set of time slots)
    when the heuristic put a relayed chunk before an own chunk, then re-times everything forward.
    """
    G = tree.G
    links: dict[tuple[int, int], list[Send]] = {}
    for s in start:
        c, u, v = s
        if u // G != v // G:
            links.setdefault((u, v), []).append(s)
    rank: dict[Send, tuple] = {}
    for (u, v), segs in links.items():
        segs.sort(key=lambda s: (tree.source[s[0]] != u, start[s], s))
        for i, s in enumerate(segs):
            rank[s] = (0, i)
    return _retime(lt, tree, start, rank)


def _retime(lt, tree: _Tree, start: dict[Send, float], rank: dict[Send, tuple]) -> dict[Send, float]:
    """Recompute start times keeping each arc's order (by ``rank`` where given, else by old start)."""
    order_key = {s: rank.get(s, (1, 0)) for s in start}
    res: dict[object, list[Send]] = {}
    for s in sorted(start, key=lambda s: (start[s], s)):
        for arc in lt.resources(s[1], s[2]):
            res.setdefault(arc, []).append(s)
    # within each arc: segments constrained by `rank` keep their forced order among themselves
    for arc, segs in res.items():
        forced = [s for s in segs if s in rank]
        if len(forced) > 1:
            slots = [i for i, s in enumerate(segs) if s in rank]
            for i, s in zip(slots, sorted(forced, key=lambda s: order_key[s])):
                segs[i] = s
    preds: dict[Send, set[Send]] = {s: set() for s in start}
    for s in start:
        if tree.parent[s] is not None:
            preds[s].add(tree.parent[s])
    for segs in res.values():
        for a, b in zip(segs, segs[1:]):
            preds[b].add(a)
    new: dict[Send, float] = {}
    indeg = {s: len(p) for s, p in preds.items()}
    succ: dict[Send, list[Send]] = {s: [] for s in start}
    for s, ps in preds.items():
        for p in ps:
            succ[p].append(s)
    todo = [s for s, d in indeg.items() if d == 0]
    while todo:
        s = todo.pop()
        new[s] = max((new[p] + tree.cost[p] for p in preds[s]), default=0.0)
        for n in succ[s]:
            indeg[n] -= 1
            if indeg[n] == 0:
                todo.append(n)
    if len(new) != len(start):
        log.warning("enforce_ordering conflicts with the routing's dependencies; keeping the heuristic order")
        return start
    return new
