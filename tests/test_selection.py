"""Keeping the fastest candidate: simulated times, margins, handicaps and ties, on NDv2 baselines."""
from __future__ import annotations

import pytest

from autotaccl.baselines import applicable_baselines, baseline, best_baseline
from autotaccl.bounds import bound_time_us, bounds
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.selection import Candidate, attainable_us, fastest, share_of_bound
from autotaccl.simulate import protocol_terms, simulate

SIZE = 1 << 20


@pytest.fixture(scope="module")
def ndv2():
    return build_topology(load_hardware("ndv2"), 1)


@pytest.fixture(scope="module")
def pair(ndv2):
    """(slower, faster) AllGathers at SIZE, with their simulated times."""
    ring, direct = baseline(ndv2, "allgather", "ring"), baseline(ndv2, "allgather", "direct")
    times = {a.name: simulate(a, ndv2, SIZE).time_us for a in (ring, direct)}
    slow, fast = sorted((ring, direct), key=lambda a: times[a.name], reverse=True)
    assert times[slow.name] > times[fast.name] * 1.1
    return slow, fast, times[slow.name], times[fast.name]


def test_the_fastest_wins_and_every_timing_is_reported(ndv2, pair):
    slow, fast, t_slow, t_fast = pair
    best, timings = fastest([Candidate(slow, "slow"), Candidate(fast, "fast")], ndv2, SIZE)
    assert best.candidate.algorithm is fast and best.time_us == pytest.approx(t_fast)
    assert [(t.candidate.label, t.time_us) for t in timings] == [("slow", t_slow), ("fast", t_fast)]


def test_ties_keep_the_earlier_candidate(ndv2, pair):
    slow, fast, _, _ = pair
    best, _ = fastest([Candidate(fast, "first"), Candidate(fast, "second")], ndv2, SIZE)
    assert best.candidate.label == "first"


def test_a_margin_keeps_the_earlier_unless_the_later_is_faster_by_it(ndv2, pair):
    slow, fast, t_slow, t_fast = pair
    gain = 1 - t_fast / t_slow
    for margin, winner in ((gain * 0.9, "fast"), (gain * 1.1, "slow")):
        best, _ = fastest([Candidate(slow, "slow"), Candidate(fast, "fast")], ndv2, SIZE, margin=margin)
        assert best.candidate.label == winner, margin
    best, _ = fastest([Candidate(slow, "slow"), Candidate(fast, "fast")], ndv2, SIZE, margin_us=t_slow - t_fast + 1e-6)
    assert best.candidate.label == "slow"


def test_a_handicap_makes_a_candidate_win_only_by_that_much(ndv2, pair):
    slow, fast, t_slow, t_fast = pair
    handicap = t_slow / t_fast - 1
    for h, winner in ((handicap * 0.9, "fast"), (handicap * 1.1, "slow")):
        best, _ = fastest([Candidate(slow, "slow"), Candidate(fast, "fast", h)], ndv2, SIZE)
        assert best.candidate.label == winner, h
        assert best.time_us == pytest.approx(t_fast if winner == "fast" else t_slow)   # times stay unweighted


def test_no_candidate_no_choice(ndv2):
    assert fastest([], ndv2, SIZE) == (None, [])


def test_best_baseline_is_the_fastest_baseline(ndv2):
    name, algorithm, result = best_baseline(ndv2, "allgather", SIZE)
    assert result.time_us == simulate(algorithm, ndv2, SIZE).time_us
    for other in ("ring", "direct"):
        assert result.time_us <= simulate(baseline(ndv2, "allgather", other), ndv2, SIZE).time_us
    assert algorithm.name.startswith(f"{name}-")


@pytest.mark.parametrize("name", ["ring", "direct"])
def test_no_baseline_beats_the_attainable_bound(ndv2, name):
    """attainable_us is a lower bound on what the simulator gives; ring AllGather on NDv2 comes close at 1 GiB."""
    algorithm = baseline(ndv2, "allgather", name)
    for size in (1 << 10, SIZE, 1 << 30):
        share = share_of_bound(algorithm, ndv2, size)
        assert 0 < share <= 1 + 1e-9
        assert attainable_us(ndv2, "allgather", size) == pytest.approx(share * simulate(algorithm, ndv2, size).time_us)
    # the launch and the protocol's efficiency are in it: above the raw bound at every size
    assert attainable_us(ndv2, "allgather", 1 << 30) > bound_time_us(bounds(ndv2, "allgather"), 1 << 30)


