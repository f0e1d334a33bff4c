"""Repeats: TPE often proposes a configuration it has already evaluated (ecosystem.md §1.4: 25 unique of 40).

A repeat costs little (the synthesis cache answers it) but teaches the sampler nothing, and TPE can
circle one configuration for hundreds of trials. Repeating the incumbent now and then is exploitation;
when most recent trials were repeats the sampler is stuck, and an unseen configuration drawn at random
from the space is enqueued so the next trial explores.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

import optuna
from optuna.trial import TrialState

from .space import SearchSpace, sample

log = logging.getLogger(__name__)
_DONE = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def _key(params: Mapping[str, Any]) -> tuple:
    return tuple(sorted(params.items()))


def _finished(study: optuna.Study) -> list:
    """Finished trials that ran (an interrupted one did not: its retry runs it)."""
    return [t for t in study.get_trials(deepcopy=False, states=_DONE) if not t.user_attrs.get("interrupted")]


def is_repeat(study: optuna.Study, params: Mapping[str, Any], space: SearchSpace) -> bool:
    """Whether a finished trial already ran exactly these sampled parameters."""
    own = _key({k: v for k, v in params.items() if k not in space.fixed})
    return any(_key(t.params) == own for t in _finished(study))


def stuck(study: optuna.Study, window: int = 5, repeats: int = 3) -> bool:
    """At least ``repeats`` of the last ``window`` finished trials repeated an earlier configuration."""
    done = _finished(study)
    seen: set[tuple] = set()
    flags = []
    for t in done:
        key = _key(t.params)
        flags.append(key in seen)
        seen.add(key)
    return sum(flags[-window:]) >= repeats


def enqueue_unseen(study: optuna.Study, space: SearchSpace, seed: int | None = None, attempts: int = 64) -> dict | None:
    """Enqueue one configuration no trial has run or queued yet (None if none was found)."""
    seen = {_key(t.params) for t in study.get_trials(deepcopy=False)}
    scratch = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(attempts):
        trial = scratch.ask()
        params = {k: v for k, v in sample(trial, space).items() if k not in space.fixed}
        scratch.tell(trial, 0.0)
        if _key(params) not in seen:
            study.enqueue_trial(params, skip_if_exists=True)
            log.info("repeat configuration: enqueued unseen %s", params)
            return params
    return None
