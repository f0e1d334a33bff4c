"""Compile the algorithm IR into one rank's program: its sends, receives and local reductions.

Memory is a set of chunk-sized *slots* ``(buffer, index)`` in the buffers ``in`` (the user's send
buffer), ``out`` (the receive buffer) and ``scratch``. Out-of-place, ``in`` is never written. In-place
there is no ``in``: the input lives inside ``out`` with nccl-tests' aliasing
(:func:`autotaccl.model.buffers.inplace_layout`).

A received chunk goes to its output slot when it has one there and no other live value sits in it,
else to a scratch slot; values not in their output slot at the end are copied there. (The XML
lowering, ``formats/msccl/lower/buffers.py``, places values differently on purpose: an XML step
moves runs of contiguous chunks, so it plans scratch for contiguity, and it moves a live value out
of the way instead of redirecting the receive. Here one operation moves one transfer and nothing
needs to be contiguous.) Every operation waits for the earlier operations of this rank that touch
the same slots (:func:`autotaccl.model.dependencies.conflicts`), so the list order of the IR is
honoured while independent transfers overlap.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping

from autotaccl.model.algorithm import Algorithm
from autotaccl.model.buffers import inplace_layout
from autotaccl.model.collectives import Collective
from autotaccl.model.dependencies import conflicts

Slot = tuple[str, int]


@dataclass(frozen=True)
class Op:
    """One operation of a rank: ``send`` and ``recv`` talk to ``peer``; ``reduce`` combines a received
    message (of the same transfer) with the local values in ``reads`` into ``writes``."""

    kind: str
    transfer: int              # index in algorithm.transfers; also the MPI tag
    peer: int
    step: int
    chunks: tuple[int, ...]
    reads: tuple[Slot, ...]
    writes: tuple[Slot, ...]
    deps: tuple[int, ...]      # indices of earlier ops in this program

    def describe(self) -> str:
        chunks = ",".join(map(str, self.chunks))
        what = {"send": f"sending chunk {chunks} to rank {self.peer}",
                "recv": f"waiting for chunk {chunks} from rank {self.peer}",
                "reduce": f"reducing chunk {chunks} from rank {self.peer}"}[self.kind]
        return f"{what} at step {self.step} (transfer {self.transfer})"


@dataclass(frozen=True)
class RankProgram:
    rank: int
    inplace: bool
    ops: tuple[Op, ...]
    buffers: Mapping[str, int]                 # chunks per buffer
    inputs: Mapping[int, Slot]                 # chunk -> where this rank's input for it is
    outputs: Mapping[int, Slot]                # chunk -> where this rank must leave it
    final_copies: tuple[tuple[Slot, Slot], ...]
    staged: bool                               # final copies overlap: read all sources before writing

    def dependents(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in self.ops]
        for i, op in enumerate(self.ops):
            for d in op.deps:
                out[d].append(i)
        return tuple(tuple(x) for x in out)


def placement(collective: Collective, rank: int, inplace: bool) -> tuple[dict[str, int], dict[int, Slot], dict[int, Slot]]:
    """Buffer sizes and the input/output slot of every chunk this rank starts or ends with."""
    chunks = range(collective.num_chunks)
    n_in, n_out = collective.input_chunks(rank), collective.output_chunks(rank)
    if inplace:
        alias = inplace_layout(collective.name, collective.chunkup, rank)
        in_off, out_off = alias.input_offset, alias.output_offset
        buffers = {"out": max(in_off + n_in, out_off + n_out)}
        ins = {c: ("out", in_off + i) for c in chunks if (i := collective.input_index(rank, c)) is not None}
        outs = {c: ("out", out_off + i) for c in chunks if (i := collective.output_index(rank, c)) is not None}
    else:
        buffers = {"in": n_in, "out": n_out}
        ins = {c: ("in", i) for c in chunks if (i := collective.input_index(rank, c)) is not None}
        outs = {c: ("out", i) for c in chunks if (i := collective.output_index(rank, c)) is not None}
    return buffers, ins, outs


def compile_rank(algorithm: Algorithm, rank: int, inplace: bool = False) -> RankProgram:
    """This rank's operations, each with the earlier ones it must wait for."""
    coll = algorithm.collective
    buffers, inputs, outputs = placement(coll, rank, inplace)
    transfers = algorithm.transfers
    reads_at: dict[int, list[int]] = defaultdict(list)  # chunk -> positions where this rank reads it
    for i, t in enumerate(transfers):
        if t.src == rank or (t.dst == rank and t.op == "reduce"):
            for c in t.chunks:
                reads_at[c].append(i)

    scratch: dict[int, int] = {}

    def scratch_slot(c: int) -> Slot:
        return ("scratch", scratch.setdefault(c, len(scratch)))

    current: dict[int, Slot] = dict(inputs)       # chunk -> slot holding its value now
    occupant: dict[Slot, int] = {s: c for c, s in inputs.items()}

    def live_elsewhere(slot: Slot, chunk: int, position: int) -> bool:
        other = occupant.get(slot)
        if other is None or other == chunk or current.get(other) != slot:
            return False
        return other in outputs or any(p > position for p in reads_at[other])

    def where(c: int) -> Slot:
        if c not in current:  # never arrived: read whatever the scratch holds (a check will catch it)
            current[c] = scratch_slot(c)
        return current[c]

    def target(c: int, position: int) -> Slot:
        slot = outputs.get(c)
        if slot is None or live_elsewhere(slot, c, position):
            slot = scratch_slot(c)
        return slot

    # (kind, transfer, peer, reads, writes) in program order; their dependencies follow from the slots
    planned: list[tuple[str, int, int, tuple[Slot, ...], tuple[Slot, ...]]] = []

    def move(c: int, slot: Slot) -> None:
        old = current.get(c)
        if old is not None and occupant.get(old) == c:
            del occupant[old]
        current[c] = slot
        occupant[slot] = c

    for i, t in enumerate(transfers):
        if t.src == rank:
            planned.append(("send", i, t.dst, tuple(where(c) for c in t.chunks), ()))
        elif t.dst == rank:
            writes = tuple(target(c, i) for c in t.chunks)
            if t.op == "reduce":
                planned.append(("recv", i, t.src, (), ()))
                planned.append(("reduce", i, t.src, tuple(where(c) for c in t.chunks), writes))
            else:
                planned.append(("recv", i, t.src, (), writes))
            for c, slot in zip(t.chunks, writes):
                move(c, slot)

    ops = []
    for k, ((kind, i, peer, reads, writes), deps) in enumerate(zip(planned, conflicts((r, w) for *_, r, w in planned))):
        if kind == "reduce":         # a reduce combines the message its receive (just before it) got
            deps = tuple(sorted({*deps, k - 1}))
        ops.append(Op(kind, i, peer, transfers[i].step, transfers[i].chunks, reads, writes, deps))

    copies = tuple((current[c], slot) for c, slot in sorted(outputs.items())
                   if c in current and current[c] != slot)
    sources = {src for src, _ in copies}
    staged = any(dst in sources for _, dst in copies)
    if scratch:
        buffers["scratch"] = len(scratch)
    return RankProgram(rank, inplace, tuple(ops), buffers, inputs, outputs, copies, staged)
