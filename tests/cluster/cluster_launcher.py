"""Test double for a flaky cluster launcher: real ``mpiexec`` and real ranks, plus injected rank faults.

Each launch claims at most one ticket from ``$AUTOTACCL_FAULT_TICKETS`` (files ``*.ticket`` holding
``crash`` or ``hang``, claimed by an atomic rename). With a ticket, once rank 1 has written its
heartbeat next to the job file it is SIGKILLed (a crashed rank) or SIGSTOPped (a hung rank: the runner's
time-out must end the job). Usage: ``python cluster_launcher.py -n N PROGRAM... JOB.json``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def claim(folder: Path) -> str | None:
    for ticket in sorted(folder.glob("*.ticket")):
        taken = ticket.with_suffix(".taken")
        try:
            os.rename(ticket, taken)
        except FileNotFoundError:          # another launch took it
            continue
        return taken.read_text().strip()
    return None


def rank_pid(workdir: Path, rank: int) -> int | None:
    try:
        return int(json.loads((workdir / f"rank-{rank}.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def main() -> int:
    folder = os.environ.get("AUTOTACCL_FAULT_TICKETS")
    fault = claim(Path(folder)) if folder else None
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mpiexec"), *sys.argv[1:]])
    if fault:
        workdir = Path(sys.argv[-1]).parent
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            pid = rank_pid(workdir, 1)
            if pid is not None:
                os.kill(pid, signal.SIGKILL if fault == "crash" else signal.SIGSTOP)
                break
            time.sleep(0.02)
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
