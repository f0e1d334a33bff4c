"""``lower(algorithm, options) -> str``: the IR as MSCCL XML for one runtime.

Pipeline: verify -> replicate instances -> channels -> thread blocks and fusion -> buffer layout ->
steps -> dependencies -> numbering (thread blocks, nops) -> runtime limits -> one deterministic replay
(values, races, deadlock; on a deadlock the stuck send/receive thread blocks are split and the
plan redone) -> XML text. Where the blocks of the split idle pairs (``threadblocks``) break a limit on
thread blocks, all of it runs again with the pairs kept; where the steps need more XML nodes than the
runtime parses, again with forwards fused across receives (``Blocks.across``).
"""
from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from typing import NamedTuple

from ....gcpause import gc_paused
from ....model.algorithm import Algorithm, VerificationError, switch_ops, verify
from ..program import COLL_NAMES, LEGACY_NO_LIMIT, LIMITS, Gpu, Program, Step, ThreadBlock
from .buffers import layout
from .channels import spread_channels
from .options import LoweringError, LoweringOptions
from .replicate import lanes, original_chunk, replicate, transfer_lanes
from .runs import split_runs
from .steps import StepRec, add_dependencies, build_steps
from .threadblocks import Blocks, TbKey, Uses, forward_candidates, plan_threadblocks, sure_targets
from .xmlwrite import write_xml

log = logging.getLogger(__name__)
NAME_CHARS = 63     # the legacy runtime keeps 63 characters of the name
MAX_ATTEMPTS = 8    # re-plans that split deadlocked send/receive thread blocks before splitting all
#: the limits more thread blocks can break: where splitting the pairs that fuse nothing breaks one, they stay
BLOCK_LIMITS = ("dependency target thread blocks", "thread blocks per GPU")
NODES = "XML nodes per rank"    # the limit fusing across receives can meet where fusing next steps cannot


def lower(algorithm: Algorithm, options: LoweringOptions | None = None) -> str:
    """MSCCL XML text of ``algorithm``; raises LoweringError naming the runtime limit it cannot fit."""
    return write_xml(lower_program(algorithm, options))


@gc_paused()
def lower_program(algorithm: Algorithm, options: LoweringOptions | None = None) -> Program:
    opts = (options or LoweringOptions()).validated()
    source = algorithm.name or "<algorithm>"
    _check_size(algorithm, opts, source)
    try:
        verify(algorithm)
    except VerificationError as err:
        raise LoweringError(source, "algorithm", f"an algorithm that passes verify ({err})") from None
    if algorithm.collective.name not in COLL_NAMES[opts.runtime]:
        raise LoweringError(source, "collective", f"one the {opts.runtime} runtime runs")
    if switch_ops(algorithm):
        raise LoweringError(source, "transfers", f"copies and reduces only ({opts.runtime} runs no switch operations "
                                                 f"(multimem); this algorithm has {switch_ops(algorithm)})")
    limits = LIMITS[opts.runtime]
    links = lanes(algorithm)
    if links * opts.instances > limits.channels:
        raise LoweringError(source, "channels", f"at most {limits.channels} channels (channels x links x instances); "
                            f"{links} channel(s) and link(s) x {opts.instances} instance(s) = {links * opts.instances}, "
                            f"{links * opts.instances - limits.channels} too many")
    expanded, channels = replicate(algorithm, opts.instances)
    channels = spread_channels(expanded, channels, limits.tbs_per_channel_direction, limits.channels, source)
    uses = Uses.of(expanded)      # every plan of the expanded algorithm reads it
    try:
        program = _blocks_kept_where_too_many(expanded, uses, channels, opts, source, algorithm, across=False)
    except LoweringError as err:     # too many steps: fuse forwards across the receives before them
        if err.field != NODES:
            raise
        log.info("%s: %s; fusing forwards across the receives before them", source, err)
        program = _blocks_kept_where_too_many(expanded, uses, channels, opts, source, algorithm, across=True)
    coll = expanded.collective
    gpus = program.gpus
    if opts.runtime == "msccl" and opts.max_bytes is None and any(g.s_chunks for g in gpus):
        log.warning("%s: the msccl runtime allocates maxBytes * s_chunks / nchunksperloop = %d bytes of scratch "
                    "at init (maxBytes=%d, no max_bytes given)", source,
                    LEGACY_NO_LIMIT * max(g.s_chunks for g in gpus) // int(program.header["nchunksperloop"]),
                    LEGACY_NO_LIMIT)
    log.info("lowered %s: %d ranks, %d channels, %d thread blocks, %d steps", source, coll.ranks,
             int(program.header["nchannels"]), sum(len(g.tbs) for g in gpus),
             sum(len(tb.steps) for g in gpus for tb in g.tbs))
    return program


