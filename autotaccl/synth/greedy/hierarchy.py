"""``hierarchy``: AllGather/Broadcast routes that share structure, so list scheduling batches them."""
from __future__ import annotations

import heapq

from ...errors import InfeasibleError
from .booking import Route, list_schedule
from .strategy import NotApplicable, jobs
from .timeline import EPS, Planner


def hierarchy(planner: Planner) -> None:
    list_schedule(planner, routes(planner))


def routes(planner: Planner) -> list[Route]:
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
    for chunk, owner, _ in jobs(coll):
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
