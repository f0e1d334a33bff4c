"""Event-driven fluid simulation of an :class:`~autotaccl.model.algorithm.Algorithm` on a topology graph,
for one runtime protocol (LL, LL128, Simple) and instance count.

Time is the protocol's launch plus the makespan of the transfers; each transfer waits for its
dependencies and its connection, pays its edge's alpha, then shares every arc it crosses fairly with the
others, in rounds of at most ``ROUND_BYTES`` (a runtime's pipelining). Switch operations cross their
group's switch ports at the NVLS rate (:mod:`autotaccl.model.switch`); a load-reduce and the store the
runtime fuses with it (:func:`~autotaccl.model.algorithm.fused_switch_pairs`) are one operation, which
stores each piece as it reduces it: one job over both operations' ports (the asker's twice), one latency.
The lanes' steps (``op_us``) are whole steps over the busiest switch port, as in the closed form.
The switch operations that open a schedule start at its launch, tuning.cc's NVLS latency (NVLS has no
base latency beside it, and no per-hop term). :func:`estimate` is the closed form
the simulation approaches. Bandwidths follow nccl-tests (``msccl-xml-and-nccl-tests.md`` §5.4). The model
term by term: ``docs/internals.md``."""
from __future__ import annotations

import heapq
import math
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Mapping

import networkx as nx

from .errors import InputError
from .gcpause import gc_paused
from .model.algorithm import Algorithm, Transfer, fused_switch_pairs
from .model.collectives import canonical_name, make_collective
from .model.dependencies import transfer_dependencies
from .model.switch import (COLLECTIVES as SWITCH_COLLECTIVES, PROTOCOL as SWITCH_PROTOCOL, SwitchPort, byte_weight,
                           multimem_us, port_share, switch_port)
from .model.topology import reducing_switch
from .model.protocols import (PROTOCOLS, Protocol, across_nodes, canonical_protocol, default_protocols,
                              edge_latency, is_net, ll_scale)

ROUND_BYTES = 1 << 20
MAX_ROUNDS = 64
CACHED_TRANSFERS = 3_000_000    # dependencies kept for this many transfers (:class:`_RecentDependencies`)
DEFAULT_PROTOCOL = "Simple"


@dataclass(frozen=True)
class SimResult:
    bytes: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float


@dataclass(frozen=True)
class _Plan:
    """What does not depend on the size: dependencies, connections, arcs, latencies and rates."""

    deps: tuple[int, ...]                    # number of dependencies of each transfer
    dependents: tuple[tuple[int, ...], ...]
    conn: tuple[int, ...]                    # connection of each transfer
    arcs: tuple[tuple[int, ...], ...]        # arcs each transfer's bytes cross (twice: it crosses it twice)
    alpha_us: tuple[float, ...]              # latency of each transfer (link + protocol)
    chunks: tuple[int, ...]                  # chunks moved by each transfer
    share: tuple[float, ...]                 # per arc: payload bytes/µs one instance copy gets when alone
    ceiling: tuple[float, ...]               # per transfer: the most its channel moves, bytes/µs
    launch_us: float
    instances: int
    num_conns: int
    through: tuple[int, ...] = ()            # the switch operations
    port: SwitchPort | None = None           # their switch's terms
    plain_rate: float = 0.0                  # a copy's rate over one of its ports (bytes/µs, one instance)
    port_chunks: int = 0                     # the chunks of switch operations over their busiest port


def rounds(chunk_bytes: float) -> int:
    """How many pipelined rounds a chunk of ``chunk_bytes`` is split into."""
    return max(1, min(math.ceil(chunk_bytes / ROUND_BYTES), MAX_ROUNDS))


def protocol_terms(graph: nx.DiGraph, protocol: str | None = None) -> Protocol:
    """The cost terms of ``protocol`` (default Simple) on ``graph``'s profile at its node count (LL across nodes)."""
    name = canonical_protocol(protocol or DEFAULT_PROTOCOL)
    profile = graph.graph.get("profile")
    if profile is None:
        return default_protocols()[name]
    return across_nodes(profile.protocols[name], ll_scale(profile.gpu, profile.nccl.cpu, graph.graph.get("nodes", 1)))


def simulate(algorithm: Algorithm, graph: nx.DiGraph, size: int, protocol: str | None = None,
             instances: int = 1) -> SimResult:
    """Simulated time and nccl-tests bandwidths of ``algorithm`` on ``graph`` at nccl-tests size ``size``."""
    return _run(_plan(algorithm, graph, protocol, instances), algorithm, size)


