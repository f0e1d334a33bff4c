"""The ``mpi`` runner: real ranks moving real bytes with mpi4py, launched by mpiexec or srun.

The driver writes a JSON job file (never a pickle), launches ``python -m mpi4py -m runners.mpi_rank``
on every rank (see :mod:`runners.mpi_rank`), waits at most ``timeout`` seconds and reads the result
file rank 0 leaves. A crash or hang ends the whole job (:mod:`runners.launch`) and raises
:class:`~runners.launch.JobError` naming each rank and what it was doing, from the heartbeat files.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from autotaccl.errors import InputError
from autotaccl.model.algorithm import Algorithm, switch_ops, to_json
from autotaccl.model.collectives import Collective

from runners import launch
from runners.contract import check, check_launched
from runners.progress import read_heartbeats
from runners.results import DTYPES, frame, layout

log = logging.getLogger(__name__)
RANK_MODULE = "runners.mpi_rank"


def launcher_command(launcher: str, np: int, hostfile: str | None = None) -> list[str]:
    """The launcher's argv up to the program: ``mpiexec -n N [-hostfile F]`` or ``srun -n N``.

    ``launcher`` is ``mpiexec`` (the one beside this Python first), ``srun``, or an executable path,
    optionally followed by extra arguments (``"mpirun --oversubscribe"``).
    """
    parts = shlex.split(launcher) if launcher else ["mpiexec"]
    head, rest = parts[0], parts[1:]
    if head == "mpiexec":
        local = Path(sys.executable).parent / "mpiexec"
        path = str(local) if local.exists() else shutil.which("mpiexec")
    else:
        path = shutil.which(head) or (head if os.access(head, os.X_OK) and Path(head).is_file() else None)
    if path is None:
        raise InputError("--launcher", repr(launcher), "mpiexec, srun or the path of an executable launcher")
    if hostfile is not None:
        if Path(head).name == "srun":
            raise InputError("--hostfile", hostfile, "no hostfile with srun (Slurm places ranks in its allocation)")
        if not Path(hostfile).is_file():
            raise InputError("--hostfile", hostfile, "an existing hostfile")
        check_hostfile(hostfile)
    cmd = [path, *rest, "-n", str(np)]
    if hostfile is not None:
        cmd += ["-hostfile", str(Path(hostfile).resolve())]
    return cmd


_HOST = re.compile(r"[A-Za-z0-9_.\-\[\]]+(:[1-9][0-9]*(:[A-Za-z0-9_.\-]+)?)?")
_HOST_OPTION = re.compile(r"(slots|max[-_]slots)=[1-9][0-9]*")


def check_hostfile(hostfile: str) -> None:
    """Each line ``HOST``, ``HOST:N`` (MPICH) or ``HOST slots=N [max_slots=M]`` (Open MPI); # comments."""
    expected = "HOST, HOST:N or HOST slots=N (an MPICH / Open MPI hostfile line)"
    try:
        lines = Path(hostfile).read_text().splitlines()
    except UnicodeDecodeError:
        raise InputError(hostfile, "file", "a UTF-8 text hostfile") from None
    hosts = 0
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if not _HOST.fullmatch(words[0]) or not all(_HOST_OPTION.fullmatch(w) for w in words[1:]):
            raise InputError(hostfile, f"line {number}", expected)
        hosts += 1
    if not hosts:
        raise InputError(hostfile, "hosts", "at least one host line")


