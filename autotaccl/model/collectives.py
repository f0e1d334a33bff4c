"""What each collective must achieve, in chunks: who starts with what, who must end with what.

With chunk-up ``k`` and ``R`` ranks: AllGather, ReduceScatter and AllReduce have ``R*k`` chunks (chunk
``c`` belongs to rank ``c // k``), AllToAll ``R*R*k`` (chunk ``(s*R + d)*k + i`` goes from ``s`` to
``d``), Broadcast ``k`` from the root. Sizes follow nccl-tests (``msccl-xml-and-nccl-tests.md`` §5.4):
an AllGather's is its output, a ReduceScatter's its input, the others' one rank's buffer."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal, get_args

from ..errors import InputError, ParameterError

CollectiveName = Literal["allgather", "reducescatter", "allreduce", "alltoall", "broadcast"]
NAMES: tuple[CollectiveName, ...] = get_args(CollectiveName)
MAX_CHUNKS = 1 << 22     # every consumer keeps per-chunk state: more is refused, not swapped
_ALIASES = {"allgather": "allgather", "all_gather": "allgather", "all-gather": "allgather", "ag": "allgather",
            "reducescatter": "reducescatter", "reduce_scatter": "reducescatter", "reduce-scatter": "reducescatter",
            "rs": "reducescatter", "allreduce": "allreduce", "all_reduce": "allreduce", "all-reduce": "allreduce",
            "ar": "allreduce", "alltoall": "alltoall", "all_to_all": "alltoall", "all-to-all": "alltoall",
            "a2a": "alltoall", "broadcast": "broadcast", "bcast": "broadcast"}


def canonical_name(name: str, source: str | None = None) -> CollectiveName:
    """``"AllGather"``, ``"all_gather"``, ``"ag"`` -> ``"allgather"``; an unknown name is bad input from
    ``source`` (a file and field), or a bad ``collective`` argument without one."""
    key = str(name).strip().lower()
    if key not in _ALIASES:
        expected = f"one of: {', '.join(NAMES)}"
        raise ParameterError("collective", repr(name), expected) if source is None else \
            InputError(source, repr(name), expected)
    return _ALIASES[key]


@dataclass(frozen=True)
class Collective:
    name: str
    ranks: int
    chunkup: int = 1
    root: int = 0

    def __post_init__(self) -> None:
        if self.name not in NAMES:
            raise ValueError(f"unknown collective {self.name!r}")
        if self.ranks < 2 or self.chunkup < 1 or not 0 <= self.root < self.ranks:
            raise ValueError(f"invalid collective {self}")

    # ------------------------------------------------------------------ chunks
    @property
    def is_reduction(self) -> bool:
        return self.name in ("reducescatter", "allreduce")

    @property
    def num_chunks(self) -> int:
        per_rank = self.ranks * self.chunkup
        return {"alltoall": self.ranks * per_rank, "broadcast": self.chunkup}.get(self.name, per_rank)

    @cached_property
    def _everyone(self) -> frozenset[int]:
        return frozenset(range(self.ranks))

    def precondition(self, chunk: int) -> frozenset[int]:
        """Ranks that hold chunk ``chunk`` (or, for reductions, a contribution to it) at the start."""
        if self.name == "allgather":
            return frozenset((chunk // self.chunkup,))
        if self.name == "alltoall":
            return frozenset((chunk // self.chunkup // self.ranks,))
        if self.name == "broadcast":
            return frozenset((self.root,))
        return self._everyone

    def postcondition(self, chunk: int) -> frozenset[int]:
        """Ranks that must hold chunk ``chunk`` (fully reduced, for reductions) at the end."""
        if self.name == "reducescatter":
            return frozenset((chunk // self.chunkup,))
        if self.name == "alltoall":
            return frozenset((chunk // self.chunkup % self.ranks,))
        return self._everyone

    # ------------------------------------------------------------------ buffers (in chunks)
    def input_chunks(self, rank: int) -> int:
        return {"allgather": self.chunkup, "broadcast": self.chunkup}.get(self.name, self.ranks * self.chunkup)

    def output_chunks(self, rank: int) -> int:
        return {"reducescatter": self.chunkup, "broadcast": self.chunkup}.get(self.name, self.ranks * self.chunkup)

    def input_index(self, rank: int, chunk: int) -> int | None:
        """Where ``rank`` keeps its input for ``chunk`` (None if it has none)."""
        if rank not in self.precondition(chunk):
            return None
        k, R = self.chunkup, self.ranks
        if self.name == "allgather":
            return chunk - rank * k
        if self.name == "alltoall":
            return (chunk // k % R) * k + chunk % k
        return chunk

    def output_index(self, rank: int, chunk: int) -> int | None:
        """Where ``rank`` must leave ``chunk`` (None if it need not)."""
        if rank not in self.postcondition(chunk):
            return None
        k, R = self.chunkup, self.ranks
        if self.name == "reducescatter":
            return chunk - rank * k
        if self.name == "alltoall":
            return (chunk // k // R) * k + chunk % k
        return chunk

    # ------------------------------------------------------------------ sizes (nccl-tests)
    def chunk_bytes(self, size: float) -> float:
        """Bytes per chunk for an nccl-tests size ``size``."""
        if self.name == "broadcast":
            return size / self.chunkup
        return size / (self.ranks * self.chunkup)

    @property
    def busbw_factor(self) -> float:
        n = self.ranks
        return {"allreduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(self.name, (n - 1) / n)

    def with_chunkup(self, chunkup: int) -> "Collective":
        return Collective(self.name, self.ranks, chunkup, self.root)


def make_collective(name: str, ranks: int, chunkup: int = 1, root: int = 0) -> Collective:
    return Collective(canonical_name(name), ranks, chunkup, root)