def simulate_switch(graph: nx.DiGraph, collective: str, size: int, protocol: str | None = None) -> SimResult:
    """The switch's own ``collective`` on one node (NVLS: multimem load-reduce of every GPU's slice and/or
    multimem store of it, :mod:`autotaccl.model.switch`) at nccl-tests size ``size``: the call's latency
    plus the lanes' steps. Only Simple moves data through the switch."""
    name = canonical_name(collective)
    if canonical_protocol(protocol or SWITCH_PROTOCOL) != SWITCH_PROTOCOL:
        raise InputError("--protocol", str(protocol), f"{SWITCH_PROTOCOL} (multimem operations move no LL lines)")
    profile, nodes = graph.graph["profile"], graph.graph["nodes"]
    port = switch_port(profile, nodes)
    if port is None or nodes != 1 or name not in SWITCH_COLLECTIVES:
        raise InputError("--collective", name, f"one of {', '.join(SWITCH_COLLECTIVES)} on one node of a profile "
                                               "whose switch reduces (nccl.nvls)")
    gpn = graph.graph["gpus_per_node"]
    time = port.nvls.latency_us + multimem_us(size * port_share(name, gpn), size, port)
    algbw = size / time / 1e3
    return SimResult(int(size), time, algbw, algbw * make_collective(name, gpn).busbw_factor)


def floor_us(algorithm: Algorithm, graph: nx.DiGraph, size: int, protocol: str | None = None,
             instances: int = 1) -> float:
    """A lower bound on :func:`simulate`'s time, for a fraction of its cost: launch + the largest of the
    longest dependency chain (each transfer's latency and its bytes at its solo rate), the busiest arc's
    bytes at its full share and the busiest connection's bytes at its transfers' solo rates."""
    return simulate_below(algorithm, graph, size, 0.0, protocol, instances)[0]


def simulate_below(algorithm: Algorithm, graph: nx.DiGraph, size: int, limit_us: float, protocol: str | None = None,
                   instances: int = 1) -> tuple[float, SimResult | None]:
    """The :func:`floor_us` of ``algorithm``, and its simulation unless that floor is already ``limit_us`` or
    more (None then): one preparation for both."""
    plan = _plan(algorithm, graph, protocol, instances)
    floor = plan.launch_us + _floor(plan, algorithm, size)
    return floor, (None if floor >= limit_us else _run(plan, algorithm, size))


def _floor(plan: _Plan, algorithm: Algorithm, size: int) -> float:
    nbytes, k = _pieces(plan, algorithm, size)
    solo = _solo(plan)
    ready = [0.0] * len(nbytes)          # when a transfer's dependencies are done, at the earliest
    chain = 0.0
    arc_bytes = [0.0] * len(plan.share)
    conn_us = [0.0] * plan.num_conns
    for i, b in enumerate(nbytes):       # dependencies point backwards: each is final when reached
        own = b / solo[i]
        end = ready[i] + plan.alpha_us[i] + own
        chain = max(chain, end)
        for d in plan.dependents[i]:
            if ready[d] < end:
                ready[d] = end
        conn_us[plan.conn[i]] += k * own
        for a in plan.arcs[i]:
            arc_bytes[a] += k * b
    arcs = max((b / s for b, s in zip(arc_bytes, plan.share)), default=0.0)
    return max(chain, arcs, max(conn_us))


def transfer_times(algorithm: Algorithm, graph: nx.DiGraph, size: int, protocol: str | None = None,
                   instances: int = 1) -> list[float]:
    """What each transfer of ``algorithm`` takes alone at ``size`` (µs): its latency and one round of its
    bytes at its narrowest arc's share (at most the channel ceiling)."""
    plan = _plan(algorithm, graph, protocol, instances, dependencies=False)
    nbytes, _ = _pieces(plan, algorithm, size)
    return [alpha + b / rate for alpha, b, rate in zip(plan.alpha_us, nbytes, _solo(plan))]


def simulate_sizes(algorithm: Algorithm, graph: nx.DiGraph, sizes: Iterable[int], protocol: str | None = None,
                   instances: int = 1) -> list[SimResult]:
    plan = _plan(algorithm, graph, protocol, instances)
    return [_run(plan, algorithm, size) for size in sizes]


# --------------------------------------------------------------------------- preparation


