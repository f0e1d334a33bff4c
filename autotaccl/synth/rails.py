"""Rail trees: one spanning out-tree per root GPU for fabrics where GPU ``i`` of every node reaches GPU
``i`` of the next over the network (a rail), the packing that stays cheap at hundreds of GPUs.

The tree of GPU ``i`` of node ``a`` is a chain along its rail (node ``a`` to ``a + 1`` to ... to
``a - 1``, GPU ``i`` each time) and, in every node, a tree from GPU ``i`` (the hub) to the node's other
GPUs. Every NIC sends and receives ``nodes - 1`` units (one per other node's root on its rail), which is
what the network cut forces on any AllGather, and every root's data crosses each node boundary once. The
chain is deep, but the runtime pipelines every transfer in slices (the simulator's rounds), so its depth
costs a few slices; a tree with fewer hops gives each NIC many more peers, so it is built (``shallow``:
a star from the root across the rail, a binomial tree for reductions) only where a root's data is too
small to pipeline. On one node (a switch domain such as GB200 NVL72) a tree is its hub's in-node tree
alone.

The in-node tree is a star, rotated so that at any moment the GPUs send to different hubs, except for
the reversed trees of a reduction across nodes: reduces into one buffer go one at a time, and a
hub's sum can leave over the network only once its whole fan-in is in, so a star's ``gpn - 1`` serial
reduces would idle the NICs at the start; a binomial tree's take ``ceil(log2 gpn)``
(:func:`_spread_binomial`). On two DGX-H100, ReduceScatter at 1 GiB reaches 91.2% of the attainable
bound with it, 88.6% with the rotated star, 84.4% unrotated. On one node, where no NIC waits, the
pipelined star does better at large sizes (GB200 NVL72 at 1 GiB: 97.9% against 95.5%, AllReduce 98.9%
against 74%), but where a root's data is a single slice nothing hides the fan-in's serial latency
(DGX-2 ReduceScatter at 1 MiB: 34 µs binomial, 93 µs star); :func:`~autotaccl.synth.greedy.forest.rails`
chooses.

Built in ``O(ranks^2)``, where the column generation of :mod:`autotaccl.synth.packing` takes minutes
beyond ~100 GPUs; on DGX-H100 x8 it also simulates faster (99.5% of the attainable bound at 1 GiB
against 92%), so the greedy engine tries the rails first.
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Mapping, Sequence

import networkx as nx

from .packing import Edge, Packing, Tree, packing_ratio

SEARCH_BUDGET = 20_000    # placements of the exact labelling search (it finds one up to ~20 GPUs in a few thousand)


def rail_trees(graph: nx.DiGraph, links: Sequence[Edge], reverse: bool = False,
               senders: Mapping[int, frozenset[int]] | None = None,
               efficiency: Mapping[str, float] | None = None, binomial: bool = False,
               shallow: bool = False) -> Packing:
    """The rail trees of every rank over ``links`` (arguments as :func:`~autotaccl.synth.packing.pack_trees`);
    ``binomial``: reversed, reduce through binomial in-node trees (:func:`_spread_binomial`), not stars;
    ``shallow``: across nodes, not a chain but a star (a binomial tree, reversed) over the rail's GPUs.

    On one node (a switch domain such as GB200 NVL72) a root's tree is its in-node tree alone. Raises
    ValueError naming what is missing: a rail or in-node link, or a root that may not send its own data
    off its node."""
    gpn, ranks = graph.graph["gpus_per_node"], graph.number_of_nodes()
    nodes = ranks // gpn
    in_node = _spread_binomial(gpn) if reverse and binomial else _star(gpn)
    across = (_spread_binomial(nodes) if reverse else _star(nodes)) if shallow else _chain(nodes)
    usable = {(u, v) for u, v in links if graph.has_edge(*((v, u) if reverse else (u, v)))}
    trees = []
    for root in range(ranks):
        a, i = divmod(root, gpn)
        if senders and root in senders and root not in senders[root]:
            raise ValueError(f"GPU {root} may not carry its own data off its node")
        rail = [((a + j) % nodes) * gpn + i for j in range(nodes)]
        edges = [(rail[x], rail[y]) for x, y in across]
        edges += [(hub - i + (i + x) % gpn, hub - i + (i + y) % gpn) for hub in rail for x, y in in_node]
        missing = next((e for e in edges if e not in usable), None)
        if missing:
            raise ValueError(f"rail trees need the link {missing[0]} -> {missing[1]}")
        trees.append(Tree(root, tuple(edges), 1.0))
    return Packing(tuple(trees), packing_ratio(graph, trees, reverse, efficiency))


def _chain(n: int) -> tuple[tuple[int, int], ...]:
    """``0 -> 1 -> ... -> n-1``."""
    return tuple((x, x + 1) for x in range(n - 1))


def _star(n: int) -> tuple[tuple[int, int], ...]:
    """The star over ``n`` GPUs, as offsets from its hub (0): every copy straight from the hub."""
    return tuple((0, x) for x in range(1, n))


@lru_cache(maxsize=None)
def _spread_binomial(n: int) -> tuple[tuple[int, int], ...]:
    """The reduction tree over ``n`` GPUs, as offsets from its hub (0), parents first: a binomial tree,
    whose reduction into the hub takes ``ceil(log2 n)`` serial steps. Its labels are chosen
    so that edges share an offset (child - parent mod ``n``) as little as possible: rotated to every hub,
    an ordered GPU pair then carries one edge, as with the star (two, for a few pairs, where no such
    labelling exists, on 4 or 5 GPUs, or the exact search gives up, beyond ~20)."""
    shape = _binomial(n)
    label = _distinct_offsets(shape, n, SEARCH_BUDGET)
    if label is None:                       # greedy: each child where its offset is least used so far
        label, used = {0: 0}, Counter()
        for parent, child in shape:
            free = sorted(set(range(1, n)) - set(label.values()))
            label[child] = min(free, key=lambda x: used[(x - label[parent]) % n])
            used[(label[child] - label[parent]) % n] += 1
    return tuple((label[u], label[v]) for u, v in shape)


def _distinct_offsets(shape: list[tuple[int, int]], n: int, budget: int) -> dict[int, int] | None:
    """Labels ``0 .. n-1`` for ``shape``'s vertices (0 stays 0) whose edges all have distinct offsets, by
    depth-first search within ``budget`` placements; None if none was found."""
    label, offsets, tries = {0: 0}, set(), budget

    def place(k: int) -> bool:
        nonlocal tries
        if k == len(shape):
            return True
        tries -= 1
        if tries < 0:
            return False
        parent, child = shape[k]
        for x in sorted(set(range(1, n)) - set(label.values())):
            offset = (x - label[parent]) % n
            if offset not in offsets:
                label[child] = x
                offsets.add(offset)
                if place(k + 1):
                    return True
                offsets.discard(offset)
                del label[child]
        return False

    return label if place(0) else None


def _binomial(n: int) -> list[tuple[int, int]]:
    """A binomial tree on ``0 .. n-1`` rooted at 0, parents first."""
    out, bit = [], 1 << max(0, (n - 1).bit_length() - 1)
    while bit:
        out += [(x, x + bit) for x in range(0, n, 2 * bit) if x + bit < n]
        bit >>= 1
    return out
