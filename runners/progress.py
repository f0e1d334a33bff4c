"""Per-rank heartbeat files: what each rank is doing, so a failed or hung job can be explained.

A rank's background thread rewrites ``rank-<r>.json`` (atomically) every ``period`` seconds with its
pid, host, the phase it is in and the operation it is blocked on. The driver reads these files when
the job fails or times out; a rank whose file stopped changing is stopped or stuck.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Callable


def heartbeat_path(workdir: str | Path, rank: int) -> Path:
    return Path(workdir) / f"rank-{rank}.json"


class Heartbeat:
    """Start with :meth:`start`; set ``phase`` and ``detail`` (a callable) as the rank goes along."""

    def __init__(self, workdir: str | Path, rank: int, period: float = 0.2) -> None:
        self.path = heartbeat_path(workdir, rank)
        self.rank = rank
        self.period = period
        self.phase = "starting"
        self.detail: Callable[[], str] | None = None
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        self.write()
        self._thread.start()
        return self

    def stop(self, phase: str = "finished") -> None:
        self._stop.set()
        self._thread.join()
        self.phase = phase
        self.detail = None
        self.write()

    def fail(self, error: str) -> None:
        self.error = error
        self._stop.set()
        self.write()

    def write(self) -> None:
        try:
            doing = self.detail() if self.detail else ""
        except Exception:  # the detail is best effort; never let it kill the heartbeat
            doing = ""
        record = {"rank": self.rank, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time(),
                  "phase": self.phase, "doing": doing, "error": self.error}
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(json.dumps(record))
            tmp.replace(self.path)
        except OSError:  # the job directory is not shared with this node: no heartbeat from here
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.write()


def read_heartbeats(workdir: str | Path) -> dict[int, dict]:
    """Rank -> its last heartbeat record (ranks that never wrote one are absent)."""
    out = {}
    for path in Path(workdir).glob("rank-*.json"):
        try:
            record = json.loads(path.read_text())
            out[int(record["rank"])] = record
        except (OSError, ValueError, KeyError):
            continue
    return out
