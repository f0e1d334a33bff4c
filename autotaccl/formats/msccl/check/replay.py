"""Symbolic replay of an MSCCL program (§4.3), as the runtime executes it.

Values are labels: a sorted tuple of contributions ``(0, rank, index)`` of input chunks (a multiset, so
reductions that miss or double-count a term show), or ``(1, rank, buffer, index)`` for memory nobody
wrote. Thread blocks run their (nop-folded, ``re``-fused) operations in a random interleaving; a step
runs once its dependencies are published, a receive once a message waits, a send once its connection
holds fewer than ``FIFO_CAP`` messages. Vector clocks (program order, dependency waits from the
earliest satisfying publish, send -> receive) flag every pair of conflicting accesses to one memory
cell that no happens-before orders, whatever the interleaving.
"""
from __future__ import annotations

import bisect
import random
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..program import Program, inplace_cell
from .report import Problem
from .static import buffer_sizes

FIFO_CAP = 2
MAX_RACE_TBS = 2048      # vector clocks are T x T: above this many thread blocks only values are checked
_RECV = frozenset(("r", "rcs", "rrs", "rrc", "rrcs"))
_SEND = frozenset(("s", "rcs", "rrs", "rrcs"))
_BUF = {"i": 0, "o": 1, "s": 2}
_NAMES = "ios"
_RANKED = frozenset(("alltoall", "reducescatter", "reduce"))    # whose expected output depends on the rank


@dataclass
class Op:
    """One runtime operation: a real step with the dependencies of the nops folded into it."""
    kind: str
    srcbuf: str
    srcoffs: tuple[int, ...]   # several for a fused re chain
    dstbuf: str
    dstoff: int
    cnt: int
    deps: tuple[tuple[int, int], ...]
    hasdep: bool
    pub: int                   # the step counter it publishes
    s: int                     # XML step index (of the last fused step)
    line: int
    xfer: int | None = None


def fold(tb) -> list[Op]:
    """The runtime's view of a thread block: nops folded into the next real step, ``re`` chains fused."""
    ops: list[Op] = []
    pending: list[tuple[int, int]] = []
    counter = 0
    chain_open = False
    for step in tb.steps:
        if step.type == "nop":
            if step.depid >= 0:
                pending.append((step.depid, step.deps))
            chain_open = False
            continue
        own = [(step.depid, step.deps)] if step.depid >= 0 else []
        last = ops[-1] if ops else None
        if (step.type == "re" and chain_open and last is not None and not pending and not own
                and last.dstbuf == step.dstbuf and last.dstoff == step.dstoff and last.srcbuf == step.srcbuf
                and len(last.srcoffs) < 16):
            last.srcoffs += (step.srcoff,)
            last.pub, last.s, last.line, last.hasdep = counter, step.s, step.line, bool(step.hasdep)
            counter += 1
            chain_open = not step.hasdep
            continue
        deps = tuple(pending + own)
        counter += max(len(deps) - 1, 0)
        ops.append(Op(step.type, step.srcbuf, (step.srcoff,), step.dstbuf, step.dstoff, step.cnt, deps,
                      bool(step.hasdep), counter, step.s, step.line, step.xfer))
        counter += 1
        pending = []
        chain_open = step.type == "re" and not step.hasdep
    return ops


def races_in(mode: str, modes) -> bool:
    """Whether the replay of ``mode`` looks for races when every mode of ``modes`` is replayed. Both modes
    run one program (one happens-before) and in-place aliasing only merges cells, so a race out of place
    is also one in place: where in-place runs, out-of-place checks values alone."""
    return mode == "inplace" or "inplace" not in modes


def describe(value: tuple) -> str:
    if not value:
        return "nothing"
    parts = []
    for c in value:
        parts.append(f"i_{c[1]}[{c[2]}]" if c[0] == 0 else f"unwritten {_NAMES[c[2]]}[{c[3]}] of rank {c[1]}")
    return "+".join(parts)


