"""Booking routes a strategy has decided: fixed hop lists by list scheduling, or steps of exchanges."""
from __future__ import annotations

import heapq

from .timeline import EPS, Planner

Route = tuple[int, int, list[tuple[int, int]]]              # (chunk, root, hops)
Phase = list[list[tuple[int, int, list[int]]]]               # steps of (src, dst, chunks)


def list_schedule(planner: Planner, routes: list[Route]) -> None:
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


def book_phases(planner: Planner, phases: list[Phase], arrival: dict[tuple[int, int], float]) -> None:
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

