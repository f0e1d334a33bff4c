"""``doubling`` / ``relay``: Bruck exchanges where the sketch makes nodes complete graphs (switches).

``doubling`` exchanges ever larger blocks across nodes between same-index peers, then inside every
node; ``relay`` gathers each node, crosses over the sketch's sender->receiver pairs and gathers again.
Both build AllGathers and raise NotApplicable where the sketch lacks the links they need.
"""
from __future__ import annotations

from ...errors import InfeasibleError
from .booking import Phase, book_phases
from .strategy import NotApplicable
from .timeline import Planner


def doubling(planner: Planner) -> None:
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
            phases.append(bruck(peers, own))
    held = {r: [c for n in range(nodes) for c in own[n * gpn + r % gpn]] for r in range(coll.ranks)}
    phases += [bruck(members, held) for members in complete_nodes(planner, nodes)]
    # inter-node phases run side by side, then the intra-node ones: merge their steps
    split = gpn if nodes > 1 else 0
    arrival: dict[tuple[int, int], float] = {}
    book_phases(planner, phases[:split], arrival)
    book_phases(planner, phases[split:], arrival)


def relay(planner: Planner) -> None:
    """AllGather through the sketch's relays: Bruck inside each node, then every node's chunks cross to
    every other node spread over the sketch's sender->receiver pairs (senders respected, loads balanced),
    then Bruck inside each node over what arrived."""
    coll = planner.lt.collective
    gpn, k = planner.gpn, coll.chunkup
    nodes = coll.ranks // gpn
    if coll.name != "allgather" or nodes < 2:
        raise NotApplicable("relay builds multi-node AllGathers")
    groups = complete_nodes(planner, nodes)
    own = {r: list(range(r * k, r * k + k)) for r in range(coll.ranks)}
    arrival: dict[tuple[int, int], float] = {}
    book_phases(planner, [bruck(m, own) for m in groups], arrival)
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
    book_phases(planner, [[crossings]], arrival)
    book_phases(planner, [bruck(m, received) for m in groups], arrival)


def bruck(members: list[int], blocks: dict[int, list[int]]) -> Phase:
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


def complete_nodes(planner: Planner, nodes: int) -> list[list[int]]:
    gpn = planner.gpn
    out = []
    for n in range(nodes):
        members = list(range(n * gpn, (n + 1) * gpn))
        if any(u != v and (u, v) not in planner.arcs for u in members for v in members):
            raise NotApplicable(f"node {n} is not a complete graph under the sketch")
        out.append(members)
    return out
