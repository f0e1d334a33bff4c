"""Start a parallel job as a subprocess, bound it by a wall-clock timeout, and leave nothing behind.

The job runs in a new session. On timeout (or after a failure) its process group gets SIGTERM, then
SIGKILL after a grace period; so do all its descendants and any rank pid the caller names, because
MPICH's Hydra starts every rank in a session of its own (killing the launcher's group alone would
miss them). If the process that started the job dies, even by SIGKILL, the kernel kills the launcher
(PR_SET_PDEATHSIG) and Hydra ends the ranks. Output goes to files, never pipes, so a chatty job cannot block.
"""
from __future__ import annotations

import functools
import logging
import os
import select
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

log = logging.getLogger(__name__)


class JobError(RuntimeError):
    """A job failed or timed out; the message says which rank and what it was doing."""


class JobTimeout(JobError):
    pass


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool


def _proc_table() -> dict[int, int]:
    """pid -> parent pid for every process visible in /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                table[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return table


def descendants(pid: int) -> set[int]:
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for child, parent in table.items():
        children.setdefault(parent, []).append(child)
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def owned(pid: int, token: str) -> bool:
    """``pid`` is alive and its command line mentions ``token`` (guards against recycled pids)."""
    try:
        return alive(pid) and token in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


class DeathWatch:
    """Notices, through pidfds, the moment each watched process exits (it need not be our child)."""

    def __init__(self) -> None:
        self.fds: dict[int, int] = {}       # fd -> key
        self.died: dict = {}                # key -> monotonic time of death

    def add(self, key, pid: int) -> None:
        if key in self.died or key in self.fds.values():
            return
        try:
            self.fds[os.pidfd_open(pid)] = key
        except (ProcessLookupError, OSError):
            self.died[key] = time.monotonic()

    def wait(self, seconds: float) -> None:
        ready, _, _ = select.select(list(self.fds), [], [], seconds)
        now = time.monotonic()
        for fd in ready:
            self.died[self.fds.pop(fd)] = now
            os.close(fd)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def terminate(proc: subprocess.Popen, extra: Iterable[int] = (), grace: float = 2.0) -> None:
    """SIGTERM, then SIGKILL, to the job's group, its descendants and ``extra`` pids."""
    pids = descendants(proc.pid) | set(extra)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (proc.poll() is None or any(alive(p) for p in pids)):
            time.sleep(0.05)
        if proc.poll() is not None and not any(alive(p) for p in pids):
            break
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        log.warning("job %d did not exit after SIGKILL", proc.pid)


_PR_SET_PDEATHSIG = 1


def die_with_parent(prctl, parent: int) -> None:
    """In the forked child, before exec: the kernel SIGKILLs it when the process (strictly, the thread)
    that started it dies, however that dies (Linux ``PR_SET_PDEATHSIG``). A killed tune worker thus takes
    its launcher with it, and Hydra's proxies, losing their launcher, end the ranks. ``prctl`` is looked up
    in the parent: nothing is loaded between fork and exec."""
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:       # the parent died between fork and prctl
        os._exit(1)


@functools.cache
def _prctl():
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


def run(argv: Sequence[str], workdir: Path, timeout: float, env: Mapping[str, str] | None = None,
        ranks: Callable[[], Iterable[int]] | None = None, watch: Callable[[float], None] | None = None,
        poll: float = 0.05) -> Outcome:
    """Run ``argv`` to completion or until ``timeout`` seconds.

    While the job runs, ``watch(seconds)`` is called repeatedly and may block that long (it replaces
    the wait); ``ranks()`` names live pids to kill as well when the job fails (processes the launcher
    may have lost track of).
    """
    out_path, err_path = workdir / "stdout.txt", workdir / "stderr.txt"
    start = time.monotonic()
    log.info("running %s", " ".join(map(str, argv)))
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = subprocess.Popen(list(map(str, argv)), stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env=dict(env) if env is not None else None, start_new_session=True,
                                    preexec_fn=functools.partial(die_with_parent, _prctl(), os.getpid()))
        except OSError as error:
            raise JobError(f"cannot start {argv[0]}: {error.strerror or error}") from None
        deadline = start + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            wait = min(poll, max(deadline - time.monotonic(), 0.001))
            if watch:
                watch(wait)
            else:
                try:
                    proc.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    pass
        timed_out = proc.poll() is None
        extra = list(ranks()) if ranks else []
        if timed_out or proc.returncode != 0 or extra:
            terminate(proc, extra)
    return Outcome(proc.returncode, out_path.read_text(errors="replace"), err_path.read_text(errors="replace"),
                   time.monotonic() - start, timed_out)


def hosts(launcher: str | None, hostfile: str | None) -> tuple[str, ...]:
    """The hosts a job of ``launcher`` occupies: its hostfile's, else a Slurm allocation's id, else this host."""
    if hostfile:
        names = set()
        for line in Path(hostfile).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(line.split()[0].split(":")[0])
        if names:
            return tuple(sorted(names))
    argv = shlex.split(launcher or "mpiexec")
    if argv and Path(argv[0]).name == "srun" and os.environ.get("SLURM_JOB_ID"):
        return (f"slurm-job-{os.environ['SLURM_JOB_ID']}",)
    return (socket.gethostname(),)


class LaunchedRunner:
    """What every runner that launches ranks on real machines shares: it holds the hosts of its launcher."""

    real_hardware = True

    def hosts(self, options) -> tuple[str, ...]:
        return hosts(options.launcher, options.hostfile)
