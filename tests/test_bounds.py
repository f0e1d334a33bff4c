"""Bounds against the worked table of peers-and-bounds.md §2.5 and against cuts computed by hand."""
from __future__ import annotations

import dataclasses

import pytest

from autotaccl.bounds import Bounds, bound_algbw, bound_time_us, bounds
from autotaccl.model.algorithm import Algorithm, Transfer
from autotaccl.model.collectives import Collective
from autotaccl.model.hardware import RailNetwork, load_hardware, profile_from_dict
from autotaccl.model.topology import build_topology
from autotaccl.simulate import simulate

# (profile, nodes) -> §2.5 algbw ceilings in GB/s: AG (= RS), AR (RS+AG), A2A.
# 2-node DGX-2 differs on purpose: §2.5 lets a GPU also receive 16 GB/s of PCIe peer traffic, but our
# graph (like TACCL's) has no GPU -> PCIe -> GPU path, so data enters a GPU pair only through NVSwitch and
# the NIC the two share, which copies nothing: each receives 31 units, 32 * (2 * 150 + 12.5) / (2 * 31) = 161.3.
TABLE = {
    ("ndv2", 2): (25.0, 12.5, 3.125),
    ("ndv2", 1): (171.4, 85.7, 75.0),
    ("dgx2", 2): (161.3, 80.6, 12.5),
    ("dgx2", 1): (160.0, 80.0, 160.0),
    ("dgx-a100", 1): (342.9, 171.4, 342.9),
    ("dgx-a100", 2): (346.7, 173.3, 50.0),
    ("dgx-h100", 1): (514.3, 257.1, 514.3),
    ("dgx-h100", 2): (533.3, 266.7, 100.0),
}


def topo(profile: str, nodes: int):
    return build_topology(load_hardware(profile), nodes)


@pytest.mark.parametrize("profile,nodes", sorted(TABLE))
def test_bandwidth_ceilings_match_the_worked_table(profile, nodes):
    graph = topo(profile, nodes)
    ag, ar, a2a = TABLE[profile, nodes]
    assert bounds(graph, "allgather").algbw_GBps == pytest.approx(ag, rel=0.01)
    assert bounds(graph, "reducescatter").algbw_GBps == pytest.approx(ag, rel=0.01)
    assert bounds(graph, "allreduce").algbw_GBps == pytest.approx(ar, rel=0.01)
    assert bounds(graph, "alltoall").algbw_GBps == pytest.approx(a2a, rel=0.01)


def test_exact_values_of_the_closed_forms():
    # 1-node NDv2: GPU ingress 6 x 25 = 150 -> 8 * 150 / 7; 2-node NDv2: NIC cut -> 2 * 12.5
    assert bounds(topo("ndv2", 1), "ag").algbw_GBps == pytest.approx(8 * 150 / 7, rel=1e-6)
    assert bounds(topo("ndv2", 2), "ag").algbw_GBps == pytest.approx(25.0, rel=1e-6)
    # 2-node DGX-A100: GPU ingress 300 NVSwitch + 25 NIC -> 16 * 325 / 15; A2A: n(N-n)/(N * 8 * 25)
    assert bounds(topo("dgx-a100", 2), "ag").algbw_GBps == pytest.approx(16 * 325 / 15, rel=1e-6)
    assert bounds(topo("dgx-a100", 2), "a2a").algbw_GBps == pytest.approx(16 * 200 / 64, rel=1e-6)
    # 2-node DGX-2: a GPU and its NIC's receive side alone would give 32 * (150 + 12.5) / 31 = 167.7, if the
    # NIC could hand the same 12.5 GB/s to both GPUs it serves; they share it: 2 x 31 units through 2 x 150 + 12.5
    assert bounds(topo("dgx2", 2), "ag").algbw_GBps == pytest.approx(32 * (2 * 150 + 12.5) / (2 * 31), rel=1e-6)
    assert bounds(topo("dgx2", 2), "rs").algbw_GBps == pytest.approx(32 * (2 * 150 + 12.5) / (2 * 31), rel=1e-6)


