"""Fit a hardware profile's free terms to measured nccl-tests tables, so that the NCCL model reproduces them.

The model (:func:`autotaccl.nccl_model.nccl_model`) predicts, per size, the fastest of the (algorithm,
protocol) pairs NCCL may run under the table's restriction (``NCCL_ALGO``/``NCCL_PROTO``). Calibration
moves the profile terms that model reads, in nested parameter sets, and keeps the smallest set that
explains the data ("as few parameters as explain the data"):

1. ``launch_offset_us``: one latency added to every call (each protocol's ``launch_us``, NVLS's
   ``latency_us``: what the host spends launching, e.g. one thread driving 8 GPUs with ``-g 8``);
   ``efficiency_scale:intra`` / ``efficiency_scale:network``: one scale on the efficiency of the link
   classes inside a node / on the way through the NICs (and NVLS's and the tree's efficiency, where they run);
2. + ``hop_scale`` on the protocols' per-hop latencies, ``channel_scale`` on their ``channel_GBps`` and
   ``channel_launch_us``, the cost per channel a call runs on (NCCL runs small calls on fewer channels, so
   it grows with size where a per-call or per-hop latency does not);
3. + ``launch_scale:<protocol>``: each protocol's own launch latency.

Each set is fitted by robust least squares (soft L1) on relative errors ``log(predicted / measured)`` of
every size's fastest time (in- or out-of-place), with weak priors that keep terms the data do not
constrain at the profile's values. The first set that explains the data (``EXPLAINED``: no size off by
more than 15%, the median within 5%) is kept, else the set with the smallest worst error. The fit is
accepted when every size is within ``max_residual`` and the median within half of it; else the caller
refuses it, naming the sizes.
"""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import least_squares

from autotaccl.errors import InputError
from autotaccl.model.hardware import HardwareProfile, profile_to_dict, save_profile
from autotaccl.model.topology import is_network_arc
from autotaccl.nccl_model import Candidate, Terms, best, candidates

EXPLAINED = (0.15, 0.05)  # a parameter set explains a table when no size is off by more than 15%, the median 5%
PRIOR_SCALE = 0.05        # a prior deviation of one standard deviation costs as much as one size off by 5%
LOG_RANGE = math.log(20)  # no term moves further than 20x from the profile's value


@dataclass(frozen=True)
class Observation:
    """One measured table: its collective, the fastest time per size, and NCCL's restriction when it ran."""

    source: str
    collective: str
    sizes: tuple[int, ...]
    times_us: tuple[float, ...]
    algorithms: tuple[str, ...] | None = None
    protocols: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Residual:
    source: str
    size: int
    measured_us: float
    predicted_us: float
    algorithm: str
    protocol: str

    @property
    def relative(self) -> float:
        """(predicted - measured) / measured."""
        return self.predicted_us / self.measured_us - 1


@dataclass(frozen=True)
class Calibration:
    profile: HardwareProfile
    parameters: dict[str, tuple[float, float]]        # name -> (profile value, fitted value)
    residuals: tuple[Residual, ...]
    stage: int                                          # parameter set used (1..3)
    accepted: bool
    max_residual: float

    @property
    def worst(self) -> Residual:
        return max(self.residuals, key=lambda r: abs(r.relative))

    @property
    def median(self) -> float:
        return float(np.median([abs(r.relative) for r in self.residuals]))

    def poor(self) -> list[Residual]:
        return [r for r in self.residuals if abs(r.relative) > self.max_residual]


@dataclass(frozen=True)
class _Param:
    """One free term: ``x`` (what the fit moves, prior mean 0) maps to a value that ``apply`` sets.

    Scales are ``value * exp(x)``; the launch offset is ``x * OFFSET_UNIT`` µs added to every latency."""

    name: str
    value: float                                         # the profile's value (of a scale: 1)
    prior_sd: float                                      # of x
    apply: Callable[[Terms, float], Terms]               # terms with this parameter set to a value
    additive: bool = False
    low: float = -LOG_RANGE
    high: float = LOG_RANGE

    def of(self, x: float) -> float:
        return self.value + x * OFFSET_UNIT if self.additive else self.value * math.exp(x)


OFFSET_UNIT = 10.0        # µs per unit of the launch offset's x
CHANNEL_LAUNCH_MOST = 3.0  # µs per channel: well above the public tables' fits (benchmarks/fidelity.py)
SLOWER = (0.8, 0.6)       # further starts for the tree's and NVLS's efficiency, as shares of the profile's


def _scale_protocols(field_name: str, protocols: Sequence[str] | None = None):
    def apply(terms: Terms, factor: float) -> Terms:
        table = {p: (replace(v, **{field_name: getattr(v, field_name) * factor}) if protocols is None or p in protocols
                     else v) for p, v in terms.protocols.items()}
        return replace(terms, protocols=table)
    return apply


def _offset(terms: Terms, delta: float) -> Terms:
    """Every latency ``delta`` µs longer: each protocol's launch and NVLS's (a host-side launch cost)."""
    table = {p: replace(v, launch_us=v.launch_us + delta) for p, v in terms.protocols.items()}
    nvls = None if terms.nvls is None else replace(terms.nvls, latency_us=terms.nvls.latency_us + delta)
    return replace(terms, protocols=table, nvls=nvls)


