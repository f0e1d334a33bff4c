"""Replay an MSCCL++ plan the way the executor's kernel (``execution_kernel.hpp``) runs it, several calls
back to back.

Thread blocks run concurrently; memory is cells holding labels of input units; order comes only from
signal/wait, semaphores, barriers and LL flags, and port-channel puts run on a proxy's timeline. Vector
clocks flag every unordered pair of conflicting accesses (a race) whatever the interleaving; one
deterministic interleaving decides values and deadlocks, and every call's outputs must hold the
collective's result. The model rule by rule, and where it is coarser than the hardware:
``docs/internals.md``."""
from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np

from ..plan import BufferRef, Plan, channel_partners, remote_buffer, switch_channel
from .report import Problem
from .static import lone_pipeline_op

_BUF = {"i": 0, "o": 1, "s": 2}
_NAMES = "ios"
READS_PACKETS = frozenset(("rppkt", "upkt", "repkt", "respkt", "recpkt", "recspkt"))


@dataclass
class _Tb:
    rank: int
    tb: object
    lane: int
    pc: int = 0
    call: int = -1
    seg: int = 1
    vc: np.ndarray | None = None
    pending: np.ndarray | None = None
    barrier_round: int | None = None
    blocked: str | None = None
    idle: bool = True

    # a block's accesses in segment s happen at epoch 2s; the plain reads of an operation that writes
    # packets at 2s - 1, so what its packets carry covers them (those threads wrote the packets after
    # reading) but not the rest of the segment; its own clock entry is 2s - 2 until the next nop
    @property
    def epoch(self) -> int:
        return 2 * self.seg


@dataclass
class _Proxy:
    lane: int
    vc: np.ndarray
    epoch: int = 0


class _Outside(Exception):
    """An operation addresses memory no buffer of the rank holds (the message says which)."""


class _Race(Exception):
    def __init__(self, problem: Problem) -> None:
        self.problem = problem


