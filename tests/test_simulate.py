"""The simulator against times worked out by hand from the profile's link rates and protocol terms, and its
event loop against a brute-force fluid simulation."""
from __future__ import annotations

import math
import random

import pytest

from autotaccl.model.algorithm import Algorithm, Transfer
from autotaccl.model.collectives import NAMES, Collective
from autotaccl.model.hardware import load_hardware, profile_from_dict
from autotaccl.model.topology import build_topology
from autotaccl.simulate import (MAX_ROUNDS, ROUND_BYTES, _fluid, _plan, estimate, floor_us, protocol_terms, rounds, simulate,
                                simulate_sizes, transfer_times)

ALPHA, BW = 0.7, 25.0          # NVLink class of the hand-built ring (µs, GB/s)
PCIE_ALPHA, IB_ALPHA, IB_BW = 0.5, 2.6, 12.5
# protocol terms chosen so that every case below is easy to work out by hand
LAUNCH, HOP, NET_HOP, CHANNEL = 5.0, 1.0, 2.0, 100.0
PROTOCOLS = {"Simple": {"launch_us": LAUNCH, "hop_us": HOP, "net_hop_us": NET_HOP, "efficiency": 1.0,
                        "channel_GBps": CHANNEL},
             "LL": {"launch_us": 2.0, "hop_us": 0.0, "net_hop_us": 0.5, "efficiency": 0.5, "channel_GBps": CHANNEL},
             "LL128": {"launch_us": 3.0, "hop_us": 0.5, "net_hop_us": 1.0, "efficiency": 0.9375, "channel_GBps": 10.0}}


def ring4(nodes: int = 1, far: bool = False):
    """4 GPUs in a bidirectional ring of single NVLinks; with 2 nodes, one NIC per node shared by all
    (``far``: GPUs 2 and 3 reach it over a 10 GB/s host path)."""
    nic = {"class": "ib", "via": "pcie", "gpus": [0, 1, 2, 3]}
    if far:
        nic = {"class": "ib", "via": "pcie", "gpus": [0, 1], "far_gpus": [2, 3], "far_via": "host"}
    profile = profile_from_dict({
        "name": "ring4", "gpus_per_node": 4,
        "link_classes": {"nvlink": {"alpha_us": ALPHA, "bandwidth_GBps": BW},
                         "pcie": {"alpha_us": PCIE_ALPHA, "bandwidth_GBps": 16.0},
                         "host": {"alpha_us": PCIE_ALPHA, "bandwidth_GBps": 10.0},
                         "ib": {"alpha_us": IB_ALPHA, "bandwidth_GBps": IB_BW}},
        "links": {"class": "nvlink", "pattern": "ring"}, "nics": [nic], "protocols": PROTOCOLS}, "<test ring4>")
    return build_topology(profile, nodes)


def algo(name: str, ranks: int, transfers) -> Algorithm:
    return Algorithm("test", Collective(name, ranks), tuple(Transfer(*t) for t in transfers))


def ring_allgather(ranks: int = 4) -> Algorithm:
    # step s: rank r forwards chunk (r - s) mod R to r + 1
    return algo("allgather", ranks, [(((r - s) % ranks,), r, (r + 1) % ranks, s)
                                     for s in range(ranks - 1) for r in range(ranks)])


def wire(nbytes: float, gbps: float) -> float:
    return nbytes / (gbps * 1e3)


HOP_US = ALPHA + HOP                                # latency of one NVLink transfer under Simple
NET_US = 2 * PCIE_ALPHA + IB_ALPHA + NET_HOP        # latency of one transfer across the network


def test_ring_allgather_small_is_launch_and_three_latency_bandwidth_steps():
    size = 4096                               # 1 KiB per chunk: one round
    result = simulate(ring_allgather(), ring4(), size)
    assert result.time_us == pytest.approx(LAUNCH + 3 * (HOP_US + wire(size / 4, BW)))
    assert result.algbw_GBps == pytest.approx(size / result.time_us / 1e3)


