"""``autotaccl nccl-model``: what stock NCCL runs on a profile at each size, and how fast (:mod:`autotaccl.nccl_model`).

Columns as nccl-tests prints them, plus the algorithm, protocol and channel count NCCL would pick;
``--algorithm``/``--protocol`` restrict the choice as ``NCCL_ALGO``/``NCCL_PROTO`` do (comma lists).
"""
from __future__ import annotations

from ..model.collectives import canonical_name
from ..sizes import parse_size_range
from .common import description, add_hardware_args, print_json, topology_from_args

ELEMENT_BYTES = 4  # nccl-tests' count column for type float


def register(subparsers) -> None:
    parser = subparsers.add_parser("nccl-model", help="predict stock NCCL's algorithm, protocol, channels and time per size",
                                   description=description(__doc__))
    add_hardware_args(parser)
    parser.add_argument("--collective", required=True, help="allgather|reducescatter|allreduce|alltoall|broadcast")
    parser.add_argument("--sizes", default="8:8G:x2", help="MIN:MAX[:xFACTOR|:+STEP] or a list 1K,1M (default 8:8G:x2)")
    parser.add_argument("--algorithm", help="restrict as NCCL_ALGO: ring, tree, nvls, nvls_tree, p2p (comma list)")
    parser.add_argument("--protocol", help="restrict as NCCL_PROTO: LL, LL128, Simple (comma list)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def choice_list(value: str | None) -> list[str] | None:
    """``"ring,tree"`` -> ``["ring", "tree"]`` (None when not given)."""
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()] or None


def run(args) -> int:
    from ..nccl_model import nccl_model

    collective = canonical_name(args.collective)
    sizes = parse_size_range(args.sizes, "--sizes")
    graph = topology_from_args(args)
    prediction = nccl_model(graph, collective, sizes, choice_list(args.algorithm), choice_list(args.protocol))
    rows = [{"bytes": r.bytes, "time_us": r.time_us, "algbw": r.algbw, "busbw": r.busbw, "algorithm": r.algorithm,
             "protocol": r.protocol, "channels": r.channels} for r in prediction.rows]
    if args.json:
        print_json({"rows": rows, "collective": collective, "topology": graph.graph["name"],
                    "notes": list(prediction.notes)})
        return 0
    redop = "sum" if collective in ("allreduce", "reducescatter") else "none"
    print(f"# stock NCCL ({collective}) predicted on {graph.graph['name']}")
    for note in prediction.notes:
        print(f"# note: {note}")
    print(f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>9}  {'algbw':>7}  "
          f"{'busbw':>7}  {'algorithm':>9}  {'protocol':>8}  {'channels':>8}")
    print(f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>9}  {'(GB/s)':>7}  {'(GB/s)':>7}")
    for r in rows:
        print(f"{r['bytes']:>12}  {r['bytes'] // ELEMENT_BYTES:>12}  {'float':>8}  {redop:>6}  {-1:>6}  "
              f"{r['time_us']:>9.2f}  {r['algbw']:>7.2f}  {r['busbw']:>7.2f}  {r['algorithm']:>9}  {r['protocol']:>8}  "
              f"{r['channels']:>8}")
    return 0
