"""``autotaccl calibrate FILE[:COLLECTIVE]... --hardware H --nodes N -o PROFILE.yaml``: fit a profile to measurements.

Reads nccl-tests output (text of every version, or ``-J`` JSON; ``autotaccl bench`` output too), takes
the collective from the file where it says so (else ``:COLLECTIVE``), and fits the profile's free terms
(:mod:`runners.calibrate`) so that ``autotaccl nccl-model`` reproduces the measured times.
``--algorithm``/``--protocol`` name the restriction the measurement ran under (``NCCL_ALGO``,
``NCCL_PROTO``; a JSON file's recorded environment is used when they are not given). The profile is
written with the fit and every size's residual in its header; a fit whose residuals exceed
``--max-residual`` writes nothing and exits 1, naming the sizes.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import InputError
from ..model.collectives import NAMES, canonical_name
from ..safety import safe_name
from .common import description, add_hardware_args, print_json, topology_from_args
from .nccl_model import choice_list


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="fit a hardware profile to nccl-tests tables (nccl-model reproduces them)",
                              description=description(__doc__))
    p.add_argument("tables", nargs="+", metavar="FILE[:COLLECTIVE]", help="nccl-tests output, text or -J JSON")
    add_hardware_args(p)
    p.add_argument("--algorithm", help="NCCL_ALGO the tables were measured with (comma list)")
    p.add_argument("--protocol", help="NCCL_PROTO the tables were measured with (comma list)")
    p.add_argument("--max-residual", type=float, default=0.25,
                   help="refuse a fit with any size further off than this, or a median beyond half of it (default 0.25)")
    p.add_argument("--name", help="profile name (default: from the output file name)")
    p.add_argument("-o", "--output", required=True, help="profile YAML to write")
    p.add_argument("--json", action="store_true", help="print one JSON object with the fit and the residuals")
    p.set_defaults(func=run)


def split_spec(spec: str) -> tuple[Path, str | None]:
    """``"run.txt:allreduce"`` -> (``run.txt``, ``"allreduce"``); a suffix that is no collective stays in the path."""
    head, sep, tail = spec.rpartition(":")
    if sep and head and tail.strip().lower().replace("-", "_") in {n for n in NAMES} | {
            "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "ar", "ag", "rs", "a2a", "bcast"}:
        return Path(head), canonical_name(tail, f"{spec}: collective")
    return Path(spec), None


def observations(specs, graph, algorithms, protocols) -> list:
    from runners.calibrate import Observation
    from runners.nccl_output import read_table

    from ..nccl_model import canonical_algorithm
    from ..model.protocols import canonical_protocol

    out = []
    ranks = graph.number_of_nodes()
    algorithms = None if algorithms is None else [canonical_algorithm(a, "--algorithm") for a in algorithms]
    protocols = None if protocols is None else [canonical_protocol(p, "--protocol") for p in protocols]
    for spec in specs:
        path, given = split_spec(spec)
        table = read_table(path)
        if given and table.collective and given != table.collective:
            raise InputError(str(path), "collective", f"{table.collective} as the file says ({given} given)")
        collective = given or table.collective
        if collective is None:
            raise InputError(str(path), "collective", f"the file does not name its collective: give it as "
                             f"{path}:allreduce (one of: {', '.join(NAMES)})")
        measured = table.ranks(collective)
        if measured is not None and measured != ranks:
            raise InputError(str(path), "ranks", f"a table measured on {ranks} ranks, as --hardware/--nodes give "
                             f"(its busbw/algbw says {measured})")
        algos = algorithms or choice_list(table.restrictions.get("NCCL_ALGO"))
        protos = protocols or choice_list(table.restrictions.get("NCCL_PROTO"))
        times = table.times()
        if len(times) < 2:
            raise InputError(str(path), "rows", "valid times at two or more sizes")
        out.append(Observation(str(path), collective, tuple(times), tuple(times.values()),
                               None if algos is None else tuple(canonical_algorithm(a, f"{path}: NCCL_ALGO") for a in algos),
                               None if protos is None else tuple(canonical_protocol(p, f"{path}: NCCL_PROTO") for p in protos)))
    return out


def run(args) -> int:
    from runners.calibrate import calibrate, write_profile

    if not 0 < args.max_residual < 10:
        raise InputError("--max-residual", str(args.max_residual), "a share such as 0.25")
    out = Path(args.output)
    if not out.parent.is_dir():
        raise InputError("-o", str(out), "a file in an existing directory")
    name = args.name or out.stem
    safe_name(name, "--name" if args.name else "-o", repr(name))
    graph = topology_from_args(args)
    obs = observations(args.tables, graph, choice_list(args.algorithm), choice_list(args.protocol))
    cal = calibrate(graph, obs, args.max_residual)
    report = {"output": str(out), "accepted": cal.accepted, "stage": cal.stage, "median_residual": cal.median,
              "worst_residual": cal.worst.relative,
              "parameters": {k: {"profile": a, "fitted": b} for k, (a, b) in cal.parameters.items()},
              "residuals": [{"file": r.source, "bytes": r.size, "measured_us": r.measured_us,
                             "predicted_us": r.predicted_us, "residual": r.relative, "algorithm": r.algorithm,
                             "protocol": r.protocol} for r in cal.residuals]}
    if not cal.accepted:
        poor = cal.poor() or [cal.worst]
        sizes = ", ".join(f"{Path(r.source).name} {r.size} B ({100 * r.relative:+.0f}%)" for r in poor[:12])
        message = (f"autotaccl: error: calibrate: the fit misses {len(poor)} size(s) by more than "
                   f"{100 * args.max_residual:.0f}% (median {100 * cal.median:.1f}%): {sizes}; the tables are not "
                   f"consistent with one profile (restriction, noise, another machine?); nothing written")
        if args.json:
            print_json({**report, "output": None, "error": message})
        print(message, file=sys.stderr)
        return 1
    how = (f"{len(obs)} table(s): " + "; ".join(f"{Path(o.source).name} ({o.collective}"
           + (f", NCCL_ALGO={','.join(o.algorithms)}" if o.algorithms else "")
           + (f", NCCL_PROTO={','.join(o.protocols)}" if o.protocols else "") + ")" for o in obs)
           + f" on {graph.graph['name']}")
    write_profile(cal, out, name, how)
    if args.json:
        print_json(report)
    else:
        print(f"wrote {out}: parameter set {cal.stage}, median |residual| {100 * cal.median:.1f}%, worst "
              f"{100 * cal.worst.relative:+.1f}% ({cal.worst.size} B)")
        for key, (before, after) in cal.parameters.items():
            print(f"  {key}: {before:.4g} -> {after:.4g}")
    return 0
