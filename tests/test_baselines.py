"""Baselines: every one verifies on every shipped profile, uses only existing links, and has its textbook shape."""
from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from autotaccl.baselines import (ALGORITHMS, _binary_tree, applicable_baselines, baseline, best_baseline,
                                 best_baselines, best_runs, channel_options)
from autotaccl.errors import InputError
from autotaccl.model.algorithm import verify
from autotaccl.model.collectives import NAMES
from autotaccl.model.hardware import RailNetwork, available_profiles, load_hardware
from autotaccl.model.topology import SPINE, build_topology
from autotaccl.simulate import PROTOCOLS, simulate

ONE_NODE = {"allgather": ["ring", "direct"], "reducescatter": ["ring"], "allreduce": ["ring", "tree"],
            "alltoall": ["direct"], "broadcast": ["ring", "tree", "direct"]}
MULTI_NODE = {"allgather": ["ring", "hierarchical", "direct"], "reducescatter": ["ring", "hierarchical"],
              "allreduce": ["ring", "tree", "hierarchical"], "alltoall": ["direct", "two-step"],
              "broadcast": ["ring", "tree", "direct"]}


def _every_profile_on_1_2_4_nodes() -> list:
    """Racks of 72 GPUs (gb200-nvl72) at 1 and 2 racks only: 4 racks take minutes (benchmarks/fabrics.py)."""
    big = {p for p in available_profiles() if load_hardware(p).gpus_per_node > 16}
    return [pytest.param(p, n, id=f"{p}-{n}", marks=[pytest.mark.slow] if p in big and n > 1 else [])
            for p in available_profiles() for n in (1, 2, 4) if not (p in big and n > 2)]


@pytest.mark.parametrize("profile, nodes", _every_profile_on_1_2_4_nodes())
def test_every_baseline_verifies_on_every_profile(topo, profile, nodes):
    graph = topo(profile, nodes)
    for name in NAMES:
        names = applicable_baselines(graph, name)
        assert names == (ONE_NODE if nodes == 1 else MULTI_NODE)[name]
        for algo in names:
            for channels in (1, 2) if algo in ("ring", "tree") else (1,):
                algorithm = baseline(graph, name, algo, channels=channels)
                verify(algorithm, graph)   # postcondition, and every transfer on an existing edge
                assert algorithm.collective.name == name and algorithm.ranks == graph.number_of_nodes()
                assert algorithm.topology == graph.graph["name"] and algorithm.metadata["baseline"] == algo
                steps = [t.step for t in algorithm.transfers]
                assert steps == sorted(steps) and set(steps) == set(range(algorithm.num_steps))


@pytest.mark.parametrize("stem, chunk", [("topo-ndv2-1MB", 1 << 20), ("topo-dgx2-1KB", 1 << 10)])
def test_baselines_on_taccl_topologies(taccl_topo_dir, stem, chunk):
    graph = build_topology(load_hardware(taccl_topo_dir / f"{stem}.json", chunk_bytes=chunk), 2)
    for name in NAMES:
        for algo in applicable_baselines(graph, name):
            verify(baseline(graph, name, algo), graph)


def test_ring_on_four_gpus_has_n_minus_1_steps(topo, small_profile):
    graph = topo(small_profile, 1)
    ag = baseline(graph, "allgather", "ring")
    assert ag.num_steps == 3 and len(ag.transfers) == 12
    for step in range(3):   # every rank sends exactly one chunk to its successor in every step
        sends = [t for t in ag.transfers if t.step == step]
        assert sorted(t.src for t in sends) == [0, 1, 2, 3] and sorted(t.dst for t in sends) == [0, 1, 2, 3]
        assert all(len(t.chunks) == 1 and t.op == "copy" for t in sends)
    rs = baseline(graph, "reducescatter", "ring")
    assert rs.num_steps == 3 and {t.op for t in rs.transfers} == {"reduce"}
    ar = baseline(graph, "allreduce", "ring")
    assert ar.num_steps == 6 and len(ar.transfers) == 24
    assert [t.op for t in ar.transfers] == ["reduce"] * 12 + ["copy"] * 12


def test_ndv2_ring_follows_the_double_nvlinks(topo):
    graph = topo("ndv2", 1)
    ring = baseline(graph, "allgather", "ring")
    assert {graph.edges[t.src, t.dst]["bandwidth_GBps"] for t in ring.transfers} == {50.0}
    successor = {t.src: t.dst for t in ring.transfers}
    assert len(successor) == 8 and sorted(successor.values()) == list(range(8))


