"""Static rules of an MSCCL++ plan: the executor's limits, references that resolve, operations of the
shape the kernel reads them in, channels that pair up, and as many waits as signals per call.
"""
from __future__ import annotations

from collections import defaultdict

from ..plan import (COLLECTIVES, MAX_BUFFERS_PER_OP, MAX_CHANNELS, MAX_CHANNELS_PER_OP, MAX_OPERATIONS,
                    MAX_REMOTE_BUFFERS, MAX_RESIDENT_TBS, MAX_SEMAPHORES_PER_OP, MAX_SYNCERS, PACKET_OPS, Gpu, Op,
                    Plan, ThreadBlock, channel_partners, remote_buffer, switch_channel)
from .report import Problem

# operand kinds: L a local plain buffer, P local scratch in packet form, R a peer's plain buffer, RP a peer's
# scratch in packet form. (head kinds, kind of any further entries) for src_buff and dst_buff, as the
# kernel's handlers read them (execution_kernel.hpp).
SHAPES: dict[str, tuple[tuple[tuple[str, ...], str | None], tuple[tuple[str, ...], str | None]]] = {
    "put": (((), "L"), ((), "R")), "pws": (((), "L"), ((), "R")), "pwsf": (((), "L"), ((), "R")),
    "get": (((), "R"), ((), "L")),
    "copy": ((("L",), None), (("L",), None)),
    "re": ((("L",), "L"), (("L",), None)),
    "res": ((("L",), "L"), (("L",), "R")),
    "rre": ((("L",), "R"), (("L",), None)),
    "rres": ((("L",), "R"), (("L",), "R")),
    "ppkt": (((), "L"), ((), "RP")),
    "rppkt": ((("P",), None), ((), "RP")),
    "cpkt": ((("L",), None), (("P",), None)),
    "upkt": ((("P",), None), (("L",), None)),
    "repkt": ((("L",), "P"), (("L",), None)),
    "respkt": ((("L",), "P"), (("L",), "RP")),
    "recpkt": ((("L",), "P"), (("L", "P"), None)),
    "recspkt": ((("L",), "P"), (("L", "P"), "RP")),
    "glres": ((("W",), None), (("W",), None)),       # W: a switch channel's buffer on every member
    "gstore": ((("L",), None), (("W",), None)),
}
PAIRED = frozenset(("put", "pws", "pwsf", "get", "ppkt"))     # one size per entry (the others: the first's)
SYNC_OPS = frozenset(("signal", "wait", "rlxsignal", "rlxwait", "flush"))
CHANNELED = SYNC_OPS | frozenset(("put", "pws", "pwsf", "get", "res", "rre", "rres", "ppkt", "rppkt", "respkt",
                                  "recspkt"))
MEMORY_ONLY = frozenset(("get", "res", "rre", "rres", "respkt", "recspkt"))
UNMODELLED = {"gstorepkt": "NVLS multimem packets", "pipeline": "pipelined loops"}
#: a pipeline of one of these alone runs it unit by unit over its whole range: the same accesses
ELEMENTWISE = frozenset(("glres", "gstore", "copy"))
SIGNALS = frozenset(("signal", "rlxsignal"))
WAITS = frozenset(("wait", "rlxwait"))


def chunk_shape_problem(plan: Plan) -> str | None:
    """Why the buffers cannot hold ``plan.collective`` (None if they can)."""
    g = plan.gpus[0]
    i, o, R = g.input_chunks, g.output_chunks, plan.ranks
    ok = {"allgather": o == R * i, "reducescatter": i == R * o, "allreduce": i == o, "broadcast": i == o,
          "alltoall": i == o and i % R == 0}[plan.collective]
    if i < 1 or not ok:
        need = {"allgather": "output_chunks = ranks x input_chunks", "reducescatter": "input_chunks = ranks x "
                "output_chunks", "alltoall": "input_chunks = output_chunks, a multiple of the ranks"}.get(
            plan.collective, "input_chunks = output_chunks")
        return f"input_chunks={i}, output_chunks={o}: {plan.collective} needs {need} (>= 1)"
    return None