def _scale_efficiency(classes: Sequence[str]):
    def apply(terms: Terms, factor: float) -> Terms:
        return replace(terms, efficiency={**terms.efficiency,
                                          **{c: terms.efficiency.get(c, 1.0) * factor for c in classes}})
    return apply


def _set_nvls(terms: Terms, value: float) -> Terms:
    return replace(terms, nvls=replace(terms.nvls, efficiency=value))


def _set_channel_launch(terms: Terms, value: float) -> Terms:
    return replace(terms, channel_launch_us=value)


def _set_tree(terms: Terms, value: float) -> Terms:
    return replace(terms, tree_efficiency=value)


def _scale_hops(terms: Terms, factor: float) -> Terms:
    return _scale_protocols("net_hop_us")(_scale_protocols("hop_us")(terms, factor), factor)


class _Problem:
    """The observations, their candidate schedules, and the predicted times for a set of terms."""

    def __init__(self, graph, observations: Sequence[Observation]) -> None:
        self.graph = graph
        self.observations = list(observations)
        self.base = Terms.of(graph)
        self.cands: list[list[Candidate]] = []
        for obs in observations:
            cands, notes = candidates(graph, obs.collective, obs.algorithms, obs.protocols, self.base)
            if not cands:
                raise InputError(obs.source, "--algorithm", f"an NCCL algorithm the model has for {obs.collective} "
                                 f"on {graph.graph['name']}: " + "; ".join(notes))
            self.cands.append(cands)

    def predict(self, terms: Terms) -> list[list[tuple[Candidate, float]]]:
        return [[best(cands, s, terms) for s in obs.sizes] for obs, cands in zip(self.observations, self.cands)]

    def log_errors(self, terms: Terms) -> np.ndarray:
        return np.array([math.log(t / m) for obs, pred in zip(self.observations, self.predict(terms))
                         for (_, t), m in zip(pred, obs.times_us)])

    def domains(self) -> dict[str, set[str]]:
        """The link classes the candidates' bytes cross, as ``intra`` (inside a node) and ``network`` (NICs
        and the GPUs' hops to them: in series, so one efficiency for all of them)."""
        out: dict[str, set[str]] = {"intra": set(), "network": set()}
        for cands in self.cands:
            for c in cands:
                for costs in (c.costs, c.net_costs):
                    if costs is not None:
                        for arc, (cls, _, _) in costs.arc_load.items():
                            out["network" if is_network_arc(arc) else "intra"].add(cls)
                if c.kind == "nvls":
                    out["intra"].add(c.switch_class)
        out["intra"] -= out["network"]
        return {k: v for k, v in out.items() if v}


def _stages(problem: _Problem) -> list[list[_Param]]:
    base = problem.base
    lowest = min(p.launch_us for p in base.protocols.values())
    if base.nvls is not None:
        lowest = min(lowest, base.nvls.latency_us)
    first = [_Param("launch_offset_us", 0.0, 10.0, _offset, additive=True, low=-lowest / OFFSET_UNIT, high=100.0)]
    for domain, classes in sorted(problem.domains().items()):
        first.append(_Param(f"efficiency_scale:{domain}", 1.0, 1.0, _scale_efficiency(sorted(classes))))
    used = {c.protocol for cands in problem.cands for c in cands}
    if base.nvls is not None and any(c.kind == "nvls" for cands in problem.cands for c in cands):
        first.append(_Param("efficiency:nvls", base.nvls.efficiency, 0.3, _set_nvls))
    if any(c.algorithm == "tree" for cands in problem.cands for c in cands):
        first.append(_Param("efficiency:tree", base.tree_efficiency, 0.3, _set_tree))
    second = first + [_Param("hop_scale", 1.0, 1.0, _scale_hops),
                      _Param("channel_scale", 1.0, 0.5, _scale_protocols("channel_GBps")),
                      _Param("channel_launch_us", base.channel_launch_us, 0.1, _set_channel_launch, additive=True,
                             low=-base.channel_launch_us / OFFSET_UNIT, high=CHANNEL_LAUNCH_MOST / OFFSET_UNIT)]
    third = second + [_Param(f"launch_scale:{p}", 1.0, 1.0, _scale_protocols("launch_us", (p,))) for p in sorted(used)]
    return [first, second, third]


def _terms(problem: _Problem, params: Sequence[_Param], x: np.ndarray) -> Terms:
    terms = problem.base
    for p, v in zip(params, x):     # scales first, the offset (the first parameter) on top of them
        if not p.additive:
            terms = p.apply(terms, p.of(v))
    for p, v in zip(params, x):
        if p.additive:
            terms = p.apply(terms, p.of(v))
    return terms