class _RecentDependencies:
    """The dependencies of the transfer lists simulated last, shared by simulate() calls on the same
    algorithm at several sizes, protocols and instance counts. Each entry holds its whole list alive, so
    the cache keeps ``limit`` transfers in all (and always the latest list): kept by count (64 lists),
    two syntheses of DGX-H100 x64 AllReduce, whose candidates have a million transfers, went past 9 GB."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0      # held: the transfers of every kept list
        self.entries: OrderedDict[tuple[Transfer, ...], tuple[tuple[int, ...], ...]] = OrderedDict()

    def __call__(self, transfers: tuple[Transfer, ...]) -> tuple[tuple[int, ...], ...]:
        deps = self.entries.get(transfers)
        if deps is None:
            deps = self.entries[transfers] = transfer_dependencies(transfers)
            self.held += len(transfers)
        self.entries.move_to_end(transfers)
        while self.held > self.limit and len(self.entries) > 1:
            self.held -= len(self.entries.popitem(last=False)[0])
        return deps


_dependencies = _RecentDependencies(CACHED_TRANSFERS)


def _check_instances(instances: int) -> int:
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise ValueError(f"instances must be a whole number >= 1 (got {instances!r})")
    return instances


def _edge(graph: nx.DiGraph, t: Transfer, i: int) -> dict:
    if not graph.has_edge(t.src, t.dst):
        raise ValueError(f"transfer {i}: no link from rank {t.src} to rank {t.dst} in {graph.graph.get('name')}")
    edge = graph.edges[t.src, t.dst]
    if not edge["resources"]:
        raise ValueError(f"transfer {i}: the link from rank {t.src} to rank {t.dst} holds no resources")
    return edge


def _switch_arcs(graph: nx.DiGraph, t: Transfer, i: int) -> tuple[tuple, ...]:
    """The switch ports a switch operation's bytes cross (module docstring)."""
    hub = reducing_switch(graph, t.group)
    if hub is None:
        raise ValueError(f"transfer {i}: ranks {list(t.group)} share no switch that reduces in {graph.graph.get('name')}")
    if t.op == "switch_reduce":
        return tuple((g, hub) for g in t.group) + ((hub, t.dst),)
    return ((t.src, hub),) + tuple((hub, g) for g in t.group)


@gc_paused()
def _plan(algorithm: Algorithm, graph: nx.DiGraph, protocol: str | None = None, instances: int = 1,
          dependencies: bool = True) -> _Plan:
    """``dependencies=False``: none, and no dependents (for what times each transfer alone)."""
    proto = protocol_terms(graph, protocol)
    instances = _check_instances(instances)
    transfers = algorithm.transfers
    deps = _dependencies(transfers) if dependencies else ((),) * len(transfers)
    dependents: list[list[int]] = [[] for _ in transfers] if dependencies else []
    for i, ds in enumerate(deps):
        for d in ds:
            dependents[d].append(i)
    cap = graph.graph["capacity"]
    arc_ids: dict[tuple, int] = {}
    conn_ids: dict[tuple, int] = {}
    edges: dict[tuple[int, int], tuple[tuple[int, ...], float, float]] = {}
    conns, arcs, alphas, ceiling, through = [], [], [], [], []
    fused = fused_switch_pairs(transfers) if any(t.group for t in transfers) else {}
    follows = set(fused.values())        # stores timed with their load-reduce: no bytes, no latency of their own
    chunks = [0 if i in follows else len(t.chunks) for i, t in enumerate(transfers)]
    for i, t in enumerate(transfers):
        if t.group:
            ports = () if i in follows else _switch_arcs(graph, t, i)
            if i in fused:
                ports += _switch_arcs(graph, transfers[fused[i]], fused[i])
            arcs.append(tuple(arc_ids.setdefault(a, len(arc_ids)) for a in ports))
            opening = dependencies and not deps[i]
            alphas.append(0.0 if i in follows or opening else 2 * cap.edges[ports[0]]["alpha_us"] + proto.hop_us)
            ceiling.append(math.inf)
            conns.append(conn_ids.setdefault((t.op, t.src, t.channel), len(conn_ids)))
            through.append(i)
            continue
        key = (t.src, t.dst)
        if key not in edges:
            edge = _edge(graph, t, i)
            held = tuple(arc_ids.setdefault(a, len(arc_ids)) for a in edge["resources"])
            edges[key] = (held, edge_latency(edge, proto.hops), proto.ceilings[is_net(edge)] * 1e3)
        held, alpha, most = edges[key]
        arcs.append(held)
        alphas.append(alpha)
        ceiling.append(most)
        conns.append(conn_ids.setdefault((t.src, t.dst, t.channel, t.link), len(conn_ids)))
    share = [0.0] * len(arc_ids)
    for a, j in arc_ids.items():
        data = cap.edges[a]
        share[j] = data["capacity"] * 1e3 * data.get("efficiency", 1.0) * proto.efficiency / instances
    launch, port, plain = proto.launch_us, None, 0.0
    switch_load: dict[int, int] = defaultdict(int)
    for i in through:
        for a in arcs[i]:
            switch_load[a] += chunks[i]
    if through:
        profile = graph.graph["profile"]
        port = switch_port(profile, graph.graph["nodes"])
        link = profile.link_classes[profile.switches[0].link_class]
        plain = link.bandwidth_GBps * 1e3 * link.efficiency * proto.efficiency
        launch = max(launch, port.nvls.latency_us)
    return _Plan(tuple(len(d) for d in deps), tuple(map(tuple, dependents)), tuple(conns), tuple(arcs),
                 tuple(alphas), tuple(chunks), tuple(share), tuple(ceiling),
                 launch, instances, len(conn_ids), tuple(through), port, plain, max(switch_load.values(), default=0))


