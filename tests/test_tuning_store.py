"""A migrated, empty MLflow SQLite store for the tuning tests, created once per machine and copied.

Creating a fresh store runs MLflow's alembic migrations (8-12 s here, ecosystem.md §2.1); the tuning
tests need one real store each, so they copy this one (made by MLflow itself) into their run directory,
where `autotaccl tune` finds it as its default store.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

TEMPLATE = Path(tempfile.gettempdir()) / f"autotaccl-test-mlflow-{mlflow.__version__}.db"


def fresh_store(out: Path) -> str:
    """Put an empty, migrated store at ``out/mlflow.db``; returns its tracking URI."""
    out.mkdir(parents=True, exist_ok=True)
    if not TEMPLATE.exists():
        with open(TEMPLATE.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not TEMPLATE.exists():
                tmp = TEMPLATE.with_name(f"{TEMPLATE.name}.{os.getpid()}.tmp")
                MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)
                tmp.replace(TEMPLATE)
    shutil.copyfile(TEMPLATE, out / "mlflow.db")
    return f"sqlite:///{out / 'mlflow.db'}"


def test_copied_store_is_a_working_empty_mlflow_store(tmp_path):
    uri = fresh_store(tmp_path)
    client = MlflowClient(tracking_uri=uri)
    assert [e.name for e in client.search_experiments()] == ["Default"]
    eid = client.create_experiment("x")
    run = client.create_run(eid)
    client.log_metric(run.info.run_id, "m", 1.0)
    assert client.get_run(run.info.run_id).data.metrics == {"m": 1.0}
