"""MLflow logging that outlives an unreachable tracking server.

``log_run`` retries with back-off, then appends the run to ``OUT/mlflow-pending/<host>-<pid>.jsonl`` and
warns; ``replay`` (``tune`` at start and end, each worker on exit, ``export --replay``) logs pending runs
and removes them. Each record is keyed, so logging it again replaces a half-written run: a record
becomes exactly one run. An append is whole or nothing; a damaged line is skipped with a warning."""
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


def record_key(parent_run_id: str, key: str) -> str:
    """A sweep's child run is the one of its key under its parent run (``trial-7``, ``baseline-ring``)."""
    return f"{parent_run_id}/{key}"


def trial_key(number: int) -> str:
    """The key of trial ``number``'s run: its identity, whatever its (descriptive) run name."""
    return f"trial-{number}"


def key_number(key: str) -> int | None:
    """The trial number of a :func:`trial_key` (None for other keys)."""
    head, _, tail = key.partition("-")
    return int(tail) if head == "trial" and tail.isdigit() else None


def log_run(client, out_dir: str | Path, experiment_id: str, run_name: str, patient: bool = True,
            key: str | None = None, **kwargs: Any) -> str | None:
    """``tracking.log_run`` with retries (one attempt unless ``patient``); None if the run was recorded
    locally instead. A child run (``parent_run_id``) replaces the earlier runs of its ``key`` (default:
    its name) under that parent (``record_key``)."""
    global _down_until
    replaces = bool(kwargs.get("parent_run_id"))
    record = record_key(kwargs["parent_run_id"], key or run_name) if replaces else uuid.uuid4().hex
    kwargs["tags"] = {**kwargs.get("tags", {}), RECORD: record}
    delays = DELAYS if patient and time.monotonic() >= _down_until else ()
    error: Exception | None = None
    for attempt in range(len(delays) + 1):
        try:
            if attempt or replaces:
                drop_runs(client, experiment_id, record)
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
    """Append one record as one line, whole or not at all (a short write is cut back off the file)."""
    folder = pending_dir(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{socket.gethostname()}-{os.getpid()}.jsonl"
    data = (json.dumps(record) + "\n").encode()
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fcntl.lockf(fd, fcntl.LOCK_EX)
        if _same_file(fd, path):
            break
        os.close(fd)              # a replay emptied and removed it while we waited for the lock: open it anew
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, end)         # freeing space needs none: the file is as it was
            raise
    finally:
        os.close(fd)
    return path


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open ``fd`` is still the file at ``path`` (not one a replay removed)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _runs(client, experiment_id: str, record: str) -> list:
    return client.search_runs([experiment_id], filter_string=f"tags.`{RECORD}` = '{record}'", max_results=100)


def has_run(client, experiment_id: str, record: str) -> bool:
    """Whether a run holds record key ``record``."""
    return bool(_runs(client, experiment_id, record))


def drop_runs(client, experiment_id: str, record: str) -> None:
    """Delete the runs holding record key ``record`` (an earlier attempt at the same run)."""
    for run in _runs(client, experiment_id, record):
        client.delete_run(run.info.run_id)


def _records(path: Path, text: str) -> list[tuple[str, dict | None]]:
    """(line, record) per non-empty line; record None for a damaged line (a write cut short), with a warning."""
    out: list[tuple[str, dict | None]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((line, json.loads(line)))
        except json.JSONDecodeError:
            log.warning("%s: line %d is not a whole record (a write cut short); skipped", path, number)
            out.append((line, None))
    return out


def pending(out_dir: str | Path) -> int:
    """How many runs wait to be replayed."""
    folder = pending_dir(out_dir)
    if not folder.is_dir():
        return 0
    return sum(1 for p in folder.glob("*.jsonl") for _, record in _records(p, p.read_text()) if record is not None)


def pending_records(out_dir: str | Path) -> list[dict]:
    """The records waiting to be replayed (their tags say which run each one is)."""
    folder = pending_dir(out_dir)
    if not folder.is_dir():
        return []
    return [record for p in sorted(folder.glob("*.jsonl")) for _, record in _records(p, p.read_text()) if record]


def replay(out_dir: str | Path, client) -> tuple[int, int]:
    """Log the pending runs; returns (logged, still pending). Records that fail again stay in their file;
    damaged lines are dropped (they cannot become a run)."""
    folder = pending_dir(out_dir)
    if not folder.is_dir():
        return 0, 0
    logged = left = 0
    for path in sorted(folder.glob("*.jsonl")):
        with open(path, "r+") as fh:
            fcntl.lockf(fh, fcntl.LOCK_EX)
            keep = []
            for line, record in _records(path, fh.read()):
                if record is None:
                    continue
                try:
                    drop_runs(client, record["experiment_id"], record["record"])
                    tracking.log_run(client, record["experiment_id"], record["run_name"], **_decode(record))
                    logged += 1
                except Exception as err:
                    log.warning("replaying %s from %s failed: %s", record["run_name"], path, _short(err))
                    keep.append(line)
            if not keep:          # removed under the lock: a writer waiting for it opens the file anew
                path.unlink()
                continue
            # rewritten in place, never longer than it was (so no space is needed)
            fh.seek(0)
            fh.write("".join(k + "\n" for k in keep))
            fh.truncate()
            fh.flush()
            os.fsync(fh.fileno())
        left += len(keep)
    if logged:
        log.warning("replayed %d MLflow run(s) recorded while the server was unreachable", logged)
    return logged, left
