"""A run directory's stores damaged, copied and moved between two runs, as an operator's overnight sweep on
shared storage meets them: the local MLflow store truncated, overwritten with random bytes or deleted, a
sweep record cut short, ``cp -a`` and ``mv`` of a partly run ``--out``, the driver of ``--workers 3``
SIGKILLed. Real ``autotaccl tune``/``export`` processes, a real Optuna journal and MLflow SQLite store;
each case ends with the export of an uninterrupted sweep (``clean_sweep``)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from autotaccl.tracking import sqlite_uri
from support import (SWEEP, VENV_BIN, assert_like_clean, one_line, overwrite_middle, run_tune, study_trials,
                     sweep_args, truncate_half, tune_cmd)

pytestmark = pytest.mark.slow      # each test runs one to three real sweeps


@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    """The clean sweep's first 2 of 5 trials in a run directory of their own (its ``tune`` arguments for
    all 5, and the directory); tests work on copies of it."""
    tmp = tmp_path_factory.mktemp("partial")
    args, out = sweep_args(tmp)
    first = run_tune(*[a if a != "5" else "2" for a in args])
    assert first.returncode == 0, first.stderr
    assert sum(t.state == TrialState.COMPLETE for t in study_trials(out)) == 2
    return args, out


def _copy(partial, where: Path) -> tuple[list[str], Path]:
    """``cp -a`` of the partly run sweep to ``where``, and the same ``tune`` arguments naming the copy."""
    args, out = partial
    subprocess.run(["cp", "-a", str(out), str(where)], check=True)
    return [a if a != str(out) else str(where) for a in args], where


def _delete(db: Path) -> None:
    db.unlink()


# --------------------------------------------------------------------------- the MLflow store damaged


@pytest.mark.parametrize("damage, says", [
    (truncate_half, "SQLite says"),
    (overwrite_middle, "SQLite says"),
    (_delete, "it is gone"),
])
def test_a_damaged_or_deleted_mlflow_store_is_one_line_and_repair_rebuilds_it_from_the_study(
        damage, says, partial, clean_sweep, tmp_path):
    args, out = _copy(partial, tmp_path / "runs")
    db = out / "mlflow.db"
    damage(db)
    damaged = db.read_bytes() if db.exists() else None
    line = one_line(run_tune(*args))
    assert str(db) in line and "--repair" in line and says in line, line
    assert (db.read_bytes() if db.exists() else None) == damaged          # refused before touching anything
    assert study_trials(out) == study_trials(partial[1])                  # ... the study included

    repaired = run_tune(*args, "--repair")
    assert repaired.returncode == 0, repaired.stderr
    assert "Traceback" not in repaired.stderr
    if damaged is not None:
        assert (out / "mlflow.db.damaged").read_bytes() == damaged         # kept for inspection
    assert_like_clean(out, clean_sweep, tmp_path / "export")               # MLflow run for run, the same export


@pytest.mark.parametrize("record", [f"{SWEEP}.json", f"{SWEEP}.reference.json"])
def test_a_damaged_sweep_record_is_one_line_and_repair_rebuilds_it_from_the_study(record, partial, clean_sweep,
                                                                                  tmp_path):
    args, out = _copy(partial, tmp_path / "runs")
    path = out / "sweeps" / record
    whole = json.loads(path.read_text())
    path.write_text('{"space": [')
    line = one_line(run_tune(*args))
    assert str(path) in line and "--repair" in line, line

    repaired = run_tune(*args, "--repair")
    assert repaired.returncode == 0, repaired.stderr
    assert (out / "sweeps" / f"{record}.damaged").read_text() == '{"space": ['
    rebuilt = json.loads(path.read_text())
    assert rebuilt.keys() == whole.keys()
    assert_like_clean(out, clean_sweep, tmp_path / "export")


# --------------------------------------------------------------------------- copies and moves of --out


def test_a_copied_run_directory_finishes_and_exports_from_its_own_study(partial, clean_sweep, tmp_path):
    args, out = _copy(partial, tmp_path / "copy")
    done = run_tune(*args)
    assert done.returncode == 0, done.stderr
    assert_like_clean(out, clean_sweep, tmp_path / "export")
    assert len(study_trials(partial[1])) == 2                   # the original's journal untouched


def test_a_moved_run_directory_finishes_and_exports_from_its_own_study(partial, clean_sweep, tmp_path):
    args, out = _copy(partial, tmp_path / "before")
    moved = tmp_path / "elsewhere" / "after"
    moved.parent.mkdir()
    out.rename(moved)
    done = run_tune(*[a if a != str(out) else str(moved) for a in args])
    assert done.returncode == 0, done.stderr
    assert not out.exists()
    assert_like_clean(moved, clean_sweep, tmp_path / "export")


def test_an_export_whose_runs_were_logged_from_another_study_refuses_inone_line(partial, clean_sweep, tmp_path):
    """A finished sweep's store beside the journal of another copy (2 of its 5 trials): never joined."""
    store = tmp_path / "runs"
    subprocess.run(["cp", "-a", str(clean_sweep[0]), str(store)], check=True)
    (store / "optuna.journal").write_bytes((partial[1] / "optuna.journal").read_bytes())
    export = subprocess.run([str(VENV_BIN / "autotaccl"), "export", "--tracking-uri", sqlite_uri(store / "mlflow.db"),
                             "-o", str(tmp_path / "export")], capture_output=True, text=True, timeout=300)
    line = one_line(export)
    assert str(store / "optuna.journal") in line and "another copy" in line, line
    assert not (tmp_path / "export").exists()                   # nothing half-written