def test_multi_node_ring_crosses_where_the_nic_is(topo):
    graph = topo("ndv2", 2)
    ring = baseline(graph, "allgather", "ring")
    net = {(t.src, t.dst) for t in ring.transfers if graph.edges[t.src, t.dst]["kind"] == "net"}
    assert len(net) == 2
    assert all(u % 8 in (0, 1) and v % 8 in (0, 1) for u, v in net), "both ends on the NIC's PCIe switch"
    intra = {(t.src, t.dst) for t in ring.transfers} - net
    assert {graph.edges[e]["bandwidth_GBps"] for e in intra} == {50.0}


def test_two_channels_run_opposite_rings(topo):
    graph = topo("ndv2", 1)
    two = baseline(graph, "allgather", "ring", channels=2)
    assert two.collective.chunkup == 2 and two.num_steps == 7
    forward = {(t.src, t.dst) for t in two.transfers if t.chunks[0] % 2 == 0}
    backward = {(t.src, t.dst) for t in two.transfers if t.chunks[0] % 2 == 1}
    assert backward == {(v, u) for u, v in forward}
    one = baseline(graph, "allgather", "ring")
    size = 64 << 20
    assert simulate(two, graph, size).time_us < 0.6 * simulate(one, graph, size).time_us


def test_more_channels_cross_through_more_nics(topo):
    graph = topo("dgx-a100", 2)
    eight = baseline(graph, "allreduce", "ring", channels=8)
    crossings = {t.src for t in eight.transfers if graph.edges[t.src, t.dst]["kind"] == "net"}
    assert len({r % 8 for r in crossings}) == 8, "every GPU's own NIC carries a ring"
    size = 256 << 20
    assert simulate(eight, graph, size).algbw_GBps > 3 * simulate(baseline(graph, "allreduce", "ring"), graph, size).algbw_GBps


def rail(oversubscription: float, nodes: int):
    profile = load_hardware("dgx-h100-rail")
    return build_topology(dataclasses.replace(profile, network=RailNetwork(oversubscription, 32, 0.6)), nodes)


def spine_crossings(graph, algorithm) -> int:
    """How many of the algorithm's hops cross the spine."""
    hops = {(t.src, t.dst) for t in algorithm.transfers}
    return sum(1 for h in hops if any(SPINE in arc for arc in graph.edges[h]["resources"]))


@pytest.mark.parametrize("nodes", [2, 4])
def test_rings_on_rails_cross_between_equal_gpus(nodes):
    """As NCCL's rings enter and leave a node through one NIC: odd nodes run the ring backwards, so each
    crossing joins GPU j to GPU j of the next node, on rail j's leaf, never through the spine."""
    graph = rail(2.0, nodes)
    for channels in (1, 2, 8):
        ring = baseline(graph, "allreduce", "ring", channels=channels)
        crossings = {(t.src, t.dst) for t in ring.transfers if graph.edges[t.src, t.dst]["kind"] == "net"}
        assert crossings and all(u % 8 == v % 8 for u, v in crossings)
        assert spine_crossings(graph, ring) == 0
    eight = ring
    assert len({u % 8 for u, _ in crossings}) == 8, "eight rings use all eight rails"
    # off the spine, oversubscription costs a ring nothing: it runs as fast as on the one-switch network
    flat = build_topology(load_hardware("dgx-h100"), nodes)
    assert simulate(eight, graph, 1 << 28) == simulate(baseline(flat, "allreduce", "ring", channels=8), flat, 1 << 28)


def test_oversubscription_slows_what_crosses_rails():
    # direct AllToAll sends GPU i straight to GPU j of another node: 7 of 8 such edges change rails and run
    # at 50 / R through the spine; two-step first gathers on the right rail and does not care
    fast, slow = rail(1.0, 2), rail(4.0, 2)
    size = 1 << 28
    direct = [simulate(baseline(g, "alltoall", "direct"), g, size).algbw_GBps for g in (fast, slow)]
    two_step = [simulate(baseline(g, "alltoall", "two-step"), g, size).algbw_GBps for g in (fast, slow)]
    assert direct[1] < 0.5 * direct[0]
    assert two_step[1] == pytest.approx(two_step[0])


def test_an_odd_node_count_crosses_rails_once_per_ring():
    graph = rail(1.0, 3)
    ring = baseline(graph, "allgather", "ring")
    assert spine_crossings(graph, ring) == 1, "only the hop that closes the ring (node 2 -> node 0) changes rails"


def test_binary_trees_are_complementary():
    for n in (2, 4, 8):
        nodes = list(range(n))
        trees = [_binary_tree(nodes), _binary_tree(nodes[::-1])]
        for tree in trees:
            assert sorted(tree) == nodes and sum(p is None for p in tree.values()) == 1
            assert max(Counter(p for p in tree.values() if p is not None).values()) <= 2
        leaves = [set(nodes) - {p for p in tree.values() if p is not None} for tree in trees]
        assert not leaves[0] & leaves[1], f"a node is a leaf in both trees ({n} nodes)"


