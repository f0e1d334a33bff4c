"""In-place calls: how a rank's input and output share one buffer (nccl-tests' aliasing, msccl §1.6).

Out of place, a rank's input and output are two buffers. In place, one buffer holds both: AllGather's
input is the rank's own block of the output, ReduceScatter's output is the rank's own block of the
input, and every other collective's input and output coincide. The mpi runner allocates its buffers
by this rule and the XML lowering and checker alias the XML's ``i`` and ``o`` buffers by it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class InPlace:
    """One rank's in-place buffer: ``holder`` ("input" or "output") is the buffer that contains the other;
    the input starts at chunk ``input_offset`` of it and the output at ``output_offset``."""
    holder: str
    input_offset: int
    output_offset: int


@lru_cache(maxsize=4096)      # the lowering asks once per cell it touches
def inplace_layout(collective: str, per_rank: int, rank: int) -> InPlace:
    """The in-place aliasing of ``rank`` for ``collective``, ``per_rank`` chunks being one rank's block."""
    if collective == "allgather":
        return InPlace("output", rank * per_rank, 0)
    if collective == "reducescatter":
        return InPlace("input", 0, rank * per_rank)
    return InPlace("input", 0, 0)
