"""Restarts after an interruption at a named point (autotaccl/faults.py): real `autotaccl tune` processes
interrupted with SIGINT or SIGKILL, a real Optuna journal and a real MLflow SQLite store. The rerun must
repair what the interruption left and reach what an uninterrupted sweep of the same seed reaches."""
from __future__ import annotations

import signal

import pytest
from optuna.trial import TrialState

from support import assert_like_clean, run_tune, runs, study_trials, sweep_args

# a dozen real sweeps of ~20 s each on 2 cores
pytestmark = pytest.mark.slow

# one case per kind of setup damage (benchmarks/cluster_faults.py interrupts setup too)
@pytest.mark.parametrize("fault", [
    "mlflow.baseline.created:SIGKILL:2",      # ring logged, hierarchical created: a RUNNING baseline
    "setup.parent:SIGKILL",                   # the parent run exists, the study does not know it
    "setup.seed:SIGINT:1",                    # one of the two seeds enqueued
])
def test_setup_interrupted_is_repaired_on_the_next_start(fault, clean_sweep, tmp_path):
    args, out = sweep_args(tmp_path)
    first = run_tune(*args, fault=fault)
    assert first.returncode in (-signal.SIGKILL, 130), first.stderr
    again = run_tune(*args)
    assert again.returncode == 0, again.stderr
    assert_like_clean(out, clean_sweep, tmp_path / "export")
    df = runs(out)
    assert (df["tags.autotaccl.kind"] == "sweep").sum() == 1           # one parent run


# each stage of a trial once, with Ctrl-C and with a kill (the suite's budget: each case is two real sweeps)
@pytest.mark.parametrize("fault", [
    "trial.created:SIGINT:2",            # Ctrl-C as Optuna creates a trial (held until it has its parameters)
    "trial.sampling:SIGKILL:10",         # a worker killed half-way through sampling a trial
    "trial.synthesis:SIGINT:1",          # Ctrl-C while the first seed is synthesized
    "mlflow.trial.created:SIGINT:1",     # ... while its MLflow run is written (a RUNNING run)
    "mlflow.trial.logged:SIGKILL:3",     # killed after its FINISHED run, before Optuna heard of the result
])
def test_an_interrupted_trial_is_redone_and_the_sweep_ends_as_an_uninterrupted_one(fault, clean_sweep, tmp_path):
    args, out = sweep_args(tmp_path)
    first = run_tune(*args, fault=fault)
    assert first.returncode in (-signal.SIGKILL, 130), first.stderr
    if first.returncode == 130:
        assert "Traceback" not in first.stderr and first.stderr.strip() == "autotaccl: interrupted", first.stderr
    cut = [t for t in study_trials(out) if t.state == TrialState.FAIL or t.state == TrialState.RUNNING]
    assert len(cut) == 1                                   # the trial it cut short, and nothing else
    again = run_tune(*args)
    assert again.returncode == 0, again.stderr
    trials = study_trials(out)
    (stopped,) = [t for t in trials if t.number == cut[0].number]
    assert stopped.state == TrialState.FAIL and stopped.user_attrs["interrupted"]
    assert stopped.user_attrs["failure_reason"]           # says why
    (retry,) = [t for t in trials if t.user_attrs.get("retry_of") == stopped.number]
    assert retry.state == TrialState.COMPLETE and set(stopped.params.items()) <= set(retry.params.items())
    assert_like_clean(out, clean_sweep, tmp_path / "export")


def test_a_sweep_resumed_in_steps_samples_what_one_run_does(clean_sweep, tmp_path):
    """Every restart used to re-seed the sampler: a fixed --seed now gives the same trials however the sweep
    is split into runs."""
    args, out = sweep_args(tmp_path)
    for trials in ("2", "3", "5"):
        step = run_tune(*[a if a != "5" else trials for a in args])
        assert step.returncode == 0, step.stderr
    assert_like_clean(out, clean_sweep, tmp_path / "export")
