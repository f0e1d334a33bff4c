"""Faults: kill -9 one worker and the MLflow server mid-sweep, restart both; interrupt a sweep at setup,
sampling and logging, restart it each time; compare both with a clean sweep.

BruteForce sampler on the 15-configuration 2x2-GPU test space, sim runner, PostgreSQL study. The clean
sweep is one `autotaccl tune` process; the faulty one is 3 processes on one study and one MLflow server:
one worker is SIGKILLed in the middle of a trial, then the server is killed, restarted a few seconds
later, and the dead worker is restarted with --resume. Checked: every configuration exactly once among
the counted trials, the killed trial FAIL and retried, its MLflow run FAILED, one MLflow run per trial,
and `autotaccl export` of both sweeps identical (ranges, protocols, times, XML).

The interrupted sweep is one `autotaccl tune` after another on one study and one run directory (its own
SQLite MLflow store), each stopped at a named fault point (autotaccl/faults.py) with SIGKILL or SIGINT:
while a baseline's run is written (setup), between two parameters of a trial (sampling), after a trial's
run is logged but before Optuna hears of it (logging); a last start finishes it. Checked: the same
configurations once each, every interrupted trial retried, MLflow agreeing with Optuna run for run, the
baselines and the sweep run once, and its export identical to the clean one.

    .venv/bin/python benchmarks/cluster_faults.py
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlflow
import optuna
from optuna.trial import TrialState

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from autotaccl.tracking import outbox  # noqa: E402
from autotaccl.cluster.heartbeat import open_storage  # noqa: E402
from autotaccl.tuning.sweep import counted  # noqa: E402
from support import PAIR_SPACE, VENV_BIN, MlflowServer, postgres_url, tune_cmd, unique, write_space  # noqa: E402

TRIALS = 15
# (what is interrupted, the fault: point, signal, on which pass of the point)
INTERRUPTIONS = (("setup", "mlflow.baseline.created:SIGKILL:2"), ("sampling", "trial.sampling:SIGINT:8"),
                 ("logging", "mlflow.trial.logged:SIGKILL:3"))


def exported(uri: str, out: Path) -> dict:
    """The export, without run ids and trial numbers (which differ between any two sweeps)."""
    run = subprocess.run([str(VENV_BIN / "autotaccl"), "export", "--tracking-uri", uri, "-o", str(out)],
                         capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise SystemExit(f"export failed: {run.stdout}{run.stderr}")
    rows = json.loads((out / "table.json").read_text())
    rows = rows if isinstance(rows, list) else rows.get("ranges", rows)
    strip = re.compile(r"trial-\d+|[0-9a-f]{32}")
    table = [{k: v for k, v in r.items() if k not in ("run_id", "winner", "trial", "xml")} for r in rows]
    xml = sorted(strip.sub("*", p.read_text()) for p in out.rglob("*.xml"))
    return {"table": table, "xml": xml, "winners": [strip.sub("trial", str(r.get("winner"))) for r in rows]}


def main() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = postgres_url()
    with tempfile.TemporaryDirectory(prefix="cluster-faults-") as tmp_name:
        tmp = Path(tmp_name)
        space = write_space(tmp / "space", PAIR_SPACE)
        clean_server, server = MlflowServer(tmp / "mlflow-clean"), MlflowServer(tmp / "mlflow")
        clean_server.start()
        server.start()
        try:
            common = ["--space", str(space), "--storage", storage, "--sampler", "bruteforce", "--seed", "0",
                      "--trials", str(TRIALS), "--heartbeat", "1"]
            start = time.perf_counter()
            clean = subprocess.run(tune_cmd(*common, "--study", unique("clean"), "--tracking-uri", clean_server.uri,
                                            "--out", str(tmp / "clean")), capture_output=True, text=True, timeout=1200)
            clean_wall = time.perf_counter() - start
            if clean.returncode != 0:
                raise SystemExit(clean.stdout + clean.stderr)

            study = unique("faulty")
            args = [*common, "--study", study, "--tracking-uri", server.uri]
            start = time.perf_counter()

            def worker(i: int, *extra: str) -> subprocess.Popen:
                return subprocess.Popen(tune_cmd(*args, "--out", str(tmp / f"host{i}"), *extra),
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

            procs = [worker(i) for i in range(3)]
            victim, pid = None, procs[0].pid
            deadline = time.monotonic() + 600
            while victim is None and time.monotonic() < deadline and procs[0].poll() is None:
                try:
                    trials = optuna.load_study(study_name=study, storage=open_storage(storage)).trials
                except KeyError:              # the study is not created yet
                    trials = []
                started = {t.user_attrs.get("worker", "").rpartition(":")[2] for t in trials}
                if not all(str(p.pid) in started for p in procs):    # mid-sweep: every worker has begun
                    time.sleep(0.05)
                    continue
                os.kill(pid, signal.SIGSTOP)      # freeze worker 0, look: inside a trial -> kill it
                now = optuna.load_study(study_name=study, storage=open_storage(storage)).trials
                running = [t.number for t in now if t.state == TrialState.RUNNING
                           and t.user_attrs.get("worker", "").endswith(f":{pid}")]
                if running:
                    os.kill(pid, signal.SIGKILL)
                    victim = running[0]
                else:
                    os.kill(pid, signal.SIGCONT)
                time.sleep(0.02)
            if victim is None:
                raise SystemExit("never caught worker 0 inside a trial")
            procs[0].wait()
            killed_at = time.perf_counter() - start
            server.stop()
            time.sleep(8)                        # the sweep goes on without the tracking server
            server.start()
            procs.append(worker(3, "--resume"))    # the restarted worker
            outputs = [p.communicate(timeout=1200)[0] for p in procs[1:]]
            faulty_wall = time.perf_counter() - start
            failed = [(p.returncode, o[-1500:]) for p, o in zip(procs[1:], outputs) if p.returncode != 0]
            if failed:
                raise SystemExit(f"workers failed: {failed}")
            pending_logged = sum("unreachable" in o for o in outputs)
            # a worker that finished while the server was down still holds runs: its host resumes once
            waiting = {i: outbox.pending(tmp / f"host{i}") for i in range(4)}
            for i, n in waiting.items():
                if n:
                    again = subprocess.run(tune_cmd(*args, "--out", str(tmp / f"host{i}"), "--resume"),
                                           capture_output=True, text=True, timeout=600)
                    if again.returncode != 0:
                        raise SystemExit(again.stdout + again.stderr)
            left = sum(outbox.pending(tmp / f"host{i}") for i in range(4))

            trials = optuna.load_study(study_name=study, storage=open_storage(storage)).trials
            kept = [t for t in trials if counted(t)]
            configs = [tuple(sorted(t.params.items())) for t in kept]
            killed = trials[victim]
            retries = [t for t in trials if t.user_attrs.get("retry_of") == victim]
            mlflow.set_tracking_uri(server.uri)
            runs = mlflow.search_runs(experiment_names=["pairx2-allgather"],
                                      filter_string=f"tags.`optuna.study` = '{study}' and tags.`autotaccl.kind` = 'trial'")
            dead = runs[runs["tags.optuna.trial"] == str(victim)]
            once = sorted(runs["tags.optuna.trial"].astype(int)) == sorted(t.number for t in trials)
            a = exported(clean_server.uri, tmp / "export-clean")
            b = exported(server.uri, tmp / "export-faulty")
            interrupted = interrupted_sweep(common, storage, tmp)
            c = exported(f"sqlite:///{tmp / 'interrupted' / 'mlflow.db'}", tmp / "export-interrupted")
        finally:
            server.stop()
            clean_server.stop()

    checks = {
        "counted trials == requested": len(kept) == TRIALS,
        "every configuration exactly once": len(set(configs)) == len(configs) == TRIALS,
        "killed trial FAIL with reason": killed.state == TrialState.FAIL and "retried" in
                                         killed.user_attrs.get("failure_reason", ""),
        "killed trial retried once, COMPLETE": len(retries) == 1 and retries[0].state == TrialState.COMPLETE,
        "killed trial's MLflow run FAILED": len(dead) == 1 and dead["status"].iloc[0] == "FAILED",
        "one MLflow run per trial": once,
        "no trial left RUNNING/WAITING": all(t.state.is_finished() for t in trials),
        "export identical (ranges, times, XML)": a["table"] == b["table"] and a["xml"] == b["xml"],
        **interrupted["checks"],
        "interrupted sweep: export identical (ranges, times, XML)": a["table"] == c["table"] and a["xml"] == c["xml"],
    }
    print(f"clean sweep: 1 worker, {TRIALS} trials, {clean_wall:.1f} s")
    print(f"faulty sweep: 3 workers (+1 restarted), {len(trials)} trials incl. the killed one, {faulty_wall:.1f} s; "
          f"worker 0 killed in trial {victim} at {killed_at:.1f} s, MLflow server down 8 s + restart, "
          f"{pending_logged} worker(s) recorded runs locally; pending per host after the sweep {waiting}, "
          f"after `tune --resume` there: {left}")
    print(f"interrupted sweep: {len(INTERRUPTIONS)} interrupted starts + 1, {interrupted['trials']} trials incl. "
          f"{interrupted['cut']} interrupted, {interrupted['wall']:.1f} s; exits {interrupted['exits']}")
    print(f"wall ratio faulty/clean: {faulty_wall / clean_wall:.2f}x, interrupted/clean: "
          f"{interrupted['wall'] / clean_wall:.2f}x")
    print(f"exported ranges: {len(a['table'])} clean, {len(b['table'])} faulty; XML files: {len(a['xml'])} / {len(b['xml'])}")
    for name, ok in checks.items():
        print(f"  {'ok ' if ok else 'FAIL'} {name}")
    if a != c:
        print("interrupted export:", json.dumps(c, indent=1)[:3000])
    if a != b:
        print("clean export:", json.dumps(a, indent=1)[:3000])
        print("faulty export:", json.dumps(b, indent=1)[:3000])
    if len(dead) != 1 or not once:
        print("trial runs:", runs[["tags.optuna.trial", "status", "tags.state"]].to_string())
    sys.exit(0 if all(checks.values()) else 1)


def interrupted_sweep(common: list[str], storage: str, tmp: Path) -> dict:
    """One sweep started again after each of INTERRUPTIONS, then once more to finish; its checks."""
    study, out = unique("interrupted"), tmp / "interrupted"
    args = tune_cmd(*common, "--study", study, "--out", str(out))
    exits = {}
    start = time.perf_counter()
    for where, fault in INTERRUPTIONS:
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "AUTOTACCL_TEST_FAULT": fault}
        run = subprocess.run(args, capture_output=True, text=True, timeout=1200, env=env)
        exits[where] = run.returncode
        if run.returncode not in (-signal.SIGKILL, 130):
            raise SystemExit(f"the start interrupted at {where} ({fault}) exited {run.returncode}: {run.stderr[-1500:]}")
    last = subprocess.run(args, capture_output=True, text=True, timeout=1200)
    if last.returncode != 0:
        raise SystemExit(f"the last start failed: {last.stdout}{last.stderr}")
    wall = time.perf_counter() - start
    trials = optuna.load_study(study_name=study, storage=open_storage(storage)).trials
    kept = [t for t in trials if counted(t)]
    configs = [tuple(sorted(t.params.items())) for t in kept]
    cut = [t for t in trials if t.user_attrs.get("interrupted")]
    retried = {t.user_attrs.get("retry_of") for t in trials if t.state == TrialState.COMPLETE}
    mlflow.set_tracking_uri(f"sqlite:///{out / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["pairx2-allgather"])
    trial_runs = runs[runs["tags.autotaccl.kind"] == "trial"]
    status = {"COMPLETE": "FINISHED", "FAIL": "FAILED", "PRUNED": "KILLED"}
    agree = (sorted(trial_runs["tags.optuna.trial"].astype(int)) == sorted(t.number for t in trials) and
             all(status[t.state.name] == trial_runs[trial_runs["tags.optuna.trial"] == str(t.number)]["status"].iloc[0]
                 for t in trials))
    bases = runs[runs["tags.autotaccl.kind"] == "baseline"]
    checks = {
        "interrupted sweep: counted trials == requested, each configuration once":
            len(kept) == TRIALS and len(set(configs)) == TRIALS,
        "interrupted sweep: every interrupted trial retried and COMPLETE":
            len(cut) >= 2 and all(t.number in retried for t in cut),
        "interrupted sweep: one MLflow run per trial, in its Optuna state": agree,
        "interrupted sweep: baselines once each, FINISHED; one sweep run":
            sorted(bases["tags.baseline"]) == ["direct", "hierarchical", "ring"] and
            (bases["status"] == "FINISHED").all() and (runs["tags.autotaccl.kind"] == "sweep").sum() == 1,
        "interrupted sweep: no trial or run left RUNNING":
            all(t.state.is_finished() for t in trials) and
            (runs[runs["status"] == "RUNNING"]["tags.autotaccl.kind"] == "sweep").all(),
    }
    return {"checks": checks, "trials": len(trials), "cut": len(cut), "wall": wall, "exits": exits}


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
