"""Real services for the cluster tests: a PostgreSQL server and an MLflow tracking server.

PostgreSQL: ``AUTOTACCL_TEST_POSTGRES`` (set by .ci/run), else ``bash .ci/postgres start`` is run here.
MLflow: ``mlflow server`` on a free 127.0.0.1 port, one worker, no job runner, its SQLite store copied
from the migrated template of ``support.fresh_store`` (a fresh store takes 8-12 s to migrate).
"""
from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from support import REPO, VENV_BIN, fresh_store


def postgres_url() -> str:
    url = os.environ.get("AUTOTACCL_TEST_POSTGRES")
    if url:
        return url
    out = subprocess.run(["bash", str(REPO / ".ci" / "postgres"), "start"], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    line = [x for x in out.splitlines() if "AUTOTACCL_TEST_POSTGRES=" in x][-1]
    url = shlex.split(line.split("=", 1)[1])[0]
    os.environ["AUTOTACCL_TEST_POSTGRES"] = url
    return url


@pytest.fixture(scope="session")
def postgres() -> str:
    return postgres_url()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """``mlflow server`` as a child process; ``stop()``/``start()`` keep the store and the port."""

    def __init__(self, root: Path) -> None:
        self.root = root
        fresh_store(root)
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, wait: float = 90.0) -> None:
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        log = open(self.root / "server.log", "ab")
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
             "--default-artifact-root", str(self.root / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            env=env, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
            if self.proc.poll() is not None:
                break
        raise RuntimeError(f"mlflow server did not start: {(self.root / 'server.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)       # the server and its uvicorn worker
            self.proc.wait(timeout=30)
        self.proc = None


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
