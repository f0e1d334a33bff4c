"""A sampler for what export picks: the fastest trial per size, not the best geomean.

A sweep exports, per size, its fastest trial; the winners differ by size (LL at small sizes, Simple at large
ones), so a sampler that chases the best geomean over every size spends its trials near one of them.
``BandedSampler`` gives each new trial one band of sizes to aim at, in turn, and lets a multivariate TPE
sample it from every finished trial scored on that band alone (geomean of time relative to the best
baseline over the band's sizes, read from the trial's ``results``). The study's own objective is untouched.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import TPESampler
from optuna.trial import FrozenTrial, TrialState

from .wrapped import WrappedSampler


def bands(sizes: Sequence[int], count: int) -> list[tuple[int, ...]]:
    """``sizes`` (ascending) cut into ``count`` consecutive bands of near-equal length."""
    count = max(1, min(count, len(sizes)))
    cuts = [round(i * len(sizes) / count) for i in range(count + 1)]
    return [tuple(sizes[cuts[i]:cuts[i + 1]]) for i in range(count)]


def band_score(results: Sequence[dict], band: Sequence[int]) -> float | None:
    """Geomean over ``band`` of a trial's time relative to the best baseline (None: a size is missing)."""
    by_size = {r["size"]: r["relative"] for r in results}
    if not band or not all(s in by_size for s in band):
        return None
    return math.exp(sum(math.log(by_size[s]) for s in band) / len(band))


class BandedSampler(WrappedSampler):
    """Multivariate TPE on one band of sizes per trial, the bands in turn (trial number modulo their count)."""

    def __init__(self, sizes: Sequence[int], count: int = 3, seed: int | None = None,
                 n_startup_trials: int = 5) -> None:
        self._bands = bands(sorted(sizes), count)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._inner = TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=n_startup_trials,
                                     constant_liar=False)      # its view holds no running trial to lie about
        self._proxy: tuple[tuple[int, int], optuna.Study] | None = None

    def _view(self, study: optuna.Study, trial: FrozenTrial) -> optuna.Study:
        """An in-memory copy of ``study``'s finished trials scored on ``trial``'s band."""
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED))
        key = (trial.number, len(done))
        if self._proxy is not None and self._proxy[0] == key:
            return self._proxy[1]
        band = self._bands[trial.number % len(self._bands)]
        view = optuna.create_study(direction="minimize")
        copied = []
        for t in done:
            value = band_score(t.user_attrs.get("results") or (), band) if t.state == TrialState.COMPLETE else None
            copied.append(optuna.trial.create_trial(
                params=t.params, distributions=t.distributions, value=value,
                state=TrialState.COMPLETE if value is not None else TrialState.FAIL))
        view.add_trials(copied)
        self._proxy = (key, view)
        return view

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._inner.infer_relative_search_space(self._view(study, trial), trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self._inner.sample_relative(self._view(study, trial), trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._inner.sample_independent(self._view(study, trial), trial, param_name, param_distribution)