def test_gpus_that_share_a_feeder_that_copies_nothing_receive_through_it_once():
    """GPUs a and b take c's data from a vertex w that c feeds at rate 1 and that reaches both at rate 1.
    Every single-GPU cut lets a GPU receive its 2 units at rate 2 (ratio 1), as if w handed each a copy;
    w copies nothing, so a and b receive 4 units through 1 (from w) + 2 (from each other): 4 / 3."""
    import networkx as nx
    from autotaccl.bounds import gather_ratio, reception_ratio
    cap = nx.DiGraph()
    cap.add_edges_from([("c", "w"), ("w", "a"), ("w", "b"), ("a", "b"), ("b", "a"), ("a", "c"), ("b", "c")],
                       capacity=1.0)
    gpus = ["a", "b", "c"]
    assert gather_ratio(cap, gpus) == pytest.approx(1.0)
    assert reception_ratio(cap, gpus) == pytest.approx(4 / 3)
    cap.edges["c", "w"]["capacity"] = 2.0      # w fed as fast as it feeds: it copies nothing extra, no such bound
    assert reception_ratio(cap, gpus) == 0.0


@pytest.mark.parametrize("profile,latency", [("ndv2", 1.4), ("dgx2", 0.7), ("dgx-a100", 0.7), ("dgx-h100", 0.7)])
def test_single_node_latency_matches_the_worked_table(profile, latency):
    assert bounds(topo(profile, 1), "allgather").latency_us == pytest.approx(latency, rel=0.01)


@pytest.mark.parametrize("profile,latency", [("ndv2", 6.4), ("dgx2", 3.6), ("dgx-a100", 3.1), ("dgx-h100", 3.1)])
def test_two_node_latency_matches_the_worked_table(profile, latency):
    # A net edge pays the sender's PCIe hop, the IB alpha and the receiver's PCIe hop (§2.5); on NDv2 the
    # farthest GPUs also relay two NVLink hops (or, equally, cross host PCIe at 1.9 us).
    assert bounds(topo(profile, 2), "alltoall").latency_us == pytest.approx(latency, rel=1e-6)


def ring4():
    return build_topology(profile_from_dict({
        "name": "ring4", "gpus_per_node": 4,
        "link_classes": {"nvlink": {"alpha_us": 0.7, "bandwidth_GBps": 25.0}},
        "links": {"class": "nvlink", "pattern": "ring"}}, "<test ring4>"))


def test_ring_by_hand():
    graph = ring4()
    # AG: the worst cut is one GPU (3 chunks in over 2 x 25 GB/s) -> x* = 3/50, algbw = 4 / x*
    assert bounds(graph, "allgather").algbw_GBps == pytest.approx(4 * 50 / 3)
    assert bounds(graph, "allreduce").algbw_GBps == pytest.approx(4 * 50 / 3 / 2)
    # A2A: every GPU sends 1/4 to 2 neighbours (1 hop) and 1/4 to the opposite GPU (2 hops): 4 x 1 units of
    # link use over 8 x 25 GB/s of links -> tau = 1/50
    assert bounds(graph, "alltoall").algbw_GBps == pytest.approx(50.0)
    # Broadcast from 0: two disjoint paths of 25 reach every GPU
    assert bounds(graph, "broadcast").algbw_GBps == pytest.approx(50.0)
    # latency: the opposite GPU is two NVLink hops away
    assert bounds(graph, "allgather").latency_us == pytest.approx(1.4)


def test_derated_arcs_scale_the_ceilings_and_unnamed_classes_keep_their_rate():
    graph = ring4()
    full = bounds(graph, "allgather")
    half = bounds(graph, "allgather", {"nvlink": 0.5})
    assert half.algbw_GBps == pytest.approx(full.algbw_GBps / 2)
    assert half.latency_us == full.latency_us
    assert bounds(graph, "allgather", {"ib": 0.5}) == full
    assert bounds(graph, "allgather") is full            # the derated ones are cached apart
    assert bound_time_us(full, 1 << 30) == pytest.approx((1 << 30) / (full.algbw_GBps * 1e3))
    assert bound_time_us(full, 8) == full.latency_us


def test_simulated_ring_stays_below_the_bound():
    graph = ring4()
    ring = Algorithm("ring", Collective("allgather", 4),
                     tuple(Transfer(((r - s) % 4,), r, (r + 1) % 4, s) for s in range(3) for r in range(4)))
    b = bounds(graph, "allgather")
    for size in (1024, 1 << 20, 1 << 30):
        assert simulate(ring, graph, size).algbw_GBps <= bound_algbw(b, size) * (1 + 1e-9)


