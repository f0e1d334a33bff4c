"""Two fidelities: every trial is simulated; after the first half (simulated only) the simulator's best, and
later candidates that beat them, are measured by real MPI ranks.

A 2 x 2-GPU profile keeps the mpi runner at 4 real ranks (mpiexec from the venv's MPICH wheel).
"""
from __future__ import annotations

import re

import mlflow
import optuna
import pandas as pd
import pytest
import yaml
from optuna.trial import TrialState

from autotaccl.tuning.sweep import TuneRequest, tune
from support import PAIR_HARDWARE, PAIR_SPACE, fresh_store

pytestmark = pytest.mark.mpi


def test_runner_measures_only_candidates_that_could_improve_a_size(tmp_path, caplog):
    (tmp_path / "pair.yaml").write_text(yaml.safe_dump(PAIR_HARDWARE))
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(PAIR_SPACE, sort_keys=False))
    out = tmp_path / "runs"
    fresh_store(out)
    caplog.set_level("INFO", logger="autotaccl.tuning.objective")
    (summary,) = tune(TuneRequest(space=str(space), trials=6, out=str(out), runner="mpi", margin=0.0,
                                  runner_options={"timeout": 120}, sampler="random", seed=1, progress=False))
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal")))
    trials = optuna.load_study(study_name="pairx2-allgather", storage=storage).trials
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert complete and pruned, [t.state for t in trials]
    best = [float("inf")] * 2                # per size: the best simulated time among the trials finished so far
    keys = set()
    for t in sorted(complete + pruned, key=lambda t: t.number):
        sim = t.user_attrs["sim_times"]
        if t.number < 3:                      # explore 0.5 of 6 trials: simulated only
            assert t.state == TrialState.PRUNED and "exploring" in t.user_attrs["prune_reason"]
        elif t.state == TrialState.PRUNED:    # pruned: no size where it simulates faster than the ones before
            assert "not measured with the mpi runner" in t.user_attrs["prune_reason"]
            assert not t.user_attrs.get("shortlist")
            assert t.user_attrs["cache_key"] in keys or all(s >= b for s, b in zip(sim, best)), (sim, best)
        elif "same_as" in t.user_attrs:       # an algorithm measured already: that measurement, not a new one
            same = trials[t.user_attrs["same_as"]]
            assert t.user_attrs["cache_key"] == same.user_attrs["cache_key"] and t.value == same.value
            assert "measure_window" not in t.user_attrs
        else:
            assert t.user_attrs["fidelity"] == "mpi" and t.user_attrs["cache_key"] not in keys
            why = t.user_attrs["measured_because"]        # shortlisted, or ahead at some size within its margin
            room = float(re.search(r"margin ([\d.]+)%", why).group(1)) / 100 if "margin" in why else 0.0
            assert t.user_attrs.get("shortlist") or any(s < b * (1 + room) for s, b in zip(sim, best)), (why, sim)
            keys.add(t.user_attrs["cache_key"])
        best = [min(s, b) for s, b in zip(sim, best)]
    assert any(t.user_attrs.get("shortlist") for t in complete)     # the simulator's best were measured
    ranked = [t for t in complete if "sim_rank_agreement" in t.user_attrs]
    measured = [t for t in complete if "same_as" not in t.user_attrs]
    assert ranked and len(ranked) == len(measured) - 1     # every measurement after the first checks the ranking
    assert all(0 <= t.user_attrs["sim_rank_agreement"] <= 1 for t in ranked)
    logged = [r.getMessage() for r in caplog.records if "measured candidates as the mpi runner does" in r.getMessage()]
    assert len(logged) == len(ranked), logged
    mlflow.set_tracking_uri(f"sqlite:///{out / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["pairx2-allgather"])
    tr = runs[runs["tags.autotaccl.kind"] == "trial"]
    assert (tr["tags.state"] == "PRUNED").sum() == len(pruned)
    assert tr.loc[tr["tags.state"] == "PRUNED", "tags.prune_reason"].notna().all()
    twins = tr[tr["tags.same_as"].notna()] if "tags.same_as" in tr else tr.iloc[:0]
    assert sorted(twins["tags.optuna.trial"].astype(int)) == sorted(t.number for t in complete if "same_as" in t.user_attrs)
    first = tr[tr["tags.optuna.trial"] == str(measured[0].number)].run_id.iloc[0]
    raw = mlflow.MlflowClient().download_artifacts(first, "mpi-raw.csv", str(tmp_path))
    frame = pd.read_csv(raw)
    assert (frame["wrong"] == 0).all() and set(frame["inplace"]) == {True, False}
    base = runs[runs["tags.autotaccl.kind"] == "baseline"]
    assert (base["params.runner"] == "mpi").all()     # baselines measured by the same runner
