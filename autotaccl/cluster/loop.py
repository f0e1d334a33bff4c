"""The worker loop: exactly ``config.trials`` counted trials across every worker of a study, none run twice.

Each trial is admitted under the study's lock (``locks``): reap dead workers' trials, count the finished
and running ones, and only if that is below the target, ask for a trial (Optuna pops a queued seed or
retry first) and sample its parameters; the lock is released once the parameters are stored, so
synthesis and measurement run in parallel while admissions, queue pops and samplers' views stay
serial. This is exact on every backend (also SQLite, whose queue pop races without it, ecosystem.md
§1.3). A worker with nothing to admit waits while other workers' trials run, in case one dies and its
retry needs a worker; it exits when the study has its trials.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from .. import tracking
from ..errors import InputError
from ..tracking import outbox
from . import heartbeat, locks
from .internals import stopped, storage, trial_id

log = logging.getLogger(__name__)


def run_trials(config, study: optuna.Study, objective, counted: Callable[[FrozenTrial], bool],
               sample: Callable[[Any], Any], n_trials: int | None = None,
               failed_catch: tuple[type[Exception], ...] = (), after_trial: Callable[[], None] | None = None) -> int:
    """Run trials of ``study`` until it has ``config.trials`` counted ones (or ``n_trials`` here, or the
    time-out); ``sample(trial)`` suggests a trial's parameters (called under the admission lock);
    ``failed_catch`` are the objective's own failure exceptions; ``after_trial()`` is called once each
    trial of this worker has finished (progress); a running trial heartbeats every ``config.heartbeat``
    seconds. Returns trials run here."""

    gate = locks.Lock(config.storage, config.out_dir, f"admit:{config.study_name}")
    client = objective.client if hasattr(objective, "client") else tracking.MlflowClient(config.tracking_uri)
    deadline = None if config.timeout is None else time.monotonic() + config.timeout
    beat = config.heartbeat
    poll = min(2.0, heartbeat.beat_seconds(beat))
    ran = 0

    reaped: list[tuple[FrozenTrial, str]] = []      # logged to MLflow outside the lock (it may retry for seconds)

    def flush() -> None:
        while reaped:
            record_failure(client, config, *reaped.pop())

    def admitted(trial: optuna.Trial) -> float:
        trial.set_user_attr("worker", heartbeat.worker_id())
        try:
            sample(trial)            # under the lock: concurrent samplers see each other
        finally:
            gate.release()
        with heartbeat.beating(config.storage, study.study_name, trial.number, beat):
            try:
                return objective(trial)
            except (optuna.TrialPruned, InputError, KeyboardInterrupt, optuna.exceptions.UpdateFinishedTrialError,
                    *failed_catch):
                raise
            except Exception as err:       # anything else fails this trial only, with its reason
                reason = f"unexpected error: {type(err).__name__}: {err}"
                log.exception("trial %d: %s", trial.number, reason)
                trial.set_user_attr("failure_reason", reason[:2000])
                record_failure(client, config, trial, reason)
                raise _Failed(reason) from err

    while n_trials is None or ran < n_trials:
        flush()
        if deadline is not None and time.monotonic() >= deadline:
            break
        gate.acquire()
        try:
            heartbeat.reap(study, config.storage, lambda t, why: reaped.append((t, why)),
                           lambda t: sample(_Completer(study, t)), beat)
            trials = study.get_trials(deepcopy=False)
            retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
            done = sum(1 for t in trials if counted(t) and t.number not in retried)
            running = sum(1 for t in trials if t.state == TrialState.RUNNING)
            if done >= config.trials:
                break
            if done + running >= config.trials:      # wait: a running trial may die and need a retry
                gate.release()
                time.sleep(poll)
                continue
            try:
                study.optimize(admitted, n_trials=1, catch=(*failed_catch, _Failed), gc_after_trial=False)
            except optuna.exceptions.UpdateFinishedTrialError as err:
                log.warning("a trial of this worker was failed by another worker's reaper meanwhile: %s", err)
            ran += 1
            if after_trial is not None:
                after_trial()
            if stopped(study):       # the sampler stopped the study (BruteForce: space exhausted)
                break
        finally:
            gate.release()
    flush()
    return ran


class _Completer:
    """Stands in for a dead worker's trial in ``space.sample``: keeps the parameters it sampled and stores the
    first choice / low bound for the rest, so samplers that enumerate the space (BruteForce) never meet a
    half-sampled trial (a worker killed between two ``suggest`` calls)."""

    def __init__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.study, self.trial = study, trial

    def _value(self, name: str, distribution, default):
        if name in self.trial.params:
            return self.trial.params[name]
        storage(self.study).set_trial_param(trial_id(self.trial), name, distribution.to_internal_repr(default),
                                            distribution)
        return default

    def suggest_categorical(self, name, choices):
        return self._value(name, CategoricalDistribution(choices), choices[0])

    def suggest_int(self, name, low, high, step=1, log=False):
        return self._value(name, IntDistribution(low, high, log=log, step=step), low)

    def suggest_float(self, name, low, high, step=None, log=False):
        return self._value(name, FloatDistribution(low, high, log=log, step=step), low)


class _Failed(RuntimeError):
    """An unexpected error in the objective, already recorded; fails the trial, not the worker."""


def record_failure(client, config, trial: FrozenTrial | optuna.Trial, reason: str) -> None:
    """The MLflow run of a trial that failed outside the objective's own accounting."""
    outbox.log_run(client, config.out_dir, config.experiment_id,
                   tracking.trial_run_name(trial.number, trial.params),
                   parent_run_id=config.parent_run_id, params={k: v for k, v in trial.params.items()},
                   tags={tracking.KIND: "trial", "state": "FAIL", "optuna.trial": trial.number,
                         "optuna.study": config.study_name, "collective": config.collective,
                         "failure_reason": reason[:5000], "verified": "false"},
                   state="FAIL")