def test_bound_algbw_switches_from_latency_to_bandwidth():
    b = Bounds(algbw_GBps=100.0, latency_us=2.0)
    assert bound_algbw(b, 1000) == pytest.approx(1000 / 2.0 / 1e3)        # 1 KB: latency-bound
    assert bound_algbw(b, 1 << 30) == pytest.approx(100.0)                 # 1 GiB: bandwidth-bound
    assert bound_algbw(b, 200_000) == pytest.approx(100.0)                 # the crossover M* = L * algbw


def test_cached_per_graph_and_collective_but_not_across_rates():
    a, b = bounds(topo("ndv2", 2), "allgather"), bounds(topo("ndv2", 2), "ag")
    assert a is b
    slow = profile_from_dict({
        "name": "ring4", "gpus_per_node": 4,
        "link_classes": {"nvlink": {"alpha_us": 0.7, "bandwidth_GBps": 10.0}},
        "links": {"class": "nvlink", "pattern": "ring"}}, "<slow ring4>")
    assert bounds(build_topology(slow), "ag").algbw_GBps == pytest.approx(4 * 20 / 3)
    assert bounds(ring4(), "ag").algbw_GBps == pytest.approx(4 * 50 / 3)


# --------------------------------------------------------------------------- today's fabrics, by hand


def tiny_rail(oversubscription: float):
    """2 nodes x 2 GPUs, no NVLink: GPU j owns NIC j (rail j, 10 GB/s, no PCIe hop). Rails meet only at the
    spine, where each NIC gets 10 / R GB/s: even GPU 0 -> GPU 1 of one node goes up and back down."""
    return build_topology(profile_from_dict({
        "name": "tiny-rail", "gpus_per_node": 2,
        "link_classes": {"ib": {"alpha_us": 2.6, "bandwidth_GBps": 10.0}},
        "nics": [{"class": "ib", "gpus": [0]}, {"class": "ib", "gpus": [1]}],
        "network": {"kind": "rail", "oversubscription": oversubscription}}, "<tiny rail>"), 2)


@pytest.mark.parametrize("ratio, ag, a2a", [(1, 40 / 3, 40 / 3), (2, 40 / 3, 10.0), (4, 10.0, 5.0), (8, 5.0, 2.5)])
def test_tiny_rail_fabric_by_hand(ratio, ag, a2a):
    # AG (N = 4 pieces of S/4): (a) a GPU takes in 3 pieces through its 10 GB/s NIC: algbw <= 4 * 10 / 3;
    # (b) both rail-1 GPUs need rail 0's 2 pieces (S/2), which leave rail 0's leaf only through its 2 NICs'
    # spine shares, 2 * 10 / R: t >= (S/2) / (20/R), algbw <= 40 / R. Ceiling: min of both (R = 4: 10).
    graph = tiny_rail(ratio)
    assert bounds(graph, "allgather").algbw_GBps == pytest.approx(ag)
    assert bounds(graph, "reducescatter").algbw_GBps == pytest.approx(ag)        # the same cuts reversed
    assert bounds(graph, "allreduce").algbw_GBps == pytest.approx(ag / 2)        # RS + AG
    # A2A (S/4 to each GPU): a NIC sends 3 pieces (3S/4) at 10 GB/s: algbw <= 40/3; 2 of them (S/2) go to
    # the other rail, through the NIC's spine share 10 / R: algbw <= 20 / R.
    assert bounds(graph, "alltoall").algbw_GBps == pytest.approx(a2a)
    # latency: GPU 0 -> GPU 1 of one node has no edge; the quickest way is two network hops, 2 x 2.6 us
    assert bounds(graph, "allgather").latency_us == pytest.approx(5.2)


def h100_rail(oversubscription: float, nodes_per_leaf: int | None, nodes: int):
    profile = load_hardware("dgx-h100-rail")
    return build_topology(dataclasses.replace(profile, network=RailNetwork(oversubscription, nodes_per_leaf, 0.6)),
                          nodes)


