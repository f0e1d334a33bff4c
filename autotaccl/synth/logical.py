"""The logical topology a sketch leaves for synthesis: which links may carry which chunks, at what cost.

Built from (physical topology graph, collective with chunk-up, sketch) by :func:`autotaccl.sketch.logical_topology`;
read by every synthesis stage (routing, ordering, scheduling, combine) and by the greedy engine.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import networkx as nx

from ..collectives import Collective


@dataclass(frozen=True)
class LogicalTopology:
    graph: nx.DiGraph                      # the physical topology (autotaccl.topology.build_topology)
    collective: Collective                 # chunk-up already applied
    edges: frozenset[tuple[int, int]]      # (src, dst) links the sketch allows; a subset of graph.edges
    chunk_bytes: float                     # bytes of one chunk at the size synthesis targets
    # chunk -> ranks allowed to carry it off its source node (sketch's gpus_to_sender_rev_map); absent = any
    senders: Mapping[int, frozenset[int]] = field(default_factory=dict)
    symmetry: tuple[tuple[int, int], ...] = ()   # [offset, size] rotations (taccl.md §4.7)
    enforce_ordering: bool = False         # a sender's own chunks cross the network before relayed ones
    intranode_strategy: str = "none"       # none | switch | minmax | maxmin
    switch_objective: str = "uc-min"       # uc-min | uc-max (only with the switch strategy)

    def cost_us(self, src: int, dst: int, chunks: int = 1) -> float:
        """Time for ``chunks`` chunks on one link when nothing else shares it: alpha + bytes / bandwidth."""
        edge = self.graph.edges[src, dst]
        return edge["alpha_us"] + chunks * self.chunk_bytes / (edge["bandwidth_GBps"] * 1e3)

    def resources(self, src: int, dst: int) -> tuple:
        """The shared capacity-graph arcs a transfer on (src, dst) occupies."""
        return self.graph.edges[src, dst]["resources"]
