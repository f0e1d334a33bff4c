"""``autotaccl lower ALGO.json -o FILE``: an algorithm as MSCCL XML or as an MSCCL++ execution plan,
checked by replay before it is written.

An MSCCL++ plan needs the topology (``--hardware``, ``--nodes``): links inside a node become memory
channels, network links port channels. ``--nodes`` defaults to the algorithm's ranks over the profile's
GPUs per node.
"""
from __future__ import annotations

import logging

from ..errors import InputError
from ..formats import mscclpp
from ..formats.msccl import LoweringOptions, lower, check_xml
from ..formats.loading import MSCCLPP, RUNTIMES
from ..formats.msccl.program import PROTOCOLS
from ..model.algorithm import Algorithm, load_verified
from ..model.hardware import load_hardware
from ..safety import output_file
from ..sizes import parse_size
from .common import add_hardware_args, topology_from_args

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    parser = subparsers.add_parser("lower", help="write an algorithm as MSCCL XML or an MSCCL++ plan (checked first)")
    parser.add_argument("algorithm", help="algorithm JSON file")
    parser.add_argument("-o", "--output", required=True, help="XML or plan JSON file to write")
    parser.add_argument("--instances", type=int, default=1, help="copies side by side on separate channels (default 1)")
    parser.add_argument("--proto", choices=PROTOCOLS, default="Simple",
                        help="protocol (default Simple; mscclpp takes Simple or LL)")
    parser.add_argument("--min-bytes", help="smallest call size it is selected for (e.g. 1M; default 0)")
    parser.add_argument("--max-bytes", help="largest call size it is selected for, inclusive (default: no limit)")
    parser.add_argument("--runtime", choices=RUNTIMES, default="msccl-executor",
                        help="the runtime that loads the file (default msccl-executor; mscclpp writes an "
                             "execution plan)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--inplace", action="store_true", help="only for in-place calls")
    mode.add_argument("--outofplace", action="store_true",
                      help="only for out-of-place calls (the default for the runtimes that match one mode)")
    parser.add_argument("--placement", choices=("anywhere", "start"),
                        help="mscclpp only: where the caller's buffers may sit in their CUDA allocations (default "
                             "anywhere: port puts send from scratch; start: they must start them, no staging copy)")
    parser.add_argument("--seeds", type=int, default=8, help="random interleavings the XML checker replays (default 8)")
    add_hardware_args(parser, required=False,
                      nodes_help="mscclpp only; default: the algorithm's ranks / the profile's GPUs per node")
    parser.set_defaults(func=run)


def run(args) -> int:
    path = output_file(args.output)
    algorithm = load_verified(args.algorithm)
    min_bytes = parse_size(args.min_bytes, "--min-bytes") if args.min_bytes else 0
    max_bytes = parse_size(args.max_bytes, "--max-bytes") if args.max_bytes else None
    if args.runtime == MSCCLPP:
        return _run_mscclpp(args, algorithm, path, min_bytes, max_bytes)
    if args.hardware is not None or args.nodes is not None:
        raise InputError("--hardware/--nodes", args.hardware or str(args.nodes),
                         "only with --runtime mscclpp (an XML program names no link types)")
    if args.placement is not None:
        raise InputError("--placement", args.placement, "only with --runtime mscclpp (an MSCCL program reads its "
                         "buffers through their own pointers)")
    inplace = True if args.inplace else (False if args.outofplace else None)
    outofplace = True if args.outofplace else (False if args.inplace else None)
    options = LoweringOptions(instances=args.instances, proto=args.proto, min_bytes=min_bytes, max_bytes=max_bytes,
                              runtime=args.runtime, inplace=inplace, outofplace=outofplace)
    text = lower(algorithm, options)
    report = check_xml(text, runtime=args.runtime, mode="header", seeds=args.seeds)
    if not report.valid:   # a lowering bug: never ship it
        print(f"{args.algorithm}: the lowered XML fails its check, nothing written: {report.first}")
        return 1
    _write(path, text)
    print(f"{path}: {report.coll} on {report.ngpus} ranks for {report.runtime} ({', '.join(report.modes)}), "
          f"{report.stats['tbs']} thread blocks, {report.stats['steps']} steps, checked")
    return 0


def _run_mscclpp(args, algorithm: Algorithm, path, min_bytes: int, max_bytes: int | None) -> int:
    if args.hardware is None:
        raise InputError("--hardware", "missing", "a hardware profile with --runtime mscclpp: the topology says "
                         "which links are inside a node (memory channels) and which cross the network (port channels)")
    if args.nodes is None:
        gpn = load_hardware(args.hardware).gpus_per_node
        if algorithm.ranks % gpn:
            raise InputError("--nodes", "missing", f"a node count: the algorithm's {algorithm.ranks} ranks are not a "
                             f"whole number of {gpn}-GPU nodes")
        args.nodes = algorithm.ranks // gpn
    graph = topology_from_args(args)
    if graph.number_of_nodes() != algorithm.ranks:
        raise InputError("--nodes", str(args.nodes), f"a topology of the algorithm's {algorithm.ranks} ranks (this "
                         f"one has {graph.number_of_nodes()})")
    options = mscclpp.PlanOptions(inplace=bool(args.inplace), proto=args.proto, instances=args.instances,
                                  min_bytes=min_bytes, max_bytes=max_bytes, placement=args.placement or "anywhere")
    plan = mscclpp.lower_plan(algorithm, graph, options)     # checked by replay; raises on any violation
    _write(path, mscclpp.plan_text(plan))
    stats = mscclpp.plan_stats(plan)
    print(f"{path}: {plan.collective} plan on {plan.ranks} ranks for mscclpp "
          f"({'inplace' if plan.inplace else 'outofplace'}, {plan.protocol}), {stats['threadblocks']} thread blocks "
          f"(at most {stats['max_threadblocks_per_rank']} per rank), {stats['operations']} operations (at most "
          f"{stats['max_operations_per_threadblock']} per thread block), placement {plan.meta['placement']}, "
          "checked")
    return 0


def _write(path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
