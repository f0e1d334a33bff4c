"""``autotaccl lower ALGO.json -o FILE.xml``: an algorithm as MSCCL XML, checked before it is written."""
from __future__ import annotations

import logging

from ..formats.msccl import LoweringOptions, lower, check_xml
from ..formats.msccl.program import PROTOCOLS, RUNTIMES
from ..model.algorithm import load_verified
from ..safety import output_file
from ..sizes import parse_size

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    parser = subparsers.add_parser("lower", help="write an algorithm as MSCCL XML (checked by replay first)")
    parser.add_argument("algorithm", help="algorithm JSON file")
    parser.add_argument("-o", "--output", required=True, help="XML file to write")
    parser.add_argument("--instances", type=int, default=1, help="copies side by side on separate channels (default 1)")
    parser.add_argument("--proto", choices=PROTOCOLS, default="Simple", help="NCCL protocol (default Simple)")
    parser.add_argument("--min-bytes", help="smallest call size it is selected for (e.g. 1M; default 0)")
    parser.add_argument("--max-bytes", help="largest call size it is selected for, inclusive (default: no limit)")
    parser.add_argument("--runtime", choices=RUNTIMES, default="msccl-executor",
                        help="the MSCCL runtime that loads the file (default msccl-executor)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--inplace", action="store_true", help="only for in-place calls")
    mode.add_argument("--outofplace", action="store_true", help="only for out-of-place calls")
    parser.add_argument("--seeds", type=int, default=8, help="random interleavings the checker replays (default 8)")
    parser.set_defaults(func=run)


def run(args) -> int:
    path = output_file(args.output)
    algorithm = load_verified(args.algorithm)
    inplace = True if args.inplace else (False if args.outofplace else None)
    outofplace = True if args.outofplace else (False if args.inplace else None)
    options = LoweringOptions(instances=args.instances, proto=args.proto,
                              min_bytes=parse_size(args.min_bytes, "--min-bytes") if args.min_bytes else 0,
                              max_bytes=parse_size(args.max_bytes, "--max-bytes") if args.max_bytes else None,
                              runtime=args.runtime, inplace=inplace, outofplace=outofplace)
    text = lower(algorithm, options)
    report = check_xml(text, runtime=args.runtime, mode="header", seeds=args.seeds)
    if not report.valid:   # a lowering bug: never ship it
        print(f"{args.algorithm}: the lowered XML fails its check, nothing written: {report.first}")
        return 1
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    print(f"{path}: {report.coll} on {report.ngpus} ranks for {report.runtime} ({', '.join(report.modes)}), "
          f"{report.stats['tbs']} thread blocks, {report.stats['steps']} steps, checked")
    return 0
