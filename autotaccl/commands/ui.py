"""``autotaccl ui``: the MLflow UI on 127.0.0.1 over a sweep's store, with links to each runs table."""
from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ..errors import InputError, ParameterError
from ..safety import tracking_uri


def register(subparsers) -> None:
    p = subparsers.add_parser("ui", help="start the MLflow UI (127.0.0.1) on a sweep's tracking store")
    p.add_argument("--tracking-uri", help="MLflow store (default sqlite:///OUT/mlflow.db)")
    p.add_argument("--out", default="autotaccl-runs", help="run directory of `autotaccl tune` (default ./autotaccl-runs)")
    p.add_argument("--port", type=int, default=5000, help="TCP port on 127.0.0.1 (default 5000)")
    p.add_argument("--startup-timeout", type=float, default=120.0, help="seconds to wait for the server")
    p.set_defaults(func=run)


def server_command(uri: str, port: int) -> tuple[list[str], dict[str, str]]:
    """The MLflow server as ecosystem.md §2.2 measured it cheapest: one worker, no job runner, loopback only."""
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]
    return cmd, env


def wait_ready(base: str, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.5)
    return False


def port_free(port: int) -> None:
    """Refuse a port something already listens on: the UI would otherwise find that server's /health,
    print its URL and exit 0 once its own server failed to bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # as the server binds: TIME_WAIT is free
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as err:
            if err.errno != errno.EADDRINUSE:
                raise
            raise ParameterError("--port", str(port), f"a free TCP port (127.0.0.1:{port} is in use: pass another "
                                                      f"--port)") from None


def run(args) -> int:
    from .. import tracking

    if not 0 < args.port < 65536:
        raise InputError("--port", str(args.port), "a TCP port 1..65535")
    if args.tracking_uri:
        uri = tracking.existing_store(tracking_uri(args.tracking_uri))
    else:
        db = Path(args.out) / "mlflow.db"
        if not db.is_file():
            raise InputError("--out", args.out, "a run directory of `autotaccl tune` (it has no mlflow.db)")
        uri = tracking.existing_store(tracking.default_tracking_uri(Path(args.out)))
    port_free(args.port)
    client = tracking.MlflowClient(tracking_uri=uri)
    experiments = [e for e in client.search_experiments(max_results=10_000) if "autotaccl.target" in e.tags]
    cmd, env = server_command(uri, args.port)
    # its own process group: mlflow server runs uvicorn as a child, and both must go when we do
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{args.port}"
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        if not wait_ready(base, proc, args.startup_timeout):
            print(f"autotaccl: error: the MLflow server did not start on {base}", file=sys.stderr)
            return 1
        print(f"MLflow UI on {base} (store {uri}); Ctrl-C stops it", flush=True)
        for e in experiments:
            print(f"  {e.name}: {tracking.runs_url(base, e.experiment_id)}", flush=True)
        return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop_group(proc)


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL it if it lingers."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
