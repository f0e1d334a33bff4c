"""`autotaccl ui` refuses a port that is taken, before it starts a server (a real listening socket)."""
from __future__ import annotations

import socket
import subprocess

import pytest

from support import VENV_BIN, fresh_store


@pytest.mark.slow
def test_ui_on_a_busy_port_fails_and_names_port(tmp_path):
    fresh_store(tmp_path / "runs")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ui = subprocess.run([str(VENV_BIN / "autotaccl"), "ui", "--out", str(tmp_path / "runs"), "--port", str(port)],
                            capture_output=True, text=True, timeout=120)
    assert ui.returncode == 2 and ui.stdout == "", ui.stdout + ui.stderr
    assert ui.stderr.strip() == f"autotaccl: error: --port: {port}: a free TCP port (127.0.0.1:{port} is in use: " \
                                f"pass another --port)"
