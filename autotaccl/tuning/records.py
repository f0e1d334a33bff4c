"""A sweep's MLflow records, made to agree with its Optuna study on every start.

An interruption can leave MLflow in any state; each function looks at what is there and does only what is
missing, so running it again changes nothing: ``sweep_run`` (the parent run, by study uid),
``log_baselines`` (one FINISHED run per baseline) and ``reconcile`` (one run per finished trial, in its
Optuna state, rebuilt from the trial's record where lost; a journal that lost trials MLflow has runs
of is refused)."""
from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping

import optuna
from mlflow.exceptions import MlflowException
from optuna.trial import TrialState

from .. import tracking
from ..cluster.loop import record_trial
from ..errors import InputError
from ..tracking import outbox
from .objective import SweepConfig
from .reference import Reference
from .study import PARENT, UID

log = logging.getLogger(__name__)

STUDY_UID = "autotaccl.study_uid"        # tag of the parent run: the study it belongs to


def sweep_run(client, experiment_id: str, study: optuna.Study, params: Mapping[str, Any],
              tags: Mapping[str, str]) -> str:
    """The id of the study's parent run (marked RUNNING again, ``tags`` set again: a moved run directory's
    ``optuna.storage``), created if it has none."""
    from mlflow.entities import RunTag

    from .. import faults

    def resumed(run_id: str) -> str:
        client.update_run(run_id, status="RUNNING")
        client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])
        return run_id

    parent = study.user_attrs.get(PARENT)
    if parent and _active(client, parent):
        return resumed(parent)
    uid = study.user_attrs[UID]
    found = client.search_runs([experiment_id], f"tags.`{STUDY_UID}` = '{uid}' and tags.`{tracking.KIND}` = 'sweep'",
                               order_by=["attributes.start_time ASC"], max_results=1)
    if found:                       # created by a start cut short before the study knew it
        parent = resumed(found[0].info.run_id)
    else:
        parent = tracking.start_sweep_run(client, experiment_id, params["name"], params=params["params"],
                                          tags={**tags, STUDY_UID: uid})
    faults.point("setup.parent")
    study.set_user_attr(PARENT, parent)
    return parent


def _active(client, run_id: str) -> bool:
    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except MlflowException as err:
        if err.error_code == "RESOURCE_DOES_NOT_EXIST":   # another tracking store than last time
            return False
        raise


def log_baselines(client, out: Path, experiment_id: str, parent: str, ref: Reference, space, collective: str) -> None:
    """Log each baseline of ``ref`` that has no FINISHED run with these times at every sweep size yet."""
    from ..model.algorithm import to_json
    from ..model.collectives import make_collective

    runs = tracking.all_runs(client, experiment_id, f"tags.`mlflow.parentRunId` = '{parent}' and "
                                                    f"tags.`{tracking.KIND}` = 'baseline'")
    done = {r.data.tags.get("baseline") for r in runs if r.info.status == "FINISHED" and _same(r, ref)}
    coll = make_collective(collective, space.profile.gpus_per_node * space.nodes)
    if ref.nccl_times and not _nccl_logged(client, experiment_id, parent, ref):
        # stock NCCL, predicted: compared with, never a candidate (not verified)
        rows = _rows(ref, ref.nccl_times, coll.busbw_factor)
        choices = {f"nccl.{s}": f"{a}/{p}/{c}" for s, (a, p, c) in zip(ref.sizes, ref.nccl_choices)}
        outbox.log_run(client, out, experiment_id, "nccl-model", parent_run_id=parent,
                       params={"collective": collective, "target": space.target_name, "model": "nccl-model"},
                       metrics=tracking.size_metrics(rows), curves=tracking.size_curves(rows),
                       tags={tracking.KIND: "nccl", "collective": collective, "target": space.target_name,
                             "verified": "false", "state": "COMPLETE", **choices})
    for name, times in ref.times.items():
        if name in done:
            continue
        rows = _rows(ref, times, coll.busbw_factor)
        metrics = tracking.size_metrics(rows)
        metrics.update({f"bound_busbw_GBps.{s}": b * coll.busbw_factor for s, b in zip(ref.sizes, ref.bound_algbw)})
        how = {f"sim.{s}": f"{p}/{c}x{i}" for s, (p, c, i) in zip(ref.sizes, ref.sim_runs.get(name, ()))}
        outbox.log_run(client, out, experiment_id, f"baseline-{name}", parent_run_id=parent,
                       params={"baseline": name, "collective": collective, "target": space.target_name,
                               "runner": ref.runner, "protocol": "Simple", "instances": 1},
                       metrics=metrics, curves=tracking.size_curves(rows),
                       tags={tracking.KIND: "baseline", "baseline": name, "collective": collective,
                             "target": space.target_name, "verified": "true", "state": "COMPLETE", **how},
                       artifacts={"algorithm.json": json.dumps(to_json(ref.algorithm(name)))})


