"""The logical topology a sketch leaves for synthesis: which links may carry which chunks, at what cost.

Built from (physical topology graph, collective with chunk-up, sketch) by :func:`logical_topology`;
read by every synthesis stage (routing, ordering, scheduling, combine) and by the greedy engine.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import networkx as nx

from ..errors import InfeasibleError, InputError
from ..model.collectives import MAX_CHUNKS, Collective, make_collective
from .schema import IntranodeStrategy, Sketch, SwitchObjective


@dataclass(frozen=True)
class LogicalTopology:
    graph: nx.DiGraph                      # the physical topology (autotaccl.model.topology.build_topology)
    collective: Collective                 # chunk-up already applied
    edges: frozenset[tuple[int, int]]      # (src, dst) links the sketch allows; a subset of graph.edges
    chunk_bytes: float                     # bytes of one chunk at the size synthesis targets
    # chunk -> ranks allowed to carry it off its source node (sketch's gpus_to_sender_rev_map); absent = any
    senders: Mapping[int, frozenset[int]] = field(default_factory=dict)
    symmetry: tuple[tuple[int, int], ...] = ()   # [offset, size] rotations (taccl.md §4.7)
    enforce_ordering: bool = False         # a sender's own chunks cross the network before relayed ones
    intranode_strategy: IntranodeStrategy = "none"
    switch_objective: SwitchObjective = "uc-min"     # only with the switch strategy

    def cost_us(self, src: int, dst: int, chunks: int = 1) -> float:
        """Time for ``chunks`` chunks on one link when nothing else shares it: alpha + bytes / bandwidth."""
        edge = self.graph.edges[src, dst]
        return edge["alpha_us"] + chunks * self.chunk_bytes / (edge["bandwidth_GBps"] * 1e3)

    def resources(self, src: int, dst: int) -> tuple:
        """The shared capacity-graph arcs a transfer on (src, dst) occupies."""
        return self.graph.edges[src, dst]["resources"]


def logical_topology(graph: nx.DiGraph, collective: str | Collective, sketch: Sketch, size: float) -> LogicalTopology:
    """The links, senders and symmetry the sketch allows on ``graph``, for ``size``-byte buffers.

    ``collective`` is a name or a :class:`Collective`; the sketch's ``input_chunkup`` is applied.
    Raises InputError for sketch fields the topology cannot satisfy (node count, GPU indices) and
    InfeasibleError when the sketch names an inter-node pair the hardware cannot connect.
    """
    src = sketch.source
    gpn, nodes = graph.graph["gpus_per_node"], graph.graph["nodes"]
    ranks = gpn * nodes
    if sketch.nnodes != nodes:
        raise InputError(src, "nnodes", f"{nodes} (the topology {graph.graph.get('name', '')} has {nodes} node(s))")
    local = f"a local GPU index in 0..{gpn - 1}"

    def check(g: int, where: str) -> int:
        if not 0 <= g < gpn:
            raise InputError(src, where, local)
        return g

    for i, members in enumerate(sketch.switches):
        for j, g in enumerate(members):
            check(g, f"intranode_sketch.switches[{i}][{j}]")
    conn = sketch.connections(gpn)
    if isinstance(sketch.internode_conn, tuple):
        for s, receivers in sketch.internode_conn:
            check(s, f"internode_sketch.internode_conn.{s}")
            for j, r in enumerate(receivers):
                check(r, f"internode_sketch.internode_conn.{s}[{j}]")
    for s, gpus in sketch.sender_map or ():
        check(s, f"internode_sketch.gpus_to_sender_rev_map.{s}")
        for j, g in enumerate(gpus):
            check(g, f"internode_sketch.gpus_to_sender_rev_map.{s}[{j}]")
    for i, (offset, size_) in enumerate(sketch.symmetry_offsets):
        if size_ > ranks or ranks % size_:
            raise InputError(src, f"symmetry_offsets[{i}][1]", f"a divisor of the rank count {ranks}")

    if isinstance(collective, str):
        coll = make_collective(collective, ranks, sketch.input_chunkup)
    else:
        if collective.ranks != ranks:
            raise InputError(src, "collective", f"a collective on {ranks} ranks (it has {collective.ranks})")
        coll = collective.with_chunkup(sketch.input_chunkup)
    if coll.num_chunks > MAX_CHUNKS:
        raise InputError(src, "hyperparameters.input_chunkup", f"a chunk-up that keeps {coll.name} on {ranks} ranks "
                                                               f"within {MAX_CHUNKS} chunks ({coll.num_chunks})")

    edges: set[tuple[int, int]] = set()
    groups = [set(m) for m in sketch.switches] if sketch.intranode_strategy == "switch" else None
    for u, v in graph.edges:
        if u // gpn != v // gpn:
            continue
        if groups is None or any(u % gpn in g and v % gpn in g for g in groups):
            edges.add((u, v))
    for a in range(nodes):
        for b in range(nodes):
            if a == b:
                continue
            for s, receivers in conn.items():
                for r in receivers:
                    u, v = a * gpn + s, b * gpn + r
                    if not graph.has_edge(u, v):
                        raise InfeasibleError(
                            f"{src}: internode_conn {s}->{r}: the topology has no link from rank {u} (node {a}) "
                            f"to rank {v} (node {b})")
                    edges.add((u, v))

    senders: dict[int, frozenset[int]] = {}
    if sketch.sender_map is not None and nodes > 1:
        carriers: dict[int, set[int]] = {}
        for s, gpus in sketch.sender_map:
            for g in gpus:
                carriers.setdefault(g, set()).add(s)
        for c in range(coll.num_chunks):
            # reductions run the AllGather backwards: slot c is gathered at (and scattered from) rank c // chunkup
            owner = c // coll.chunkup if coll.is_reduction else min(coll.precondition(c))
            if owner % gpn in carriers:
                base = owner - owner % gpn
                senders[c] = frozenset(base + s for s in carriers[owner % gpn])
    return LogicalTopology(graph=graph, collective=coll, edges=frozenset(edges), chunk_bytes=coll.chunk_bytes(size),
                           senders=senders, symmetry=sketch.symmetry_offsets, enforce_ordering=sketch.enforce_ordering,
                           intranode_strategy=sketch.intranode_strategy, switch_objective=sketch.switch_objective)

