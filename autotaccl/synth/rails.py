"""Rail trees: one spanning out-tree per root GPU for multi-node fabrics where GPU ``i`` of every node
reaches GPU ``i`` of the next over the network (a rail), the packing that stays cheap at hundreds of GPUs.

The tree of GPU ``i`` of node ``a`` is a chain along its rail (node ``a`` to ``a + 1`` to ... to
``a - 1``, GPU ``i`` each time) and, in every node, GPU ``i``'s star to the node's other GPUs. Every
NIC sends and receives ``nodes - 1`` units (one per other node's root on its rail), which is what the
network cut forces on any AllGather, and every root's data crosses each node boundary once. The chain
is deep, but the runtime pipelines every transfer in slices (the simulator's rounds), so its depth
costs a few slices; a tree with fewer hops would give each NIC many more peers.

Built in ``O(ranks^2)``, where the column generation of :mod:`autotaccl.synth.packing` takes minutes
beyond ~100 GPUs; on DGX-H100 x8 it also simulates faster (99.5% of the attainable bound at 1 GiB
against 92%), so the greedy engine tries both.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import networkx as nx

from .packing import Edge, Packing, Tree, packing_ratio


def rail_trees(graph: nx.DiGraph, links: Sequence[Edge], reverse: bool = False,
               senders: Mapping[int, frozenset[int]] | None = None,
               efficiency: Mapping[str, float] | None = None) -> Packing:
    """The rail trees of every rank over ``links`` (arguments as :func:`~autotaccl.synth.packing.pack_trees`).

    Raises ValueError naming what is missing: more than one node, a rail or star link, or a root that
    may not send its own data off its node."""
    gpn, ranks = graph.graph["gpus_per_node"], graph.number_of_nodes()
    nodes = ranks // gpn
    if nodes < 2:
        raise ValueError("rail trees need more than one node")
    usable = {(u, v) for u, v in links if graph.has_edge(*((v, u) if reverse else (u, v)))}
    trees = []
    for root in range(ranks):
        a, i = divmod(root, gpn)
        if senders and root in senders and root not in senders[root]:
            raise ValueError(f"GPU {root} may not carry its own data off its node")
        rail = [((a + j) % nodes) * gpn + i for j in range(nodes)]
        edges = list(zip(rail, rail[1:]))
        edges += [(hub, hub - i + x) for hub in rail for x in range(gpn) if x != i]
        missing = next((e for e in edges if e not in usable), None)
        if missing:
            raise ValueError(f"rail trees need the link {missing[0]} -> {missing[1]}")
        trees.append(Tree(root, tuple(edges), 1.0))
    return Packing(tuple(trees), packing_ratio(graph, trees, reverse, efficiency))
