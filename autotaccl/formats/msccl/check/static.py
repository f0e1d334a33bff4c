"""Static rules of MSCCL XML (§1.1-§1.9) for one runtime; each broken rule becomes a :class:`Problem`."""
from __future__ import annotations

from collections import defaultdict

from ..program import COLL_ACCEPTED, COLL_NAMES, HEADER_REQUIRED, LIMITS, PROTOCOLS, RECEIVES, SENDS, Program, Step
from .report import Problem

PORTABLE_TBS = 128   # fewer than the SMs of an A100 (108 usable at once) / H100 (132): §1.4, §1.9
#: step type -> (uses src, uses dst) in the kernel
USES = {"s": (True, False), "r": (False, True), "rcs": (False, True), "rrs": (True, False), "rrc": (True, True),
        "rrcs": (True, True), "cpy": (True, True), "re": (True, True), "ra": (True, True), "nop": (False, False)}


def collective_of(program: Program, runtime: str) -> str | None:
    """Our name of the file's collective for ``runtime`` (None if that runtime does not accept it)."""
    return COLL_ACCEPTED[runtime].get(program.coll)


def buffer_sizes(coll: str | None, nchunks: int, ngpus: int) -> tuple[int, int]:
    """Real (input, output) buffer sizes in chunks for a call of ``coll`` (§1.6)."""
    per = nchunks // ngpus if ngpus else 0
    return (per if coll == "allgather" else nchunks, per if coll == "reducescatter" else nchunks)