def static_problems(plan: Plan, ranks_per_node: int | None) -> tuple[list[Problem], list[Problem]]:
    errors: list[Problem] = []
    warnings: list[Problem] = []
    if plan.collective not in COLLECTIVES:
        errors.append(Problem(f"collective {plan.collective!r}: the checker proves {', '.join(COLLECTIVES)}"))
        return errors, warnings
    for g in plan.gpus:
        if (g.input_chunks, g.output_chunks) != (plan.gpus[0].input_chunks, plan.gpus[0].output_chunks):
            errors.append(Problem("every GPU must cut its buffers into as many chunks as rank 0 (the chunk size "
                                  "comes from each rank's own buffer size)", rank=g.id))
    shape = chunk_shape_problem(plan)
    if shape:
        errors.append(Problem(shape))
    if plan.reuse_resources:
        warnings.append(Problem("reuse_resources: scratch offsets wrap once a chunk exceeds 64 MiB / scratch_chunks; "
                                "the replay does not model that"))
    partners = channel_partners(plan)
    for (rank, kind, j), partner in sorted(partners.items()):
        peer = plan.gpus[rank].peers(kind)[j]
        if peer == rank:
            errors.append(Problem(f"{kind} channel {j} connects the rank to itself", rank=rank))
        elif partner is None:
            errors.append(Problem(f"{kind} channel {j} to rank {peer} has no channel back on rank {peer} (the "
                                  f"executor pairs a rank's k-th {kind} channel to a peer with the peer's k-th)",
                                  rank=rank))
        elif kind == "memory" and ranks_per_node and rank // ranks_per_node != peer // ranks_per_node:
            errors.append(Problem(f"memory channel {j} connects ranks {rank} and {peer} of different nodes "
                                  f"({ranks_per_node} ranks per node): memory channels need peer memory (CUDA "
                                  "IPC); across nodes use a port channel", rank=rank))
    for g in plan.gpus:
        _gpu_problems(plan, g, errors, warnings)
    if not errors:
        errors.extend(_balance_problems(plan, partners))
    return errors, warnings


def lone_pipeline_op(op: Op) -> Op | None:
    """The operation a pipeline runs over its whole range (one elementwise operation, ``num_chunks`` at least
    its size), which the replay runs in its place; None if the pipeline is something else."""
    if op.name != "pipeline" or len(op.inner) != 1 or op.inner[0].name not in ELEMENTWISE:
        return None
    inner = op.inner[0]
    size = max((r.size for r in inner.src + inner.dst), default=0)
    return inner if (op.iter_context or {}).get("num_chunks", 0) >= size else None


def _switch_problems(plan: Plan, g: Gpu) -> list[Problem]:
    """Every member of a switch channel's group lists the same group, in the same order among the groups
    the two share: the executor joins the NVLS connections one by one, collectively."""
    out = []
    mine = g.switch_channels()
    for k, (_, ranks) in enumerate(mine):
        for m in ranks:
            if m == g.id:
                continue
            theirs = [grp for _, grp in plan.gpus[m].switch_channels() if g.id in grp]
            ours = [grp for _, grp in mine if m in grp]
            if theirs != ours:
                out.append(Problem(f"switch channel {k} (ranks {list(ranks)}): rank {m} does not list the same groups "
                                   f"with this rank in the same order ({[list(x) for x in theirs]} against "
                                   f"{[list(x) for x in ours]}), so the executor's NVLS connections do not match",
                                   rank=g.id))
                return out
    return out


