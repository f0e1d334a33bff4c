"""``nodes`` copies of a hardware profile as one directed graph: the only model of the machine.

Vertices of the returned graph are GPU ranks ``0..R-1`` (node ``k`` owns ``k*G .. k*G+G-1``). An edge
``u -> v`` exists where ``u`` can send to ``v`` directly and carries:

* ``alpha_us``: the latency of one transfer on it,
* ``bandwidth_GBps``: its rate when nothing else uses what it uses,
* ``resources``: the arcs of the capacity graph it occupies (an NVLink bundle, a switch out-port
  and in-port, a GPU-to-NIC hop, a NIC's egress and ingress),
* ``kind``: ``nvlink``, ``switch`` or ``net``.

``graph.graph["capacity"]`` is the capacity graph: GPUs plus switch, NIC and network vertices, every
arc with ``capacity`` (GB/s, line rate), ``alpha_us``, its ``link_class`` and that class's ``efficiency``. The simulator treats each arc as a resource; the bounds
run max-flow over it. Nothing else has a private notion of a link.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from .hardware import HardwareProfile

NETWORK = "net"
MAX_RANKS = 1024     # building the graph is quadratic in ranks: 2048 ndv2 ranks take minutes and gigabytes


def build_topology(profile: HardwareProfile, nodes: int = 1) -> nx.DiGraph:
    """The graph of ``nodes`` copies of ``profile`` joined through their NICs."""
    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    if nodes > 1 and not profile.nics:
        raise ValueError(f"profile {profile.name!r} has no NICs, so it cannot span {nodes} nodes")
    gpn = profile.gpus_per_node
    cls = profile.link_classes
    cap = nx.DiGraph()
    graph = nx.DiGraph(name=f"{profile.name}x{nodes}", profile=profile, nodes=nodes, gpus_per_node=gpn,
                       capacity=cap)
    graph.add_nodes_from((n * gpn + g, {"node": n, "local": g}) for n in range(nodes) for g in range(gpn))

    def arc(tail, head, link_class: str, capacity: float | None = None, alpha: float | None = None):
        c = cls[link_class]
        cap.add_edge(tail, head, capacity=capacity if capacity is not None else c.bandwidth_GBps,
                     alpha_us=alpha if alpha is not None else c.alpha_us, link_class=link_class,
                     efficiency=c.efficiency)
        return (tail, head)

    def connect(u: int, v: int, kind: str, resources: tuple) -> None:
        graph.add_edge(u, v, kind=kind, resources=resources, links=1,
                       alpha_us=sum(cap.edges[a]["alpha_us"] for a in resources),
                       bandwidth_GBps=min(cap.edges[a]["capacity"] for a in resources))

    for n in range(nodes):
        base = n * gpn
        for link in profile.links:
            bw = cls[link.link_class].bandwidth_GBps * link.count
            for a, b in ((link.a, link.b), (link.b, link.a)):
                connect(base + a, base + b, "nvlink", (arc(base + a, base + b, link.link_class, bw),))
        for i, switch in enumerate(profile.switches):
            hub = f"n{n}.sw{i}"
            half_alpha = cls[switch.link_class].alpha_us / 2
            for g in switch.gpus:
                arc(base + g, hub, switch.link_class, alpha=half_alpha)
                arc(hub, base + g, switch.link_class, alpha=half_alpha)
            for a in switch.gpus:
                for b in switch.gpus:
                    if a != b and not graph.has_edge(base + a, base + b):
                        connect(base + a, base + b, "switch", ((base + a, hub), (hub, base + b)))
        for k, nic in enumerate(profile.nics if nodes > 1 else ()):
            # Separate send and receive sides, so no path runs GPU -> NIC -> GPU inside a node: the
            # capacity graph admits exactly the flows the edges do (TACCL's model has no PCIe P2P).
            out, into = f"n{n}.nic{k}.out", f"n{n}.nic{k}.in"
            arc(out, NETWORK, nic.link_class)
            arc(NETWORK, into, nic.link_class, alpha=0.0)
            nic_bw = cls[nic.link_class].bandwidth_GBps
            for g, via in nic.attach.items():
                # A GPU reaches its NIC over `via` (a PCIe class) both ways, paying its alpha on each side;
                # without one, the hop is free and as fast as the NIC.
                arc(base + g, out, via or nic.link_class, capacity=None if via else nic_bw, alpha=None if via else 0.0)
                arc(into, base + g, via or nic.link_class, capacity=None if via else nic_bw, alpha=None if via else 0.0)

    if nodes > 1:
        nic_of = _nic_of(profile)
        for u in graph.nodes:
            for v in graph.nodes:
                nu, nv = u // gpn, v // gpn
                if nu == nv or (u % gpn) not in nic_of or (v % gpn) not in nic_of:
                    continue
                out, into = f"n{nu}.nic{nic_of[u % gpn]}.out", f"n{nv}.nic{nic_of[v % gpn]}.in"
                connect(u, v, "net", ((u, out), (out, NETWORK), (NETWORK, into), (into, v)))
    return graph


def _nic_of(profile: HardwareProfile) -> dict[int, int]:
    """Each local GPU's NIC: the first that attaches it directly, else the first that reaches it at all."""
    choice: dict[int, int] = {}
    for near_only in (True, False):
        for k, nic in enumerate(profile.nics):
            for g in nic.attach:
                if g not in choice and (g not in nic.far or not near_only):
                    choice[g] = k
    return choice


# --------------------------------------------------------------------------- queries


def is_network_arc(arc: tuple) -> bool:
    """Whether a capacity-graph arc is part of the network: a NIC's side, or a GPU's hop to its NIC."""
    return any(isinstance(end, str) and (end == NETWORK or ".nic" in end) for end in arc)


def num_ranks(graph: nx.DiGraph) -> int:
    return graph.graph["nodes"] * graph.graph["gpus_per_node"]


def node_of(graph: nx.DiGraph, rank: int) -> int:
    return rank // graph.graph["gpus_per_node"]


def capacity_graph(graph: nx.DiGraph) -> nx.DiGraph:
    return graph.graph["capacity"]


@dataclass(frozen=True)
class TopologySummary:
    name: str
    nodes: int
    gpus_per_node: int
    ranks: int
    links: int
    resources: int
    by_kind: dict[str, int]


def summarize(graph: nx.DiGraph) -> TopologySummary:
    kinds: dict[str, int] = {}
    for _, _, kind in graph.edges(data="kind"):
        kinds[kind] = kinds.get(kind, 0) + 1
    return TopologySummary(graph.graph["name"], graph.graph["nodes"], graph.graph["gpus_per_node"],
                           num_ranks(graph), graph.number_of_edges(), capacity_graph(graph).number_of_edges(), kinds)
