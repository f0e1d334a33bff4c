"""The simulator as a sweep's first fidelity: which candidates a real-hardware runner measures.

Export keeps the fastest trial per size, so a candidate is worth a measurement when its simulated time could
improve some size: below the best simulated time plus ``margin``, at that size, among the candidates measured
so far (``worth_measuring``). A geomean rule would skip the small-size winner whose large sizes are slow. An
algorithm already measured (same synthesis cache key, ``twin``) is not measured again: its measurement is
reused. ``rank_agreement`` checks the simulator against the measurements as the sweep goes: the share of
pairs of measured candidates, per size, that the simulator orders as the runner does.
"""
from __future__ import annotations

from typing import Sequence

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


def worth_measuring(done: Sequence[optuna.trial.FrozenTrial], sim_times: Sequence[float], cache_key: str,
                    sizes: Sequence[int], margin: float,
                    against: Sequence[optuna.trial.FrozenTrial] | None = None) -> tuple[bool, str]:
    """(measure?, why) for a candidate simulated at ``sim_times`` (µs per size), given the measured ``done``,
    compared with the simulated times of ``against`` (default: ``done``)."""
    if (same := twin(done, cache_key)) is not None:
        return False, f"the same algorithm as trial {same.number} (cache key {cache_key[:12]}), measured already"
    against = done if against is None else against
    if not against:
        return True, "the first candidate"
    best = [min(t.user_attrs["sim_times"][i] for t in against) for i in range(len(sizes))]
    gaps = [s / b - 1 for s, b in zip(sim_times, best)]
    room = [max(margin, misorder(done, i)) for i in range(len(sizes))]
    i = min(range(len(gaps)), key=lambda i: gaps[i] - room[i])
    if gaps[i] < room[i]:
        return True, (f"simulated {gaps[i]:+.1%} against the best measured candidate at {format_size(sizes[i])} "
                      f"(margin {room[i]:.1%})")
    return False, (f"at every size its simulated time is at least its margin above the best measured candidate's "
                   f"(closest: {format_size(sizes[i])}, {gaps[i]:+.1%}, margin {room[i]:.1%})")


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