@pytest.mark.parametrize("ratio", [1, 4])
def test_two_dgx_h100_on_rails_never_need_the_spine(ratio):
    # NVSwitch moves any piece to the GPU on the right rail, so the spine's share does not bind: the
    # bounds are the one-switch network's (peers-and-bounds.md §2.5, 2-node DGX-H100): AG: a GPU's ingress
    # 450 + 50 takes 15 of 16 pieces -> 16 * 500 / 15; A2A: a node sends 8 * 8 * S/16 = 4S over 8 x 50.
    graph = h100_rail(ratio, 32, 2)
    assert bounds(graph, "allgather").algbw_GBps == pytest.approx(16 * 500 / 15)
    assert bounds(graph, "allreduce").algbw_GBps == pytest.approx(16 * 500 / 15 / 2)
    assert bounds(graph, "alltoall").algbw_GBps == pytest.approx(100.0)
    # latency: a cross-rail edge pays PCIe, the NIC, the spine and PCIe: 0.25 + 2.6 + 0.6 + 0.25 (relaying
    # over NVSwitch to the right rail first costs 0.7 + 3.1 = 3.8)
    assert bounds(graph, "allgather").latency_us == pytest.approx(3.7)


@pytest.mark.parametrize("ratio, ag, a2a", [(1, 32 * 500 / 31, 200 / 3), (2, 32 * 500 / 31, 50.0), (8, 200.0, 12.5)])
def test_four_dgx_h100_in_two_units_by_hand(ratio, ag, a2a):
    # nodes_per_leaf 2: nodes {0, 1} and {2, 3} are two units; between them every byte crosses the spine
    # at 50 / R GB/s per NIC, 16 NICs per unit: 800 / R.
    # AG: a GPU's ingress takes 31 of 32 pieces at 500 -> 32 * 500 / 31; unit 1 needs unit 0's 16 pieces
    # (S/2) through 800 / R: algbw <= 1600 / R (R = 8: 200).
    # A2A (S/32 per pair): a node sends 8 * 24 pieces = 6S over 8 x 50 -> 66.7; unit 0 sends 16 * 16
    # pieces = 8S over 800 / R -> 100 / R (R = 2: 50, R = 8: 12.5).
    graph = h100_rail(ratio, 2, 4)
    assert bounds(graph, "allgather").algbw_GBps == pytest.approx(ag)
    assert bounds(graph, "alltoall").algbw_GBps == pytest.approx(a2a)


def test_dgx_b200_and_gb200_nvl72_by_hand():
    # DGX B200 x2: a GPU's ingress 900 + 50 would allow 16 * 950 / 15; a node's 8 NICs (400) must carry
    # the other node's 8 pieces (S/2): algbw <= 800. A2A: 4S over 400 -> 100.
    b200 = topo("dgx-b200", 2)
    assert bounds(b200, "allgather").algbw_GBps == pytest.approx(800.0)
    assert bounds(b200, "alltoall").algbw_GBps == pytest.approx(100.0)
    # GB200 NVL72, one rack: a GPU takes 71 of 72 pieces through its 900 GB/s NVLink port
    nvl72 = topo("gb200-nvl72", 1)
    assert bounds(nvl72, "allgather").algbw_GBps == pytest.approx(72 * 900 / 71)
    assert bounds(nvl72, "allgather").latency_us == pytest.approx(0.7)


def test_a_protocols_per_step_latency_is_paid_on_every_hop():
    # ring4: the opposite GPU is two NVLink hops away, each 0.7 us plus the protocol's 0.5
    assert bounds(ring4(), "allgather", hop_us=(0.5, 9.0)).latency_us == pytest.approx(2 * (0.7 + 0.5))
    assert bounds(ring4(), "allgather").latency_us == pytest.approx(1.4)          # the cache keeps them apart
    # tiny rail fabric: GPU 0 -> GPU 1 of one node crosses the network twice, each time 2.6 + 9.0 us
    assert bounds(tiny_rail(1), "allgather", hop_us=(0.5, 9.0)).latency_us == pytest.approx(2 * (2.6 + 9.0))
    # two DGX-A100: a net edge (PCIe, IB, PCIe: 3.1 us) plus the network term; the ceiling is unchanged
    a100 = topo("dgx-a100", 2)
    plain, stepped = bounds(a100, "broadcast"), bounds(a100, "broadcast", hop_us=(1.0, 4.0))
    assert stepped.latency_us == pytest.approx(3.1 + 4.0) and stepped.algbw_GBps == plain.algbw_GBps
