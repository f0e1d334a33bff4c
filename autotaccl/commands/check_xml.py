"""``autotaccl check-xml FILE.xml``: static rules and a symbolic replay of an MSCCL XML algorithm.

Exit status 0: valid; 1: the algorithm breaks a rule (the first violation is printed with its rank,
thread block and step); 2: the file cannot be read as MSCCL XML (one line with the line number).
"""
from __future__ import annotations

from ..formats.msccl import check_xml
from ..formats.msccl.check.check import MODES
from ..formats.msccl.program import RUNTIMES
from .common import print_json


def register(subparsers) -> None:
    parser = subparsers.add_parser("check-xml", help="check an MSCCL XML algorithm by static rules and replay")
    parser.add_argument("xml", help="MSCCL XML file")
    parser.add_argument("--mode", choices=MODES, default="header",
                        help="buffer mode(s) to prove (default: those the header enables)")
    parser.add_argument("--runtime", choices=("auto",) + RUNTIMES, default="auto",
                        help="runtime whose rules apply (default: msccl-executor if the header has its attributes)")
    parser.add_argument("--seeds", type=int, default=16, help="random interleavings to replay (default 16)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    report = check_xml(args.xml, runtime=args.runtime, mode=args.mode, seeds=args.seeds)
    if args.json:
        print_json(report.to_dict())
    else:
        print(report)
        for warning in report.warnings:
            print(f"  warning: {warning}")
    return 0 if report.valid else 1
