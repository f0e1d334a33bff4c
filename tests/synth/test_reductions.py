"""Reduction collectives from AllGathers: the reversed AllGather is a ReduceScatter, then the AllGather."""
from __future__ import annotations

import pytest

from autotaccl.model.algorithm import Algorithm, Transfer, verify
from autotaccl.model.collectives import Collective
from autotaccl.synth.reductions import by_readiness, reverse_gather, sequence


def chain_allgather() -> tuple[list[Transfer], list[float]]:
    """3 ranks in a line 0-1-2: every chunk travels to both ends (copy times 1 µs each), with ends."""
    ts = [Transfer((0,), 0, 1, 0, start_us=0.0), Transfer((2,), 2, 1, 0, start_us=0.0),
          Transfer((1,), 1, 0, 1, start_us=1.0), Transfer((1,), 1, 2, 1, start_us=1.0),
          Transfer((0,), 1, 2, 1, start_us=2.0), Transfer((2,), 1, 0, 2, start_us=2.0)]
    return ts, [t.start_us + 1.0 for t in ts]


def test_the_reversed_allgather_is_a_reduce_scatter():
    ts, ends = chain_allgather()
    verify(Algorithm("ag", Collective("allgather", 3), tuple(ts)))
    rs = reverse_gather(ts, ends)
    # the last copy first, every copy u -> v a reduce v -> u, its start mirrored at the makespan (3 µs)
    assert [(t.src, t.dst, t.chunks, t.op, t.start_us) for t in rs] == [
        (0, 1, (2,), "reduce", 0.0), (2, 1, (0,), "reduce", 0.0), (2, 1, (1,), "reduce", 1.0),
        (0, 1, (1,), "reduce", 1.0), (1, 2, (2,), "reduce", 2.0), (1, 0, (0,), "reduce", 2.0)]
    verify(Algorithm("rs", Collective("reducescatter", 3), tuple(rs)))


def test_reduce_scatter_then_allgather_is_an_allreduce():
    ts, ends = chain_allgather()
    rs = reverse_gather(ts, ends)
    rs = [Transfer(t.chunks, t.src, t.dst, s, t.op, t.link, t.start_us) for t, s in zip(rs, (0, 0, 1, 1, 2, 2))]
    ar = sequence(rs, ts, shift=3.0)
    assert [t.step for t in ar] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5]        # after the ReduceScatter's steps
    assert [t.start_us for t in ar[6:]] == [3.0, 3.0, 4.0, 4.0, 5.0, 5.0]
    verify(Algorithm("ar", Collective("allreduce", 3), ar))


def test_sequence_keeps_unplanned_transfers_unplanned():
    first = [Transfer((0,), 0, 1, 2)]
    second = [Transfer((0,), 1, 0, 0), Transfer((1,), 1, 0, 4, start_us=1.5)]
    out = sequence(first, second, shift=10.0)
    assert [(t.step, t.start_us) for t in out] == [(0, None), (1, None), (2, 11.5)]   # steps renumbered, no gaps


def rotated_reduce_scatter() -> list[Transfer]:
    """4 ranks; the sum for rank ``c`` comes from a chain ``c+3 -> c+2 -> c`` and a leaf ``c+1 -> c``,
    listed chain first: the chain's arrival at ``c`` (ready after one hop) ahead of the leaf's (ready at once)."""
    out = []
    for c in range(4):
        r = [(c + k) % 4 for k in range(4)]
        out += [Transfer((c,), r[3], r[2], 0, "reduce"), Transfer((c,), r[2], r[0], 0, "reduce"),
                Transfer((c,), r[1], r[0], 0, "reduce")]
    return out


def test_by_readiness_lands_the_early_source_first_and_keeps_a_valid_reduce_scatter():
    ts = rotated_reduce_scatter()
    out = by_readiness(ts, [1.0] * len(ts))
    assert sorted(out, key=repr) == sorted(ts, key=repr)
    for c in range(4):
        into_c = [(t.src - c) % 4 for t in out if t.dst == c and t.chunks == (c,)]
        assert into_c == [1, 2]             # the leaf (ready at 0) before the chain (ready at 1)
    # listed by planned start: every chain's first hop and every leaf at 0, then the arrivals at 1
    assert [((t.src - t.chunks[0]) % 4, (t.dst - t.chunks[0]) % 4) for t in out] == [(3, 2), (1, 0)] * 4 + [(2, 0)] * 4
    verify(Algorithm("rs", Collective("reducescatter", 4), tuple(out)))


@pytest.mark.parametrize("slow_feed, first", [(1, 3), (3, 1)])
def test_by_readiness_weighs_the_sources_by_their_times(slow_feed, first):
    """5 ranks; rank c's sum gets two fed sources, c+2 -> c+1 -> c and c+4 -> c+3 -> c: the one whose
    feed takes 3 µs (the other 1 µs) lands second."""
    ts, times = [], []
    for c in range(5):
        r = [(c + k) % 5 for k in range(5)]
        ts += [Transfer((c,), r[2], r[1], 0, "reduce"), Transfer((c,), r[4], r[3], 0, "reduce"),
               Transfer((c,), r[1], r[0], 0, "reduce"), Transfer((c,), r[3], r[0], 0, "reduce")]
        times += [3.0 if slow_feed == 1 else 1.0, 3.0 if slow_feed == 3 else 1.0, 1.0, 1.0]
    out = by_readiness(ts, times)
    assert [(t.src - t.chunks[0]) % 5 for t in out if t.dst == t.chunks[0]] == [first] * 5 + [4 - first] * 5
    verify(Algorithm("rs", Collective("reducescatter", 5), tuple(out)))


def test_by_readiness_moves_an_allreduces_copies_after_its_reduces_and_refuses_other_lists():
    ts = rotated_reduce_scatter()
    gather = [Transfer((c,), (c + a) % 4, (c + b) % 4, 0) for c in range(4) for a, b in ((0, 1), (0, 2), (2, 3))]
    interleaved = ts[:3] + gather[:3] + ts[3:] + gather[3:]     # chunk 0 gathered before the others reduce
    verify(Algorithm("ar", Collective("allreduce", 4), tuple(interleaved)))
    out = by_readiness(interleaved, [1.0] * 24)
    assert [t.op for t in out] == ["reduce"] * 12 + ["copy"] * 12
    verify(Algorithm("ar", Collective("allreduce", 4), tuple(out)))
    with pytest.raises(ValueError, match="ahead of the copies"):      # rank 1's chunk 0 read, then reduced into
        by_readiness([Transfer((0,), 1, 2, 0)] + ts, [1.0] * 13)
    with pytest.raises(ValueError, match="ahead of the copies"):      # rank 2's chunk 1 written, then reduced
        by_readiness([Transfer((1,), 3, 2, 0)] + ts, [1.0] * 13)
    with pytest.raises(ValueError, match="one chunk each"):
        by_readiness([Transfer((0, 1), 1, 0, 0, "reduce")], [1.0])