def static_problems(program: Program, runtime: str) -> tuple[list[Problem], list[Problem]]:
    """(errors, warnings) of ``program`` for ``runtime``, in file order."""
    errors: list[Problem] = []
    warnings: list[Problem] = [Problem(n) for n in program.notes]
    limits = LIMITS[runtime]
    header = program.header
    err = errors.append

    for key in HEADER_REQUIRED[runtime]:
        if key not in header:
            err(Problem(f"<algo> lacks {key}, which the {runtime} runtime requires", line=program.line))
    if len(header) > limits.attrs_per_element:
        err(Problem(f"<algo> has {len(header)} attributes; the runtime keeps only {limits.attrs_per_element}",
                    line=program.line))
    for key, value in header.items():
        if len(value) > limits.chars_per_value or len(key) > limits.chars_per_value:
            err(Problem(f"attribute {key} is longer than {limits.chars_per_value} characters", line=program.line))
    if header.get("proto") not in PROTOCOLS:
        err(Problem(f"proto={header.get('proto')!r}: expected one of {', '.join(PROTOCOLS)}", line=program.line))
    coll = collective_of(program, runtime)
    if program.coll not in COLL_ACCEPTED[runtime]:
        hint = ""
        for ours, name in COLL_NAMES["msccl"].items():
            if name == program.coll:
                hint = f" (write {COLL_NAMES[runtime][ours]!r})"
        err(Problem(f"coll={program.coll!r} is not accepted by the {runtime} runtime{hint}", line=program.line))
    elif coll is None:
        err(Problem(f"coll={program.coll!r} has no postcondition this checker knows", line=program.line))
    ngpus, nchunks = program.ngpus, program.nchunksperloop
    if ngpus < 1 or len(program.gpus) != ngpus:
        err(Problem(f"ngpus={ngpus} but the file has {len(program.gpus)} <gpu> elements", line=program.line))
    if nchunks < 1:
        err(Problem(f"nchunksperloop={nchunks}: expected >= 1", line=program.line))
    if coll in ("allgather", "reducescatter", "alltoall") and ngpus > 0 and nchunks % ngpus:
        err(Problem(f"nchunksperloop={nchunks} is not a multiple of ngpus={ngpus}", line=program.line))
    nchannels = program.int_attr("nchannels", 0)
    if not 1 <= nchannels <= limits.channels:
        err(Problem(f"nchannels={nchannels}: expected 1..{limits.channels}", line=program.line))
    for key in ("inplace", "outofplace"):
        if header.get(key, "0") not in ("0", "1"):
            err(Problem(f"{key}={header[key]!r}: expected 0 or 1", line=program.line))
    lo, hi = program.int_attr("minBytes", 0), program.int_attr("maxBytes", None)
    if lo < 0 or (hi is not None and hi < 0):
        err(Problem("minBytes and maxBytes must be >= 0", line=program.line))
    if runtime == "msccl" and hi == 0:
        warnings.append(Problem("maxBytes=0 means the msccl runtime never selects this algorithm "
                                "(on msccl-executor it means no limit)", line=program.line))
    elif hi and hi < lo:
        err(Problem(f"maxBytes={hi} < minBytes={lo}: no size selects this algorithm", line=program.line))
    if errors and any("ngpus" in p.message for p in errors):
        return errors, warnings

    real_in, real_out = buffer_sizes(coll, nchunks, ngpus)
    max_chan = -1
    steps_of: dict[tuple[int, int], tuple[Step, ...]] = {}
    for g_index, gpu in enumerate(program.gpus):
        rank = gpu.id
        if gpu.id != g_index:
            err(Problem(f"<gpu id={gpu.id}> is number {g_index} in the file: ids must be 0..ngpus-1 in order",
                        line=gpu.line))
            continue
        for buf, declared, real in (("i", gpu.i_chunks, real_in), ("o", gpu.o_chunks, real_out)):
            if declared < 0 or (declared > 0 and coll is not None and declared != real):
                err(Problem(f"{buf}_chunks={declared}: a {program.coll} call on {ngpus} ranks with "
                            f"nchunksperloop={nchunks} has {real} (or 0 if unused)", rank=rank, line=gpu.line))
        if gpu.s_chunks < 0:
            err(Problem(f"s_chunks={gpu.s_chunks}: expected >= 0", rank=rank, line=gpu.line))
        nodes = 1 + ngpus + len(gpu.tbs) + sum(len(t.steps) for t in gpu.tbs)
        if nodes > limits.nodes_per_rank:
            err(Problem(f"{nodes} XML nodes for this rank; the runtime parses at most {limits.nodes_per_rank} "
                        f"({nodes - limits.nodes_per_rank} too many)", rank=rank, line=gpu.line))
        if len(gpu.tbs) > limits.tbs_per_gpu:
            err(Problem(f"{len(gpu.tbs)} thread blocks; {runtime} allows {limits.tbs_per_gpu} "
                        f"({len(gpu.tbs) - limits.tbs_per_gpu} too many)", rank=rank, line=gpu.line))
        if PORTABLE_TBS < len(gpu.tbs) <= limits.tbs_per_gpu:
            warnings.append(Problem(f"{len(gpu.tbs)} thread blocks: all run as one kernel and spin-wait on each "
                                    f"other, so keep them below the GPU's SMs (portable: <= {PORTABLE_TBS})",
                                    rank=rank, line=gpu.line))
        if len(gpu.tbs) > limits.children_per_element:
            err(Problem(f"{len(gpu.tbs)} children; the parser keeps {limits.children_per_element}", rank=rank,
                        line=gpu.line))
        senders: dict[tuple[int, int], int] = {}
        receivers: dict[tuple[int, int], int] = {}
        per_chan = defaultdict(lambda: [0, 0])
        for t_index, tb in enumerate(gpu.tbs):
            where = dict(rank=rank, tb=tb.id, line=tb.line)
            if tb.id != t_index:
                err(Problem(f"<tb id={tb.id}> is number {t_index} of its gpu: ids must be 0..ntb-1 in order",
                            **where))
                continue
            for key, peer in (("send", tb.send), ("recv", tb.recv)):
                if not -1 <= peer < ngpus or peer == rank:
                    err(Problem(f"{key}={peer}: expected -1 or another rank in 0..{ngpus - 1}", **where))
            if not 0 <= tb.chan < limits.channels:
                err(Problem(f"chan={tb.chan}: expected 0..{limits.channels - 1}", **where))
            elif tb.chan >= nchannels:
                err(Problem(f"chan={tb.chan} but nchannels={nchannels}", **where))
            max_chan = max(max_chan, tb.chan)
            if tb.send >= 0:
                key = (tb.send, tb.chan)
                if key in senders:
                    err(Problem(f"tbs {senders[key]} and {tb.id} both send to rank {tb.send} on channel {tb.chan}",
                                **where))
                senders[key] = tb.id
                per_chan[tb.chan][0] += 1
            if tb.recv >= 0:
                key = (tb.recv, tb.chan)
                if key in receivers:
                    err(Problem(f"tbs {receivers[key]} and {tb.id} both receive from rank {tb.recv} on channel "
                                f"{tb.chan}", **where))
                receivers[key] = tb.id
                per_chan[tb.chan][1] += 1
            if len(tb.steps) > limits.steps_per_tb:
                err(Problem(f"{len(tb.steps)} steps; {runtime} allows {limits.steps_per_tb} per thread block "
                            f"({len(tb.steps) - limits.steps_per_tb} too many)", **where))
            if len(tb.steps) > limits.children_per_element:
                err(Problem(f"{len(tb.steps)} steps; the parser keeps {limits.children_per_element}", **where))
            steps_of[(rank, tb.id)] = tb.steps
        for chan, (sends, recvs) in per_chan.items():
            if max(sends, recvs) > limits.tbs_per_channel_direction:
                err(Problem(f"channel {chan} has {sends} sending and {recvs} receiving thread blocks; at most "
                            f"{limits.tbs_per_channel_direction} each", rank=rank))
    if errors:
        return errors, warnings
    if max_chan + 1 < nchannels:
        warnings.append(Problem(f"nchannels={nchannels} but the highest chan is {max_chan}", line=program.line))

    targets: set[tuple[int, int, int]] = set()
    for gpu in program.gpus:
        for tb in gpu.tbs:
            _step_problems(program, gpu, tb, steps_of, targets, err, warnings)
    for rank, tb_id, s in sorted(targets):
        tb = program.gpus[rank].tbs[tb_id] if tb_id < len(program.gpus[rank].tbs) else None
        if tb is None or s >= len(tb.steps):
            continue
        step = tb.steps[s]
        if step.type == "nop":
            err(Problem("a dependency points at a nop, which publishes nothing", rank, tb_id, s, step.line))
        elif step.hasdep != 1:
            err(Problem("another thread block depends on this step but it has hasdep=0 (the waiter hangs)",
                        rank, tb_id, s, step.line))
        if tb_id > limits.dep_target_tb:
            err(Problem(f"tb {tb_id} is a dependency target; the runtime stores its id in int8 (ids <= "
                        f"{limits.dep_target_tb})", rank, tb_id, s, step.line))
    if not errors:
        errors.extend(_connection_problems(program))
    return errors, warnings