def _blocks_kept_where_too_many(expanded: Algorithm, uses: Uses, channels, opts: LoweringOptions, source: str,
                                algorithm: Algorithm, across: bool) -> Program:
    """:func:`_program` with the idle pairs split; where their blocks break a limit on thread blocks,
    with the pairs kept."""
    try:
        return _program(expanded, uses, channels, opts, source, algorithm, Blocks(True, across))
    except LoweringError as err:
        if err.field not in BLOCK_LIMITS:
            raise
        log.info("%s: %s; keeping the thread-block pairs that fuse nothing", source, err)
        return _program(expanded, uses, channels, opts, source, algorithm, Blocks(False, across))


def _program(expanded: Algorithm, uses: Uses, channels, opts: LoweringOptions, source: str, algorithm: Algorithm,
             blocks: Blocks) -> Program:
    """The program of ``expanded`` that fits the runtime and replays correctly: thread blocks spread
    over channel copies where they have too many steps, runs of non-contiguous transfers on channels of
    their own or send/receive pairs split where the replay deadlocks. ``blocks``: which pairs split,
    which receives fuse (:class:`~.threadblocks.Blocks`)."""
    limits = LIMITS[opts.runtime]
    origin = tuple(range(len(expanded.transfers)))
    memo = _LayoutMemo()     # the channel-copy rounds and the re-plans below share equal layouts
    channels, (program, stuck, problem) = _build_fitting(expanded, uses, channels, origin, opts, source, algorithm,
                                                         blocks, memo)
    if problem is not None and stuck:
        split = split_runs(expanded, channels, origin, opts.inplace, limits.channels)
        if split is not None:
            log.info("%s: %s; sending the runs of non-contiguous transfers on separate channels", source, problem)
            split_algorithm, split_channels, split_origin = split
            try:
                split_program, _, split_problem = _build(split_algorithm, Uses.of(split_algorithm), split_channels,
                                                         split_origin, frozenset(), opts, source, algorithm, blocks)
            except LoweringError as err:       # more channels or steps than the runtime allows
                log.info("%s: %s", source, err)
                split_problem = err
            if split_problem is None:
                program, stuck, problem = split_program, (), None
    forbid: frozenset | None = frozenset()
    attempt = 0
    while problem is not None:
        if not stuck:
            raise LoweringError(source, "lowering", f"a program that replays correctly (a lowering bug): {problem}")
        if forbid is None:
            raise LoweringError(source, "schedule", f"a program that cannot deadlock; even without fused steps: "
                                f"{problem}")
        # thread blocks that both receive and send can block each other on full connection buffers
        # (the runtime holds about 2 messages per connection): give those peers separate blocks
        gpus = program.gpus
        pairs = {(r, tb.chan, tb.recv, tb.send) for r, t in stuck for tb in (gpus[r].tbs[t],)
                 if tb.send >= 0 and tb.recv >= 0}
        attempt += 1
        forbid = None if not pairs or attempt >= MAX_ATTEMPTS else forbid | pairs
        log.info("%s: %s; splitting %d send/receive thread blocks", source, problem, len(pairs))
        program, stuck, problem = _build(expanded, uses, channels, origin, forbid, opts, source, algorithm, blocks,
                                         memo)
    return program