def test_a_candidate_whose_floor_cannot_win_is_not_simulated(ndv2, pair):
    slow, fast, _, t_fast = pair
    best, timings = fastest([Candidate(fast, "fast"), Candidate(slow, "slow", handicap=10.0)], ndv2, SIZE)
    assert best.candidate.label == "fast"
    assert timings[1].result is None and timings[1].floor_us >= t_fast
    _, unpruned = fastest([Candidate(fast, "fast"), Candidate(slow, "slow", handicap=10.0)], ndv2, SIZE, prune=False)
    assert unpruned[1].result is not None and unpruned[1].floor_us is None


@pytest.mark.parametrize("size", [1 << 10, SIZE, pytest.param(1 << 30, marks=pytest.mark.slow)])
def test_pruning_keeps_the_greedy_engines_choice(size):
    from autotaccl.sketch import default_sketch
    from autotaccl.sketch.logical import logical_topology
    from autotaccl.synth.greedy.select import candidates

    graph = build_topology(load_hardware("ndv2"), 2)
    lt = logical_topology(graph, "allgather", default_sketch(graph, "allgather"), size)
    pool = list(candidates(lt))
    pruned, timings = fastest(pool, graph, size)
    full, _ = fastest(pool, graph, size, prune=False)
    assert pruned.candidate.label == full.candidate.label and pruned.time_us == full.time_us
    assert any(t.floor_us is not None for t in timings)


def test_a_good_enough_best_ends_the_search_before_the_next_candidate_is_built(ndv2, pair):
    slow, fast, _, t_fast = pair

    def pool():
        yield Candidate(fast, "fast")
        raise AssertionError("built although the best was good enough")

    best, timings = fastest(pool(), ndv2, SIZE, enough_us=t_fast)
    assert best.candidate.label == "fast" and len(timings) == 1
    with pytest.raises(AssertionError, match="good enough"):
        fastest(pool(), ndv2, SIZE, enough_us=t_fast * 0.99)


@pytest.mark.parametrize("profile", ["ndv2", "dgx-a100"])
def test_the_attainable_bound_counts_each_protocols_hop_latency_and_no_baseline_beats_it(profile):
    """Across two nodes every output waits for a network transfer, which pays the protocol's per-step
    term too: at 1 KiB the attainable time is the launch plus that hop, and every baseline is above it."""
    g = build_topology(load_hardware(profile), 2)
    farthest = bounds(g, "allgather").latency_us
    for protocol in ("LL", "LL128", "Simple"):
        proto = protocol_terms(g, protocol)
        assert attainable_us(g, "allgather", 1 << 10, protocol) == pytest.approx(
            proto.launch_us + farthest + proto.net_hop_us)
        for name in applicable_baselines(g, "allgather"):
            for size in (1 << 10, 1 << 20):
                algorithm = baseline(g, "allgather", name)
                assert simulate(algorithm, g, size, protocol).time_us >= attainable_us(g, "allgather", size, protocol)


def test_a_candidate_the_runtime_refuses_is_never_the_best_and_says_why(ndv2, pair):
    """``admit`` stands for a runtime's lowering: the faster candidate it refuses is timed and its reason
    kept, the slower one it loads wins; a refused candidate that would not have won is never asked about."""
    slow, fast, t_slow, t_fast = pair
    asked = []

    def admit(algorithm):
        asked.append(algorithm.name)
        return "too many XML nodes" if algorithm is fast else None

    best, timings = fastest([Candidate(slow, "slow"), Candidate(fast, "fast")], ndv2, SIZE, admit=admit)
    assert best.candidate.label == "slow" and best.time_us == pytest.approx(t_slow)
    assert [(t.candidate.label, t.refused) for t in timings] == [("slow", None), ("fast", "too many XML nodes")]
    assert timings[1].time_us == pytest.approx(t_fast)
    asked.clear()
    best, _ = fastest([Candidate(fast, "fast"), Candidate(fast, "again")], ndv2, SIZE, admit=lambda a: None)
    assert best.candidate.label == "fast"
    best, timings = fastest([Candidate(fast, "fast")], ndv2, SIZE, admit=admit)
    assert best is None and timings[0].refused == "too many XML nodes"
