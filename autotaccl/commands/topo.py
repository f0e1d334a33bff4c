"""``autotaccl topo show``: the nodes, links and shared resources of a topology."""
from __future__ import annotations

from dataclasses import asdict

from ..model.topology import capacity_graph, summarize
from .common import print_json, add_hardware_args, topology_from_args


def register(subparsers) -> None:
    topo = subparsers.add_parser("topo", help="inspect a topology")
    actions = topo.add_subparsers(dest="action", required=True, parser_class=type(topo))
    show = actions.add_parser("show", help="nodes, links and resources of HARDWARE x NODES")
    add_hardware_args(show)
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=run_show)


def run_show(args) -> int:
    graph = topology_from_args(args)
    summary = summarize(graph)
    cap = capacity_graph(graph)
    links = [{"src": u, "dst": v, "kind": d["kind"], "alpha_us": d["alpha_us"], "bandwidth_GBps": d["bandwidth_GBps"],
              "resources": [f"{a}->{b}" for a, b in d["resources"]]} for u, v, d in graph.edges(data=True)]
    resources = [{"resource": f"{a}->{b}", "capacity_GBps": d["capacity"], "alpha_us": d["alpha_us"]}
                 for a, b, d in cap.edges(data=True)]
    if args.json:
        print_json({**asdict(summary), "links_list": links, "resources_list": resources})
        return 0
    print(f"{summary.name}: {summary.nodes} node(s) x {summary.gpus_per_node} GPUs = {summary.ranks} ranks, "
          f"{summary.links} links ({', '.join(f'{k} {v}' for k, v in sorted(summary.by_kind.items()))}), "
          f"{summary.resources} shared resources")
    print(f"{'src':>5} {'dst':>5} {'kind':<7} {'alpha_us':>9} {'GB/s':>8}  resources")
    for link in links:
        print(f"{link['src']:>5} {link['dst']:>5} {link['kind']:<7} {link['alpha_us']:>9.3f} "
              f"{link['bandwidth_GBps']:>8.2f}  {' '.join(link['resources'])}")
    return 0
