"""The ranks' input values (runners/data.py): what every rank and the check compute alike, without an
index array as large as the buffer (a 4G float32 buffer used to need 8G more for its indices)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from runners.data import values


@pytest.mark.parametrize("rank, chunk, elems, op", [(0, 0, 100, "sum"), (3, 5, 1000, "prod"), (2, 7, 13, "max"),
                                                     (1, 2, 0, "sum")])
def test_values_repeat_a_period_from_the_rank_and_chunk(rank, chunk, elems, op):
    period = 2 if op == "prod" else 13
    got = values(rank, chunk, elems, "float32", op)
    assert got.dtype == np.float32 and got.shape == (elems,)
    assert [int(v) for v in got] == [1 + (rank * 131 + chunk * 17 + j) % period for j in range(elems)]


def test_values_allocate_little_more_than_their_result():
    elems = 1 << 22                                   # 16 MiB of float32
    tracemalloc.start()
    try:
        result = values(1, 3, elems, "float32", "sum")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.nbytes == 4 * elems and peak < 1.1 * result.nbytes, peak
