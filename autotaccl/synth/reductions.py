"""Reduction collectives from AllGathers (taccl.md §7), for both engines (combine's MILP stages, greedy).

An AllGather tree run backwards is a reduction tree (each copy ``u -> v`` becomes a reduce ``v -> u``,
the last first: :func:`reverse_gather`); ReduceScatter is that, AllReduce that followed by the AllGather
(:func:`sequence`). Combine plans on the reversed graph (:func:`allgather_view`), greedy prices each
sketch link as its physical reverse; they stay apart because each engine's schedules depend on it."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..model.algorithm import Transfer, renumber_steps
from ..model.collectives import Collective
from ..sketch.logical import LogicalTopology


def allgather_view(lt: LogicalTopology, reverse: bool, senders=None) -> LogicalTopology:
    """The AllGather whose (reversed) schedule serves ``lt``'s reduction collective.

    ``senders``: the AllGather's sender map (chunk -> ranks that may carry it off its node), if any.
    ``reverse=True``: on the reversed graph with reversed links, for the ReduceScatter half. There a
    chunk leaves its node through the ranks that *receive* from its senders' network links (reversed,
    those links point out of the node); own-first ordering is a property of forward sends and is dropped.
    """
    coll = Collective("allgather", lt.collective.ranks, lt.collective.chunkup)
    senders = dict(senders or {})
    if not reverse:
        return replace(lt, collective=coll, senders=senders)
    gpn = lt.graph.graph["gpus_per_node"]
    back = {}
    for c, ranks in senders.items():
        base = (c // coll.chunkup) // gpn * gpn
        back[c] = frozenset(base + v % gpn for u, v in lt.edges if u in ranks and u // gpn != v // gpn)
    return replace(lt, graph=lt.graph.reverse(copy=True), collective=coll,
                   edges=frozenset((v, u) for u, v in lt.edges), senders=back, enforce_ordering=False)


def reverse_gather(transfers: Sequence[Transfer], ends: Sequence[float]) -> list[Transfer]:
    """The ReduceScatter that runs the AllGather ``transfers`` backwards, in reversed list order.

    A copy ``u -> v`` that ends at ``ends[i]`` becomes a reduce ``v -> u`` that starts at
    ``makespan - ends[i]`` (the makespan being the last end); steps are left at 0 for the caller.
    """
    makespan = max(ends, default=0.0)
    return [Transfer(t.chunks, t.dst, t.src, 0, "reduce", t.link, max(0.0, makespan - end), t.channel)
            for t, end in zip(reversed(transfers), reversed(ends))]


def by_readiness(transfers: Sequence[Transfer], times: Sequence[float]) -> list[Transfer]:
    """``transfers`` with the reduces into every ``(rank, chunk)`` cell in the order their sources' sums
    are complete, listed by when they can start; the copies after them, in their order.

    Reduces into one cell go one at a time, in list order, so one whose source completes late, listed
    early, holds back every later one (a chain's partial sum arriving before the node's own fan-in).
    Replayed with each transfer taking ``times[i]``, a cell takes its reduces by their sources'
    completion, each starting when its source is complete and the one before it is done; the list then
    goes by those starts. Every transfer moves one chunk, and no reduce touches a cell an earlier copy
    wrote or read (a ReduceScatter, or an AllReduce's halves), as the tree schedules lower them.
    """
    if any(len(t.chunks) != 1 for t in transfers):
        raise ValueError("by_readiness orders transfers of one chunk each")
    copied: set[tuple[int, int]] = set()       # cells an earlier copy read or wrote
    reduces, copies = [], []
    for i, t in enumerate(transfers):
        src, dst = (t.src, t.chunks[0]), (t.dst, t.chunks[0])
        if t.op == "reduce":
            if src in copied or dst in copied:
                raise ValueError(f"by_readiness cannot move reduce {i} ahead of the copies its cells depend on")
            reduces.append(i)
        else:
            copied.update((src, dst))
            copies.append(i)
    arrivals: dict[tuple, list[tuple[float, int]]] = {}     # cell -> (source complete, reduce) into it
    done: dict[tuple, float] = {}
    start: dict[int, float] = {}

    def complete(cell: tuple) -> float:
        """When ``cell``'s reduces, taken by their sources' completion, are all done (first call: final)."""
        if cell not in done:
            end = 0.0
            for ready, i in sorted(arrivals.pop(cell, ())):
                start[i] = max(end, ready)
                end = start[i] + times[i]
            done[cell] = end
        return done[cell]

    for i in reduces:     # a verified list reduces everything into a cell before that cell is read
        t = transfers[i]
        arrivals.setdefault((t.dst, t.chunks[0]), []).append((complete((t.src, t.chunks[0])), i))
    for cell in list(arrivals):
        complete(cell)
    return [transfers[i] for i in sorted(reduces, key=lambda i: (start[i], i))] + [transfers[i] for i in copies]


def sequence(first: Sequence[Transfer], second: Sequence[Transfer], shift: float) -> tuple[Transfer, ...]:
    """``first``, then ``second`` with its steps after ``first``'s and its planned starts ``shift`` µs later."""
    base = 1 + max((t.step for t in first), default=-1)
    moved = [replace(t, step=t.step + base, start_us=None if t.start_us is None else t.start_us + shift)
             for t in second]
    return renumber_steps(tuple(first) + tuple(moved))
