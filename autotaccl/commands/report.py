"""``autotaccl report``: an HTML page with busbw-vs-size, optimisation history and importance plots."""
from __future__ import annotations

from .common import add_tracking_uri_arg


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="HTML report (plots + per-size table) of tracked sweeps")
    add_tracking_uri_arg(p)
    p.add_argument("--experiment", action="append", help="experiment name (repeatable; default: all autotaccl ones)")
    p.add_argument("-o", "--out", required=True, help="output directory (replaced atomically)")
    p.set_defaults(func=run)


def run(args) -> int:
    import logging

    from dashboards.report import build_report

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    from ..safety import output_dir, tracking_uri

    tracking_uri(args.tracking_uri)
    output_dir(args.out, "-o", replaces=("index.html", "*.png"))
    page = build_report(args.tracking_uri, args.experiment, args.out)
    print(f"wrote {page}")
    return 0