# --------------------------------------------------------------------------- event loop


def _run(plan: _Plan, algorithm: Algorithm, size: int) -> SimResult:
    collective = algorithm.collective
    nbytes, k = _pieces(plan, algorithm, size)
    time_us = plan.launch_us + _fluid(plan, nbytes, k)
    algbw = size / time_us / 1e3
    return SimResult(size, time_us, algbw, algbw * collective.busbw_factor)


def _pieces(plan: _Plan, algorithm: Algorithm, size: int) -> tuple[list[float], int]:
    """Per instance copy at ``size``: each transfer's bytes per round, and the rounds."""
    if size <= 0 or not plan.deps:
        raise ValueError("simulate needs a positive size and at least one transfer")
    chunk = algorithm.collective.chunk_bytes(size) / plan.instances
    k = rounds(chunk)
    nbytes = [c * chunk / k for c in plan.chunks]
    if plan.through:
        weight = byte_weight(size, plan.port, plan.plain_rate, plan.port_chunks * algorithm.collective.chunk_bytes(size))
        for i in plan.through:
            nbytes[i] *= weight
    return nbytes, k


def _solo(plan: _Plan) -> list[float]:
    """Each transfer's rate when it moves alone: its narrowest arc's share (over the times it crosses the
    arc), at most the channel ceiling."""
    return [min(most, min((plan.share[a] / held.count(a) for a in held), default=math.inf))
            for most, held in zip(plan.ceiling, plan.arcs)]


