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
