"""Restarts after what the world does to a run directory between two runs: a disk that fills mid-trial
(a real, small tmpfs), a damaged or truncated Optuna journal, a search space edited, a run directory whose
name is not URL-safe, a tracking store another tool wrote. Real `autotaccl tune` processes, a real Optuna
journal and MLflow SQLite store each time."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from autotaccl.tracking import sqlite_uri
from support import (NDV2_SPACE, SWEEP, VENV_BIN, assert_like_clean, exported, fresh_store, one_line, run_tune,
                     runs, study_trials, sweep_args, tune_cmd, write_space)

pytestmark = pytest.mark.slow      # every test runs real sweeps, some of them twice


# --------------------------------------------------------------------------- item 2: a full disk


@pytest.fixture
def small_disk(tmp_path):
    """A real 24 MB file system (tmpfs; mounting one needs root) that a test can fill up."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], capture_output=True)
    # no stand-in: a full disk is reproduced for real, which needs the mount (root, as on .ci/run's machine)
    assert mounted.returncode == 0, f"cannot mount a tmpfs for the full disk: {mounted.stderr.decode().strip()}"
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def _fill(disk: Path) -> Path:
    """Write ``disk/filler`` until the file system says ENOSPC."""
    filler = disk / "filler"
    block = b"\0" * (1 << 16)
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(block)
                fh.flush()
        except OSError as err:
            assert err.errno == 28, err           # ENOSPC, for real
    return filler


