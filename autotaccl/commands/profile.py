"""``autotaccl profile --np N -o PROFILE.yaml``: measure the links between ranks, write a hardware profile.

Runs an MPI job that ping-pongs between every pair of ranks over a size sweep, fits alpha (from the
sweep's smallest sizes) and bandwidth (from its largest) per pair and per link class, prints the fit and
every size's residual, and writes a profile that ``--hardware PROFILE.yaml`` accepts everywhere. A fit
below ``--min-r2``, or a sweep that does not reach both the latency and the bandwidth regime, writes
nothing (exit 1).
"""
from __future__ import annotations

import argparse
import sys
from itertools import combinations

from ..errors import InputError
from ..safety import output_file, safe_name
from ..sizes import format_size, parse_size_range
from .common import description

BENT = 0.25      # warn when a size between the sweep's ends is further than this from the fitted line


def register(subparsers) -> None:
    p = subparsers.add_parser("profile", help="measure link alpha/bandwidth with MPI ping-pong, write a profile",
                              description=description(__doc__))
    p.add_argument("--np", type=int, required=True, help="number of ranks (one per GPU)")
    p.add_argument("--hostfile", help="hostfile for mpiexec")
    p.add_argument("--launcher", default="mpiexec", help="mpiexec (default), srun, or a launcher path with arguments")
    p.add_argument("--sizes", default="8:64M:x2", help="message sizes in bytes; alpha is fitted at the two smallest, "
                   "the bandwidth at the two largest (default 8:64M:x2)")
    p.add_argument("--iters", type=int, default=20,
                   help="timed round trips per size at least (small sizes get more); the fastest counts (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed round trips per size (default 3)")
    p.add_argument("--group", default="host", choices=("host", "speed"),
                   help="link classes by host (same node / other node) or by measured speed (default host)")
    p.add_argument("--min-r2", type=float, default=0.9, help="refuse fits with a lower R² at the sweep's ends (default 0.9)")
    p.add_argument("--name", help="profile name (default: from the output file name)")
    p.add_argument("--timeout", type=float, default=900.0, help="wall-clock limit of the job (default 900 s)")
    p.add_argument("-o", "--output", required=True, help="profile YAML to write")
    p.add_argument("--json", action="store_true", help="print one JSON object with the fits")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runners.launch import JobError
    from runners.linkfit import PoorFitError, analyse, profile_dict, report, write_profile
    from runners.mpi import JobOptions, run_job

    from .common import print_json

    if args.np < 2:
        raise InputError("--np", str(args.np), "a whole number >= 2 (ping-pong needs pairs)")
    for flag, value, low in (("--iters", args.iters, 1), ("--warmup", args.warmup, 0)):
        if value < low:
            raise InputError(flag, str(value), f"a whole number >= {low}")
    sizes = parse_size_range(args.sizes, "--sizes")
    if len(sizes) < 2:
        raise InputError("--sizes", args.sizes, "at least two sizes (alpha and bandwidth need two points)")
    out = output_file(args.output)        # checked before measuring, which takes minutes
    name = args.name or out.stem      # the profile's name: it becomes experiment and study (file) names
    safe_name(name, "--name" if args.name else "-o", repr(name))
    task = {"kind": "pingpong", "sizes": sizes, "iters": args.iters, "warmup": args.warmup,
            "pairs": [list(p) for p in combinations(range(args.np), 2)]}
    try:
        (result,) = run_job([task], JobOptions(args.np, args.launcher, args.hostfile, args.timeout))
    except JobError as err:
        print(f"autotaccl: error: {err}", file=sys.stderr)
        return 1
    try:
        measured = analyse(result, args.group, args.min_r2)
    except PoorFitError as err:
        print(f"autotaccl: error: profile: {err}; nothing written", file=sys.stderr)
        return 1
    how = (f"MPI ping-pong between all {len(task['pairs'])} rank pairs, one pair at a time, {args.np} ranks on "
           f"{', '.join(sorted(set(measured.hosts)))}; sizes {format_size(sizes[0])}..{format_size(sizes[-1])}; "
           f"fastest of {args.iters} round trips per size; launcher {args.launcher}; classes by {args.group}.")
    write_profile(measured, out, name, how)
    for c in measured.classes:
        between = c.fit.worst_residual(False)
        if abs(between) > BENT:
            print(f"autotaccl: warning: profile: link class {c.name} departs from alpha + size/bandwidth by up to "
                  f"{100 * between:+.0f}% between the sweep's ends; for a profile meant for one size band, "
                  f"end the sweep there (e.g. --sizes 8,16,1M,2M)", file=sys.stderr)
    if args.json:
        print_json({"output": str(out), "profile": profile_dict(measured, name),
                    "classes": {c.name: {"alpha_us": c.fit.alpha_us, "bandwidth_GBps": c.fit.bandwidth_GBps,
                                         "r2": c.fit.r2, "pairs": [list(p) for p in c.pairs],
                                         "residuals": list(c.fit.residuals), "fitted": list(c.fit.fitted)}
                                for c in measured.classes}})
    else:
        print(report(measured))
        print(f"# wrote {out}")
    return 0
