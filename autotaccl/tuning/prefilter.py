"""The simulator as a sweep's first fidelity: which candidates a real-hardware runner measures.

Simulate first, then measure (``decide``): the first ``explore`` trials of a sweep are simulated only; then
the simulated candidates are measured one at a time, each the one that most raises the expected quality given
what is measured (``shortlist``: the simulator errs mostly per protocol and size, benchmarks/fidelity.py's
tables, so each measurement tells what to expect of its protocol's other candidates), and a candidate the
sampler draws is measured when its simulated time could improve some size among the candidates *of its
protocol* (``worth_measuring``): within one protocol the simulator's order is trusted. Export keeps the fastest
trial per size, so the rule is per size: a geomean rule would skip the small-size winner whose large sizes
are slow. An algorithm already measured (same synthesis cache key, ``twin``) is not measured again: its
measurement is reused. ``rank_agreement`` checks the simulator against the measurements as the sweep goes.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import optuna
from optuna.trial import TrialState

from ..sizes import format_size


def measured(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The study's finished trials a runner measured that recorded their simulated times (a twin's reused
    measurement is not one more)."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if "sim_times" in t.user_attrs and t.user_attrs.get("fidelity", "sim") != "sim"
            and "same_as" not in t.user_attrs]


def simulated(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The study's finished trials, measured or not, that recorded their simulated times."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
            if "sim_times" in t.user_attrs]


def measured_times(trial: optuna.trial.FrozenTrial) -> list[float | None]:
    """The trial's measured time (µs) at each size it recorded, None where a size has none."""
    return [r.get("time_us") or None for r in trial.user_attrs.get("results") or ()]


def twin(done: Sequence[optuna.trial.FrozenTrial], cache_key: str) -> optuna.trial.FrozenTrial | None:
    """The measured trial of the same algorithm (synthesis cache key): its measurement stands for this one."""
    return next((t for t in done if t.user_attrs.get("cache_key") == cache_key), None)


def same_protocol(trials: Sequence[optuna.trial.FrozenTrial], protocol: str | None) -> list[optuna.trial.FrozenTrial]:
    """The ``trials`` run with ``protocol`` (all of them when it is None; a trial that did not record its
    protocol counts as any)."""
    return [t for t in trials if protocol is None or t.user_attrs.get("protocol", protocol) == protocol]


def worth_measuring(done: Sequence[optuna.trial.FrozenTrial], sim_times: Sequence[float], cache_key: str,
                    sizes: Sequence[int], margin: float,
                    against: Sequence[optuna.trial.FrozenTrial] | None = None,
                    protocol: str | None = None) -> tuple[bool, str]:
    """(measure?, why) for a candidate simulated at ``sim_times`` (µs per size), given the measured ``done``,
    compared with the simulated times of ``against`` (default: ``done``) of the same ``protocol`` (None: any),
    other trials of the same algorithm left out."""
    if (same := twin(done, cache_key)) is not None:
        return False, f"the same algorithm as trial {same.number} (cache key {cache_key[:12]}), measured already"
    against = [t for t in same_protocol(done if against is None else against, protocol)
               if t.user_attrs.get("cache_key") != cache_key]
    if not against:
        return True, "the first candidate" + (f" with {protocol}" if protocol else "")
    best = [min(t.user_attrs["sim_times"][i] for t in against) for i in range(len(sizes))]
    gaps = [s / b - 1 for s, b in zip(sim_times, best)]
    room = [max(margin, misorder(same_protocol(done, protocol), i)) for i in range(len(sizes))]
    i = min(range(len(gaps)), key=lambda i: gaps[i] - room[i])
    if gaps[i] < room[i]:
        return True, (f"simulated {gaps[i]:+.1%} against the best measured candidate at {format_size(sizes[i])} "
                      f"(margin {room[i]:.1%})")
    return False, (f"at every size its simulated time is at least its margin above the best measured candidate's "
                   f"(closest: {format_size(sizes[i])}, {gaps[i]:+.1%}, margin {room[i]:.1%})")


