"""Thread blocks and fusion: which thread block sends or receives each transfer, and which receive is
fused with the send that forwards it (``rcs``, ``rrs``, ``rrcs``).

A thread block has one send and one receive peer on one channel; each receive peer is paired with the send
peer that forwards most of what it sends (a ring gets one block), and a receive is fused with the send of
exactly what it received (``Blocks.across``: also with a later send of the block). The pairing and fusion
rules: ``docs/internals.md``."""
from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cached_property

from ....model.algorithm import Algorithm
from ..program import inplace_cell

#: (rank, send peer, receive peer, channel)
TbKey = tuple[int, int, int, int]


@dataclass(frozen=True)
class Uses:
    """Per (rank, chunk) of ``algorithm``, the transfers touching it in program order: (index,
    "send"|"copy"|"reduce"); and, computed once for every plan of the algorithm, the order its events run
    in and its forwards whatever the channels."""
    algorithm: Algorithm = field(repr=False, compare=False)      # what order and forwards read
    events: dict[tuple[int, int], list[tuple[int, str]]]

    @classmethod
    def of(cls, algorithm: Algorithm) -> "Uses":
        events: dict[tuple[int, int], list[tuple[int, str]]] = defaultdict(list)
        for t, tr in enumerate(algorithm.transfers):
            for c in tr.chunks:
                events[(tr.src, c)].append((t, "send"))
                events[(tr.dst, c)].append((t, tr.op))
        return cls(algorithm, dict(events))

    def next(self, rank: int, chunk: int, after: int) -> tuple[int, str] | None:
        ev = self.events.get((rank, chunk), [])
        k = bisect.bisect_right(ev, (after, "~"))
        return ev[k] if k < len(ev) else None

    @cached_property
    def order(self) -> tuple[tuple[int, str], ...]:
        """:func:`event_order` of the algorithm."""
        return tuple(event_order(self.algorithm))

    @cached_property
    def forwards(self) -> dict[int, int]:
        """t1 -> t2 where t2 forwards, from t1's destination, exactly t1's chunks, and those chunks are
        untouched on that rank between t1 and t2."""
        out = {}
        transfers = self.algorithm.transfers
        for t1, tr in enumerate(transfers):
            nxt = {self.next(tr.dst, c, t1) for c in tr.chunks}
            if len(nxt) != 1:
                continue
            (ev,) = nxt
            if ev is not None and ev[1] == "send" and set(transfers[ev[0]].chunks) == set(tr.chunks):
                out[t1] = ev[0]
        return out


def event_times(algorithm: Algorithm) -> tuple[tuple[int, int], ...]:
    """Per transfer, (step, level): its send runs at (step, level, 0, t), its receive at (step, level, 1, t).

    Sends of a step come before its receives (a ring block sends its own chunk before it receives),
    except where a transfer of the same step reads what an earlier one writes: it goes a level higher.
    Conflicting accesses to a (rank, chunk) thus keep their program order; the rest run in any order.
    """
    out = []
    step = None
    wrote: dict[tuple[int, int], int] = {}
    read: dict[tuple[int, int], int] = {}
    for tr in algorithm.transfers:
        if tr.step != step:
            step, wrote, read = tr.step, {}, {}
        level = 0
        for c in tr.chunks:
            src, dst = (tr.src, c), (tr.dst, c)
            level = max(level, wrote.get(src, -1) + 1, wrote.get(dst, 0), read.get(dst, 0))
        for c in tr.chunks:
            src, dst = (tr.src, c), (tr.dst, c)
            read[src] = max(read.get(src, 0), level)
            wrote[dst] = max(wrote.get(dst, 0), level)
            if tr.op == "reduce":
                read[dst] = max(read.get(dst, 0), level)
        out.append((tr.step, level))
    return tuple(out)


def event_order(algorithm: Algorithm, sequential: bool = False) -> list[tuple[int, str]]:
    """Every (transfer, "send"|"recv") in the order the lowered program runs them (see event_times).

    ``sequential``: program order, each send right before its receive. With thread blocks that only send
    or only receive this order never needs more than one message in flight per connection, so it
    cannot deadlock on full connection buffers (the fallback)."""
    if sequential:
        return [(t, kind) for t in range(len(algorithm.transfers)) for kind in ("send", "recv")]
    times = event_times(algorithm)
    keys = [(times[t] + (0, t), t, "send") for t in range(len(times))]
    keys += [(times[t] + (1, t), t, "recv") for t in range(len(times))]
    return [(t, kind) for _, t, kind in sorted(keys)]