def _build_fitting(expanded: Algorithm, uses: Uses, channels, origin, opts: LoweringOptions, source: str,
                   algorithm: Algorithm, blocks: Blocks, memo: _LayoutMemo | None = None):
    """(channels, _build(...)): if a thread block has more steps than the runtime allows, spread the
    chunks over k channel copies (chunk c on one copy, so a forwarded chunk stays on one channel, as
    NCCL's rings do; c numbered as in the algorithm: an instance's chunks all have one residue modulo
    the instance count), for the smallest k that fits. The copy is :func:`copy_of` (Fibonacci hashing),
    not c mod k: a block's chunks often share a residue (a rail's roots, every gpn-th), which c mod k
    would not split. Splitting a thread block's chunks never merges
    steps, so k starts above the busiest block's steps over the limit: at exactly the limit the
    dependencies' nops would push it over, and each failed build costs a whole lowering."""
    base = 1 + max(channels, default=0)
    chunkup = expanded.collective.chunkup // opts.instances
    within = [original_chunk(min(t.chunks), chunkup, opts.instances) for t in expanded.transfers]
    k = 1
    while True:
        spread = tuple(ch + copy_of(c, k) * base for ch, c in zip(channels, within))
        try:
            return spread, _build(expanded, uses, spread, origin, frozenset(), opts, source, algorithm, blocks, memo)
        except _TooManySteps as err:
            fewest = math.floor(err.ratio) + 1 if k == 1 else k + 1    # ratio > 1: at least 2
            if base * fewest > LIMITS[opts.runtime].channels:
                raise
            log.info("%s: %s; spreading chunks over %d channel copies", source, err, fewest)
            k = fewest


def copy_of(chunk: int, copies: int) -> int:
    """The channel copy of ``chunk`` among ``copies``: the fractional part of ``chunk`` over the golden
    ratio, scaled; any arithmetic progression of chunks lands on the copies about evenly (the
    three-distance theorem), whatever its step."""
    return int((chunk * _INVERSE_GOLDEN) % 1.0 * copies)


_INVERSE_GOLDEN = (math.sqrt(5) - 1) / 2


class _LayoutMemo:
    """The layout of the last plan built and its steps' conflicts, for the next plan of the same
    algorithm with equal fusions and stored receives (the channel-copy rounds of :func:`_build_fitting`
    often have them): the layout reads nothing else of a plan, and the steps built from one layout
    access the same cells in the same order whatever their thread blocks (:func:`.steps.step_conflicts`)."""

    def __init__(self) -> None:
        self._last: tuple | None = None

    @staticmethod
    def _key(plan, inplace: bool) -> tuple:
        return plan.fused_next, plan.stored, plan.order, inplace

    def get(self, algorithm: Algorithm, plan, inplace: bool):
        """(layout, conflicts) kept for an equal plan of ``algorithm``, else (None, None)."""
        if self._last is not None and self._last[0] is algorithm and self._last[1] == self._key(plan, inplace):
            return self._last[2]
        return None, None

    def keep(self, algorithm: Algorithm, plan, inplace: bool, lay, conflicting) -> None:
        self._last = (algorithm, self._key(plan, inplace), (lay, conflicting))


def _build(expanded: Algorithm, uses: Uses, channels, origin, forbid, opts: LoweringOptions, source: str,
           algorithm: Algorithm, blocks: Blocks, memo: _LayoutMemo | None = None):
    """(program, stuck thread blocks, replay problem) for one thread-block plan (``uses``: ``expanded``'s;
    ``memo``: the layout and conflicts of an earlier plan of it, where equal)."""
    limits = LIMITS[opts.runtime]
    coll = expanded.collective
    plan = plan_threadblocks(expanded, channels, uses, forbid, blocks)
    _check_steps(_planned_steps(plan), coll.ranks, limits, source)
    _check_targets(expanded, plan, uses, limits, source, opts.inplace)
    lay, conflicting = memo.get(expanded, plan, opts.inplace) if memo is not None else (None, None)
    if lay is None:
        lay = layout(expanded, plan, opts.inplace)
    steps = build_steps(expanded, plan, lay, limits.max_cnt, origin)
    _check_steps(Counter(st.tb for st in steps), coll.ranks, limits, source)
    conflicting = add_dependencies(steps, coll.name, coll.chunkup, opts.inplace, opts.outofplace, conflicting)
    if memo is not None:
        memo.keep(expanded, plan, opts.inplace, lay, conflicting)
    gpus = _number(steps, coll, lay.scratch, source, opts.runtime)     # checks the runtime's limits
    program = Program(_header(algorithm, coll, gpus, opts), gpus)
    stuck, problem = _replay(program, coll.name, opts)
    return program, stuck, problem


