"""What a greedy strategy is, and what the strategies share: the order chunks are placed in, the
cheapest-path search over the sketch's links, and the error for a chunk with no route.

A strategy books every chunk of a copy collective (AllGather, Broadcast or AllToAll; reductions are
built from AllGathers by :mod:`.schedule`) on a :class:`~.timeline.Planner`'s timelines. To add one,
write its ``book(planner)`` and list it in :data:`.strategies.STRATEGIES`.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable

from ...errors import InfeasibleError
from ...model.collectives import Collective
from .timeline import EPS, Planner

BIG = 50_000    # (chunks x links) beyond which the costlier searches and variants are skipped (64 GPUs: seconds)


@dataclass(frozen=True)
class Strategy:
    """``book(planner)`` books every chunk of ``planner.lt.collective`` or raises :class:`NotApplicable`.

    ``routed``: it routes chunk by chunk, so batching changes the result and both are tried;
    ``small_only``: skipped on instances beyond :data:`BIG` (its searches cost the most).
    """
    book: Callable[[Planner], None]
    routed: bool = True
    small_only: bool = False


class NotApplicable(Exception):
    """A structured strategy does not fit this sketch (the other strategies still do)."""


def no_route(planner: Planner, src: int, dst: int) -> InfeasibleError:
    return InfeasibleError(f"no route from GPU {src} to GPU {dst} (node {dst // planner.gpn}) under this sketch")


def jobs(coll: Collective) -> list[tuple[int, int, int | None]]:
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


def cheapest_path(planner: Planner, chunk: int, src: int, dst: int, cost: Callable[[int, int, float], float],
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
