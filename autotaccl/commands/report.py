"""``autotaccl report``: an HTML page saying what to deploy, with busbw/time-vs-size, optimisation history and
importance plots, and ``report.json`` with the per-size winners."""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .common import add_tracking_uri_arg


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="HTML report (plots + per-size table) of tracked sweeps")
    add_tracking_uri_arg(p)
    p.add_argument("--experiment", action="append", help="experiment name (repeatable; default: all autotaccl ones)")
    p.add_argument("-o", "--out", required=True, help="output directory (replaced atomically)")
    p.add_argument("--export", metavar="DIR", help="the export to link to (default: each experiment's latest "
                                                   "`autotaccl export`, if its directory still exists)")
    p.set_defaults(func=run)


def run(args) -> int:
    import logging

    from dashboards.report import build_report

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    from ..safety import output_dir, tracking_uri

    tracking_uri(args.tracking_uri)
    output_dir(args.out, "-o", replaces=("index.html", "*.png", "report.json"))
    if args.export is not None and not (Path(args.export) / "table.json").is_file():
        raise InputError("--export", args.export, "an `autotaccl export` directory (with table.json)")
    page = build_report(args.tracking_uri, args.experiment, args.out, args.export)
    print(f"wrote {page}")
    return 0