def _replay(program: Program, coll_name: str, opts: LoweringOptions):
    """(stuck thread blocks, first problem) of one deterministic replay per enabled buffer mode (values,
    and races where :func:`races_in` says); (), None if the program is correct."""
    from ..check.replay import Replay, races_in
    modes = [mode for mode, on in (("outofplace", opts.outofplace), ("inplace", opts.inplace)) if on]
    for mode in modes:
        replay = Replay(program, coll_name, mode)
        problem = replay.run(None, races=races_in(mode, modes))
        if problem is not None:
            return replay.stuck, problem
    return (), None


def _header(algorithm: Algorithm, coll, gpus, opts: LoweringOptions) -> dict[str, str]:
    nchunks = max(max(coll.input_chunks(r), coll.output_chunks(r)) for r in range(coll.ranks))
    nchannels = 1 + max((tb.chan for g in gpus for tb in g.tbs), default=0)
    max_bytes = opts.max_bytes
    if opts.runtime == "msccl":   # exclusive bound; 0 would mean "never"
        max_bytes = LEGACY_NO_LIMIT if max_bytes is None else max_bytes + 1
    header = {"name": (algorithm.name or "autotaccl")[:NAME_CHARS], "proto": opts.proto,
              "nchannels": str(nchannels), "nchunksperloop": str(nchunks), "ngpus": str(coll.ranks),
              "coll": COLL_NAMES[opts.runtime][coll.name], "inplace": str(int(opts.inplace)),
              "outofplace": str(int(opts.outofplace)), "minBytes": str(opts.min_bytes), "maxBytes": str(max_bytes or 0)}
    if opts.runtime == "msccl":     # not read by the legacy runtime; without it the executor skips the file
        del header["outofplace"]
    return header


def _number(steps: list[StepRec], coll, scratch, source: str, runtime: str) -> tuple[Gpu, ...]:
    """Thread-block ids (sorted by send, recv, channel; dependency targets first if ids > 127 would
    otherwise be targets), ``s`` indices with nops for extra dependencies, and ``hasdep``. The runtime's
    limits (:func:`_check_limits`) are checked on the counts before any step is made: a plan that breaks
    one fails as it would on the program, for a fraction of the cost."""
    limits = LIMITS[runtime]
    by_tb: dict[TbKey, list[StepRec]] = defaultdict(list)
    for st in steps:
        by_tb[st.tb].append(st)
    of_rank: dict[int, list[TbKey]] = defaultdict(list)
    for key in by_tb:
        of_rank[key[0]].append(key)
    targets = {d.tb for st in steps for d in st.deps}
    tb_id: dict[TbKey, int] = {}
    ordered: list[list[TbKey]] = []        # per rank, its thread blocks by id
    for rank in range(coll.ranks):
        keys = sorted(of_rank.get(rank, ()), key=lambda k: (k[1], k[2], k[3]))
        if any(k in targets for k in keys[limits.dep_target_tb + 1:]):
            keys.sort(key=lambda k: k not in targets)
            n_targets = sum(k in targets for k in keys)
            if n_targets > limits.dep_target_tb + 1:
                raise LoweringError(source, "dependency target thread blocks",
                                    f"at most {limits.dep_target_tb + 1} per rank (ids <= {limits.dep_target_tb}); "
                                    f"rank {rank} needs {n_targets}, {n_targets - limits.dep_target_tb - 1} too many")
        for i, k in enumerate(keys):
            tb_id[k] = i
        ordered.append(keys)
    xml_index: dict[int, int] = {}
    length: dict[TbKey, int] = {}
    for key, sts in by_tb.items():
        s = 0
        for st in sts:
            st.deps.sort(key=lambda d: tb_id[d.tb])
            s += max(len(st.deps) - 1, 0)
            xml_index[id(st)] = s
            s += 1
        length[key] = s
    _check_limits([_Shape(rank, coll.input_chunks(rank), coll.output_chunks(rank), scratch[rank],
                          tuple((tb_id[k], k[1], k[2], k[3], length[k]) for k in keys))
                   for rank, keys in enumerate(ordered)], coll.ranks, source, runtime)
    is_target = {id(d) for st in steps for d in st.deps}
    gpus = []
    for rank, keys in enumerate(ordered):
        tbs = []
        for key in keys:
            out: list[Step] = []
            for st in by_tb[key]:
                for d in st.deps[1:]:
                    out.append(Step(len(out), "nop", "i", -1, "o", -1, 0, tb_id[d.tb], xml_index[id(d)], 0))
                dep = st.deps[0] if st.deps else None
                out.append(Step(len(out), st.type, st.src[0], st.src[1], st.dst[0], st.dst[1], st.cnt,
                                tb_id[dep.tb] if dep else -1, xml_index[id(dep)] if dep else -1,
                                int(id(st) in is_target), xfer=st.xfer))
            tbs.append(ThreadBlock(tb_id[key], key[1], key[2], key[3], tuple(out)))
        gpus.append(Gpu(rank, coll.input_chunks(rank), coll.output_chunks(rank), scratch[rank], tuple(tbs)))
    return tuple(gpus)


