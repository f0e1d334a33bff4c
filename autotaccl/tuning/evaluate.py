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


SWITCH = "switch"        # the prefix of a trial's switch candidate in MLflow (metrics, artifacts) and Optuna


@dataclass(frozen=True)
class SwitchCandidate:
    """A trial's second algorithm: the schedule synthesized for a runtime that runs switch operations,
    scored in the simulator beside the XML-loadable one (which alone sets the trial's objective)."""
    synth: Synthesized
    results: Sequence[SizeResult]
    runtimes: tuple[str, ...]        # the export's runtimes that load it (tuning/runtimes.runs_on)

    def attrs(self) -> dict[str, Any]:
        """The Optuna user attributes it is recorded under."""
        return {f"{SWITCH}_results": [asdict(r) for r in self.results], f"{SWITCH}_score": score(self.results),
                f"{SWITCH}_cache_key": self.synth.key, f"{SWITCH}_runtimes": list(self.runtimes)}


def switch_options(graph: nx.DiGraph, collective: str, settings: Settings, runner: Runner,
                   time_limit: float | None = None) -> SynthOptions | None:
    """How a trial's switch candidate is synthesized (greedy, Simple x 1, no runtime's limits: the export
    lowers it for the runtimes that run switch operations), or None where it has none: the profile's switch
    does not reduce (no ``nccl.nvls``), the switch cannot run the collective, or the runner is real hardware
    (mpi, nccl-tests move copies and run no switch operation; its measured times and a simulated switch time
    would not compare)."""
    from ..model import switch

    profile = graph.graph.get("profile")
    if (runner.real_hardware or collective not in switch.COLLECTIVES or profile is None
            or profile.nccl.nvls is None):
        return None
    options: dict[str, Any] = {"engine": "greedy", "size": settings.synth_size, "threads": 1,
                               "protocol": switch.PROTOCOL, "instances": 1}
    if time_limit is not None:
        options["time_limit"] = time_limit
    return SynthOptions(**options)


def switch_candidate(graph: nx.DiGraph, collective: str, sketch, settings: Settings, runner: Runner,
                     cache: SynthesisCache, ref: Reference, time_limit: float | None = None) -> SwitchCandidate | None:
    """The trial's switch candidate (:func:`switch_options`), synthesized through the cache and simulated at
    every sweep size; None where there is none or its schedule uses no switch operation (copies won: the
    XML-loadable one covers it) or the sketch admits none."""
    from ..errors import InfeasibleError, InputError
    from ..model.algorithm import VerificationError, switch_ops
    from .runtimes import runs_on

    options = switch_options(graph, collective, settings, runner, time_limit)
    if options is None:
        return None
    try:
        synth = synthesize_cached(graph, collective, sketch, options, cache)
    except (InfeasibleError, InputError, VerificationError) as err:
        log.info("no switch candidate: %s", err)
        return None
    if not switch_ops(synth.algorithm):
        return None
    times = simulate_times(synth.algorithm, graph, ref.sizes, options.protocol, options.instances)
    results = size_results(times, ref, collective, graph.number_of_nodes(), simulated=True)
    return SwitchCandidate(synth, results, runs_on(synth.algorithm, graph, options.protocol, options.instances))


def switch_logged(candidate: SwitchCandidate | None) -> tuple[dict[str, float], dict[str, str], dict[str, str]]:
    """(metrics, artifacts, tags) of a trial's MLflow run for its switch candidate: ``switch.time_us.<size>``,
    ``switch.bound_pct.<size>``, ``switch.steps``/``.transfers``, ``switch/algorithm.json``, tag ``switch.runtimes``."""
    import json

    from ..model.algorithm import to_json

    if candidate is None:
        return {}, {}, {}
    algorithm = candidate.synth.algorithm
    metrics = {f"{SWITCH}.score": score(candidate.results), f"{SWITCH}.steps": float(algorithm.num_steps),
               f"{SWITCH}.transfers": float(len(algorithm.transfers))}
    for r in candidate.results:
        metrics[f"{SWITCH}.time_us.{r.size}"] = r.time_us
        metrics[f"{SWITCH}.bound_pct.{r.size}"] = r.bound_pct
    tags = {f"{SWITCH}.runtimes": ",".join(candidate.runtimes) or "none", f"{SWITCH}.cache_key": candidate.synth.key}
    return metrics, {f"{SWITCH}/algorithm.json": json.dumps(to_json(algorithm))}, tags
