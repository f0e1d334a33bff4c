"""Deterministic test data, expected results and the wrong-element count of a check iteration.

Every input element is a small positive integer that depends on the contributing rank, the chunk and
the element, so sums, products, maxima and minima are exact in every supported type and a chunk in
the wrong place, a missing one or one reduced twice all show up as wrong elements. Slots nothing
should have written hold a sentinel (NaN, or -1 for integers).
"""
from __future__ import annotations

from functools import reduce
from typing import Mapping

import numpy as np

from autotaccl.model.collectives import Collective

from runners.program import Slot
from runners.results import DTYPES

UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def numpy_dtype(dtype: str) -> np.dtype:
    return np.dtype(DTYPES[dtype][1])


def values(rank: int, chunk: int, elems: int, dtype: str, op: str) -> np.ndarray:
    """Rank ``rank``'s input for ``chunk``: integers in 1..13 (1..2 for products, so they stay exact)."""
    period = 2 if op == "prod" else 13
    one = (1 + (rank * 131 + chunk * 17 + np.arange(period)) % period).astype(numpy_dtype(dtype))
    out = np.empty(elems, one.dtype)             # the period repeated: no index array as large as the data
    whole = elems - elems % period
    out[:whole].reshape(-1, period)[:] = one
    out[whole:] = one[:elems - whole]
    return out


def sentinel(dtype: str):
    return np.nan if np.issubdtype(numpy_dtype(dtype), np.floating) else -1


def allocate(buffers: Mapping[str, int], elems: int, dtype: str) -> dict[str, np.ndarray]:
    """One ``(chunks, elems)`` array per buffer."""
    return {name: np.empty((n, elems), numpy_dtype(dtype)) for name, n in buffers.items()}


def fill(arrays: Mapping[str, np.ndarray], inputs: Mapping[int, Slot], rank: int, dtype: str, op: str) -> None:
    """Fresh inputs in their slots, the sentinel everywhere else."""
    for array in arrays.values():
        array.fill(sentinel(dtype))
    for chunk, (buf, i) in inputs.items():
        arrays[buf][i] = values(rank, chunk, arrays[buf].shape[1], dtype, op)


def expected(collective: Collective, chunk: int, elems: int, dtype: str, op: str) -> np.ndarray:
    """What the chunk must hold at the end, wherever the postcondition wants it."""
    sources = sorted(collective.precondition(chunk))
    if not collective.is_reduction:
        return values(sources[0], chunk, elems, dtype, op)
    return reduce(UFUNCS[op], (values(q, chunk, elems, dtype, op) for q in sources))


def count_wrong(arrays: Mapping[str, np.ndarray], outputs: Mapping[int, Slot], collective: Collective,
                dtype: str, op: str) -> int:
    """Output elements of this rank that differ from the expected result (NaN never matches)."""
    wrong = 0
    for chunk, (buf, i) in outputs.items():
        got = arrays[buf][i]
        wrong += int(np.count_nonzero(got != expected(collective, chunk, got.shape[0], dtype, op)))
    return wrong
