"""The alpha-beta simulator against times worked out by hand from the profile's link rates."""
from __future__ import annotations

import heapq
import math
import random

import pytest

from autotaccl.model.algorithm import Algorithm, Transfer
from autotaccl.model.collectives import NAMES, Collective
from autotaccl.model.hardware import profile_from_dict
from autotaccl.model.topology import build_topology
from autotaccl.simulate import MAX_ROUNDS, ROUND_BYTES, _plan, _schedule, rounds, simulate, simulate_sizes

ALPHA, BW = 0.7, 25.0          # NVLink class of the hand-built ring (µs, GB/s)
PCIE_ALPHA, IB_ALPHA, IB_BW = 0.5, 2.6, 12.5


def ring4(nodes: int = 1):
    """4 GPUs in a bidirectional ring of single NVLinks; with 2 nodes, one NIC per node shared by all."""
    profile = profile_from_dict({
        "name": "ring4", "gpus_per_node": 4,
        "link_classes": {"nvlink": {"alpha_us": ALPHA, "bandwidth_GBps": BW},
                         "pcie": {"alpha_us": PCIE_ALPHA, "bandwidth_GBps": 16.0},
                         "ib": {"alpha_us": IB_ALPHA, "bandwidth_GBps": IB_BW}},
        "links": {"class": "nvlink", "pattern": "ring"},
        "nics": [{"class": "ib", "via": "pcie", "gpus": [0, 1, 2, 3]}]}, "<test ring4>")
    return build_topology(profile, nodes)


def algo(name: str, ranks: int, transfers) -> Algorithm:
    return Algorithm("test", Collective(name, ranks), tuple(Transfer(*t) for t in transfers))


def ring_allgather(ranks: int = 4) -> Algorithm:
    # step s: rank r forwards chunk (r - s) mod R to r + 1
    return algo("allgather", ranks, [(((r - s) % ranks,), r, (r + 1) % ranks, s)
                                     for s in range(ranks - 1) for r in range(ranks)])


def test_ring_allgather_small_is_three_alpha_beta_steps():
    size = 4096                               # 1 KiB per chunk: one round
    c = size / 4
    result = simulate(ring_allgather(), ring4(), size)
    assert result.time_us == pytest.approx(3 * (ALPHA + c / (BW * 1e3)))
    assert result.algbw_GBps == pytest.approx(size / result.time_us / 1e3)


def test_transfer_waits_for_its_chunk():
    graph = ring4()
    c = 1024
    hop = ALPHA + c / (BW * 1e3)
    relay = algo("allgather", 4, [((0,), 0, 1, 0), ((0,), 1, 2, 1)])   # rank 1 forwards what it just got
    assert simulate(relay, graph, 4 * c).time_us == pytest.approx(2 * hop)
    # an unrelated transfer on a free link runs beside them and does not stretch the time
    beside = algo("allgather", 4, [((0,), 0, 1, 0), ((0,), 1, 2, 1), ((2,), 2, 3, 1)])
    assert simulate(beside, graph, 4 * c).time_us == pytest.approx(2 * hop)
    # listed the other way round, rank 1 sends nothing it has to wait for: one hop
    independent = algo("allgather", 4, [((1,), 1, 2, 0), ((0,), 0, 1, 0)])
    assert simulate(independent, graph, 4 * c).time_us == pytest.approx(hop)


def test_reduce_waits_for_the_destination_value_and_overwrite_waits_for_readers():
    graph = ring4()
    c = 2048
    hop = ALPHA + c / (BW * 1e3)
    # 1 -> 2 reduce of chunk 0 must wait until 3 -> 2 has written rank 2's copy of chunk 0 (WAW) ...
    waw = algo("allreduce", 4, [((0,), 3, 2, 0, "reduce"), ((0,), 1, 2, 0, "reduce")])
    assert simulate(waw, graph, 4 * c).time_us == pytest.approx(2 * hop)
    # ... and overwriting rank 1's chunk 0 must wait for rank 1 to have sent it (WAR)
    war = algo("allgather", 4, [((0,), 0, 1, 0), ((0,), 1, 2, 1), ((0,), 0, 1, 2)])
    assert simulate(war, graph, 4 * c).time_us == pytest.approx(2 * hop + hop)


