"""The greedy engine's choice: every applicable variant and admitted baseline, simulated at the target size."""
from __future__ import annotations

import itertools
import logging
from dataclasses import replace
from typing import Callable, Iterator

from ...errors import InfeasibleError
from ...model.algorithm import Algorithm, verify
from ...model.protocols import canonical_protocol
from ...model.switch import PROTOCOL as SWITCH_PROTOCOL
from ...selection import Candidate, attainable_us, fastest
from ...sketch.logical import LogicalTopology
from .forest import forest, orders, rail_schedules, sliced_rails
from .schedule import greedy_schedule, time_steps
from .strategies import STRATEGIES
from .strategy import BIG, NotApplicable
from .switch import switch_schedules
from .timeline import EPS

log = logging.getLogger(__name__)

START_ORDER_HANDICAP = 0.02   # prefer the dependency-depth order (far fewer steps) unless start order is this share faster


def greedy(lt: LogicalTopology, size: int, batching: bool = True, window: int | None = None,
           gap: float = 0.0, protocol: str | None = None, instances: int = 1,
           admit: Callable[[Algorithm], str | None] | None = None, switch: bool = True) -> Algorithm:
    """The best of the greedy variants at ``size`` bytes run with ``protocol`` (default Simple) and
    ``instances``, judged by the simulator (verified).

    Tries every strategy (:func:`candidates`; with and without ``batching``, at most ``window`` chunks a
    transfer), each in two list orders, then the tree candidates (:mod:`.forest`) and every baseline the
    sketch admits, so it is never slower than one of them. ``gap``: stop once a candidate is within that
    share of the attainable bound of copies. ``admit``: why the runtime cannot load a candidate (None: it
    can). ``switch``: the runtime runs switch operations, so the switch schedules (:mod:`.switch`) come
    first where the profile's switch reduces and the protocol is Simple."""
    through = switch and canonical_protocol(protocol or SWITCH_PROTOCOL) == SWITCH_PROTOCOL
    enough = attainable_us(lt.graph, lt.collective.name, size, protocol, switch=False) / (1 - gap) if gap else 0.0
    lead, timings = [], []
    if through:     # every switch schedule (the gap of copies does not stop among them), the best leads
        ahead, timings = fastest(_switched(lt), lt.graph, size, margin_us=EPS, protocol=protocol,
                                 instances=instances, admit=admit)
        lead = [] if ahead is None else [ahead.candidate]
    best, rest = fastest(itertools.chain(lead, candidates(lt, batching, window)), lt.graph, size, margin_us=EPS,
                         enough_us=enough, protocol=protocol, instances=instances, admit=admit)
    timings = timings + rest
    if best is None:
        refused = [t.refused for t in timings if t.refused]
        if refused:
            raise InfeasibleError(f"no greedy schedule of {lt.collective.name} loads: {refused[-1]}")
        raise RuntimeError("the simulator could evaluate no greedy variant")
    verify(best.candidate.algorithm, lt.graph)
    return best.candidate.algorithm


def _switched(lt: LogicalTopology) -> Iterator[Candidate]:
    """The switch schedules (:mod:`.switch`), where they apply."""
    try:
        for name, algorithm in switch_schedules(lt):
            yield Candidate(algorithm, f"greedy {name}")
    except NotApplicable as why:
        log.debug("greedy switch: %s", why)


def candidates(lt: LogicalTopology, batching: bool = True, window: int | None = None,
               switch: bool = False) -> Iterator[Candidate]:
    """What :func:`greedy` chooses from, in order (on equal times the earlier one wins); ``switch``: the
    switch schedules first (few operations, built in no time, and where the switch reduces the fastest
    at large sizes; :func:`greedy` takes them apart, then their best first). On big
    configurations the trees come first: they are built in a fraction of the strategies' time and
    usually win at large sizes, so the strategies' schedules need not be simulated. Where they exist
    there (AllGather and its reductions), the routed strategies are not tried at all: their
    chunk-by-chunk searches took most of the strategies' time and never won on a big configuration,
    where the trees or the exchanges did (``benchmarks/synthesis.py``)."""
    if switch:
        yield from _switched(lt)
    big = lt.collective.num_chunks * len(lt.edges) > BIG
    grown = False
    if big:
        for candidate in _trees(lt):
            grown = True
            yield candidate
    yield from _strategies(lt, batching, window, big, routed=not grown)
    if not big:
        yield from _trees(lt)
    for algorithm in sketch_baselines(lt):
        yield Candidate(algorithm, f"greedy {algorithm.metadata['strategy']}")


