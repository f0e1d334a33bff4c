"""Schedules through a switch that reduces (NVLink SHARP, the profile's ``nccl.nvls``): the greedy
engine's candidates with switch operations (``Transfer.group``, :mod:`autotaccl.model.algorithm`).

Local GPU ``j`` of every node serves the cells of the ranks with local index ``j`` (its rail). For each
cell, piece by piece so that switch and network overlap: (1) in every node the serving GPU load-reduces
the cell (``switch_reduce``); (2) across nodes the node sums meet at the owner over the rail and, for
AllReduce, come back the same way; (3) in every node the serving GPU stores the cell (``switch_broadcast``).
On one node that is NCCL's NVLS; across nodes its NVLS-tree with the tree replaced by the direct exchange
on the rails. Where each wins: ``benchmarks/synthesis.py``.
"""
from __future__ import annotations

from typing import Iterator

from ...model.algorithm import Algorithm, Transfer
from ...model.collectives import Collective
from ...model.switch import COLLECTIVES
from ...model.topology import reducing_switch
from ...sketch.logical import LogicalTopology
from .strategy import NotApplicable

PIECES = (1, 4, 16, 64, 128, 256, 512)  # each owner's cells cut into this many pieces across nodes (more: the
                                        # switch and the rails overlap on smaller ones, more operations)
MAX_NODES = 8              # the direct exchange across nodes moves (nodes - 1) transfers per cell and rail
MAX_OPERATIONS = 20_000    # transfers per candidate


def switch_schedules(lt: LogicalTopology) -> Iterator[tuple[str, Algorithm]]:
    """``(label, algorithm)`` of every switch schedule of ``lt.collective``, fewest pieces first (on one node
    only one piece: a cell's load-reduce and store are one glres, so pieces would pipeline nothing). Raises
    NotApplicable where the switch cannot run it (another collective, no switch that reduces spans a node's
    GPUs, more than ``MAX_NODES`` nodes, a rail hop the sketch does not allow)."""
    coll, graph = lt.collective, lt.graph
    gpn, nodes = graph.graph["gpus_per_node"], graph.graph["nodes"]
    if coll.name not in COLLECTIVES:
        raise NotApplicable(f"the switch runs {', '.join(COLLECTIVES)}, not {coll.name}")
    if any(reducing_switch(graph, range(n * gpn, (n + 1) * gpn)) is None for n in range(nodes)):
        raise NotApplicable("no switch that reduces (nccl.nvls) joins every GPU of a node")
    if nodes > MAX_NODES:
        raise NotApplicable(f"the direct exchange on the rails is for at most {MAX_NODES} nodes")
    for u in range(coll.ranks):
        for n in range(nodes):
            v = n * gpn + u % gpn
            if v != u and ((u, v) not in lt.edges or (v, u) not in lt.edges):
                raise NotApplicable(f"the sketch allows no rail hop between GPUs {u} and {v}")
    where = "switch rails" if nodes > 1 else "switch"
    made = False
    for pieces in PIECES if nodes > 1 else PIECES[:1]:
        if made and coll.ranks * pieces * (4 * nodes - 2) > MAX_OPERATIONS:
            break
        algorithm = switch_schedule(lt, (1,) * pieces)
        made = True
        yield f"{where} in {pieces} pieces", algorithm


def switch_schedule(lt: LogicalTopology, sizes: tuple[int, ...]) -> Algorithm:
    """The switch schedule (module docstring) with every owner's cells in ``len(sizes)`` pieces, piece
    ``j`` ``sizes[j]`` units of the collective's chunk-up. Not verified here (replaying a reduction over
    a large switch costs more than building it): :func:`~.select.greedy` verifies the one it chooses."""
    base, graph = lt.collective, lt.graph
    gpn, nodes = graph.graph["gpus_per_node"], graph.graph["nodes"]
    k = base.chunkup * sum(sizes)
    coll = Collective(base.name, base.ranks, k, base.root)
    name = coll.name
    groups = [tuple(range(n * gpn, (n + 1) * gpn)) for n in range(nodes)]
    starts = [base.chunkup * sum(sizes[:j]) for j in range(len(sizes) + 1)]
    transfers: list[Transfer] = []
    step = 0
    for piece in range(len(sizes)):
        for owner in range(coll.ranks):
            cell = tuple(owner * k + c for c in range(starts[piece], starts[piece + 1]))
            home, j = divmod(owner, gpn)
            servers = [n * gpn + j for n in range(nodes)]
            if name != "allgather":
                transfers += [Transfer(cell, s, s, step, "switch_reduce", group=groups[n]) for n, s in enumerate(servers)]
                transfers += [Transfer(cell, s, owner, step + 1, "reduce") for s in servers if s != owner]
            if name != "reducescatter":
                transfers += [Transfer(cell, owner, s, step + 2, "copy") for s in servers if s != owner]
                transfers += [Transfer(cell, s, s, step + 3, "switch_broadcast", group=groups[n])
                              for n, s in enumerate(servers)]
        step += 4
    transfers.sort(key=lambda t: t.step)      # stable: every piece's phases in turn
    steps = {s: i for i, s in enumerate(sorted({t.step for t in transfers}))}
    return Algorithm(f"{name}-{graph.graph.get('name', 'topology')}-switch", coll,
                     tuple(t.at_step(steps[t.step]) for t in transfers), graph.graph.get("name", ""),
                     {"engine": "greedy", "strategy": "switch", "pieces": len(sizes), "order": "piece",
                      "chunk_bytes": lt.chunk_bytes / sum(sizes)})
