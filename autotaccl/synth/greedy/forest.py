"""The tree candidates of the greedy engine: pipelined schedules of spanning out-trees that reach the
bandwidth bound at large sizes on switched fabrics, from the optimal packing (:mod:`autotaccl.synth.packing`)
or the rail trees (:mod:`autotaccl.synth.rails`).

Each root's buffer is cut into pieces handed to its trees by weight and interleaved, so every tree sends all
the time (:func:`lower`); ReduceScatter runs the reversed packing backwards, AllReduce adds the forward
AllGather (:mod:`autotaccl.synth.reductions`). AllToAll and Broadcast get no candidate here. How pieces
and channels are chosen: ``docs/internals.md``."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterator

from ...model.algorithm import Algorithm, Transfer, verify
from ...model.collectives import Collective
from ...model.topology import fingerprint
from ...simulate import link_efficiency, protocol_terms, rounds, transfer_times
from ...sketch.logical import LogicalTopology
from ..packing import Packing, Tree, pack_trees
from ..rails import SPILL_PIECES, rail_trees, spilled
from ..reductions import by_readiness, reverse_gather, sequence
from .schedule import assign_steps, critical_first
from .strategy import NotApplicable

MAX_TRANSFERS = 100_000    # pieces x channels x tree edges: what the simulator replays in seconds
MAX_PIECES = 4             # per root: enough to apportion it among its trees; the runtime pipelines each piece
MIN_PIECES = 4             # fewer (more than ~150 ranks within the budget) and the weights are too coarse
MIN_PIECE_BYTES = 256 << 10   # smaller pieces pay more latency than their pipelining saves
MAX_CHANNELS = 4           # one thread block per channel and peer on each rank
MAX_SHALLOW_NODES = 16    # a shallow rail tree gives each NIC nodes - 1 peers
MAX_CHAIN_NODES = 16      # beyond, a rail is two chains from the root
MAX_RAIL_EDGES = 600_000   # tree edges x halves (each on its channels): an AllReduce on 512 GPUs has 523 264
ONE_SLICE_PIECES = 2       # an AllGather's rails cut where a root's data is one slice (more: too many XML nodes)
ONE_SLICE_REDUCTION_PIECES = 8   # a reduction's rails in slices where a root's data is one slice, at most
SLICED_CHANNELS = 1        # the rails in slices: one chunk per piece; the instances fill the NICs
MAX_SLICED_PIECES = 64     # per root, for the rails in slices (16 GPUs: 15 360 transfers a half)
MAX_SCALE_TRANSFERS = 1_100_000   # the rails in slices beyond MAX_TRANSFERS: AllReduce on 512 GPUs in 2 has 1 046 528
TAPER_FROM = 16            # a ReduceScatter's rails in slices from this many pieces on: the first and last ones smaller
TAPER = (1, 1, 2, 2)       # the chunks of the first pieces (and, reversed, of the last); 4 each in between
HALVES = {"allgather": (False,), "reducescatter": (True,), "allreduce": (True, False)}
_CACHE: dict[tuple, Packing] = {}


def forest(lt: LogicalTopology) -> Algorithm:
    """The tree-packing schedule of AllGather, ReduceScatter or AllReduce on ``lt``, cut for the size it
    targets (``lt.chunk_bytes``), verified."""
    halves = _halves(lt)
    ranks = lt.collective.ranks
    if budget(ranks) < MIN_PIECES:
        raise NotApplicable(f"{ranks} ranks leave fewer than {MIN_PIECES} pieces per root within "
                            f"{MAX_TRANSFERS} transfers: too coarse a split of the trees' weights")
    return _schedule(lt, [packing(lt, reverse) for reverse in halves], "trees")


def rails(lt: LogicalTopology) -> Algorithm:
    """The schedule of the rail trees (:func:`rail_schedules`' first)."""
    return next(rail_schedules(lt))[1]


def rail_schedules(lt: LogicalTopology) -> Iterator[tuple[str, Algorithm]]:
    """The schedules of the rail trees (:mod:`autotaccl.synth.rails`), each with its name: "rails" (one piece),
    "wide rails" (:func:`_wide_rails`), "spilled rails" (``SPILL_PIECES`` pieces, where spilling lowers
    the packing's ratio) and "rails in pieces" (an AllGather whose root's data is one slice:
    ``ONE_SLICE_PIECES`` pieces).

    Where a root's data is one slice the rails are shallow (up to ``MAX_SHALLOW_NODES``) with binomial
    in-node reductions (an AllReduce keeps chains, for the thread-block budget); larger, chains (two
    beyond ``MAX_CHAIN_NODES``). ``benchmarks/synthesis.py`` measures these choices."""
    halves, packs, one_slice = _rail_packs(lt)
    ranks = lt.collective.ranks
    yield "rails", _schedule(lt, packs, "rails", pieces=1)
    if one_slice and not _few_nodes(lt):
        yield "wide rails", _wide_rails(lt)
    spills = _spilled(lt, halves, packs)
    if spills:
        yield "spilled rails", _schedule(lt, spills, "rails", pieces=SPILL_PIECES)
    if one_slice and lt.collective.name == "allgather" and budget(ranks) >= ONE_SLICE_PIECES:
        yield "rails in pieces", _schedule(lt, packs, "rails", pieces=ONE_SLICE_PIECES)


def sliced_rails(lt: LogicalTopology) -> Iterator[Algorithm]:
    """A reduction's rail trees in pieces on one channel (the instances fill the links): the most pieces the
    transfer budget allows, then fewer (five sixths, half, down to two) for a runtime that loads fewer.

    One slice per root: up to ``ONE_SLICE_REDUCTION_PIECES`` pieces in dependency order (fanned across more
    than two nodes); larger, up to ``MAX_SLICED_PIECES`` listed local first (a ReduceScatter's tapered from
    ``TAPER_FROM``); hundreds of GPUs: a piece per slice within ``MAX_SCALE_TRANSFERS``, critical chain first.
    Where each wins: ``benchmarks/synthesis.py``. Raises NotApplicable for an AllGather, beyond one slice
    on one node, and for fewer than two pieces."""
    halves, coll = _halves(lt), lt.collective
    per_root = lt.chunk_bytes * coll.chunkup
    one_slice = _one_slice(lt)
    nodes = coll.ranks // lt.graph.graph["gpus_per_node"]
    if not coll.is_reduction or (coll.ranks == lt.graph.graph["gpus_per_node"] and not one_slice):
        raise NotApplicable("rails in slices are for a reduction, on one node only where a root's data is one slice")
    room = budget(coll.ranks, SLICED_CHANNELS, len(halves))
    if one_slice:
        pieces, order = min(ONE_SLICE_REDUCTION_PIECES, room), "depth"
    elif room < 2:
        pieces = min(rounds(per_root), budget(coll.ranks, SLICED_CHANNELS, len(halves), MAX_SCALE_TRANSFERS))
        order = "critical"
    else:
        pieces = cut(coll.ranks, per_root, SLICED_CHANNELS, len(halves), MAX_SLICED_PIECES)
        order = "depth" if coll.name == "allreduce" and nodes > 2 else "local first"
    if pieces < 2:
        raise NotApplicable("rails in slices need two pieces per root or more")
    # on two nodes a star across them is their chain; across more, at one slice fanned first, then the
    # plain rails; larger, a ReduceScatter's fanned only, its pieces also five sixths of the most
    fans = nodes > 2 and _few_nodes(lt)
    scattered = coll.name == "reducescatter" and order == "local first"
    counts = {pieces >> k for k in range(pieces.bit_length() - 1)}     # halved down to 2 or 3
    if scattered:
        counts.add(max(2, pieces * 5 // 6))
    for fanned in (True, False) if fans and one_slice else (True,) if fans and scattered else (False,):
        _, packs, _ = _rail_packs(lt, fanned)
        if not one_slice:
            packs = _spilled(lt, halves, packs) or packs
        for n in sorted(counts, reverse=True):
            algorithm = _schedule(lt, packs, "rails", pieces=n, nchannels=SLICED_CHANNELS, order=order,
                                  tapered=scattered and n >= TAPER_FROM)
            yield list(orders(lt, algorithm))[-1] if fanned else algorithm


def _wide_rails(lt: LogicalTopology) -> Algorithm:
    """Beyond ``MAX_SHALLOW_NODES`` nodes, where a root's data is one slice, the rails one network hop deep:
    a root's data crosses to every other node at once (a star across nodes), a reduction's fanned (each
    other node's part of a root's sum crosses once, on its own rail, and an AllReduce's AllGather half a
    star) on one channel, so a rank's thread blocks stay within what the runtime keeps (the instances fill
    the links). On hundreds of GPUs the chains' depth, a network hop per node, is what a 1 MiB call costs
    (no slices to pipeline it), and each NIC's ``nodes - 1`` peers of the star cost less; the runtime's
    loader still decides, and the chains stay a candidate where it refuses these."""
    reduction = lt.collective.is_reduction
    _, packs, _ = _rail_packs(lt, fanned=reduction, shallow=True)
    return _schedule(lt, packs, "rails", pieces=1, nchannels=SLICED_CHANNELS if reduction else None)


def _spilled(lt: LogicalTopology, halves: tuple[bool, ...], packs: list[Packing]) -> list[Packing] | None:
    """Each half's spilled rail trees (:func:`~autotaccl.synth.rails.spilled`), or its plain ones where
    spilling does not lower the ratio; None where no half spills."""
    spills = [spilled(lt.graph, p, sorted(lt.edges), reverse, link_efficiency(lt.graph))
              for p, reverse in zip(packs, halves)]
    return [s or p for s, p in zip(spills, packs)] if any(spills) else None


def _rail_packs(lt: LogicalTopology, fanned: bool = False, shallow: bool | None = None
                ) -> tuple[tuple[bool, ...], list[Packing], bool]:
    """The halves of ``lt``'s collective, the rail trees of each (:func:`rail_schedules` says which; with
    ``fanned``, a reduction's fanned, and where they can be shallow an AllReduce's AllGather half shallow;
    ``shallow`` True or False: across nodes shallow or not, whatever the size and node count), and whether
    a root's data is one slice."""
    halves = _halves(lt)
    ranks, gpn = lt.collective.ranks, lt.graph.graph["gpus_per_node"]
    if ranks * (ranks - 1) * len(halves) > MAX_RAIL_EDGES:
        raise NotApplicable(f"{ranks} ranks need more than {MAX_RAIL_EDGES} edges of rail trees")
    one_slice = _one_slice(lt)
    binomial = one_slice or ranks > gpn
    if shallow is None:
        shallow = (len(halves) == 1 or fanned) and _shallow_fits(lt)
    chains = 2 if ranks > MAX_CHAIN_NODES * gpn else 1
    try:
        packs = [rail_trees(lt.graph, sorted(lt.edges), reverse, _senders(lt), link_efficiency(lt.graph),
                            binomial, shallow, chains, fanned=fanned and reverse)
                 for reverse in halves]
    except ValueError as err:
        raise NotApplicable(str(err)) from None
    return halves, packs, one_slice


def _shallow_fits(lt: LogicalTopology) -> bool:
    """Whether the rails across nodes can be shallow: a root's data is one slice, and :func:`_few_nodes`."""
    return _one_slice(lt) and _few_nodes(lt)


def _few_nodes(lt: LogicalTopology) -> bool:
    """Whether a star across nodes gives each NIC at most ``MAX_SHALLOW_NODES`` peers (one per other node)."""
    return lt.collective.ranks <= MAX_SHALLOW_NODES * lt.graph.graph["gpus_per_node"]


def _one_slice(lt: LogicalTopology) -> bool:
    """Whether a root's data is one slice of the runtime's pipeline (the simulator's rounds)."""
    return rounds(lt.chunk_bytes * lt.collective.chunkup) == 1


def _halves(lt: LogicalTopology) -> tuple[bool, ...]:
    """The packings a collective runs, as their ``reverse`` flags: AllGather forward, ReduceScatter
    backward, AllReduce both."""
    name = lt.collective.name
    if name not in HALVES:
        raise NotApplicable(f"tree packing builds AllGather and its reductions, not {name}")
    return HALVES[name]


def _schedule(lt: LogicalTopology, packs: list[Packing], strategy: str, pieces: int | None = None,
              nchannels: int | None = None, order: str = "depth", tapered: bool = False) -> Algorithm:
    """``packs`` (one per half) lowered (:func:`lower`, in :func:`piece_sizes`), the ReduceScatter half
    run backwards, listed by ``order`` ("depth": dependency depth; "local first": :func:`lower` with the
    GPUs per node; "critical": piece by piece, each piece by the chain still ahead of each transfer, timed
    alone at the target size, :func:`~.schedule.critical_first`), verified."""
    coll = lt.collective
    ranks = coll.ranks
    nchannels = nchannels or max(channels(lt, p) for p in packs)
    per_root = lt.chunk_bytes * coll.chunkup
    pieces = pieces or cut(ranks, per_root, nchannels, len(packs))
    sizes = piece_sizes(pieces, tapered)
    units = sum(sizes)
    gpn = lt.graph.graph["gpus_per_node"] if order == "local first" else None
    lowered = [lower(p.trees, ranks, sizes, nchannels, gpn) for p in packs]
    if coll.is_reduction:         # the ReduceScatter: the reversed packing's AllGather run backwards
        lowered[0] = reverse_gather(lowered[0], [0.0] * len(lowered[0]))
    transfers = lowered[0] if len(lowered) == 1 else list(sequence(lowered[0], lowered[1], 0.0))
    name = f"{coll.name}-{lt.graph.graph.get('name', 'topology')}-greedy"
    metadata = {"engine": "greedy", "strategy": strategy, "batching": False, "order": order,
                "chunk_bytes": per_root / (units * nchannels), "pieces": pieces, "channels": nchannels}
    if tapered:
        metadata["tapered"] = True
    algorithm = Algorithm(name, Collective(coll.name, ranks, units * nchannels), tuple(transfers),
                          lt.graph.graph.get("name", ""), metadata)
    if order == "critical":
        times = transfer_times(algorithm, lt.graph, per_root * ranks)
        piece = [j for j, n in enumerate(sizes) for _ in range(n)]
        ordered = critical_first(transfers, times, [piece[t.chunks[0] // nchannels % units] for t in transfers])
    else:
        ordered = assign_steps(list(transfers))
    algorithm = replace(algorithm, transfers=ordered)
    verify(algorithm, lt.graph)
    return algorithm


def orders(lt: LogicalTopology, algorithm: Algorithm) -> Iterator[Algorithm]:
    """A tree schedule as lowered (``order`` "depth"), then, for a reduction, the same transfers with the
    reduces into each cell by their sources' readiness (:func:`~autotaccl.synth.reductions.by_readiness`,
    each transfer timed alone at the target size, ``order`` "readiness"), verified, unless that is the
    same list (the plain rails). Which one is faster depends on the fabric (``benchmarks/synthesis.py``),
    so both are candidates."""
    yield algorithm
    if not lt.collective.is_reduction or algorithm.metadata["order"] != "depth":
        return
    size = lt.chunk_bytes * lt.collective.ranks * lt.collective.chunkup
    ordered = assign_steps(by_readiness(algorithm.transfers, transfer_times(algorithm, lt.graph, size)))
    if ordered != algorithm.transfers:
        variant = replace(algorithm, transfers=ordered, metadata={**algorithm.metadata, "order": "readiness"})
        verify(variant, lt.graph)
        yield variant


def budget(ranks: int, nchannels: int = 1, halves: int = 1, transfers: int = MAX_TRANSFERS) -> int:
    """Pieces per root the transfer budget (``transfers``, shared by an AllReduce's two halves) allows."""
    return transfers // (ranks * (ranks - 1) * nchannels * halves)


def cut(ranks: int, per_root_bytes: float, nchannels: int, halves: int = 1, most: int = MAX_PIECES) -> int:
    """Pieces per root: as many as the transfer budget and the least useful piece size allow, at most ``most``."""
    pieces = min(most, budget(ranks, nchannels, halves), int(per_root_bytes // (MIN_PIECE_BYTES * nchannels)))
    return max(1, pieces)


def packing(lt: LogicalTopology, reverse: bool) -> Packing:
    """The optimal packing over the sketch's links (cached per topology, links, senders and direction)."""
    senders = _senders(lt)
    key = (fingerprint(lt.graph), lt.edges, tuple(sorted(senders.items())), reverse)
    if key not in _CACHE:
        try:
            _CACHE[key] = pack_trees(lt.graph, sorted(lt.edges), reverse, senders, link_efficiency(lt.graph))
        except ValueError as err:     # some rank unreachable over these links
            raise NotApplicable(str(err)) from None
    return _CACHE[key]


def _senders(lt: LogicalTopology) -> dict[int, frozenset[int]]:
    """Per root, the ranks the sketch lets carry all of its chunks off its node."""
    k = lt.collective.chunkup
    senders = {}
    for r in range(lt.collective.ranks):
        sets = [lt.senders[c] for c in range(r * k, r * k + k) if c in lt.senders]
        if sets:
            senders[r] = frozenset.intersection(*sets)
    return senders


def channels(lt: LogicalTopology, pack: Packing) -> int:
    """Channels enough that the busiest link moves its share of the trees in the packing's time at one
    thread block (``channel_GBps``) per channel."""
    ceiling = protocol_terms(lt.graph).channel_GBps
    load: dict = {}
    for t in pack.trees:
        for e in t.edges:
            load[e] = load.get(e, 0.0) + t.weight
    return min(MAX_CHANNELS, max(1, math.ceil(max(load.values()) / (pack.ratio * ceiling) - 1e-9)))


def piece_sizes(pieces: int, tapered: bool = False) -> tuple[int, ...]:
    """The chunks of each of a root's ``pieces`` per channel: one each, or ``tapered``, ``TAPER`` at the
    start, 4 each in between and ``TAPER`` reversed at the end (at least twice as many pieces as ``TAPER``)."""
    if not tapered:
        return (1,) * pieces
    ends = len(TAPER)
    if pieces < 2 * ends:
        raise ValueError(f"tapered pieces need at least {2 * ends}, not {pieces}")
    return TAPER + (4,) * (pieces - 2 * ends) + TAPER[::-1]


def lower(trees: tuple[Tree, ...], ranks: int, sizes: tuple[int, ...], nchannels: int,
          gpn: int | None = None) -> list[Transfer]:
    """Copies of every piece down its tree; a root's data is ``sum(sizes)`` units, piece ``j`` the next
    ``sizes[j]`` of them, each unit ``nchannels`` chunks side by side (chunk ``(r * sum(sizes) + u) *
    nchannels + c``). A root's trees take whole pieces (:func:`interleave`).

    The list goes piece by piece and, within a piece, level by level, so run backwards every root's
    reduction climbs its tree alongside the others'. With ``gpn`` (GPUs per node), each piece's copies
    inside the root's node come first (run backwards: last)."""
    by_root: dict[int, list[Tree]] = {}
    for t in trees:
        by_root.setdefault(t.root, []).append(t)
    order = {r: interleave(ts, len(sizes)) for r, ts in by_root.items()}
    units = sum(sizes)
    keyed = []
    start = 0
    for j, size in enumerate(sizes):
        for r in range(ranks):
            first = r * units + start
            depth = {r: 0}
            for n, (u, v) in enumerate(order[r][j].edges):
                depth[v] = depth[u] + 1
                away = gpn is None or v // gpn != r // gpn
                keyed += [((away, j, depth[v], r, n, c),
                           Transfer(tuple((first + k) * nchannels + c for k in range(size)), u, v, 0, channel=c))
                          for c in range(nchannels)]
        start += size
    keyed.sort(key=lambda entry: entry[0])
    return [t for _, t in keyed]


def interleave(trees: list[Tree], pieces: int) -> list[Tree]:
    """The tree of each piece: counts by largest remainder of ``weight * pieces``, spread evenly over the pieces."""
    exact = [t.weight * pieces for t in trees]
    counts = [int(x) for x in exact]
    for i in sorted(range(len(trees)), key=lambda i: counts[i] - exact[i])[:pieces - sum(counts)]:
        counts[i] += 1
    slots = sorted(((n + 0.5) / c, i) for i, c in enumerate(counts) for n in range(c))
    return [trees[i] for _, i in slots]