def _check_size(algorithm: Algorithm, opts: LoweringOptions, source: str) -> None:
    """Refuse at once an algorithm too large for the runtime whatever the lowering does (which would take
    minutes to find out): its :func:`least_steps` on a rank, repeated by each instance, need more XML nodes
    than the runtime parses."""
    limits = LIMITS[opts.runtime]
    for rank, count in sorted(least_steps(algorithm).items()):
        nodes = 1 + algorithm.collective.ranks + count * opts.instances
        if nodes > limits.nodes_per_rank:
            raise _too_many_nodes(source, limits, f"rank {rank}", nodes, f"at least {nodes} ({count} steps x "
                                                                       f"{opts.instances} instance(s))")


def least_steps(algorithm: Algorithm) -> Counter[int]:
    """Per rank, the fewest steps any lowering of one instance has: every transfer is a step of its sender
    and of its receiver, except that one step may receive a transfer and send the one that forwards its
    chunks on the same lane (fused, :func:`~.threadblocks.forward_candidates`), and the one block of a
    rank that receives from a peer on a lane sends to one peer, so it fuses at most the forwards to one."""
    transfers = algorithm.transfers
    lane = transfer_lanes(algorithm)
    steps: Counter[int] = Counter()
    for t in transfers:
        steps.update((t.src, t.dst))
    forwards: Counter[tuple[int, int, int, int]] = Counter()     # (rank, lane, from, to)
    for t1, t2 in forward_candidates(lane, Uses.of(algorithm)).items():
        forwards[transfers[t1].dst, lane[t1], transfers[t1].src, transfers[t2].dst] += 1
    fusable: dict[tuple[int, int, int], int] = {}                # (rank, lane, from): to its busiest peer
    for (rank, ln, p, _), count in forwards.items():
        fusable[rank, ln, p] = max(fusable.get((rank, ln, p), 0), count)
    for (rank, _, _), count in fusable.items():
        steps[rank] -= count
    return steps


def _too_many_nodes(source: str, limits, where: str, nodes: int, needs: str) -> LoweringError:
    """``where`` needs ``nodes`` XML nodes (``needs`` says how many, and why), more than the runtime parses."""
    return LoweringError(source, NODES, f"at most {limits.nodes_per_rank}; {where} needs {needs}, "
                                        f"{nodes - limits.nodes_per_rank} too many")


class _TooManySteps(LoweringError):
    """A thread block (``where``) needs ``count`` steps (``least``: at least), more than the runtime's
    ``limit`` (``on``: which runtime, if said); ``ratio``: how many times more."""

    def __init__(self, source: str, limit: int, on: str, where: str, count: int, least: bool = False) -> None:
        needs = f"at least {count}" if least else str(count)
        super().__init__(source, "steps per thread block", f"at most {limit}{on}; {where} needs {needs}, "
                                                           f"{count - limit} too many (use fewer chunks or more links)")
        self.ratio = count / limit


