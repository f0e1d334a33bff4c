"""MLflow logging that outlives an unreachable tracking server.

``log_run`` tries ``tracking.log_run`` a few times with back-off. If the server still does not answer,
the run is appended to ``OUT/mlflow-pending/<host>-<pid>.jsonl`` (one JSON object per run, artifacts
inline) and a warning says so; the sweep goes on. ``replay`` (called by ``autotaccl tune`` at start and
end, by each worker when it exits, and by ``autotaccl export --replay OUT``) logs pending runs and removes
them from the file. Every attempt tags its run with a record id, so a run half-written when the server
went away is deleted before the record is logged again: a record becomes exactly one run.
"""
from __future__ import annotations

import base64
import fcntl
import json
import logging
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from .. import tracking

log = logging.getLogger(__name__)

RECORD = "autotaccl.record"
PENDING = "mlflow-pending"
DELAYS = (1.0, 2.0, 4.0)       # back-off between attempts
QUIET = 30.0                  # after a fallback, skip the retries for this long (one attempt only)
_down_until = 0.0


def limit_client_retries() -> None:
    """MLflow's HTTP client retries 7 times with exponential back-off (minutes); ours is bounded instead."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")


def unreachable(err: Exception) -> bool:
    """MLflow's REST client reports a refused connection or time-out this way."""
    return "API request to" in str(err) and ("Max retries" in str(err) or "timed out" in str(err).lower())


def retrying(fn, *args, waits: tuple[float, ...] = (1, 2, 4, 8, 15, 30, 30, 30)):
    """``fn(*args)``, waiting for an unreachable tracking server (about 2 minutes) before giving up."""
    for wait in (*waits, None):
        try:
            return fn(*args)
        except Exception as err:
            if wait is None or not unreachable(err):
                raise
            log.warning("MLflow unreachable (%s); retrying in %g s", _short(err), wait)
            time.sleep(wait)


def pending_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / PENDING


def log_run(client, out_dir: str | Path, experiment_id: str, run_name: str, **kwargs: Any) -> str | None:
    """``tracking.log_run`` with retries; None if the run was recorded locally instead."""
    global _down_until
    record = uuid.uuid4().hex
    kwargs["tags"] = {**kwargs.get("tags", {}), RECORD: record}
    delays = DELAYS if time.monotonic() >= _down_until else ()
    error: Exception | None = None
    for attempt in range(len(delays) + 1):
        try:
            if attempt:
                _delete_partial(client, experiment_id, record)
            run_id = tracking.log_run(client, experiment_id, run_name, **kwargs)
            _down_until = 0.0
            return run_id
        except Exception as err:      # connection refused, time-out, 5xx: all mean "not logged"
            error = err
            if attempt < len(delays):
                time.sleep(delays[attempt])
    _down_until = time.monotonic() + QUIET
    path = _append(out_dir, {"record": record, "tracking_uri": client.tracking_uri, "experiment_id": experiment_id,
                             "run_name": run_name, **_encode(kwargs)})
    log.warning("MLflow at %s unreachable (%s); run %s recorded in %s, replayed by `autotaccl tune --resume`",
                client.tracking_uri, _short(error), run_name, path)
    return None


def _short(err: Exception | None) -> str:
    return str(err).splitlines()[0][:200] if err else "?"


def _encode(kwargs: dict) -> dict:
    out = dict(kwargs)
    out["artifacts"] = {name: ({"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else {"text": v})
                        for name, v in kwargs.get("artifacts", {}).items()}
    out["curves"] = {k: [list(p) for p in v] for k, v in kwargs.get("curves", {}).items()}
    out["params"] = {k: str(v) for k, v in kwargs.get("params", {}).items()}
    out["tags"] = {k: str(v) for k, v in kwargs.get("tags", {}).items()}
    return out


def _decode(record: dict) -> dict:
    kwargs = {k: v for k, v in record.items() if k not in ("record", "tracking_uri", "experiment_id", "run_name")}
    kwargs["artifacts"] = {name: (base64.b64decode(v["b64"]) if "b64" in v else v["text"])
                           for name, v in record.get("artifacts", {}).items()}
    kwargs["curves"] = {k: [tuple(p) for p in v] for k, v in record.get("curves", {}).items()}
    return kwargs


def _append(out_dir: str | Path, record: dict) -> Path:
    folder = pending_dir(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{socket.gethostname()}-{os.getpid()}.jsonl"
    with open(path, "a") as fh:
        fcntl.lockf(fh, fcntl.LOCK_EX)
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return path


def _delete_partial(client, experiment_id: str, record: str) -> None:
    for run in client.search_runs([experiment_id], filter_string=f"tags.`{RECORD}` = '{record}'", max_results=10):
        client.delete_run(run.info.run_id)


def pending(out_dir: str | Path) -> int:
    """How many runs wait to be replayed."""
    folder = pending_dir(out_dir)
    return sum(sum(1 for line in p.read_text().splitlines() if line.strip()) for p in folder.glob("*.jsonl")) \
        if folder.is_dir() else 0


def replay(out_dir: str | Path, client) -> tuple[int, int]:
    """Log the pending runs; returns (logged, still pending). Records that fail again stay in their file."""
    folder = pending_dir(out_dir)
    if not folder.is_dir():
        return 0, 0
    logged = left = 0
    for path in sorted(folder.glob("*.jsonl")):
        with open(path, "r+") as fh:
            fcntl.lockf(fh, fcntl.LOCK_EX)
            keep = []
            for line in fh.read().splitlines():
                if not line.strip():
                    continue
                record = json.loads(line)
                try:
                    _delete_partial(client, record["experiment_id"], record["record"])
                    tracking.log_run(client, record["experiment_id"], record["run_name"], **_decode(record))
                    logged += 1
                except Exception as err:
                    log.warning("replaying %s from %s failed: %s", record["run_name"], path, _short(err))
                    keep.append(line)
            fh.seek(0)
            fh.truncate()
            fh.write("".join(k + "\n" for k in keep))
            fh.flush()
            os.fsync(fh.fileno())
        left += len(keep)     # an emptied file stays: its writer may be waiting for the lock to append
    if logged:
        log.warning("replayed %d MLflow run(s) recorded while the server was unreachable", logged)
    return logged, left
