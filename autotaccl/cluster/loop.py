"""The worker loop: exactly ``config.trials`` counted trials across every worker of a study, none run twice.

Each trial is admitted under the study's lock (reap, count, ask, sample), so admissions are serial and
exact on every backend, while synthesis and measurement run in parallel. Interruptions (Ctrl-C, a full
disk) never cost a configuration: the trial is marked ``interrupted``, not counted, and retried with its
parameters. How admission and interruption work: ``docs/internals.md``."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from .. import faults, tracking
from ..errors import EnvironmentFailure, InputError, environment_problem, interrupted
from ..interrupts import HeldInterrupt
from ..tracking import outbox
from . import heartbeat, locks
from .internals import reseed, stopped, storage, trial_id

log = logging.getLogger(__name__)


def run_trials(config, study: optuna.Study, objective, counted: Callable[[FrozenTrial], bool],
               sample: Callable[[Any], Any], n_trials: int | None = None,
               failed_catch: tuple[type[Exception], ...] = (), after_trial: Callable[[], None] | None = None) -> int:
    """Run trials of ``study`` until it has ``config.trials`` counted ones (or ``n_trials`` here, or the
    time-out); ``sample(trial)`` suggests a trial's parameters (called under the admission lock);
    ``failed_catch`` are the objective's own failure exceptions; ``after_trial()`` is called once each
    trial of this worker has finished (progress); a running trial heartbeats every ``config.heartbeat``
    seconds. Returns trials run here. Ctrl-C and environment failures stop it (KeyboardInterrupt,
    EnvironmentFailure) once the trial they cut short is marked ``interrupted``."""

    gate = locks.Lock(config.storage, config.out_dir, f"admit:{config.study_name}")
    held = HeldInterrupt()       # a trial Optuna created always gets its worker and parameters before it stops
    client = objective.client if hasattr(objective, "client") else tracking.MlflowClient(config.tracking_uri)
    deadline = None if config.timeout is None else time.monotonic() + config.timeout
    beat = config.heartbeat
    poll = min(2.0, heartbeat.beat_seconds(beat))
    ran = 0

    reaped: list[tuple[FrozenTrial, str]] = []      # logged to MLflow outside the lock (it may retry for seconds)

    def flush() -> None:
        while reaped:
            trial, why = reaped.pop()
            record_trial(client, config, trial, "FAIL", why)

    def seeded(number: int) -> None:
        """The sampler draws trial ``number``'s own stream (with a sweep seed)."""
        if config.seed is not None:
            reseed(study.sampler, sample_seed(config.seed, sample_index(study, number)))

    def complete(trial: FrozenTrial) -> None:
        """A dead worker's half-sampled trial gets the values its worker would have drawn."""
        seeded(trial.number)
        sample(_Completer(study, trial))

    def admitted(trial: optuna.Trial) -> float:
        try:
            try:
                faults.point("trial.created")
                trial.set_user_attr("worker", heartbeat.worker_id())
                seeded(trial.number)
                sample(trial)                # under the lock: concurrent samplers see each other
            finally:
                gate.release()
                held.end()                   # a Ctrl-C since the trial was created lands here
            with heartbeat.beating(config.storage, study.study_name, trial.number, beat):
                return objective(trial)
        except (optuna.TrialPruned, optuna.exceptions.UpdateFinishedTrialError, *failed_catch):
            raise
        except InputError as err:          # bad runner options: the sweep stops, the configuration is not to blame
            _stop(client, config, trial, f"stopped by bad input ({err})")
            raise
        except (KeyboardInterrupt, Exception) as err:
            if interrupted(err):            # also an error a library raised while it handled Ctrl-C
                _stop(client, config, trial, "interrupted (SIGINT, Ctrl-C)")
                raise
            problem = environment_problem(err)
            if problem:
                _stop(client, config, trial, f"environment failure: {problem}")
                raise EnvironmentFailure(f"{problem} (trial {trial.number} is not counted; it runs again when the "
                                         f"sweep is started again)") from err
            reason = f"unexpected error: {type(err).__name__}: {err}"       # fails this trial only, with its reason
            log.exception("trial %d: %s", trial.number, reason)
            trial.set_user_attr("failure_reason", reason[:2000])
            record_trial(client, config, trial, "FAIL", reason)
            raise _Failed(reason) from err

    while n_trials is None or ran < n_trials:
        flush()
        if deadline is not None and time.monotonic() >= deadline:
            break
        gate.acquire()
        try:
            heartbeat.reap(study, config.storage, lambda t, why: reaped.append((t, why)), complete, beat)
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
                held.begin()        # until the new trial's parameters are stored (ended in ``admitted``)
                study.optimize(admitted, n_trials=1, catch=(*failed_catch, _Failed), gc_after_trial=False)
            except (optuna.exceptions.UpdateFinishedTrialError, ValueError) as err:
                # a reaper failed this worker's trial meanwhile: Optuna's tell says so with a ValueError
                if isinstance(err, ValueError) and not str(err).startswith("Cannot tell a "):
                    raise
                log.warning("a trial of this worker was failed by another worker's reaper meanwhile: %s", err)
            ran += 1
            if after_trial is not None:
                after_trial()
            if stopped(study):       # the sampler stopped the study (BruteForce: space exhausted)
                break
        finally:
            gate.release()
            held.end()              # (a no-op once ``admitted`` ended it; may raise, so after the release)
    flush()
    return ran