class Replay:
    """One buffer mode of one plan; :meth:`run` replays ``calls`` calls and returns the first problem."""

    def __init__(self, plan: Plan, mode: str, calls: int | None = None, offsets: bool = False) -> None:
        self.plan, self.mode, self.offsets = plan, mode, offsets
        self.R = plan.ranks
        sizes = [op.tbg[1] for g in plan.gpus for tb in g.threadblocks for op in tb.ops if op.tbg]
        self.U = math.lcm(*sizes) if sizes else 1
        g0 = plan.gpus[0]
        self.in_units, self.out_units = g0.input_chunks * self.U, g0.output_chunks * self.U
        self.calls = calls or (3 if plan.use_double_scratch_buffer else 2)
        self.partners = channel_partners(plan)
        root = plan.meta.get("root") if isinstance(plan.meta, dict) else None
        self.root = root if isinstance(root, int) and not isinstance(root, bool) and 0 <= root < self.R else None
        lanes = self.R
        self.tbs: list[_Tb] = []
        for g in plan.gpus:
            for tb in g.threadblocks:
                self.tbs.append(_Tb(g.id, tb, lanes))
                lanes += 1
        self.proxy_keys = sorted({(g.id, tb.id, tb.channel_list("port")[c]) for g in plan.gpus
                                  for tb in g.threadblocks for op in tb.ops if op.channel_type == "port"
                                  for c in (op.channel_ids or ()) if c < len(tb.channel_list("port"))})
        self.proxy_lane = {k: lanes + i for i, k in enumerate(self.proxy_keys)}
        self.L = lanes + len(self.proxy_keys)
        self.place = [self._placement(r) for r in range(self.R)]
        self._want_cache: dict[tuple, tuple] = {}

    def _placement(self, rank: int) -> dict[str, tuple[int, int, int]]:
        """buffer -> (allocation, start unit in it, buffer index of the cells it holds): in place one
        allocation holds both, its cells named after the larger (as the executor test aliases them)."""
        i_pad, o_pad = (self.U, 2 * self.U) if self.offsets else (0, 0)
        if self.mode != "inplace":
            return {"i": (0, i_pad, 0), "o": (1, o_pad, 1)}
        coll = self.plan.collective
        if coll == "allgather":
            return {"o": (1, o_pad, 1), "i": (1, o_pad + rank * self.in_units, 1)}
        if coll == "reducescatter":
            return {"i": (0, i_pad, 0), "o": (0, i_pad + rank * self.out_units, 0)}
        return {"i": (0, i_pad, 0), "o": (0, i_pad, 0)}

    # ------------------------------------------------------------------ cells
    def cells(self, rank: int, buf: str, ref, tbg, half: int, packet: bool = False, via=None) -> list[tuple]:
        """The cells ``ref`` covers on ``rank`` (after the thread-block group's share and aliasing).

        ``via`` is how the executor computes the address of an input or output buffer: None through its real
        pointer, ``"registered"`` from its allocation's start (a port-channel put's source), or the rank
        whose const offset is added (a reference to a peer's buffer)."""
        U = self.U
        start, n = ref.index * U, ref.size * U
        if tbg is not None:
            k, g = tbg
            lo, hi = k * (n // g) + min(k, n % g), (k + 1) * (n // g) + min(k + 1, n % g)
            start, n = start + lo, hi - lo
        if packet:      # packet of data unit x: plain scratch units 2x and 2x+1; the packet lives at 2x
            return [(rank, 2, half, 2 * x) for x in range(start, start + n)]
        if buf == "s":
            return [(rank, 2, half, x) for x in range(start, start + n)]
        alloc, base, _ = self.place[rank][buf]
        if via == "registered":
            base = 0
        elif via is not None:
            base = self.place[via][buf][1]
        return [self._locate(rank, alloc, base + x, buf, via) for x in range(start, start + n)]

    def _locate(self, rank: int, alloc: int, pos: int, buf: str, via) -> tuple:
        """The cell at unit ``pos`` of ``rank``'s allocation ``alloc``; _Outside if no buffer holds it."""
        for name in ("i", "o"):
            a, start, idx = self.place[rank][name]
            size = self.in_units if name == "i" else self.out_units
            if a == alloc and idx == _BUF[name] and start <= pos < start + size:
                return (rank, idx, 0, pos - start)
        how = {None: "its real pointer", "registered": "the registered memory (from the allocation's start, "
               "no const offset: a port-channel put's source)"}.get(via, f"rank {via}'s const offset")
        raise _Outside(f"an address outside rank {rank}'s buffers: {buf} through {how} reaches unit {pos} of its "
                       f"allocation, whose buffers sit at {self._spans(rank, alloc)}")

    def _spans(self, rank: int, alloc: int) -> str:
        return ", ".join(f"{name} from unit {start}" for name, (a, start, _) in self.place[rank].items() if a == alloc)

    def canon(self, rank: int, buf: str, half: int, unit: int) -> tuple:
        if buf == "s":
            return (rank, 2, half, unit)
        alloc, start, _ = self.place[rank][buf]
        return self._locate(rank, alloc, start + unit, buf, None)

    def half(self, call: int) -> int:
        """Scratch half a call's local and packet accesses use (the kernel offsets scratch by half its size
        when the launch flag, call + 1, is even)."""
        return call % 2 if self.plan.use_double_scratch_buffer else 0

    def _wanted(self, rank: int, unit: int, call: int) -> tuple:
        """:meth:`expected`, shared by the ranks where it does not depend on the rank (AllReduce, Broadcast)."""
        if self.plan.collective not in ("allreduce", "broadcast"):
            return self.expected(rank, unit, call)
        key = (unit, call, self.root)
        want = self._want_cache.get(key)
        if want is None:
            want = self._want_cache[key] = self.expected(rank, unit, call)
        return want

    def expected(self, rank: int, unit: int, call: int) -> tuple | None:
        coll, R = self.plan.collective, self.R
        if coll == "allgather":
            return ((0, call, unit // self.in_units, unit % self.in_units),)
        if coll == "reducescatter":
            return tuple((0, call, q, rank * self.out_units + unit) for q in range(R))
        if coll == "allreduce":
            return tuple((0, call, q, unit) for q in range(R))
        if coll == "alltoall":
            blk = self.in_units // R
            return ((0, call, unit // blk, rank * blk + unit % blk),)
        return ((0, call, self.root if self.root is not None else 0, unit),)

    # ------------------------------------------------------------------ the run
    def run(self) -> Problem | None:
        try:
            return self._run()
        except _Race as race:
            return race.problem

    def _run(self) -> Problem | None:
        plan, L = self.plan, self.L
        self.mem: dict[tuple, tuple] = {}
        self.pkt: dict[tuple, tuple] = {}          # cell -> (value, flag, writer vc)
        self.acc: dict[tuple, list] = {}           # cell -> [last write, {lane: read}]
        self.inbox: dict[tuple, list] = defaultdict(list)
        self.taken: dict[tuple, int] = defaultdict(int)
        self.sems = {(g.id, s): deque([None] * v) for g in plan.gpus for s, v in enumerate(g.semaphores)}
        self.barriers: dict[tuple, list] = {}
        self.proxies = {k: _Proxy(self.proxy_lane[k], np.zeros(L, dtype=np.int64)) for k in self.proxy_keys}
        self.host_vc = [np.zeros(L, dtype=np.int64) for _ in range(self.R)]
        self.start_vc = [None] * self.R
        self.waiters: dict[tuple, list[int]] = defaultdict(list)
        self.ready: deque[int] = deque()
        self.by_rank: dict[int, list[int]] = defaultdict(list)
        for k, t in enumerate(self.tbs):
            self.by_rank[t.rank].append(k)
        self.finished = [0] * self.R
        self.call_of = [-1] * self.R
        for r in range(self.R):
            problem = self._boundary(r)
            if problem:
                return problem
        while self.ready:
            k = self.ready.popleft()
            t = self.tbs[k]
            if t.blocked is None and not t.idle:
                problem = self._step(k, t)
                if problem:
                    return problem
        unfinished = [r for r in range(self.R) if self.call_of[r] < self.calls]
        if unfinished:
            stuck = [t for t in self.tbs if t.rank in unfinished and not t.idle]
            if not stuck:
                return Problem("deadlock: a rank never finishes its call", rank=unfinished[0], mode=self.mode)
            t = min(stuck, key=lambda t: (t.blocked is None, t.rank, t.tb.id))
            return Problem(f"deadlock: {t.blocked} ({len(stuck)} thread blocks stuck)", rank=t.rank, tb=t.tb.id,
                           op=t.pc, mode=self.mode, call=t.call + 1)
        for (rank, s), queue in sorted(self.sems.items()):
            init = plan.gpus[rank].semaphores[s]
            if len(queue) != init:
                return Problem(f"semaphore {s} ends at {len(queue)} but started at {init}: releases and acquires "
                               "differ, so the next call's acquires are off", rank=rank, mode=self.mode)
        return None

    def _boundary(self, rank: int) -> Problem | None:
        """Rank ``rank``'s host between calls: read the outputs of the call that ended, write new inputs,
        start the next call."""
        call = self.call_of[rank]              # the call that just ended (-1 before the first)
        vc = self.host_vc[rank]
        for k in self.by_rank[rank]:
            t = self.tbs[k]
            if t.vc is not None:
                np.maximum(vc, t.vc, out=vc)
                vc[t.lane] = 2 * t.seg
                if t.pending is not None:
                    np.maximum(vc, t.pending, out=vc)
        epoch = 2 * call + 3                       # the host reads at this epoch, then writes at the next
        vc[rank] = epoch - 1
        who = ("host", rank, call + 1)             # reads the result of the call that ended (1-based)
        plan = self.plan
        if call >= 0:
            g = plan.gpus[rank]
            for unit in range(g.output_chunks * self.U):
                cell = self.canon(rank, "o", 0, unit)
                self._access(cell, rank, epoch, vc, who, False)
                want = self._wanted(rank, unit, call)
                got = self.mem.get(cell, ((1,) + cell,))
                if self.plan.collective == "broadcast" and self.root is None and call == 0 and rank == 0 and unit == 0 \
                        and len(got) == 1 and got[0][0] == 0:
                    self.root = got[0][2]
                    want = self.expected(rank, unit, call)
                if got != want and tuple(sorted(got)) != tuple(sorted(want)):
                    where = self.acc.get(cell, [None])[0]
                    note = f" (last written by {_who(where[3])})" if where else " (never written)"
                    return Problem(f"output o[{self._unit(unit)}] ends as {_describe(got)} but "
                                   f"{plan.collective} needs {_describe(want)}{note}", rank=rank, mode=self.mode,
                                   call=call + 1)
        self.call_of[rank] = call + 1
        if call + 1 >= self.calls:
            return None
        g = plan.gpus[rank]
        vc[rank] = epoch
        epoch += 1
        who = ("host", rank, call + 2)             # the inputs of the next call (1-based)
        for unit in range(g.input_chunks * self.U):
            cell = self.canon(rank, "i", 0, unit)
            self._access(cell, rank, epoch, vc, who, True)
            self.mem[cell] = ((0, call + 1, rank, unit),)
        vc[rank] = epoch
        self.start_vc[rank] = vc.copy()
        self.finished[rank] = 0
        for k in self.by_rank[rank]:
            t = self.tbs[k]
            t.call, t.pc, t.pending, t.idle = call + 1, 0, None, False
            if t.vc is None:
                t.vc = vc.copy()
            else:
                t.seg += 1
                np.maximum(t.vc, vc, out=t.vc)
            t.vc[t.lane] = 2 * t.seg - 2
            t.blocked = None
            self.ready.append(k)
        if not self.by_rank[rank]:
            return self._boundary(rank)
        return None

    def _step(self, k: int, t: _Tb) -> Problem | None:
        ops = t.tb.ops
        if t.pc >= len(ops):
            t.idle = True
            self.finished[t.rank] += 1
            if self.finished[t.rank] == len(self.by_rank[t.rank]):
                return self._boundary(t.rank)
            return None
        op = ops[t.pc]
        reason = self._blocked(t, op)
        if reason is not None:
            key, text = reason
            t.blocked = text
            self.waiters[key].append(k)
            return None
        try:
            self._execute(t, op)
        except _Outside as err:
            return Problem(str(err), rank=t.rank, tb=t.tb.id, op=t.pc, mode=self.mode, call=t.call + 1)
        t.pc += 1
        self.ready.append(k)
        return None

    def _wake(self, key: tuple) -> None:
        for k in self.waiters.pop(key, ()):
            self.tbs[k].blocked = None
            self.ready.append(k)

    # ------------------------------------------------------------------ blocking
    def _blocked(self, t: _Tb, op) -> tuple[tuple, str] | None:
        g = self.plan.gpus[t.rank]
        name = op.name
        if name in ("wait", "rlxwait"):
            ids = t.tb.channel_list(op.channel_type)
            for c in op.channel_ids:
                key = (t.rank, op.channel_type, ids[c])
                if len(self.inbox[key]) <= self.taken[key]:
                    peer = g.peers(op.channel_type)[ids[c]]
                    return ("inbox",) + key, f"waits for signal {self.taken[key] + 1} from rank {peer} on " \
                                             f"{op.channel_type} channel {ids[c]}"
        elif name == "sem_acquire":
            for s in op.semaphore_ids:
                if len(self.sems[(t.rank, s)]) < op.semaphore_ids.count(s):
                    return ("sem", t.rank, s), f"waits to acquire semaphore {s}"
        elif name == "barrier":
            key = (t.rank, op.barrier_id)
            if t.barrier_round is None:
                self._close_segment(t)
                rounds = self.barriers.setdefault(key, [0, []])
                t.barrier_round = rounds[0]
                rounds[1].append(t)
                if len(rounds[1]) >= op.num_threadblocks:
                    join = np.zeros(self.L, dtype=np.int64)
                    for u in rounds[1]:
                        np.maximum(join, u.vc, out=join)
                    for u in rounds[1]:
                        np.maximum(u.vc, join, out=u.vc)
                        u.vc[u.lane] = 2 * u.seg - 2
                        u.barrier_round = -1
                    rounds[0] += 1
                    rounds[1] = []
                    self._wake(("barrier",) + key)
            if t.barrier_round != -1:
                return ("barrier",) + key, f"waits at barrier {op.barrier_id} for {op.num_threadblocks} thread blocks"
        elif name in READS_PACKETS:
            flag = t.call + 1
            for cell in self._packet_sources(t, op):
                have = self.pkt.get(cell)
                if have is None or have[1] != flag:
                    what = "nothing" if have is None else f"flag {have[1]}"
                    return ("pkt", cell), f"waits for packets of call {flag} in s[{self._cell(cell, True)}] " \
                                          f"(holds {what})"
        return None

    def _packet_sources(self, t: _Tb, op) -> list[tuple]:
        half = self.half(t.call)
        refs = op.src[:1] if op.name in ("rppkt", "upkt") else op.src[1:]
        return [c for ref in refs for c in self.cells(t.rank, "s", ref, op.tbg, half, packet=True)]

    # ------------------------------------------------------------------ execution
    def _close_segment(self, t: _Tb) -> None:
        t.vc[t.lane] = 2 * t.seg
        if t.pending is not None:
            np.maximum(t.vc, t.pending, out=t.vc)
            t.pending = None
        t.seg += 1

    def _acquire(self, t: _Tb, vc: np.ndarray | None) -> None:
        if vc is None:
            return
        if t.pending is None:
            t.pending = vc.copy()
        else:
            np.maximum(t.pending, vc, out=t.pending)

    def _execute(self, t: _Tb, op) -> None:
        op = lone_pipeline_op(op) or op
        name, rank, g, tb = op.name, t.rank, self.plan.gpus[t.rank], t.tb
        who = (rank, tb.id, t.pc, name, t.call)
        half = self.half(t.call)
        if name == "nop":
            self._close_segment(t)
        elif name == "barrier":
            t.barrier_round = None
        elif name in ("signal", "rlxsignal"):
            ids = tb.channel_list(op.channel_type)
            for c in op.channel_ids:
                j = ids[c]
                if op.channel_type == "port":
                    full = self._proxy_event(t, j, ())
                else:
                    full = self.start_vc[rank] if name == "rlxsignal" else t.vc.copy()
                self._signal(rank, op.channel_type, j, full)
        elif name in ("wait", "rlxwait"):
            ids = tb.channel_list(op.channel_type)
            for c in op.channel_ids:
                key = (rank, op.channel_type, ids[c])
                full, start = self.inbox[key][self.taken[key]]
                self.taken[key] += 1
                self._acquire(t, start if name == "rlxwait" and op.channel_type == "memory" else full)
        elif name == "sem_release":
            for s in op.semaphore_ids:
                self.sems[(rank, s)].append(t.vc.copy())
                self._wake(("sem", rank, s))
        elif name == "sem_acquire":
            for s in op.semaphore_ids:
                self._acquire(t, self.sems[(rank, s)].popleft())
        elif name == "flush":
            ids = tb.channel_list("port")
            for c in (op.channel_ids or ())[:len(op.dst)]:
                proxy = self.proxies.get((rank, tb.id, ids[c]))
                if proxy is not None:
                    self._acquire(t, proxy.vc)
        elif name in ("put", "pws", "pwsf"):
            for i, dst in enumerate(op.dst):
                rb = remote_buffer(g, tb, op.channel_type, dst.buffer_id)
                if op.channel_type == "memory":
                    src = self.cells(rank, op.src[0].type, op.src[i], op.tbg, half)
                    out = self.cells(rb.rank, rb.type, dst, op.tbg, 0, via=rank)
                    self._move(t.lane, t.epoch, t.vc, who, src, out)
                else:
                    j = tb.channel_list("port")[op.channel_ids[i]]
                    src = self.cells(rank, op.src[i].type, op.src[i], op.tbg, 0, via="registered")
                    out = self.cells(rb.rank, rb.type, dst, op.tbg, 0, via=rank)
                    full = self._proxy_event(t, j, ((src, out, "copy"),), who)
                    if name in ("pws", "pwsf"):
                        self._signal(rank, "port", j, full)
                    if name == "pwsf":
                        self._acquire(t, full)
        elif name == "get":
            for i, src in enumerate(op.src):
                rb = remote_buffer(g, tb, "memory", src.buffer_id)
                # the kernel writes the local buffer at the remote reference's offset and reads the peer's
                # buffer at the local reference's offset (handleGet); with equal indices they agree
                local = self.cells(rank, op.dst[i].type, src, op.tbg, half)
                remote = self.cells(rb.rank, rb.type, op.dst[i], op.tbg, 0, via=rank)
                self._move(t.lane, t.epoch, t.vc, who, remote, local)
        elif name == "copy":
            self._move(t.lane, t.epoch, t.vc, who, self.cells(rank, op.src[0].type, op.src[0], op.tbg, half),
                       self.cells(rank, op.dst[0].type, op.dst[0], op.tbg, half))
        elif name in ("re", "res", "rre", "rres"):
            remote_in = name in ("rre", "rres")
            srcs = [self.cells(rank, op.src[0].type, op.src[0], op.tbg, half)]
            for ref in op.src[1:]:
                if remote_in:
                    rb = remote_buffer(g, tb, "memory", ref.buffer_id)
                    srcs.append(self.cells(rb.rank, rb.type, ref, op.tbg, 0, via=rank))
                else:
                    srcs.append(self.cells(rank, ref.type, ref, op.tbg, half))
            outs = [self.cells(rank, op.dst[0].type, op.dst[0], op.tbg, half)]
            if name in ("res", "rres"):
                for ref in op.dst[1:]:
                    rb = remote_buffer(g, tb, "memory", ref.buffer_id)
                    outs.append(self.cells(rb.rank, rb.type, ref, op.tbg, 0, via=rank))
            self._reduce(t.lane, t.epoch, t.vc, who, srcs, outs)
        elif name in ("glres", "gstore"):
            # multimem: a load-reduce reads the cell on every member and sums, a store writes every member;
            # the address is the issuer's (its const offset), the scratch without the double-buffer half
            if name == "glres":
                buf, ranks = switch_channel(g, tb, op.src[0])
                srcs = [self.cells(m, buf, op.src[0], op.tbg, 0, via=rank) for m in ranks]
            else:
                srcs = [self.cells(rank, op.src[0].type, op.src[0], op.tbg, half)]
            buf, ranks = switch_channel(g, tb, op.dst[0])
            dst = BufferRef(op.dst[0].index, op.src[0].size)        # the kernel takes the size from src_buff[0]
            self._reduce(t.lane, t.epoch, t.vc, who, srcs,
                         [self.cells(m, buf, dst, op.tbg, 0, via=rank) for m in ranks])
        else:
            self._packet_op(t, op, who, half)

    def _proxy_event(self, t: _Tb, channel: int, moves, who=None, extra: np.ndarray | None = None) -> np.ndarray:
        """One request on the proxy of (rank, block, port channel): ordered after the block's segment start
        and the proxy's earlier requests; returns the proxy's clock after it."""
        proxy = self.proxies[(t.rank, t.tb.id, channel)]
        np.maximum(proxy.vc, t.vc, out=proxy.vc)
        if extra is not None:
            np.maximum(proxy.vc, extra, out=proxy.vc)
        proxy.epoch += 1
        proxy.vc[proxy.lane] = proxy.epoch - 1
        for src, out, kind in moves:
            if kind == "copy":
                self._move(proxy.lane, proxy.epoch, proxy.vc, who, src, out)
            else:
                self._move_packets(proxy.lane, proxy.epoch, proxy.vc, who, src, out)
        proxy.vc[proxy.lane] = proxy.epoch
        return proxy.vc.copy()

    def _signal(self, rank: int, kind: str, channel: int, full: np.ndarray) -> None:
        partner = self.partners.get((rank, kind, channel))
        if partner is None:
            return
        peer, back = partner
        key = (peer, kind, back)
        self.inbox[key].append((full, self.start_vc[rank]))
        self._wake(("inbox",) + key)

    # ------------------------------------------------------------------ memory
    def _access(self, cell, lane, epoch, vc, who, write: bool, observed: bool = False) -> None:
        """Record an access; raise _Race if an earlier conflicting one is not ordered before it
        (``observed``: a packet read, which waits for the write it returns)."""
        st = self.acc.get(cell)
        if st is None:
            st = self.acc[cell] = [None, {}]
        w = st[0]
        if w is not None and not observed and w[2] != who and w[1] > vc[w[0]]:
            raise _Race(self._race(cell, w[3], who, "writes", write))
        if write:
            for l, (e, other) in st[1].items():
                if other != who and e > vc[l]:
                    raise _Race(self._race(cell, other, who, "reads", True))
            st[0] = (lane, epoch, who, who)
            st[1] = {}
        else:
            st[1][lane] = (epoch, who)

    def _race(self, cell, other, who, other_does: str, write: bool) -> Problem:
        buf = _NAMES[cell[1]]
        text = (f"race on rank {cell[0]}'s {buf}[{self._cell(cell, False)}]: {_who(other)} {other_does} it and "
                f"this {'write' if write else 'read'} is not ordered after it (no signal/wait, semaphore, barrier "
                f"or nop chain between them)")
        if who[0] == "host":
            return Problem(text.replace("this write", "the host's next input write").replace(
                "this read", "the host's read of the result"), rank=who[1], mode=self.mode, call=who[2])
        rank, tb, op, _, call = who
        return Problem(text, rank=rank, tb=tb, op=op, mode=self.mode, call=call + 1)

    def _read(self, lane, epoch, vc, who, cells) -> list[tuple]:
        out = []
        for c in cells:
            self._access(c, lane, epoch, vc, who, False)
            if c in self.pkt and c not in self.mem:
                out.append(((2,) + c,))            # packet bytes read as plain data
            else:
                out.append(self.mem.get(c, ((1,) + c,)))
        return out

    def _write(self, lane, epoch, vc, who, cells, values) -> None:
        for c, v in zip(cells, values):
            self._access(c, lane, epoch, vc, who, True)
            self.mem[c] = v
            self.pkt.pop(c, None)

    def _move(self, lane, epoch, vc, who, src, dst) -> None:
        self._write(lane, epoch, vc, who, dst, self._read(lane, epoch, vc, who, src))

    def _reduce(self, lane, epoch, vc, who, srcs, outs) -> None:
        values = None
        for cells in srcs:
            part = self._read(lane, epoch, vc, who, cells)
            values = part if values is None else [tuple(sorted(a + b)) for a, b in zip(values, part)]
        for cells in outs:
            self._write(lane, epoch, vc, who, cells, values)

    # ------------------------------------------------------------------ packets
    def _read_packets(self, t: _Tb, who, cells, seen: np.ndarray) -> list[tuple]:
        """Values of packets (each read returns once the write it sees landed); ``seen`` gains what those
        writes knew: the same threads write the operation's results from them, element by element."""
        out = []
        for c in cells:
            value, _, writer = self.pkt[c]
            np.maximum(seen, writer, out=seen)
            for x in (c, c[:3] + (c[3] + 1,)):
                self._access(x, t.lane, t.epoch, seen, who, False, observed=True)
            self._acquire(t, writer)
            out.append(value)
        return out

    def _write_packets(self, lane, epoch, vc, who, cells, values, flag, snapshot) -> None:
        """Packets with ``flag``; a reader that sees them learns ``snapshot``."""
        for c, v in zip(cells, values):
            for x in (c, c[:3] + (c[3] + 1,)):
                self._access(x, lane, epoch, vc, who, True)
                self.mem.pop(x, None)
            self.pkt[c] = (v, flag, snapshot)
            self._wake(("pkt", c))

    def _move_packets(self, lane, epoch, vc, who, src, dst) -> None:
        """A proxy's raw copy of packet bytes: value and flag as they are."""
        snapshot = vc.copy()
        snapshot[lane] = epoch
        for s, d in zip(src, dst):
            for x in (s, s[:3] + (s[3] + 1,)):
                self._access(x, lane, epoch, vc, who, False)
            have = self.pkt.get(s)
            for x in (d, d[:3] + (d[3] + 1,)):
                self._access(x, lane, epoch, vc, who, True)
                self.mem.pop(x, None)
            if have is None:
                self.pkt.pop(d, None)
                self.mem[d] = ((2,) + s,)
            else:
                self.pkt[d] = (have[0], have[1], snapshot)
                self._wake(("pkt", d))

    def _packet_op(self, t: _Tb, op, who, half: int) -> None:
        name, rank, g, tb = op.name, t.rank, self.plan.gpus[t.rank], t.tb
        flag = t.call + 1
        lane, seg, seen = t.lane, t.epoch, t.vc.copy()

        def snapshot():
            out = seen.copy()
            out[lane] = max(out[lane], seg - 1)
            return out

        def remote(ref):
            rb = remote_buffer(g, tb, op.channel_type, ref.buffer_id)
            return self.cells(rb.rank, rb.type, ref, op.tbg, half, packet=True)

        def local(ref, packet=False):
            return self.cells(rank, "s" if packet else ref.type, ref, op.tbg, half, packet=packet)

        if name == "ppkt":
            for i, dst in enumerate(op.dst):
                if op.channel_type == "memory":
                    values = self._read(lane, seg - 1, seen, who, local(op.src[i]))
                    self._write_packets(lane, seg, seen, who, remote(dst), values, flag, snapshot())
                else:
                    j = tb.channel_list("port")[op.channel_ids[i]]
                    self._proxy_event(t, j, ((local(op.src[i], True), remote(dst), "packets"),), who)
        elif name == "rppkt":
            values = self._read_packets(t, who, local(op.src[0], True), seen)
            for i, dst in enumerate(op.dst):
                if op.channel_type == "memory":
                    self._write_packets(lane, seg, seen, who, remote(dst), values, flag, snapshot())
                else:       # the kernel waits for the packets, syncs the block, then hands the copy to the proxy
                    j = tb.channel_list("port")[op.channel_ids[i]]
                    self._proxy_event(t, j, ((local(op.src[0], True), remote(dst), "packets"),), who, extra=seen)
        elif name == "cpkt":
            values = self._read(lane, seg - 1, seen, who, local(op.src[0]))
            self._write_packets(lane, seg, seen, who, local(op.dst[0], True), values, flag, snapshot())
        elif name == "upkt":
            values = self._read_packets(t, who, local(op.src[0], True), seen)
            self._write(lane, seg, seen, who, local(op.dst[0]), values)
        else:       # repkt respkt recpkt recspkt: dst = src[0] + the packets of src[1..]
            writes_packets = name in ("recpkt", "recspkt", "respkt")
            values = self._read(lane, seg - 1 if writes_packets else seg, seen, who, local(op.src[0]))
            for ref in op.src[1:]:
                part = self._read_packets(t, who, local(ref, True), seen)
                values = [tuple(sorted(a + b)) for a, b in zip(values, part)]
            self._write(lane, seg, seen, who, local(op.dst[0]), values)
            remote_from = 1
            if name in ("recpkt", "recspkt"):
                self._write_packets(lane, seg, seen, who, local(op.dst[1], True), values, flag, snapshot())
                remote_from = 2
            if name in ("respkt", "recspkt"):
                for ref in op.dst[remote_from:]:
                    self._write_packets(lane, seg, seen, who, remote(ref), values, flag, snapshot())

    # ------------------------------------------------------------------ names
    def _unit(self, unit: int) -> str:
        return str(unit) if self.U == 1 else f"{unit // self.U} unit {unit % self.U}"

    def _cell(self, cell: tuple, packet: bool) -> str:
        unit = cell[3] // 2 if packet else cell[3]
        text = self._unit(unit)
        return text + (" (second half)" if cell[2] else "")


def _who(who) -> str:
    if who is None:
        return "nobody"
    if who[0] == "host":
        return f"rank {who[1]}'s host (between calls)"
    rank, tb, op, name, call = who
    return f"rank {rank} tb {tb} op {op} ({name}, call {call + 1})"


def _describe(value: tuple) -> str:
    if not value:
        return "nothing"
    parts = []
    for c in value:
        if c[0] == 0:
            parts.append(f"in{c[2]}[{c[3]}]@call{c[1] + 1}")
        elif c[0] == 1:
            parts.append(f"unwritten {_NAMES[c[2]]}[{c[4]}] of rank {c[1]}")
        else:
            parts.append(f"packet bytes of rank {c[1]}'s s[{c[4] // 2}]")
    return "+".join(parts)