# --------------------------------------------------------------------------- --workers 3, its driver killed


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def _state(pid: int) -> str:
    """The process' state letter ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return ""


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet has exited)."""
    return _state(pid) not in ("", "Z")


def _trials_or_none(out: Path) -> list:
    try:
        return study_trials(out)
    except (KeyError, FileNotFoundError):      # not created yet
        return []


def test_workers_stop_when_their_killed_driver_is_gone_and_the_next_start_finishes_the_sweep(clean_sweep, tmp_path):
    """The driver is killed as the first trial completes, while the other workers' first trials run."""
    args, out = sweep_args(tmp_path)
    log = open(tmp_path / "tune.log", "w")           # not a pipe: the orphaned workers would hold it open
    proc = subprocess.Popen(tune_cmd(*args, "--workers", "3"), stdout=log, stderr=log, start_new_session=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            workers = _children(proc.pid)
            trials = _trials_or_none(out)
            if len(workers) == 3 and any(t.state == TrialState.COMPLETE for t in trials):
                break
            time.sleep(0.2)
        assert proc.poll() is None and len(workers) == 3, (tmp_path / "tune.log").read_text()
        os.kill(proc.pid, signal.SIGKILL)                # the driver only, as the OOM killer would
        at_kill = study_trials(out)
        held = [t.number for t in at_kill if t.state == TrialState.RUNNING]
        assert held                                      # trials its workers had not finished
        proc.wait(timeout=30)
        killed = time.monotonic()
        while time.monotonic() < killed + 30 and any(_alive(w) for w in workers):
            time.sleep(0.1)
        took = time.monotonic() - killed
        assert not any(_alive(w) for w in workers), "workers outlived their driver by 30 s"
        assert took < 10, f"the workers took {took:.1f} s to stop"
    finally:
        for pid in [proc.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        log.close()
    assert "is gone: stopping" in (tmp_path / "tune.log").read_text()
    trials = {t.number: t for t in study_trials(out)}
    assert not [t for t in trials.values() if t.state == TrialState.RUNNING]      # each marked its trial
    stopped = [n for n in held if trials[n].user_attrs.get("interrupted")]
    assert stopped and all(trials[n].state == TrialState.FAIL for n in stopped)  # not finished after the kill
    later = [t for n, t in trials.items() if n >= len(at_kill)]
    assert all(t.state == TrialState.WAITING for t in later), later   # an orphan started no other trial
    again = run_tune(*args)
    assert again.returncode == 0, again.stderr
    retries = {t.user_attrs["retry_of"]: t for t in study_trials(out) if "retry_of" in t.user_attrs}
    for n in stopped:                  # each redone by the next start
        assert retries[n].state == TrialState.COMPLETE and retries[n].params == trials[n].params
    assert_like_clean(out, clean_sweep, tmp_path / "export")