def _planned_steps(plan) -> Counter[TbKey]:
    """Per thread block, the steps its plan's transfers need at least (a receive each, a send each unless
    fused; runs of non-contiguous chunks and local copies only add to them)."""
    fused_sends = set(plan.fused_next.values())
    per_tb: Counter[TbKey] = Counter(plan.recv_tb)
    per_tb.update(tb for t, tb in enumerate(plan.send_tb) if t not in fused_sends)
    return per_tb


def _check_steps(per_tb: Counter[TbKey], ranks: int, limits, source: str) -> None:
    """Refuse, before the costly layout or dependencies, a plan whose steps (per thread block) alone exceed
    the XML nodes per rank or the steps per thread block: the ``nop`` steps of the dependencies only add to
    both (:func:`_check_limits` has the final say)."""
    nodes: dict[int, int] = defaultdict(lambda: 1 + ranks)
    for key, count in per_tb.items():
        nodes[key[0]] += 1 + count
    rank, most = max(nodes.items(), key=lambda item: (item[1], -item[0]), default=(0, 0))
    if most > limits.nodes_per_rank:
        raise _too_many_nodes(source, limits, f"rank {rank}", most, f"at least {most}")
    key, count = max(per_tb.items(), key=lambda item: item[1], default=((0, -1, -1, 0), 0))
    if count > limits.steps_per_tb:
        raise _TooManySteps(source, limits.steps_per_tb, "", f"rank {key[0]} (send {key[1]}, recv {key[2]}, channel "
                                                             f"{key[3]})", count, least=True)


def _check_targets(expanded: Algorithm, plan, uses: Uses, limits, source: str, inplace: bool) -> None:
    """Refuse, before the costly layout and dependencies, a plan with more dependency-target thread blocks
    on a rank than the runtime numbers (:func:`~.threadblocks.sure_targets`; :func:`_number` has the
    final say)."""
    most = limits.dep_target_tb + 1
    for rank, blocks in sorted(sure_targets(expanded, plan, uses, inplace).items()):
        if len(blocks) > most:
            raise LoweringError(source, "dependency target thread blocks",
                                f"at most {most} per rank (ids <= {limits.dep_target_tb}); rank {rank} needs at "
                                f"least {len(blocks)}, {len(blocks) - most} too many")


class _Shape(NamedTuple):
    """What the runtime's limits read of one GPU: its buffers' chunks and, per thread block in id order,
    ``(id, send, recv, channel, steps)``."""
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: tuple[tuple[int, int, int, int, int], ...]


def _check_limits(gpus: list[_Shape], ngpus: int, source: str, runtime: str) -> None:
    """Raise the first limit of ``runtime`` a GPU breaks (thread blocks, steps per thread block, XML nodes,
    buffer offsets), in GPU order."""
    limits = LIMITS[runtime]
    for gpu in gpus:
        if len(gpu.tbs) > limits.tbs_per_gpu:
            raise LoweringError(source, "thread blocks per GPU",
                                f"at most {limits.tbs_per_gpu} on {runtime}; rank {gpu.id} needs {len(gpu.tbs)}, "
                                f"{len(gpu.tbs) - limits.tbs_per_gpu} too many")
        for tb, send, recv, chan, count in gpu.tbs:
            if count > limits.steps_per_tb:
                raise _TooManySteps(source, limits.steps_per_tb, f" on {runtime}", f"rank {gpu.id} tb {tb} (send "
                                    f"{send}, recv {recv}, channel {chan})", count)
        nodes = 1 + ngpus + len(gpu.tbs) + sum(tb[4] for tb in gpu.tbs)
        if nodes > limits.nodes_per_rank:
            raise _too_many_nodes(source, limits, f"rank {gpu.id}", nodes, str(nodes))
        for buf, size in (("i", gpu.i_chunks), ("o", gpu.o_chunks), ("s", gpu.s_chunks)):
            if size > limits.max_offset + 1:
                raise LoweringError(source, "buffer chunks", f"offsets < {limits.max_offset + 1} (int16); rank "
                                    f"{gpu.id} needs {size} {buf} chunks, {size - limits.max_offset - 1} too many")
