"""The topology graph: edges, their bandwidth and latency, and the shared resources they occupy."""
from __future__ import annotations

import pytest

from dataclasses import replace

from autotaccl.errors import ParameterError
from autotaccl.model.hardware import LinkClass, load_hardware, profile_from_dict
from autotaccl.model.topology import (MAX_RANKS, NETWORK, SPINE, build_topology, capacity_graph, fingerprint, node_of,
                                      num_ranks, summarize)

# (profile, nodes) -> edges by kind. Point links: 2 per pair; switch: G(G-1) per node; net: every GPU
# with a NIC to every GPU with a NIC on another node.
EDGES = [
    ("ndv2", 1, {"nvlink": 32}),
    ("ndv2", 2, {"nvlink": 64, "net": 2 * 8 * 8}),
    ("ndv2", 4, {"nvlink": 128, "net": 4 * 3 * 8 * 8}),
    ("dgx-a100", 1, {"switch": 56}),
    ("dgx-a100", 2, {"switch": 112, "net": 128}),
    ("dgx2", 2, {"switch": 2 * 16 * 15, "net": 2 * 16 * 16}),
    ("ring", 1, {"nvlink": 16}),
    ("torus2d", 1, {"nvlink": 64}),
    ("fully-connected", 1, {"nvlink": 56}),
    ("dgx-b200", 2, {"switch": 112, "net": 128}),
    ("dgx-h100-rail", 2, {"switch": 112, "net": 128}),
    ("dgx-h100-rail", 4, {"switch": 224, "net": 4 * 3 * 8 * 8}),
    ("gb200-nvl72", 1, {"switch": 72 * 71}),
    ("gb200-nvl72", 2, {"switch": 2 * 72 * 71, "net": 2 * 72 * 72}),
]


@pytest.mark.parametrize("name, nodes, kinds", EDGES)
def test_edge_counts(topo, name, nodes, kinds):
    graph = topo(name, nodes)
    summary = summarize(graph)
    assert summary.by_kind == kinds
    assert graph.number_of_edges() == sum(kinds.values())
    assert summary.ranks == num_ranks(graph) == graph.number_of_nodes() == nodes * graph.graph["gpus_per_node"]
    assert sorted(graph.nodes) == list(range(summary.ranks))


def test_ranks_belong_to_nodes_in_blocks(topo):
    graph = topo("ndv2", 4)
    assert [node_of(graph, r) for r in (0, 7, 8, 15, 31)] == [0, 0, 1, 1, 3]
    assert graph.nodes[13] == {"node": 1, "local": 5}


def test_ndv2_double_links_are_50_GBps(topo):
    graph = topo("ndv2", 2)
    for a, b in [(0, 1), (0, 4), (1, 3), (2, 3), (2, 6), (4, 5), (5, 7), (6, 7)]:
        for base in (0, 8):
            assert graph.edges[base + a, base + b]["bandwidth_GBps"] == 50.0
            assert graph.edges[base + b, base + a]["bandwidth_GBps"] == 50.0
    assert graph.edges[0, 2]["bandwidth_GBps"] == 25.0
    assert not graph.has_edge(0, 5) and graph.edges[0, 9]["kind"] == "net"
    for g in range(8):  # 6 NVLinks of 25 GB/s each way, on 4 neighbours
        out = [d["bandwidth_GBps"] for _, v, d in graph.out_edges(g, data=True) if d["kind"] == "nvlink"]
        assert len(out) == 4 and sum(out) == 150.0


def test_nvlink_edge_is_its_own_resource(topo):
    graph = topo("ndv2", 1)
    edge = graph.edges[0, 1]
    assert edge["resources"] == ((0, 1),) and edge["kind"] == "nvlink" and edge["links"] == 1
    assert capacity_graph(graph).edges[0, 1]["capacity"] == 50.0


def test_switch_edges_share_the_ports(topo):
    graph = topo("dgx-a100", 1)
    edge = graph.edges[2, 5]
    assert edge["kind"] == "switch"
    assert edge["resources"] == ((2, "n0.sw0"), ("n0.sw0", 5))
    assert edge["bandwidth_GBps"] == 300.0
    assert edge["alpha_us"] == pytest.approx(0.7)   # two half-hops of 0.35 µs
    # every edge out of GPU 2 holds GPU 2's one out-port
    assert {graph.edges[2, v]["resources"][0] for v in graph.successors(2)} == {(2, "n0.sw0")}


