"""What stock NCCL does on a hardware profile: per size, the algorithm, protocol and channel count it runs
and how long that takes.

Each algorithm NCCL has for the collective (ring, tree, nvls, nvls_tree, p2p; pat and collnet are
:data:`NOT_MODELLED`) under each enabled protocol is timed by :mod:`autotaccl.simulate`'s closed form, and
the fastest is the prediction, as NCCL's tuner (``src/graph/tuning.cc``) means to pick; the channel count
follows ``enqueue.cc``. ``benchmarks/fidelity.py`` checks it against public tables; details in
``docs/internals.md``."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

import networkx as nx

from .baselines import MAX_DISTINCT, baseline, ways_through_node
from .errors import InputError
from .model.collectives import canonical_name, make_collective
from .model.protocols import Nvls, Protocol, across_nodes, canonical_protocol, ll_scale
from .model.switch import SwitchPort, multimem_us, port_share
from .model.topology import is_network_arc, num_ranks
from .simulate import Costs, algorithm_costs

ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "pat", "collnet", "p2p")
FOR = {"allreduce": ("ring", "tree", "nvls", "nvls_tree", "collnet"),
       "allgather": ("ring", "nvls", "pat", "collnet"), "reducescatter": ("ring", "nvls", "pat", "collnet"),
       "broadcast": ("ring",), "alltoall": ("p2p",)}
NOT_MODELLED = {"pat": "PAT is not modelled (NCCL runs it only with one GPU per node)",
                "collnet": "CollNet is not modelled (it needs in-network reduction, SHARP switches, which no "
                           "profile describes)"}
SIMPLE_ONLY = ("nvls", "nvls_tree")
TREE_PASSES = 2
THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
P2P_LL_BYTES = 16 << 10       # NCCL_P2P_LL_THRESHOLD: send/receive of at most this many bytes per peer use LL
_ALIASES = {"nvlstree": "nvls_tree", "nvls-tree": "nvls_tree", "collnetdirect": "collnet", "collnetchain": "collnet",
            "collnet_direct": "collnet", "collnet_chain": "collnet", "sendrecv": "p2p"}


@dataclass(frozen=True)
class NcclRow:
    """NCCL's choice at one size and its predicted time (µs) and nccl-tests bandwidths (GB/s)."""

    bytes: int
    time_us: float
    algbw: float
    busbw: float
    algorithm: str
    protocol: str
    channels: int


