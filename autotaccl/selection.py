"""Simulate candidate algorithms at one buffer size and keep the fastest.

How the greedy engine picks among its variants, the MILP engine between its schedule and the greedy
one, and ``best_baseline`` among the baselines. Candidates are taken in order and a later one
replaces the best so far only when it is faster by the caller's margin, so ties keep the earlier
candidate. A simulator fault on one candidate must not sink the choice: it is logged and that
candidate skipped. A candidate whose floor (``simulate.floor_us``, a lower bound for a fraction of a
simulation's cost) already cannot replace the best so far is not simulated: the choice is the same.

``attainable_us`` and ``share_of_bound`` say how close a candidate is to the best any algorithm could
do in the simulator: a candidate at the bound needs no search for a faster one.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Callable, Iterable

import networkx as nx

from .bounds import bound_time_us, bounds, switch_bounds
from .model.algorithm import Algorithm
from .model.switch import PROTOCOL as SWITCH_PROTOCOL
from .simulate import SimResult, link_efficiency, protocol_terms, simulate, simulate_below

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """``handicap``: compare its time as ``time * (1 + handicap)`` (keep the others unless it is that much faster)."""
    algorithm: Algorithm
    label: str
    handicap: float = 0.0


@dataclass(frozen=True)
class Timed:
    candidate: Candidate
    result: SimResult | None        # None: the simulator failed on it, or it was pruned
    floor_us: float | None = None   # pruned: not simulated, its floor could not beat the best so far
    refused: str | None = None      # chosen, but ``admit`` refused it: why

    @property
    def time_us(self) -> float:
        return math.inf if self.result is None else self.result.time_us


def fastest(candidates: Iterable[Candidate], graph: nx.DiGraph, size: int, *, margin: float = 0.0,
            margin_us: float = 0.0, prune: bool = True, enough_us: float = 0.0, protocol: str | None = None,
            instances: int = 1, admit: Callable[[Algorithm], str | None] | None = None
            ) -> tuple[Timed | None, list[Timed]]:
    """The fastest candidate at ``size`` bytes run with ``protocol`` (default Simple) and ``instances``
    (None if the simulator timed none) and every timing, in order.

    A candidate replaces the best so far when its handicapped time is below ``best * (1 - margin) - margin_us``.
    ``prune``: skip the simulation of a candidate whose floor is not below that. ``enough_us``: take no
    further candidates (nor build them) once the best's time is at most this. ``admit`` (if given) says
    why the runtime cannot load a candidate (None: it can). Only the choice is asked; if it is refused, it
    is marked so (``Timed.refused``) and the choice is made again without it, the candidates it had
    pruned simulated where they could now win, and the rest taken as before.
    """
    pending, timings = iter(candidates), []

    def time(candidate: Candidate, best: float | None) -> Timed:
        """``candidate`` timed, or only floored where it cannot beat the ``best`` score so far."""
        try:
            if prune and best is not None:      # the floor a candidate must get under to replace the best
                limit = (best * (1 - margin) - margin_us) / ((1 + candidate.handicap) * (1 - 1e-9))
                floor, result = simulate_below(candidate.algorithm, graph, size, limit, protocol, instances)
                if result is None:
                    log.debug("%s: at least %.3f us, not simulated", candidate.label, floor)
                    return Timed(candidate, None, floor)
            else:
                result = simulate(candidate.algorithm, graph, size, protocol, instances)
        except RuntimeError as err:
            log.warning("the simulator failed on %s (%s); candidate skipped", candidate.label, err)
            return Timed(candidate, None)
        log.debug("%s: %.3f us", candidate.label, result.time_us)
        return Timed(candidate, result)

    def choose() -> int | None:
        """The index of the best in ``timings`` (a pruned one timed again where it could now win, the
        refused left out), taking and timing ``pending`` candidates until one is good enough."""
        best: tuple[float, int] | None = None
        k = 0
        while best is None or timings[best[1]].time_us > enough_us:
            so_far = None if best is None else best[0]
            if k == len(timings):
                candidate = next(pending, None)
                if candidate is None:
                    break
                timings.append(time(candidate, so_far))
            elif timings[k].result is None and timings[k].floor_us is not None:   # pruned by a best now gone
                timings[k] = time(timings[k].candidate, so_far)
            timed = timings[k]
            score = timed.time_us * (1 + timed.candidate.handicap)
            if timed.result is not None and not timed.refused and (
                    best is None or score < best[0] * (1 - margin) - margin_us):
                best = (score, k)
            k += 1
        return None if best is None else best[1]

    while True:
        k = choose()
        best = None if k is None else timings[k]
        problem = admit(best.candidate.algorithm) if admit and best else None
        if not problem:
            return best, timings
        log.debug("%s: refused (%s)", best.candidate.label, problem)
        timings[k] = replace(best, refused=problem)


def attainable_us(graph: nx.DiGraph, collective: str, size: float, protocol: str | None = None,
                  switch: bool = True) -> float:
    """The least simulated time (µs) of any ``collective`` algorithm at ``size``: the protocol's launch plus
    the bound on ``graph`` with every arc at ``capacity * link efficiency * protocol efficiency`` and every
    edge's latency plus the protocol's per-step term (the simulator's rates and latencies), so an algorithm
    that keeps the busiest cut full reaches it at large sizes. Where the profile's switch reduces and
    multicasts (``nccl.nvls``) and the protocol moves data through it (Simple), the bound with in-switch
    reduction (:func:`autotaccl.bounds.switch_bounds`, its ports at the NVLS efficiency) counts too, unless
    ``switch`` is False (the bound of algorithms that only copy between GPUs)."""
    proto = protocol_terms(graph, protocol)
    classes = {d.get("link_class") or "" for _, _, d in graph.graph["capacity"].edges(data=True)}
    efficiency = link_efficiency(graph)
    derate = {c: efficiency.get(c, 1.0) * proto.efficiency for c in classes}
    bound = bound_time_us(bounds(graph, collective, derate, proto.hops), size)
    profile = graph.graph.get("profile")
    nvls = None if profile is None else profile.nccl.nvls
    if switch and proto.name == SWITCH_PROTOCOL and nvls:
        through = switch_bounds(graph, collective, derate, proto.hops, nvls.efficiency)
        if through is not None:
            bound = min(bound, bound_time_us(through, size))
    return proto.launch_us + bound


def share_of_bound(algorithm: Algorithm, graph: nx.DiGraph, size: int, protocol: str | None = None,
                   instances: int = 1, switch: bool = True) -> float:
    """``attainable_us / simulated time`` at ``size`` run with ``protocol`` and ``instances`` (1.0: at the
    bound; 0.0 if the simulator fails); ``switch`` as :func:`attainable_us`."""
    try:
        time_us = simulate(algorithm, graph, size, protocol, instances).time_us
    except RuntimeError as err:
        log.warning("the simulator failed on %s (%s)", algorithm.name, err)
        return 0.0
    return attainable_us(graph, algorithm.collective.name, size, protocol, switch) / time_us
