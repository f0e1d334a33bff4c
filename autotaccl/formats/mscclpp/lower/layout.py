"""Where every value lives in one buffer mode: input ``i``, output ``o``, plain scratch ``s`` or packet
scratch ``p`` slots, walked in the IR's program order.

A copy lands straight in the chunk's output slot only if nobody touched that cell yet in this call and
nothing live sits there; otherwise, and for every reduce and packet transfer, in a fresh scratch slot (one
write per slot per call). Values a rank must output but holds elsewhere are copied home at the end.

Staging (:func:`staged`): the executor reads a port-channel put's source from the allocation's start, so a
staged layout copies input or output sources into scratch (its own allocation) and sends from there.
Details: ``docs/internals.md``.
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field, replace

from ....model.algorithm import Algorithm, fused_switch_pairs

Loc = tuple[str, int]


@dataclass(frozen=True)
class Move:
    """Transfer ``t`` in buffer slots: the sender reads ``read``, the data lands in ``land`` on the
    receiver; a reduce (or an unpack) reads ``operand`` (None for unpacking) and writes ``result``
    (``result`` None: the landed data is the value)."""
    t: int
    read: dict[int, Loc]
    land: dict[int, Loc]
    operand: dict[int, Loc] | None
    result: dict[int, Loc] | None
    packets: bool


@dataclass(frozen=True)
class SwitchMove:
    """Switch operation ``t`` (issued by ``rank`` over ``group``) in buffer slots: a load-reduce reads
    ``read`` on every member (one slot, the same on all: the multicast address is the issuer's), a store
    reads the issuer's ``source``; both write ``land`` on every member. ``fused``: the store of the same
    cells that follows the load-reduce, written with it as one glres."""
    t: int
    rank: int
    group: tuple[int, ...]
    read: dict[int, Loc] | None
    source: dict[int, Loc] | None
    land: dict[int, Loc]
    fused: int | None = None


class Unlowerable(Exception):
    """A switch operation whose cells the plan cannot address (the message says why)."""


@dataclass(frozen=True)
class Layout:
    moves: tuple[Move | SwitchMove, ...]
    finals: dict[int, tuple[tuple[Loc, Loc], ...]]     # rank -> (from, to) copies at the end
    plain: tuple[int, ...]                             # plain scratch slots per rank
    packet: tuple[int, ...]                            # packet scratch slots per rank
    stage: dict[int, tuple[tuple[Loc, Loc], ...]] = field(default_factory=dict)   # t -> sender's (from, to)


def canonical(coll, rank: int, loc: Loc, inplace: bool) -> tuple:
    """The memory cell a slot names; in-place, input and output alias as the executor test allocates them:
    AllGather's input is output block ``rank``, ReduceScatter's output is input block ``rank``, the others
    share one buffer."""
    buf, idx = loc
    if inplace:
        if coll.name == "allgather" and buf == "i":
            return (rank, "o", rank * coll.input_chunks(rank) + idx)
        if coll.name == "reducescatter" and buf == "o":
            return (rank, "i", rank * coll.output_chunks(rank) + idx)
        if coll.name not in ("allgather", "reducescatter") and buf == "o":
            return (rank, "i", idx)
    return (rank, buf, idx)


def layout(algorithm: Algorithm, packets: tuple[bool, ...], inplace: bool) -> Layout:
    """``packets[t]``: transfer ``t`` moves LL packets (it lands in packet scratch)."""
    coll = algorithm.collective
    R = coll.ranks
    cur: dict[tuple[int, int], Loc] = {}
    occupant: dict[tuple, int] = {}
    touched: set[tuple] = set()
    plain, packet = [0] * R, [0] * R
    uses: dict[tuple[int, int], list[int]] = defaultdict(list)     # where a rank reads its value of a chunk
    for t, tr in enumerate(algorithm.transfers):
        for c in tr.chunks:
            uses[(tr.src, c)].append(t)
            if tr.op == "reduce":
                uses[(tr.dst, c)].append(t)
            if tr.op == "switch_reduce":
                for m in tr.group:
                    if m != tr.src:
                        uses[(m, c)].append(t)
    fused = fused_switch_pairs(algorithm.transfers)

    def cell(rank: int, loc: Loc) -> tuple:
        return canonical(coll, rank, loc, inplace)

    def home(rank: int, c: int) -> Loc | None:
        out = coll.output_index(rank, c)
        return None if out is None else ("o", out)

    def live(rank: int, b: int, t: int) -> bool:
        """Is ``rank``'s value of ``b`` still needed after transfer ``t``?"""
        u = uses.get((rank, b), [])
        return bisect.bisect_right(u, t) < len(u) or coll.output_index(rank, b) is not None

    def free(rank: int, loc: Loc, c: int, t: int) -> bool:
        b = occupant.get(cell(rank, loc))
        return b is None or b == c or not live(rank, b, t)

    def place(rank: int, c: int, loc: Loc) -> None:
        old = cur.get((rank, c))
        if old is not None and occupant.get(cell(rank, old)) == c:
            del occupant[cell(rank, old)]
        cur[(rank, c)] = loc
        occupant[cell(rank, loc)] = c

    def fresh(rank: int, kind: str) -> Loc:
        counts = packet if kind == "p" else plain
        counts[rank] += 1
        return (kind, counts[rank] - 1)

    for c in range(coll.num_chunks):
        for r in sorted(coll.precondition(c)):
            place(r, c, ("i", coll.input_index(r, c)))
    def common(rank: int, group, c: int, t: int, source: Loc | None) -> Loc | None:
        """The chunk's output slot if it is the same on every member and free to land in directly."""
        h = home(rank, c)
        if h is None:
            return None
        for m in group:
            hm = home(m, c)
            if hm is None or cell(m, hm)[1:] != cell(rank, h)[1:]:
                return None
            same = m == rank and source is not None and cell(m, source) == cell(m, hm)
            mine = switched.get(cell(m, hm), {rank}) == {rank}     # touched by none but this rank's switch ops
            if not same and (cell(m, hm) in touched or not mine or not free(m, hm, c, t)):
                return None
        return h

    def fresh_common(group) -> Loc:
        x = max(plain[m] for m in group)
        for m in group:
            plain[m] = x + 1
        return ("s", x)

    def switch_move(t: int, tr) -> SwitchMove:
        r, group = tr.src, tr.group
        read = source = None
        land: dict[int, Loc] = {}
        if tr.op == "switch_reduce":
            read = {}
            for c in tr.chunks:
                where = {cell(m, cur[(m, c)])[1:] for m in group}
                if len(where) != 1:
                    raise Unlowerable(f"transfer {t} load-reduces chunk {c} over ranks {list(group)}, which hold it "
                                      f"at different places ({sorted(where)}): the switch reads one address")
                read[c] = cur[(r, c)]
        else:
            source = {c: cur[(r, c)] for c in tr.chunks}
        last = fused.get(t)
        for c in tr.chunks:
            h = common(r, group, c, t, source[c] if source else None) if last is not None or source else None
            land[c] = h if h is not None else fresh_common(group)
        for c in tr.chunks:
            for m in group:
                if read is not None:
                    switched[cell(m, read[c])].add(r)
                switched[cell(m, land[c])].add(r)
            if source is not None:
                switched[cell(r, source[c])].add(r)
            for m in (group if source is not None or last is not None else (r,)):
                place(m, c, land[c])
        return SwitchMove(t, r, group, read, source, land, last)

    moves = []
    switched: dict[tuple, set[int]] = defaultdict(set)     # cells switch ops touched, by issuing rank
    absorbed = set(fused.values())
    for t, tr in enumerate(algorithm.transfers):
        if tr.group:
            if t not in absorbed:
                moves.append(switch_move(t, tr))
            continue
        s, d = tr.src, tr.dst
        read = {c: cur[(s, c)] for c in tr.chunks}
        touched.update(cell(s, loc) for loc in read.values())
        land: dict[int, Loc] = {}
        operand = result = None
        if packets[t] or tr.op == "reduce":
            for c in tr.chunks:
                land[c] = fresh(d, "p" if packets[t] else "s")
        else:
            for c in tr.chunks:
                h = home(d, c)
                direct = h is not None and cell(d, h) not in touched and cell(d, h) not in switched and \
                    free(d, h, c, t)
                land[c] = h if direct else fresh(d, "s")
        if tr.op == "reduce":
            operand = {c: cur[(d, c)] for c in tr.chunks}
        if tr.op == "reduce" or packets[t]:
            result = {}
            for c in tr.chunks:
                h, was = home(d, c), cur.get((d, c))
                if tr.op == "reduce" and (was[0] == "s" or (h is not None and cell(d, was) == cell(d, h))):
                    result[c] = was                     # accumulate where the value already is
                elif h is not None and free(d, h, c, t):
                    result[c] = h
                else:
                    result[c] = fresh(d, "s")
        for c in tr.chunks:
            for loc in (land[c], (operand or {}).get(c), (result or {}).get(c)):
                if loc is not None:
                    touched.add(cell(d, loc))
            place(d, c, (result or land)[c])
        moves.append(Move(t, read, land, operand, result, packets[t]))
    finals: dict[int, list[tuple[Loc, Loc]]] = defaultdict(list)
    for r in range(R):
        for c in range(coll.num_chunks):
            h = home(r, c)
            if h is not None and cell(r, cur[(r, c)]) != cell(r, h):
                finals[r].append((cur[(r, c)], h))
    return Layout(tuple(moves), {r: tuple(v) for r, v in finals.items()}, tuple(plain), tuple(packet))


def staged(algorithm: Algorithm, lay: Layout, port: tuple[bool, ...]) -> Layout:
    """``lay`` with every port-channel transfer (``port[t]``) that reads the input or output reading a
    fresh plain scratch slot instead, which the sender fills by a local copy just before (``stage``)."""
    plain = list(lay.plain)
    moves, stage = [], {}
    for m in lay.moves:
        src = algorithm.transfers[m.t].src
        if isinstance(m, SwitchMove) or not port[m.t] or all(loc[0] not in ("i", "o") for loc in m.read.values()):
            moves.append(m)
            continue
        read, copies = dict(m.read), []
        for c in sorted(m.read):
            if m.read[c][0] in ("i", "o"):
                read[c] = ("s", plain[src])
                plain[src] += 1
                copies.append((m.read[c], read[c]))
        moves.append(replace(m, read=read))
        stage[m.t] = tuple(copies)
    return Layout(tuple(moves), lay.finals, tuple(plain), lay.packet, stage)