@gc_paused()
def _fluid(plan: _Plan, nbytes: list[float], k: int) -> float:
    """Makespan of ``k`` rounds of the plan (module docstring), transfers of ``nbytes`` per copy.

    Job ``r * n + i`` is transfer ``i`` of round ``r``; its id is its priority. Events (a heap of
    ``(time, 2*job)`` for "latency over", ``(time, 2*job + 1)`` for "bytes done") that fall within a
    relative 1e-12 of each other are handled together, so the many transfers of a symmetric step
    update the shared rates once. A finish entry is stale unless its time is the job's current
    ``finish`` (rates changed since it was pushed). Only the jobs on arcs whose user count changed
    while others use them get new rates.
    """
    n = len(nbytes)
    deps, dependents, conn_of, arcs_of, alpha = plan.deps, plan.dependents, plan.conn, plan.arcs, plan.alpha_us
    share = plan.share
    solo = _solo(plan)
    heappush, heappop = heapq.heappush, heapq.heappop
    total = n * k
    pending = list(deps) * k
    rate = [0.0] * total
    remaining = [0.0] * total
    since = [0.0] * total
    finish = [-1.0] * total
    users: list[set[int]] = [set() for _ in share]     # jobs moving bytes over each arc
    load = [0] * len(share)                             # ... counted as often as each crosses it
    busy = [False] * plan.num_conns
    queue: list[list[int]] = [[] for _ in busy]       # per connection: heap of jobs whose latency is over
    events: list[tuple[float, int]] = []
    done = 0
    now = end_time = 0.0
    eligible: list[int] = []
    for r in range(k):
        base = r * n
        for i in range(n):
            if not deps[i]:
                if alpha[i] > 0:
                    events.append((alpha[i], 2 * (base + i)))
                else:
                    eligible.append(base + i)
    heapq.heapify(events)
    while events or eligible:
        finished: list[int] = []
        if not eligible:
            now = events[0][0]
            limit = now + 1e-12 * now
            while events and events[0][0] <= limit:
                t, code = heappop(events)
                job = code >> 1
                if code & 1:
                    if finish[job] == t:
                        finish[job] = -2.0       # done (a second entry with the same time is now stale)
                        finished.append(job)
                else:
                    eligible.append(job)
        dirty: dict[int, int] = {}              # arc -> its user count before this event
        freed: list[int] = []
        for job in finished:
            i = job % n
            done += 1
            end_time = now
            c = conn_of[i]
            busy[c] = False
            freed.append(c)
            for a in arcs_of[i]:
                if load[a] > 1 and a not in dirty:
                    dirty[a] = load[a]
                load[a] -= 1
                users[a].discard(job)
            base = job - i
            for d in dependents[i]:
                inst = base + d
                pending[inst] -= 1
                if not pending[inst]:
                    if alpha[d] > 0:
                        heappush(events, (now + alpha[d], 2 * inst))
                    else:
                        eligible.append(inst)
        for job in eligible:
            c = conn_of[job % n]
            heappush(queue[c], job)
            freed.append(c)
        eligible = []
        affected: set[int] = set()
        for c in freed:
            if not busy[c] and queue[c]:
                job = heappop(queue[c])
                busy[c] = True
                i = job % n
                remaining[job] = nbytes[i]
                since[job] = now
                for a in arcs_of[i]:
                    if load[a] and a not in dirty:
                        dirty[a] = load[a]
                    load[a] += 1
                    users[a].add(job)
                affected.add(job)
        # a job's rate can only change where an arc's share crosses it: skip those moving slower
        # than the arc's smaller share (before or after), they are limited elsewhere
        for a, before in dirty.items():
            others = users[a]
            now_using = load[a]
            if now_using and now_using != before:   # (the same count: one left, one came; the share stands)
                low = share[a] / max(before, now_using) * (1 - 1e-9)
                for job in others:
                    if rate[job] >= low:
                        affected.add(job)
        for job in affected:
            i = job % n
            new = solo[i]
            for a in arcs_of[i]:
                u = load[a]
                if u > 1 and share[a] / u < new:
                    new = share[a] / u
            old = rate[job]
            if new == old:
                continue
            if old:
                remaining[job] -= old * (now - since[job])
                since[job] = now
            rate[job] = new
            end = now + max(remaining[job], 0.0) / new
            finish[job] = end
            heappush(events, (end, 2 * job + 1))
    if done != total:
        raise RuntimeError("simulation stalled with transfers still waiting")  # cannot happen: deps point backwards
    return end_time


# --------------------------------------------------------------------------- closed form


@dataclass(frozen=True)
class Costs:
    """What an algorithm's closed-form time (:func:`estimate`) depends on, per byte of nccl-tests size.

    ``link_alpha_us``, ``intra_hops`` and ``net_hops`` describe the latency-critical path (the chain of
    dependent transfers with the largest total latency); ``arc_load`` maps each used arc to
    ``(link class, line rate GB/s, bytes crossing it per byte of size)``; ``connection_load`` is the
    largest number of bytes one connection moves per byte of size (before splitting into instances),
    ``net_connection_load`` the same over the connections that cross the network.
    """

    def restricted(self, keep) -> "Costs":
        """The same costs with only the arcs ``keep(arc)`` accepts and no latency or connection terms."""
        return Costs(0.0, 0, 0, {a: v for a, v in self.arc_load.items() if keep(a)}, 0.0)

    link_alpha_us: float
    intra_hops: int
    net_hops: int
    arc_load: Mapping[tuple, tuple[str, float, float]]
    connection_load: float
    net_alpha_us: float = 0.0        # the part of link_alpha_us spent on network hops
    net_connection_load: float = 0.0

    def latency_us(self, proto: Protocol) -> float:
        return proto.launch_us + self.link_alpha_us + self.intra_hops * proto.hop_us + self.net_hops * proto.net_hop_us

    @cached_property
    def class_loads(self) -> dict[str, float]:
        """Per link class: the largest ``bytes / line rate`` (µs per byte of size, at efficiency 1) of its arcs."""
        out: dict[str, float] = defaultdict(float)
        for cls, line, load in self.arc_load.values():
            out[cls] = max(out[cls], load / (line * 1e3))
        return dict(out)

    def arcs_us(self, size: float, proto: Protocol, efficiency: Mapping[str, float]) -> float:
        """Time the bytes need on the busiest arc at ``size`` (µs)."""
        arcs = max((load / efficiency.get(cls, 1.0) for cls, load in self.class_loads.items()), default=0.0)
        return size * arcs / proto.efficiency

    def bandwidth_us(self, size: float, proto: Protocol, efficiency: Mapping[str, float], instances: int = 1) -> float:
        """Time the bytes need on the busiest arc or connection at ``size`` (µs)."""
        inside, across = proto.ceilings
        per_channel = max(self.connection_load / inside, self.net_connection_load / across) / instances / 1e3
        return max(self.arcs_us(size, proto, efficiency), size * per_channel)