def _step_problems(program, gpu, tb, steps_of, targets, err, warnings) -> None:
    rank, limits_off = gpu.id, 32768
    pending_nops = 0
    for index, step in enumerate(tb.steps):
        where = dict(rank=rank, tb=tb.id, step=step.s, line=step.line)
        if step.s != index:
            err(Problem(f"s={step.s} but it is step {index} of its thread block (s must be 0,1,2,...)", **where))
            return
        kind = step.type
        if kind == "ra":
            err(Problem("type ra (residual add) is legacy-only and has no defined effect to check", **where))
        if kind == "nop":
            if step.depid < 0:
                err(Problem("a nop without a dependency: the runtime drops it without advancing its step "
                            "counter, so later deps on this thread block point one step too far", **where))
            pending_nops += 1
        else:
            if not 1 <= step.cnt <= 71:
                err(Problem(f"cnt={step.cnt}: expected 1..71", **where))
            if pending_nops and step.depid < 0:
                err(Problem(f"{pending_nops} nop(s) before this step but it has no dependency of its own: the "
                            "runtime requires the last dependency of a nop chain on the step itself", **where))
            pending_nops = 0
        if step.hasdep not in (0, 1):
            err(Problem(f"hasdep={step.hasdep}: expected 0 or 1", **where))
        if kind in SENDS and tb.send < 0:
            err(Problem(f"a {kind} step in a thread block with send=-1", **where))
        if kind in RECEIVES and tb.recv < 0:
            err(Problem(f"a {kind} step in a thread block with recv=-1", **where))
        uses_src, uses_dst = USES[kind]
        for used, buf, off in ((uses_src, step.srcbuf, step.srcoff), (uses_dst, step.dstbuf, step.dstoff)):
            size = program.chunks(gpu, buf)
            if not -1 <= off < limits_off:
                err(Problem(f"offset {off} outside -1..32767 (stored as int16)", **where))
            elif used and not (0 <= off and off + step.cnt <= size):
                err(Problem(f"{buf}[{off}..{off + step.cnt}) is outside {buf} ({buf}_chunks={size})", **where))
        if step.depid < -1 or step.deps < -1:
            err(Problem(f"depid={step.depid} deps={step.deps}: expected -1 or an index", **where))
            continue
        if step.depid >= 0 or step.deps >= 0:
            if (step.depid < 0) != (step.deps < 0):
                err(Problem(f"depid={step.depid} deps={step.deps}: both or neither must be -1", **where))
                continue
            if step.depid >= len(gpu.tbs):
                err(Problem(f"depid={step.depid}: this rank has {len(gpu.tbs)} thread blocks", **where))
                continue
            target_steps = steps_of[(rank, step.depid)]
            if step.deps >= len(target_steps):
                err(Problem(f"deps={step.deps}: tb {step.depid} has {len(target_steps)} steps", **where))
                continue
            if step.depid == tb.id and step.deps >= step.s:
                err(Problem("waits on a later step of its own thread block (deadlock)", **where))
                continue
            targets.add((rank, step.depid, step.deps))
    if pending_nops:
        last = tb.steps[-1]
        err(Problem(f"the thread block ends with {pending_nops} nop(s): an unterminated nop chain (the runtime "
                    "folds nops into the next real step)", rank, tb.id, last.s, last.line))


