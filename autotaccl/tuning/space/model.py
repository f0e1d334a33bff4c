"""What a loaded search space is, as values: its parameters (each a distribution with an optional ``when``
condition) and its target. ``schema`` builds these from a file; ``knobs``, ``engines`` and ``sampling`` read
them, so every module of the package imports this one and none imports back."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, get_args

import networkx as nx

from ...model.hardware import HardwareProfile
from ...model.topology import build_topology

ParameterType = Literal["categorical", "int", "float"]
TYPES: tuple[ParameterType, ...] = get_args(ParameterType)


@dataclass(frozen=True)
class Parameter:
    """One searched knob: a distribution, sampled only when its ``when`` condition holds."""

    name: str
    kind: ParameterType
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    when: tuple[tuple[str, tuple], ...] = ()

    def active(self, values: Mapping[str, Any]) -> bool:
        return all(name in values and values[name] in allowed for name, allowed in self.when)

    def contains(self, value: Any) -> bool:
        if self.kind == "categorical":
            return any(value == c and type(value) is type(c) for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == "int" and not isinstance(value, int):
            return False
        if not self.low <= value <= self.high:
            return False
        return self.step is None or math.isclose((value - self.low) / self.step,
                                                 round((value - self.low) / self.step), abs_tol=1e-9)

    def values(self) -> list:
        """Every value (categorical, or int with a finite grid); used by exhaustive enumeration."""
        if self.kind == "categorical":
            return list(self.choices)
        if self.kind == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        raise ValueError(f"parameter {self.name} is continuous")


@dataclass(frozen=True)
class SearchSpace:
    name: str
    source: str
    hardware: str
    nodes: int
    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    parameters: tuple[Parameter, ...]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    seeds: tuple[Mapping[str, Any], ...] = ()
    profile: HardwareProfile | None = field(default=None, compare=False, repr=False)

    def graph(self) -> nx.DiGraph:
        return build_topology(self.profile, self.nodes)

    @property
    def target_name(self) -> str:
        return f"{self.profile.name}x{self.nodes}"

    def experiment_name(self, collective: str) -> str:
        """MLflow experiment / Optuna study name of one collective of this target: ``ndv2x2-allgather``."""
        return f"{self.target_name}-{collective}"
