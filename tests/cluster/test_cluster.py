"""Many `autotaccl tune` processes on one study: PostgreSQL + an MLflow server, real processes throughout."""
from __future__ import annotations

import collections
import subprocess
from pathlib import Path

import mlflow
import optuna
import pytest
from optuna.trial import TrialState

from autotaccl.cluster.heartbeat import open_storage
from autotaccl.tuning.sweep import counted
from support import CLUSTER_SPACE, REPO, VENV_BIN, tune_cmd, unique, write_space

pytestmark = pytest.mark.mpi


def test_tune_processes_on_postgres_run_exactly_the_requested_trials_once(tmp_path, postgres, mlflow_server):
    space = write_space(tmp_path, CLUSTER_SPACE)
    study = unique("pg-exact")
    procs = [subprocess.Popen(tune_cmd("--space", str(space), "--storage", postgres, "--study", study,
                                       "--tracking-uri", mlflow_server.uri, "--trials", "7", "--sampler", "random",
                                       "--seed", str(i), "--heartbeat", "1", "--out", str(tmp_path / f"host{i}")),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(3)]      # three "hosts": separate processes and run directories, one storage
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    trials = optuna.load_study(study_name=study, storage=open_storage(postgres)).trials
    assert len(trials) == 7 and all(counted(t) for t in trials), [(t.number, t.state) for t in trials]
    assert sorted(t.number for t in trials) == list(range(7))
    seeded = [t for t in trials if "fixed_params" in t.system_attrs]
    assert len(seeded) == 2                  # the default sketch and the space's seed, each run once
    assert len({tuple(sorted(t.params.items())) for t in seeded}) == 2
    assert len({t.user_attrs["worker"] for t in trials}) >= 2
    mlflow.set_tracking_uri(mlflow_server.uri)
    runs = mlflow.search_runs(experiment_names=["pairx2-allgather"])
    trial_runs = runs[(runs["tags.autotaccl.kind"] == "trial") & (runs["tags.optuna.study"] == study)]
    assert sorted(trial_runs["tags.optuna.trial"].astype(int)) == list(range(7))
    sweeps = runs[(runs["tags.autotaccl.kind"] == "sweep") & (runs["tags.optuna.study"] == study)]
    assert len(sweeps) == 1                        # one parent run, created by the first process
    states = collections.Counter(t.state for t in trials)
    assert states[TrialState.COMPLETE] == (trial_runs["tags.state"] == "COMPLETE").sum()


def _journal_trials(path, study):
    return optuna.load_study(study_name=study, storage=open_storage(str(path))).trials


def test_killed_worker_is_reaped_retried_and_measurements_never_overlap(tmp_path, mlflow_server):
    """Journal storage on a 'shared' directory, real 4-rank mpi measurements; one worker is SIGKILLed
    mid-measurement, its trial is failed by the other worker's reaper and retried; a restarted worker
    joins with --resume. The lease windows of all measurements are disjoint."""
    import os
    import signal
    import time

    space = write_space(tmp_path, CLUSTER_SPACE)
    shared = tmp_path / "shared"
    journal, study = shared / "study.journal", "killed"
    args = ["--space", str(space), "--storage", str(journal), "--study", study, "--tracking-uri", mlflow_server.uri,
            "--trials", "6", "--sampler", "random", "--runner", "mpi", "--np", "4", "--timeout-per-run", "60",
            "--margin", "10", "--explore", "0", "--heartbeat", "1", "--out", str(shared / "out")]
    a = subprocess.Popen(tune_cmd(*args, "--seed", "1"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    b = None
    victim = None
    deadline = time.monotonic() + 150
    while victim is None and time.monotonic() < deadline and a.poll() is None:
        time.sleep(0.1)
        if b is None and journal.exists():
            b = subprocess.Popen(tune_cmd(*args, "--seed", "2"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
        if not journal.exists():
            continue
        for t in _journal_trials(journal, study):
            if (t.state == TrialState.RUNNING and t.user_attrs.get("worker", "").endswith(f":{a.pid}")
                    and "measure_hosts" in t.user_attrs and "measure_window" not in t.user_attrs):
                os.kill(a.pid, signal.SIGKILL)        # mid-measurement, holding the host lease
                victim = t.number
                break
    assert victim is not None, a.communicate(timeout=30)[0]
    a.wait(timeout=30)
    restarted = subprocess.run(tune_cmd(*args, "--seed", "3", "--resume"), capture_output=True, text=True,
                               timeout=240)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    out_b = b.communicate(timeout=240)[0]
    assert b.returncode == 0, out_b

    trials = _journal_trials(journal, study)
    killed = trials[victim]
    reason = killed.user_attrs["failure_reason"]     # on one host the dead pid is seen before the heartbeat ages
    assert killed.state == TrialState.FAIL and f":{a.pid} process is gone; the trial is retried" in reason
    (retry,) = [t for t in trials if t.user_attrs.get("retry_of") == victim]
    assert retry.state == TrialState.COMPLETE and retry.params == killed.params
    assert retry.system_attrs["failed_trial"] == victim
    assert sum(counted(t) and t.number != victim for t in trials) == 6
    assert all(t.state != TrialState.RUNNING for t in trials)
    windows = sorted(t.user_attrs["measure_window"] for t in trials if "measure_window" in t.user_attrs)
    assert len(windows) >= 4
    assert all(prev[1] <= nxt[0] for prev, nxt in zip(windows, windows[1:])), windows     # never overlapping
    workers = {t.user_attrs["worker"] for t in trials if "measure_window" in t.user_attrs}
    assert len(workers) >= 2                                                   # measured by several workers

    mlflow.set_tracking_uri(mlflow_server.uri)
    runs = mlflow.search_runs(experiment_names=["pairx2-allgather"])
    mine = runs[(runs["tags.autotaccl.kind"] == "trial") & (runs["tags.optuna.study"] == study)]
    dead = mine[mine["tags.optuna.trial"] == str(victim)]
    assert len(dead) == 1 and dead["status"].iloc[0] == "FAILED" and dead["tags.state"].iloc[0] == "FAIL"
    assert dead["tags.failure_reason"].iloc[0] == reason
    assert dead["tags.verified"].iloc[0] == "false"
    assert sorted(mine["tags.optuna.trial"].astype(int)) == [t.number for t in trials]


def test_silent_workers_on_other_hosts_are_reaped_after_the_grace_period(tmp_path, postgres):
    """Heartbeats decide when the worker is elsewhere: a journal file per trial, Optuna's heartbeat in PostgreSQL."""
    import os
    import time

    from optuna.distributions import IntDistribution

    from autotaccl.cluster.heartbeat import beat_file, beating, reap

    beat = 1                                                  # seconds; grace: 3 s
    space = {"x": IntDistribution(0, 9)}
    for spec in (str(tmp_path / "s.journal"), postgres):
        study = optuna.create_study(study_name=unique("stale"), storage=open_storage(spec, beat))
        alive, dead = study.ask(space), study.ask(space)
        for t in (alive, dead):
            t.set_user_attr("worker", "elsewhere:4242")
        if "://" in spec:
            study._storage.record_heartbeat(dead._trial_id)
            study._storage.record_heartbeat(alive._trial_id)
            time.sleep(2)
            study._storage.record_heartbeat(alive._trial_id)
            assert reap(study, spec, interval=beat) == []
            time.sleep(2.2)                                      # dead: 4.2 s silent, alive: 2.2 s
            study._storage.record_heartbeat(alive._trial_id)
        else:
            folder = tmp_path / "s.journal.heartbeats"
            folder.mkdir()
            beat_file(folder, study.study_name, dead.number).write_text("elsewhere:4242")
            old = time.time() - 10
            os.utime(beat_file(folder, study.study_name, dead.number), (old, old))   # a worker killed 10 s ago
            with beating(spec, study.study_name, alive.number, beat):
                time.sleep(3.5)                                  # longer than the grace, but beating
                reasons = []
                assert reap(study, spec, lambda t, r: reasons.append(r), interval=beat) == [dead.number]
                assert reasons == ["worker elsewhere:4242 stopped heartbeating for more than 3 s (killed or cut off); "
                                   "the trial is retried"]
        if "://" in spec:
            assert reap(study, spec, interval=beat) == [dead.number]
        trials = study.trials
        assert trials[alive.number].state == TrialState.RUNNING
        assert trials[dead.number].state == TrialState.FAIL and trials[dead.number].user_attrs["interrupted"]
        (clone,) = [t for t in trials if t.state == TrialState.WAITING]
        assert clone.params == trials[dead.number].params and clone.user_attrs == {"retry_of": dead.number}


def test_an_unreachable_mlflow_server_is_recorded_locally_and_replayed(tmp_path, own_mlflow_server):
    """The tracking server is killed mid-sweep and restarted: the sweep goes on, no run is lost or doubled."""
    import time

    mlflow_server = own_mlflow_server
    from autotaccl.tracking import outbox

    space = write_space(tmp_path, CLUSTER_SPACE)
    journal, out = tmp_path / "study.journal", tmp_path / "out"
    proc = subprocess.Popen(tune_cmd("--space", str(space), "--storage", str(journal), "--study", "outage",
                                     "--tracking-uri", mlflow_server.uri, "--trials", "30", "--sampler", "random",
                                     "--seed", "5", "--heartbeat", "1", "--out", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def trials():
        try:
            return _journal_trials(journal, "outage") if journal.exists() else []
        except KeyError:        # the journal exists, but the sweep has not recorded its study yet
            return []

    def wait_for(check, seconds=120):
        deadline = time.monotonic() + seconds
        while not check() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)

    wait_for(lambda: sum(t.state == TrialState.COMPLETE for t in trials()) >= 3)
    mlflow_server.stop()
    wait_for(lambda: sum(bool(t.user_attrs.get("mlflow_pending")) for t in trials()) >= 2)
    assert outbox.pending(out) >= 1
    mlflow_server.start()
    output = proc.communicate(timeout=240)[0]
    assert proc.returncode == 0, output
    assert "unreachable" in output and "mlflow-pending" in output
    final = trials()
    assert len(final) == 30 and all(counted(t) for t in final)
    assert sum(bool(t.user_attrs.get("mlflow_pending")) for t in final) >= 2
    # the sweep replays at its end; if it ended before the server was back, export --replay does it
    export = subprocess.run([*tune_cmd()[:1], "export", "--tracking-uri", mlflow_server.uri, "--replay", str(out),
                             "-o", str(tmp_path / "exported")], capture_output=True, text=True, timeout=300)
    assert export.returncode == 0, export.stdout + export.stderr
    assert outbox.pending(out) == 0
    assert not list(outbox.pending_dir(out).glob("*"))         # no emptied (0-byte) file stays behind
    assert (tmp_path / "exported" / "table.json").is_file()
    mlflow.set_tracking_uri(mlflow_server.uri)
    runs = mlflow.search_runs(experiment_names=["pairx2-allgather"])
    mine = runs[(runs["tags.autotaccl.kind"] == "trial") & (runs["tags.optuna.study"] == "outage")]
    assert sorted(mine["tags.optuna.trial"].astype(int)) == list(range(30))     # each trial exactly one run
    assert (mine["status"] == "FINISHED").sum() == sum(t.state == TrialState.COMPLETE for t in final)


_OUTAGE_WRITER = """
import sys
from autotaccl import tracking
from autotaccl.tracking import outbox
outbox.limit_client_retries()
uri, out, experiment, name = sys.argv[1:]
assert outbox.log_run(tracking.MlflowClient(uri), out, experiment, name, patient=False,
                      params={"chunkup": 1}, tags={"autotaccl.kind": "trial"}, artifacts={"a.txt": name}) is None
"""


def test_a_replayed_outbox_leaves_no_empty_file_behind(tmp_path, own_mlflow_server):
    """Two processes record runs while the server is down; once it is back, a replay logs each exactly once
    and removes the files it emptied (a 0-byte mlflow-pending/*.jsonl used to stay)."""
    import os
    import sys

    from autotaccl import tracking
    from autotaccl.tracking import outbox

    client = tracking.MlflowClient(own_mlflow_server.uri)
    experiment = client.create_experiment("outbox")
    out = tmp_path / "out"
    own_mlflow_server.stop()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for name in ("trial-0", "trial-1", "trial-2"):       # three processes: three files
        subprocess.run([sys.executable, "-c", _OUTAGE_WRITER, own_mlflow_server.uri, str(out), experiment, name],
                       check=True, capture_output=True, timeout=120, env=env)
    files = sorted(outbox.pending_dir(out).glob("*.jsonl"))
    assert len(files) == 3 and all(p.stat().st_size > 0 for p in files) and outbox.pending(out) == 3
    own_mlflow_server.start()
    assert outbox.replay(out, client) == (3, 0)
    assert not list(outbox.pending_dir(out).glob("*"))
    logged = client.search_runs([experiment])
    assert sorted(r.info.run_name for r in logged) == ["trial-0", "trial-1", "trial-2"]
    assert outbox.replay(out, client) == (0, 0)                 # nothing twice


def test_failures_become_trial_states_with_reasons_and_the_sweep_goes_on(tmp_path, mlflow_server):
    """A crashed rank, a hung rank (runner time-out) and a corrupted cache entry (verification failure)
    each fail one trial, with the reason in Optuna and in MLflow; the sweep still runs all its trials."""
    import json
    import os
    import sys
    import time

    space = write_space(tmp_path, CLUSTER_SPACE)
    out, journal = tmp_path / "out", tmp_path / "study.journal"
    common = ["--space", str(space), "--storage", str(journal), "--tracking-uri", mlflow_server.uri,
              "--sampler", "random", "--seed", "3", "--out", str(out), "--heartbeat", "1"]
    warm = subprocess.run(tune_cmd(*common, "--study", "warm", "--trials", "1"), capture_output=True, text=True,
                          timeout=120)                   # caches the default sketch's algorithm
    assert warm.returncode == 0, warm.stdout + warm.stderr
    (entry,) = (out / "cache").glob("*.json")
    doc = json.loads(entry.read_text())
    transfers = next(v for v in (doc, doc.get("algorithm", {})) if isinstance(v, dict) and "transfers" in v)
    transfers["transfers"] = transfers["transfers"][1:]      # a corrupted entry: one transfer lost
    entry.write_text(json.dumps(doc))

    launcher = tmp_path / "flaky-mpiexec"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).with_name('cluster_launcher.py')} \"$@\"\n")
    launcher.chmod(0o755)
    tickets = tmp_path / "tickets"
    tickets.mkdir()
    env = {**os.environ, "AUTOTACCL_FAULT_TICKETS": str(tickets)}
    proc = subprocess.Popen(tune_cmd(*common, "--study", "faults", "--trials", "5", "--runner", "mpi", "--np", "4",
                                     "--launcher", str(launcher), "--timeout-per-run", "40", "--margin", "10", "--explore", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 120       # the baselines are measured first, without faults: the study
    while time.monotonic() < deadline and proc.poll() is None and not [   # has its seeds queued only after
            s for s in optuna.get_all_study_summaries(open_storage(str(journal))) if s.study_name == "faults"
            and s.n_trials]:
        time.sleep(0.2)
    (tickets / "1.ticket").write_text("crash")
    (tickets / "2.ticket").write_text("hang")
    output = proc.communicate(timeout=300)[0]     # the hung rank's 40 s, and ranks slow to start on a loaded machine
    assert proc.returncode == 0, output
    assert not list(tickets.glob("*.ticket")), "both faults were injected"

    trials = _journal_trials(journal, "faults")
    assert len(trials) == 5 and all(counted(t) for t in trials)
    failed = {t.number: t.user_attrs["failure_reason"] for t in trials if t.state == TrialState.FAIL}
    reasons = "\n".join(failed.values())
    assert sum("synthesis:" in r for r in failed.values()) == 1, reasons          # the corrupted cache entry
    assert sum("died first" in r for r in failed.values()) == 1, reasons         # the crashed rank
    assert sum("timed out after 40 s" in r for r in failed.values()) == 1, reasons  # the hung rank
    assert any(t.state == TrialState.COMPLETE for t in trials)

    mlflow.set_tracking_uri(mlflow_server.uri)
    runs = mlflow.search_runs(experiment_names=["pairx2-allgather"])
    mine = runs[(runs["tags.autotaccl.kind"] == "trial") & (runs["tags.optuna.study"] == "faults")]
    bad = mine[mine["tags.state"] == "FAIL"]
    assert dict(zip(bad["tags.optuna.trial"].astype(int), bad["tags.failure_reason"])) == failed
    assert (bad["status"] == "FAILED").all() and (bad["tags.verified"] == "false").all()


def test_resume_without_a_study_is_one_line_of_bad_input(tmp_path):
    space = write_space(tmp_path, CLUSTER_SPACE)
    run = subprocess.run(tune_cmd("--space", str(space), "--storage", str(tmp_path / "none.journal"), "--resume",
                                  "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--out", str(tmp_path / "o")),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "--resume" in run.stderr and "an existing study" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "none.journal").exists() or optuna.get_all_study_summaries(
        open_storage(str(tmp_path / "none.journal"))) == []


def test_a_worker_killed_between_two_suggests_leaves_a_complete_trial_for_bruteforce(tmp_path):
    """BruteForce counts FAIL trials as visited and rejects half-sampled ones: the reaper completes them."""
    import os
    import time

    from autotaccl.cluster.heartbeat import beat_dir, beat_file, reap
    from autotaccl.cluster.loop import _Completer
    from autotaccl.tuning.space import load_space, sample
    from autotaccl.tuning.sweep import make_sampler

    space = load_space(str(write_space(tmp_path, CLUSTER_SPACE)))
    spec = str(tmp_path / "bf.journal")
    study = optuna.create_study(study_name="bf", storage=open_storage(spec), sampler=make_sampler("bruteforce", 0))
    half = study.ask()
    half.suggest_categorical("internode_conn", ["relay", "direct-map", "fully-connected"])   # then killed
    half.set_user_attr("worker", "elsewhere:77")
    folder = beat_dir(spec)
    folder.mkdir()
    beat_file(folder, "bf", half.number).write_text("elsewhere:77")
    os.utime(beat_file(folder, "bf", half.number), (time.time() - 30, time.time() - 30))
    assert reap(study, spec, complete=lambda t: sample(_Completer(study, t), space), interval=1) == [half.number]
    dead = study.trials[half.number]
    assert dead.state == TrialState.FAIL and set(dead.params) >= {"internode_conn", "chunkup"}
    for _ in range(3):                                     # the retry and fresh trials sample without error
        trial = study.ask()
        values = sample(trial, space)
        study.tell(trial, 1.0)
        assert values["chunkup"] in (1, 2, 3)


def test_ranks_die_with_a_sigkilled_worker(tmp_path):
    """A worker launching a long mpi job through the runners' launcher is SIGKILLed: the launcher (own
    session) gets SIGKILL from the kernel (PR_SET_PDEATHSIG) and Hydra's ranks go with it, within seconds."""
    import os
    import signal
    import sys
    import time

    token = unique("orphan-rank")
    worker = ("import sys; from pathlib import Path; from runners.launch import run; "
              f"run([str(Path(sys.executable).parent / 'mpiexec'), '-n', '2', sys.executable, '-c', "
              f"'import time; time.sleep(120)  # {token}'], Path(sys.argv[1]), timeout=120)")
    parent = subprocess.Popen([sys.executable, "-c", worker, str(tmp_path)], cwd=REPO)

    def ranks() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                cmd = (entry / "cmdline").read_bytes().decode(errors="replace") if entry.name.isdigit() else ""
            except OSError:
                continue
            if token in cmd and "runners.launch" not in cmd and "mpiexec" not in cmd:
                found.append(int(entry.name))
        return found

    try:
        deadline = time.monotonic() + 30
        while len(ranks()) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.1)
        assert len(ranks()) == 2, "both ranks started"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 5
        while ranks() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ranks() == [], "ranks outlived their worker"
    finally:
        for pid in ranks():
            os.kill(pid, signal.SIGKILL)


_RECORDER = """
import sys, time
import optuna
from optuna.distributions import IntDistribution
from autotaccl import tracking
from autotaccl.cluster.loop import record_trial
from autotaccl.tuning.objective import SweepConfig

config = SweepConfig.load(sys.argv[1])
client = tracking.MlflowClient(config.tracking_uri)
start, missing_only = float(sys.argv[2]), sys.argv[3] == "reconcile"
for number in range(6):
    trial = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={"chunks": 2},
                                      distributions={"chunks": IntDistribution(1, 4)})
    trial.number = number
    while time.time() < start + number:          # both processes start each trial together
        time.sleep(0.001)
    record_trial(client, config, trial, "FAIL", "reaped", missing_only=missing_only)
"""


def test_a_reaper_and_a_reconcile_recording_one_trial_at_once_leave_one_run(tmp_path, mlflow_server):
    """The race of the killed-worker test, forced: a reaper and a restarted worker's reconcile log the same
    failed trials at the same instant, six times over; the study's record lock leaves one run per trial."""
    import time

    from autotaccl import tracking
    from autotaccl.tuning.objective import SweepConfig

    client = tracking.MlflowClient(mlflow_server.uri)
    study = unique("record-race")
    experiment_id = client.create_experiment(study)
    parent = client.create_run(experiment_id).info.run_id
    config = SweepConfig(space="-", collective="allgather", out_dir=str(tmp_path / "out"),
                         storage=str(tmp_path / "shared" / "study.journal"), study_name=study,
                         tracking_uri=mlflow_server.uri, experiment_id=experiment_id, parent_run_id=parent,
                         reference="-")
    config.save(tmp_path / "config.json")
    start = time.time() + 8                      # both interpreters have imported MLflow by then
    procs = [subprocess.Popen([str(VENV_BIN / "python"), "-c", _RECORDER, str(tmp_path / "config.json"),
                               str(start), role], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for role in ("reaper", "reconcile")]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    runs = mlflow.MlflowClient(mlflow_server.uri).search_runs([experiment_id], "tags.`autotaccl.kind` = 'trial'")
    assert sorted(int(r.data.tags["optuna.trial"]) for r in runs) == list(range(6))
