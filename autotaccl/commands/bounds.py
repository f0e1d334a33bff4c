"""``autotaccl bounds``: the algbw ceiling and latency floor of a collective on a topology."""
from __future__ import annotations

from ..model.collectives import make_collective
from ..model.topology import num_ranks
from .common import print_json, add_hardware_args, collective_arg, topology_from_args


def register(subparsers) -> None:
    parser = subparsers.add_parser("bounds", help="lower bounds: algbw ceiling (GB/s) and latency floor (us)")
    add_hardware_args(parser)
    parser.add_argument("--collective", required=True, help="allgather|reducescatter|allreduce|alltoall|broadcast")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..bounds import bounds

    collective = collective_arg(args.collective)
    graph = topology_from_args(args)
    limit = bounds(graph, collective)
    busbw = limit.algbw_GBps * make_collective(collective, num_ranks(graph)).busbw_factor
    if args.json:
        print_json({"collective": collective, "topology": graph.graph["name"], "algbw_GBps": limit.algbw_GBps,
                    "busbw_GBps": busbw, "latency_us": limit.latency_us})
    else:
        print(f"{collective} on {graph.graph['name']}: algbw <= {limit.algbw_GBps:.2f} GB/s "
              f"(busbw <= {busbw:.2f}), latency >= {limit.latency_us:.2f} us")
    return 0
