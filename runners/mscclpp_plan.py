"""The ``mscclpp`` runner: execute an MSCCL++ execution plan with MSCCL++'s own Python executor on GPUs.

One MPI rank per GPU (the launcher as the mpi runner builds it) runs :mod:`runners.mscclpp_rank`: it
loads the plan (``mscclpp.ExecutionPlan``), calls ``Executor.execute`` on CuPy buffers for every size,
times ``iters`` calls after ``warmup`` with CUDA events and, with ``check``, fills the inputs with a
pattern per rank and counts the output elements that differ from the collective's result (as nccl-tests
``-c``). The plan's ``inplace`` flag is the mode it runs (the executor matches one); ``offset`` places the
buffers that many bytes inside bigger allocations, as PyTorch's caching allocator does. The target is a plan file
(lowering needs the topology: ``autotaccl lower --runtime mscclpp``). Without the ``mscclpp`` package,
CuPy or a GPU it refuses in one line naming what is missing.
"""
from __future__ import annotations

import importlib.util
import json
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from autotaccl.errors import InputError
from autotaccl.model.collectives import make_collective

from runners import launch
from runners.contract import MSCCLPP_PLAN, check, check_launched, check_ranks
from runners.mpi import launcher_command
from runners.results import frame, make_row

GPU_DEVICES = ("/dev/nvidia0", "/dev/kfd")          # CUDA, ROCm
DTYPES = ("float32", "float16", "int32")            # bench's dtypes that mscclpp.DataType has


@dataclass(frozen=True)
class MscclppOptions:
    np: int | None = None            # ranks to launch, one per GPU (required unless launcher is a whole line)
    launcher: str | None = None      # with np: the launcher (mpiexec by default); without: the whole launcher line
    hostfile: str | None = None
    python: str = sys.executable     # the interpreter the ranks run (it must import mscclpp, cupy, mpi4py)
    iters: int = 20
    warmup: int = 5
    dtype: str = "float32"
    op: str = "sum"
    check: bool = True               # verify every output element after the timed calls
    offset: int = 0                  # bytes in front of each buffer inside its allocation
    timeout: float = 600.0
    workdir: str | None = None

    def __post_init__(self) -> None:
        check_ranks(self, "mscclpp")
        check_launched(self)
        check(self.dtype in DTYPES, "--dtype", self.dtype, f"one of {', '.join(DTYPES)} (the executor's data types)")
        check(self.op == "sum", "--op", self.op, "sum (our plans' reductions are sums; the executor takes no op)")
        check(self.offset >= 0 and self.offset % 16 == 0, "--offset", self.offset,
              "a byte offset >= 0, a multiple of 16 (the plans' buffer alignment)")


def missing() -> str | None:
    """What this machine lacks to run a plan (None: nothing)."""
    if importlib.util.find_spec("mscclpp") is None:
        return "the Python package mscclpp (build it from microsoft/mscclpp: pip install ./mscclpp)"
    if importlib.util.find_spec("cupy") is None:
        return "the Python package cupy (pip install cupy-cuda12x)"
    if not any(Path(d).exists() for d in GPU_DEVICES):
        return f"a GPU (none of {', '.join(GPU_DEVICES)} exists)"
    return None


def plan_header(path: Path) -> tuple[str, int, bool]:
    """(collective, ranks, inplace) of a plan file, read strictly by our parser."""
    from autotaccl.formats.mscclpp import read_plan

    plan, _ = read_plan(path)
    return plan.collective, plan.ranks, plan.inplace


def rank_command(options: MscclppOptions, plan: Path, sizes: Sequence[int], out: Path) -> list[str]:
    """The whole command line: launcher, then the rank program with the plan and the sizes."""
    head = launcher_command(options.launcher or "mpiexec", options.np, options.hostfile) if options.np is not None \
        else shlex.split(options.launcher)
    return head + [options.python, "-m", "runners.mscclpp_rank", str(plan), "--sizes",
                   ",".join(str(s) for s in sizes), "--iters", str(options.iters), "--warmup", str(options.warmup),
                   "--dtype", options.dtype, "--op", options.op, "--offset", str(options.offset),
                   "--out", str(out)] + (["--check"] if options.check else [])


class MscclppRunner(launch.LaunchedRunner):
    """MSCCL++ execution plans on GPUs, through MSCCL++'s Python executor."""

    name = "mscclpp"
    runtime_file = MSCCLPP_PLAN
    Options = MscclppOptions

    def measure(self, target, sizes: Sequence[int], options: MscclppOptions) -> pd.DataFrame:
        return measure(target, sizes, options)


def measure(target, sizes: Sequence[int], options: MscclppOptions) -> pd.DataFrame:
    """Rows for the plan at ``target`` (a ``.plan.json``) at ``sizes``, in the plan's buffer mode."""
    if not isinstance(target, (str, Path)):
        raise InputError("--runner mscclpp", type(target).__name__, "an MSCCL++ plan file (.plan.json): lower the "
                         "algorithm first (autotaccl lower A.json --runtime mscclpp --hardware H -o A.plan.json)")
    plan = Path(target)
    if not plan.is_file():
        raise InputError(str(plan), "file", "an existing MSCCL++ execution plan (.plan.json)")
    collective, ranks, inplace = plan_header(plan)
    if options.np is not None and options.np != ranks:
        raise InputError("--np", str(options.np), f"the plan's {ranks} ranks (one per GPU)")
    lack = missing()
    if lack is not None:
        raise InputError("--runner mscclpp", "this machine", lack)
    with tempfile.TemporaryDirectory(prefix="autotaccl-mscclpp-") as tmp:
        work = Path(options.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        out = (work / "mscclpp-rows.json").resolve()
        out.unlink(missing_ok=True)
        argv = rank_command(options, plan.resolve(), sizes, out)
        outcome = launch.run(argv, work, options.timeout)
        if outcome.timed_out:
            raise launch.JobTimeout(f"mscclpp timed out after {options.timeout:g} s and was killed: {' '.join(argv)}")
        if outcome.returncode != 0 or not out.is_file():
            tail = " | ".join((outcome.stdout + outcome.stderr).strip().splitlines()[-3:])
            raise launch.JobError(f"mscclpp ranks failed (exit status {outcome.returncode}): {tail}")
        return rows_frame(json.loads(out.read_text()), collective, ranks, inplace, options)


def rows_frame(measured: list[dict], collective: str, ranks: int, inplace: bool,
               options: MscclppOptions) -> pd.DataFrame:
    """The rank program's rows ({size, count, time_us, wrong}) in the contract's columns."""
    coll = make_collective(collective, ranks)
    return frame([make_row(coll, r["size"], r["count"], options.dtype, options.op, inplace, r["time_us"],
                           r["wrong"] if options.check else float("nan")) for r in measured])