def rank_environment() -> dict[str, str]:
    """This environment, with the directory holding ``runners`` first on PYTHONPATH."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


@dataclass(frozen=True)
class JobOptions:
    np: int
    launcher: str = "mpiexec"
    hostfile: str | None = None
    timeout: float = 300.0
    workdir: str | None = None      # keep the job's files here (default: a temporary directory, in the
                                    # current directory when ranks may run on other nodes)


def run_job(tasks: list[dict], options: JobOptions, settings: dict | None = None) -> list:
    """Run ``tasks`` in one MPI job; returns each task's result (rank 0's ``result.json``)."""
    cmd = launcher_command(options.launcher, options.np, options.hostfile)
    # ranks on other nodes write heartbeats next to the job file: off this node, keep it in the current
    # directory (usually on the shared file system) rather than in this node's /tmp
    local = options.hostfile is None and shlex.split(options.launcher or "mpiexec")[0] == "mpiexec"
    with tempfile.TemporaryDirectory(prefix="autotaccl-mpi-", dir=None if local else Path.cwd()) as tmp:
        workdir = Path(options.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for stale in (*workdir.glob("rank-*.json"), workdir / "result.json"):
            stale.unlink(missing_ok=True)
        job_path = workdir / "job.json"
        job_path.write_text(json.dumps({"ranks": options.np, "tasks": tasks, **(settings or {})}))
        argv = [*cmd, sys.executable, "-m", "mpi4py", "-m", RANK_MODULE, str(job_path)]
        token = str(job_path)

        host = socket.gethostname()
        pids: dict[int, int] = {}            # rank -> pid, once its heartbeat names it
        deaths = launch.DeathWatch()          # which rank died first, while the job still ran

        def watch(seconds: float) -> None:
            if len(pids) < options.np:  # ranks on this node only: a pid means nothing elsewhere
                pids.update((r, b["pid"]) for r, b in read_heartbeats(workdir).items() if b["host"] == host)
                for rank, pid in pids.items():
                    deaths.add(rank, pid)
            deaths.wait(seconds)

        def stray() -> list[int]:
            return [pid for pid in pids.values() if launch.owned(pid, token)]

        try:
            outcome = launch.run(argv, workdir, options.timeout, env=rank_environment(), ranks=stray, watch=watch)
        finally:
            deaths.close()
        result = workdir / "result.json"
        if outcome.timed_out or outcome.returncode != 0 or not result.is_file():
            message = explain(outcome, read_heartbeats(workdir), options.timeout, deaths.died)
            raise (launch.JobTimeout if outcome.timed_out else launch.JobError)(message)
        return json.loads(result.read_text())["tasks"]


_EXIT_STRING = re.compile(r"TERMINATED WITH THE EXIT STRING: (.*)")


def explain(outcome: launch.Outcome, beats: dict[int, dict], timeout: float,
            deaths: dict[int, float] | None = None) -> str:
    """One paragraph: how the job ended, which rank failed first, then every rank's last known state.

    Ranks whose deaths were noticed in the same instant (the watch woke to find them all gone: the
    launcher kills the rest within milliseconds of the first) are all named first, as tied."""
    deaths = deaths or {}
    earliest = min(deaths.values(), default=None)
    first = sorted(r for r, t in deaths.items() if t == earliest)
    head = (f"mpi job timed out after {timeout:g} s and was killed" if outcome.timed_out
            else f"mpi job failed (exit status {outcome.returncode})")
    how = _EXIT_STRING.search(outcome.stdout + outcome.stderr)
    newest = max((b["time"] for b in beats.values()), default=0.0)
    parts = []
    for rank in sorted(beats, key=lambda r: (r not in first, r)):
        b = beats[rank]
        who = f"rank {rank} (pid {b['pid']} on {b['host']})"
        state = (f"{b['doing']}, " if b.get("doing") else "") + f"in {b['phase']}"
        if b.get("error"):
            parts.append(f"{who} raised {b['error'].splitlines()[0][:200]} while {state}")
        elif rank in first:
            others = [str(r) for r in first if r != rank]
            tied = (f" (tied with rank{'s' if len(others) > 1 else ''} {', '.join(others)}: gone in the same "
                    "instant)") if others else ""
            parts.append(f"{who} died first{f' ({how.group(1).strip()})' if how else ''}{tied} while {state}")
        elif outcome.timed_out and newest - b["time"] > 1.0:  # its neighbours beat every 0.2 s up to the kill
            parts.append(f"{who} silent for {newest - b['time']:.1f} s before the kill (stopped or stuck), "
                         f"last {state}")
        else:
            parts.append(f"{who} {state}")
    if not parts:
        last = (outcome.stderr.strip() or outcome.stdout.strip()).splitlines()[-3:]
        parts.append("no rank started" + (": " + " | ".join(last) if last else ""))
    return f"{head}: " + "; ".join(parts)


@dataclass(frozen=True)
class MpiOptions:
    np: int | None = None           # ranks to launch (default: the algorithm's)
    launcher: str = "mpiexec"
    hostfile: str | None = None
    timeout: float = 300.0
    workdir: str | None = None
    dtype: str = "float32"
    op: str = "sum"
    iters: int = 20
    warmup: int = 5
    check: bool = True              # compare every output element with the expected result

    def __post_init__(self) -> None:
        check_launched(self)


class MpiRunner(launch.LaunchedRunner):
    """Real ranks on the hostfile's hosts (or this one); ``--baseline mpi`` times MPI's own collective too."""

    name = "mpi"
    runtime_file = None
    Options = MpiOptions
    baselines = {"mpi": "MPI's own"}

    def measure(self, target: Algorithm, sizes: Sequence[int], options: MpiOptions) -> pd.DataFrame:
        return measure_many([target], sizes, options)[0]

    def measure_with_baseline(self, target: Algorithm, sizes: Sequence[int], options: MpiOptions,
                              baseline: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        check(baseline in self.baselines, "--baseline", baseline, f"one of: {', '.join(self.baselines)}")
        mine, theirs = measure_many([target, target.collective], sizes, options)
        return mine, theirs


BUFFERS_PER_SIZE = 4     # a rank holds input, output and scratch buffers and the check's expected values


def check_memory(largest: int, ranks: int) -> None:
    """Refuse (before launching) sizes whose buffers the ranks on this host cannot hold together: ranks
    that run out of memory are killed one by one, minutes in, or stall the machine."""
    need = BUFFERS_PER_SIZE * largest * ranks
    available = _available_memory()
    if available is not None and need > available:
        from autotaccl.sizes import format_size

        raise InputError("--sizes", repr(format_size(largest)), f"sizes whose buffers fit in this host's memory "
                         f"({ranks} ranks x about {BUFFERS_PER_SIZE} x {format_size(largest)} = {need / 2**30:.1f} GiB, "
                         f"{available / 2**30:.1f} GiB available)")


def _available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def measure_many(algorithms: Sequence[Algorithm | Collective], sizes: Sequence[int],
                 options: MpiOptions = MpiOptions(), inplace: Sequence[bool] = (False, True)) -> list[pd.DataFrame]:
    """Measure several algorithms (or, for a :class:`Collective`, MPI's own collective) in one job."""
    if not algorithms:
        return []
    ranks = {a.collective.ranks if isinstance(a, Algorithm) else a.ranks for a in algorithms}
    if len(ranks) != 1:
        raise InputError("algorithms", "ranks", "the same number of ranks for all algorithms of one job")
    ranks_needed = ranks.pop()
    for a in algorithms:        # multimem needs an NVSwitch: MPI ranks on CPUs have none to reduce in
        if isinstance(a, Algorithm) and switch_ops(a):
            raise InputError(a.name or "algorithm", "transfers", "no switch operations (the mpi runner moves data "
                                                                 "between ranks only; --runner sim times them)")
    np = ranks_needed if options.np is None else options.np
    if np != ranks_needed:
        raise InputError("--np", str(np), f"{ranks_needed}, the number of ranks of the algorithm")
    tasks = [{"kind": "algorithm", "algorithm": to_json(a)} if isinstance(a, Algorithm) else
             {"kind": "mpi", "collective": {"name": a.name, "ranks": a.ranks, "chunkup": a.chunkup, "root": a.root}}
             for a in algorithms]
    settings = {"sizes": [int(s) for s in sizes], "dtype": options.dtype, "op": options.op, "iters": options.iters,
                "warmup": options.warmup, "check": options.check, "modes": [bool(m) for m in inplace]}
    for item in algorithms:
        coll = item.collective if isinstance(item, Algorithm) else item
        tiny = [s for s in sizes if layout(coll, s, DTYPES[options.dtype][1]().itemsize).chunk_elems == 0]
        if tiny:
            log.warning("%s: sizes %s hold less than one element per chunk and are skipped",
                        getattr(item, "name", coll.name), ", ".join(map(str, tiny)))
    if options.hostfile is None:
        check_memory(max(sizes), np)
    job = JobOptions(np, options.launcher, options.hostfile, options.timeout, options.workdir)
    results = run_job(tasks, job, settings)
    return [frame(rows) for rows in results]
