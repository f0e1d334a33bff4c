"""Named locks every worker of a sweep can see, wherever it runs.

With a PostgreSQL storage the lock is a session advisory lock in that database: it is released when
the holder's connection ends, so a killed worker never leaves it held. Otherwise the lock is a POSIX
``lockf`` lock on a file in ``lock_dir`` (on the shared file system for several hosts; NFS supports
POSIX locks through lockd / NFSv4), also released by the kernel when the holder dies.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

log = logging.getLogger(__name__)

_engines: dict[str, object] = {}
_engines_lock = threading.Lock()


def is_postgres(storage: str) -> bool:
    return storage.startswith(("postgresql", "postgres://"))


def lock_dir(storage: str, out_dir: str | Path) -> Path:
    """Where file locks live: beside a journal or SQLite file (shared with it), else under the run directory."""
    if "://" not in storage:
        return Path(storage).with_name(Path(storage).name + ".locks")
    if storage.startswith("sqlite:///"):
        path = Path(storage[len("sqlite:///"):])
        return path.with_name(path.name + ".locks")
    return Path(out_dir) / "locks"


def _key(name: str) -> int:
    """A signed 64-bit advisory-lock key for ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def _engine(url: str):
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    with _engines_lock:
        if url not in _engines:
            _engines[url] = create_engine(url, poolclass=NullPool)   # one connection per held lock
        return _engines[url]


class Lock:
    """One named lock; ``acquire``/``release`` (idempotent) or ``with``."""

    def __init__(self, storage: str, out_dir: str | Path, name: str, poll: float = 0.05) -> None:
        self.storage, self.name, self.poll = storage, name, poll
        self.path = None if is_postgres(storage) else lock_dir(storage, out_dir) / (_safe(name) + ".lock")
        self._held = None

    def acquire(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._try():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(self.poll)

    def _try(self) -> bool:
        if self.path is None:
            from sqlalchemy import text

            conn = _engine(self.storage).connect()
            got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": _key(self.name)}).scalar()
            conn.commit()
            if got:
                self._held = conn
                return True
            conn.close()
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._held = fd
        return True

    def release(self) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        if self.path is None:
            from sqlalchemy import text

            try:
                held.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _key(self.name)})
                held.commit()
            finally:
                held.close()
        else:
            fcntl.lockf(held, fcntl.LOCK_UN)
            os.close(held)

    @property
    def held(self) -> bool:
        return self._held is not None

    def __enter__(self) -> "Lock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] + "-" + hashlib.sha256(name.encode()).hexdigest()[:10]


@contextmanager
def hold_all(storage: str, out_dir: str | Path, names: Sequence[str]) -> Iterator[None]:
    """Hold every named lock, taken in sorted order (so two holders of overlapping sets cannot deadlock)."""
    held: list[Lock] = []
    try:
        for name in sorted(set(names)):
            lock = Lock(storage, out_dir, name)
            lock.acquire()
            held.append(lock)
        yield
    finally:
        for lock in reversed(held):
            lock.release()
