"""``autotaccl bench ALGO.json --runner mpi|sim|nccl-tests``: measure an algorithm over a size sweep.

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


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="measure an algorithm (mpi ranks, simulator or nccl-tests)",
                              description=__doc__.splitlines()[0])
    p.add_argument("algorithm", help="algorithm JSON (for nccl-tests also an MSCCL XML file)")
    p.add_argument("--runner", default="mpi", choices=("mpi", "sim", "nccl-tests"), help="default: mpi")
    p.add_argument("--np", type=int, help="number of ranks (default: the algorithm's)")
    p.add_argument("--hostfile", help="hostfile for mpiexec")
    p.add_argument("--launcher", help="mpiexec (default), srun, or a launcher path with arguments; for "
                                      "nccl-tests without --np the whole launcher line, e.g. 'mpirun -np 8'")
    p.add_argument("--sizes", default="1K:64M", help="MIN:MAX[:xF], a list 1K,1M, or one size (default 1K:64M)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations per size (default 5)")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "int32", "float64"))
    p.add_argument("--op", default="sum", choices=("sum", "max", "min", "prod"))
    p.add_argument("--check", action="store_true", help="check every output element (wrong > 0 fails)")
    p.add_argument("--baseline", choices=("mpi",), help="also measure MPI's own collective in the same job")
    p.add_argument("--timeout", type=float, default=600.0, help="wall-clock limit of the job in seconds (default 600)")
    p.add_argument("--workdir", help="keep the job's files (job, heartbeats, output) in this directory")
    p.add_argument("--hardware", help="hardware profile for --runner sim")
    p.add_argument("--nodes", type=int, default=1, help="nodes for --runner sim (default 1)")
    p.add_argument("--chunk-size", help="chunk size a TACCL topology JSON was profiled for (--runner sim)")
    p.add_argument("--binary", help="nccl-tests binary or build directory (--runner nccl-tests)")
    p.add_argument("--runtime", default="both", choices=("both", "legacy", "executor"),
                   help="MSCCL runtime whose variables to set (--runner nccl-tests; default both)")
    p.add_argument("--env-flag", choices=("-x", "-genv"),
                   help="forward the MSCCL variables with the launcher's flag (-x Open MPI, -genv MPICH) instead of "
                        "only through the environment (--runner nccl-tests)")
    p.add_argument("--json", action="store_true", help="print one JSON object with the rows")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runners import get_runner
    from runners.launch import JobError
    from runners.table import format_table

    from ..model.algorithm import load_algorithm
    from .common import print_json

    sizes = parse_size_range(args.sizes, "--sizes")
    if args.workdir is not None:
        from ..safety import output_dir

        output_dir(args.workdir, "--workdir")
    if args.iters < 1:
        raise InputError("--iters", str(args.iters), "a whole number >= 1")
    if args.warmup < 0:
        raise InputError("--warmup", str(args.warmup), "a whole number >= 0")
    if args.timeout <= 0:
        raise InputError("--timeout", str(args.timeout), "a positive number of seconds")
    xml = args.runner == "nccl-tests" and args.algorithm.lower().endswith(".xml")
    algorithm = None if xml else load_algorithm(args.algorithm)
    baseline = None
    try:
        if args.runner == "mpi":
            from runners.mpi import measure_many
            items = [algorithm] + ([algorithm.collective] if args.baseline else [])
            frames = measure_many(items, sizes, np=args.np, dtype=args.dtype, op=args.op, iters=args.iters,
                                  warmup=args.warmup, check=args.check, launcher=args.launcher or "mpiexec",
                                  hostfile=args.hostfile, timeout=args.timeout, workdir=args.workdir)
            df, baseline = frames[0], (frames[1] if args.baseline else None)
        elif args.runner == "sim":
            from .common import topology_from_args
            if not args.hardware:
                raise InputError("--hardware", "missing", "a hardware profile for --runner sim")
            if args.baseline:
                raise InputError("--baseline", args.baseline, "no baseline with --runner sim")
            df = get_runner("sim").measure(algorithm, sizes, graph=topology_from_args(args), dtype=args.dtype, op=args.op)
        else:
            if not args.binary:
                raise InputError("--binary", "missing", "the nccl-tests binary (or its directory) for --runner nccl-tests")
            df = get_runner("nccl-tests").measure(algorithm or args.algorithm, sizes, binary=args.binary,
                                                  launcher=args.launcher, np=args.np, hostfile=args.hostfile,
                                                  runtime=args.runtime, iters=args.iters,
                                                  warmup=args.warmup, dtype=args.dtype, op=args.op,
                                                  timeout=args.timeout, workdir=args.workdir,
                                                  env_flag=args.env_flag)
    except JobError as err:
        print(f"autotaccl: error: {err}", file=sys.stderr)
        return 1
    name = algorithm.name if algorithm else args.algorithm
    if args.json:
        print_json({"algorithm": name, "runner": args.runner, "rows": _records(df),
                    "baseline": _records(baseline) if baseline is not None else None})
    else:
        title = f"autotaccl bench {name}: runner {args.runner}"
        if algorithm:
            title += f", {algorithm.collective.name} on {algorithm.ranks} ranks"
        print(format_table(df, baseline, title))
        if baseline is not None:
            print(format_table(baseline, None, f"baseline: MPI's own {algorithm.collective.name}"))
    return 1 if df["wrong"].fillna(0).gt(0).any() else 0


def _records(df) -> list[dict]:
    """Rows as plain JSON values (NaN -> null)."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in df.to_dict(orient="records")]