def test_net_edges_go_through_both_nics(topo):
    graph = topo("dgx2", 2)
    cap = capacity_graph(graph)
    edge = graph.edges[3, 20]   # node 0 GPU 3 (NIC 1) -> node 1 GPU 4 (NIC 2)
    assert edge["kind"] == "net"
    assert edge["resources"] == ((3, "n0.nic1.out"), ("n0.nic1.out", NETWORK), (NETWORK, "n1.nic2.in"), ("n1.nic2.in", 20))
    assert edge["bandwidth_GBps"] == 12.5           # min(PCIe 16, EDR 12.5)
    assert edge["alpha_us"] == pytest.approx(sum(cap.edges[a]["alpha_us"] for a in edge["resources"]))
    assert edge["alpha_us"] == pytest.approx(0.5 + 2.6 + 0.5)
    # GPUs 2 and 3 share NIC 1: their net edges hold the same NIC egress
    assert ("n0.nic1.out", NETWORK) in graph.edges[2, 16]["resources"]
    assert cap.edges["n0.nic1.out", NETWORK]["capacity"] == 12.5


def test_ndv2_far_gpus_reach_the_nic_over_host_pcie(topo):
    graph = topo("ndv2", 2)
    near, far = graph.edges[0, 8], graph.edges[2, 8]
    assert near["bandwidth_GBps"] == 12.5 and far["bandwidth_GBps"] == 10.0
    assert far["resources"][0] == (2, "n0.nic0.out") and capacity_graph(graph).edges[2, "n0.nic0.out"]["capacity"] == 10.0
    assert far["alpha_us"] > near["alpha_us"]


def test_every_edge_alpha_is_the_sum_and_bandwidth_the_min_of_its_arcs(topo):
    for name, nodes in [("ndv2", 2), ("dgx-h100", 2), ("torus2d", 2), ("dgx-h100-rail", 2), ("dgx-b200", 2)]:
        graph = topo(name, nodes)
        cap = capacity_graph(graph)
        for u, v, d in graph.edges(data=True):
            assert d["alpha_us"] == pytest.approx(sum(cap.edges[a]["alpha_us"] for a in d["resources"]))
            assert d["bandwidth_GBps"] == min(cap.edges[a]["capacity"] for a in d["resources"])


def test_one_node_has_no_nic_vertices(topo):
    cap = capacity_graph(topo("dgx2", 1))
    assert not any(isinstance(v, str) and "nic" in v for v in cap.nodes) and NETWORK not in cap


def test_a_profile_without_nics_cannot_span_nodes(small_profile):
    del small_profile["nics"]
    profile = profile_from_dict(small_profile, "small.yaml")
    assert build_topology(profile, 1).number_of_edges() == 12
    with pytest.raises(ParameterError, match="no NICs") as err:
        build_topology(profile, 2)
    assert err.value.parameter == "nodes"
    with pytest.raises(ParameterError, match="a whole number >= 1"):
        build_topology(load_hardware("ndv2"), 0)


def test_the_rank_limit_is_checked_before_anything_is_built():
    """2000 NDv2 nodes would take minutes and gigabytes to build: the library refuses them up front."""
    with pytest.raises(ParameterError) as err:
        build_topology(load_hardware("ndv2"), 2000)
    assert (err.value.parameter, err.value.field) == ("nodes", "2000")
    assert f"at most {MAX_RANKS // 8} nodes of ndv2" in err.value.expected


def test_the_fingerprint_is_the_profile_content_and_the_node_count(topo, small_profile):
    ndv2 = load_hardware("ndv2")
    assert fingerprint(topo("ndv2", 2)) == fingerprint(build_topology(ndv2, 2))
    # where the profile was read from and how it is described do not matter ...
    assert fingerprint(build_topology(replace(ndv2, source="elsewhere.yaml", description="same numbers"), 2)) == \
        fingerprint(topo("ndv2", 2))
    # ... every number, the node count and the shape do
    slower = dict(ndv2.link_classes, ib=LinkClass("ib", ndv2.link_classes["ib"].alpha_us, 10.0))
    others = {fingerprint(topo("ndv2", 1)), fingerprint(topo("ndv2", 2)), fingerprint(topo("ndv2", 4)),
              fingerprint(build_topology(replace(ndv2, link_classes=slower), 2)),
              fingerprint(build_topology(replace(ndv2, links=ndv2.links[1:]), 2))}
    assert len(others) == 5


