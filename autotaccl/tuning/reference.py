"""What every trial is compared with: the baselines at each sweep size, and the bound.

Computed once per (target, collective, sizes, runner) by the sweep driver and saved as JSON in the run
directory, so every worker reads the same numbers instead of recomputing them.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import networkx as nx

from ..baselines import applicable_baselines, baseline
from ..bounds import bound_algbw, bounds
from ..model.algorithm import Algorithm, from_json, to_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reference:
    collective: str
    sizes: tuple[int, ...]
    runner: str
    # baseline name -> time (µs) per size, as the final-fidelity runner measured it
    times: Mapping[str, tuple[float, ...]]
    # baseline name -> time per size in the simulator (the first fidelity)
    sim_times: Mapping[str, tuple[float, ...]]
    bound_algbw: tuple[float, ...]            # GB/s ceiling per size
    algorithms: Mapping[str, dict]            # baseline name -> algorithm JSON

    def best(self, i: int, simulated: bool = False) -> tuple[str, float]:
        """(name, time) of the fastest baseline at size index ``i``."""
        table = self.sim_times if simulated else self.times
        return min(((name, t[i]) for name, t in table.items()), key=lambda x: x[1])

    def algorithm(self, name: str) -> Algorithm:
        return from_json(self.algorithms[name], f"<baseline {name}>")


def compute_reference(graph: nx.DiGraph, collective: str, sizes: Sequence[int], runner: str,
                      measure: Callable[[Algorithm], Sequence[float]] | None = None) -> Reference:
    """Build every applicable baseline, simulate it at every size (and measure it with ``measure``)."""
    from ..simulate import simulate_sizes

    names = applicable_baselines(graph, collective)
    algorithms = {name: baseline(graph, collective, name) for name in names}
    sim = {name: tuple(r.time_us for r in simulate_sizes(a, graph, sizes)) for name, a in algorithms.items()}
    times = sim if measure is None else {name: tuple(measure(a)) for name, a in algorithms.items()}
    b = bounds(graph, collective)
    return Reference(collective, tuple(sizes), runner, times, sim, tuple(bound_algbw(b, s) for s in sizes),
                     {name: to_json(a) for name, a in algorithms.items()})


def save_reference(ref: Reference, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(asdict(ref)))
    tmp.replace(path)


def load_reference(path: Path) -> Reference:
    data: dict[str, Any] = json.loads(Path(path).read_text())
    return Reference(data["collective"], tuple(data["sizes"]), data["runner"],
                     {k: tuple(v) for k, v in data["times"].items()},
                     {k: tuple(v) for k, v in data["sim_times"].items()},
                     tuple(data["bound_algbw"]), data["algorithms"])
