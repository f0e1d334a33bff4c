"""The migrated MLflow SQLite store the tuning tests copy (``support.fresh_store``) is a working, empty store."""
from __future__ import annotations

from mlflow.tracking import MlflowClient

from support import fresh_store

def test_copied_store_is_a_working_empty_mlflow_store(tmp_path):
    uri = fresh_store(tmp_path)
    client = MlflowClient(tracking_uri=uri)
    assert [e.name for e in client.search_experiments()] == ["Default"]
    eid = client.create_experiment("x")
    run = client.create_run(eid)
    client.log_metric(run.info.run_id, "m", 1.0)
    assert client.get_run(run.info.run_id).data.metrics == {"m": 1.0}