def algorithm_costs(algorithm: Algorithm, graph: nx.DiGraph, protocol: str | None = None) -> Costs:
    """The :class:`Costs` of ``algorithm`` on ``graph`` (the critical path under ``protocol``'s hop terms)."""
    proto = protocol_terms(graph, protocol)
    transfers = algorithm.transfers
    deps = _dependencies(transfers)
    cap = graph.graph["capacity"]
    per_byte = algorithm.collective.chunk_bytes(1.0)
    # longest latency path: (total, link alpha, intra hops, net hops, net alpha) ending at each transfer
    best: list[tuple[float, float, int, int, float]] = []
    arc_load: dict[tuple, float] = defaultdict(float)
    conn_load: dict[tuple, float] = defaultdict(float)
    net_load: dict[tuple, float] = defaultdict(float)       # the connections that cross the network
    for i, t in enumerate(transfers):
        if t.group:     # a switch operation: its ports, one NVLink step
            resources = _switch_arcs(graph, t, i)
            edge = {"resources": resources, "alpha_us": 2 * cap.edges[resources[0]]["alpha_us"], "kind": "switch"}
        else:
            edge = _edge(graph, t, i)
        net = is_net(edge)
        before = max((best[d] for d in deps[i]), default=(0.0, 0.0, 0, 0, 0.0))
        link = float(edge["alpha_us"])
        best.append((before[0] + edge_latency(edge, proto.hops), before[1] + link,
                     before[2] + (not net), before[3] + net, before[4] + (link if net else 0.0)))
        load = len(t.chunks) * per_byte
        for a in edge["resources"]:
            arc_load[a] += load
        conn = (t.src, t.dst, t.channel, t.link)
        conn_load[conn] += load
        if net:
            net_load[conn] += load
    top = max(best)
    arcs = {a: (cap.edges[a].get("link_class", ""), float(cap.edges[a]["capacity"]), load)
            for a, load in arc_load.items()}
    return Costs(top[1], top[2], top[3], arcs, max(conn_load.values()), top[4],
                 max(net_load.values(), default=0.0))


def link_efficiency(graph: nx.DiGraph) -> dict[str, float]:
    """Link class -> efficiency of ``graph``'s profile."""
    profile = graph.graph.get("profile")
    return {} if profile is None else {c.name: c.efficiency for c in profile.link_classes.values()}


def estimate(algorithm: Algorithm, graph: nx.DiGraph, size: float, protocol: str | None = None,
             instances: int = 1) -> float:
    """Closed-form time (µs): launch + latency-critical path + bytes on the busiest arc or connection.

    The simulation approaches it when the algorithm's pipeline keeps that arc busy; it is what stock
    NCCL's own cost model (``tuning.cc``) assumes of its algorithms."""
    costs = algorithm_costs(algorithm, graph, protocol)
    proto = protocol_terms(graph, protocol)
    return costs.latency_us(proto) + costs.bandwidth_us(size, proto, link_efficiency(graph), _check_instances(instances))


__all__ = ["DEFAULT_PROTOCOL", "MAX_ROUNDS", "PROTOCOLS", "ROUND_BYTES", "Costs", "SimResult", "algorithm_costs",
           "estimate", "floor_us", "link_efficiency", "protocol_terms", "rounds", "simulate", "simulate_below", "simulate_sizes",
           "transfer_times"]
