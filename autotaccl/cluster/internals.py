"""The Optuna internals cluster/ relies on, in one place: Optuna has no public API for these.

Tested with the Optuna that pyproject.toml pins; a new release must pass tests/cluster before the pin
moves. Each function says which internal it reads or writes and why the public API cannot
(the list: ``docs/internals.md``)."""
from __future__ import annotations

import optuna
from optuna.storages import BaseStorage
from optuna.storages._heartbeat import is_heartbeat_enabled
from optuna.trial import FrozenTrial


def storage(study: optuna.Study) -> BaseStorage:
    return study._storage


def trial_id(trial: FrozenTrial) -> int:
    """The storage's id of ``trial`` (trial numbers count within a study, ids within the storage)."""
    return trial._trial_id


def stale_trial_ids(study: optuna.Study) -> set[int]:
    """Ids of the study's RUNNING trials whose RDB heartbeat is older than the storage's grace period
    (what ``fail_stale_trials`` would fail); empty for storages without heartbeats."""
    backend = study._storage          # RDBStorage, wrapped by Optuna in a caching BaseHeartbeat
    if not is_heartbeat_enabled(backend):
        return set()
    return set(backend._get_stale_trial_ids(study._study_id))


def reseed(sampler: optuna.samplers.BaseSampler, seed: int) -> None:
    """Restart ``sampler``'s random numbers at ``seed``."""
    from optuna.samplers._lazy_random_state import LazyRandomState

    for part in (sampler, getattr(sampler, "_random_sampler", None)):
        if part is not None and hasattr(part, "_rng"):
            part._rng = LazyRandomState(seed)


def stopped(study: optuna.Study) -> bool:
    """Whether the last ``optimize`` call ended because the sampler (or an objective) stopped the study."""
    return study._stop_flag
