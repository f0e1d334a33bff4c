"""The commands that only read a sweep's MLflow store (export, export --replay, report, ui) meet it damaged:
a copy of the uninterrupted sweep's run directory (``clean_sweep``) with its real ``mlflow.db`` cut to half
or overwritten with random bytes. Each is one line naming the file and ``--repair`` (exit 2), before MLflow
reads it, and writes nothing."""
from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from autotaccl.tracking import sqlite_uri
from support import VENV_BIN, free_port

pytestmark = pytest.mark.slow      # each case starts a real autotaccl process (importing MLflow: seconds)


def _truncate(db: Path) -> None:
    os.truncate(db, db.stat().st_size // 2)


def _overwrite(db: Path) -> None:
    """Random bytes over a stretch in the middle of the file, as a bad sector or a stray writer leaves them."""
    with open(db, "r+b") as fh:
        fh.seek(db.stat().st_size // 2)
        fh.write(random.Random(38).randbytes(16384))


def _reader(command: str, store: Path, tmp_path: Path) -> list[str]:
    uri = sqlite_uri(store / "mlflow.db")
    return {"export": ["export", "--tracking-uri", uri, "-o", str(tmp_path / "written")],
            "export --replay": ["export", "--tracking-uri", uri, "--replay", str(store), "-o", str(tmp_path / "written")],
            "report": ["report", "--tracking-uri", uri, "-o", str(tmp_path / "written")],
            "ui": ["ui", "--out", str(store), "--port", str(free_port())]}[command]


@pytest.mark.parametrize("damage, command", [
    (_truncate, "export"),
    (_overwrite, "export"),
    (_overwrite, "export --replay"),
    (_overwrite, "report"),
    (_truncate, "ui"),
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
    assert f"{db}: MLflow store: a whole SQLite database (SQLite says:" in lines[0] and "--repair" in lines[0], lines
    assert db.read_bytes() == damaged                       # not "repaired" behind the user's back
    assert not (tmp_path / "written").exists()              # nothing half-written

