"""Rail trees: one spanning out-tree per root GPU for fabrics where GPU ``i`` of every node reaches GPU
``i`` of the next over the network (a rail), the packing that stays cheap at hundreds of GPUs.

A root's tree is a chain along its rail (two half chains on many nodes, a star where a root's data is
too small to pipeline) plus a tree inside each node from the rail's GPU, so every NIC carries what the
network cut forces. Variants: spilled (NVLink-bound fabrics), relayed (a sketch's gateways) and binomial
in-node trees for reductions. Built in ``O(ranks^2)``, so greedy tries them first on large rail fabrics;
``benchmarks/synthesis.py`` compares the variants. Details: ``docs/internals.md``."""
from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from typing import Mapping, Sequence

import networkx as nx

from .packing import Edge, Packing, Tree, breadth_first, packing_ratio

SPILL_PIECES = 3          # pieces per root of a spilled rail packing
SEARCH_BUDGET = 20_000    # placements of the exact labelling search (it finds one up to ~20 GPUs in a few thousand)


def rail_trees(graph: nx.DiGraph, links: Sequence[Edge], reverse: bool = False,
               senders: Mapping[int, frozenset[int]] | None = None,
               efficiency: Mapping[str, float] | None = None, binomial: bool = False,
               shallow: bool = False, chains: int = 1, fanned: bool = False) -> Packing:
    """The rail trees of every rank over ``links`` (arguments as :func:`~autotaccl.synth.packing.pack_trees`).

    ``binomial``: reversed, reduce through binomial in-node trees, not stars; ``shallow``: across nodes a
    star (binomial, reversed) instead of a chain; ``chains``: else that many chains from the root;
    ``fanned``: enter node ``a + y`` on the rail of the root's GPU ``+ y``, so reversed each other node's
    part crosses in one network hop. On one node a root's tree is its in-node tree alone. Raises
    ValueError naming a missing link into a node or inside one."""
    gpn, ranks = graph.graph["gpus_per_node"], graph.number_of_nodes()
    nodes = ranks // gpn
    in_node = _spread_binomial(gpn) if reverse and binomial else _star(gpn)
    across = _star(nodes) if fanned or (shallow and not reverse) else \
        _spread_binomial(nodes) if shallow else _chains(nodes, chains)
    usable = {(u, v) for u, v in links if graph.has_edge(*((v, u) if reverse else (u, v)))}
    network: dict[tuple[int, int], set[Edge]] = {}        # (node, node): the links from one into the other
    for u, v in usable:
        if u // gpn != v // gpn:
            network.setdefault((u // gpn, v // gpn), set()).add((u, v))
    crossings = {}                  # per root: where its data enters each node (its hubs), and the links it takes
    for root in range(ranks):
        a = root // gpn
        hubs, edges = {0: root}, []        # keyed by node offset from the root's
        for x, y in across:
            allowed = (senders or {}).get(root) if x == 0 else None     # (fanned: a star, every x is 0)
            held = a * gpn + (root + y) % gpn if fanned else hubs[x]      # a GPU of the root's node holds it
            sender, hubs[y] = _crossing(network, held, (a + y) % nodes, gpn, allowed)
            edges.append((sender, hubs[y]))
        crossings[root] = (list(hubs.values()), edges)
    entries = Counter(hub for hubs, _ in crossings.values() for hub in hubs)
    even = len(set(entries.values())) == 1 and len(entries) == ranks
    feeds = {(hubs[0], u) for hubs, edges in crossings.values() for u, _ in edges[:1] if u != hubs[0]}
    spread = _Spread(gpn, in_node) if even or in_node != _star(gpn) else _Relayed(gpn, entries, feeds)
    trees = []
    for root, (hubs, edges) in crossings.items():
        edges = edges + [e for hub in hubs for e in spread(hub, hub == root)]
        missing = next((e for e in edges if e not in usable), None)
        if missing:
            raise ValueError(f"rail trees need the link {missing[0]} -> {missing[1]}")
        trees.append(Tree(root, breadth_first(root, edges), 1.0))
    return Packing(tuple(trees), packing_ratio(graph, trees, reverse, efficiency))


def spilled(graph: nx.DiGraph, plain: Packing, links: Sequence[Edge], reverse: bool = False,
            efficiency: Mapping[str, float] | None = None) -> Packing | None:
    """The spilled packing (:func:`_spilled`) of the ``k`` with the least ratio, of the rail trees
    ``plain`` (as :func:`rail_trees` built them over ``links``); None where none has a lower ratio, and
    on one node or uneven rails (data entering some GPUs more often, :class:`_Relayed`)."""
    gpn, ranks = graph.graph["gpus_per_node"], graph.number_of_nodes()
    entries = Counter(v for t in plain.trees for u, v in t.edges if u // gpn != v // gpn)
    entries.update(t.root for t in plain.trees)
    if ranks == gpn or len(entries) != ranks or len(set(entries.values())) != 1:
        return None
    usable = {(u, v) for u, v in links if graph.has_edge(*((v, u) if reverse else (u, v)))}
    options = [_spilled(graph, list(plain.trees), usable, k, reverse, efficiency) for k in range(1, SPILL_PIECES + 1)]
    best = min((p for p in options if p is not None), key=lambda p: p.ratio, default=None)
    return best if best is not None and best.ratio < plain.ratio else None


def _spilled(graph: nx.DiGraph, trees: list[Tree], usable: set[Edge], k: int, reverse: bool,
             efficiency: Mapping[str, float] | None) -> Packing | None:
    """``trees`` where ``k`` of every root's ``SPILL_PIECES`` pieces also cross each node boundary from
    one more GPU (the ``q``-th piece's from the GPU ``q + 1`` after the sender, to its rail peer), which
    then skips the receiving hub's copy: more network, less NVLink into each GPU. None if a link lacks."""
    gpn = graph.graph["gpus_per_node"]
    out = []
    for t in trees:
        if k < SPILL_PIECES:
            out.append(Tree(t.root, t.edges, (SPILL_PIECES - k) / SPILL_PIECES))
        for q in range(k):
            shift = 1 + q * (gpn - 1) // SPILL_PIECES
            into = {v: (u, v) for u, v in t.edges}          # each GPU's edge in, in the tree's order
            for u, v in t.edges:
                if u // gpn == v // gpn:
                    continue
                extra = (u - u % gpn + (u + shift) % gpn, v - v % gpn + (v + shift) % gpn)
                parent = into.get(extra[1])
                if extra not in usable or parent is None or parent[0] // gpn != v // gpn:
                    return None
                into[extra[1]] = extra
            out.append(Tree(t.root, breadth_first(t.root, list(into.values())), 1 / SPILL_PIECES))
    return Packing(tuple(out), packing_ratio(graph, out, reverse, efficiency))


class _Spread:
    """The in-node tree from a hub: ``shape`` (offsets from the hub) rotated to it."""

    def __init__(self, gpn: int, shape: Sequence[tuple[int, int]]) -> None:
        self.gpn, self.shape = gpn, shape

    def __call__(self, hub: int, own: bool = True) -> list[Edge]:
        """(``own``, whether the tree is the hub's own data, does not change the shape.)"""
        base, h = hub - hub % self.gpn, hub % self.gpn
        return [(base + (h + x) % self.gpn, base + (h + y) % self.gpn) for x, y in self.shape]


class _Relayed:
    """In-node trees where data enters some GPUs more often than others (a sketch's network gateways):
    a GPU that is the hub of more trees than the node's average hands each extra tree to a relay of its
    node, and the two split the copies so that their sends even out; the others are stars. The relay and
    each copy's sender are chosen on the least loaded connections (a connection moves one transfer at a
    time), and a connection that feeds a gateway (a root's data to the GPU that takes it off the node)
    carries nothing else, so the NIC is never starved. With TACCL's sk1-dgx2-n2, where one GPU of each
    pair receives from the network, stars would make it send 45 copies in its node against its
    pair-mate's 15; relayed, no GPU sends more than 32."""

    def __init__(self, gpn: int, entries: Counter, feeds: set[Edge]) -> None:
        self.gpn, self.sends, self.load = gpn, Counter(), Counter()
        self.left = Counter({hub: count - 1 for hub, count in entries.items()})    # trees entering a hub
        self.keep = math.ceil(sum(entries.values()) / len(entries)) if entries else 0
        self.feeds = feeds
        for hub, count in entries.items():          # the trees each hub keeps as stars, counted first
            self.sends[hub] += min(count, self.keep) * (gpn - 1)
            for v in self._others(hub):
                self.load[hub, v] += min(count, self.keep) + len(feeds) * ((hub, v) in feeds)   # a feed: full

    def _others(self, hub: int) -> list[int]:
        base = hub - hub % self.gpn
        return [base + (hub + j) % self.gpn for j in range(1, self.gpn)]

    def __call__(self, hub: int, own: bool = True) -> list[Edge]:
        """The in-node tree from ``hub``, of its own data (``own``, always a star) or entering it."""
        others = self._others(hub)
        if own:
            return [(hub, v) for v in others]
        self.left[hub] -= 1
        if self.left[hub] < self.keep - 1:           # a star the hub keeps (counted already) but its feeds
            edges = [(hub, v) for v in others if (hub, v) not in self.feeds]
            for _, gateway in set(self.feeds) & {(hub, v) for v in others}:
                via = min((v for _, v in edges), key=lambda v: (self.sends[v], self.load[v, gateway]))
                edges.append((via, gateway))
                self.load[hub, gateway] -= 1
                self.load[via, gateway] += 1
                self.sends[hub] -= 1
                self.sends[via] += 1
            return edges
        relay = min(others, key=lambda v: (self.load[hub, v], self.sends[v]))
        rest = [v for v in others if v != relay]
        k = min(range(len(rest) + 1), key=lambda k: max(self.sends[hub] + 1 + k, self.sends[relay] + len(rest) - k))
        rest.sort(key=lambda v: self.load[hub, v] - self.load[relay, v])
        edges = [(hub, relay)] + [(hub, v) for v in rest[:k]] + [(relay, v) for v in rest[k:]]
        self.sends[hub] += 1 + k
        self.sends[relay] += len(rest) - k
        self.load.update(edges)
        return edges


def _crossing(network: Mapping[tuple[int, int], set[Edge]], hub: int, node: int, gpn: int,
              allowed: frozenset[int] | None) -> Edge:
    """The link that takes data held by ``hub`` into ``node``: from ``hub`` to its rail GPU there, else
    from the GPU of ``hub``'s node that follows it cyclically among those with a link into ``node`` (and
    in ``allowed``, the sketch's senders), to its lowest-numbered GPU there; the hub's in-node tree reaches
    that gateway. Raises ValueError if there is none."""
    links = network.get((hub // gpn, node), set())
    rail = node * gpn + hub % gpn
    if (allowed is None or hub in allowed) and (hub, rail) in links:
        return hub, rail
    gateways = sorted((((u - hub) % gpn, u), v) for u, v in links if allowed is None or u in allowed)
    if not gateways:
        raise ValueError(f"rail trees need a link from GPU {hub}'s node to node {node}"
                         + (f" from one of GPUs {sorted(allowed)}" if allowed is not None else ""))
    (_, sender), receiver = gateways[0]
    return sender, receiver


def _chains(n: int, ways: int = 1) -> tuple[tuple[int, int], ...]:
    """``ways`` chains from 0 over ``1 .. n-1`` split into consecutive runs: ``0 -> 1 -> ... -> n-1`` for
    one, ``0 -> 1 -> ... -> h`` and ``0 -> h+1 -> ... -> n-1`` for two."""
    ends = [round(j * (n - 1) / ways) for j in range(ways + 1)]
    return tuple((x - 1 if x > ends[j] + 1 else 0, x) for j in range(ways) for x in range(ends[j] + 1, ends[j + 1] + 1))


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
