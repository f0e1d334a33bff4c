"""The simulator as a sweep's first fidelity: which candidates a real-hardware runner measures.

Simulate first, then measure (``decide``): the first ``explore`` trials of a sweep are simulated only; then
the simulator's best candidate per size and protocol (``shortlist``) is queued for measurement, and a later
candidate is measured when its simulated time could improve some size among the candidates *of its protocol*
(``worth_measuring``): the simulator errs mostly per protocol (benchmarks/fidelity.py's tables), so within
one protocol its order is trusted and across protocols only a measurement tells. Export keeps the fastest
trial per size, so the rule is per size: a geomean rule would skip the small-size winner whose large sizes
are slow. An algorithm already measured (same synthesis cache key, ``twin``) is not measured again: its
measurement is reused. ``rank_agreement`` checks the simulator against the measurements as the sweep goes.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

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


def shortlist(trials: Sequence[optuna.trial.FrozenTrial], sizes: Sequence[int],
              count: int) -> list[optuna.trial.FrozenTrial]:
    """Up to ``count`` of ``trials`` (simulated), one per algorithm, in the order a sweep measures them: the
    simulator's best at each size of any protocol, then its best of every protocol at each size (what a shared
    per-protocol error can make the fastest measured), then the second best of each, and so on."""
    protocols = sorted({t.user_attrs.get("protocol", "") for t in trials})
    groups = [sorted(pool, key=lambda t: (t.user_attrs["sim_times"][i], t.number))
              for pool in [list(trials)] + [same_protocol(trials, p) for p in protocols] for i in range(len(sizes))]
    picks: dict[str, optuna.trial.FrozenTrial] = {}
    for rank in range(max(map(len, groups), default=0)):
        for group in groups:
            if len(picks) >= count:
                return list(picks.values())
            if rank < len(group):
                picks.setdefault(group[rank].user_attrs["cache_key"], group[rank])
    return list(picks.values())


def decide(study: optuna.Study, done: Sequence[optuna.trial.FrozenTrial], number: int, attrs: dict[str, Any],
           sizes: Sequence[int], margin: float, explore: int, budget: int) -> tuple[bool, str]:
    """(measure?, why) for trial ``number`` (its ``attrs`` hold its ``cache_key``, ``sim_times`` and
    ``protocol``), given the study's ``measured`` trials ``done``: simulated only while ``number < explore``; after that, once, the simulator's ``shortlist``
    of up to ``budget`` algorithms is enqueued (those trials are measured), and any other candidate is
    measured when ``worth_measuring`` against every simulated candidate of its protocol."""
    if number < explore:
        return False, f"exploring: the first {explore} trials are simulated only"
    if attrs.get("shortlist"):
        return True, "on the simulator's shortlist after exploring (its best per size and protocol, in rank order)"
    trials = simulated(study)
    if explore and not study.user_attrs.get("shortlisted"):
        study.set_user_attr("shortlisted", number)
        known = {t.user_attrs.get("cache_key") for t in done} | {attrs["cache_key"]}
        for t in [t for t in shortlist(trials, sizes, len(trials)) if t.user_attrs["cache_key"] not in known][:budget]:
            study.enqueue_trial(t.params, user_attrs={"shortlist": True})
    return worth_measuring(done, attrs["sim_times"], attrs["cache_key"], sizes, margin, trials, attrs.get("protocol"))


def misorder(done: Sequence[optuna.trial.FrozenTrial], i: int, near: float = 0.10, pairs: int = 3) -> float:
    """How far the simulator errs between candidates it finds close: at size ``i``, the median over measured
    pairs simulated within ``near`` of each other of the difference of their measured / simulated ratios (0
    until ``pairs`` such pairs are measured). A sweep widens its margin to it: where the simulator cannot
    tell near candidates apart, only measuring them can."""
    ratios = []
    for t in done:
        sim, results = t.user_attrs["sim_times"][i], t.user_attrs.get("results") or ()
        if i < len(results) and "time_us" in results[i]:
            ratios.append((sim, results[i]["time_us"] / sim))
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
