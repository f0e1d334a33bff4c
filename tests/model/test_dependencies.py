"""Dependency analysis: conflicts on memory cells in program order, on hand-made transfer lists and slots."""
from __future__ import annotations

import random

from autotaccl.formats.msccl.program import inplace_cell
from autotaccl.model.algorithm import Transfer
from autotaccl.model.dependencies import conflicts, transfer_cells, transfer_dependencies


def copy(chunk: int, src: int, dst: int) -> Transfer:
    return Transfer((chunk,), src, dst, 0)


def reduce(chunk: int, src: int, dst: int) -> Transfer:
    return Transfer((chunk,), src, dst, 0, "reduce")


def test_read_after_write():
    # rank 1 forwards chunk 0 only after it arrived; chunk 1 moving elsewhere waits for nothing
    assert transfer_dependencies([copy(0, 0, 1), copy(1, 2, 3), copy(0, 1, 2)]) == ((), (), (0,))


def test_write_after_write():
    assert transfer_dependencies([copy(0, 0, 2), copy(0, 1, 2)]) == ((), (0,))


def test_write_after_read_waits_for_every_reader_since_the_last_write():
    # ranks 2 and 3 read rank 1's chunk 0, then rank 4 overwrites it: the overwrite waits for both reads
    # (and for the write they read, write after write)
    assert transfer_dependencies([copy(0, 0, 1), copy(0, 1, 2), copy(0, 1, 3), copy(0, 4, 1)]) == \
        ((), (0,), (0,), (0, 1, 2))


def test_readers_before_a_write_are_not_waited_for_again():
    # the read (1) is ordered before the first overwrite (2); the second overwrite (3) follows (2) only
    assert transfer_dependencies([copy(0, 0, 1), copy(0, 1, 2), copy(0, 3, 1), copy(0, 4, 1)]) == \
        ((), (0,), (0, 1), (2,))


def test_a_reduce_reads_its_destination():
    # a reduce into rank 1 waits for the value there (read after write) and for the value it sends
    ts = [copy(0, 0, 1), copy(0, 2, 3), reduce(0, 3, 1)]
    assert transfer_dependencies(ts) == ((), (), (0, 1))
    # a later copy out of rank 1 reads the reduced value; one into rank 3 overwrites what the reduce read
    assert transfer_dependencies(ts + [copy(0, 1, 4), copy(0, 5, 3)])[3:] == ((2,), (1, 2))
    assert transfer_cells(reduce(5, 3, 1)) == ([(3, 5), (1, 5)], [(1, 5)])


def test_multi_chunk_transfers_conflict_per_chunk():
    ts = [Transfer((0, 1), 0, 1, 0), Transfer((1, 2), 1, 2, 0), Transfer((2,), 3, 1, 0)]
    # transfer 1 read rank 1's own chunk 2 (not chunk 0): overwriting that waits for it, nothing else does
    assert transfer_dependencies(ts) == ((), (0,), (1,))


def test_without_write_after_read():
    ts = [copy(0, 0, 1), copy(0, 1, 2), copy(0, 3, 1)]
    assert transfer_dependencies(ts) == ((), (0,), (0, 1))
    assert transfer_dependencies(ts, war=False) == ((), (0,), (0,))


def test_in_place_aliasing_makes_two_buffers_one_cell():
    # in-place AllGather (one chunk per rank): rank 1's input i[0] is its output o[1]
    def cell(buf: str, off: int, inplace: bool) -> tuple:
        return (1,) + (inplace_cell("allgather", 1, 1, buf, off) if inplace else (buf, off))

    for inplace, expected in ((False, ((), ())), (True, ((), (0,)))):
        send_input = ([cell("i", 0, inplace)], [])
        receive_into_output = ([], [cell("o", 1, inplace)])
        assert conflicts([send_input, receive_into_output]) == expected
    # ReduceScatter is the other way round: rank 1's output o[0] is its input i[1]
    assert inplace_cell("reducescatter", 1, 1, "o", 0) == inplace_cell("reducescatter", 1, 1, "i", 1) == ("i", 1)


def brute_force(accesses):
    """The rule as stated: j < i conflicts with i when j is the last writer before i of a cell i reads or
    writes, or j reads a cell i writes and nobody writes it in between."""
    out = []
    for i, (reads_i, writes_i) in enumerate(accesses):
        deps = set()
        for cell in set(reads_i) | set(writes_i):
            writers = [j for j in range(i) if cell in accesses[j][1]]
            if writers:
                deps.add(writers[-1])
        for cell in writes_i:
            since = max((j for j in range(i) if cell in accesses[j][1]), default=-1)
            deps.update(j for j in range(since + 1, i) if cell in accesses[j][0])
        out.append(tuple(sorted(deps)))
    return tuple(out)


def test_conflicts_match_the_rule_on_random_programs():
    rng = random.Random(7)
    for _ in range(300):
        cells = [(rng.randrange(3), rng.randrange(3)) for _ in range(6)]
        accesses = [(rng.sample(cells, rng.randrange(3)), rng.sample(cells, rng.randrange(3)))
                    for _ in range(rng.randrange(1, 12))]
        assert conflicts(accesses) == brute_force(accesses), accesses
