"""The ``nccl-tests`` runner: run an nccl-tests binary with an MSCCL XML loaded, parse its table.

The environment loads the XML into both MSCCL runtimes (``msccl-xml-and-nccl-tests.md`` §6): the
legacy runtime reads ``MSCCL_XML_FILES`` (with ``NCCL_ALGO=MSCCL,RING,TREE``), the executor reads every
file in ``MSCCL_ALGO_DIR`` (with ``NCCL_MSCCL_ENABLE=1``), so the XML is copied alone into a fresh
directory. The command is ``LAUNCHER BINARY -b -e -f -g 1 -c 1 -n ITERS -w WARMUP -d TYPE -o OP -J FILE``.
``-J`` (nccl-tests >= 2.18.5, ``runtimes.md`` §4) makes rank 0 write the results as JSON, read in full
precision; a binary that refuses it (older ones print ``invalid option 'J'`` and their usage) is run
again without it and its text table read, as is the text when rank 0's file is not visible here (a
work directory that is not shared). Both are read by :mod:`runners.nccl_output`; of the JSON's ``env``
(rank 0's whole environment) only the ``NCCL_*``/``MSCCL*`` variables are kept, in the frame's
``attrs["environment"]``.
"""
from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from autotaccl.errors import InputError
from autotaccl.model.algorithm import Algorithm
from autotaccl.model.collectives import canonical_name
from autotaccl.safety import file_stem

from runners import launch
from runners.contract import MSCCL_XML, check, check_launched, check_ranks
from runners.mpi import launcher_command
from runners.nccl_output import MeasuredTable, parse_text, read_table
from runners.results import DTYPES, frame

log = logging.getLogger(__name__)

BINARIES = {"allgather": "all_gather_perf", "reducescatter": "reduce_scatter_perf", "allreduce": "all_reduce_perf",
            "alltoall": "alltoall_perf", "broadcast": "broadcast_perf"}
RUNTIMES = ("both", "legacy", "executor")
ENV_FLAGS = (None, "-x", "-genv")
_REFUSED_J = re.compile(r"invalid option.*'J'")    # nccl-tests before -J: its message, then its usage
_TEXT_ONLY: set[str] = set()                        # binaries seen refusing -J in this process


def xml_collective(path: str | Path) -> str:
    """The collective an MSCCL XML file implements (its ``<algo coll=...>``)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as err:
        raise InputError(str(path), "document", f"an MSCCL algorithm XML file ({err})") from None
    coll = root.get("coll")
    if root.tag != "algo" or coll is None:
        raise InputError(str(path), "algo.coll", "an <algo> root element with a coll attribute")
    try:
        return canonical_name(coll, f"{path}: algo.coll")
    except InputError:
        raise InputError(str(path), "algo.coll", f"one of: {', '.join(BINARIES)}") from None


def msccl_environment(xml: Path, runtime: str, workdir: Path) -> dict[str, str]:
    """Variables that make the MSCCL runtime(s) (one of :data:`RUNTIMES`) load ``xml`` and nothing else."""
    env: dict[str, str] = {}
    if runtime in ("both", "legacy"):
        env.update(MSCCL_XML_FILES=str(xml.resolve()), NCCL_ALGO="MSCCL,RING,TREE")
    if runtime in ("both", "executor"):
        algo_dir = workdir / "msccl-algorithms"
        algo_dir.mkdir(exist_ok=True)
        shutil.copyfile(xml, algo_dir / xml.name)
        env.update(NCCL_MSCCL_ENABLE="1", MSCCL_ALGO_DIR=str(algo_dir.resolve()))
    return env


def sweeps(sizes: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(-b, -e, -f)`` triples: one geometric sweep when the sizes allow it, else one run per size."""
    sizes = sorted(set(int(s) for s in sizes))
    if len(sizes) > 1 and sizes[1] % sizes[0] == 0:
        factor = sizes[1] // sizes[0]
        if factor > 1 and all(b == a * factor for a, b in zip(sizes, sizes[1:])):
            return [(sizes[0], sizes[-1], factor)]
    return [(s, s, 2) for s in sizes]