def test_transfer_waits_for_its_chunk():
    graph = ring4()
    c = 1024
    hop = HOP_US + wire(c, BW)
    relay = algo("allgather", 4, [((0,), 0, 1, 0), ((0,), 1, 2, 1)])   # rank 1 forwards what it just got
    assert simulate(relay, graph, 4 * c).time_us == pytest.approx(LAUNCH + 2 * hop)
    # an unrelated transfer on a free link runs beside them and does not stretch the time
    beside = algo("allgather", 4, [((0,), 0, 1, 0), ((0,), 1, 2, 1), ((2,), 2, 3, 1)])
    assert simulate(beside, graph, 4 * c).time_us == pytest.approx(LAUNCH + 2 * hop)
    # listed the other way round, rank 1 sends nothing it has to wait for: one hop
    independent = algo("allgather", 4, [((1,), 1, 2, 0), ((0,), 0, 1, 0)])
    assert simulate(independent, graph, 4 * c).time_us == pytest.approx(LAUNCH + hop)


def test_reduce_waits_for_the_destination_value_and_overwrite_waits_for_readers():
    graph = ring4()
    c = 2048
    hop = HOP_US + wire(c, BW)
    # 1 -> 2 reduce of chunk 0 must wait until 3 -> 2 has written rank 2's copy of chunk 0 (WAW) ...
    waw = algo("allreduce", 4, [((0,), 3, 2, 0, "reduce"), ((0,), 1, 2, 0, "reduce")])
    assert simulate(waw, graph, 4 * c).time_us == pytest.approx(LAUNCH + 2 * hop)
    # ... and overwriting rank 1's chunk 0 must wait for rank 1 to have sent it (WAR)
    war = algo("allgather", 4, [((0,), 0, 1, 0), ((0,), 1, 2, 1), ((0,), 0, 1, 2)])
    assert simulate(war, graph, 4 * c).time_us == pytest.approx(LAUNCH + 3 * hop)


def test_transfers_through_one_nic_share_its_bandwidth():
    graph = ring4(nodes=2)                    # ranks 0-3 on node 0, 4-7 on node 1, one NIC each
    c = 8192
    assert graph.edges[0, 4]["alpha_us"] == pytest.approx(2 * PCIE_ALPHA + IB_ALPHA)
    one = algo("allgather", 8, [((0,), 0, 4, 0)])
    assert simulate(one, graph, 8 * c).time_us == pytest.approx(LAUNCH + NET_US + wire(c, IB_BW))
    # two senders through one NIC: their latencies overlap, then each moves at half the NIC's rate
    same_nic = algo("allgather", 8, [((0,), 0, 4, 0), ((1,), 1, 5, 0)])
    assert simulate(same_nic, graph, 8 * c).time_us == pytest.approx(LAUNCH + NET_US + wire(2 * c, IB_BW))
    # opposite directions use disjoint arcs (egress of one NIC, ingress of the other): no sharing
    crossing = algo("allgather", 8, [((0,), 0, 4, 0), ((5,), 5, 1, 0)])
    assert simulate(crossing, graph, 8 * c).time_us == pytest.approx(LAUNCH + NET_US + wire(c, IB_BW))
    three = algo("allgather", 8, [((0,), 0, 4, 0), ((1,), 1, 5, 0), ((2,), 2, 6, 0)])
    assert simulate(three, graph, 8 * c).time_us == pytest.approx(LAUNCH + NET_US + wire(3 * c, IB_BW))


def test_a_slow_path_does_not_hold_the_nic_it_cannot_fill():
    """GPU 2 reaches the 12.5 GB/s NIC over a 10 GB/s host path. Alone it moves at 10; with GPU 0 sending
    too, the NIC splits 6.25 + 6.25 and stays full (holding the whole path would leave 2.5 GB/s idle)."""
    graph = ring4(nodes=2, far=True)
    size = 32 << 20                            # 4 MiB per chunk: four 1 MiB rounds
    chunk = size / 8
    assert rounds(chunk) == 4
    alone = algo("allgather", 8, [((2,), 2, 6, 0)])
    k = 4
    slice_time = wire(chunk / k, 10.0)
    # 4 rounds one after the other on one connection, their latencies hidden behind the previous bytes
    assert simulate(alone, graph, size).time_us == pytest.approx(LAUNCH + NET_US + k * slice_time)
    both = algo("allgather", 8, [((2,), 2, 6, 0), ((0,), 0, 4, 0)])
    assert simulate(both, graph, size).time_us == pytest.approx(LAUNCH + NET_US + wire(2 * chunk, IB_BW))


