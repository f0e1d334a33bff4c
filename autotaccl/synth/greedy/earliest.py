"""``earliest``: every chunk where it arrives soonest, given what is booked (best when latency dominates).

Chunk by chunk, interleaved by owner: an AllGather/Broadcast tree grows from the ranks it has reached
by the hop that arrives soonest; an AllToAll chunk takes its earliest-arrival path (A*). A hop books
the first gap of its arcs or joins a transfer already booked on that link.
"""
from __future__ import annotations

import heapq

from .strategy import cheapest_path, jobs, no_route
from .timeline import EPS, Planner


def earliest(p: Planner) -> None:
    everyone = set(range(p.lt.collective.ranks))
    for chunk, src, dst in jobs(p.lt.collective):
        if dst is None:
            tree(p, chunk, src, everyone)
        else:
            path(p, chunk, src, dst)


def tree(p: Planner, chunk: int, root: int, targets: set[int]) -> None:
    """Grow ``chunk``'s multicast tree from ``root`` until it covers ``targets``."""
    node = root // p.gpn
    reached = {root: 0.0}
    entered = {node}
    heap: list[tuple[float, int, int, int]] = []
    count = 0

    def push(u: int) -> None:
        nonlocal count
        for v in p.out[u]:
            if v not in reached and p.allowed(chunk, node, u, v) and not p.reentry(u, v, entered):
                heapq.heappush(heap, (p.option(u, v, reached[u])[0], count, u, v))
                count += 1

    push(root)
    missing = set(targets) - {root}
    while missing and heap:
        est, _, u, v = heapq.heappop(heap)
        if v in reached or p.reentry(u, v, entered):
            continue
        opt = p.option(u, v, reached[u])
        if opt[0] > est + EPS:
            heapq.heappush(heap, (opt[0], count, u, v))
            count += 1
            continue
        reached[v] = p.commit(chunk, u, v, opt)
        entered.add(v // p.gpn)
        missing.discard(v)
        push(v)
    if missing:
        raise no_route(p, root, min(missing))


def path(p: Planner, chunk: int, src: int, dst: int) -> None:
    """Book ``chunk`` on the earliest-arrival path from ``src`` to ``dst`` (inside the two nodes first)."""
    def arrival(u: int, v: int, t: float) -> float:
        return p.option(u, v, t)[0]

    for scope in ({src // p.gpn, dst // p.gpn}, None):
        hops = cheapest_path(p, chunk, src, dst, arrival, scope)
        if hops is not None:
            break
    else:
        raise no_route(p, src, dst)
    t = 0.0
    for u, v in hops:   # book hop by hop: earlier hops may have taken an arc a later one wanted
        t = p.commit(chunk, u, v, p.option(u, v, t))
