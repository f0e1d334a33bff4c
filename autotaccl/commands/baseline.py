"""``autotaccl baseline``: write a classic algorithm (ring, tree, hierarchical, direct, two-step) as IR JSON."""
from __future__ import annotations

from ..baselines import ALGORITHMS, baseline
from ..model.algorithm import save_algorithm, verify
from ..safety import output_file
from .common import print_json, add_hardware_args, collective_arg, topology_from_args


def register(subparsers) -> None:
    parser = subparsers.add_parser("baseline", help="write a baseline algorithm (NCCL-style ring, tree, ...) as JSON")
    add_hardware_args(parser)
    parser.add_argument("--collective", required=True, type=str, help="allgather|reducescatter|allreduce|alltoall|broadcast")
    parser.add_argument("--algorithm", required=True, help=" | ".join(ALGORITHMS))
    parser.add_argument("--channels", type=int, default=1, help="parallel rings (ring), pipeline slots (tree); default 1")
    parser.add_argument("-o", "--output", required=True, help="algorithm JSON file to write")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    out = output_file(args.output)      # before any work
    collective = collective_arg(args.collective)
    graph = topology_from_args(args)
    algorithm = baseline(graph, collective, args.algorithm, channels=args.channels)
    verify(algorithm, graph)  # a baseline that fails here is our bug, not the user's: let it raise
    save_algorithm(algorithm, out)
    summary = {"output": str(out), "name": algorithm.name, "collective": collective, "ranks": algorithm.ranks,
               "topology": algorithm.topology, "transfers": len(algorithm.transfers), "steps": algorithm.num_steps,
               "channels": args.channels}
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {out}: {algorithm.name} on {algorithm.topology} ({algorithm.ranks} ranks, "
              f"{len(algorithm.transfers)} transfers, {algorithm.num_steps} steps)")
    return 0