def _stopped(pid: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
            return
        time.sleep(0.05)
    raise AssertionError("tune never reached its fault point")


def test_a_full_disk_stops_the_sweep_without_counting_the_trial_and_a_rerun_finishes_it(small_disk, clean_sweep,
                                                                                       tmp_path):
    space = write_space(tmp_path / "space", NDV2_SPACE)
    out = small_disk / "runs"
    fresh_store(out)
    args = ["--space", str(space), "--trials", "5", "--sampler", "tpe", "--seed", "3", "--out", str(out)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "AUTOTACCL_TEST_FAULT": "trial.synthesis:SIGSTOP:3"}
    proc = subprocess.Popen(tune_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _stopped(proc.pid)                  # held before its third trial's synthesis
        filler = _fill(small_disk)          # ... while the disk fills up
        proc.send_signal(signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    full = one_line(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), status=1)
    assert "No space left on device" in full or "disk is full" in full, full
    assert "not counted" in full

    still = one_line(run_tune(*args), status=1)          # the disk is still full: said again, nothing counted
    assert "No space left on device" in still or "disk is full" in still, still
    assert sum(t.state == TrialState.COMPLETE for t in study_trials(out)) == 2

    filler.unlink()                         # space freed
    # and a machine that died mid-append left a torn line in the outbox
    (out / "mlflow-pending" / "gone-host-1.jsonl").write_text('{"record": "x", "run_name": "trial-9", "tags": {"a')
    again = run_tune(*args)
    assert again.returncode == 0, again.stderr
    assert "not a whole record" in again.stderr and "Traceback" not in again.stderr
    trials = study_trials(out)
    (cut,) = [t for t in trials if t.user_attrs.get("interrupted")]
    assert cut.number == 2 and cut.state == TrialState.FAIL
    (retry,) = [t for t in trials if t.user_attrs.get("retry_of") == cut.number]
    assert retry.state == TrialState.COMPLETE and retry.params == cut.params
    assert_like_clean(out, clean_sweep, tmp_path / "export")
    failed = runs(out).query("`tags.optuna.trial` == '2'")
    assert list(failed["status"]) == ["FAILED"] and failed["tags.mlflow.runName"].iloc[0].startswith("t2 ")
    replay = subprocess.run([str(VENV_BIN / "autotaccl"), "export", "--tracking-uri", sqlite_uri(out / "mlflow.db"),
                             "--replay", str(out), "-o", str(tmp_path / "replayed")], capture_output=True, text=True)
    assert replay.returncode == 0 and "Traceback" not in replay.stderr, replay.stderr


# --------------------------------------------------------------------------- item 8: a damaged journal


def _damage_last(journal: Path) -> None:
    """Cut the journal's last operation short (a full disk or a kill mid-append)."""
    size = journal.stat().st_size
    os.truncate(journal, size - 30)


def _damage_middle(journal: Path) -> None:
    lines = journal.read_text().splitlines(keepends=True)
    lines[len(lines) // 2] = '{"op_code": 5, "worker_id": \n'
    journal.write_text("".join(lines))


def _emptied(journal: Path) -> None:
    journal.write_text("")


def _another_study(journal: Path) -> None:
    journal.write_text(json.dumps({"op_code": 0, "worker_id": "w", "study_name": "other", "directions": [1]}) + "\n")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished sweep to damage copies of (its run directory, the arguments that made it)."""
    tmp = tmp_path_factory.mktemp("finished")
    args, out = sweep_args(tmp)
    assert run_tune(*args).returncode == 0
    return tmp, args, out


def _copy_of(finished, tmp_path) -> tuple[list[str], Path]:
    """The finished sweep moved to a run directory of its own (its records name it, as if made there)."""
    tmp, args, out = finished
    where = tmp_path / "runs"
    subprocess.run(["cp", "-a", str(out), str(where)], check=True)
    for path in (where / "sweeps").glob("*.json"):
        path.write_text(path.read_text().replace(str(out), str(where)))
    return [a if a != str(out) else str(where) for a in args], where


@pytest.mark.parametrize("damage, says", [
    (_damage_middle, "line"),
    (_emptied, "is gone"),
    (_another_study, "is gone"),
    (Path.unlink, "is gone"),
])
def test_a_damaged_or_lost_journal_is_refused_in_one_line_never_restarted(damage, says, finished, tmp_path):
    args, out = _copy_of(finished, tmp_path)
    before = len(runs(out))
    damage(out / "optuna.journal")
    line = one_line(run_tune(*args))
    assert "optuna.journal" in line and says in line and ("restore" in line.lower()), line
    assert len(runs(out)) == before                     # nothing logged: no duplicate run names in MLflow


def test_a_journal_whose_last_operation_was_cut_short_is_repaired_with_a_warning(finished, clean_sweep, tmp_path):
    args, out = _copy_of(finished, tmp_path)
    _damage_last(out / "optuna.journal")
    again = run_tune(*args)
    assert again.returncode == 0, again.stderr
    assert "cut short" in again.stderr and "Traceback" not in again.stderr
    assert_like_clean(out, clean_sweep, tmp_path / "export")


# --------------------------------------------------------------------------- item 4: an edited space


def _edited(tmp_path, change) -> Path:
    data = yaml.safe_load(yaml.safe_dump(NDV2_SPACE))
    change(data)
    return write_space(tmp_path / "edited", data)


def _more_protocols(data):
    data["parameters"]["protocol"]["choices"].append("LL128")


def _other_sizes(data):
    data["sizes"] = "2K,64K,4M"


def _more_sizes(data):
    data["sizes"] = "1K,2K,64K,4M"


def _fewer_protocols(data):
    data["parameters"]["protocol"]["choices"] = ["Simple"]


@pytest.mark.parametrize("change, field, extendable", [
    (_more_protocols, "parameters.protocol.choices", True),
    (_more_sizes, "sizes", True),
    (_other_sizes, "sizes", False),
    (_fewer_protocols, "parameters.protocol.choices", False),
])
def test_a_rerun_with_an_edited_space_is_one_line_naming_the_change(change, field, extendable, finished, tmp_path):
    args, out = _copy_of(finished, tmp_path)
    before = (len(study_trials(out)), len(runs(out)))
    edited = _edited(tmp_path, change)
    args = [a if not a.endswith("space.yaml") else str(edited) for a in args]
    line = one_line(run_tune(*args))
    assert f"{edited}: {field}:" in line and "--study" in line and "--extend" in line, line
    assert ("add it to this study with --extend" in line) == extendable, line
    assert (len(study_trials(out)), len(runs(out))) == before        # no garbage trial, nothing logged
    if not extendable:
        one_line(run_tune(*args, "--extend"))


def test_extend_adds_choices_and_sizes_and_keeps_every_result_where_it_was_measured(finished, tmp_path):
    original, out = _copy_of(finished, tmp_path)
    old = {t.number: t.user_attrs["results"] for t in study_trials(out) if t.state == TrialState.COMPLETE}
    edited = _edited(tmp_path, lambda d: (_more_protocols(d), _more_sizes(d)))
    args = [a if not a.endswith("space.yaml") else str(edited) for a in original]
    args[args.index("--trials") + 1] = "8"
    grown = run_tune(*args, "--extend")
    assert grown.returncode == 0, grown.stderr
    trials = study_trials(out)
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 8
    assert {t.number: t.user_attrs["results"] for t in trials if t.number in old} == old    # kept as measured
    new = [t for t in trials if t.number not in old]
    assert all(2048 in {r["size"] for r in t.user_attrs["results"]} for t in new)
    # the summary shows at 2K only a trial that ran at 2K (never an old 1K time)
    row = next(line.split() for line in grown.stdout.splitlines() if line.strip().startswith("2K"))
    if row[1] == "trial":
        number = int(row[2])
        (trial,) = [t for t in trials if t.number == number]
        result = next(r for r in trial.user_attrs["results"] if r["size"] == 2048)
        assert number not in old and float(row[3]) == pytest.approx(result["time_us"], abs=0.01)
    table = exported(sqlite_uri(out / "mlflow.db"), tmp_path / "export")["table"]   # export and report still work
    assert table
    report = subprocess.run([str(VENV_BIN / "autotaccl"), "report", "--tracking-uri", sqlite_uri(out / "mlflow.db"),
                             "-o", str(tmp_path / "report")], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    # the grown space is now the study's: a rerun of it needs no --extend, and the old space is refused
    assert run_tune(*args).returncode == 0
    assert ": sizes: what study" in one_line(run_tune(*original))


# --------------------------------------------------------------------------- item 7: where the store goes


@pytest.mark.parametrize("name", ["run?x=1", "run%41b", "run#frag"])
def test_a_run_directory_whose_name_is_not_url_safe_holds_its_own_store(name, tmp_path):
    space = write_space(tmp_path / "space", NDV2_SPACE)
    out = tmp_path / name
    done = run_tune("--space", str(space), "--trials", "2", "--seed", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["space", name])     # nothing written beside it
    assert (out / "mlflow.db").is_file()
    client = MlflowClient(tracking_uri=sqlite_uri(out / "mlflow.db"))
    (experiment,) = [e for e in client.search_experiments() if e.name == SWEEP]
    assert len(client.search_runs([experiment.experiment_id])) == 2 + 3 + 1 + 1   # trials, baselines, nccl-model, sweep
    assert exported(sqlite_uri(out / "mlflow.db"), tmp_path / name / "export")["table"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["space", name])


def test_an_experiment_another_tool_made_is_refused_unless_adopted(tmp_path):
    args, out = sweep_args(tmp_path)
    client = MlflowClient(tracking_uri=sqlite_uri(out / "mlflow.db"))
    foreign = client.create_experiment(SWEEP)
    client.create_run(foreign, run_name="someone-elses")
    line = one_line(run_tune(*args))
    assert SWEEP in line and "--adopt" in line, line
    assert len(client.search_runs([foreign])) == 1                   # nothing logged into it
    adopted = run_tune(*args, "--adopt")
    assert adopted.returncode == 0, adopted.stderr
    assert exported(sqlite_uri(out / "mlflow.db"), tmp_path / "export")["table"]


def test_a_deleted_experiment_of_the_same_name_is_refused_inone_line(tmp_path):
    args, out = sweep_args(tmp_path)
    client = MlflowClient(tracking_uri=sqlite_uri(out / "mlflow.db"))
    client.delete_experiment(client.create_experiment(SWEEP, tags={"autotaccl.target": "ndv2x2"}))
    line = one_line(run_tune(*args))
    assert "deleted" in line and "mlflow experiments restore" in line, line


# --------------------------------------------------------------------------- Ctrl-C with --workers


def test_ctrl_c_with_workers_is_one_line_and_a_rerun_finishes_the_sweep(clean_sweep, tmp_path):
    """Ctrl-C in a terminal reaches the whole process group: the driver and every worker."""
    args, out = sweep_args(tmp_path)
    proc = subprocess.Popen(tune_cmd(*args, "--workers", "2"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(t.state == TrialState.COMPLETE for t in _trials_or_none(out)):
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    assert [line for line in stderr.splitlines() if line.strip()] == ["autotaccl: interrupted"], stderr
    again = run_tune(*args)
    assert again.returncode == 0, again.stderr
    assert_like_clean(out, clean_sweep, tmp_path / "export")


def _trials_or_none(out: Path) -> list:
    try:
        return study_trials(out)
    except (KeyError, FileNotFoundError):      # not created yet
        return []


# --------------------------------------------------------------------------- export -o


def test_export_replaces_its_directory_in_one_step_and_cleans_up_after_a_killed_one(clean_sweep, tmp_path):
    store = tmp_path / "runs"
    subprocess.run(["cp", "-a", str(clean_sweep[0]), str(store)], check=True)
    target = tmp_path / "export"
    cmd = [str(VENV_BIN / "autotaccl"), "export", "--tracking-uri", sqlite_uri(store / "mlflow.db"), "-o", str(target)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    assert subprocess.run(cmd, capture_output=True, env=env).returncode == 0
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o777 & ~umask                 # not mkdtemp's 0700
    table = (target / "table.json").read_text()

    killed = subprocess.run(cmd, capture_output=True, env={**env, "AUTOTACCL_TEST_FAULT": "export.written:SIGKILL"})
    assert killed.returncode == -signal.SIGKILL
    assert (target / "table.json").read_text() == table                   # the old export, whole
    assert [p.name for p in tmp_path.glob(".export.tmp-*")]                 # what the killed one left

    missing = []
    writer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    while writer.poll() is None:                                            # a reader all along
        if not (target / "table.json").is_file():
            missing.append(time.monotonic())
        time.sleep(0.001)
    assert writer.returncode == 0 and not missing                           # never seen missing
    assert not list(tmp_path.glob(".export.tmp-*"))                         # cleaned up
    assert (target / "table.json").read_text() == table