def explore_trials(share: float, trials: int) -> int:
    """How many of a sweep's ``trials`` are simulated only before any is measured (``share`` of them)."""
    return math.ceil(share * trials)


SIM_ERROR = (0.10, 0.08)
"""The simulator's error the shortlist expects, as sd of log(measured / simulated): a part shared by the
algorithms of one protocol at one size, and each algorithm's own (benchmarks/fidelity.py measures both)."""


def shortlist(trials: Sequence[optuna.trial.FrozenTrial], sizes: Sequence[int], count: int,
              done: Sequence[optuna.trial.FrozenTrial] = (), pending: Sequence[Mapping[str, Any]] = (),
              error: tuple[float, float] | None = None, draws: int = 64) -> list[optuna.trial.FrozenTrial]:
    """Up to ``count`` of ``trials`` (simulated), one per algorithm, none ``done`` (measured) or ``pending``
    (the user attrs of those queued or being measured), in the order a sweep measures them: each the one that
    most raises the expected quality (geomean over sizes of the best time so far, as export picks per size) of
    what is measured, pending and picked before it. A measured time is modelled as the simulated time x
    exp(shared + own), drawn (``draws`` seeded draws) with the sds of ``error`` (default SIM_ERROR), the part
    shared by a protocol at a size as ``done``'s measurements of that protocol tell (``offsets``). So a candidate
    is worth more where its protocol is close to the best at some size, or where it is close to the best at many
    sizes, than a protocol's best far behind."""
    error = error or SIM_ERROR
    skip = {t.user_attrs.get("cache_key") for t in done}
    queued = [a for a in pending if a.get("cache_key") not in skip]
    skip |= {a.get("cache_key") for a in queued}
    first: dict[str, optuna.trial.FrozenTrial] = {}          # each algorithm's first trial, in trial order
    for t in sorted(trials, key=lambda t: t.number):
        if t.user_attrs["cache_key"] not in skip:
            first.setdefault(t.user_attrs["cache_key"], t)
    pool = list(first.values())
    if not pool or count <= 0:
        return []
    rows = queued + [t.user_attrs for t in pool]
    protocols = sorted({a.get("protocol", "") for a in rows})
    which = np.array([protocols.index(a.get("protocol", "")) for a in rows])
    mean, sd = offsets(done, protocols, len(sizes), error)
    rng = np.random.default_rng(0)
    logs = np.log([a["sim_times"] for a in rows])                                  # candidates x sizes
    shared = mean + sd * rng.standard_normal((draws, len(protocols), len(sizes)))
    worlds = logs + shared[:, which] + error[1] * rng.standard_normal((draws, len(rows), len(sizes)))
    so_far = np.full((draws, len(sizes)), np.inf)
    for t in done:
        times = measured_times(t)
        if len(times) == len(sizes) and all(times):
            so_far = np.minimum(so_far, np.log(times))
    for n in range(len(queued)):
        so_far = np.minimum(so_far, worlds[:, n])
    ref = logs.min(axis=0)
    picks: list[int] = list(range(len(queued)))
    for _ in range(min(count, len(pool))):
        value = np.exp((ref - np.minimum(so_far[:, None, :], worlds)).mean(axis=2)).mean(axis=0)
        value[picks] = -1.0
        pick = int(value.argmax())
        picks.append(pick)
        so_far = np.minimum(so_far, worlds[:, pick])
    return [pool[i - len(queued)] for i in picks[len(queued):]]