def test_two_transfers_sharing_a_nic_serialize():
    graph = ring4(nodes=2)                    # ranks 0-3 on node 0, 4-7 on node 1, one NIC each
    c = 8192
    # GPU -> NIC over PCIe (0.5 us), NIC -> network (2.6 us), NIC -> GPU over PCIe again (0.5 us)
    net = 2 * PCIE_ALPHA + IB_ALPHA + c / (IB_BW * 1e3)
    assert graph.edges[0, 4]["alpha_us"] == pytest.approx(2 * PCIE_ALPHA + IB_ALPHA)
    same_nic = algo("allgather", 8, [((0,), 0, 4, 0), ((1,), 1, 5, 0)])
    assert simulate(same_nic, graph, 8 * c).time_us == pytest.approx(2 * net)
    # opposite directions use disjoint arcs (egress of one NIC, ingress of the other): they overlap
    crossing = algo("allgather", 8, [((0,), 0, 4, 0), ((5,), 5, 1, 0)])
    assert simulate(crossing, graph, 8 * c).time_us == pytest.approx(net)
    # three senders through one NIC: three in a row
    three = algo("allgather", 8, [((0,), 0, 4, 0), ((1,), 1, 5, 0), ((2,), 2, 6, 0)])
    assert simulate(three, graph, 8 * c).time_us == pytest.approx(3 * net)


def test_pipelining_makes_a_chain_approach_link_bandwidth():
    graph = ring4()
    size = 1 << 30
    chain = algo("broadcast", 4, [((0,), 0, 1, 0), ((0,), 1, 2, 1), ((0,), 2, 3, 2)])
    k = rounds(size)
    assert k == MAX_ROUNDS
    # k slices flow through three links: the last slice leaves link 1 after k slice times and needs two more
    slice_time = ALPHA + size / k / (BW * 1e3)
    result = simulate(chain, graph, size)
    assert result.time_us == pytest.approx((k + 2) * slice_time)
    wire = size / (BW * 1e3)
    assert wire < result.time_us < 1.05 * wire           # close to bytes / bandwidth ...
    assert result.time_us < 0.4 * 3 * (ALPHA + wire)     # ... and far from the unpipelined 3 hops


def test_pipelined_ring_allgather_keeps_every_link_busy():
    graph = ring4()
    size = 1 << 30
    c = size / 4
    k = rounds(c)
    result = simulate(ring_allgather(), graph, size)
    busy_per_link = 3 * k * ALPHA + 3 * c / (BW * 1e3)    # each link carries 3 chunks in k slices
    assert busy_per_link <= result.time_us <= busy_per_link * 1.03


def test_round_count():
    assert rounds(1) == 1 and rounds(ROUND_BYTES) == 1 and rounds(ROUND_BYTES + 1) == 2
    assert rounds(10 * ROUND_BYTES) == 10 and rounds(1e12) == MAX_ROUNDS