def _rows(ref: Reference, times, busbw_factor: float) -> list[dict]:
    """Per-size result rows of ``times`` (one per sweep size) against the reference's bound."""
    return [{"size": s, "time_us": t, "algbw": s / t / 1e3, "busbw": s / t / 1e3 * busbw_factor,
             "bound_pct": 100 * s / t / 1e3 / b} for s, t, b in zip(ref.sizes, times, ref.bound_algbw)]


def _nccl_logged(client, experiment_id: str, parent: str, ref: Reference) -> bool:
    """The sweep already has a FINISHED ``nccl-model`` run with the reference's predictions at every size."""
    runs = tracking.all_runs(client, experiment_id, f"tags.`mlflow.parentRunId` = '{parent}' and "
                                                    f"tags.`{tracking.KIND}` = 'nccl'")
    return any(r.info.status == "FINISHED" and _holds(r, ref.sizes, ref.nccl_times) for r in runs)


def _same(run, ref: Reference) -> bool:
    """The baseline run holds the reference's times (same runner) at every sweep size."""
    times = ref.times.get(run.data.tags.get("baseline"))
    return times is not None and run.data.params.get("runner") == ref.runner and _holds(run, ref.sizes, times)


def _holds(run, sizes, times) -> bool:
    """The run's per-size ``time_us`` metrics are ``times`` at ``sizes``."""
    metrics = run.data.metrics
    return all(math.isclose(metrics.get(f"time_us.{s}", math.nan), t, rel_tol=1e-9) for s, t in zip(sizes, times))


def reconcile(client, config: SweepConfig, study: optuna.Study) -> None:
    """Make the sweep's trial runs agree with the study (see the module docstring)."""
    runs = tracking.all_runs(client, config.experiment_id, f"tags.`mlflow.parentRunId` = '{config.parent_run_id}' "
                                                           f"and tags.`{tracking.KIND}` = 'trial'")
    by_number: dict[int, list] = defaultdict(list)
    for run in runs:
        if (n := outbox.key_number(run.data.tags.get(outbox.RECORD, "").rpartition("/")[2])) is not None:
            by_number[n].append(run)
    pending = {n for r in outbox.pending_records(config.out_dir) if r.get("parent_run_id") == config.parent_run_id
               and (n := outbox.key_number(r["record"].rpartition("/")[2])) is not None}
    trials = study.get_trials(deepcopy=False)
    lost = sorted(n for n in {*by_number, *pending} if n >= len(trials))
    if lost:
        raise InputError(config.storage if "://" not in config.storage else config.storage.split("@")[-1],
                         f"study {config.study_name}", f"every trial MLflow has a run of (it has trial {lost[-1]}, the "
                         f"journal only {len(trials)} trials: it was truncated or replaced). Restore it, or start "
                         f"afresh with a new --study or --out")
    objective, rebuilt = None, 0
    for trial in trials:
        if not trial.state.is_finished():
            continue              # running (here or on another host) or queued: its worker logs it
        mine = by_number.get(trial.number, [])
        agree = [r for r in mine if r.info.status == tracking.STATUS[trial.state.name]
                 and r.data.tags.get("state") == trial.state.name]
        for run in mine:
            if not agree or run.info.run_id != agree[0].info.run_id:
                client.delete_run(run.info.run_id)
                log.warning("%s: deleted run %s of trial %d (%s, but Optuna has it %s)", config.study_name,
                            run.info.run_id, trial.number, run.info.status, trial.state.name)
        if agree or trial.number in pending or _pending_elsewhere(trial, config):
            continue
        if trial.state == TrialState.COMPLETE and "results" in trial.user_attrs:
            if objective is None:
                from .objective import Objective

                objective = Objective(config)
            objective.relog(trial)
            rebuilt += 1
            continue
        reason = trial.user_attrs.get("failure_reason") or trial.user_attrs.get("prune_reason") or \
            "failed without a recorded reason"
        record_trial(client, config, trial, trial.state.name, reason, missing_only=True)   # a reaper may log it now
    if rebuilt:
        log.warning("%s: %d COMPLETE trial(s) had no MLflow run; logged again from the Optuna study",
                    config.study_name, rebuilt)



def _pending_elsewhere(trial, config: SweepConfig) -> bool:
    """The trial's run waits in another run directory's outbox (another host's, replayed there)."""
    where = trial.user_attrs.get("mlflow_pending")
    return bool(where) and where != str(config.out_dir)
