"""What the checks of a local MLflow store find, on copies of the uninterrupted sweep's run directory
(``clean_sweep``) with its real ``mlflow.db`` cut to half, overwritten with random bytes or emptied: the
commands that only read it (export, export --replay, report, ui) are one line naming the file and
``--repair`` (exit 2) before MLflow reads it, and write nothing; ``tune`` takes an emptied store for a lost
one (one line, then ``--repair`` rebuilds it run for run)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from autotaccl.tracking import sqlite_uri
from support import (SWEEP_ARGS, VENV_BIN, assert_like_clean, free_port, overwrite_middle, run_tune,
                     truncate_half)

pytestmark = pytest.mark.slow      # each case starts a real autotaccl process (importing MLflow: seconds)


def _empty(db: Path) -> None:
    """``> mlflow.db``, or a copy cut off by a full disk before its first page."""
    db.write_bytes(b"")


def _reader(command: str, store: Path, tmp_path: Path) -> list[str]:
    uri = sqlite_uri(store / "mlflow.db")
    return {"export": ["export", "--tracking-uri", uri, "-o", str(tmp_path / "written")],
            "export --replay": ["export", "--tracking-uri", uri, "--replay", str(store), "-o", str(tmp_path / "written")],
            "report": ["report", "--tracking-uri", uri, "-o", str(tmp_path / "written")],
            "ui": ["ui", "--out", str(store), "--port", str(free_port())]}[command]


@pytest.mark.parametrize("damage, command", [
    (truncate_half, "export"),
    (overwrite_middle, "export"),
    (overwrite_middle, "export --replay"),
    (overwrite_middle, "report"),
    (truncate_half, "ui"),
    (_empty, "export"),
])
def test_a_reader_of_a_damaged_store_is_one_line_naming_it_and_writes_nothing(damage, command, clean_sweep, tmp_path):
    store = tmp_path / "runs"
    subprocess.run(["cp", "-a", str(clean_sweep[0]), str(store)], check=True)
    db = store / "mlflow.db"
    damage(db)
    damaged = db.read_bytes()
    done = subprocess.run([str(VENV_BIN / "autotaccl"), *_reader(command, store, tmp_path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    says = "(it is empty)" if damage is _empty else "(SQLite says:"
    assert f"{db}: MLflow store: a whole SQLite database {says}" in lines[0] and "--repair" in lines[0], lines
    assert db.read_bytes() == damaged                       # not "repaired" behind the user's back
    assert not (tmp_path / "written").exists()              # nothing half-written



def test_tune_takes_an_emptied_store_for_a_lost_one_and_repair_rebuilds_it(clean_sweep, tmp_path):
    store = tmp_path / "runs"
    subprocess.run(["cp", "-a", str(clean_sweep[0]), str(store)], check=True)
    args = ["--space", str(clean_sweep[0].parent / "space" / "space.yaml"), *SWEEP_ARGS, "--out", str(store)]
    _empty(store / "mlflow.db")
    refused = run_tune(*args)
    assert refused.returncode == 2, refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{store / 'mlflow.db'}: MLflow store:" in lines[0], refused.stderr
    assert "it is empty" in lines[0] and "--repair" in lines[0], lines
    assert (store / "mlflow.db").stat().st_size == 0                    # refused before MLflow created its tables
    repaired = run_tune(*args, "--repair")
    assert repaired.returncode == 0, repaired.stderr
    assert "it is empty; its runs are rebuilt" in repaired.stderr and "Traceback" not in repaired.stderr
    assert_like_clean(store, clean_sweep, tmp_path / "export")           # every run again, the same export
