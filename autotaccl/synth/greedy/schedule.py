"""One greedy schedule: a strategy's bookings as a verified Algorithm, reductions built from AllGathers.

ReduceScatter runs the AllGather with the same chunk numbering (chunk ``c`` rooted at rank
``c // chunkup``) backwards over the sketch links' reverses; AllReduce appends the AllGather itself
(:mod:`autotaccl.synth.reductions`). Steps come from the transfers' dependencies: by depth
(:func:`assign_steps`), or in planned-start order by TACCL's step rule (:func:`time_steps`).
"""
from __future__ import annotations

from typing import Sequence

from ...model.algorithm import Algorithm, Transfer, verify
from ...model.dependencies import transfer_dependencies
from ...sketch.logical import LogicalTopology
from ..reductions import allgather_view, reverse_gather, sequence
from .strategies import STRATEGIES
from .timeline import Booking, Planner


def greedy_schedule(lt: LogicalTopology, batching: bool = True, strategy: str = "earliest",
                    window: int | None = None) -> Algorithm:
    """One greedy schedule of ``lt.collective`` on ``lt`` by ``strategy`` (verified).

    ``earliest`` routes every chunk where it arrives soonest (best when latency dominates);
    ``balanced`` / ``bottleneck`` route for the least-loaded arcs (linear / squared load), then
    list-schedule (best when bandwidth dominates);
    ``hierarchy`` shares per-rank shortest-path trees and one crossing per node so chunks batch;
    ``doubling`` exchanges ever larger blocks (Bruck) where the sketch gives complete nodes and direct
    inter-node peers; ``relay`` gathers each node, crosses over the sketch's relay pairs and gathers
    again, on complete nodes (both raise NotApplicable elsewhere).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown greedy strategy {strategy!r}; one of: {', '.join(STRATEGIES)}")
    coll = lt.collective
    if coll.is_reduction:
        gather = allgather_view(lt, reverse=False, senders=lt.senders)
        gathered = _transfers(book(gather, batching, strategy, window, reverse=True))
        # the planned starts are mirrored as if every transfer took no time: what counts is the reversed
        # list order, the steps follow from the dependencies
        transfers = reverse_gather(gathered, [t.start_us for t in gathered])
        if coll.name == "allreduce":
            shift = max((t.start_us for t in transfers), default=0.0) + 1e-6
            transfers = sequence(transfers, _transfers(book(gather, batching, strategy, window)), shift)
    else:
        transfers = _transfers(book(lt, batching, strategy, window))
    name = f"{coll.name}-{lt.graph.graph.get('name', 'topology')}-greedy"
    algorithm = Algorithm(name, coll, assign_steps(transfers), lt.graph.graph.get("name", ""),
                          {"engine": "greedy", "strategy": strategy, "batching": batching, "order": "depth",
                           "chunk_bytes": lt.chunk_bytes})
    verify(algorithm, lt.graph)
    return algorithm


def book(lt: LogicalTopology, batching: bool, strategy: str, window: int | None = None,
         reverse: bool = False) -> list[Booking]:
    """The bookings of ``strategy`` for the copy collective ``lt.collective`` (see :class:`Planner`)."""
    planner = Planner(lt, batching, reverse, window)
    STRATEGIES[strategy].book(planner)
    return planner.bookings


def _transfers(bookings: list[Booking]) -> list[Transfer]:
    ordered = sorted(bookings, key=lambda b: (b.start, b.order))
    return [Transfer(tuple(sorted(b.chunks)), b.edge[0], b.edge[1], 0, "copy", 0, b.start) for b in ordered]


def assign_steps(transfers: list[Transfer]) -> tuple[Transfer, ...]:
    """Steps by dependency depth: a transfer's step is one more than that of every earlier transfer it
    must follow (:func:`autotaccl.model.dependencies.transfer_dependencies`).

    Transfers are then ordered by (step, list position), which keeps every dependency in list order,
    so steps never decrease and the number of steps is the longest dependency chain.
    """
    steps: list[int] = []
    for deps in transfer_dependencies(transfers):
        steps.append(1 + max((steps[d] for d in deps), default=-1))
    order = sorted(range(len(transfers)), key=lambda i: (steps[i], i))
    return tuple(transfers[i].at_step(steps[i]) for i in order)


def time_steps(transfers: list[Transfer]) -> tuple[Transfer, ...]:
    """Planned-start order with TACCL's step rule (:func:`close_steps`): the simulator's priorities then
    follow the plan exactly."""
    return close_steps(sorted(transfers, key=lambda t: t.start_us))


def critical_first(transfers: Sequence[Transfer], times: Sequence[float],
                   pieces: Sequence[int]) -> tuple[Transfer, ...]:
    """``transfers`` piece by piece (``pieces[i]``: transfer ``i``'s piece, lower first), and within a
    piece by the longest chain of transfers each still has to run, itself included (each taking
    ``times[i]``), longest first; steps by TACCL's step rule (:func:`close_steps`).

    The list is the simulator's priority among transfers ready on one connection, and the runtime's
    order within a thread block. By dependency depth, a leaf's sum for a root far down its chain
    waits behind every other leaf sum; by the chain still ahead, the sums a NIC sends first are made
    first, and piece by piece the links work on the piece the NICs need next. A transfer heads a longer
    chain than any that depends on it, and a piece is never earlier than those it depends on, so every
    dependency stays in list order (the same algorithm)."""
    deps = transfer_dependencies(transfers)
    piece = list(pieces)
    for i, ds in enumerate(deps):
        piece[i] = max([piece[i]] + [piece[d] for d in ds])
    ahead = list(times)
    for i in range(len(transfers) - 1, -1, -1):
        for d in deps[i]:
            ahead[d] = max(ahead[d], times[d] + ahead[i])
    order = sorted(range(len(transfers)), key=lambda i: (piece[i], -ahead[i], i))
    return close_steps([transfers[i] for i in order])


def close_steps(ordered: Sequence[Transfer]) -> tuple[Transfer, ...]:
    """Steps for a list in its order by TACCL's step rule: a step closes before a transfer touching a
    value written within it."""
    step, first = 0, 0                 # the current step and the position where it began
    out = []
    for i, (t, deps) in enumerate(zip(ordered, transfer_dependencies(ordered, war=False))):
        if deps and deps[-1] >= first:          # it reads or overwrites a value written in this step
            step, first = step + 1, i
        out.append(t.at_step(step))
    return tuple(out)

