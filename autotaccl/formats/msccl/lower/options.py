"""What the user asks of a lowering, and the error for an algorithm that cannot fit a runtime."""
from __future__ import annotations

from dataclasses import dataclass

from ....errors import InputError, ParameterError
from ..program import LIMITS, PROTOCOLS, RUNTIMES, Protocol, Runtime


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
    proto: Protocol = "Simple"
    min_bytes: int = 0
    max_bytes: int | None = None
    runtime: Runtime = "msccl-executor"
    inplace: bool | None = None
    outofplace: bool | None = None

    def validated(self) -> "LoweringOptions":
        def fail(name: str, value: object, expected: str) -> ParameterError:
            return ParameterError(f"LoweringOptions.{name}", str(value), expected)

        if self.runtime not in RUNTIMES:
            raise fail("runtime", repr(self.runtime), f"one of: {', '.join(RUNTIMES)}")
        if self.proto not in PROTOCOLS:
            raise fail("proto", repr(self.proto), f"one of: {', '.join(PROTOCOLS)}")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int) or \
                not 1 <= self.instances <= LIMITS[self.runtime].channels:
            raise fail("instances", repr(self.instances), f"a whole number in 1..{LIMITS[self.runtime].channels}")
        if self.min_bytes < 0:
            raise fail("min_bytes", self.min_bytes, "a size >= 0")
        if self.max_bytes is not None and self.max_bytes < max(self.min_bytes, 1):
            raise fail("max_bytes", self.max_bytes, f"a size >= the minimum ({self.min_bytes}) and > 0")
        inplace, outofplace = self.inplace, self.outofplace
        if inplace is None and outofplace is None:
            inplace, outofplace = self.runtime == "msccl-executor", True
        else:
            inplace, outofplace = bool(inplace), bool(outofplace) if outofplace is not None else not inplace
        if not (inplace or outofplace):
            raise fail("outofplace", "False (and inplace False)", "at least one buffer mode")
        if self.runtime == "msccl" and inplace and outofplace:
            raise fail("runtime", "'msccl' (with inplace and outofplace)",
                       "one mode: the msccl runtime selects a file for in-place or out-of-place calls only; "
                       "lower twice, in-place and out-of-place")
        return LoweringOptions(self.instances, self.proto, self.min_bytes, self.max_bytes, self.runtime,
                               inplace, outofplace)