def test_point_link_count_multiplies_bandwidth(small_profile):
    small_profile["links"] = {"class": "nvlink", "pairs": [[0, 1, 3], [1, 2, 1], [2, 3, 1], [3, 0, 2]]}
    graph = build_topology(profile_from_dict(small_profile, "small.yaml"))
    assert graph.edges[0, 1]["bandwidth_GBps"] == 75.0 and graph.edges[3, 0]["bandwidth_GBps"] == 50.0
    assert not graph.has_edge(0, 2)


# --------------------------------------------------------------------------- rail-optimized networks


def rail_profile(oversubscription: float = 2.0, nodes_per_leaf: int | None = None) -> dict:
    """dgx-h100-rail's shape, small: 2 GPUs on a switch, each with its own NIC (its rail)."""
    network = {"kind": "rail", "oversubscription": oversubscription, "spine_alpha_us": 0.6}
    if nodes_per_leaf:
        network["nodes_per_leaf"] = nodes_per_leaf
    return {"name": "rail2", "gpus_per_node": 2,
            "link_classes": {"sw": {"alpha_us": 0.7, "bandwidth_GBps": 450.0},
                             "pcie": {"alpha_us": 0.25, "bandwidth_GBps": 64.0},
                             "ib": {"alpha_us": 2.6, "bandwidth_GBps": 50.0}},
            "switches": [{"class": "sw", "gpus": [0, 1]}],
            "nics": [{"class": "ib", "via": "pcie", "gpus": [0]}, {"class": "ib", "via": "pcie", "gpus": [1]}],
            "network": network}


def test_same_rail_edges_stay_on_the_leaf(topo):
    graph = topo(rail_profile(), 2)
    edge = graph.edges[0, 2]    # node 0 GPU 0 (rail 0) -> node 1 GPU 0 (rail 0)
    assert edge["kind"] == "net"
    assert edge["resources"] == ((0, "n0.nic0.out"), ("n0.nic0.out", "n0.nic0.tx"), ("n0.nic0.tx", "rail0.leaf0"),
                                 ("rail0.leaf0", "n1.nic0.rx"), ("n1.nic0.rx", "n1.nic0.in"), ("n1.nic0.in", 2))
    assert edge["bandwidth_GBps"] == 50.0                          # min(PCIe 64, NDR 50)
    assert edge["alpha_us"] == pytest.approx(0.25 + 2.6 + 0.25)    # as on the one-switch network


def test_cross_rail_edges_cross_the_spine_at_the_nics_share(topo):
    graph = topo(rail_profile(oversubscription=2.0), 2)
    cap = capacity_graph(graph)
    edge = graph.edges[0, 3]    # rail 0 -> rail 1
    assert edge["resources"][2:4] == (("n0.nic0.tx", SPINE), (SPINE, "n1.nic1.rx"))
    assert cap.edges["n0.nic0.tx", SPINE]["capacity"] == cap.edges[SPINE, "n1.nic1.rx"]["capacity"] == 25.0
    assert edge["bandwidth_GBps"] == 25.0                          # 50 GB/s NIC / oversubscription 2
    assert edge["alpha_us"] == pytest.approx(0.25 + 2.6 + 0.6 + 0.25)
    # the NIC's own egress and ingress bound both ways out of it: leaf and spine
    assert cap.edges["n0.nic0.out", "n0.nic0.tx"]["capacity"] == 50.0
    assert set(cap.successors("n0.nic0.tx")) == {"rail0.leaf0", SPINE}
    assert NETWORK not in cap


def test_nodes_per_leaf_makes_units_that_meet_at_the_spine(topo):
    graph = topo(rail_profile(nodes_per_leaf=2), 4)
    cap = capacity_graph(graph)
    assert sorted(v for v in cap.nodes if isinstance(v, str) and "leaf" in v) == [
        "rail0.leaf0", "rail0.leaf1", "rail1.leaf0", "rail1.leaf1"]
    assert ("n0.nic0.tx", "rail0.leaf0") in graph.edges[0, 2]["resources"]   # nodes 0, 1: one unit
    assert ("n0.nic0.tx", SPINE) in graph.edges[0, 4]["resources"]           # node 2: the next unit
    assert graph.edges[0, 4]["bandwidth_GBps"] == 25.0


def test_a_rail_network_leaves_one_node_alone(topo):
    cap = capacity_graph(topo(rail_profile(), 1))
    assert SPINE not in cap and not any(isinstance(v, str) and "leaf" in v for v in cap.nodes)