@pytest.mark.parametrize("name", NAMES)
def test_busbw_over_algbw_is_the_nccl_tests_factor(name):
    n = 4
    factor = {"allreduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(name, (n - 1) / n)
    op = "reduce" if name in ("reducescatter", "allreduce") else "copy"
    a = algo(name, n, [((0,), 0, 1, 0, op)])
    for r in simulate_sizes(a, ring4(), [1024, 1 << 20, 1 << 26]):
        assert r.busbw_GBps / r.algbw_GBps == pytest.approx(factor)
        assert r.algbw_GBps == pytest.approx(r.bytes / r.time_us / 1e3)


def test_chunk_size_follows_nccl_tests_convention():
    graph = ring4()
    size = 4096
    one = ALPHA + size / 4 / (BW * 1e3)   # AllGather/AllToAll/ReduceScatter: a chunk is size / ranks
    assert simulate(algo("alltoall", 4, [((1,), 0, 1, 0)]), graph, size).time_us == pytest.approx(one)
    whole = ALPHA + size / (BW * 1e3)     # Broadcast with chunkup 1: the chunk is the whole buffer
    assert simulate(algo("broadcast", 4, [((0,), 0, 1, 0)]), graph, size).time_us == pytest.approx(whole)


def test_missing_link_is_an_error():
    with pytest.raises(ValueError, match="no link from rank 0 to rank 2"):
        simulate(algo("allgather", 4, [((0,), 0, 2, 0)]), ring4(), 4096)


def test_time_grows_with_size():
    times = [r.time_us for r in simulate_sizes(ring_allgather(), ring4(), [2 ** p for p in range(10, 31, 2)])]
    assert all(a < b for a, b in zip(times, times[1:]))
    assert not any(math.isnan(t) for t in times)


# --------------------------------------------------------------------------- the event loop against a full scan


def full_scan(plan, duration, k) -> float:
    """The scheduling rule done the obvious, slow way: at every event walk all ready instances in
    priority order (round, list order) and start each one whose resources are all free."""
    n = len(duration)
    pending = list(plan.deps) * k
    busy = set()
    waiting = [r * n + i for r in range(k) for i in range(n) if not plan.deps[i]]
    running, now = [], 0.0
    while True:
        still = []
        for job in sorted(waiting):
            held = plan.resources[job % n]
            if busy.isdisjoint(held):
                busy.update(held)
                heapq.heappush(running, (now + duration[job % n], job))
            else:
                still.append(job)
        waiting = still
        if not running:
            return now
        now = running[0][0]
        while running and running[0][0] == now:
            job = heapq.heappop(running)[1]
            busy.difference_update(plan.resources[job % n])
            base = job - job % n
            for d in plan.dependents[job % n]:
                pending[base + d] -= 1
                if not pending[base + d]:
                    waiting.append(base + d)


def random_algorithm(graph, rng: random.Random, transfers: int) -> Algorithm:
    """Transfers over random existing links moving random chunks: heavy sharing of NICs and links."""
    edges = list(graph.edges)
    ranks = graph.number_of_nodes()
    out = []
    for step in range(transfers):
        src, dst = rng.choice(edges)
        out.append(Transfer(tuple(rng.sample(range(ranks), rng.randint(1, 2))), src, dst, step,
                            rng.choice(["copy", "reduce"])))
    return Algorithm("random", Collective("allreduce", ranks), tuple(out))


def test_event_loop_equals_a_full_scan_on_random_contended_algorithms():
    graph = ring4(nodes=2)                    # 8 ranks, two NICs that every cross-node transfer shares
    rng = random.Random(7)
    for _ in range(300):
        algorithm = random_algorithm(graph, rng, rng.randint(1, 24))
        plan = _plan(algorithm, graph)
        k = rng.randint(1, 6)
        # few distinct durations, so that many transfers finish at the same instant
        duration = [rng.choice([1.0, 1.5, 2.0, 3.0]) for _ in algorithm.transfers]
        assert _schedule(plan, duration, k) == full_scan(plan, duration, k)


def test_contended_direct_alltoall_equals_a_full_scan():
    """Many rounds of all-to-all traffic queueing for the NICs: the case the event loop is built for."""
    from autotaccl.baselines import baseline
    graph = ring4(nodes=2)
    algorithm = baseline(graph, "alltoall", "direct")
    size = 64 << 20
    chunk = algorithm.collective.chunk_bytes(size)
    k = rounds(chunk)
    assert k == 8
    plan = _plan(algorithm, graph)
    duration = [a + c * (chunk / k) / bw for a, c, bw in zip(plan.alpha_us, plan.chunks, plan.bandwidth)]
    assert simulate(algorithm, graph, size).time_us == full_scan(plan, duration, k)