def _gpu_problems(plan: Plan, g: Gpu, errors: list, warnings: list) -> None:
    errors.extend(_switch_problems(plan, g))
    for i, rb in enumerate(g.remote_buffers):
        if rb.rank == g.id:
            errors.append(Problem(f"remote_buffers[{i}] is the rank's own {rb.type} buffer", rank=g.id))
    if len(g.threadblocks) > MAX_RESIDENT_TBS:
        warnings.append(Problem(f"{len(g.threadblocks)} thread blocks: the kernel needs all of them resident at once "
                                f"(one per SM); more than {MAX_RESIDENT_TBS} deadlock on a V100", rank=g.id))
    for tb in g.threadblocks:
        where = dict(rank=g.id, tb=tb.id)
        if tb.num_operations > MAX_OPERATIONS:
            errors.append(Problem(f"{tb.num_operations} operations; the executor allows {MAX_OPERATIONS} per thread "
                                  f"block ({tb.num_operations - MAX_OPERATIONS} too many)", **where))
        if len(tb.channel_list("switch")) > MAX_CHANNELS:
            errors.append(Problem(f"{len(tb.channel_list('switch'))} switch channels; at most {MAX_CHANNELS} per "
                                  "thread block", **where))
        for kind in ("memory", "port"):
            ids = tb.channel_list(kind)
            if len(ids) > MAX_CHANNELS:
                errors.append(Problem(f"{len(ids)} {kind} channels; at most {MAX_CHANNELS} per thread block", **where))
            for c in ids:
                if c >= len(g.peers(kind)):
                    errors.append(Problem(f"{kind} channel {c} does not exist (the rank has {len(g.peers(kind))})",
                                          **where))
            refs = tb.buffer_list(kind)
            if len(refs) > MAX_REMOTE_BUFFERS:
                errors.append(Problem(f"{len(refs)} remote buffers for {kind} channels; at most {MAX_REMOTE_BUFFERS}",
                                      **where))
            for b in refs:
                if b >= len(g.remote_buffers):
                    errors.append(Problem(f"remote buffer {b} does not exist (the rank lists {len(g.remote_buffers)})",
                                          **where))
                elif kind not in g.remote_buffers[b].access:
                    errors.append(Problem(f"remote buffer {b} is used through {kind} channels but its "
                                          f"access_channel_types are {list(g.remote_buffers[b].access)}", **where))
        for k, op in enumerate(tb.ops):
            problem = _op_problem(plan, g, tb, op)
            if problem:
                errors.append(Problem(problem, op=k, **where))
            if op.name == "flush" and len(op.dst) < len(op.channel_ids or ()):
                warnings.append(Problem(f"flush of {len(op.channel_ids or ())} channel(s) with {len(op.dst)} dst_buff "
                                        "entries: the kernel flushes as many channels as dst_buff has entries, so "
                                        "this flushes nothing", op=k, **where))
            if op.name in ("pws", "pwsf") and op.channel_type == "memory":
                warnings.append(Problem(f"{op.name} on memory channels: the kernel copies and signals nothing "
                                        "(put with signal is a port-channel operation)", op=k, **where))


