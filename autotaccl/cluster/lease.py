"""Measurement leases: two benchmarks never run on the same hosts at the same time.

Synthesis runs in parallel on every worker; a measurement first takes a lease on each host its ranks
use (from the hostfile, else this host; a Slurm allocation by its job id), through ``locks``, in
sorted order. The simulator needs no lease. The lease window (wall-clock start/end, hosts) is returned
so trials can record it.
"""
from __future__ import annotations

import os
import shlex
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from . import locks


@dataclass
class Window:
    hosts: tuple[str, ...]
    start: float = 0.0           # time.time() once every lease is held
    end: float = 0.0             # time.time() just before they are released
    waited: float = 0.0          # seconds spent waiting for the leases


def hosts_of(runner: str, options: Mapping[str, Any]) -> tuple[str, ...]:
    """The hosts a measurement occupies (empty for the simulator)."""
    if runner == "sim":
        return ()
    hostfile = options.get("hostfile")
    if hostfile:
        hosts = set()
        for line in Path(hostfile).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                hosts.add(line.split()[0].split(":")[0])
        if hosts:
            return tuple(sorted(hosts))
    launcher = shlex.split(str(options.get("launcher") or "mpiexec"))
    if launcher and Path(launcher[0]).name == "srun" and os.environ.get("SLURM_JOB_ID"):
        return (f"slurm-job-{os.environ['SLURM_JOB_ID']}",)
    return (socket.gethostname(),)


@contextmanager
def measuring(storage: str, out_dir: str | Path, runner: str, options: Mapping[str, Any]) -> Iterator[Window]:
    """Hold the leases of the measurement's hosts for the duration of the block."""
    window = Window(hosts_of(runner, options))
    asked = time.time()
    with locks.hold_all(storage, out_dir, [f"host:{h}" for h in window.hosts]):
        window.start = time.time()
        window.waited = window.start - asked
        try:
            yield window
        finally:
            window.end = time.time()