def test_one_connection_moves_one_transfer_at_a_time_and_hides_the_next_ones_latency():
    graph = ring4()
    c = 4096
    two = algo("allgather", 4, [((0,), 0, 1, 0), ((2,), 0, 1, 0)])      # same connection (channel 0)
    assert simulate(two, graph, 4 * c).time_us == pytest.approx(LAUNCH + HOP_US + 2 * wire(c, BW))
    # on two channels they move side by side and share the link: the same bytes, the same time here ...
    parallel = Algorithm("test", Collective("allgather", 4),
                         (Transfer((0,), 0, 1, 0), Transfer((2,), 0, 1, 0, channel=1)))
    assert simulate(parallel, graph, 4 * c).time_us == pytest.approx(LAUNCH + HOP_US + 2 * wire(c, BW))


def test_a_channel_cannot_fill_a_fast_link_but_instances_can():
    graph = ring4()
    c = 65536
    one = algo("allgather", 4, [((0,), 0, 1, 0)])
    # LL128: 10 GB/s per channel on a 25 GB/s link (23.4 GB/s of payload at 120/128)
    assert simulate(one, graph, 4 * c, "LL128").time_us == pytest.approx(3.0 + ALPHA + 0.5 + wire(c, 10.0))
    # two instances: two channels with half the bytes each, 20 GB/s together
    assert simulate(one, graph, 4 * c, "LL128", instances=2).time_us == pytest.approx(3.0 + ALPHA + 0.5 + wire(c / 2, 10.0))
    # four: the link's payload rate binds (25 * 120/128 shared by four copies)
    assert simulate(one, graph, 4 * c, "LL128", instances=4).time_us == pytest.approx(
        3.0 + ALPHA + 0.5 + wire(c, BW * 0.9375))


def test_protocols_differ_in_latency_and_payload():
    graph = ring4()
    one = algo("allgather", 4, [((0,), 0, 1, 0)])
    small, large = 4 * 64, 4 * (1 << 20)
    ll = simulate(one, graph, small, "LL").time_us
    simple = simulate(one, graph, small, "Simple").time_us
    assert ll == pytest.approx(2.0 + ALPHA + wire(64, BW * 0.5))         # LL: half of every line is flags
    assert simple == pytest.approx(LAUNCH + HOP_US + wire(64, BW))
    assert ll < simple                                                    # small: LL's latency wins ...
    assert simulate(one, graph, large, "Simple").time_us < simulate(one, graph, large, "LL").time_us  # ... large: Simple


def test_pipelining_makes_a_chain_approach_link_bandwidth():
    graph = ring4()
    size = 1 << 30
    chain = algo("broadcast", 4, [((0,), 0, 1, 0), ((0,), 1, 2, 1), ((0,), 2, 3, 2)])
    k = rounds(size)
    assert k == MAX_ROUNDS
    # k slices flow through three links: the last slice leaves link 1 after k slice times and needs two more
    slice_time = wire(size / k, BW)
    result = simulate(chain, graph, size)
    assert result.time_us == pytest.approx(LAUNCH + 3 * HOP_US + (k + 2) * slice_time)
    assert wire(size, BW) < result.time_us < 1.05 * wire(size, BW)
    assert result.time_us < 0.4 * 3 * wire(size, BW)     # far from the unpipelined 3 hops


def test_pipelined_ring_allgather_keeps_every_link_busy_and_meets_the_closed_form():
    graph = ring4()
    size = 1 << 30
    result = simulate(ring_allgather(), graph, size)
    busy_per_link = 3 * wire(size / 4, BW)          # each link carries 3 chunks
    assert busy_per_link <= result.time_us <= busy_per_link * 1.03
    assert estimate(ring_allgather(), graph, size) == pytest.approx(result.time_us, rel=0.03)
    assert estimate(ring_allgather(), graph, 64) == pytest.approx(simulate(ring_allgather(), graph, 64).time_us,
                                                                 rel=0.01)


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
    # AllGather/AllToAll/ReduceScatter: a chunk is size / ranks
    assert simulate(algo("alltoall", 4, [((1,), 0, 1, 0)]), graph, size).time_us == pytest.approx(
        LAUNCH + HOP_US + wire(size / 4, BW))
    # Broadcast with chunkup 1: the chunk is the whole buffer
    assert simulate(algo("broadcast", 4, [((0,), 0, 1, 0)]), graph, size).time_us == pytest.approx(
        LAUNCH + HOP_US + wire(size, BW))


