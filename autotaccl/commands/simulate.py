"""``autotaccl simulate ALGO.json``: simulated time and bandwidths per buffer size (for a protocol and instance
count), as nccl-tests prints them."""
from __future__ import annotations

from ..errors import InputError
from ..model.algorithm import VerificationError, load_algorithm, verify
from ..model.topology import num_ranks
from ..sizes import parse_size_range
from .common import add_hardware_args, add_run_args, print_json, run_from_args, topology_from_args

ELEMENT_BYTES = 4  # nccl-tests' count column for type float


def register(subparsers) -> None:
    parser = subparsers.add_parser("simulate", help="simulate an algorithm JSON on a topology at many sizes")
    parser.add_argument("algorithm", help="algorithm JSON file")
    add_hardware_args(parser)
    parser.add_argument("--sizes", default="1K:1G:x2", help="MIN:MAX[:xFACTOR|:+STEP] or a list 1K,1M (default 1K:1G:x2)")
    add_run_args(parser, "to simulate")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def load_for(path: str, graph):
    """The algorithm in ``path``, checked against ``graph``: rank count, links, postcondition."""
    algorithm = load_algorithm(path)
    ranks = num_ranks(graph)
    if algorithm.ranks != ranks:
        raise InputError(path, "collective.ranks", f"{ranks} ranks to match {graph.graph['name']} ({algorithm.ranks} given)")
    try:
        verify(algorithm, graph)
    except VerificationError as err:
        where = "transfers" if err.index is None else f"transfers[{err.index}]"
        raise InputError(path, where, f"a valid {algorithm.collective.name} on {graph.graph['name']} ({err})") from None
    return algorithm


def run(args) -> int:
    from ..bounds import bound_algbw, bounds
    from ..simulate import simulate_sizes

    sizes = parse_size_range(args.sizes, "--sizes")
    protocol, instances = run_from_args(args)
    graph = topology_from_args(args)
    algorithm = load_for(args.algorithm, graph)
    coll = algorithm.collective
    limit = bounds(graph, coll.name)
    rows = []
    for result in simulate_sizes(algorithm, graph, sizes, protocol, instances):
        ceiling = bound_algbw(limit, result.bytes)
        rows.append({"bytes": result.bytes, "count": result.bytes // ELEMENT_BYTES, "time_us": result.time_us,
                     "algbw": result.algbw_GBps, "busbw": result.busbw_GBps, "bound_algbw": ceiling,
                     "pct_of_bound": 100.0 * result.algbw_GBps / ceiling})
    if args.json:
        print_json({"algorithm": algorithm.name, "collective": coll.name, "topology": graph.graph["name"],
                    "ranks": coll.ranks, "protocol": protocol, "instances": instances, "rows": rows})
        return 0
    redop = "sum" if coll.is_reduction else "none"
    root = coll.root if coll.name == "broadcast" else -1
    print(f"# {algorithm.name} ({coll.name}, {coll.ranks} ranks) simulated on {graph.graph['name']}, protocol "
          f"{protocol}, {instances} instance(s)")
    print(f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>9}  {'algbw':>7}  "
          f"{'busbw':>7}  {'% of bound':>10}")
    print(f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>9}  {'(GB/s)':>7}  {'(GB/s)':>7}")
    for row in rows:
        print(f"{row['bytes']:>12}  {row['count']:>12}  {'float':>8}  {redop:>6}  {root:>6}  {row['time_us']:>9.2f}  "
              f"{row['algbw']:>7.2f}  {row['busbw']:>7.2f}  {row['pct_of_bound']:>10.1f}")
    return 0
