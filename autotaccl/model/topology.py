"""``nodes`` copies of a hardware profile as one directed graph: the only model of the machine.

Vertices are GPU ranks (node ``k`` owns ``k*G .. k*G+G-1``); an edge ``u -> v`` where ``u`` sends to
``v`` directly carries ``alpha_us``, ``bandwidth_GBps``, ``kind`` and the capacity-graph arcs it
occupies (``resources``). ``graph.graph["capacity"]`` is the capacity graph (GPUs, switches, NICs, the
network) that the simulator and the bounds share. The attributes one by one: ``docs/internals.md``."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import networkx as nx

from ..errors import ParameterError
from ..sizes import parse_size
from .hardware import HardwareProfile, RailNetwork, load_hardware, profile_to_dict

NETWORK = "net"
SPINE = "spine"
MAX_RANKS = 1024     # building the graph is quadratic in ranks: 2048 ndv2 ranks take minutes and gigabytes


def nodes_problem(profile: HardwareProfile, nodes: object) -> str | None:
    """What keeps ``nodes`` copies of ``profile`` from making one topology (None: nothing does)."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        return "a whole number >= 1"
    if nodes * profile.gpus_per_node > MAX_RANKS:
        return f"at most {MAX_RANKS // profile.gpus_per_node} nodes of {profile.name} ({MAX_RANKS} ranks in all)"
    if nodes > 1 and not profile.nics:
        return f"1 (profile {profile.name} has no NICs)"
    return None