def command(launcher: str | Sequence[str], binary: str, sweep: tuple[int, int, int], *, iters: int, warmup: int,
            dtype: str, op: str, env: dict[str, str], env_flag: str | None = None,
            json_file: str | None = None) -> list[str]:
    """The full command line; ``env_flag`` ``-x`` (Open MPI) or ``-genv`` (MPICH) forwards ``env`` explicitly
    (one of :data:`ENV_FLAGS`); ``json_file`` (a ``.json`` name) asks for ``-J`` output."""
    argv = shlex.split(launcher) if isinstance(launcher, str) else list(launcher)
    if env_flag == "-x":
        for name in env:
            argv += ["-x", name]
    elif env_flag == "-genv":
        for name, value in env.items():
            argv += ["-genv", name, value]
    b, e, f = sweep
    return argv + [binary, "-b", str(b), "-e", str(e), "-f", str(f), "-g", "1", "-c", "1", "-n", str(iters),
                   "-w", str(warmup), "-d", DTYPES[dtype][0], "-o", op] + (["-J", json_file] if json_file else [])


def parse(text: str) -> pd.DataFrame:
    """nccl-tests' table as result rows (any output format, read by :func:`runners.nccl_output.parse_text`;
    no rows when the output holds no readable table)."""
    table = read_output(text, None)
    return frame([]) if table is None else table.rows


def read_output(stdout: str, json_file: Path | None) -> MeasuredTable | None:
    """The run's table: rank 0's -J file when it wrote one we can read, else its text (None: neither)."""
    if json_file is not None and json_file.is_file():
        try:
            return read_table(json_file)
        except InputError as err:      # cut short (a killed run): the text may still be whole
            log.warning("nccl-tests JSON output unreadable (%s); reading its text table", err)
    try:
        return parse_text(stdout, "<nccl-tests output>")
    except InputError:
        return None


def msccl_loaded(text: str) -> bool:
    """Whether NCCL's INFO log says an MSCCL algorithm was loaded (either runtime)."""
    return any(mark in text for mark in ("MSCCL algorithms", "MSCCL: Initialization finished", "Using MSCCL Algo files"))


@dataclass(frozen=True)
class NcclTestsOptions:
    binary: str | None = None        # an nccl-tests *_perf executable or the directory holding them (required)
    launcher: str | None = None      # with np: the launcher (mpiexec by default); without: the whole launcher line
    np: int | None = None
    hostfile: str | None = None
    runtime: str = "both"            # the MSCCL runtime(s) whose variables are set
    env_flag: str | None = None      # -x (Open MPI) / -genv (MPICH): forward the variables explicitly
    iters: int = 20
    warmup: int = 5
    dtype: str = "float32"
    op: str = "sum"
    timeout: float = 600.0
    workdir: str | None = None

    def __post_init__(self) -> None:
        check(bool(self.binary), "--binary", "(missing)",
              "the nccl-tests binary or build directory for --runner nccl-tests")
        check_ranks(self, "nccl-tests")
        check_launched(self)
        check(self.runtime in RUNTIMES, "--runtime", repr(self.runtime), f"one of: {', '.join(RUNTIMES)}")
        check(self.env_flag in ENV_FLAGS, "--env-flag", repr(self.env_flag),
              "-x (Open MPI), -genv (MPICH) or nothing (inherit)")


class NcclTestsRunner(launch.LaunchedRunner):
    """nccl-tests with MSCCL XML loaded, on the launcher's hosts."""

    name = "nccl-tests"
    runtime_file = MSCCL_XML
    Options = NcclTestsOptions

    def measure(self, target: Algorithm | str | Path, sizes: Sequence[int], options: NcclTestsOptions) -> pd.DataFrame:
        return measure(target, sizes, options)