def test_tree_allreduce_reduces_each_half_on_its_own_tree(topo):
    graph = topo("dgx-a100", 4)
    tree = baseline(graph, "allreduce", "tree")
    R = 32
    reduce_edges = {}
    for t in tree.transfers:
        assert len(t.chunks) == 1
        if t.op == "reduce":
            reduce_edges.setdefault(t.chunks[0], set()).add((t.src, t.dst))
    assert sorted(reduce_edges) == list(range(R))
    for slot, edges in reduce_edges.items():
        assert len(edges) == R - 1, "a spanning tree: every rank but the root sends once"
    assert reduce_edges[0] == reduce_edges[15] and reduce_edges[16] == reduce_edges[31]
    assert reduce_edges[0] != reduce_edges[16]
    roots = [({v for _, v in reduce_edges[s]} - {u for u, _ in reduce_edges[s]}).pop() for s in (0, 16)]
    assert roots[0] != roots[1]


def test_hierarchical_crosses_the_network_once_per_chunk_and_node(topo):
    graph = topo("ndv2", 2)
    for name in ("allgather", "reducescatter"):
        algo = baseline(graph, name, "hierarchical")
        net = [t for t in algo.transfers if graph.edges[t.src, t.dst]["kind"] == "net"]
        assert sum(len(t.chunks) for t in net) == 16        # N(N-1)G chunks, N = 2, G = 8
        assert all(t.src % 8 == t.dst % 8 for t in net), "only between GPUs of equal local index"
    ar = baseline(graph, "allreduce", "hierarchical")
    assert ar.num_steps == 2 * (8 - 1) + 2 * (2 - 1)


def test_direct_alltoall_relays_only_where_no_link(topo):
    graph = topo("ndv2", 1)
    algo = baseline(graph, "alltoall", "direct")
    first = [t for t in algo.transfers if t.step == 0]
    second = [t for t in algo.transfers if t.step == 1]
    assert algo.num_steps == 2
    assert {(t.src, t.dst) for t in first} == {(u, v) for u, v in graph.edges}   # one message per link
    relayed = sum(len(t.chunks) for t in second)
    assert relayed == 8 * 3   # each GPU has 3 non-neighbours, each chunk for them takes one relay hop
    dgx = topo("dgx-a100", 1)
    assert baseline(dgx, "alltoall", "direct").num_steps == 1


