"""Issue 38: a run directory whose stores were damaged, deleted, copied or moved, and a driver killed under
its workers. Real `autotaccl tune` and `autotaccl export` processes, a real Optuna journal and a real
MLflow SQLite store, damaged the way disks and people damage them; each case ends with the export of an
uninterrupted sweep of the same seed."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from support import (SWEEP, VENV_BIN, assert_like_clean, exported, one_line, run_tune, study_trials, sweep_args,
                     tune_cmd)

# each case is two or three real sweeps of ~20 s on 2 cores
pytestmark = pytest.mark.slow


def _partly_run(tmp_path: Path, name: str = "runs") -> tuple[list[str], Path]:
    """The clean sweep's arguments, and its run directory after the first 3 of its 5 trials."""
    args, out = sweep_args(tmp_path, name)
    first = run_tune(*[a if a != "5" else "3" for a in args])
    assert first.returncode == 0, first.stderr
    return args, out


def _truncate(db: Path) -> None:
    os.truncate(db, db.stat().st_size // 2)


def _overwrite(db: Path) -> None:
    """Random bytes over a page in the middle of the file (a bad sector, a stray write)."""
    data = bytearray(db.read_bytes())
    middle = len(data) // 2 // 4096 * 4096
    data[middle:middle + 4096] = random.Random(38).randbytes(4096)
    db.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_truncate, _overwrite, Path.unlink])
def test_a_damaged_or_deleted_mlflow_store_is_one_line_and_repair_rebuilds_it_as_if_uninterrupted(
        damage, clean_sweep, tmp_path):
    args, out = _partly_run(tmp_path)
    damage(out / "mlflow.db")
    line = one_line(run_tune(*args))
    assert str(out / "mlflow.db") in line and "--repair" in line, line
    assert not list(out.glob("mlflow.db.damaged*"))            # refused: nothing moved, nothing written
    again = run_tune(*args, "--repair")
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    if damage is not Path.unlink:
        assert (out / "mlflow.db.damaged").is_file()            # kept for inspection
    assert_like_clean(out, clean_sweep, tmp_path / "export")   # MLflow agrees with Optuna run for run


def test_a_damaged_sweep_record_is_one_line_and_repair_rebuilds_it(clean_sweep, tmp_path):
    args, out = _partly_run(tmp_path)
    record = out / "sweeps" / f"{SWEEP}.json"
    record.write_text('{"space": [')
    line = one_line(run_tune(*args))
    assert str(record) in line and "--repair" in line, line
    again = run_tune(*args, "--repair")
    assert again.returncode == 0, again.stderr
    assert (out / "sweeps" / f"{SWEEP}.json.damaged").read_text() == '{"space": ['
    assert_like_clean(out, clean_sweep, tmp_path / "export")


@pytest.mark.parametrize("how", ["cp -a", "mv"])
def test_a_copied_or_moved_run_directory_finishes_and_exports_from_its_own_study(how, clean_sweep, tmp_path):
    args, out = _partly_run(tmp_path)
    where = tmp_path / "elsewhere"
    subprocess.run([*how.split(), str(out), str(where)], check=True)
    again = run_tune(*[a if a != str(out) else str(where) for a in args])
    assert again.returncode == 0, again.stderr
    assert_like_clean(where, clean_sweep, tmp_path / "export")
    if how == "cp -a":
        assert len(study_trials(out)) == 3                     # the original was left as it was


def test_an_export_whose_runs_were_logged_from_another_study_refuses_in_one_line(clean_sweep, tmp_path):
    args, out = _partly_run(tmp_path)
    clean_out = clean_sweep[0]
    (out / "optuna.journal").write_bytes((clean_out / "optuna.journal").read_bytes())   # another sweep's study
    export = subprocess.run([str(VENV_BIN / "autotaccl"), "export", "--tracking-uri", f"sqlite:///{out / 'mlflow.db'}",
                             "-o", str(tmp_path / "export")], capture_output=True, text=True, timeout=300)
    line = one_line(export)
    assert "the study this store's runs were logged from" in line and "uid" in line, line
    assert not (tmp_path / "export").exists()                  # nothing half-written


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped has stopped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# every configuration of NDV2_SPACE: which worker samples what is left to the race between them, but an
# exhausted space exports the same whatever the order
EXHAUSTIVE = ("--trials", "12", "--sampler", "bruteforce")


@pytest.fixture(scope="module")
def exhaustive_sweep(tmp_path_factory):
    """(run directory, export, trials) of NDV2_SPACE's every configuration, in one process, uninterrupted."""
    tmp = tmp_path_factory.mktemp("exhaustive")
    args, out = _exhaustive_args(tmp)
    done = run_tune(*args)
    assert done.returncode == 0, done.stderr
    return out, exported(f"sqlite:///{out / 'mlflow.db'}", tmp / "export"), study_trials(out)


def _exhaustive_args(tmp_path: Path) -> tuple[list[str], Path]:
    args, out = sweep_args(tmp_path)
    return [*args, *EXHAUSTIVE], out                        # the later --trials and --sampler win


def test_workers_stop_once_their_killed_parent_is_gone_and_the_next_start_redoes_their_trials(exhaustive_sweep,
                                                                                              tmp_path):
    args, out = _exhaustive_args(tmp_path)
    driver = subprocess.Popen(tune_cmd(*args, "--workers", "3"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (len(workers) == 3 and _started(out)):
            workers = _children(driver.pid)
            time.sleep(0.2)
        assert len(workers) == 3, workers
        driver.kill()                                           # SIGKILL: the driver can tell no one
        driver.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(map(_alive, workers)):
            time.sleep(0.2)
        assert not any(map(_alive, workers)), [w for w in workers if _alive(w)]
    finally:
        for pid in [driver.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert any(t.state == TrialState.FAIL and t.user_attrs.get("interrupted") for t in study_trials(out))
    again = run_tune(*args)
    assert again.returncode == 0, again.stderr
    assert_like_clean(out, exhaustive_sweep, tmp_path / "export", trials=12)


def _started(out: Path) -> bool:
    """The sweep has a trial running or done (its workers are past their start)."""
    try:
        return any(t.state in (TrialState.RUNNING, TrialState.COMPLETE) for t in study_trials(out))
    except (KeyError, FileNotFoundError, ValueError):         # no journal, or no study in it yet
        return False