@dataclass(frozen=True)
class NcclPrediction:
    rows: tuple[NcclRow, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Terms:
    """The profile terms a prediction reads (calibration varies them without rebuilding the graph)."""

    protocols: Mapping[str, Protocol]
    efficiency: Mapping[str, float]       # link class -> efficiency
    channels: int
    p2p_channels_per_peer: int
    nvls: Nvls | None
    enabled: tuple[str, ...]              # protocols NCCL enables by default
    tree_efficiency: float
    ll_scale: float = 1.0                 # LL's channel ceiling at this node count over its one-node value
    channel_launch_us: float = 0.0        # per call and channel NCCL runs it on

    @classmethod
    def of(cls, graph: nx.DiGraph) -> "Terms":
        p = graph.graph["profile"]
        return cls(dict(p.protocols), {c.name: c.efficiency for c in p.link_classes.values()}, p.nccl.channels,
                   p.nccl.p2p_channels_per_peer, p.nccl.nvls, p.nccl.protocols, p.nccl.tree_efficiency,
                   ll_scale(p.gpu, p.nccl.cpu, graph.graph["nodes"]), p.nccl.channel_launch_us)

    def protocol(self, name: str) -> Protocol:
        """``name``'s terms at this node count (LL's channel ceiling across nodes, :func:`ll_scale`)."""
        return across_nodes(self.protocols[name], self.ll_scale)


def canonical_algorithm(name: str, source: str = "--algorithm") -> str:
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in ALGORITHMS:
        raise InputError(source, repr(name), f"one of: {', '.join(ALGORITHMS)}")
    return key


def nccl_channels(nbytes: float, channels: int, algorithm: str, protocol: str, ranks: int) -> int:
    """NCCL's channel count for a call of ``nbytes`` (module docstring)."""
    threshold = THRESHOLD[protocol] * (ranks if algorithm == "ring" and protocol == "LL" else 1)
    nc = channels
    while nc >= 2 and nbytes < nc * THREADS[protocol] * threshold:
        nc -= 1
    return nc


# --------------------------------------------------------------------------- the candidates


@dataclass(frozen=True)
class Candidate:
    """One (algorithm, protocol) NCCL could run, as a function of size and profile terms."""

    algorithm: str
    protocol: str
    kind: str                    # "schedule" (closed form of a baseline) or "nvls"
    costs: Costs | None = None   # schedule: its costs with `distinct` channels (more channels are instances)
    distinct: int = 1
    net_costs: Costs | None = None   # nvls_tree: the tree's NIC traffic
    ranks: int = 2
    switch_class: str = ""
    switch_rate: float = 0.0     # GB/s line rate of a GPU's switch port
    share: float = 1.0           # nvls: bytes per port and direction per byte of size
    nodes: int = 1
    heads: int = 1               # nvls: the GPUs of a switch group (each owns a slice)

    def channels(self, size: float, terms: Terms) -> int:
        if self.kind == "nvls":
            return terms.nvls.channels_on(self.nodes)
        if self.algorithm == "p2p":
            return terms.p2p_channels_per_peer
        return nccl_channels(size, terms.channels, self.algorithm, self.protocol, self.ranks)

    def time_us(self, size: float, terms: Terms) -> float:
        return self.channels(size, terms) * terms.channel_launch_us + self._run_us(size, terms)

    def _run_us(self, size: float, terms: Terms) -> float:
        proto = terms.protocol(self.protocol)
        if self.kind == "nvls":                    # the simulator's multimem model at the terms' NVLS
            port = SwitchPort.of(self.switch_rate, terms.efficiency.get(self.switch_class, 1.0), terms.nvls,
                                 self.nodes, self.heads)
            intra = multimem_us(size * self.share, size, port)
            latency = terms.nvls.latency_us
            if self.net_costs is not None:         # nvls_tree: the tree's hops and NIC traffic across nodes
                latency += self.net_costs.net_hops * proto.net_hop_us + self.net_costs.net_alpha_us
                intra = max(intra, _net_bandwidth(self.net_costs, size, proto, terms.efficiency))
            return latency + intra
        costs = self.costs
        # all of NCCL's channels (its cost model's assumption: it drops channels only where a call is too
        # small for them to matter): the distinct ones channels / distinct times over
        arcs = costs.arcs_us(size, proto, terms.efficiency)
        channels = terms.p2p_channels_per_peer if self.algorithm == "p2p" else terms.channels
        # on more than one node every channel of NCCL's crosses the network, so it runs at the network's
        # ceiling (tuning.cc caps the whole algorithm with it)
        per_channel = size * costs.connection_load * self.distinct / channels / (min(proto.ceilings) * 1e3)
        if self.algorithm == "tree":    # one thread block per channel moves every byte up and down (tuning.cc's
            per_channel *= TREE_PASSES  # 0.5 bus-to-algorithm bandwidth), at NCCL's tree efficiency
            return costs.latency_us(proto) + max(arcs, per_channel) / terms.tree_efficiency
        return costs.latency_us(proto) + max(arcs, per_channel)


def _net_bandwidth(costs: Costs, size: float, proto: Protocol, efficiency: Mapping[str, float]) -> float:
    """Time the bytes ``costs`` puts on the network (NICs and the GPUs' hops to them) need."""
    return costs.restricted(is_network_arc).arcs_us(size, proto, efficiency)


@lru_cache(maxsize=128)
def _schedule_costs(graph: nx.DiGraph, collective: str, algorithm: str, channels: int, protocol: str) -> Costs:
    return algorithm_costs(baseline(graph, collective, algorithm, channels), graph, protocol)


def candidates(graph: nx.DiGraph, collective: str, algorithms: Iterable[str] | None = None,
               protocols: Iterable[str] | None = None, terms: Terms | None = None) -> tuple[list[Candidate], list[str]]:
    """The (algorithm, protocol) pairs NCCL could run for ``collective`` on ``graph``, and notes on those
    it has but we do not model or the machine lacks."""
    name = canonical_name(collective)
    terms = terms or Terms.of(graph)
    profile = graph.graph["profile"]
    ranks, gpn, nodes = num_ranks(graph), graph.graph["gpus_per_node"], graph.graph["nodes"]
    wanted = list(FOR[name]) if algorithms is None else [canonical_algorithm(a) for a in algorithms]
    protos = list(terms.enabled) if protocols is None else [canonical_protocol(p) for p in protocols]
    notes: list[str] = []
    out: list[Candidate] = []
    switch = profile.switches[0] if profile.switches else None
    for algo in wanted:
        if algo not in FOR[name]:
            notes.append(f"{algo}: NCCL has no {algo} {name}")
            continue
        if algo in NOT_MODELLED:
            notes.append(NOT_MODELLED[algo])
            continue
        if algo in SIMPLE_ONLY:
            if terms.nvls is None or switch is None:
                notes.append(f"{algo}: not available (the profile has no NVLS-capable switch: nccl.nvls)")
                continue
            if (algo == "nvls") != (nodes == 1):
                notes.append(f"{algo}: NCCL runs it {'on one node' if algo == 'nvls' else 'across nodes'} only")
                continue
            if "Simple" not in protos:
                notes.append(f"{algo}: runs the Simple protocol only")
                continue
            share = port_share(name, gpn)
            net = _schedule_costs(graph, name, "tree", max(1, min(ways_through_node(graph), MAX_DISTINCT)), "Simple") \
                if algo == "nvls_tree" else None
            out.append(Candidate(algo, "Simple", "nvls", net_costs=net, ranks=ranks, switch_class=switch.link_class,
                                 switch_rate=profile.link_classes[switch.link_class].bandwidth_GBps, share=share,
                                 nodes=nodes, heads=len(switch.gpus)))
            continue
        if algo == "p2p":
            base, distinct = "direct", 1
        elif algo == "tree":
            base, distinct = "tree", max(1, min(ways_through_node(graph), MAX_DISTINCT, terms.channels))
        else:
            base, distinct = "ring", max(1, min(2 * ways_through_node(graph), MAX_DISTINCT, terms.channels))
        try:
            for proto in protos:
                if algo == "p2p" and proto == "LL128":      # NCCL's send/receive runs LL or Simple
                    continue
                costs = _schedule_costs(graph, name, base, distinct, proto)
                out.append(Candidate(algo, proto, "schedule", costs, distinct, ranks=ranks))
        except InputError as err:
            notes.append(f"{algo}: not possible on {graph.graph.get('name')} ({err.expected})")
    return out, notes


def best(cands: Sequence[Candidate], size: float, terms: Terms) -> tuple[Candidate, float]:
    """The fastest candidate at ``size`` and its time; AllToAll send/receive uses LL only up to
    ``P2P_LL_BYTES`` per peer, as NCCL does."""
    top = None
    for c in cands:
        if c.algorithm == "p2p" and c.protocol == "LL" and size / c.ranks > P2P_LL_BYTES:
            continue
        t = c.time_us(size, terms)
        if top is None or t < top[1]:
            top = (c, t)
    if top is None:
        raise InputError("--protocol", "LL", "a protocol NCCL uses at this size (send/receive above 16 KiB per peer "
                                              "is Simple)")
    return top


def nccl_model(graph: nx.DiGraph, collective: str, sizes: Sequence[int], algorithms: Iterable[str] | None = None,
               protocols: Iterable[str] | None = None, terms: Terms | None = None) -> NcclPrediction:
    """Per size: what stock NCCL runs on ``graph`` for ``collective`` and its predicted time.

    ``algorithms``/``protocols`` restrict the choice as ``NCCL_ALGO``/``NCCL_PROTO`` do (default: every
    algorithm NCCL has, the protocols the profile's ``nccl.protocols`` enables)."""
    name = canonical_name(collective)
    terms = terms or Terms.of(graph)
    cands, notes = candidates(graph, name, algorithms, protocols, terms)
    if not cands:
        raise InputError("--algorithm", ",".join(algorithms) if algorithms else "(any)",
                         f"an NCCL algorithm for {name} that runs on {graph.graph.get('name')}: " + "; ".join(notes))
    factor = make_collective(name, num_ranks(graph)).busbw_factor
    rows = []
    for size in sizes:
        c, t = best(cands, size, terms)
        algbw = size / t / 1e3
        rows.append(NcclRow(int(size), t, algbw, algbw * factor, c.algorithm, c.protocol, c.channels(size, terms)))
    return NcclPrediction(tuple(rows), tuple(notes))


__all__ = ["ALGORITHMS", "FOR", "NOT_MODELLED", "Candidate", "NcclPrediction", "NcclRow", "Terms", "best",
           "candidates", "canonical_algorithm", "nccl_channels", "nccl_model"]
