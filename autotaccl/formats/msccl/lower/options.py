"""What the user asks of a lowering, and the error for an algorithm that cannot fit a runtime."""
from __future__ import annotations

from dataclasses import dataclass

from ....errors import InputError
from ..program import LIMITS, PROTOCOLS, RUNTIMES


class LoweringError(InputError):
    """The algorithm cannot be written for this runtime; the message names the limit and by how much."""

    def __init__(self, source: str, limit: str, detail: str) -> None:
        super().__init__(source, limit, detail)


@dataclass(frozen=True)
class LoweringOptions:
    """``instances`` replicates the algorithm on that many channel sets; ``min_bytes``/``max_bytes`` is
    the inclusive size range it is selected for (None: no upper limit); ``inplace``/``outofplace``
    default to both on msccl-executor and out-of-place on the legacy msccl runtime (which matches one)."""
    instances: int = 1
    proto: str = "Simple"
    min_bytes: int = 0
    max_bytes: int | None = None
    runtime: str = "msccl-executor"
    inplace: bool | None = None
    outofplace: bool | None = None

    def validated(self) -> "LoweringOptions":
        if self.runtime not in RUNTIMES:
            raise InputError("--runtime", repr(self.runtime), f"one of: {', '.join(RUNTIMES)}")
        if self.proto not in PROTOCOLS:
            raise InputError("--proto", repr(self.proto), f"one of: {', '.join(PROTOCOLS)}")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int) or \
                not 1 <= self.instances <= LIMITS[self.runtime].channels:
            raise InputError("--instances", repr(self.instances), f"a whole number in 1..{LIMITS[self.runtime].channels}")
        if self.min_bytes < 0:
            raise InputError("--min-bytes", str(self.min_bytes), "a size >= 0")
        if self.max_bytes is not None and self.max_bytes < max(self.min_bytes, 1):
            raise InputError("--max-bytes", str(self.max_bytes), f"a size >= --min-bytes ({self.min_bytes}) and > 0")
        inplace, outofplace = self.inplace, self.outofplace
        if inplace is None and outofplace is None:
            inplace, outofplace = self.runtime == "msccl-executor", True
        else:
            inplace, outofplace = bool(inplace), bool(outofplace) if outofplace is not None else not inplace
        if not (inplace or outofplace):
            raise InputError("--inplace/--outofplace", "neither", "at least one buffer mode")
        if self.runtime == "msccl" and inplace and outofplace:
            raise InputError("--runtime msccl", "inplace and outofplace",
                             "one mode: the msccl runtime selects a file for in-place or out-of-place calls only; "
                             "lower twice, with --inplace and with --outofplace")
        return LoweringOptions(self.instances, self.proto, self.min_bytes, self.max_bytes, self.runtime,
                               inplace, outofplace)
