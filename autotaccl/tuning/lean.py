"""A sampler that samples only what the trial's engine reads.

The greedy engine ignores the sketch's ``symmetry`` and ``enforce_ordering`` (``ENGINE_IGNORES``): a sampler
that draws them splits one algorithm into several configurations, and a model-based sampler spends its
observations learning that they do not matter. ``LeanSampler`` gives such a knob its first choice whenever
the trial's engine (sampled, or fixed by the space) ignores it, and lets another sampler draw the rest; a MILP
trial still samples them.
"""
from __future__ import annotations

from typing import Any, Mapping

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from .wrapped import WrappedSampler

# Sketch knobs an engine does not read (the greedy engine ignores the routing MILP's hints, synth/greedy's
# docstring): sampling them only splits one algorithm into several equal configurations.
ENGINE_IGNORES: dict[str, tuple[str, ...]] = {"greedy": ("symmetry", "enforce_ordering")}


def _first(distribution: BaseDistribution) -> Any:
    if isinstance(distribution, CategoricalDistribution):
        return distribution.choices[0]
    return getattr(distribution, "low")


class LeanSampler(WrappedSampler):
    """``inner`` on the knobs the trial's engine reads; the knobs it ignores at their first choice."""

    def __init__(self, inner: BaseSampler, fixed: Mapping[str, Any] | None = None) -> None:
        self._inner = inner
        self._fixed = dict(fixed or {})

    def ignored(self, trial: FrozenTrial, values: Mapping[str, Any] = {}) -> tuple[str, ...]:
        """The knobs ``trial``'s engine ignores (none while its engine is not known yet)."""
        engine = {**self._fixed, **trial.params, **values}.get("engine")
        return ENGINE_IGNORES.get(engine, ()) if isinstance(engine, str) else ()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        values = self._inner.sample_relative(study, trial, search_space)
        ignored = self.ignored(trial, values)
        return {k: _first(search_space[k]) if k in ignored else v for k, v in values.items()}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        if param_name in self.ignored(trial):
            return _first(param_distribution)
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._inner.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: list[float] | None) -> None:
        self._inner.after_trial(study, trial, state, values)