@dataclass(frozen=True)
class Blocks:
    """How thread blocks are planned: ``split_idle``, the peers of a pair that fuses nothing get a block
    each (False: fewer blocks, where the runtime has too few); ``across``, a receive also fuses with its
    forward across the block's receives before it (fewer steps, where the runtime parses too few)."""
    split_idle: bool = True
    across: bool = False


@dataclass(frozen=True)
class Plan:
    send_tb: tuple[TbKey, ...]       # per transfer, its sending thread block
    recv_tb: tuple[TbKey, ...]       # per transfer, its receiving thread block
    fused_next: dict[int, int]       # t1 -> t2: the receive of t1 also sends t2
    stored: tuple[bool, ...]         # per transfer, whether its receive stores the result locally
    order: tuple[tuple[int, str], ...]   # every (transfer, "send"|"recv") as the program runs them (event_order)


def forward_candidates(channels: tuple[int, ...], uses: Uses) -> dict[int, int]:
    """The forwards of ``uses`` (t1 -> t2) on one channel."""
    return {t1: t2 for t1, t2 in uses.forwards.items() if channels[t1] == channels[t2]}


def plan_threadblocks(algorithm: Algorithm, channels: tuple[int, ...], uses: Uses,
                      forbid: frozenset[tuple[int, int, int, int]] | None = frozenset(),
                      blocks: Blocks = Blocks()) -> Plan:
    """``forbid``: (rank, channel, receive peer, send peer) pairs that must not share a thread block
    (None: no pairs at all; then every block only sends or only receives, nothing is fused and events run
    in program order, which cannot deadlock). ``blocks``: which pairs split, which receives fuse."""
    transfers = algorithm.transfers
    coll = algorithm.collective
    sequential = forbid is None
    cand = forward_candidates(channels, uses) if not sequential else {}
    forbid = forbid or frozenset()
    peers = defaultdict(lambda: (set(), set()))       # (rank, chan) -> (recv peers, send peers)
    for t, tr in enumerate(transfers):
        peers[(tr.dst, channels[t])][0].add(tr.src)
        peers[(tr.src, channels[t])][1].add(tr.dst)
    counts: dict[tuple[int, int], Counter] = defaultdict(Counter)   # (rank, chan) -> forwards per (recv, send) peer
    for t1, t2 in cand.items():
        counts[(transfers[t1].dst, channels[t1])][(transfers[t1].src, transfers[t2].dst)] += 1
    recv_key: dict[tuple[int, int, int], TbKey] = {}
    send_key: dict[tuple[int, int, int], TbKey] = {}
    for (rank, chan), (recvs, sends) in sorted(peers.items()):
        for _, p, q in sorted((-n, p, q) for (p, q), n in counts[(rank, chan)].items()):
            if (rank, chan, p, q) not in forbid and (rank, p, chan) not in recv_key and (rank, q, chan) not in send_key:
                recv_key[(rank, p, chan)] = send_key[(rank, q, chan)] = (rank, q, p, chan)
        for p in sorted(recvs):
            recv_key.setdefault((rank, p, chan), (rank, -1, p, chan))
        for q in sorted(sends):
            send_key.setdefault((rank, q, chan), (rank, q, -1, chan))
    send_tb, recv_tb = _blocks(transfers, channels, send_key, recv_key)
    order = tuple(event_order(algorithm, sequential=True)) if sequential else uses.order
    fused = _fusions(order, send_tb, recv_tb, cand, blocks.across)
    # a pair that fuses nothing would only hold its receives behind its sends and back: split it
    idle = {k for k in recv_key.values() if k[1] >= 0} - {recv_tb[t] for t in fused}
    if idle and blocks.split_idle:
        for rank, q, p, chan in idle:
            recv_key[(rank, p, chan)], send_key[(rank, q, chan)] = (rank, -1, p, chan), (rank, q, -1, chan)
        send_tb, recv_tb = _blocks(transfers, channels, send_key, recv_key)
    stored = []
    for t, tr in enumerate(transfers):
        t2 = fused.get(t)
        dead = tr.op == "reduce" and t2 is not None and all(
            _dead_after(uses, coll, tr.dst, c, t2) for c in tr.chunks)
        stored.append(not dead)
    return Plan(send_tb, recv_tb, fused, tuple(stored), order)


