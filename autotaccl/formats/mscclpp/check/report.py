"""What a plan check finds: problems located by rank, thread block, operation and call."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    message: str
    rank: int | None = None
    tb: int | None = None
    op: int | None = None
    mode: str | None = None
    call: int | None = None          # 1-based: the replay runs the plan several times back to back

    def __str__(self) -> str:
        where = []
        if self.mode:
            where.append(f"[{self.mode}]")
        if self.call is not None:
            where.append(f"call {self.call}")
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.tb is not None:
            where.append(f"tb {self.tb}")
        if self.op is not None:
            where.append(f"op {self.op}")
        return (" ".join(where) + ": " if where else "") + self.message

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class PlanReport:
    """The verdict on one plan: ``valid`` iff no errors in any checked mode."""
    source: str
    collective: str
    ranks: int
    modes: tuple[str, ...]
    errors: tuple[Problem, ...]
    warnings: tuple[Problem, ...] = ()
    calls: int = 0
    stats: dict = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def first(self) -> Problem | None:
        return self.errors[0] if self.errors else None

    def __str__(self) -> str:
        head = (f"{self.source}: {'valid' if self.valid else 'INVALID'} {self.collective} plan on {self.ranks} ranks "
                f"({', '.join(self.modes) or 'no mode'})")
        return head if self.valid else f"{head}: {self.first}"

    def to_dict(self) -> dict:
        return {"source": self.source, "valid": self.valid, "collective": self.collective, "ranks": self.ranks,
                "modes": list(self.modes), "calls": self.calls, "stats": self.stats,
                "errors": [p.to_dict() for p in self.errors], "warnings": [p.to_dict() for p in self.warnings]}
