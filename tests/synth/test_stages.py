"""Synthesis stages on small real instances: routing MILP, ordering heuristics, scheduling MILP, combine.

Every solve is a real HiGHS (or Gurobi, within its bundled licence) run.
"""
from dataclasses import replace

import networkx as nx
import pytest

from autotaccl.errors import InfeasibleError
from autotaccl.milp import SolverOptions
from autotaccl.model.algorithm import verify
from autotaccl.model.collectives import Collective
from autotaccl.sketch import default_sketch, load_sketch, logical_topology
from autotaccl.sketch.logical import LogicalTopology
from autotaccl.synth.combine import combine_stage, reduce_scatter
from autotaccl.synth.ordering import NAMES, default_heuristic, order
from autotaccl.synth.routing import RoutingOptions, chunk_edges, route, symmetry_permutations
from autotaccl.synth.scheduling import ScheduleOptions, schedule

from support import SHARED

SKETCHES = SHARED / "data" / "taccl-examples" / "sketch"
HIGHS = SolverOptions(solver="highs", time_limit=30, threads=1)
MiB = 1 << 20

# 4 GPUs on one switch, two NICs (GPUs 0-1 and 2-3): a small DGX-2 look-alike.
SWITCH4 = {"name": "sw4", "description": "4 GPUs on a switch, 2 NICs", "gpus_per_node": 4,
           "link_classes": {"nvswitch": {"alpha_us": 0.7, "bandwidth_GBps": 150.0},
                            "pcie": {"alpha_us": 0.5, "bandwidth_GBps": 16.0},
                            "ib": {"alpha_us": 2.6, "bandwidth_GBps": 12.5}},
           "switches": [{"class": "nvswitch", "gpus": [0, 1, 2, 3]}],
           "nics": [{"class": "ib", "via": "pcie", "gpus": [0, 1]}, {"class": "ib", "via": "pcie", "gpus": [2, 3]}]}


