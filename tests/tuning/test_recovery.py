"""Restarts after an interruption at a named point (autotaccl/faults.py): real `autotaccl tune` processes
interrupted with SIGINT or SIGKILL, a real Optuna journal and a real MLflow SQLite store. The rerun must
repair what the interruption left and reach what an uninterrupted sweep of the same seed reaches."""
from __future__ import annotations

import signal

import optuna
import pytest
from optuna.trial import TrialState

from autotaccl.cluster.heartbeat import open_storage
from autotaccl.tuning.sweep import counted
from support import NDV2_SPACE, exported, fresh_store, run_tune, runs, write_space

# a dozen real sweeps of ~20 s each on 2 cores
pytestmark = pytest.mark.slow

STUDY = "ndv2x2-allgather"
ARGS = ("--trials", "5", "--sampler", "tpe", "--seed", "3")


def _trials(out):
    return optuna.load_study(study_name=STUDY, storage=open_storage(str(out / "optuna.journal"))).trials


def _sweep(tmp_path, name: str):
    space = write_space(tmp_path / "space", NDV2_SPACE)
    out = tmp_path / name
    fresh_store(out)
    return ["--space", str(space), *ARGS, "--out", str(out)], out


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The uninterrupted sweep every interrupted one must end up equal to."""
    tmp = tmp_path_factory.mktemp("clean")
    args, out = _sweep(tmp, "runs")
    done = run_tune(*args)
    assert done.returncode == 0, done.stderr
    return out, exported(f"sqlite:///{out / 'mlflow.db'}", tmp / "export"), _trials(out)


def _configs(trials):
    return sorted(tuple(sorted(t.params.items())) for t in trials if counted(t))


def _assert_like_clean(out, clean, tmp_path):
    clean_out, clean_export, clean_trials = clean
    trials = _trials(out)
    assert sum(counted(t) for t in trials) == 5
    assert all(t.state.is_finished() for t in trials)
    assert _configs(trials) == _configs(clean_trials)          # the same configurations, seeds included
    df = runs(out)
    trial_runs = df[df["tags.autotaccl.kind"] == "trial"]
    assert sorted(trial_runs["tags.optuna.trial"].astype(int)) == [t.number for t in trials]   # one run per trial
    states = dict(zip(trial_runs["tags.optuna.trial"].astype(int), zip(trial_runs["tags.state"], trial_runs["status"])))
    status = {"COMPLETE": "FINISHED", "FAIL": "FAILED", "PRUNED": "KILLED"}
    assert states == {t.number: (t.state.name, status[t.state.name]) for t in trials}      # MLflow agrees with Optuna
    assert not (df["status"] == "RUNNING").any() or (df[df["status"] == "RUNNING"]["tags.autotaccl.kind"] == "sweep").all()
    bases = df[df["tags.autotaccl.kind"] == "baseline"]
    assert sorted(bases["tags.baseline"]) == ["direct", "hierarchical", "ring"]
    assert (bases["status"] == "FINISHED").all()
    assert exported(f"sqlite:///{out / 'mlflow.db'}", tmp_path / "export") == clean_export


@pytest.mark.parametrize("fault", [
    "mlflow.baseline.created:SIGKILL:2",      # ring logged, hierarchical created: a RUNNING baseline
    "mlflow.baseline.logged:SIGINT:1",        # Ctrl-C once the first baseline is logged
    "setup.parent:SIGKILL",                   # the parent run exists, the study does not know it
    "setup.seed:SIGINT:1",                    # one of the two seeds enqueued
])
def test_setup_interrupted_is_repaired_on_the_next_start(fault, clean, tmp_path):
    args, out = _sweep(tmp_path, "runs")
    first = run_tune(*args, fault=fault)
    assert first.returncode in (-signal.SIGKILL, 130), first.stderr
    again = run_tune(*args)
    assert again.returncode == 0, again.stderr
    _assert_like_clean(out, clean, tmp_path)
    df = runs(out)
    assert (df["tags.autotaccl.kind"] == "sweep").sum() == 1           # one parent run


@pytest.mark.parametrize("fault", [
    "trial.sampling:SIGINT:2",           # Ctrl-C between two parameters of the first seed
    "trial.sampling:SIGINT:10",          # ... of the first sampled trial
    "trial.sampling:SIGKILL:10",         # a worker killed half-way through sampling a trial
    "trial.synthesis:SIGINT:1",          # Ctrl-C while the first seed is synthesized
    "mlflow.trial.created:SIGINT:1",     # ... while its MLflow run is written (a RUNNING run)
    "mlflow.trial.created:SIGKILL:3",    # killed there
    "mlflow.trial.logged:SIGKILL:3",     # killed after its FINISHED run, before Optuna heard of the result
    "mlflow.trial.logged:SIGINT:2",
])
def test_an_interrupted_trial_is_redone_and_the_sweep_ends_as_an_uninterrupted_one(fault, clean, tmp_path):
    args, out = _sweep(tmp_path, "runs")
    first = run_tune(*args, fault=fault)
    assert first.returncode in (-signal.SIGKILL, 130), first.stderr
    if first.returncode == 130:
        assert "Traceback" not in first.stderr and first.stderr.strip() == "autotaccl: interrupted", first.stderr
    cut = [t for t in _trials(out) if t.state == TrialState.FAIL or t.state == TrialState.RUNNING]
    assert len(cut) == 1                                   # the trial it cut short, and nothing else
    again = run_tune(*args)
    assert again.returncode == 0, again.stderr
    trials = _trials(out)
    (stopped,) = [t for t in trials if t.number == cut[0].number]
    assert stopped.state == TrialState.FAIL and stopped.user_attrs["interrupted"]
    assert stopped.user_attrs["failure_reason"]           # says why
    (retry,) = [t for t in trials if t.user_attrs.get("retry_of") == stopped.number]
    assert retry.state == TrialState.COMPLETE and set(stopped.params.items()) <= set(retry.params.items())
    _assert_like_clean(out, clean, tmp_path)


def test_a_sweep_resumed_in_steps_samples_what_one_run_does(clean, tmp_path):
    """Every restart used to re-seed the sampler: a fixed --seed now gives the same trials however the sweep
    is split into runs."""
    args, out = _sweep(tmp_path, "runs")
    for trials in ("2", "3", "5"):
        step = run_tune(*[a if a != "5" else trials for a in args])
        assert step.returncode == 0, step.stderr
    _assert_like_clean(out, clean, tmp_path)