def _op_problem(plan: Plan, g: Gpu, tb: ThreadBlock, op: Op) -> str | None:
    name = op.name
    if (inner := lone_pipeline_op(op)) is not None:
        op, name = inner, inner.name
    if name in UNMODELLED:
        return f"{name}: the checker does not model {UNMODELLED[name]}"
    if name in PACKET_OPS and plan.protocol != "LL":
        return f"{name} is a packet operation but the protocol is {plan.protocol} (its scratch has no room for packets)"
    chans = op.channel_ids or ()
    if len(chans) > MAX_CHANNELS_PER_OP:
        return f"{len(chans)} channels; at most {MAX_CHANNELS_PER_OP} per operation"
    if len(op.src) > MAX_BUFFERS_PER_OP or len(op.dst) > MAX_BUFFERS_PER_OP:
        return f"more than {MAX_BUFFERS_PER_OP} buffers on a side"
    if name in CHANNELED:
        if op.channel_type not in ("memory", "port"):
            return f"{name} needs channel_type memory or port"
        if name in MEMORY_ONLY and op.channel_type != "memory":
            return f"{name} reads or writes peer memory directly: memory channels only"
        ids = tb.channel_list(op.channel_type)
        for c in chans:
            if c >= len(ids):
                return f"channel_ids entry {c}: the thread block has {len(ids)} {op.channel_type} channels"
    if name in SYNC_OPS and not chans:
        return f"{name} without channel_ids"
    if name in WAITS and len(set(chans)) < len(chans):
        return f"{name} names a channel twice: its threads would race on the channel's expected signal count"
    if name in ("sem_acquire", "sem_release"):
        ids = op.semaphore_ids or ()
        if not ids or len(ids) > MAX_SEMAPHORES_PER_OP:
            return f"{name} needs 1..{MAX_SEMAPHORES_PER_OP} semaphore_ids"
        for s in ids:
            if s >= len(g.semaphores):
                return f"semaphore {s} does not exist (the rank declares {len(g.semaphores)})"
    if name == "barrier":
        if op.barrier_id is None or op.barrier_id >= MAX_SYNCERS:
            return f"barrier needs barrier_id in 0..{MAX_SYNCERS - 1}"
        if not op.num_threadblocks or op.num_threadblocks > len(g.threadblocks):
            return f"barrier needs num_threadblocks in 1..{len(g.threadblocks)}"
    if name not in SHAPES:
        return None
    if not op.src or not op.dst:
        return f"{name} needs src_buff and dst_buff"
    if name in PAIRED:
        if len(op.src) != len(op.dst):
            return f"{name} with {len(op.src)} src_buff and {len(op.dst)} dst_buff entries (one each per transfer)"
        for i, (a, b) in enumerate(zip(op.src, op.dst)):
            if a.size != b.size or a.size == 0:
                return f"{name} entry {i} moves src size {a.size} to dst size {b.size}: they must agree (>= 1)"
    else:
        sizes = {r.size for r in op.src + op.dst}
        if len(sizes) != 1 or 0 in sizes:
            return (f"{name} with buffers of sizes {sorted(sizes)}: the kernel takes one size from the first entry "
                    "(all must agree, >= 1)")
    for side, refs, (head, tail) in (("src_buff", op.src, SHAPES[name][0]), ("dst_buff", op.dst, SHAPES[name][1])):
        if len(refs) < len(head) or (tail is None and len(refs) > len(head)):
            return f"{name} takes {len(head)}{'+' if tail else ''} {side} entries, not {len(refs)}"
        for i, ref in enumerate(refs):
            kind = head[i] if i < len(head) else tail
            problem = _ref_problem(plan, g, tb, op, ref, kind)
            if problem:
                return f"{side}[{i}]: {problem}"
    if op.channel_type == "port":
        if name in ("ppkt", "rppkt") or name in ("put", "pws", "pwsf"):
            if len(chans) != len(op.dst):
                return f"{name} over port channels needs one channel_ids entry per dst_buff entry"
            peers = g.peers("port")
            for i, ref in enumerate(op.dst):
                buf = remote_buffer(g, tb, "port", ref.buffer_id)
                channel = tb.channel_list("port")[chans[i]]
                if channel >= len(peers):
                    return None                  # a channel the rank does not have: reported with the block
                peer = peers[channel]
                if buf.rank != peer:
                    return (f"dst_buff[{i}] is rank {buf.rank}'s buffer but its port channel goes to rank {peer} "
                            "(the proxy writes through that channel's connection)")
        if name == "ppkt" and any(r.type != "s" for r in op.src):
            return "ppkt over port channels copies packets: its sources must be scratch in packet form"
    if name in ("put", "pws", "pwsf", "ppkt") and op.channel_type == "memory" and \
            len({r.type for r in op.src}) > 1:
        return f"{name} over memory channels reads every entry from src_buff[0]'s buffer type"
    return None


