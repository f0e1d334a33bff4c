"""What a check finds: problems located by rank, thread block, step and line."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    message: str
    rank: int | None = None
    tb: int | None = None
    step: int | None = None
    line: int | None = None
    mode: str | None = None

    def __str__(self) -> str:
        where = []
        if self.mode:
            where.append(f"[{self.mode}]")
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.tb is not None:
            where.append(f"tb {self.tb}")
        if self.step is not None:
            where.append(f"step {self.step}")
        if self.line:
            where.append(f"(line {self.line})")
        return (" ".join(where) + ": " if where else "") + self.message

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class CheckReport:
    """The verdict on one XML file: ``valid`` iff no errors in any checked mode."""
    source: str
    runtime: str
    modes: tuple[str, ...]
    errors: tuple[Problem, ...]
    warnings: tuple[Problem, ...] = ()
    coll: str = ""
    ngpus: int = 0
    seeds: int = 0
    stats: dict = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def first(self) -> Problem | None:
        return self.errors[0] if self.errors else None

    def __str__(self) -> str:
        head = (f"{self.source}: {'valid' if self.valid else 'INVALID'} {self.coll} on {self.ngpus} ranks "
                f"for {self.runtime} ({', '.join(self.modes) or 'no mode'})")
        return head if self.valid else f"{head}: {self.first}"

    def to_dict(self) -> dict:
        return {"source": self.source, "valid": self.valid, "runtime": self.runtime, "modes": list(self.modes),
                "coll": self.coll, "ngpus": self.ngpus, "seeds": self.seeds, "stats": self.stats,
                "errors": [p.to_dict() for p in self.errors], "warnings": [p.to_dict() for p in self.warnings]}
