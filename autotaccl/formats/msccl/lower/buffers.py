"""Where every value lives: input ``i``, output ``o`` or scratch ``s`` slots, in program order.

A chunk's first stored value goes to its *home* (its output slot if the rank outputs it, else scratch,
planned so that chunks sent together are contiguous); in place, a store that would overwrite a
still-needed input first moves it to scratch. Details: ``docs/internals.md``."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ....model.algorithm import Algorithm
from ..program import inplace_cell
from .threadblocks import Plan

Loc = tuple[str, int]


@dataclass(frozen=True)
class Message:
    """Transfer ``t`` as buffer locations: the sender reads ``read`` (None: the send is fused into the
    receive that brought the data), the receiver reduces with ``operand`` (None: a copy) and stores to
    ``write`` (None: not stored)."""
    t: int
    send_seq: int
    seq: int
    read: dict[int, Loc] | None
    operand: dict[int, Loc] | None
    write: dict[int, Loc] | None


@dataclass(frozen=True)
class LocalCopy:
    rank: int
    src: Loc
    dst: Loc
    seq: int


@dataclass(frozen=True)
class Layout:
    messages: tuple[Message, ...]
    copies: tuple[LocalCopy, ...]
    scratch: tuple[int, ...]          # s_chunks per rank


class LayoutError(RuntimeError):
    """The algorithm leaves a value nowhere (it should have failed verify)."""


def plan_scratch(algorithm: Algorithm, plan: Plan) -> dict[tuple[int, int], int]:
    coll = algorithm.collective
    needs = set()
    for t, tr in enumerate(algorithm.transfers):
        if plan.stored[t]:
            needs.update((tr.dst, c) for c in tr.chunks if coll.output_index(tr.dst, c) is None)
    slot: dict[tuple[int, int], int] = {}
    count: dict[int, int] = defaultdict(int)

    def allocate(rank: int, chunks) -> None:
        for c in chunks:
            if (rank, c) in needs and (rank, c) not in slot:
                slot[(rank, c)] = count[rank]
                count[rank] += 1

    for tr in algorithm.transfers:          # chunks sent together first, in the order they are sent
        if len(tr.chunks) > 1:
            allocate(tr.src, tr.chunks)
    for tr in algorithm.transfers:
        allocate(tr.dst, tr.chunks)
    return slot


def layout(algorithm: Algorithm, plan: Plan, inplace: bool) -> Layout:
    coll = algorithm.collective
    R = coll.ranks
    slots = plan_scratch(algorithm, plan)
    scratch = [0] * R
    for (r, _), s in slots.items():
        scratch[r] = max(scratch[r], s + 1)
    cur: dict[tuple[int, int], Loc | None] = {}
    holders: dict[tuple[int, str, int], set[int]] = defaultdict(set)

    def key(rank: int, loc: Loc) -> tuple[int, str, int]:
        return (rank,) + inplace_cell(coll.name, coll.chunkup, rank, *loc)

    def place(rank: int, c: int, loc: Loc | None) -> None:
        old = cur.get((rank, c))
        if inplace and old is not None:
            holders[key(rank, old)].discard(c)
        cur[(rank, c)] = loc
        if inplace and loc is not None:
            holders[key(rank, loc)].add(c)

    for c in range(coll.num_chunks):
        for r in coll.precondition(c):
            place(r, c, ("i", coll.input_index(r, c)))

    def home(rank: int, c: int) -> Loc:
        out = coll.output_index(rank, c)
        return ("o", out) if out is not None else ("s", slots[(rank, c)])

    fused_sends = set(plan.fused_next.values())
    order = plan.order
    future: dict[tuple[int, int], list[tuple[int, bool]]] = defaultdict(list)  # (position, reads it)
    for p, (t, kind) in enumerate(order):
        tr = algorithm.transfers[t]
        if kind == "send" and t not in fused_sends:
            for c in tr.chunks:
                future[(tr.src, c)].append((p, True))
        elif kind == "recv":
            for c in tr.chunks:
                future[(tr.dst, c)].append((p, tr.op == "reduce"))

    def live(rank: int, c: int, p: int) -> bool:
        """Is ``rank``'s current value of ``c`` read after event ``p``?"""
        for q, reads_it in future.get((rank, c), ()):
            if q > p:
                return reads_it
        return coll.output_index(rank, c) is not None and cur.get((rank, c)) != home(rank, c)

    copies = []
    reads: dict[int, tuple[int, dict | None]] = {}
    messages = []
    seq = 0
    for p, (t, kind) in enumerate(order):
        tr = algorithm.transfers[t]
        if kind == "send":
            read = None
            if t not in fused_sends:
                read = {c: cur.get((tr.src, c)) for c in tr.chunks}
                if any(v is None for v in read.values()):
                    raise LayoutError(f"transfer {t}: rank {tr.src} sends a chunk it holds nowhere")
            reads[t] = (seq, read)
            seq += 1
            continue
        operand = None
        if tr.op == "reduce":
            operand = {c: cur.get((tr.dst, c)) for c in tr.chunks}
            if any(v is None for v in operand.values()):
                raise LayoutError(f"transfer {t}: rank {tr.dst} reduces into a chunk it holds nowhere")
        write = None
        if plan.stored[t]:
            write = {c: home(tr.dst, c) for c in tr.chunks}
            if inplace:
                for c, loc in write.items():
                    for b in sorted(holders[key(tr.dst, loc)] - set(tr.chunks)):
                        if live(tr.dst, b, p):
                            slot = ("s", scratch[tr.dst])
                            scratch[tr.dst] += 1
                            copies.append(LocalCopy(tr.dst, cur[(tr.dst, b)], slot, seq))
                            seq += 1
                            place(tr.dst, b, slot)
        send_seq, read = reads[t]
        messages.append(Message(t, send_seq, seq, read, operand, write))
        seq += 1
        for c in tr.chunks:
            place(tr.dst, c, write[c] if write is not None else None)
    outputs = defaultdict(list)
    for c in range(coll.num_chunks):
        for r in coll.postcondition(c):
            outputs[r].append(c)
    for r in sorted(outputs):
        for c in outputs[r]:
            loc = cur.get((r, c))
            if loc is None:
                raise LayoutError(f"rank {r} ends without chunk {c}")
            if loc != home(r, c):
                copies.append(LocalCopy(r, loc, home(r, c), seq))
                seq += 1
    return Layout(tuple(sorted(messages, key=lambda m: m.t)), tuple(copies), tuple(scratch))
