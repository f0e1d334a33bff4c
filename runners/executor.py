"""Run one rank's compiled program on numpy buffers with non-blocking MPI point-to-point calls.

An operation starts as soon as the operations it depends on have completed: sends and receives are
posted with ``Isend``/``Irecv`` (tag = transfer index, so matching never depends on posting order),
reductions run in numpy when their message and local operands are ready. Single-chunk transfers and
multi-chunk ones over adjacent slots go straight from/to their rows (no copy); others are packed into
(or unpacked from) a staging array allocated once. Final copies that no operation interferes with run
right after the first messages are posted; the rest after the last.
"""
from __future__ import annotations

import os
from collections import deque
from typing import Callable, Mapping

import numpy as np
from mpi4py import MPI

from runners.program import RankProgram, Slot


def _contiguous(arrays: Mapping[str, np.ndarray], slots: tuple[Slot, ...]) -> np.ndarray | None:
    """One view over ``slots`` when they are adjacent rows of one buffer, in order."""
    buf, first = slots[0]
    if all(s == (buf, first + j) for j, s in enumerate(slots)):
        return arrays[buf][first:first + len(slots)]
    return None


class Executor:
    """Executes ``program`` once per :meth:`run` on ``arrays`` (one ``(chunks, elems)`` array per buffer)."""

    def __init__(self, program: RankProgram, comm: MPI.Comm, arrays: Mapping[str, np.ndarray],
                 ufunc: Callable) -> None:
        self.program = program
        self.comm = comm
        self.ufunc = ufunc
        self.ops = program.ops
        self.dependents = program.dependents()
        self.ndeps = [len(op.deps) for op in self.ops]
        self.done = bytearray(len(self.ops))
        elems = next(iter(arrays.values())).shape[1] if arrays else 0
        dtype = next(iter(arrays.values())).dtype if arrays else np.float32
        self.rows = {(b, i): a[i] for b, a in arrays.items() for i in range(a.shape[0])}
        self.message: list = [None] * len(self.ops)   # the array handed to MPI
        self.pack: list = [None] * len(self.ops)      # slots to gather into / scatter from the message
        self.temp: dict[int, np.ndarray] = {}        # transfer -> received operand of a reduction
        for i, op in enumerate(self.ops):
            slots = op.reads if op.kind == "send" else op.writes
            if op.kind == "reduce":
                continue
            view = _contiguous(arrays, slots) if slots else None
            if view is None:
                view = np.empty((len(op.chunks), elems), dtype)
                if slots:
                    self.pack[i] = [self.rows[s] for s in slots]
                else:
                    self.temp[op.transfer] = view
            self.message[i] = [view, MPI.BYTE]
        self.reduce_rows = [[(self.rows[r], self.rows[w]) for r, w in zip(op.reads, op.writes)]
                            if op.kind == "reduce" else None for op in self.ops]
        # final copies no operation interferes with (source never written, destination never touched:
        # out-of-place AllGather's own block) are done first, while the first messages are in flight
        copies = program.final_copies
        written = {w for op in self.ops for w in op.writes}
        touched = written | {r for op in self.ops for r in op.reads}
        early = set() if program.staged else {(s, d) for s, d in copies if s not in written and d not in touched}
        self.early = [(self.rows[s], self.rows[d]) for s, d in copies if (s, d) in early]
        self.final = [(self.rows[s], self.rows[d]) for s, d in copies if (s, d) not in early]
        self.staged = program.staged

    def run(self) -> None:
        ops, comm, done, dependents = self.ops, self.comm, self.done, self.dependents
        remaining = list(self.ndeps)
        done[:] = bytes(len(ops))
        requests: list[MPI.Request] = []
        owners: list[int] = []
        ready = deque(i for i, n in enumerate(remaining) if n == 0)
        early_copies = self.early

        def complete(i: int) -> None:
            done[i] = 1
            for j in dependents[i]:
                remaining[j] -= 1
                if remaining[j] == 0:
                    ready.append(j)

        while True:
            while ready:
                i = ready.popleft()
                op = ops[i]
                if op.kind == "send":
                    if self.pack[i] is not None:
                        staging = self.message[i][0]
                        for j, row in enumerate(self.pack[i]):
                            staging[j] = row
                    requests.append(comm.Isend(self.message[i], op.peer, op.transfer))
                    owners.append(i)
                elif op.kind == "recv":
                    requests.append(comm.Irecv(self.message[i], op.peer, op.transfer))
                    owners.append(i)
                else:
                    received = self.temp[op.transfer]
                    for j, (mine, out) in enumerate(self.reduce_rows[i]):
                        self.ufunc(received[j], mine, out=out)
                    complete(i)
            if early_copies:    # after the first operations are posted
                for src, dst in early_copies:
                    dst[...] = src
                early_copies = ()
            if not requests:
                break
            k, finished = MPI.Request.Testany(requests)
            if not finished:  # poll and yield: MPI's blocking Waitany spins through whole time slices when oversubscribed
                os.sched_yield()
                continue
            i = owners[k]
            requests[k] = requests[-1]
            owners[k] = owners[-1]
            requests.pop()
            owners.pop()
            if self.ops[i].kind == "recv" and self.pack[i] is not None:
                staging = self.message[i][0]
                for j, row in enumerate(self.pack[i]):
                    row[...] = staging[j]
            complete(i)
        if not all(done):
            raise RuntimeError(f"rank {self.program.rank}: operations left with unmet dependencies")
        if self.staged:
            values = [src.copy() for src, _ in self.final]
            for value, (_, dst) in zip(values, self.final):
                dst[...] = value
        else:
            for src, dst in self.final:
                dst[...] = src

    def waiting_for(self) -> str:
        """What this rank is blocked on: the earliest unfinished operation, traced to what it waits for."""
        done, ops = self.done, self.ops
        first = next((i for i in range(len(ops)) if not done[i]), None)
        if first is None:
            return ""
        i = first
        while True:
            blocker = next((d for d in ops[i].deps if not done[d]), None)
            if blocker is None:
                return ops[i].describe()
            i = blocker
