"""Two fidelities: every trial is simulated, only candidates near the best are measured by real MPI ranks.

A 2 x 2-GPU profile keeps the mpi runner at 4 real ranks (mpiexec from the venv's MPICH wheel).
"""
from __future__ import annotations

import mlflow
import optuna
import pandas as pd
import pytest
import yaml
from optuna.trial import TrialState

from autotaccl.tuning.sweep import TuneRequest, tune
from support import PAIR_HARDWARE, PAIR_SPACE, fresh_store

pytestmark = pytest.mark.mpi


def test_runner_measures_only_candidates_near_the_best(tmp_path):
    (tmp_path / "pair.yaml").write_text(yaml.safe_dump(PAIR_HARDWARE))
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(PAIR_SPACE, sort_keys=False))
    out = tmp_path / "runs"
    fresh_store(out)
    (summary,) = tune(TuneRequest(space=str(space), trials=5, out=str(out), runner="mpi", margin=0.0,
                                  runner_options={"timeout": 120}, sampler="random", seed=1, progress=False))
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal")))
    trials = optuna.load_study(study_name="pairx2-allgather", storage=storage).trials
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert complete and pruned, [t.state for t in trials]
    best_sim = float("inf")
    for t in sorted(complete + pruned, key=lambda t: t.number):
        if t.state == TrialState.PRUNED:      # pruned: its simulated score was worse than the best measured one
            assert "not measured with the mpi runner" in t.user_attrs["prune_reason"]
            assert t.user_attrs["sim_score"] > best_sim
        else:
            assert t.user_attrs["fidelity"] == "mpi"
            best_sim = min(best_sim, t.user_attrs["sim_score"])
    mlflow.set_tracking_uri(f"sqlite:///{out / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["pairx2-allgather"])
    tr = runs[runs["tags.autotaccl.kind"] == "trial"]
    assert (tr["tags.state"] == "PRUNED").sum() == len(pruned)
    assert tr.loc[tr["tags.state"] == "PRUNED", "tags.prune_reason"].notna().all()
    measured = tr[tr["tags.state"] == "COMPLETE"].run_id.iloc[0]
    raw = mlflow.MlflowClient().download_artifacts(measured, "mpi-raw.csv", str(tmp_path))
    frame = pd.read_csv(raw)
    assert (frame["wrong"] == 0).all() and set(frame["inplace"]) == {True, False}
    base = runs[runs["tags.autotaccl.kind"] == "baseline"]
    assert (base["params.runner"] == "mpi").all()     # baselines measured by the same runner
