"""Write a :class:`~.schedule.Schedule` as a :class:`~..plan.Plan`: number the channels, peer buffers,
semaphores and thread blocks the way the executor resolves them, and render every item as operations.

Channels: per rank and type, one entry per flow that touches the rank, ordered by (peer, flow), so the
k-th channel of a rank to a peer and the peer's k-th channel back carry the same flow. Scratch: plain
slots after the packet slots (an LL plan's scratch holds packets at twice their offset).

Addresses: the executor reaches a peer's buffer at the referring rank's own offset of that buffer in its
allocation, and a port put's source from the start of its allocation, so in place those references name
the buffer that holds both (AllGather's output, the others' input). A port put's source is scratch when
the layout staged it (placement ``anywhere``); otherwise (``start``) the plan assumes the input or output
it reads starts its allocation on every rank.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from ....model.algorithm import Algorithm
from ..plan import (MAX_CHANNELS_PER_OP, MAX_SEMAPHORES_PER_OP, BufferRef, Channel, Gpu, Op, Plan, RemoteBuffer,
                    ThreadBlock)
from .layout import Layout, Loc, SwitchMove, canonical
from .schedule import Flow, Item, Schedule

_KIND_ORDER = {"pair": 0, "recv": 1, "send": 2, "local": 3, "switch": 4}


class _Slots:
    """Plan buffer indices of layout slots (per rank)."""

    def __init__(self, lay: Layout, proto: str, coll, inplace: bool) -> None:
        self.lay, self.ll, self.coll, self.inplace = lay, proto == "LL", coll, inplace

    def far(self, rank: int, loc: Loc) -> tuple[str, int]:
        """The index of ``loc`` as a peer's reference or a port put's source names it: in place, in the
        buffer that holds input and output (the executor adds no offset of the inner one there)."""
        buf, idx = self.index(rank, loc)
        return (buf, idx) if buf == "s" else canonical(self.coll, rank, (buf, idx), self.inplace)[1:]

    def index(self, rank: int, loc: Loc) -> tuple[str, int]:
        buf, idx = loc
        if buf == "p":
            return ("s", idx)
        if buf == "s" and self.ll:
            return ("s", 2 * self.lay.packet[rank] + idx)
        return (buf, idx)

    def scratch_chunks(self, rank: int) -> int:
        if self.ll:
            return self.lay.packet[rank] + (self.lay.plain[rank] + 1) // 2
        return self.lay.plain[rank]


def runs(chunks, maps) -> list[tuple[tuple[tuple[str, int], ...], int]]:
    """Maximal runs of chunks whose slots are consecutive in every map: (first slot per map, length)."""
    order = sorted(chunks, key=lambda c: maps[0][c])
    out: list[list] = []
    for c in order:
        locs = tuple(m[c] for m in maps)
        if out:
            first, n = out[-1]
            if all(a[0] == b[0] and a[1] + n == b[1] for a, b in zip(first, locs)):
                out[-1][1] += 1
                continue
        out.append([locs, 1])
    return [(tuple(first), n) for first, n in out]


def render(algorithm: Algorithm, lay: Layout, sched: Schedule, flows: tuple[Flow, ...], proto: str, inplace: bool,
           name: str, min_bytes: int, max_bytes: int, meta: dict) -> tuple[Plan, dict[tuple[int, int], tuple]]:
    """(the plan, (rank, tb id) -> block key)."""
    coll = algorithm.collective
    R = coll.ranks
    slots = _Slots(lay, proto, coll, inplace)
    kinds = sched.channel_kind
    all_flows = sorted(kinds)
    chan: dict[tuple[int, Flow], int] = {}
    peers: dict[tuple[int, str], list[int]] = defaultdict(list)
    for r in range(R):
        for kind in ("memory", "port"):
            mine = sorted((f[1] if f[0] == r else f[0], f) for f in all_flows if r in f[:2] and kinds[f] == kind)
            for peer, f in mine:
                chan[(r, f)] = len(peers[(r, kind)])
                peers[(r, kind)].append(peer)
    moves = {m.t: m for m in lay.moves}
    switches = _switch_channels(algorithm, lay, slots)
    remote: dict[int, dict[tuple[int, str], set]] = defaultdict(lambda: defaultdict(set))
    for b in sched.blocks.values():
        for it in b.items:
            if it.kind == "put":
                tr = algorithm.transfers[it.move]
                for loc in moves[it.move].land.values():
                    remote[b.rank][(tr.dst, slots.far(tr.dst, loc)[0])].add(kinds[it.flow])
    remote_ids = {r: {key: i for i, key in enumerate(sorted(remote[r]))} for r in range(R)}
    gpus, owner = [], {}
    for r in range(R):
        keys = sorted((k for k, b in sched.blocks.items() if b.rank == r),
                      key=lambda k: (_KIND_ORDER[k[0]],) + tuple(k[1:]))
        tbs = []
        for tb_id, key in enumerate(keys):
            owner[(r, tb_id)] = key
            tbs.append(_Block(algorithm, slots, moves, chan, kinds, remote_ids[r], r, switches.get(r, ())).render(
                tb_id, sched.blocks[key].items))
        channels = tuple(Channel(kind, tuple(peers[(r, kind)])) for kind in ("memory", "port") if peers[(r, kind)])
        channels += tuple(Channel("switch", buffer_type=buf, rank_groups=((len(group), group),))
                          for group, buf in switches.get(r, ()))
        buffers = tuple(RemoteBuffer(peer, buf, tuple(sorted(remote[r][(peer, buf)])))
                        for (peer, buf) in sorted(remote[r]))
        gpus.append(Gpu(r, coll.input_chunks(r), coll.output_chunks(r), slots.scratch_chunks(r), tuple(tbs), channels,
                        buffers, tuple(0 for _ in sched.semaphores.get(r, ()))))
    plan = Plan(name, coll.name, proto, inplace, tuple(gpus), min_message_size=min_bytes,
                max_message_size=max_bytes, meta=meta)
    return plan, owner


def _extend(ops: list[Op], op: Op) -> bool:
    """Fold switch operation ``op`` into the one before it where it continues it on both sides (pieces of
    one cell range issued back to back: the same accesses in the same segment, one operation)."""
    last = ops[-1]
    if op.name not in ("glres", "gstore") or last.name != op.name:
        return False
    pairs = list(zip(last.src + last.dst, op.src + op.dst))
    if any((a.type, a.switch_channel_id) != (b.type, b.switch_channel_id) or a.index + a.size != b.index
           for a, b in pairs):
        return False
    def grow(refs, more):
        return tuple(replace(r, size=r.size + m.size) for r, m in zip(refs, more))

    ops[-1] = replace(last, src=grow(last.src, op.src), dst=grow(last.dst, op.dst))
    return True


def _switch_channels(algorithm, lay: Layout, slots) -> dict[int, tuple[tuple[tuple[int, ...], str], ...]]:
    """rank -> its switch channels (group, buffer type): per group one per buffer type its operations
    address, listed alike on every member (the executor joins each group's NVLS connection collectively)."""
    used: dict[tuple[int, ...], set[str]] = defaultdict(set)
    for m in lay.moves:
        if isinstance(m, SwitchMove):
            for loc in list((m.read or {}).values()) + list(m.land.values()):
                used[m.group].add(slots.far(m.rank, loc)[0])
    out: dict[int, list] = defaultdict(list)
    for group in sorted(used):
        for buf in sorted(used[group]):
            for r in group:
                out[r].append((group, buf))
    return {r: tuple(v) for r, v in out.items()}


class _Block:
    """Renders one block's items; collects the channels and peer buffers its operations name."""

    def __init__(self, algorithm, slots, moves, chan, kinds, remote_ids, rank, switches=()) -> None:
        self.algorithm, self.slots, self.moves, self.chan, self.kinds = algorithm, slots, moves, chan, kinds
        self.remote_ids, self.rank, self.switches = remote_ids, rank, switches
        self.channels: dict[str, list[int]] = {"memory": [], "port": [], "switch": []}
        self.buffers: dict[str, list[int]] = {"memory": [], "port": []}

    def channel(self, flow: Flow) -> tuple[str, int]:
        kind = self.kinds[flow]
        ids = self.channels[kind]
        c = self.chan[(self.rank, flow)]
        if c not in ids:
            ids.append(c)
        return kind, ids.index(c)

    def switch_ref(self, group, loc: tuple[str, int], n: int) -> BufferRef:
        """A reference to ``loc`` on every member of ``group`` through their switch channel."""
        buf, idx = loc
        c = self.switches.index((group, buf))
        ids = self.channels["switch"]
        if c not in ids:
            ids.append(c)
        return BufferRef(idx, n, switch_channel_id=ids.index(c))

    def switch(self, move: SwitchMove) -> list[Op]:
        r = self.rank
        far = {c: self.slots.far(r, loc) for c, loc in move.land.items()}
        if move.read is not None:
            near = {c: self.slots.far(r, loc) for c, loc in move.read.items()}
        else:                                # a store reads the issuer's slot through its real pointer
            near = {c: self.slots.index(r, loc) for c, loc in move.source.items()}
        out = []
        for (src, dst), n in runs(list(move.land), [near, far]):
            if move.read is not None:
                out.append(Op("glres", "switch", None, (self.switch_ref(move.group, src, n),),
                              (self.switch_ref(move.group, dst, n),), reduce_op="sum"))
            else:
                out.append(Op("gstore", "switch", None, (self.local(src, n),), (self.switch_ref(move.group, dst, n),)))
        return out

    def peer_buffer(self, peer: int, buf: str, kind: str) -> int:
        rid = self.remote_ids[(peer, buf)]
        ids = self.buffers[kind]
        if rid not in ids:
            ids.append(rid)
        return ids.index(rid)

    def local(self, loc: tuple[str, int], n: int) -> BufferRef:
        return BufferRef(loc[1], n, type=loc[0])

    def render(self, tb_id: int, items: list[Item]) -> ThreadBlock:
        ops: list[Op] = []
        for it in items:
            for op in self.ops(it):
                if not (ops and _extend(ops, op)):
                    ops.append(op)
            if it.release:
                ops.append(Op("nop"))
                ids = sorted(set(it.release))
                ops.extend(Op("sem_release", semaphore_ids=tuple(ids[i:i + MAX_SEMAPHORES_PER_OP]))
                           for i in range(0, len(ids), MAX_SEMAPHORES_PER_OP))
        channels = tuple((k, tuple(v)) for k, v in self.channels.items() if v)
        refs = tuple((k, tuple(v)) for k, v in self.buffers.items() if v)
        return ThreadBlock(tb_id, tuple(ops), channels, refs)

    def ops(self, it: Item) -> list[Op]:
        kind = it.kind
        if kind == "nop":
            return [Op("nop")]
        if kind == "acquire":
            return [Op("sem_acquire", semaphore_ids=tuple(it.sems[i:i + MAX_SEMAPHORES_PER_OP]))
                    for i in range(0, len(it.sems), MAX_SEMAPHORES_PER_OP)]
        if kind in ("rlxsignal", "rlxwait", "wait", "signal"):
            ctype, c = self.channel(it.flow)
            return [Op(kind, channel_type=ctype, channel_ids=(c,))]
        if kind == "switch":
            return self.switch(self.moves[it.move])
        if kind == "copy":
            src, dst, n = it.copies
            r = self.rank
            return [Op("copy", src=(self.local(self.slots.index(r, src), n),),
                       dst=(self.local(self.slots.index(r, dst), n),))]
        move = self.moves[it.move]
        tr = self.algorithm.transfers[it.move]
        if kind == "put":
            return self.put(it, move, tr)
        d = tr.dst
        maps = [{c: self.slots.index(d, loc) for c, loc in m.items()}
                for m in (move.operand, move.land, move.result) if m is not None]
        out = []
        for first, n in runs(tr.chunks, maps):
            refs = [self.local(loc, n) for loc in first]
            if kind == "reduce":
                out.append(Op("re", src=(refs[0], refs[1]), dst=(refs[2],), reduce_op="sum"))
            elif move.operand is not None:
                out.append(Op("repkt", src=(refs[0], refs[1]), dst=(refs[2],), reduce_op="sum"))
            else:
                out.append(Op("upkt", src=(refs[0],), dst=(refs[1],)))
        return out

    def put(self, it: Item, move, tr) -> list[Op]:
        ctype, c = self.channel(it.flow)
        s, d = tr.src, tr.dst
        source = self.slots.far if ctype == "port" else self.slots.index
        read = {k: source(s, v) for k, v in move.read.items()}
        land = {k: self.slots.far(d, v) for k, v in move.land.items()}
        pairs = []
        for (src, dst), n in runs(it.chunks or tr.chunks, [read, land]):
            pairs.append((self.local(src, n), BufferRef(dst[1], n, buffer_id=self.peer_buffer(d, dst[0], ctype))))
        if ctype == "port":         # one request per pair; the last one signals (and flushes when it must)
            ops = []
            for i in range(0, len(pairs) - 1, MAX_CHANNELS_PER_OP):
                group = pairs[i:min(i + MAX_CHANNELS_PER_OP, len(pairs) - 1)]
                ops.append(Op("put", "port", (c,) * len(group), tuple(p[0] for p in group),
                              tuple(p[1] for p in group)))
            src, dst = pairs[-1]
            if not it.signal:       # a part of a staged move: its last part signals
                return ops + [Op("put", "port", (c,), (src,), (dst,))]
            return ops + [Op("pwsf" if it.flush else "pws", "port", (c,), (src,), (dst,))]
        name = "ppkt" if move.packets else "put"
        ops = []
        by_type: dict[str, list] = defaultdict(list)    # the kernel reads every entry from src_buff[0]'s buffer
        for pair in pairs:
            by_type[pair[0].type].append(pair)
        for group in by_type.values():
            for i in range(0, len(group), MAX_CHANNELS_PER_OP):
                part = group[i:i + MAX_CHANNELS_PER_OP]
                ops.append(Op(name, "memory", None, tuple(p[0] for p in part), tuple(p[1] for p in part)))
        if not move.packets:
            ops += [Op("nop"), Op("signal", channel_type="memory", channel_ids=(c,))]
        return ops
