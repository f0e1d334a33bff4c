"""Real services for the cluster tests: a PostgreSQL server and an MLflow tracking server.

PostgreSQL: ``AUTOTACCL_TEST_POSTGRES`` (set by .ci/run), else ``bash .ci/postgres start`` is run here.
MLflow: ``mlflow server`` on a free 127.0.0.1 port, one worker, no job runner, its SQLite store copied
from the migrated template of ``support.fresh_store`` (a fresh store takes 8-12 s to migrate).
"""
from __future__ import annotations

import pytest

from support import MlflowServer, postgres_url


@pytest.fixture(scope="session")
def postgres() -> str:
    return postgres_url()


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """One server for a module's tests (they use distinct study names)."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_mlflow_server(tmp_path):
    """A server of the test's own, which it may stop and restart."""
    server = MlflowServer(tmp_path / "mlflow-server")
    server.start()
    yield server
    server.stop()
