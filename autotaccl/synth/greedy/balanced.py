"""``balanced`` / ``bottleneck``: routes for the least-loaded arcs, then list scheduling (best when
bandwidth dominates).

Every chunk takes a Prim tree (one network entry per node) or an A* path weighted by the load its hops
put on the arcs they hold (``balanced``: the busiest arc's load; ``bottleneck``: its squared load, so
loaded resources dominate); then every chunk is ripped up and rerouted against everyone else's final
load, and the routes are list-scheduled, a transfer taking every chunk waiting for its link.
"""
from __future__ import annotations

import heapq

from .booking import list_schedule
from .strategy import BIG, cheapest_path, jobs, no_route
from .timeline import EPS, Planner

REROUTE_PASSES = 2


def balanced(planner: Planner) -> None:
    _by_load(planner, squared=False)


def bottleneck(planner: Planner) -> None:
    _by_load(planner, squared=True)


def _by_load(planner: Planner, squared: bool) -> None:
    lt = planner.lt
    everyone = set(range(lt.collective.ranks))
    todo = jobs(lt.collective)
    loads = Loads(planner, squared)

    def route(chunk: int, src: int, dst: int | None) -> list[tuple[int, int]]:
        return loads.tree(chunk, src, everyone) if dst is None else loads.path(chunk, src, dst)

    routes = [route(chunk, src, dst) for chunk, src, dst in todo]
    passes = REROUTE_PASSES if lt.collective.num_chunks * len(lt.edges) <= BIG else 0
    for _ in range(passes):   # rip up and reroute each chunk against everyone else's final load
        for i, (chunk, src, dst) in enumerate(todo):
            loads.use(routes[i], -1.0)
            routes[i] = route(chunk, src, dst)
    list_schedule(planner, [(chunk, src, hops) for (chunk, src, _), hops in zip(todo, routes)])


class Loads:
    """Routes chosen for balance rather than speed: every hop adds its duration to the arcs it holds."""

    def __init__(self, planner: Planner, squared: bool = False) -> None:
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
            raise no_route(p, root, min(missing))
        return hops

    def path(self, chunk: int, src: int, dst: int) -> list[tuple[int, int]]:
        """The path whose hops' loaded weights sum least."""
        hops = cheapest_path(self.p, chunk, src, dst, lambda u, v, d: d + self.weight(u, v))
        if hops is None:
            raise no_route(self.p, src, dst)
        self.use(hops)
        return hops