def test_missing_link_and_bad_options_are_errors():
    with pytest.raises(ValueError, match="no link from rank 0 to rank 2"):
        simulate(algo("allgather", 4, [((0,), 0, 2, 0)]), ring4(), 4096)
    with pytest.raises(ValueError, match="instances"):
        simulate(ring_allgather(), ring4(), 4096, instances=0)
    from autotaccl.errors import InputError
    with pytest.raises(InputError, match="--protocol"):
        simulate(ring_allgather(), ring4(), 4096, "LL64")


def test_time_grows_with_size():
    times = [r.time_us for r in simulate_sizes(ring_allgather(), ring4(), [2 ** p for p in range(10, 31, 2)])]
    assert all(a < b for a, b in zip(times, times[1:]))
    assert not any(math.isnan(t) for t in times)


# --------------------------------------------------------------------------- the event loop against brute force


def brute_force(plan, nbytes, k) -> float:
    """The same model done the obvious, slow way: advance from event to event, and at every one start
    each free connection's best latency-free job, recompute every moving job's rate from scratch."""
    n = len(nbytes)
    pending = list(plan.deps) * k
    free_at = {r * n + i: plan.alpha_us[i] for r in range(k) for i in range(n) if not plan.deps[i]}
    moving: dict[int, float] = {}
    busy: set[int] = set()
    now, done, total = 0.0, 0, n * k
    while done < total:
        for c in sorted(set(plan.conn) - busy):
            ready = [j for j, t in free_at.items() if t <= now * (1 + 1e-12) and plan.conn[j % n] == c]
            if ready:
                j = min(ready)
                del free_at[j]
                busy.add(c)
                moving[j] = nbytes[j % n]
        users: dict[int, int] = {}
        for j in moving:
            for a in plan.arcs[j % n]:
                users[a] = users.get(a, 0) + 1
        rate = {j: min([plan.ceiling[j % n]] + [plan.share[a] / users[a] for a in plan.arcs[j % n]]) for j in moving}
        later = [t for t in free_at.values() if t > now * (1 + 1e-12)]
        step = min([moving[j] / rate[j] for j in moving] + [t - now for t in later])
        now += step
        for j in list(moving):
            moving[j] -= rate[j] * step
            if moving[j] <= 1e-9 * nbytes[j % n]:
                del moving[j]
                busy.discard(plan.conn[j % n])
                done += 1
                base = j - j % n
                for d in plan.dependents[j % n]:
                    pending[base + d] -= 1
                    if not pending[base + d]:
                        free_at[base + d] = now + plan.alpha_us[d]
    return now


def random_algorithm(graph, rng: random.Random, transfers: int) -> Algorithm:
    """Transfers over random existing links and channels moving random chunks: heavy sharing of NICs and links."""
    edges = list(graph.edges)
    ranks = graph.number_of_nodes()
    out = []
    for step in range(transfers):
        src, dst = rng.choice(edges)
        out.append(Transfer(tuple(rng.sample(range(ranks), rng.randint(1, 2))), src, dst, step,
                            rng.choice(["copy", "reduce"]), channel=rng.randint(0, 1)))
    return Algorithm("random", Collective("allreduce", ranks), tuple(out))


def test_event_loop_equals_brute_force_on_random_contended_algorithms():
    graph = ring4(nodes=2, far=True)          # 8 ranks, two NICs that every cross-node transfer shares
    rng = random.Random(7)
    for _ in range(250):
        algorithm = random_algorithm(graph, rng, rng.randint(1, 20))
        plan = _plan(algorithm, graph, rng.choice(["LL", "LL128", "Simple"]), rng.randint(1, 3))
        k = rng.randint(1, 4)
        # few distinct sizes, so that many transfers start and finish at the same instant
        nbytes = [c * rng.choice([1000.0, 4000.0]) for c in plan.chunks]
        assert _fluid(plan, nbytes, k) == pytest.approx(brute_force(plan, nbytes, k), rel=1e-9)


