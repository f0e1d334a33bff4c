"""Which links each chunk may cross: the sketch's rules, then the paths within ``slack`` hops of the
shortest route inside the sketch."""
from __future__ import annotations

from collections import deque
from typing import Mapping

from ...errors import InfeasibleError
from ...sketch.logical import LogicalTopology


def chunk_edges(lt: LogicalTopology, chunk: int, slack: int = 0) -> list[tuple[int, int]]:
    """The (src, dst) links chunk ``chunk`` may cross: sketch rules, then the slack-limited path set.

    Raises InfeasibleError naming the chunk, the unreachable rank and why.
    """
    coll, g = lt.collective, lt.graph
    gpn = g.graph["gpus_per_node"]
    pre, post = coll.precondition(chunk), coll.postcondition(chunk)
    if len(pre) != 1:
        raise ValueError(f"routing needs one source per chunk; {coll.name} has {len(pre)} (use combine)")
    (src,) = pre
    home = src // gpn
    nodes = {r // gpn for r in pre | post}
    senders = lt.senders.get(chunk)
    allowed = []
    for u, v in lt.edges:
        nu, nv = u // gpn, v // gpn
        if nu not in nodes or nv not in nodes or v == src:
            continue
        if nu != nv:
            if nv == home:                                  # never come back into the source node
                continue
            if nu == home and senders is not None and u not in senders:
                continue
        allowed.append((u, v))
    out_adj: dict[int, list[int]] = {}
    in_adj: dict[int, list[int]] = {}
    for u, v in allowed:
        out_adj.setdefault(u, []).append(v)
        in_adj.setdefault(v, []).append(u)
    d_src = _bfs(src, out_adj)
    for r in sorted(post - {src}):
        if r not in d_src:
            raise InfeasibleError(_why_unreachable(lt, chunk, src, r, senders))
    # distance of every rank to each destination (reverse BFS)
    targets = sorted(post - {src})
    d_to = {q: _bfs(q, in_adj) for q in targets}
    keep = []
    for u, v in allowed:
        if u not in d_src:
            continue
        if any(v in d_to[q] and d_src[u] + 1 + d_to[q][v] <= d_src[q] + slack for q in targets):
            keep.append((u, v))
    return sorted(keep)


def _bfs(start: int, adj: Mapping[int, list[int]]) -> dict[int, int]:
    dist = {start: 0}
    todo = deque([start])
    while todo:
        u = todo.popleft()
        for v in adj.get(u, ()):
            if v not in dist:
                dist[v] = dist[u] + 1
                todo.append(v)
    return dist


def _why_unreachable(lt: LogicalTopology, chunk: int, src: int, dst: int, senders) -> str:
    gpn = lt.graph.graph["gpus_per_node"]
    if src // gpn != dst // gpn:
        out = sorted(u for u, v in lt.edges if u // gpn == src // gpn and v // gpn == dst // gpn)
        if not out:
            return (f"chunk {chunk} cannot go from rank {src} to rank {dst}: the sketch allows no link from node "
                    f"{src // gpn} to node {dst // gpn}")
        if senders is not None and not set(out) & set(senders):
            return (f"chunk {chunk} cannot go from rank {src} to rank {dst}: the sender map lets it leave node "
                    f"{src // gpn} only through rank(s) {sorted(senders)}, but the sketch's links to node "
                    f"{dst // gpn} start at rank(s) {out}")
    return (f"chunk {chunk} cannot go from rank {src} to rank {dst}: the sketch's links do not connect them "
            f"({len(lt.edges)} links allowed)")
