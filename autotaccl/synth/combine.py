"""The MILP engine's ReduceScatter and AllReduce (taccl.md §7): TACCL's stages on AllGathers, composed.

The ReduceScatter is the AllGather synthesised on the *reversed* graph (edge ``v -> u`` there has the
cost and resources of ``u -> v`` here) and run backwards (:mod:`.reductions`): each copy ``u -> v``
at time ``t`` becomes a reduce ``v -> u`` at ``makespan - t - duration``, so it uses the links the
ReduceScatter really uses. Branches of one chunk out of one rank are serialised (heuristic 12 and
stage 3), because reversed they are reductions into the same buffer. The AllReduce is that
ReduceScatter followed by an AllGather on the forward links.

Unlike the reference, the composed AllReduce works on all ``R*k`` buffer slots (taccl.md §7.9).
"""
from __future__ import annotations

import logging
from dataclasses import replace

from ..milp.solution import SolverOptions, StageReport
from ..model.algorithm import Algorithm, verify
from ..model.collectives import Collective
from ..sketch.logical import LogicalTopology
from .ordering import order
from .reductions import allgather_view, reverse_gather, sequence
from .routing import RoutingOptions, route, sends_of
from .scheduling import ScheduleOptions, Schedule, schedule
from .stopping import stop_at_bound

log = logging.getLogger(__name__)


def reverse_allgather(lt_rev: LogicalTopology, allgather: Algorithm, collective: Collective) -> Algorithm:
    """ReduceScatter transfers (for ``collective``'s chunks) from an AllGather scheduled on ``lt_rev``."""
    ends = [(t.start_us or 0.0) + lt_rev.cost_us(t.src, t.dst, len(t.chunks)) for t in allgather.transfers]
    makespan = max(ends)
    out = sorted(reverse_gather(allgather.transfers, ends),
                 key=lambda t: (round(t.start_us, 6), t.dst, t.src, t.chunks))
    steps = {s: i for i, s in enumerate(sorted({round(t.start_us, 6) for t in out}))}   # a step per start time
    transfers = tuple(replace(t, step=steps[round(t.start_us, 6)]) for t in out)
    meta = {**dict(allgather.metadata), "makespan_us": round(makespan, 6), "combine": "reversed allgather"}
    return Algorithm(allgather.name.replace("allgather", collective.name), Collective(
        "reducescatter", collective.ranks, collective.chunkup), transfers, allgather.topology, meta)


def then(first: Algorithm, second: Algorithm, collective: Collective) -> Algorithm:
    """``first`` followed by ``second`` (times shifted by ``first``'s makespan), as one ``collective``."""
    shift = float(first.metadata.get("makespan_us", 0.0))
    meta = {"synthesizer": first.metadata.get("synthesizer", "autotaccl-milp"), "chunk_bytes":
            first.metadata.get("chunk_bytes"), "makespan_us": round(shift + float(second.metadata.get("makespan_us", 0.0)), 6),
            "combine": "reducescatter then allgather"}
    name = first.name.replace(first.collective.name, collective.name)
    return Algorithm(name, collective, sequence(first.transfers, second.transfers, shift), first.topology, meta)


def _stages(lt: LogicalTopology, solver: SolverOptions, heuristic, prefix: str, contiguity: bool, window: int,
            reverse: bool, size: int | None = None) -> tuple[Schedule, dict[str, StageReport]]:
    start = None
    if size is not None:     # warm-start the routing from the greedy AllGather on the same view
        from .greedy import greedy
        start = sends_of(greedy(lt, size, contiguity))
    routed = route(lt, RoutingOptions(milp=solver, start=start))
    if reverse:
        routed = replace(routed, reverse=True)
    ordered = order(lt, routed, heuristic)
    done = schedule(lt, routed, ordered, ScheduleOptions(milp=solver, contiguity=contiguity, batch_window=window,
                                                         serialize_branches=reverse))
    return done, {f"{prefix}routing": routed.report, f"{prefix}ordering": ordered.report,
                  f"{prefix}scheduling": done.report}


def reduce_scatter(lt: LogicalTopology, solver: SolverOptions = SolverOptions(), heuristic="auto",
                   contiguity: bool = True, window: int = 6, senders=None,
                   size: int | None = None, gap: float | None = None) -> tuple[Algorithm, dict[str, StageReport]]:
    """ReduceScatter for ``lt`` (any reduction collective's graph and links): reversed AllGather.

    ``size``: the buffer size to warm-start each routing MILP for (from the greedy AllGather); None: no start.
    ``gap``: each stage stops once within it of the ReduceScatter bound at ``size`` (None: never).
    """
    lt_rev = allgather_view(lt, reverse=True, senders=senders)
    solver = stop_at_bound(solver, lt.graph, "reducescatter", size, gap)
    done, stages = _stages(lt_rev, solver, heuristic, "rs-", contiguity, window, reverse=True, size=size)
    coll = Collective("reducescatter", lt.collective.ranks, lt.collective.chunkup)
    return reverse_allgather(lt_rev, done.algorithm, coll), stages


def all_reduce(lt: LogicalTopology, solver: SolverOptions = SolverOptions(), heuristic="auto",
               contiguity: bool = True, window: int = 6, senders=None,
               size: int | None = None, gap: float | None = None) -> tuple[Algorithm, dict[str, StageReport]]:
    """AllReduce = ReduceScatter, then an AllGather synthesised on the forward links (each half's stages
    stop once within ``gap`` of that half's bound at ``size``)."""
    rs, stages = reduce_scatter(lt, solver, heuristic, contiguity, window, senders, size, gap)
    done, ag_stages = _stages(allgather_view(lt, reverse=False, senders=senders),
                              stop_at_bound(solver, lt.graph, "allgather", size, gap),
                              "auto" if heuristic in (12, 18, "combine-sum", "combine-branch") else heuristic,
                              "ag-", contiguity, window, reverse=False, size=size)
    coll = Collective("allreduce", lt.collective.ranks, lt.collective.chunkup)
    return then(rs, done.algorithm, coll), {**stages, **ag_stages}


def combine_stage(lt: LogicalTopology, sketch, solver: SolverOptions, size: int | None = None,
                  gap: float | None = None) -> tuple[Algorithm, dict[str, StageReport]]:
    """The pipeline's entry for reduction collectives: ``lt.collective`` is reducescatter or allreduce.

    With a sketch, its sender map applies: ``lt.senders``, keyed as the AllGather's (chunk ``c`` is
    gathered at and scattered from rank ``c // chunkup``); without one, chunks may leave through any rank.
    """
    heuristic = getattr(sketch, "ordering", "auto") if sketch is not None else "auto"
    contiguity = getattr(sketch, "contiguity", True) if sketch is not None else True
    window = getattr(sketch, "batch_window", 6) if sketch is not None else 6
    senders = dict(lt.senders) if sketch is not None else {}
    name = lt.collective.name
    if name == "reducescatter":
        algorithm, stages = reduce_scatter(lt, solver, heuristic, contiguity, window, senders, size, gap)
    elif name == "allreduce":
        algorithm, stages = all_reduce(lt, solver, heuristic, contiguity, window, senders, size, gap)
    else:
        raise ValueError(f"combine builds reducescatter or allreduce, not {name}")
    algorithm = replace(algorithm, collective=lt.collective)
    verify(algorithm, lt.graph)
    return algorithm, stages