def test_the_floor_never_exceeds_the_simulated_time_and_is_reached_where_nothing_overlaps():
    graph = ring4(nodes=2, far=True)
    rng = random.Random(11)
    tight = 0
    for _ in range(250):
        algorithm = random_algorithm(graph, rng, rng.randint(1, 20))
        protocol, instances, size = rng.choice(["LL", "LL128", "Simple"]), rng.randint(1, 3), rng.choice([1 << 12, 1 << 26])
        floor, time_us = floor_us(algorithm, graph, size, protocol, instances), simulate(algorithm, graph, size, protocol,
                                                                                        instances).time_us
        assert floor <= time_us * (1 + 1e-12)
        tight += floor == pytest.approx(time_us, rel=1e-9)
    assert tight > 0
    one = algo("allgather", 4, [((0,), 0, 1, 0)])   # one transfer alone: latency + bytes at its rate
    assert floor_us(one, ring4(), 1 << 20) == pytest.approx(simulate(one, ring4(), 1 << 20).time_us, rel=1e-12)


def test_contended_direct_alltoall_equals_brute_force():
    """Many rounds of all-to-all traffic sharing the NICs: the case the batched event loop is built for."""
    from autotaccl.baselines import baseline
    graph = ring4(nodes=2)
    algorithm = baseline(graph, "alltoall", "direct")
    size = 32 << 20
    chunk = algorithm.collective.chunk_bytes(size)
    k = rounds(chunk)
    assert k == 4
    plan = _plan(algorithm, graph)
    nbytes = [c * chunk / k for c in plan.chunks]
    assert simulate(algorithm, graph, size).time_us == pytest.approx(LAUNCH + brute_force(plan, nbytes, k), rel=1e-9)


def test_ll_across_nodes_has_the_nccl_models_channel_ceiling_on_the_network():
    a100 = load_hardware("dgx-a100")            # host CPU AMD: LL across 2 nodes at 22.5 of NCCL's 87.7 GB/s
    one, two = build_topology(a100, 1), build_topology(a100, 2)
    inside = a100.protocols["LL"].channel_GBps
    assert protocol_terms(one, "LL").ceilings == (inside, inside)
    assert protocol_terms(two, "LL").ceilings == pytest.approx((inside, inside * 22.5 / 87.7))
    assert protocol_terms(two, "Simple") == a100.protocols["Simple"]


def test_lls_network_ceiling_binds_only_the_transfers_that_cross_the_network():
    """On two DGX A100 nodes one LL thread block moves at most 3.65 GB/s to a GPU of its own node (as on one
    node) and 22.5/24 GB/s to the other node; estimate's connection term says the same."""
    graph = build_topology(load_hardware("dgx-a100"), 2)
    size = 16 << 20                             # 1 MiB chunks: each one a round, far above the latency
    inside, across = (algo("alltoall", 16, [((c,), 0, dst, 0)]) for c, dst in ((1, 1), (8, 8)))
    (t_inside,), (t_across,) = (transfer_times(a, graph, size, "LL") for a in (inside, across))
    ceilings = protocol_terms(graph, "LL").ceilings
    chunk = inside.collective.chunk_bytes(size)
    assert t_inside - chunk / (ceilings[0] * 1e3) == pytest.approx(0.7, abs=0.01)   # NVSwitch alpha
    assert t_across - chunk / (ceilings[1] * 1e3) == pytest.approx(0.25 + 2.6 + 0.25, abs=0.01)
    assert t_across > 3 * t_inside
    assert estimate(inside, graph, size, "LL") < estimate(across, graph, size, "LL") / 3


def test_the_dependency_cache_keeps_the_latest_lists_up_to_its_transfer_limit():
    """Simulating one algorithm again reuses its dependencies; a list that would take the cache past its
    limit pushes the oldest ones out (each entry holds its whole list alive), and the latest list stays
    even when it alone is over the limit."""
    from autotaccl.simulate import _RecentDependencies

    def chain(n: int, chunk: int) -> tuple[Transfer, ...]:
        return tuple(Transfer((chunk,), r, r + 1, r) for r in range(n))

    cache = _RecentDependencies(10)
    a, b, big = chain(4, 0), chain(5, 1), chain(12, 2)
    first = cache(a)
    assert first == ((), (0,), (1,), (2,))
    cache(b)
    assert cache(a) is first                # computed once
    assert list(cache.entries) == [b, a]
    cache(chain(3, 3))                  # 12 transfers: the oldest (b) goes
    assert list(cache.entries) == [a, chain(3, 3)]
    cache(big)
    assert list(cache.entries) == [big]