def _strategies(lt: LogicalTopology, batching: bool, window: int | None, big: bool,
                routed: bool = True) -> Iterator[Candidate]:
    """``routed=False``: only the strategies that do not route chunk by chunk (the exchanges)."""
    for name, strategy in STRATEGIES.items():
        if (big and strategy.small_only) or (strategy.routed and not routed):
            continue
        for batch in (True, False) if batching and strategy.routed and not big else (batching,):
            try:
                algorithm = greedy_schedule(lt, batch, name, window)
            except NotApplicable as why:
                log.debug("greedy %s: %s", name, why)
                continue
            # the same schedule in two list orders: by dependency depth (few steps) or by planned start
            timed = replace(algorithm, transfers=time_steps(list(algorithm.transfers)),
                            metadata={**algorithm.metadata, "order": "start"})
            yield Candidate(algorithm, f"greedy {name} batching={batch} order=depth")
            yield Candidate(timed, f"greedy {name} batching={batch} order=start", START_ORDER_HANDICAP)


def _trees(lt: LogicalTopology) -> Iterator[Candidate]:
    """The rail schedules (plain, then spilled), then the tree packing: the cheap ones first, so at the
    bound no LP is built; then a reduction's rails in slices (most pieces first), many more transfers
    for a tie."""
    try:
        for name, algorithm in rail_schedules(lt):
            yield from _ordered(lt, algorithm, name)
    except NotApplicable as why:
        log.debug("greedy rails: %s", why)
    try:
        yield from _ordered(lt, forest(lt), "trees")
    except NotApplicable as why:
        log.debug("greedy trees: %s", why)
    try:
        for algorithm in sliced_rails(lt):
            yield Candidate(algorithm, f"greedy rails in {algorithm.metadata['pieces']} slices")
    except NotApplicable as why:
        log.debug("greedy rails in slices: %s", why)


def _ordered(lt: LogicalTopology, algorithm: Algorithm, name: str) -> Iterator[Candidate]:
    """A tree schedule in each of its list orders (:func:`.forest.orders`); the first keeps the plain name."""
    for ordered in orders(lt, algorithm):
        suffix = "" if ordered is algorithm else f" order={ordered.metadata['order']}"
        yield Candidate(ordered, f"greedy {name}{suffix}")


def sketch_baselines(lt: LogicalTopology) -> list[Algorithm]:
    """The baselines (ring, direct, ...) of ``lt.collective`` that the sketch admits (at the sketch's chunk-up):
    every transfer on a sketch link (a reduce on its reverse), chunks leaving their node only through their senders."""
    from ...baselines import applicable_baselines, baseline

    coll, gpn = lt.collective, lt.graph.graph["gpus_per_node"]
    out = []
    for name in applicable_baselines(lt.graph, coll.name):
        algorithm = baseline(lt.graph, coll.name, name)
        k = coll.chunkup // max(1, algorithm.collective.chunkup)
        if k > 1 and algorithm.collective.chunkup * k == coll.chunkup:
            # the sketch's chunk-up: chunk c of the baseline is chunks c*k .. c*k+k-1 (same owner and
            # destinations), carried together
            algorithm = replace(algorithm, collective=coll, transfers=tuple(
                replace(t, chunks=tuple(c * k + j for c in t.chunks for j in range(k))) for t in algorithm.transfers))
        if algorithm.collective != coll:
            continue
        fits = True
        for t in algorithm.transfers:
            if ((t.src, t.dst) if t.op == "copy" else (t.dst, t.src)) not in lt.edges:
                fits = False
                break
            if t.src // gpn != t.dst // gpn:
                inner = t.src if t.op == "copy" else t.dst      # the rank on the owner's side of the crossing
                for c in t.chunks:
                    owner = c // coll.chunkup if coll.is_reduction else min(coll.precondition(c))
                    if c in lt.senders and inner // gpn == owner // gpn and inner not in lt.senders[c]:
                        fits = False
            if not fits:
                break
        if fits:
            out.append(replace(algorithm, metadata={**algorithm.metadata, "engine": "greedy",
                                                    "strategy": f"baseline {name}", "chunk_bytes": lt.chunk_bytes}))
    return out
