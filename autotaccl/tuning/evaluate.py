"""Evaluate one configuration: synthesize (through the cache), verify, measure at every sweep size, score.

Pure functions of their inputs plus the cache; the Optuna objective (``objective.py``) strings them together.
"""
from __future__ import annotations

import logging
import math
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import networkx as nx
import pandas as pd

from runners import Runner

from ..formats.loading import loader
from ..model.algorithm import Algorithm, verify
from ..model.collectives import make_collective
from ..model.topology import fingerprint
from ..sketch import sketch_key
from ..synth import SynthOptions, synthesize
from .cache import SynthesisCache, cache_key
from .lowered import XML_RUNTIME, run_settings
from .reference import Reference
from .space import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Synthesized:
    algorithm: Algorithm
    key: str                 # cache key: collective, sketch, topology, solver settings (cache.cache_key)
    sketch_key: str
    status: str
    seconds: float
    stages: Mapping[str, Any] = field(default_factory=dict)   # stage -> {seconds, variables, constraints, status, solver}
    cache_hit: bool = False

    @property
    def variables(self) -> int:
        return sum(int(s.get("variables") or 0) for s in self.stages.values())

    @property
    def constraints(self) -> int:
        return sum(int(s.get("constraints") or 0) for s in self.stages.values())


def synth_options(settings: Settings, time_limit: float | None = None, unmeasured: Sequence[str] = ()) -> SynthOptions:
    """How a trial synthesizes: its sample's engine, gap and size, one solver thread, the sweep's time limit.

    The greedy engine (seconds a synthesis) chooses for the protocol and instances the trial's files run with
    (:func:`run_settings`; Simple x 1 for those the runner cannot tell apart) among what msccl-executor, whose
    XML every exported band needs, loads run that way: a schedule synthesized for Simple x 1 runs slower under
    another protocol and instance count than one synthesized for them (``benchmarks/synthesis.py``, which
    synthesizes for each). The MILP's stages take
    minutes, so one synthesis (Simple x 1) serves every protocol and instance count of a sketch."""
    options: dict[str, Any] = {"engine": settings.engine, "size": settings.synth_size, "threads": 1}
    if settings.engine == "greedy":
        protocol, instances = run_settings(settings.protocol, settings.instances, unmeasured)
        options.update(protocol=protocol, instances=instances, runtime=loader(XML_RUNTIME))
    if settings.mip_gap is not None:
        options["mip_gap"] = settings.mip_gap
    if time_limit is not None:
        options["time_limit"] = time_limit
    return SynthOptions(**options)


def synthesize_cached(graph: nx.DiGraph, collective: str, sketch, options: SynthOptions,
                      cache: SynthesisCache) -> Synthesized:
    """The synthesized, verified algorithm for ``sketch``; reuses the cache entry of an equal configuration."""
    skey = sketch_key(sketch)
    key = cache_key(collective, skey, fingerprint(graph), options)
    hit = cache.get(key)
    if hit is not None:
        algorithm, info = hit
        verify(algorithm, graph)
        return Synthesized(algorithm, key, skey, info.get("status", "cached"), float(info.get("seconds", 0.0)),
                           info.get("stages", {}), cache_hit=True)
    start = time.perf_counter()
    result = synthesize(graph, collective, sketch, options)
    seconds = float(getattr(result, "seconds", None) or time.perf_counter() - start)
    verify(result.algorithm, graph)
    stages = {name: {k: v for k, v in asdict(report).items()} for name, report in (result.stages or {}).items()}
    cache.put(key, result.algorithm, {"status": str(result.status), "seconds": seconds, "stages": stages})
    return Synthesized(result.algorithm, key, skey, str(result.status), seconds, stages)


@dataclass(frozen=True)
class SizeResult:
    size: int
    time_us: float
    algbw: float
    busbw: float
    relative: float          # time / best baseline's time at this size (lower is better)
    bound_pct: float         # algbw as a percentage of the bound's algbw ceiling
    baseline: str            # the best baseline at this size
    baseline_time_us: float


def size_results(times: Sequence[float], ref: Reference, collective: str, ranks: int,
                 simulated: bool) -> list[SizeResult]:
    """Per-size metrics from measured times, relative to the reference of the same fidelity."""
    coll = make_collective(collective, ranks)
    out = []
    for i, (size, t) in enumerate(zip(ref.sizes, times)):
        name, base = ref.best(i, simulated)
        algbw = size / t / 1e3
        out.append(SizeResult(size, t, algbw, algbw * coll.busbw_factor, t / base,
                              100.0 * algbw / ref.bound_algbw[i], name, base))
    return out


def score(results: Sequence[SizeResult]) -> float:
    """Geometric mean over sizes of time relative to the best baseline (1.0 = as fast as the baselines)."""
    return math.exp(sum(math.log(r.relative) for r in results) / len(results))


def simulate_times(algorithm: Algorithm, graph: nx.DiGraph, sizes: Sequence[int], protocol: str = "Simple",
                   instances: int = 1) -> list[float]:
    """Simulated time per size, run with the tuned ``protocol`` and ``instances``."""
    from ..simulate import simulate_sizes

    return [r.time_us for r in simulate_sizes(algorithm, graph, sizes, protocol, instances)]


class WrongResults(RuntimeError):
    """A runner moved real data and found wrong elements: the algorithm is not exported, the trial fails."""


def runner_times(algorithm: Algorithm, sizes: Sequence[int], runner: Runner, options: Any,
                 runtime_text: str | None = None) -> tuple[list[float], pd.DataFrame]:
    """Out-of-place time per size from a real runner (raises WrongResults if any element was wrong).

    A runner of a runtime file, given ``runtime_text`` (the algorithm lowered with the tuned protocol and
    instances), measures that file instead of lowering the algorithm with defaults.
    """
    with tempfile.TemporaryDirectory(prefix="autotaccl-runtime-") as tmp:
        target: Any = algorithm
        if runtime_text is not None:
            target = Path(tmp) / f"algorithm{runner.runtime_file.suffix}"
            target.write_text(runtime_text)
        frame = runner.measure(target, list(sizes), options)
    wrong = frame["wrong"].fillna(0)
    if (wrong > 0).any():
        bad = frame.loc[wrong > 0, "size"].tolist()
        raise WrongResults(f"{runner.name} runner found wrong elements at sizes {bad}")
    rows = frame[~frame["inplace"].astype(bool)] if (~frame["inplace"].astype(bool)).any() else frame
    by_size = rows.groupby("size")["time_us"].min()
    times = []
    for size in sizes:
        match = by_size[by_size.index <= size]
        if match.empty:
            raise WrongResults(f"{runner.name} runner returned no row for size {size}")
        times.append(float(match.iloc[-1]))
    return times, frame


def results_frame(results: Sequence[SizeResult]) -> pd.DataFrame:
    return pd.DataFrame([asdict(r) for r in results])
