"""Reduction collectives from AllGathers: the reversed AllGather is a ReduceScatter, then the AllGather."""
from __future__ import annotations

from autotaccl.model.algorithm import Algorithm, Transfer, verify
from autotaccl.model.collectives import Collective
from autotaccl.synth.reductions import reverse_gather, sequence


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
