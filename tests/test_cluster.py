"""Many `autotaccl tune` processes on one study: PostgreSQL + an MLflow server, real processes throughout."""
from __future__ import annotations

import collections
import subprocess

import mlflow
import optuna
from optuna.trial import TrialState

from autotaccl.cluster.heartbeat import open_storage
from autotaccl.tuning.sweep import counted
from cluster_fixtures import mlflow_server, postgres, tune_cmd, unique, write_space  # noqa: F401 (fixtures)


def test_tune_processes_on_postgres_run_exactly_the_requested_trials_once(tmp_path, postgres, mlflow_server):
    space = write_space(tmp_path)
    study = unique("pg-exact")
    procs = [subprocess.Popen(tune_cmd("--space", str(space), "--storage", postgres, "--study", study,
                                       "--tracking-uri", mlflow_server.uri, "--trials", "9", "--sampler", "random",
                                       "--seed", str(i), "--heartbeat", "1", "--out", str(tmp_path / f"host{i}")),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(3)]      # three "hosts": separate processes and run directories, one storage
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    trials = optuna.load_study(study_name=study, storage=open_storage(postgres)).trials
    assert len(trials) == 9 and all(counted(t) for t in trials), [(t.number, t.state) for t in trials]
    assert sorted(t.number for t in trials) == list(range(9))
    seeded = [t for t in trials if "fixed_params" in t.system_attrs]
    assert len(seeded) == 2                  # the default sketch and the space's seed, each run once
    assert len({tuple(sorted(t.params.items())) for t in seeded}) == 2
    assert len({t.user_attrs["worker"] for t in trials}) >= 2
    mlflow.set_tracking_uri(mlflow_server.uri)
    runs = mlflow.search_runs(experiment_names=["pairx2-allgather"])
    trial_runs = runs[(runs["tags.autotaccl.kind"] == "trial") & (runs["tags.optuna.study"] == study)]
    assert sorted(trial_runs["tags.optuna.trial"].astype(int)) == list(range(9))
    assert (runs["tags.autotaccl.kind"] == "sweep").sum() == 1     # one parent run, created by the first process
    states = collections.Counter(t.state for t in trials)
    assert states[TrialState.COMPLETE] == (trial_runs["tags.state"] == "COMPLETE").sum()
