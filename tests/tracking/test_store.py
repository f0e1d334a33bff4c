"""The migrated MLflow SQLite store the tuning tests copy (``support.fresh_store``) is a working, empty store;
our client's writes to it are whole under Ctrl-C."""
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


def test_a_ctrl_c_during_a_write_to_an_sqlite_store_lands_after_it_and_leaves_the_store_unlocked(tmp_path):
    """A SIGINT sent as a write statement runs, inside its transaction. MLflow's own client raises there
    and the write is lost; at some such points (2 of 80 random Ctrl-Cs during writes, measured) SQLAlchemy
    also keeps the transaction open, and with it the database's write lock, so every other writer waits
    out its time-out and fails (the Ctrl-C-with-workers flake)."""
    db = tmp_path / "mlflow.db"
    client = tracking.MlflowClient(tracking_uri=fresh_store(tmp_path))
    eid = client.create_experiment("x")

    def ctrl_c(conn, cursor, statement, *args) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO RUNS"):
            os.kill(os.getpid(), signal.SIGINT)

    event.listen(Engine, "before_cursor_execute", ctrl_c)
    try:
        with pytest.raises(KeyboardInterrupt):
            client.create_run(eid, run_name="cut")
    finally:
        event.remove(Engine, "before_cursor_execute", ctrl_c)
    other = sqlite3.connect(db, timeout=0.5, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")                   # the write lock is free
    other.execute("ROLLBACK")
    other.close()
    assert [r.info.run_name for r in client.search_runs([eid])] == ["cut"]     # the write was whole