def build_topology(profile: HardwareProfile, nodes: int = 1) -> nx.DiGraph:
    """The graph of ``nodes`` copies of ``profile`` joined through their NICs (ParameterError ``nodes``
    for a count it cannot be built for: see :func:`nodes_problem`)."""
    problem = nodes_problem(profile, nodes)
    if problem:
        raise ParameterError("nodes", str(nodes), problem)
    gpn = profile.gpus_per_node
    cls = profile.link_classes
    cap = nx.DiGraph()
    graph = nx.DiGraph(name=f"{profile.name}x{nodes}", profile=profile, nodes=nodes, gpus_per_node=gpn,
                       capacity=cap)
    graph.add_nodes_from((n * gpn + g, {"node": n, "local": g}) for n in range(nodes) for g in range(gpn))

    arcs: dict[tuple, dict] = {}   # (tail, head) -> the arc's attributes: plain dict look-ups for connect()

    def arc(tail, head, link_class: str | None, capacity: float | None = None, alpha: float | None = None):
        """An arc of ``link_class`` (None: a switch port of the rail network, no class of its own)."""
        c = cls[link_class] if link_class else None
        cap.add_edge(tail, head, capacity=capacity if capacity is not None else c.bandwidth_GBps,
                     alpha_us=alpha if alpha is not None else (c.alpha_us if c else 0.0), link_class=link_class,
                     efficiency=c.efficiency if c else 1.0)
        arcs[tail, head] = cap[tail][head]
        return (tail, head)

    def edge(kind: str, resources: tuple) -> dict:
        return {"kind": kind, "resources": resources, "links": 1,
                "alpha_us": sum(arcs[a]["alpha_us"] for a in resources),
                "bandwidth_GBps": min(arcs[a]["capacity"] for a in resources)}

    def connect(u: int, v: int, kind: str, resources: tuple) -> None:
        graph.add_edge(u, v, **edge(kind, resources))

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
            if profile.network is None:
                arc(out, NETWORK, nic.link_class)
                arc(NETWORK, into, nic.link_class, alpha=0.0)
            else:
                _rail_ports(arc, profile, n, k)
            nic_bw = cls[nic.link_class].bandwidth_GBps
            for g, via in nic.attach.items():
                # A GPU reaches its NIC over `via` (a PCIe class) both ways, paying its alpha on each side;
                # without one, the hop is free and as fast as the NIC.
                arc(base + g, out, via or nic.link_class, capacity=None if via else nic_bw, alpha=None if via else 0.0)
                arc(into, base + g, via or nic.link_class, capacity=None if via else nic_bw, alpha=None if via else 0.0)

    if nodes > 1:
        nic_of = _nic_of(profile)
        route = _flat_route if profile.network is None else _rail_route(profile.network)
        ends = [(u, u // gpn, nic_of[u % gpn]) for u in graph.nodes if u % gpn in nic_of]
        graph.add_edges_from(
            (u, v, edge("net", ((u, f"n{nu}.nic{ku}.out"),) + route(nu, ku, nv, kv) + ((f"n{nv}.nic{kv}.in", v),)))
            for u, nu, ku in ends for v, nv, kv in ends if nu != nv)
    return graph


def topology_for(hardware: str, nodes: int = 1, chunk_size: str | None = None) -> nx.DiGraph:
    """The graph of ``nodes`` x the profile ``hardware`` (a name or a file; a TACCL JSON needs ``chunk_size``):
    what ``--hardware``, ``--nodes`` and ``--chunk-size`` give."""
    chunk = parse_size(chunk_size, "--chunk-size") if chunk_size else None
    return build_topology(load_hardware(hardware, chunk), nodes)


def _flat_route(nu: int, ku: int, nv: int, kv: int) -> tuple:
    """NIC ``ku`` of node ``nu`` to NIC ``kv`` of node ``nv`` through the one non-blocking switch."""
    out, into = f"n{nu}.nic{ku}.out", f"n{nv}.nic{kv}.in"
    return ((out, NETWORK), (NETWORK, into))


# --------------------------------------------------------------------------- rail-optimized networks


def _leaf(network: RailNetwork, node: int, rail: int) -> str:
    """Rail ``rail``'s leaf switch of the scalable unit that holds ``node``."""
    unit = node // network.nodes_per_leaf if network.nodes_per_leaf else 0
    return f"rail{rail}.leaf{unit}"


def _rail_ports(arc, profile: HardwareProfile, node: int, rail: int) -> None:
    """The arcs of NIC ``rail`` of ``node`` on a rail-optimized network.

    The NIC's egress ``out -> tx`` and ingress ``rx -> in`` carry its class (rate and alpha). From ``tx``
    the port reaches its rail's leaf at the NIC's rate, or the spine at its share of the leaf's uplinks
    (rate / oversubscription, paying ``spine_alpha_us``); ``rx`` takes the same two ways back.
    """
    network, nic = profile.network, profile.nics[rail]
    rate = profile.link_classes[nic.link_class].bandwidth_GBps
    share = rate / network.oversubscription
    pre = f"n{node}.nic{rail}"
    leaf = _leaf(network, node, rail)
    arc(f"{pre}.out", f"{pre}.tx", nic.link_class)
    arc(f"{pre}.rx", f"{pre}.in", nic.link_class, alpha=0.0)
    arc(f"{pre}.tx", leaf, None, capacity=rate)
    arc(leaf, f"{pre}.rx", None, capacity=rate)
    arc(f"{pre}.tx", SPINE, None, capacity=share, alpha=network.spine_alpha_us)
    arc(SPINE, f"{pre}.rx", None, capacity=share)


def _rail_route(network: RailNetwork):
    """Routes on a rail network: through the leaf on one rail and unit, else through the spine."""
    def route(nu: int, ku: int, nv: int, kv: int) -> tuple:
        tx, rx = f"n{nu}.nic{ku}.tx", f"n{nv}.nic{kv}.rx"
        leaf = _leaf(network, nu, ku)
        via = leaf if leaf == _leaf(network, nv, kv) else SPINE
        return ((f"n{nu}.nic{ku}.out", tx), (tx, via), (via, rx), (rx, f"n{nv}.nic{kv}.in"))
    return route


def _nic_of(profile: HardwareProfile) -> dict[int, int]:
    """Each local GPU's NIC: the first that attaches it directly, else the first that reaches it at all."""
    choice: dict[int, int] = {}
    for near_only in (True, False):
        for k, nic in enumerate(profile.nics):
            for g in nic.attach:
                if g not in choice and (g not in nic.far or not near_only):
                    choice[g] = k
    return choice


def fingerprint(graph: nx.DiGraph) -> str:
    """A short hash of what the graph is built from: its profile's content (every number, link and NIC;
    not its file name or description) and the node count. Equal fingerprints, equal graphs."""
    content = {k: v for k, v in profile_to_dict(graph.graph["profile"]).items() if k != "description"}
    text = json.dumps({"profile": content, "nodes": graph.graph["nodes"]}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- queries


def is_network_arc(arc: tuple) -> bool:
    """Whether a capacity-graph arc is part of the network: a NIC's side, or a GPU's hop to its NIC."""
    return any(isinstance(end, str) and (end == NETWORK or ".nic" in end) for end in arc)


def reducing_switch(graph: nx.DiGraph, group) -> str | None:
    """The capacity-graph vertex of a switch that every rank of ``group`` attaches to and that reduces
    (its profile's ``nccl.nvls``): where their switch operations run; None if there is none."""
    profile = graph.graph.get("profile")
    if profile is None or profile.nccl.nvls is None:
        return None
    gpn = graph.graph["gpus_per_node"]
    nodes = {g // gpn for g in group}
    if len(nodes) != 1:
        return None
    node, local = nodes.pop(), {g % gpn for g in group}
    for i, switch in enumerate(profile.switches):
        if local <= set(switch.gpus):
            return f"n{node}.sw{i}"
    return None


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