def test_two_step_sends_one_transfer_per_node_pair_and_local_index(topo):
    for profile, nodes in (("dgx2", 2), ("ndv2", 4)):
        graph = topo(profile, nodes)
        G = graph.graph["gpus_per_node"]
        algo = baseline(graph, "alltoall", "two-step")
        net = [t for t in algo.transfers if graph.edges[t.src, t.dst]["kind"] == "net"]
        assert len(net) == nodes * (nodes - 1) * G
        assert Counter((t.src // G, t.dst // G, t.src % G) for t in net) == Counter(
            {(a, b, j): 1 for a in range(nodes) for b in range(nodes) if a != b for j in range(G)})
        assert all(len(t.chunks) == G and t.src % G == t.dst % G for t in net)


def test_ring_needs_a_cycle_direct_relays(topo, small_profile):
    small_profile["links"] = {"class": "nvlink", "pairs": [[0, 1, 1], [0, 2, 1], [0, 3, 1]]}   # a star
    graph = topo(small_profile, 1)
    assert applicable_baselines(graph, "allgather") == ["direct"]
    assert applicable_baselines(graph, "allreduce") == []
    with pytest.raises(InputError) as err:
        baseline(graph, "allgather", "ring")
    assert err.value.parameter == "algorithm" and "no ring" in err.value.expected
    a2a = baseline(graph, "alltoall", "direct")
    verify(a2a, graph)
    assert {t.src for t in a2a.transfers if t.step == 1} == {0}, "leaves reach each other through the hub"


@pytest.mark.parametrize("collective, algo, why", [
    ("alltoall", "ring", "an algorithm for alltoall"),
    ("allreduce", "two-step", "an algorithm for allreduce"),
    ("allgather", "hierarchical", "at least two nodes"),
])
def test_inapplicable_baselines_are_input_errors(topo, collective, algo, why):
    with pytest.raises(InputError, match=why) as err:
        baseline(topo("dgx-h100", 1), collective, algo)
    assert err.value.parameter == "algorithm"


def test_unknown_names(topo):
    graph = topo("ring", 1)
    with pytest.raises(InputError) as err:
        baseline(graph, "allgather", "butterfly")
    assert err.value.parameter == "algorithm" and all(a in err.value.expected for a in ALGORITHMS)
    with pytest.raises(InputError) as err:
        baseline(graph, "gather", "ring")
    assert err.value.parameter == "collective"
    with pytest.raises(InputError) as err:
        baseline(graph, "allgather", "ring", channels=0)
    assert err.value.parameter == "channels"
    with pytest.raises(InputError, match="only ring and tree") as err:
        baseline(graph, "alltoall", "direct", channels=2)


@pytest.mark.slow
def test_best_baseline_is_the_fastest_candidate(topo):
    graph = topo("dgx-a100", 2)
    for size in (1 << 10, 1 << 28):
        name, algo, result = best_baseline(graph, "allreduce", size)
        for other in applicable_baselines(graph, "allreduce"):
            for channels, instances in channel_options(graph, other):
                for protocol in PROTOCOLS:
                    alternative = simulate(baseline(graph, "allreduce", other, channels), graph, size, protocol, instances)
                    assert result.time_us <= alternative.time_us * (1 + 1e-9)
        assert algo.metadata["baseline"] == name


@pytest.mark.parametrize("hardware,nodes,collective", [
    ("ndv2", 2, "allgather"), pytest.param("dgx-a100", 2, "allreduce", marks=pytest.mark.slow),
    pytest.param("dgx-h100", 2, "reducescatter", marks=pytest.mark.slow)])
def test_best_baselines_skip_only_what_cannot_win(topo, hardware, nodes, collective):
    """The floor-pruned choice over several sizes at once is the unpruned one: every baseline's best run
    (:func:`best_runs`), the first fastest kept."""
    graph = topo(hardware, nodes)
    sizes = [1 << 10, 1 << 20, 1 << 30]
    chosen = best_baselines(graph, collective, sizes)
    names = applicable_baselines(graph, collective)
    runs = {name: best_runs(graph, collective, name, sizes) for name in names}
    for i, (name, algorithm, result) in enumerate(chosen):
        fastest = min(names, key=lambda n: runs[n][i].time_us)     # min keeps the first on a tie
        assert name == fastest and result.time_us == runs[name][i].time_us
        run = runs[name][i]
        assert algorithm == baseline(graph, collective, name, run.channels)
        assert result == simulate(algorithm, graph, sizes[i], run.protocol, run.instances)


def test_channel_options_reach_nccls_channel_count(topo):
    """One channel, and the profile's NCCL channels: distinct rings (two directions per NIC crossing) times instances."""
    one_node, two_nodes = topo("dgx-a100", 1), topo("dgx-a100", 2)
    assert channel_options(one_node, "ring") == [(1, 1), (2, 1), (2, 12)]       # 24 channels, one ring each way
    assert channel_options(two_nodes, "ring") == [(1, 1), (2, 1), (16, 1)]      # 8 NICs: 16 distinct rings
    assert channel_options(two_nodes, "tree") == [(1, 1), (8, 3)]
    assert channel_options(one_node, "direct") == [(1, 1)]
    # NCCL's channels beat one ring on a switch whose port one channel cannot fill
    one = simulate(baseline(one_node, "allreduce", "ring"), one_node, 1 << 28).time_us
    many = simulate(baseline(one_node, "allreduce", "ring", 2), one_node, 1 << 28, instances=12).time_us
    assert many < one / 4


def test_ring_channels_are_separate_channels(topo):
    graph = topo("dgx-a100", 1)
    algorithm = baseline(graph, "allreduce", "ring", 4)
    assert {t.channel for t in algorithm.transfers} == {0, 1, 2, 3}
    assert all(len(t.chunks) == 1 for t in algorithm.transfers)     # one chunk per channel and step


def test_one_gpu_per_node_and_an_odd_node_count(topo):
    """nNodes == nRanks (NCCL's PAT case): every baseline still verifies, trees included, on 1-5 nodes."""
    profile = {"name": "one", "gpus_per_node": 1, "link_classes": {"ib": {"alpha_us": 2.0, "bandwidth_GBps": 25.0}},
               "nics": [{"class": "ib", "gpus": [0]}]}
    assert applicable_baselines(topo(profile, 1), "allgather") == []   # one rank: nothing to do
    for nodes in (2, 3, 5):
        graph = topo(profile, nodes)
        for name in NAMES:
            assert applicable_baselines(graph, name) == MULTI_NODE[name]
            for algo in MULTI_NODE[name]:
                verify(baseline(graph, name, algo), graph)
        ring = baseline(graph, "allgather", "ring")
        assert ring.num_steps == nodes - 1
