"""In-place aliasing: one rule, read the same way by the mpi runner's buffers and the XML's cells."""
from __future__ import annotations

import pytest

from autotaccl.formats.msccl.program import inplace_cell
from autotaccl.model.buffers import InPlace, inplace_layout
from autotaccl.model.collectives import NAMES, Collective
from runners.program import placement


def test_nccl_tests_aliasing():
    assert inplace_layout("allgather", 3, 2) == InPlace("output", 6, 0)        # sendbuff = recvbuff + rank*count
    assert inplace_layout("reducescatter", 3, 2) == InPlace("input", 0, 6)     # recvbuff = sendbuff + rank*count
    for name in ("allreduce", "alltoall", "broadcast"):
        assert inplace_layout(name, 3, 2) == InPlace("input", 0, 0)


@pytest.mark.parametrize("name", NAMES)
def test_runner_buffers_and_xml_cells_alias_the_same_chunks(name):
    coll = Collective(name, 4, 2)
    for rank in range(coll.ranks):
        buffers, inputs, outputs = placement(coll, rank, inplace=True)
        assert list(buffers) == ["out"]            # the runner allocates one buffer in place
        held = {}                                   # XML cell -> the runner's slot for it
        for c in range(coll.num_chunks):
            for buf, index, where in (("i", coll.input_index(rank, c), inputs),
                                      ("o", coll.output_index(rank, c), outputs)):
                if index is None:
                    continue
                cell = inplace_cell(name, coll.chunkup, rank, buf, index)
                assert held.setdefault(cell, where[c]) == where[c], (rank, c, buf)
                assert 0 <= where[c][1] < buffers["out"]
        # distinct XML cells are distinct slots of the runner's buffer, and the other way round
        assert len(set(held.values())) == len(held)