def offsets(done: Sequence[optuna.trial.FrozenTrial], protocols: Sequence[str], sizes: int,
            error: tuple[float, float]) -> tuple[Any, Any]:
    """(mean, sd) per protocol and size (arrays) of the simulator's error shared by a protocol's algorithms
    given ``done``'s measurements: each measured log(measured / simulated) is that part plus the algorithm's
    own, so the Gaussian posterior of the shared part moves to their mean as measurements of the protocol add up."""
    shared, own = max(error[0], 1e-6) ** 2, max(error[1], 1e-6) ** 2
    total, count = np.zeros((len(protocols), sizes)), np.zeros((len(protocols), sizes))
    for t in done:
        p = t.user_attrs.get("protocol")
        if p in protocols:
            row = protocols.index(p)
            for i, (m, s) in enumerate(zip(measured_times(t), t.user_attrs.get("sim_times") or ())):
                if i < sizes and m:
                    total[row, i] += math.log(m / s)
                    count[row, i] += 1
    precision = 1 / shared + count / own
    return total / own / precision, precision ** -0.5


def decide(study: optuna.Study, done: Sequence[optuna.trial.FrozenTrial], number: int, attrs: dict[str, Any],
           sizes: Sequence[int], margin: float, explore: int, budget: int) -> tuple[bool, str]:
    """(measure?, why) for trial ``number`` (its ``attrs`` hold its ``cache_key``, ``sim_times`` and
    ``protocol``), given the study's ``measured`` trials ``done``: simulated only while ``number < explore``;
    after that the explored candidates are measured in ``shortlist`` order, one queued at a time (so each is
    chosen by the measurements before it) while ``budget`` trials remain, and any other candidate is measured
    when ``worth_measuring`` against every simulated candidate of its protocol."""
    if number < explore:
        return False, f"exploring: the first {explore} trials are simulated only"
    trials = simulated(study)
    chained = bool(attrs.get("shortlist"))
    waiting = [t for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)) if t.user_attrs.get("shortlist")]
    if explore and (chained or not waiting) and budget > len(waiting):
        by_number = {t.number: t for t in trials}
        pending = [by_number[t.user_attrs["shortlist_of"]].user_attrs for t in waiting
                   if t.user_attrs.get("shortlist_of") in by_number] + [attrs]
        for t in shortlist([t for t in trials if t.number < explore], sizes, 1, done, pending):   # the explored
            study.enqueue_trial(t.params, user_attrs={"shortlist": True, "shortlist_of": t.number})
    if chained:
        return True, "on the simulator's shortlist (what most raises the expected quality, given the measurements)"
    return worth_measuring(done, attrs["sim_times"], attrs["cache_key"], sizes, margin, trials, attrs.get("protocol"))


def misorder(done: Sequence[optuna.trial.FrozenTrial], i: int, near: float = 0.10, pairs: int = 3) -> float:
    """How far the simulator errs between candidates it finds close: at size ``i``, the median over measured
    pairs simulated within ``near`` of each other of the difference of their measured / simulated ratios (0
    until ``pairs`` such pairs are measured). A sweep widens its margin to it: where the simulator cannot
    tell near candidates apart, only measuring them can."""
    ratios = []
    for t in done:
        sim, times = t.user_attrs["sim_times"][i], measured_times(t)
        if i < len(times) and times[i]:
            ratios.append((sim, times[i] / sim))
    gaps = sorted(abs(ra / rb - 1) for n, (sa, ra) in enumerate(ratios) for sb, rb in ratios[:n]
                  if abs(sa / sb - 1) < near)
    return gaps[len(gaps) // 2] if len(gaps) >= pairs else 0.0


def rank_agreement(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float | None:
    """Share of (candidate, candidate, size) pairs whose simulated order is their measured order (None: no pair).

    ``pairs`` holds, per measured candidate, (simulated times, measured times) per size; ties count half."""
    agree = total = 0.0
    for a in range(len(pairs)):
        for b in range(a):
            for sa, sb, ma, mb in zip(pairs[a][0], pairs[b][0], pairs[a][1], pairs[b][1]):
                ds, dm = sa - sb, ma - mb
                total += 1
                agree += 0.5 if ds == 0 or dm == 0 else float((ds > 0) == (dm > 0))
    return agree / total if total else None