def _ref_problem(plan: Plan, g: Gpu, tb: ThreadBlock, op: Op, ref, kind: str) -> str | None:
    packet = kind in ("P", "RP")
    if kind == "W":
        if ref.switch_channel_id is None:
            return "expected a switch channel's buffer (switch_channel_id)"
        buf, ranks = switch_channel(g, tb, ref)
        for m in ranks:
            owner = plan.gpus[m]
            size = {"i": owner.input_chunks, "o": owner.output_chunks, "s": owner.scratch_chunks}[buf]
            if ref.index + ref.size > size:
                return (f"{buf}[{ref.index}..{ref.index + ref.size}) through the switch is outside rank {m}'s {buf} "
                        f"({size} chunks)")
        return None
    if ref.switch_channel_id is not None:
        return "a switch channel's buffer where the kernel reads a local or a peer's buffer"
    if kind in ("L", "P"):
        if ref.type is None:
            return "expected a local buffer (type)"
        owner, buf = g, ref.type
    else:
        if ref.buffer_id is None:
            return "expected a peer's buffer (buffer_id)"
        rb = remote_buffer(g, tb, op.channel_type, ref.buffer_id)
        if rb is None:
            return (f"buffer_id {ref.buffer_id}: the thread block has {len(tb.buffer_list(op.channel_type))} "
                    f"remote buffers for {op.channel_type} channels")
        owner, buf = plan.gpus[rb.rank], rb.type
    if packet and buf != "s":
        return f"packets live in scratch, not in {buf}"
    size = {"i": owner.input_chunks, "o": owner.output_chunks, "s": owner.scratch_chunks}[buf]
    if buf == "s" and not packet and plan.protocol == "LL":
        size *= 2                       # LL scratch holds data and flags: twice the bytes
    if ref.index + ref.size > size:
        return f"{buf}[{ref.index}..{ref.index + ref.size}) is outside rank {owner.id}'s {buf} ({size} chunks)"
    return None


def _balance_problems(plan: Plan, partners) -> list[Problem]:
    """Per call, every channel's signals equal its partner's waits, and one thread block signals (waits)
    on a channel: the k-th wait returns after the k-th signal, so any other count or order shifts the
    matching into the next call."""
    signals: dict[tuple[int, str, int], int] = defaultdict(int)
    waits: dict[tuple[int, str, int], int] = defaultdict(int)
    users: dict[tuple, set[int]] = defaultdict(set)
    problems = []
    for g in plan.gpus:
        for tb in g.threadblocks:
            for op in tb.ops:
                if op.channel_type not in ("memory", "port"):
                    continue
                is_signal = op.name in SIGNALS or (op.name in ("pws", "pwsf") and op.channel_type == "port")
                if not (is_signal or op.name in WAITS):
                    continue
                ids = tb.channel_list(op.channel_type)
                for c in op.channel_ids or ():
                    key = (g.id, op.channel_type, ids[c])
                    (signals if is_signal else waits)[key] += 1
                    users[(key, is_signal)].add(tb.id)
    for (key, is_signal), tbs in sorted(users.items()):
        if len(tbs) > 1:
            rank, kind, c = key
            problems.append(Problem(f"thread blocks {sorted(tbs)} all {'signal' if is_signal else 'wait'} on {kind} "
                                    f"channel {c}: the executor does not fix their order, so which signal a wait "
                                    "matches is left to chance", rank=rank))
    for key, partner in sorted(partners.items()):
        rank, kind, c = key
        if partner is None:
            continue
        peer, back = partner
        sent, received = signals.get(key, 0), waits.get((peer, kind, back), 0)
        if sent != received:
            problems.append(Problem(f"{kind} channel {c} to rank {peer}: {sent} signal(s) per call but rank {peer} "
                                    f"waits {received} time(s) on its channel {back} (every signal needs its wait, or "
                                    "the next call's waits return early)", rank=rank))
    return problems