def _blocks(transfers, channels, send_key: dict, recv_key: dict) -> tuple[tuple[TbKey, ...], tuple[TbKey, ...]]:
    """Per transfer, its sending and its receiving thread block."""
    return (tuple(send_key[(tr.src, tr.dst, channels[t])] for t, tr in enumerate(transfers)),
            tuple(recv_key[(tr.dst, tr.src, channels[t])] for t, tr in enumerate(transfers)))


def _fusions(order: list[tuple[int, str]], send_tb, recv_tb, cand: dict[int, int], across: bool) -> dict[int, int]:
    """t1 -> t2 for each fusion candidate whose send comes, in its thread block, right after its receive
    (``across``: after it with no other send between them, as fused; :class:`Blocks`)."""
    events = defaultdict(list)
    for t, kind in order:
        events[send_tb[t] if kind == "send" else recv_tb[t]].append((t, kind))
    fused = {}
    for evs in events.values():
        waiting: dict[int, tuple[int, int]] = {}    # a candidate send -> its receive and the receive's place
        since = 0                                   # the first place after the block's last send (as fused)
        for i, (t, kind) in enumerate(evs):
            if kind == "recv":
                if not across:
                    waiting.clear()
                if t in cand:
                    waiting[cand[t]] = (t, i)
                continue
            t1, place = waiting.get(t, (None, -1))
            if place >= since:
                fused[t1] = t
                since = place + 1
            else:
                since = i + 1
    return fused


def sure_targets(algorithm: Algorithm, plan: Plan, uses: Uses, inplace: bool) -> dict[int, set[TbKey]]:
    """Per rank, thread blocks that are surely dependency targets (others may be too), from what follows each
    stored receive of a chunk (after the send it is fused with, if any) up to the next receive of it:

    * the receiving block, where another block reads the chunk (a send, a reduce) or overwrites it;
    * every block that sends it meanwhile, where the next receive stores it from another block.

    A stored value stays in its home cell until the next receive writes it, so each such pair of steps
    (or the local copy that moves the value first) touches one cell, and the later waits for the earlier.
    With in-place calls (``inplace``) a chunk's input and output cells can be one (an AllReduce's, a
    ReduceScatter's own block): then every block that sends the input value before the first receive of it
    stores it from another block."""
    targets: dict[int, set[TbKey]] = defaultdict(set)

    def senders_then_next(rank: int, c: int, after: int) -> tuple[set[TbKey], tuple[int, str] | None]:
        """The blocks that send ``rank``'s value of ``c`` after transfer ``after``, and the receive that
        ends that value (None: none does)."""
        readers = set()
        ev = uses.next(rank, c, after)
        while ev is not None and ev[1] == "send":
            readers.add(plan.send_tb[ev[0]])
            ev = uses.next(rank, c, ev[0])
        return readers, ev

    def overwritten(rank: int, readers: set[TbKey], ev: tuple[int, str] | None) -> None:
        """The senders a receive that stores the next value from another block waits for."""
        if ev is not None and plan.stored[ev[0]]:
            targets[rank].update(readers - {plan.recv_tb[ev[0]]})

    for t, tr in enumerate(algorithm.transfers):
        if not plan.stored[t]:
            continue
        rank, block = tr.dst, plan.recv_tb[t]
        for c in tr.chunks:
            readers, ev = senders_then_next(rank, c, plan.fused_next.get(t, t))
            if (readers | ({plan.recv_tb[ev[0]]} if ev is not None else set())) - {block}:
                targets[rank].add(block)
            overwritten(rank, readers, ev)
    if inplace:
        for rank, c in uses.events:
            readers, ev = senders_then_next(rank, c, -1)
            if readers and _input_is_output(algorithm.collective, rank, c):
                overwritten(rank, readers, ev)
    return targets


def _input_is_output(coll, rank: int, chunk: int) -> bool:
    """In an in-place call, ``rank``'s input and output cells of ``chunk`` are one."""
    src, home = coll.input_index(rank, chunk), coll.output_index(rank, chunk)
    return src is not None and home is not None and \
        inplace_cell(coll.name, coll.chunkup, rank, "i", src) == inplace_cell(coll.name, coll.chunkup, rank, "o", home)


def _dead_after(uses: Uses, coll, rank: int, chunk: int, t: int) -> bool:
    """Nobody reads ``rank``'s value of ``chunk`` after transfer ``t``: it is overwritten next, or never
    used again and not an output of ``rank``."""
    ev = uses.next(rank, chunk, t)
    if ev is None:
        return coll.output_index(rank, chunk) is None
    return ev[1] == "copy"
