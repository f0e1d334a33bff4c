"""``autotaccl bench ALGO.json [--runner mpi|sim|nccl-tests|mscclpp|...]``: measure an algorithm over a size sweep.

Prints nccl-tests' table (out-of-place and in-place columns), with a ``%base`` column and the
baseline's own table when ``--baseline mpi`` also measures MPI's built-in collective in the same job.
Exit status 1 when any element was wrong or the job failed (the message names the rank and what it
was doing).
"""
from __future__ import annotations

import argparse
import math
import sys

from ..errors import InputError
from ..sizes import parse_size_range
from .common import description, RUNNER_HELP, add_runner_option_arg, runner_options_from_args


#: the runner options bench sets, by its flags; bench's own defaults where they differ from the runners'
FLAGS = {"np": "--np", "hostfile": "--hostfile", "launcher": "--launcher", "iters": "--iters", "warmup": "--warmup",
         "dtype": "--dtype", "op": "--op", "check": "--check", "timeout": "--timeout", "workdir": "--workdir",
         "hardware": "--hardware", "nodes": "--nodes", "chunk_size": "--chunk-size", "binary": "--binary",
         "runtime": "--runtime", "env_flag": "--env-flag"}
DEFAULTS = {"check": False, "timeout": 600.0}


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="measure an algorithm (mpi ranks, simulator or nccl-tests)",
                              description=description(__doc__))
    p.add_argument("algorithm", help="algorithm JSON (for nccl-tests also an MSCCL XML file; for mscclpp an MSCCL++ .plan.json)")
    p.add_argument("--runner", default="mpi", help=f"{RUNNER_HELP}; default: mpi")
    p.add_argument("--np", type=int, help="number of ranks (default: the algorithm's)")
    p.add_argument("--hostfile", help="hostfile for mpiexec")
    p.add_argument("--launcher", help="mpiexec (default), srun, or a launcher path with arguments; for "
                                      "nccl-tests without --np the whole launcher line, e.g. 'mpirun -np 8'")
    p.add_argument("--sizes", default="1K:64M", help="MIN:MAX[:xF], a list 1K,1M, or one size (default 1K:64M)")
    p.add_argument("--iters", type=int, help="timed iterations per size (default 20)")
    p.add_argument("--warmup", type=int, help="untimed iterations per size (default 5)")
    p.add_argument("--dtype", choices=("float32", "float16", "int32", "float64"), help="default float32")
    p.add_argument("--op", choices=("sum", "max", "min", "prod"), help="default sum")
    p.add_argument("--check", action="store_true", default=None,
                   help="check every output element (wrong > 0 fails; --runner mpi, mscclpp)")
    p.add_argument("--baseline", help="also measure the runtime's own collective in the same job "
                                      "(--runner mpi: --baseline mpi, MPI's own)")
    p.add_argument("--timeout", type=float, help="wall-clock limit of the job in seconds (default 600)")
    p.add_argument("--workdir", help="keep the job's files (job, heartbeats, output) in this directory")
    p.add_argument("--hardware", help="hardware profile for --runner sim")
    p.add_argument("--nodes", type=int, help="nodes for --runner sim (default 1)")
    p.add_argument("--chunk-size", help="chunk size a TACCL topology JSON was profiled for (--runner sim)")
    p.add_argument("--binary", help="nccl-tests binary or build directory (--runner nccl-tests)")
    p.add_argument("--runtime", choices=("both", "legacy", "executor"),
                   help="MSCCL runtime whose variables to set (--runner nccl-tests; default both)")
    p.add_argument("--env-flag", choices=("-x", "-genv"),
                   help="forward the MSCCL variables with the launcher's flag (-x Open MPI, -genv MPICH) instead of "
                        "only through the environment (--runner nccl-tests)")
    add_runner_option_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object with the rows")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runners import BaselineRunner, get_runner
    from runners.launch import JobError
    from runners.table import format_table

    from ..model.algorithm import load_algorithm
    from .common import print_json

    runner = get_runner(args.runner)
    sizes = parse_size_range(args.sizes, "--sizes")
    options = runner_options_from_args(args, runner, FLAGS, DEFAULTS)
    if args.baseline is not None:
        names = runner.baselines if isinstance(runner, BaselineRunner) else ()
        if args.baseline not in names:
            raise InputError("--baseline", args.baseline, f"one of: {', '.join(names)}" if names else
                             f"no baseline with --runner {runner.name}")
    runtime = runner.runtime_file
    algorithm = None if runtime and args.algorithm.lower().endswith(runtime.suffix) else load_algorithm(args.algorithm)
    baseline = None
    try:
        if args.baseline is not None:
            df, baseline = runner.measure_with_baseline(algorithm, sizes, options, args.baseline)
        else:
            df = runner.measure(algorithm or args.algorithm, sizes, options)
    except JobError as err:
        print(f"autotaccl: error: {err}", file=sys.stderr)
        return 1
    name = algorithm.name if algorithm else args.algorithm
    if args.json:
        print_json({"algorithm": name, "runner": runner.name, "rows": _records(df),
                    "baseline": _records(baseline) if baseline is not None else None})
    else:
        title = f"autotaccl bench {name}: runner {runner.name}"
        if algorithm:
            title += f", {algorithm.collective.name} on {algorithm.ranks} ranks"
        print(format_table(df, baseline, title))
        if baseline is not None:
            what = runner.baselines[args.baseline]
            print(format_table(baseline, None, f"baseline: {what} {algorithm.collective.name}"))
    return 1 if df["wrong"].fillna(0).gt(0).any() else 0


def _records(df) -> list[dict]:
    """Rows as plain JSON values (NaN -> null)."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in df.to_dict(orient="records")]
