"""Load: K `autotaccl tune` processes (as on K hosts) share one PostgreSQL study and one MLflow server.

Target: 8 workers x 200 trials in total (sim runner, the 15-configuration 2x2-GPU test space): all 200
trials counted exactly once, trial numbers 0..199, one MLflow run per trial, no overshoot. Printed side
by side with 1 worker on a shorter sweep (trials/s and the speed-up). Needs PostgreSQL
(AUTOTACCL_TEST_POSTGRES, else `.ci/postgres start` is run).

    .venv/bin/python benchmarks/cluster_load.py [--workers 8] [--trials 200] [--single-trials 40]
"""
from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlflow
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from autotaccl.cluster.heartbeat import open_storage  # noqa: E402
from autotaccl.tuning.sweep import counted  # noqa: E402
from support import PAIR_SPACE, MlflowServer, postgres_url, tune_cmd, unique, write_space  # noqa: E402


def sweep(tmp: Path, server: MlflowServer, storage: str, workers: int, trials: int) -> dict:
    space = write_space(tmp / "space", PAIR_SPACE)   # the experiment pairx2-allgather searched below
    study = unique(f"load{workers}")
    start = time.perf_counter()
    procs = [subprocess.Popen(tune_cmd("--space", str(space), "--storage", storage, "--study", study,
                                       "--tracking-uri", server.uri, "--trials", str(trials), "--sampler", "random",
                                       "--seed", str(i), "--heartbeat", "10", "--out", str(tmp / f"host{i}")),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(workers)]
    outputs = [p.communicate(timeout=3600)[0] for p in procs]
    wall = time.perf_counter() - start
    bad = [(p.returncode, o[-2000:]) for p, o in zip(procs, outputs) if p.returncode != 0]
    if bad:
        raise SystemExit(f"worker(s) failed: {bad}")
    got = optuna.load_study(study_name=study, storage=open_storage(storage)).trials
    runs = mlflow.search_runs(experiment_names=["pairx2-allgather"],
                              filter_string=f"tags.`optuna.study` = '{study}' and tags.`autotaccl.kind` = 'trial'",
                              max_results=10_000)
    numbers = sorted(runs["tags.optuna.trial"].astype(int)) if not runs.empty else []
    return {"workers": workers, "requested": trials, "trials": len(got), "counted": sum(counted(t) for t in got),
            "states": dict(collections.Counter(t.state.name for t in got)),
            "numbers_ok": sorted(t.number for t in got) == list(range(trials)),
            "mlflow_runs": len(runs), "mlflow_once": numbers == list(range(trials)),
            "per_worker": sorted(collections.Counter(t.user_attrs.get("worker") for t in got).values()),
            "wall": wall, "rate": len(got) / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--single-trials", type=int, default=40)
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = postgres_url()
    with tempfile.TemporaryDirectory(prefix="cluster-load-") as tmp:
        server = MlflowServer(Path(tmp) / "mlflow")
        server.start()
        mlflow.set_tracking_uri(server.uri)
        try:
            one = sweep(Path(tmp) / "one", server, storage, 1, args.single_trials)
            many = sweep(Path(tmp) / "many", server, storage, args.workers, args.trials)
        finally:
            server.stop()
    print(f"{'':<14}{'1 worker':>36}{f'{args.workers} workers':>36}")
    for key in ("requested", "trials", "counted", "numbers_ok", "mlflow_runs", "mlflow_once", "states", "per_worker"):
        print(f"{key:<14}{str(one[key]):>36}{str(many[key]):>36}")
    print(f"{'wall time (s)':<14}{one['wall']:>36.1f}{many['wall']:>36.1f}")
    print(f"{'trials/s':<14}{one['rate']:>36.2f}{many['rate']:>36.2f}")
    print(f"throughput ratio ({args.workers} workers / 1 worker): {many['rate'] / one['rate']:.2f}x "
          f"on {__import__('os').cpu_count()} cores")
    ok = all(r["counted"] == r["requested"] == r["trials"] and r["numbers_ok"] and r["mlflow_once"] for r in (one, many))
    print("exactly once:", "yes" if ok else "NO")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