class _OwnFailures(logging.Filter):
    """Drops Optuna's "Trial N failed ..." warnings (with the traceback of a Ctrl-C, or of the objective's
    own failure): the loop records every failure with its reason (Optuna user attr, MLflow tag, log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Trial ")


_optimize_log = logging.getLogger("optuna.study._optimize")
if not any(isinstance(f, _OwnFailures) for f in _optimize_log.filters):
    _optimize_log.addFilter(_OwnFailures())


def sample_index(study: optuna.Study, number: int) -> int:
    """Trial ``number``'s place among the study's uninterrupted trials (what it is in a sweep never cut short)."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.number < number and not t.user_attrs.get("interrupted"))


def sample_seed(seed: int, index: int) -> int:
    """The seed of the ``index``-th trial's sampling in a sweep seeded with ``seed``."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def _stop(client, config, trial: optuna.Trial, why: str) -> None:
    """Mark a trial this worker stopped short as interrupted (not counted; retried) and say so in MLflow."""
    reason = f"{why}; the trial runs again when the sweep is started again"
    trial.set_user_attr("interrupted", "stopped")
    trial.set_user_attr("failure_reason", reason)
    try:
        record_trial(client, config, trial, "FAIL", reason, patient=False)
    except Exception as err:      # the disk or server that stopped it: the next start logs the run
        log.warning("trial %d: MLflow run not logged (%s); the next `autotaccl tune` logs it", trial.number,
                    str(err).splitlines()[0][:200])


class _Completer:
    """Stands in for a dead worker's trial in ``space.sample``: keeps the parameters it sampled and draws the
    rest from the sampler (a queued trial's from its fixed parameters), so samplers that enumerate the space
    (BruteForce) never meet a half-sampled trial (a worker killed between two ``suggest`` calls)."""

    def __init__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.study, self.trial = study, trial

    def _value(self, name: str, distribution):
        fixed = self.trial.system_attrs.get("fixed_params", {})
        # drawn even for a stored parameter: the sampler's stream then reaches the missing ones where the
        # dead worker's would have
        value = fixed[name] if name in fixed else self.study.sampler.sample_independent(
            self.study, self.trial, name, distribution)
        if name in self.trial.params:
            return self.trial.params[name]
        backend = storage(self.study)
        backend.set_trial_param(trial_id(self.trial), name, distribution.to_internal_repr(value), distribution)
        self.trial = backend.get_trial(trial_id(self.trial))
        return value

    def suggest_categorical(self, name, choices):
        return self._value(name, CategoricalDistribution(choices))

    def suggest_int(self, name, low, high, step=1, log=False):
        return self._value(name, IntDistribution(low, high, log=log, step=step))

    def suggest_float(self, name, low, high, step=None, log=False):
        return self._value(name, FloatDistribution(low, high, log=log, step=step))


class _Failed(RuntimeError):
    """An unexpected error in the objective, already recorded; fails the trial, not the worker."""


def record_trial(client, config, trial: FrozenTrial | optuna.Trial, state: str, reason: str,
                 patient: bool = True, missing_only: bool = False) -> None:
    """The MLflow run of a trial that ended outside the objective's own accounting (``state`` FAIL or
    PRUNED, with its reason): it replaces any run the trial has (``outbox.record_key``), or with
    ``missing_only`` is logged only if the trial has none. Workers record under the study's record lock,
    so a reaper and a restarted worker's ``reconcile`` never both log one trial."""
    tags = {tracking.KIND: "trial", "state": state, "optuna.trial": trial.number, "optuna.study": config.study_name,
            "collective": config.collective, "verified": "false",
            "failure_reason" if state == "FAIL" else "prune_reason": reason[:5000]}
    if trial.user_attrs.get("interrupted"):
        tags["interrupted"] = "true"
    key = outbox.trial_key(trial.number)
    with locks.Lock(config.storage, config.out_dir, f"records:{config.study_name}"):
        if missing_only and outbox.has_run(client, config.experiment_id, outbox.record_key(config.parent_run_id, key)):
            return
        outbox.log_run(client, config.out_dir, config.experiment_id, tracking.trial_run_name(trial.number, trial.params),
                       patient=patient, key=key, parent_run_id=config.parent_run_id, params=dict(trial.params),
                       tags=tags, state=state)
