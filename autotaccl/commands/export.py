"""``autotaccl export``: the best verified algorithm per collective, size and runtime, as a table and the
runtimes' files (MSCCL XML, MSCCL++ plans, an NCCL tuner config)."""
from __future__ import annotations

from pathlib import Path

from .common import add_tracking_uri_arg


def register(subparsers) -> None:
    p = subparsers.add_parser("export", help="per-size winners of tracked sweeps -> table + checked MSCCL XML, "
                                              "MSCCL++ plans and an NCCL tuner config")
    add_tracking_uri_arg(p)
    p.add_argument("--experiment", action="append", help="experiment name, e.g. ndv2x2-allgather (repeatable; "
                                                         "default: every autotaccl experiment)")
    p.add_argument("-o", "--out", required=True, help="output directory (replaced atomically)")
    p.add_argument("--replay", metavar="RUN_DIR", help="first log the runs a sweep in RUN_DIR recorded locally "
                                                       "while the tracking server was unreachable")
    p.set_defaults(func=run)


def run(args) -> int:
    import logging

    from ..tuning.export import OUTPUT_FILES, export

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    from ..safety import output_dir, tracking_uri

    tracking_uri(args.tracking_uri)
    output_dir(args.out, "-o", replaces=OUTPUT_FILES)
    if args.replay:
        from ..tracking import existing_store, outbox
        from ..errors import InputError
        from ..tracking import MlflowClient

        if not Path(args.replay).is_dir():
            raise InputError("--replay", args.replay, "a sweep's run directory (autotaccl tune --out)")
        logged, left = outbox.replay(args.replay, MlflowClient(tracking_uri=existing_store(args.tracking_uri)))
        if left:
            raise InputError("--replay", args.replay, f"a reachable tracking server ({left} run(s) still pending)")
        if logged:
            print(f"replayed {logged} run(s) recorded while the tracking server was unreachable")
    ranges = export(args.tracking_uri, args.experiment, args.out)
    for r in ranges:
        plan = f"  mscclpp/: {r.plan_winner}" if r.plan_winner and r.plan_winner != r.winner else ""
        print(f"{r.experiment:<24} {r.sizes:<18} {r.winner:<22} {r.protocol:<6} {r.speedup:5.2f}x  "
              f"{r.xml or '(stock NCCL)'}{plan}")
    files = sum(len([f for f in (r.xml, r.legacy_xml, *r.plans) if f]) for r in ranges)
    print(f"wrote {args.out}/: table.csv, table.md, table.json, README.md, {files} MSCCL/MSCCL++ file(s)"
          f"{', nccl/nccl_tuner.conf' if (Path(args.out) / 'nccl' / 'nccl_tuner.conf').is_file() else ''}")
    return 0