class Replay:
    """One mode (``inplace`` or ``outofplace``) of one program; :meth:`run` replays one interleaving."""

    def __init__(self, program: Program, coll: str, mode: str) -> None:
        self.program, self.coll, self.mode = program, coll, mode
        self.n, self.N = program.ngpus, program.nchunksperloop
        self.B = self.N // self.n
        self.real_in, self.real_out = buffer_sizes(coll, self.N, self.n)
        self.tbs = [(g.id, tb) for g in program.gpus for tb in g.tbs]
        self.gid = {(r, tb.id): k for k, (r, tb) in enumerate(self.tbs)}
        self.ops = [fold(tb) for _, tb in self.tbs]
        self._shift = {(r, buf): self._aliased(r, buf) for r in range(self.n) for buf in _NAMES}
        self.waits = [[tuple((self.gid[(r, depid)], deps) for depid, deps in op.deps) for op in ops]
                      for (r, _), ops in zip(self.tbs, self.ops)]
        self.stuck: tuple[tuple[int, int], ...] = ()   # (rank, tb) left unfinished by the last deadlock

    # ------------------------------------------------------------------ memory model
    def _aliased(self, rank: int, buf: str) -> tuple[int, int]:
        """(buffer, offset shift) of ``rank``'s ``buf`` after §1.6 aliasing in in-place mode."""
        if self.mode == "inplace":
            buf, shift = inplace_cell(self.coll, self.B, rank, buf, 0)
            return _BUF[buf], shift
        return _BUF[buf], 0

    def canon(self, rank: int, buf: str, off: int) -> tuple[int, int, int]:
        """The memory cell ``buf[off]`` of ``rank`` names, after §1.6 aliasing in in-place mode."""
        b, shift = self._shift[(rank, buf)]
        return rank, b, off + shift

    def _cells(self, rank: int, op: Op) -> tuple[list, list]:
        """(source cells, destination cells) ``op`` of ``rank`` reads and writes (a fused ``re``: every source)."""
        b, shift = self._shift[(rank, op.srcbuf)]
        src = [(rank, b, off + shift + j) for off in op.srcoffs for j in range(op.cnt)]
        b, shift = self._shift[(rank, op.dstbuf)]
        return src, [(rank, b, op.dstoff + shift + j) for j in range(op.cnt)]

    def initial(self) -> dict:
        mem = {}
        for r in range(self.n):
            for j in range(self.real_in):
                mem[self.canon(r, "i", j)] = ((0, r, j),)
        return mem

    def expected(self, rank: int, k: int, root: int) -> tuple | None:
        n, B, c = self.n, self.B, self.coll
        if c == "allgather":
            return ((0, k // B, k % B),)
        if c == "alltoall":
            return ((0, k // B, rank * B + k % B),)
        if c == "allreduce":
            return tuple((0, q, k) for q in range(n))
        if c == "reducescatter":
            return tuple((0, q, rank * B + k) for q in range(n))
        if c == "broadcast":
            return ((0, root, k),)
        if c == "reduce":
            return tuple((0, q, k) for q in range(n)) if rank == root else None
        return None

    # ------------------------------------------------------------------ execution
    def run(self, seed: int | None, races: bool = True, on_message=None, rounds: bool = False) -> Problem | None:
        """Replay one interleaving and return the first problem. ``seed`` None: a fixed order;
        ``rounds``: synchronous rounds (every thread block ready at the start of a round runs one
        operation). ``races``: also look for unordered conflicting accesses (vector clocks, skipped above
        ``MAX_RACE_TBS`` thread blocks). ``on_message(src, dst, channel, values, round)`` sees every send."""
        rng = random.Random(seed)
        T = len(self.tbs)
        races = races and T <= MAX_RACE_TBS
        mem = self.initial()
        writer: dict = {}
        pc = [0] * T
        flag = [-1] * T
        pubs: list[list[int]] = [[] for _ in range(T)]
        pub_vc: list[list] = [[] for _ in range(T)]
        vc = np.zeros((T, T), dtype=np.int32) if races else None
        fifo: dict[tuple[int, int, int], deque] = {}
        last_write: dict = {}
        reads: dict = {}
        waiting: dict[int, set[int]] = {}     # tb -> thread blocks of its rank waiting for its flag
        mode = self.mode

        def where(g: int, op: Op) -> dict:
            r, tb = self.tbs[g]
            return dict(rank=r, tb=tb.id, step=op.s, line=op.line, mode=mode)

        def blocked(g: int) -> str | None:
            r, tb = self.tbs[g]
            op = self.ops[g][pc[g]]
            for h, deps in self.waits[g][pc[g]]:
                if flag[h] < deps:
                    waiting.setdefault(h, set()).add(g)
                    return f"waits for tb {self.tbs[h][1].id} to publish step {deps} (it published {flag[h]})"
            if op.kind in _RECV:
                q = fifo.get((tb.recv, r, tb.chan))
                if not q:
                    return f"waits for a message from rank {tb.recv} on channel {tb.chan}"
            if op.kind in _SEND:
                q = fifo.get((r, tb.send, tb.chan))
                if q is not None and len(q) >= FIFO_CAP:
                    return f"cannot send to rank {tb.send} on channel {tb.chan}: {len(q)} messages not received"
            return None

        def access(g: int, op: Op, cells, write: bool) -> Problem | None:
            if not races:
                return None
            clock = vc[g]
            for cell in cells:
                w = last_write.get(cell)
                if w is not None and w[0] != g and clock[w[0]] < w[1]:
                    return self._race(cell, w, g, op, write, mode)
                if write:
                    for h, (c, s, line) in reads.get(cell, {}).items():
                        if h != g and clock[h] < c:
                            return self._race(cell, (h, c, s, line), g, op, True, mode, other_reads=True)
            mine = int(clock[g])
            for cell in cells:
                if write:
                    last_write[cell] = (g, mine, op.s, op.line)
                    reads.pop(cell, None)
                else:
                    reads.setdefault(cell, {})[g] = (mine, op.s, op.line)
            return None

        round_no = 0
        ready: list[int] = []
        slot: dict[int, int] = {}

        def mark(h: int) -> None:
            runnable = pc[h] < len(self.ops[h]) and blocked(h) is None
            if runnable and h not in slot:
                slot[h] = len(ready)
                ready.append(h)
            elif not runnable and h in slot:
                k = slot.pop(h)
                last = ready.pop()
                if last != h:
                    ready[k] = last
                    slot[last] = k

        def execute(g: int) -> Problem | None:
            r, tb = self.tbs[g]
            op = self.ops[g][pc[g]]
            if races:
                mine = vc[g]
                for h, deps in self.waits[g][pc[g]]:
                    np.maximum(mine, pub_vc[h][bisect.bisect_left(pubs[h], deps)], out=mine)
            incoming = None
            if op.kind in _RECV:
                incoming, cnt, sent_vc, sender = fifo[(tb.recv, r, tb.chan)].popleft()
                if cnt != op.cnt:
                    return Problem(f"receives cnt={op.cnt} but rank {tb.recv} tb {sender[0]} step {sender[1]} "
                                   f"sent cnt={cnt}", **where(g, op))
                if races:
                    np.maximum(mine, sent_vc, out=mine)
            if races:
                mine[g] += 1
            cnt = op.cnt
            src, dst = self._cells(r, op)
            out = None
            kind = op.kind
            if kind == "s":
                out = [mem.get(c, ((1,) + c,)) for c in src]
                problem = access(g, op, src, False)
            elif kind in ("r", "rcs"):
                value = incoming
                problem = access(g, op, dst, True)
                out = incoming if kind == "rcs" else None
            elif kind in ("rrs", "rrc", "rrcs"):
                value = [tuple(sorted(a + mem.get(c, ((1,) + c,)))) for a, c in zip(incoming, src)]
                problem = access(g, op, src, False) or (access(g, op, dst, True) if kind != "rrs" else None)
                out = value if kind != "rrc" else None
            elif kind == "cpy":
                value = [mem.get(c, ((1,) + c,)) for c in src]
                problem = access(g, op, src, False)
                if src == dst:       # in-place identity copy: memory does not change
                    kind = "identity"
                elif problem is None:
                    problem = access(g, op, dst, True)
            else:  # re, possibly fused: dst = dst + every source
                value = [mem.get(c, ((1,) + c,)) for c in dst]
                for k in range(len(op.srcoffs)):
                    part = src[k * cnt:(k + 1) * cnt]
                    value = [tuple(sorted(a + mem.get(c, ((1,) + c,)))) for a, c in zip(value, part)]
                problem = access(g, op, src + dst, False) or access(g, op, dst, True)
            if problem is not None:
                return problem
            if kind in ("r", "rcs", "rrc", "rrcs", "cpy", "re"):
                for c, v in zip(dst, value):
                    mem[c] = v
                    writer[c] = (r, tb.id, op.s, op.line)
            touched = [g]
            if incoming is not None:
                touched.append(senders.get((tb.recv, r, tb.chan), g))
            if out is not None:
                key = (r, tb.send, tb.chan)
                fifo.setdefault(key, deque()).append((out, cnt, mine.copy() if races else None, (tb.id, op.s)))
                touched.append(receivers.get(key, g))
                if on_message is not None:
                    on_message(r, tb.send, tb.chan, out, round_no)
            if op.hasdep:
                flag[g] = op.pub
                pubs[g].append(op.pub)
                if races:
                    pub_vc[g].append(mine.copy())
                touched.extend(waiting.pop(g, ()))
            pc[g] += 1
            for h in touched:       # only these can have become runnable or blocked
                mark(h)
            return None

        senders = {(r, tb.send, tb.chan): g for g, (r, tb) in enumerate(self.tbs) if tb.send >= 0}
        receivers = {(tb.recv, r, tb.chan): g for g, (r, tb) in enumerate(self.tbs) if tb.recv >= 0}
        for g in range(T):
            mark(g)
        while True:
            if not ready:
                stuck = [g for g in range(T) if pc[g] < len(self.ops[g])]
                if not stuck:
                    break
                self.stuck = tuple(self.tbs[h][0:1] + (self.tbs[h][1].id,) for h in stuck)
                g = stuck[0]
                op = self.ops[g][pc[g]]
                return Problem(f"deadlock: {blocked(g)} ({len(stuck)} thread blocks stuck)", **where(g, op))
            if rounds:      # every thread block ready at the start of a round runs one operation
                for g in sorted(ready):
                    if g in slot:
                        problem = execute(g)
                        if problem is not None:
                            return problem
                round_no += 1
                continue
            problem = execute(ready[0] if seed is None else ready[rng.randrange(len(ready))])
            if problem is not None:
                return problem
        for (src_rank, dst_rank, chan), q in sorted(fifo.items()):
            if q:
                return Problem(f"{len(q)} message(s) to rank {dst_rank} on channel {chan} are never received",
                               rank=src_rank, mode=mode)
        return self._postcondition(mem, writer)

    def _race(self, cell, other, g, op, write, mode, other_reads=False) -> Problem:
        r, tb = self.tbs[g]
        h, _, s, line = other
        _, other_tb = self.tbs[h]
        what = "reads" if other_reads else "writes"
        return Problem(f"race on {_NAMES[cell[1]]}[{cell[2]}]: tb {other_tb.id} step {s} (line {line}) {what} it and "
                       f"this step {'writes' if write else 'reads'} it with no dependency ordering them",
                       rank=r, tb=tb.id, step=op.s, line=op.line, mode=mode)

    def _postcondition(self, mem, writer) -> Problem | None:
        roots = [0]
        if self.coll in ("broadcast", "reduce"):
            roots = list(range(self.n))
        first = None
        # where the expected value does not depend on the rank, it is made once per cell index, and the
        # value object found equal to it is remembered: ranks that hold that very object (copies share
        # it) match without comparing it term by term again
        per_rank = self.coll in _RANKED
        wants: dict[tuple[int, int], tuple | None] = {}
        matched: dict[tuple[int, int], tuple] = {}
        for root in roots:
            for r in range(self.n):
                for k in range(self.real_out):
                    if per_rank:
                        want = self.expected(r, k, root)
                    elif (k, root) in wants:
                        want = wants[(k, root)]
                    else:
                        want = wants[(k, root)] = self.expected(r, k, root)
                    if want is None:
                        continue
                    cell = self.canon(r, "o", k)
                    got = mem.get(cell, ((1,) + cell,))
                    if not per_rank and got is matched.get((k, root)):
                        continue
                    if got == want:
                        if not per_rank:
                            matched[(k, root)] = got
                    else:
                        w = writer.get(cell)
                        at = dict(rank=r, mode=self.mode)
                        if w:
                            at.update(tb=w[1], step=w[2], line=w[3])
                        note = f" (last written by tb {w[1]} step {w[2]})" if w else " (never written)"
                        problem = Problem(f"output o[{k}] of rank {r} ends as {describe(got)} but {self.coll} needs "
                                          f"{describe(want)}{note}", **at)
                        if first is None:
                            first = problem
                        break
                else:
                    continue
                break
            else:
                return None
        return first
