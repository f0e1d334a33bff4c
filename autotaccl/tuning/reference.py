"""What every trial is compared with: the baselines at each sweep size, stock NCCL (``nccl-model``), and the bound.

Computed once per (target, collective, sizes, runner) by the sweep driver and saved as JSON in the run
directory, so every worker reads the same numbers instead of recomputing them.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import networkx as nx

from ..baselines import applicable_baselines, baseline, best_runs
from ..bounds import bound_algbw, bounds
from ..errors import InputError
from ..model.algorithm import Algorithm, from_json, to_json
from ..nccl_model import nccl_model

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
    # baseline name -> per size (protocol, channels, instances) of its fastest simulated run
    sim_runs: Mapping[str, tuple[tuple[str, int, int], ...]] = field(default_factory=dict)
    nccl_times: tuple[float, ...] = ()        # stock NCCL as nccl-model predicts it, per size (empty: no model)
    nccl_choices: tuple[tuple[str, str, int], ...] = ()   # per size: its (algorithm, protocol, channels)

    def best(self, i: int, simulated: bool = False) -> tuple[str, float]:
        """(name, time) of the fastest baseline at size index ``i``."""
        table = self.sim_times if simulated else self.times
        return min(((name, t[i]) for name, t in table.items()), key=lambda x: x[1])

    def algorithm(self, name: str) -> Algorithm:
        return from_json(self.algorithms[name], f"<baseline {name}>")


def compute_reference(graph: nx.DiGraph, collective: str, sizes: Sequence[int], runner: str,
                      measure: Callable[[Algorithm], Sequence[float]] | None = None) -> Reference:
    """Build every applicable baseline, simulate it at every size the fastest way it runs (channels and
    protocol, :func:`autotaccl.baselines.best_runs`), measure it with ``measure``, and predict stock NCCL."""
    names = applicable_baselines(graph, collective)
    algorithms = {name: baseline(graph, collective, name) for name in names}
    runs = {name: best_runs(graph, collective, name, sizes) for name in names}
    sim = {name: tuple(r.time_us for r in rs) for name, rs in runs.items()}
    times = sim if measure is None else {name: tuple(measure(a)) for name, a in algorithms.items()}
    b = bounds(graph, collective)
    nccl_times, nccl_choices = (), ()
    try:
        rows = nccl_model(graph, collective, sizes).rows
        nccl_times = tuple(r.time_us for r in rows)
        nccl_choices = tuple((r.algorithm, r.protocol, r.channels) for r in rows)
    except InputError as err:          # no NCCL algorithm the model has runs on this graph
        log.info("no NCCL prediction for %s on %s: %s", collective, graph.graph.get("name"), err)
    return Reference(collective, tuple(sizes), runner, times, sim, tuple(bound_algbw(b, s) for s in sizes),
                     {name: to_json(a) for name, a in algorithms.items()},
                     {name: tuple((r.protocol, r.channels, r.instances) for r in rs) for name, rs in runs.items()},
                     nccl_times, nccl_choices)


def save_reference(ref: Reference, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(asdict(ref)))
    tmp.replace(path)


def load_reference(path: Path) -> Reference:
    data: dict[str, Any] = json.loads(Path(path).read_text())
    return Reference(data["collective"], tuple(data["sizes"]), data["runner"],
                     {k: tuple(v) for k, v in data["times"].items()},
                     {k: tuple(v) for k, v in data["sim_times"].items()},
                     tuple(data["bound_algbw"]), data["algorithms"],
                     {k: tuple(tuple(x) for x in v) for k, v in data.get("sim_runs", {}).items()},
                     tuple(data.get("nccl_times", ())), tuple(tuple(c) for c in data.get("nccl_choices", ())))