def direct_lt(graph, name, edges=None, chunk_bytes=MiB, **kw) -> LogicalTopology:
    """A LogicalTopology built by hand: intra-node links plus the given (or no) inter-node links."""
    gpn = graph.graph["gpus_per_node"]
    intra = {(u, v) for u, v in graph.edges if u // gpn == v // gpn}
    return LogicalTopology(graph, Collective(name, graph.number_of_nodes()), frozenset(intra | set(edges or ())),
                           chunk_bytes, **kw)


def ndv2x2_lt(topo, name="allgather", size=None):
    sketch = load_sketch(SKETCHES / "sk1-ndv2-n2.json")
    return logical_topology(topo("ndv2", 2), name, sketch, size or 16 * MiB)


def run_stages(lt, heuristic="auto", schedule_options=None):
    routed = route(lt, RoutingOptions(milp=HIGHS))
    ordered = order(lt, routed, heuristic)
    done = schedule(lt, routed, ordered, schedule_options or ScheduleOptions(milp=HIGHS))
    return routed, ordered, done


def uses_only_allowed(algorithm, lt) -> bool:
    return all((t.src, t.dst) in lt.edges for t in algorithm.transfers)


# --------------------------------------------------------------------------- routing


def test_routing_single_node_trees_cover_every_rank(topo):
    lt = direct_lt(topo("ndv2"), "allgather")
    routed = route(lt, RoutingOptions(milp=HIGHS))
    assert routed.report.status == "optimal" and routed.report.solver == "highs"
    for c in range(8):
        receivers = sorted(v for cc, _, v in routed.sends if cc == c)
        assert receivers == sorted(set(range(8)) - {c})
    assert all((u, v) in lt.edges for _, u, v in routed.sends)
    # the bound covers the busiest link: some rank receives 7 chunks over 4 links
    assert routed.makespan >= 2 * lt.cost_us(0, 1) - 1e-6


def test_routing_two_nodes_is_nic_bound_and_respects_relay(topo):
    lt = ndv2x2_lt(topo)
    routed = route(lt, RoutingOptions(milp=HIGHS))
    crossing = [(c, u, v) for c, u, v in routed.sends if u // 8 != v // 8]
    assert sorted({(u, v) for _, u, v in crossing}) == [(0, 9), (8, 1)]    # only the sketch's pair
    assert len(crossing) == 16                                              # each chunk crosses once
    # eight chunks share node 0's NIC: the bound is at least their serial bandwidth time on it
    beta = lt.cost_us(0, 9) - lt.graph.edges[0, 9]["alpha_us"]
    assert routed.makespan >= 8 * beta - 1e-6


def test_symmetry_substitution_shrinks_the_model(topo):
    lt = ndv2x2_lt(topo)
    assert len(symmetry_permutations(lt)) == 1
    with_sym = route(lt, RoutingOptions(milp=HIGHS, slack=0))
    without = route(replace(lt, symmetry=()), RoutingOptions(milp=HIGHS, slack=0))
    assert with_sym.report.variables < 0.6 * without.report.variables
    assert with_sym.report.constraints < 0.6 * without.report.constraints
    assert with_sym.makespan == pytest.approx(without.makespan, rel=1e-6)


def test_symmetry_that_breaks_the_sketch_is_dropped(topo):
    lt = replace(ndv2x2_lt(topo), symmetry=((1, 16),))   # rotating by one rank moves the 0->9 link
    assert symmetry_permutations(lt) == []


def test_infeasible_sketch_names_why(topo):
    g = topo("ndv2", 2)
    lt = direct_lt(g, "allgather", {(0, 9), (8, 1)}, senders={3: frozenset({2})})
    with pytest.raises(InfeasibleError, match=r"chunk 3 .*sender map.*rank\(s\) \[2\].*start at rank\(s\) \[0\]"):
        chunk_edges(lt, 3)
    no_link = direct_lt(g, "allgather", {(0, 9)})       # nothing from node 1 to node 0
    with pytest.raises(InfeasibleError, match="no link from node 1 to node 0"):
        route(no_link, RoutingOptions(milp=HIGHS))


def test_routing_with_gurobi_matches_highs(topo):
    lt = direct_lt(topo("ring"), "allgather")
    g = route(lt, RoutingOptions(milp=SolverOptions(solver="gurobi", time_limit=30)))
    h = route(lt, RoutingOptions(milp=HIGHS))
    assert g.report.solver == "gurobi" and g.report.variables <= 2000
    assert g.makespan == pytest.approx(h.makespan, rel=1e-6)


@pytest.mark.parametrize("strategy,objective", [("switch", "uc-min"), ("switch", "uc-max"), ("minmax", "uc-min"),
                                                ("maxmin", "uc-min")])
def test_intranode_strategies_route_and_verify(topo, strategy, objective):
    g = topo(SWITCH4) if strategy == "switch" else topo("ndv2")
    lt = direct_lt(g, "allgather", intranode_strategy=strategy, switch_objective=objective)
    _, _, done = run_stages(lt)
    verify(done.algorithm, g)


def test_switch_unique_connection_objective_changes_peer_count(topo):
    g = topo(SWITCH4)
    peers = {}
    for objective in ("uc-min", "uc-max"):
        lt = direct_lt(g, "allgather", intranode_strategy="switch", switch_objective=objective,
                       chunk_bytes=16 * MiB)     # port loads bind, so relaying (fewer peers) costs no time
        routed = route(lt, RoutingOptions(milp=HIGHS, slack=1, tie_weight=0.05))
        peers[objective] = len({(u, v) for _, u, v in routed.sends})
    assert peers["uc-min"] < peers["uc-max"]


# --------------------------------------------------------------------------- ordering


def test_default_heuristics_follow_taccl(topo):
    assert default_heuristic(direct_lt(topo("ndv2"), "allgather")) == 5
    assert default_heuristic(ndv2x2_lt(topo)) == 14
    assert default_heuristic(direct_lt(topo(SWITCH4), "allgather", intranode_strategy="switch")) == 10
    assert default_heuristic(ndv2x2_lt(topo), combine=True) == 12


@pytest.mark.parametrize("heuristic", [5, 10, 13, 14, 15, 12, 18, "backward", "own-node-first"])
def test_every_heuristic_orders_without_overlap(topo, heuristic):
    lt = ndv2x2_lt(topo)
    routed = route(lt, RoutingOptions(milp=HIGHS))
    ordered = order(lt, routed, heuristic)
    cost = {s: lt.cost_us(s[1], s[2]) for s in routed.sends}
    parent = {(c, v): (c, u, v) for c, u, v in routed.sends}
    for s, t in ordered.start.items():                      # data first
        p = parent.get((s[0], s[1]))
        assert p is None or t >= ordered.start[p] + cost[p] - 1e-6
    for segs in ordered.resource_order.values():            # arcs never double-booked
        for a, b in zip(segs, segs[1:]):
            assert ordered.start[b] >= ordered.start[a] + cost[a] - 1e-6
    assert ordered.report.solver.startswith(f"heuristic {ordered.heuristic}")
    assert ordered.heuristic in NAMES


def test_enforce_ordering_sends_own_chunks_first(topo):
    lt = replace(ndv2x2_lt(topo), enforce_ordering=True)
    routed = route(lt, RoutingOptions(milp=HIGHS))
    ordered = order(lt, routed, 15)
    assert ordered.link_order(0, 9)[0] == 0 and ordered.link_order(8, 1)[0] == 8
    _, _, done = run_stages(lt, 15)
    first = next(t for t in done.algorithm.transfers if (t.src, t.dst) == (0, 9))
    assert 0 in first.chunks


# --------------------------------------------------------------------------- scheduling


@pytest.mark.parametrize("hardware,nodes,name", [("ndv2", 1, "allgather"), ("ring", 1, "alltoall"),
                                                 ("ndv2", 2, "allgather")])
def test_scheduled_algorithms_verify(topo, hardware, nodes, name):
    lt = ndv2x2_lt(topo, name) if nodes == 2 else direct_lt(topo(hardware), name)
    routed, ordered, done = run_stages(lt)
    verify(done.algorithm, lt.graph)
    assert uses_only_allowed(done.algorithm, lt)
    assert done.report.status == "optimal"
    assert done.makespan <= ordered.makespan + 1e-6          # never worse than the list schedule it starts from
    assert done.makespan >= routed.makespan * (1 - 1e-6)       # stage 1 is a relaxation
    starts = [t.start_us for t in done.algorithm.transfers]
    assert starts == sorted(starts)


def test_network_batching_couples_start_times(topo):
    lt = ndv2x2_lt(topo, size=1 << 30)          # tuned for 1 GiB: 64 pipelined slices per chunk
    _, _, done = run_stages(lt)
    net = [t for t in done.algorithm.transfers if t.src // 8 != t.dst // 8]
    assert any(len(t.chunks) > 1 for t in net)                # batched into one transfer (one start time)
    assert all(len(t.chunks) <= 6 for t in net)               # within the window
    assert sum(len(t.chunks) for t in net) == 16
    intra = [t for t in done.algorithm.transfers if t.src // 8 == t.dst // 8]
    assert all(len(t.chunks) == 1 for t in intra)             # only network links batch
    _, _, plain = run_stages(lt, schedule_options=ScheduleOptions(milp=HIGHS, contiguity=False))
    assert all(len(t.chunks) == 1 for t in plain.algorithm.transfers)
    verify(plain.algorithm, lt.graph)


def test_time_limit_returns_incumbent(topo):
    lt = ndv2x2_lt(topo, "alltoall")
    routed = route(lt, RoutingOptions(milp=HIGHS, slack=0))
    ordered = order(lt, routed)
    quick = SolverOptions(solver="highs", time_limit=0.5, mip_gap=0.0)
    done = schedule(lt, routed, ordered, ScheduleOptions(milp=quick))
    assert done.report.status == "time_limit"
    verify(done.algorithm, lt.graph)
    assert uses_only_allowed(done.algorithm, lt)


# --------------------------------------------------------------------------- combine


@pytest.mark.parametrize("nodes", [1, 2])
def test_reduce_scatter_is_reversed_allgather(topo, nodes):
    lt = ndv2x2_lt(topo, "reducescatter") if nodes == 2 else direct_lt(topo("ndv2"), "reducescatter")
    algorithm, stages = reduce_scatter(lt, HIGHS)
    verify(algorithm, lt.graph)
    assert algorithm.collective.name == "reducescatter"
    assert all(t.op == "reduce" for t in algorithm.transfers)
    assert all((t.src, t.dst) in lt.edges for t in algorithm.transfers)
    assert stages["rs-ordering"].solver.startswith("heuristic 12")
    # reductions of one chunk into one rank never overlap in the plan
    ends = {}
    for t in algorithm.transfers:
        end = t.start_us + lt.cost_us(t.src, t.dst, len(t.chunks))
        for c in t.chunks:
            for s, e in ends.get((c, t.dst), []):
                assert t.start_us >= e - 1e-6 or end <= s + 1e-6
            ends.setdefault((c, t.dst), []).append((t.start_us, end))


@pytest.mark.parametrize("nodes", [1, 2])
def test_allreduce_is_reduce_scatter_then_allgather(topo, nodes):
    lt = ndv2x2_lt(topo, "allreduce") if nodes == 2 else direct_lt(topo("ndv2"), "allreduce")
    algorithm, stages = combine_stage(lt, None, HIGHS)
    verify(algorithm, lt.graph)
    ops = [t.op for t in algorithm.transfers]
    first_copy = ops.index("copy")
    assert set(ops[:first_copy]) == {"reduce"} and set(ops[first_copy:]) == {"copy"}
    assert {"rs-routing", "rs-scheduling", "ag-routing", "ag-scheduling"} <= set(stages)


def test_combine_rejects_non_reductions(topo):
    with pytest.raises(ValueError, match="reducescatter or allreduce"):
        combine_stage(direct_lt(topo("ring"), "allgather"), None, HIGHS)


# --------------------------------------------------------------------------- a DGX-2-like sketch end to end

SW4_SKETCH = {"nnodes": 2,
              "intranode_sketch": {"strategy": "switch", "switches": [[0, 1, 2, 3]],
                                   "switch_hyperedge_strategy": ["uc-min"]},
              "internode_sketch": {"strategy": "relay", "internode_conn": {"1": [0], "3": [2]},
                                   "gpus_to_sender_rev_map": {"1": [0, 1], "3": [2, 3]}, "enforce_ordering": True},
              "symmetry_offsets": [[2, 4], [4, 8]], "hyperparameters": {"input_chunkup": 2}}


@pytest.mark.parametrize("name", ["allgather", "allreduce"])
def test_switch_sketch_with_sender_map_two_nodes(topo, name):
    from autotaccl.sketch import sketch_from_dict

    g = topo(SWITCH4, 2)
    sketch = sketch_from_dict(SW4_SKETCH)
    lt = logical_topology(g, name, sketch, 16 * MiB)
    if name == "allgather":
        assert len(symmetry_permutations(lt)) == 2
        routed, _, done = run_stages(lt)
        for c, u, v in routed.sends:                  # chunks leave their node only through their sender
            if u // 4 != v // 4 and u // 4 == (c // 2) // 4:
                assert u in lt.senders[c]
        algorithm = done.algorithm
    else:
        algorithm, _ = combine_stage(lt, sketch, HIGHS)
    verify(algorithm, g)
    assert all((t.src, t.dst) in lt.edges for t in algorithm.transfers)


def test_combine_keeps_the_sender_map(topo):
    from autotaccl.sketch import sketch_from_dict

    g = topo(SWITCH4, 2)
    sketch = sketch_from_dict(SW4_SKETCH)
    lt = logical_topology(g, "allreduce", sketch, 16 * MiB)
    algorithm, _ = combine_stage(lt, sketch, HIGHS)
    checked = 0
    for t in algorithm.transfers:
        for c in t.chunks:
            owner = c // 2
            if t.src // 4 != t.dst // 4 and owner // 4 in (t.src // 4, t.dst // 4):
                checked += 1
                if t.op == "copy":  # AllGather half: out through the owner's sender (odd GPU of its pair)
                    assert t.src == owner | 1
                else:               # reversed: contributions enter where that sender's link lands (even GPU)
                    assert t.dst == owner & ~1
    assert checked == 2 * 16      # each chunk crosses once per half (two nodes)


# --------------------------------------------------------------------------- MIP start and cost model

def _start_makespan(lt, sends) -> float:
    """The routing model's objective part T for a given routing: max(arrival, bandwidth load per resource)."""
    parent = {(c, v): u for c, u, v in sends}
    arrive: dict = {}

    def at(c, r):
        if (c, r) not in parent:
            return 0.0
        if (c, r) not in arrive:
            u = parent[(c, r)]
            arrive[(c, r)] = at(c, u) + lt.cost_us(u, r)
        return arrive[(c, r)]

    load: dict = {}
    for c, u, v in sends:
        for arc in lt.resources(u, v):
            load[arc] = load.get(arc, 0.0) + lt.cost_us(u, v) - lt.graph.edges[u, v]["alpha_us"]
    return max([at(c, v) for c, _, v in sends] + list(load.values()))


def test_routing_accepts_and_uses_a_mip_start(topo):
    lt = ndv2x2_lt(topo)
    # a start no slack-0 model contains: depth-first trees (long paths), never re-entering the owner's node
    sends = []
    for c in range(16):
        home = c // 8
        allowed = nx.DiGraph([(u, v) for u, v in lt.edges if u // 8 == v // 8 or v // 8 != home])
        sends += [(c, u, v) for u, v in nx.dfs_edges(allowed, c)]
    assert len({(c, v) for c, _, v in sends}) == 16 * 15            # a complete routing
    assert not set(sends) <= {(c, u, v) for c in range(16) for u, v in chunk_edges(lt, c, 0)}
    plain = route(lt, RoutingOptions(milp=HIGHS, slack=0))
    started = route(lt, RoutingOptions(milp=HIGHS, slack=0, start=tuple(sends)))
    assert "start given" in started.report.message, started.report.message
    assert "start given" not in plain.report.message
    assert started.report.variables > plain.report.variables        # the start's links joined the candidates
    assert started.makespan <= _start_makespan(lt, sends) + 1e-6    # never worse than the start it was given


def test_routing_drops_a_start_that_is_not_a_routing(topo):
    lt = ndv2x2_lt(topo)
    bad = ((0, 0, 12),)                                              # not a link of the sketch, not complete
    routed = route(lt, RoutingOptions(milp=HIGHS, start=bad))
    assert "start shortest-path" in routed.report.message


@pytest.mark.slow
def test_routing_crosses_the_network_once_per_chunk_with_a_nic_per_gpu(topo):
    # with alpha charged per chunk to port loads, relaying a chunk over a second NIC looked cheaper than
    # forwarding it through the switch: the algorithm then moved every chunk twice over the network
    # (54% of the bound at 1 GiB). Gurobi: this model takes HiGHS ~30 s, Gurobi ~2 s (within its licence).
    g = topo("dgx-a100", 2)
    lt = logical_topology(g, "allgather", default_sketch(g, "allgather"), MiB)
    routed = route(lt, RoutingOptions(milp=SolverOptions(solver="gurobi", time_limit=60, threads=1)))
    crossing = [s for s in routed.sends if s[1] // 8 != s[2] // 8]
    assert len(crossing) == 16, crossing
