"""The migrated MLflow SQLite store the tuning tests copy (``support.fresh_store``) is a working, empty store;
our client's calls into it are whole under Ctrl-C."""
from __future__ import annotations

import os
import signal
import sqlite3

import pytest
from mlflow.tracking import MlflowClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from autotaccl import tracking
from support import fresh_store


def test_copied_store_is_a_working_empty_mlflow_store(tmp_path):
    uri = fresh_store(tmp_path)
    client = MlflowClient(tracking_uri=uri)
    assert [e.name for e in client.search_experiments()] == ["Default"]
    eid = client.create_experiment("x")
    run = client.create_run(eid)
    client.log_metric(run.info.run_id, "m", 1.0)
    assert client.get_run(run.info.run_id).data.metrics == {"m": 1.0}


def _ctrl_c_after(prefix: str):
    """An SQLAlchemy hook that sends this process SIGINT once a statement starting with ``prefix`` has run
    (rows not fetched yet, the write not committed)."""
    def hook(conn, cursor, statement, *args) -> None:
        if " ".join(statement.split()).upper().startswith(prefix):
            os.kill(os.getpid(), signal.SIGINT)
    return hook


@pytest.mark.parametrize("call, statement, runs", [
    (lambda client, eid: client.create_run(eid, run_name="cut"), "INSERT INTO RUNS", ["cut", "first"]),
    (lambda client, eid: client.search_runs([eid]), "SELECT DISTINCT RUNS.", ["first"]),
], ids=["write", "read"])
def test_a_ctrl_c_during_a_call_into_an_sqlite_store_lands_after_it_and_leaves_the_store_unlocked(
        call, statement, runs, tmp_path):
    """A SIGINT right after a statement runs. With MLflow's own client, a read cut there keeps the
    database's shared lock (no writer can commit: 'database is locked' after its busy time-out, the
    Ctrl-C-with-workers flake), and a write cut there is lost; at some such points (2 of 80 random Ctrl-Cs
    during writes, measured) it also keeps the write lock."""
    client = tracking.MlflowClient(tracking_uri=fresh_store(tmp_path))
    eid = client.create_experiment("x")
    client.create_run(eid, run_name="first")
    hook = _ctrl_c_after(statement)
    event.listen(Engine, "after_cursor_execute", hook)
    try:
        with pytest.raises(KeyboardInterrupt):
            call(client, eid)
    finally:
        event.remove(Engine, "after_cursor_execute", hook)
    other = sqlite3.connect(tmp_path / "mlflow.db", timeout=0.5, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")                   # no lock of the cut call is left
    other.execute("ROLLBACK")
    other.close()
    assert sorted(r.info.run_name for r in client.search_runs([eid])) == runs      # a write is whole