def launcher_argv(options: NcclTestsOptions) -> list[str]:
    """The launcher's argv: the whole line as given, or (with ``np``) ``LAUNCHER -n NP [-hostfile F]``."""
    if options.np is None:
        return shlex.split(options.launcher)
    return launcher_command(options.launcher or "mpiexec", options.np, options.hostfile)


def measure(algorithm: Algorithm | str | Path, sizes: Sequence[int], options: NcclTestsOptions) -> pd.DataFrame:
    """Run nccl-tests on ``algorithm`` (an XML path, or an Algorithm lowered to XML) at ``sizes``.

    ``options.launcher`` is the launcher and its arguments (``"mpirun -np 8 --hostfile hosts"``,
    ``"srun -n 8"``), or, with ``np`` (and ``hostfile``), just the launcher (mpiexec by default).
    """
    launcher = launcher_argv(options)
    with tempfile.TemporaryDirectory(prefix="autotaccl-nccl-tests-") as tmp:
        work = Path(options.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        if isinstance(algorithm, Algorithm):
            from autotaccl.formats.msccl import LoweringOptions
            from autotaccl.formats.msccl import lower
            xml = work / f"{file_stem(algorithm.name or 'algorithm')}.xml"   # the name is the user's
            xml.write_text(lower(algorithm, LoweringOptions()))
            coll = algorithm.collective.name
        else:
            xml = Path(algorithm)
            if not xml.is_file():
                raise InputError(str(xml), "file", "an existing MSCCL XML file")
            coll = xml_collective(xml)
        exe = Path(options.binary)
        if exe.is_dir():
            exe = exe / BINARIES[coll]
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            raise InputError("--binary", str(exe), f"an executable nccl-tests binary ({BINARIES[coll]})")
        env = msccl_environment(xml, options.runtime, work)
        debug = {} if "NCCL_DEBUG" in os.environ else {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}
        frames, loaded, environment = [], True, {}

        def run(sweep, json_file: Path | None):
            argv = command(launcher, str(exe), sweep, iters=options.iters, warmup=options.warmup, dtype=options.dtype,
                           op=options.op, env={**env, **debug}, env_flag=options.env_flag,
                           json_file=None if json_file is None else str(json_file))
            return argv, launch.run(argv, work, options.timeout, env={**os.environ, **env, **debug})

        for index, sweep in enumerate(sweeps(sizes)):
            json_file = None if str(exe) in _TEXT_ONLY else (work / f"nccl-tests-{index}.json").resolve()
            if json_file is not None:
                json_file.unlink(missing_ok=True)    # nccl-tests never overwrites: it would write FILE.0
            argv, outcome = run(sweep, json_file)
            if json_file is not None and _REFUSED_J.search(outcome.stdout + outcome.stderr):
                _TEXT_ONLY.add(str(exe))
                json_file = None
                argv, outcome = run(sweep, None)
            text = outcome.stdout + "\n" + outcome.stderr
            table = read_output(outcome.stdout, json_file)
            rows = frame([]) if table is None else table.rows
            if table is not None:
                environment.update(table.environment)
            failed = rows["wrong"].fillna(0).gt(0).any()
            if outcome.timed_out:
                raise launch.JobTimeout(f"nccl-tests timed out after {options.timeout:g} s and was killed: "
                                        f"{' '.join(argv)}")
            if rows.empty or (outcome.returncode != 0 and not failed):
                tail = " | ".join(text.strip().splitlines()[-3:])
                raise launch.JobError(f"nccl-tests failed (exit status {outcome.returncode}): {tail}")
            loaded = loaded and msccl_loaded(text)
            frames.append(rows)
        if not loaded and debug:
            log.warning("NCCL's log never mentions MSCCL: the XML was probably not used (see §6 of the spec)")
        df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        df.attrs["msccl_loaded"] = loaded
        df.attrs["environment"] = environment      # NCCL_* / MSCCL* as rank 0 saw them (-J output only)
        return df