def _connection_problems(program: Program) -> list[Problem]:
    """Per connection (sender, receiver, channel): equal numbers of sends and receives with equal cnt (§1.8)."""
    problems = []
    sends: dict[tuple[int, int, int], tuple[int, list[Step]]] = {}
    recvs: dict[tuple[int, int, int], tuple[int, list[Step]]] = {}
    for gpu in program.gpus:
        for tb in gpu.tbs:
            if tb.send >= 0:
                sends[(gpu.id, tb.send, tb.chan)] = (tb.id, [s for s in tb.steps if s.type in SENDS])
            if tb.recv >= 0:
                recvs[(tb.recv, gpu.id, tb.chan)] = (tb.id, [s for s in tb.steps if s.type in RECEIVES])
    for key in sorted(set(sends) | set(recvs)):
        src, dst, chan = key
        stb, ss = sends.get(key, (None, []))
        rtb, rr = recvs.get(key, (None, []))
        for k in range(max(len(ss), len(rr))):
            if k >= len(ss):
                problems.append(Problem(f"receive number {k} from rank {src} on channel {chan} has no matching send "
                                        f"({len(ss)} sends, {len(rr)} receives)", dst, rtb, rr[k].s, rr[k].line))
                break
            if k >= len(rr):
                problems.append(Problem(f"send number {k} to rank {dst} on channel {chan} is never received "
                                        f"({len(ss)} sends, {len(rr)} receives)", src, stb, ss[k].s, ss[k].line))
                break
            if ss[k].cnt != rr[k].cnt:
                problems.append(Problem(f"receive number {k} from rank {src} on channel {chan} has cnt={rr[k].cnt} "
                                        f"but the matching send (rank {src} tb {stb} step {ss[k].s}) has "
                                        f"cnt={ss[k].cnt}", dst, rtb, rr[k].s, rr[k].line))
                break
    return problems
