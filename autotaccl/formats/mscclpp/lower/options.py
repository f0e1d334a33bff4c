"""What the user asks of a plan lowering, and the error for an algorithm that cannot become a plan."""
from __future__ import annotations

from dataclasses import dataclass

from ....errors import InputError
from ..plan import NO_LIMIT, PROTOCOLS

MAX_INSTANCES = 16
#: where the plan lets the caller's buffers sit; the note each plan carries in its metadata
PLACEMENTS = {
    "anywhere": "input and output may sit anywhere inside their CUDA allocations, at the same offsets on every "
                "rank (the executor reaches a peer's buffer at the caller's own offset); port-channel puts "
                "send from scratch",
    "start": "input and output (in place: the buffer holding both) must each start their CUDA allocation on "
             "every rank; port-channel puts send straight from them",
}


class LoweringError(InputError):
    """The algorithm cannot be written as a plan the executor runs; the message names the limit."""


@dataclass(frozen=True)
class PlanOptions:
    """``inplace`` selects the buffer mode the plan is for (the executor matches one); ``proto`` LL moves
    data inside a node as packets (port channels keep put-with-signal); ``instances`` runs that many copies
    of the algorithm side by side on their own chunks, channels and thread blocks; ``min_bytes``/``max_bytes``
    is the inclusive range of message sizes it is selected for (None: no upper limit); ``placement`` is
    where the caller's buffers may sit (:data:`PLACEMENTS`: ``start`` saves the staging copies of port
    puts)."""
    inplace: bool = False
    proto: str = "Simple"
    instances: int = 1
    min_bytes: int = 0
    max_bytes: int | None = None
    name: str | None = None
    placement: str = "anywhere"

    def validated(self) -> "PlanOptions":
        if self.placement not in PLACEMENTS:
            raise InputError("--placement", repr(self.placement), f"one of: {', '.join(PLACEMENTS)}")
        if self.proto not in PROTOCOLS:
            raise InputError("--proto", repr(self.proto), f"one of: {', '.join(PROTOCOLS)}")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int) or \
                not 1 <= self.instances <= MAX_INSTANCES:
            raise InputError("--instances", repr(self.instances), f"a whole number in 1..{MAX_INSTANCES}")
        if self.min_bytes < 0 or self.min_bytes > NO_LIMIT:
            raise InputError("--min-bytes", str(self.min_bytes), "a size >= 0")
        if self.max_bytes is not None and not max(self.min_bytes, 1) <= self.max_bytes <= NO_LIMIT:
            raise InputError("--max-bytes", str(self.max_bytes), f"a size >= --min-bytes ({self.min_bytes}) and > 0")
        return self
