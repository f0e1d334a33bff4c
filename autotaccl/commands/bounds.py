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
    from ..bounds import bounds, switch_bounds

    collective = collective_arg(args.collective)
    graph = topology_from_args(args)
    factor = make_collective(collective, num_ranks(graph)).busbw_factor
    limit, switch = bounds(graph, collective), switch_bounds(graph, collective)
    if args.json:
        print_json({"collective": collective, "topology": graph.graph["name"], "algbw_GBps": limit.algbw_GBps,
                    "busbw_GBps": limit.algbw_GBps * factor, "latency_us": limit.latency_us,
                    "switch": None if switch is None else {"algbw_GBps": switch.algbw_GBps,
                                                           "busbw_GBps": switch.algbw_GBps * factor,
                                                           "latency_us": switch.latency_us}})
    else:
        print(f"{collective} on {graph.graph['name']}: algbw <= {limit.algbw_GBps:.2f} GB/s "
              f"(busbw <= {limit.algbw_GBps * factor:.2f}), latency >= {limit.latency_us:.2f} us")
        if switch is not None:
            print(f"  with in-switch reduction and multicast (nccl.nvls): algbw <= {switch.algbw_GBps:.2f} GB/s "
                  f"(busbw <= {switch.algbw_GBps * factor:.2f}), latency >= {switch.latency_us:.2f} us")
    return 0