def _fit(problem: _Problem, params: Sequence[_Param], start: np.ndarray) -> np.ndarray:
    prior = np.array([PRIOR_SCALE / p.prior_sd for p in params])

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.concatenate([problem.log_errors(_terms(problem, params, x)), prior * x])

    low = np.array([p.low for p in params])
    high = np.array([p.high for p in params])
    starts = [start]
    for i, p in enumerate(params):      # which algorithm wins where can flip: also start from a slower tree/NVLS
        if p.name in ("efficiency:tree", "efficiency:nvls"):
            starts += [np.where(np.arange(len(params)) == i, math.log(f), start) for f in SLOWER]
    best = None
    for x0 in starts:
        result = least_squares(residuals, np.clip(x0, low + 1e-9, high - 1e-9), bounds=(low, high),
                               loss="soft_l1", f_scale=0.05, x_scale=1.0, diff_step=1e-3, max_nfev=400,
                               jac="3-point")   # central differences: a max() of two tied terms still has a slope
        if best is None or result.cost < best.cost:
            best = result
    return best.x


def _offset_start(problem: _Problem) -> float:
    """The launch offset's x that makes the smallest measured size come out right."""
    obs, cands = min(zip(problem.observations, problem.cands), key=lambda x: min(x[0].sizes))
    i = int(np.argmin(obs.sizes))
    _, t = best(cands, obs.sizes[i], problem.base)
    return (obs.times_us[i] - t) / OFFSET_UNIT


def calibrate(graph, observations: Sequence[Observation], max_residual: float = 0.25) -> Calibration:
    """Fit ``graph``'s profile to ``observations`` (module docstring)."""
    problem = _Problem(graph, observations)
    stages = _stages(problem)
    results = []
    x = np.zeros(len(stages[-1]))
    x[0] = np.clip(_offset_start(problem), stages[0][0].low, stages[0][0].high)
    for stage, params in enumerate(stages, 1):
        fitted = _fit(problem, params, x[:len(params)])
        x[:len(params)] = fitted
        errors = np.exp(problem.log_errors(_terms(problem, params, fitted))) - 1
        worst, median = float(np.max(np.abs(errors))), float(np.median(np.abs(errors)))
        results.append((worst, median, stage, params, fitted.copy()))
        if worst <= EXPLAINED[0] and median <= EXPLAINED[1]:
            break
    explained = [r for r in results if r[0] <= EXPLAINED[0] and r[1] <= EXPLAINED[1]]
    worst, median, stage, params, fitted = explained[0] if explained else min(results, key=lambda r: (r[0], r[1]))
    accepted = worst <= max_residual and median <= max_residual / 2
    terms = _terms(problem, params, fitted)
    residuals = []
    for obs, pred in zip(problem.observations, problem.predict(terms)):
        residuals += [Residual(obs.source, s, m, t, c.algorithm, c.protocol)
                      for s, m, (c, t) in zip(obs.sizes, obs.times_us, pred)]
    values = {p.name: (p.value, p.of(v)) for p, v in zip(params, fitted)}
    return Calibration(_profile(graph.graph["profile"], terms, values), values, tuple(residuals), stage,
                       accepted, max_residual)


def _profile(profile: HardwareProfile, terms: Terms, values: dict) -> HardwareProfile:
    """``profile`` with the fitted terms; an efficiency above 1 raises the class's line rate instead."""
    classes = {}
    for name, c in profile.link_classes.items():
        eff = terms.efficiency.get(name, c.efficiency)
        classes[name] = replace(c, efficiency=eff) if eff <= 1 else replace(c, bandwidth_GBps=c.bandwidth_GBps * eff,
                                                                           efficiency=1.0)
    nvls = None if terms.nvls is None else replace(terms.nvls, efficiency=min(terms.nvls.efficiency, 1.0))
    nccl = replace(profile.nccl, nvls=nvls, tree_efficiency=min(terms.tree_efficiency, 1.0),
                   channel_launch_us=terms.channel_launch_us)
    return replace(profile, link_classes=classes, protocols=dict(terms.protocols), nccl=nccl)


def _round(value):
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


def write_profile(cal: Calibration, path: str | Path, name: str, how: str) -> None:
    """Write the calibrated profile atomically, its fit and per-size residuals in the header; it is
    loaded back with :func:`load_hardware` before it replaces ``path``."""
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Calibrated by `autotaccl calibrate` on {when} from {cal.profile.name}.", f"# How: {how}",
             f"# Fit: parameter set {cal.stage}; median |residual| {100 * cal.median:.1f}%, worst "
             f"{100 * abs(cal.worst.relative):.1f}% (limit {100 * cal.max_residual:.0f}%)."]
    for key, (before, after) in cal.parameters.items():
        lines.append(f"#   {key}: {before:.4g} -> {after:.4g}")
    lines.append("#  file: size  measured_us  predicted_us  residual  algorithm/protocol")
    for r in cal.residuals:
        lines.append(f"#  {Path(r.source).name}: {r.size}  {r.measured_us:.2f}  {r.predicted_us:.2f}  "
                     f"{100 * r.relative:+.1f}%  {r.algorithm}/{r.protocol}")
    data = _round(profile_to_dict(replace(cal.profile, name=name)))
    data["description"] = f"{cal.profile.description} (calibrated: {how})"[:2000]
    save_profile(data, path, lines, width=120)
