"""Collectives: who starts with which chunk, who must end with it, where it sits, and nccl-tests sizes."""
from __future__ import annotations

import pytest

from autotaccl.errors import InputError
from autotaccl.model.collectives import NAMES, Collective, canonical_name, make_collective

R = 4


def everyone(n: int = R) -> frozenset[int]:
    return frozenset(range(n))


def test_allgather_chunks():
    c = Collective("allgather", R, 2)
    assert c.num_chunks == 8 and not c.is_reduction
    assert [c.precondition(x) for x in range(8)] == [frozenset({x // 2}) for x in range(8)]
    assert all(c.postcondition(x) == everyone() for x in range(8))
    assert (c.input_chunks(1), c.output_chunks(1)) == (2, 8)
    assert c.input_index(1, 3) == 1 and c.input_index(1, 2) == 0 and c.input_index(0, 3) is None
    assert [c.output_index(3, x) for x in range(8)] == list(range(8))


def test_reducescatter_chunks():
    c = Collective("reducescatter", R, 2)
    assert c.num_chunks == 8 and c.is_reduction
    assert all(c.precondition(x) == everyone() for x in range(8))
    assert [c.postcondition(x) for x in range(8)] == [frozenset({x // 2}) for x in range(8)]
    assert (c.input_chunks(0), c.output_chunks(0)) == (8, 2)
    assert [c.input_index(2, x) for x in range(8)] == list(range(8))
    assert c.output_index(2, 5) == 1 and c.output_index(2, 4) == 0 and c.output_index(1, 5) is None


def test_allreduce_chunks():
    c = Collective("allreduce", R)
    assert c.num_chunks == R and c.is_reduction
    assert all(c.precondition(x) == c.postcondition(x) == everyone() for x in range(R))
    assert c.input_chunks(0) == c.output_chunks(0) == R
    assert c.input_index(3, 2) == c.output_index(3, 2) == 2


def test_alltoall_chunks():
    c = Collective("alltoall", 3, 2)
    assert c.num_chunks == 18 and not c.is_reduction
    # chunk (s*R + d)*k + i goes from s to d; on s it sits at d*k + i, on d at s*k + i
    for s in range(3):
        for d in range(3):
            for i in range(2):
                x = (s * 3 + d) * 2 + i
                assert c.precondition(x) == frozenset({s}) and c.postcondition(x) == frozenset({d})
                assert c.input_index(s, x) == d * 2 + i and c.output_index(d, x) == s * 2 + i
                assert c.input_index((s + 1) % 3, x) is None and c.output_index((d + 1) % 3, x) is None
    assert c.input_chunks(0) == c.output_chunks(0) == 6


def test_broadcast_chunks():
    c = Collective("broadcast", R, 3, root=2)
    assert c.num_chunks == 3
    assert all(c.precondition(x) == frozenset({2}) and c.postcondition(x) == everyone() for x in range(3))
    assert c.input_index(2, 1) == 1 and c.input_index(0, 1) is None
    assert c.input_chunks(0) == c.output_chunks(0) == 3


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("chunkup", [1, 3])
def test_buffer_indices_are_a_permutation_of_each_buffer(name, chunkup):
    c = Collective(name, R, chunkup)
    for rank in range(R):
        ins = [c.input_index(rank, x) for x in range(c.num_chunks) if c.input_index(rank, x) is not None]
        outs = [c.output_index(rank, x) for x in range(c.num_chunks) if c.output_index(rank, x) is not None]
        if name == "broadcast" and rank != c.root:
            assert ins == []
        else:
            assert sorted(ins) == list(range(c.input_chunks(rank)))
        assert sorted(outs) == list(range(c.output_chunks(rank)))


@pytest.mark.parametrize("name, size, chunk", [
    ("allgather", 1 << 20, (1 << 20) / 8),        # size = whole output; 8 chunks of it
    ("reducescatter", 1 << 20, (1 << 20) / 8),    # size = whole input
    ("allreduce", 1 << 20, (1 << 20) / 8),        # size = one rank's buffer, 8 slots
    ("alltoall", 1 << 20, (1 << 20) / 8),         # size = one rank's send buffer, R pieces
    ("broadcast", 1 << 20, (1 << 20) / 2),        # chunkup 2: two pieces of the buffer
])
def test_chunk_bytes(name, size, chunk):
    c = Collective(name, 4, 2)
    assert c.chunk_bytes(size) == chunk


def test_busbw_factors_follow_nccl_tests():
    assert Collective("allreduce", 8).busbw_factor == pytest.approx(2 * 7 / 8)
    for name in ("allgather", "reducescatter", "alltoall"):
        assert Collective(name, 16).busbw_factor == pytest.approx(15 / 16)
    assert Collective("broadcast", 8).busbw_factor == 1.0


def test_with_chunkup_keeps_everything_else():
    c = Collective("broadcast", 8, 1, root=5).with_chunkup(4)
    assert (c.name, c.ranks, c.chunkup, c.root) == ("broadcast", 8, 4, 5)


@pytest.mark.parametrize("alias, name", [("AllGather", "allgather"), ("all_reduce", "allreduce"), ("rs", "reducescatter"),
                                         ("A2A", "alltoall"), ("bcast", "broadcast"), (" all-to-all ", "alltoall")])
def test_aliases(alias, name):
    assert canonical_name(alias) == name
    assert make_collective(alias, 4).name == name


def test_unknown_collective_is_input_error():
    with pytest.raises(InputError) as err:
        make_collective("allscatter", 4)
    assert err.value.parameter == "collective" and "allgather" in err.value.expected


@pytest.mark.parametrize("args", [("allgather", 1), ("allgather", 4, 0), ("broadcast", 4, 1, 4), ("gather", 4)])
def test_invalid_collectives(args):
    with pytest.raises(ValueError):
        Collective(*args)
