"""Does the search learn? Samplers replayed on a lookup table of a shipped space, scored the way export picks.

`autotaccl tune` exports, per size, the fastest trial. So a sweep is as good as its per-size best so far:
its *quality* after n trials is the geometric mean over sizes of best-known time / best-so-far time (1.0 =
every size has its best known algorithm). The best known per size is the best of the whole lookup table
(the long reference run: its size and build cost are printed); the attainable bound per size is printed next
to it.

The table holds, per configuration, the simulated time at every size (or why it is infeasible). It is built
once, synthesizing each distinct synthesis cache key once, and saved under ``--tables``; the samplers then
replay against it, with `tune`'s seeds enqueued first and its repeat handling, so a replay costs no
synthesis. Trials whose configurations share a cache key are one evaluation ("distinct"). Configurations
the table lacks are synthesized on demand and added to it, so a partial table only costs time.

    .venv/bin/python benchmarks/search_efficiency.py --space dgx-a100x2 --collective allgather --seeds 30
        [--trials 60] [--samplers random,tpe,...] [--build] [--out DIR] [--write]

Only the greedy engine's part of a space is covered (``--engine greedy``, the default): an MILP synthesis
takes minutes, too long to tabulate on a workstation.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotaccl.documents import read_document  # noqa: E402
from autotaccl.errors import InfeasibleError, InputError  # noqa: E402
from autotaccl.model.algorithm import VerificationError  # noqa: E402
from autotaccl.model.topology import fingerprint  # noqa: E402
from autotaccl.sizes import format_size  # noqa: E402
from autotaccl.sketch import sketch_key  # noqa: E402
from autotaccl.tuning.banded import BandedSampler, bands  # noqa: E402
from autotaccl.tuning.cache import SynthesisCache, cache_key  # noqa: E402
from autotaccl.tuning.evaluate import score, simulate_times, size_results, synth_options, synthesize_cached  # noqa: E402
from autotaccl.tuning.explore import enqueue_unseen, is_repeat, stuck  # noqa: E402
from autotaccl.tuning.reference import compute_reference  # noqa: E402
from autotaccl.tuning.lean import ENGINE_IGNORES  # noqa: E402
from autotaccl.tuning import prefilter  # noqa: E402
from autotaccl.tuning.samplers import make_sampler  # noqa: E402
from autotaccl.tuning.space import enumerate_space, load_space, params_to_sketch, sample, settings  # noqa: E402
from autotaccl.tuning.space.schema import space_from_dict  # noqa: E402
from autotaccl.tuning.study import seed as seed_study  # noqa: E402
from autotaccl.tuning.sweep import TuneRequest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GOALS = (0.02, 0.005)          # within 2% and 0.5% of the best known
MILP_ONLY = ("ordering", "contiguity", "mip_gap")
DEFAULT = TuneRequest.__dataclass_fields__["sampler"].default      # tune's default sampler
MARGIN = TuneRequest.__dataclass_fields__["margin"].default        # tune's default sim-fidelity margin
EXPLORE = TuneRequest.__dataclass_fields__["explore"].default      # tune's default share simulated only, first


def engine_part(name: str, engine: str):
    """The shipped space ``name`` with ``engine`` fixed (its other engine's knobs and seeds dropped)."""
    path = ROOT / "search_spaces" / f"{name}.yaml" if not Path(name).is_file() else Path(name)
    data = read_document(path, "yaml")
    params = data.get("parameters", {})
    params.pop("engine", None)
    if engine == "greedy":
        for knob in MILP_ONLY:
            params.pop(knob, None)
    data["fixed"] = {**(data.get("fixed") or {}), "engine": engine}
    data["seeds"] = [{k: v for k, v in s.items() if k != "engine"} for s in data.get("seeds", [])
                     if s.get("engine", engine) == engine]
    return space_from_dict(data, str(path), default_name=path.stem, base_dir=path.parent)


def canonical(params: dict, space) -> dict:
    """``params`` with the knobs their engine ignores (ENGINE_IGNORES) at their first choice: one algorithm."""
    ignored = ENGINE_IGNORES.get({**space.fixed, **params}.get("engine"), ())
    first_choice = {p.name: p.values()[0] for p in space.parameters if p.name in ignored}
    return {k: first_choice.get(k, v) for k, v in params.items()}


def config_key(params: dict, space) -> str:
    return json.dumps({k: v for k, v in sorted(canonical(params, space).items()) if k not in space.fixed})


class Table:
    """Configuration -> {cache key, per-size simulated times | infeasible reason}, on disk as JSON."""

    def __init__(self, space, collective: str, cache_dir: Path, tables: Path | None = None) -> None:
        self.space, self.collective = space, collective
        self.graph = space.graph()
        self.topology = fingerprint(self.graph)
        tables = tables or cache_dir
        tables.mkdir(parents=True, exist_ok=True)
        self.path = tables / f"{space.name}-{space.fixed['engine']}-{collective}-{self.topology}.json"
        self.synth_cache = SynthesisCache(cache_dir / "synthesis")
        self.rows: dict[str, dict] = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.ref = compute_reference(self.graph, collective, space.sizes, "sim")
        self.new = 0
        self.seconds = 0.0

    def key_of(self, params: dict) -> str:
        full = {**self.space.fixed, **params}
        st = settings(self.space, full)
        return cache_key(self.collective, sketch_key(params_to_sketch(self.space, full)), self.topology,
                         synth_options(st))

    def safe_key(self, params: dict) -> str:
        """The cache key, or one naming the configuration when its knobs make no sketch (an invalid sender map)."""
        try:
            return self.key_of(params)
        except InputError:
            return "invalid " + config_key(params, self.space)

    def get(self, params: dict) -> dict:
        k = config_key(params, self.space)
        row = self.rows.get(k)
        if row is None:
            row = self.rows[k] = self._evaluate(canonical(params, self.space))
            self.new += 1
            if self.new % 25 == 0:
                self.save()
        return row

    def _evaluate(self, params: dict) -> dict:
        full = {**self.space.fixed, **params}
        start = time.perf_counter()
        try:
            st = settings(self.space, full)
            synth = synthesize_cached(self.graph, self.collective, params_to_sketch(self.space, full),
                                      synth_options(st), self.synth_cache)
        except (InfeasibleError, InputError, VerificationError) as err:
            self.seconds += time.perf_counter() - start
            return {"cache_key": self.safe_key(params), "infeasible": str(err)[:300]}
        times = simulate_times(synth.algorithm, self.graph, self.space.sizes, st.protocol, st.instances)
        took = time.perf_counter() - start
        self.seconds += took
        return {"cache_key": synth.key, "times": times, "seconds": round(took, 3)}

    def save(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.rows))
        tmp.replace(self.path)

    def score(self, row: dict) -> float:
        """The objective tune gives the sampler: geomean over sizes of time / best baseline."""
        results = size_results(row["times"], self.ref, self.collective, self.graph.number_of_nodes(), simulated=True)
        return score(results)

    def relative(self, row: dict) -> list[float]:
        """Time / best baseline per size (what the band objectives average)."""
        return [t / self.ref.best(i, True)[1] for i, t in enumerate(row["times"])]


# --------------------------------------------------------------------------- samplers under test

@dataclass(frozen=True)
class Variant:
    name: str
    make: Callable[[int], Any]
    bands: bool = False      # multi-objective: one geomean per size band (what the export picks per size)


def bands_of(sizes) -> list[list[int]]:
    """Size indices in three bands (small, middle, large), cut as the banded sampler cuts them."""
    return [list(band) for band in bands(range(len(sizes)), 3)]


def variants() -> dict[str, Variant]:
    import optuna.samplers as s

    from autotaccl.tuning.lean import LeanSampler

    def tpe_mv(seed, space):
        return s.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=5, constant_liar=True)

    def lean(make):
        return lambda seed, space: LeanSampler(make(seed, space), space.fixed)

    random_ = lambda seed, space: s.RandomSampler(seed=seed)            # noqa: E731
    banded = lambda seed, space: BandedSampler(space.sizes, seed=seed)  # noqa: E731
    return {v.name: v for v in (
        Variant("random", random_),
        Variant("tpe-univariate", lambda seed, space: s.TPESampler(seed=seed, multivariate=False,
                                                                   constant_liar=True)),
        Variant("tpe-mv", tpe_mv),
        Variant("qmc", lambda seed, space: s.QMCSampler(seed=seed, scramble=True)),
        Variant("tpe-bands", tpe_mv, bands=True),
        Variant("banded", banded),
        Variant("lean-random", lean(random_)),
        Variant("lean-tpe-mv", lean(tpe_mv)),
        Variant("lean-banded", lean(banded)),
        Variant("lean-sized", lean(lambda seed, space: BandedSampler(space.sizes, count=len(space.sizes), seed=seed))),
        Variant("lean-sized3", lean(lambda seed, space: BandedSampler(space.sizes, count=len(space.sizes), seed=seed,
                                                                      n_startup_trials=3))),
        Variant("lean-banded5", lean(lambda seed, space: BandedSampler(space.sizes, count=5, seed=seed))),
        Variant("lean-qmc", lean(lambda seed, space: s.QMCSampler(seed=seed, scramble=True))),
        Variant("lean-tpe", lean(lambda seed, space: s.TPESampler(seed=seed, multivariate=False, constant_liar=True))),
        Variant("tpe", lambda seed, space: make_sampler("tpe", seed, space.sizes, space.fixed)),
        Variant("lean", lambda seed, space: make_sampler("lean", seed, space.sizes, space.fixed)),
        Variant("default", lambda seed, space: make_sampler(DEFAULT, seed, space.sizes, space.fixed)),
    )}


@dataclass
class Run:
    times: list[list[float] | None]   # per trial: simulated time per size (None: infeasible)
    distinct: list[int]               # distinct cache keys evaluated after each trial

    def quality(self, best: list[float]) -> list[float]:
        """After each trial: geomean over sizes of best known / best so far (0 until one is feasible)."""
        so_far = [math.inf] * len(best)
        out = []
        for times in self.times:
            if times is not None:
                so_far = [min(a, b) for a, b in zip(so_far, times)]
            out.append(quality(so_far, best))
        return out


def replay(table: Table, variant: Variant, seed: int, trials: int) -> Run:
    """One sweep of ``trials`` trials on the table, as tune runs it: seeds first, repeats handled."""
    space = table.space
    directions = ["minimize"] * 3 if variant.bands else ["minimize"]
    sampler = variant.make(seed, space)
    study = optuna.create_study(sampler=sampler, directions=directions)
    seed_study(study, space, table.graph, table.collective)          # tune's seeds, as tune queues them
    seen: set[str] = set()
    run = Run([], [])
    for n in range(trials):
        trial = study.ask()
        params = sample(trial, space)
        if is_repeat(study, params, space) and stuck(study):                     # as tune's objective does
            enqueue_unseen(study, space, seed=seed * 100_003 + n)
        row = table.get({k: v for k, v in params.items() if k not in space.fixed})
        seen.add(row["cache_key"])
        if "times" not in row:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            run.times.append(None)
        else:
            if variant.bands:
                rel = table.relative(row)
                study.tell(trial, [math.exp(statistics.fmean(math.log(rel[i]) for i in band))
                                   for band in bands_of(space.sizes)])
            else:
                trial.set_user_attr("results", [{"size": size, "relative": r}      # what banded reads
                                                for size, r in zip(space.sizes, table.relative(row))])
                study.tell(trial, table.score(row))
            run.times.append(row["times"])
        run.distinct.append(len(seen))
    return run


def quality(so_far: list[float], best: list[float]) -> float:
    if any(math.isinf(t) for t in so_far):
        return 0.0
    return math.exp(statistics.fmean(math.log(b / t) for b, t in zip(best, so_far)))


def first(curve: list[float], run: Run, goal: float) -> tuple[int, int] | None:
    """(trials, distinct evaluations) until the quality is within ``goal`` of the best known."""
    for i, q in enumerate(curve):
        if q >= 1 / (1 + goal) - 1e-12:
            return i + 1, run.distinct[i]
    return None


# --------------------------------------------------------------------------- a modelled cluster

# tables of one host (same machine, nodes and NCCL) run with another algorithm or collective (their `#` headers):
# the difference of their errors at a size and protocol is what the simulator gets wrong per algorithm
SAME_HOST = (("06", "07", "NCCL_ALGO unset (NVLS) vs NCCL_ALGO=RING, the same two nodes"),
             ("03", "04", "AllReduce vs AllGather, ring, the same host and run directory"),
             ("24", "25", "AllReduce vs AllGather, the same SuperBench host"))


@dataclass(frozen=True)
class Errors:
    """What a real runner's times differ from the simulator's by: ``pool`` holds log(measured / simulated) per
    size on the public tables the fit did not see, of the same scale and software (benchmarks/fidelity.py's
    targets); ``own`` is the share of its variance that is each algorithm's own (the rest shared by the
    algorithms of one protocol at one size), fitted on the SAME_HOST pairs."""

    pool: list[float]
    own: float
    fit: str


def table_errors() -> dict[str, tuple[bool, list[tuple[float, str]]]]:
    """Per public table (its two-digit name): (in the pool?, [(log(measured / simulated), NCCL's protocol) per
    size]), the simulator calibrated on its machine's first table."""
    import fidelity
    from autotaccl.model.topology import build_topology
    from runners.calibrate import calibrate

    out = {}
    for _machine, hw, tables in fidelity.GROUPS:
        base = fidelity.shipped(hw)
        name, nodes, algos, _ = tables[0]
        cal = calibrate(build_topology(base, nodes), [fidelity.observation(name, algos)])
        for n, (name, nodes, algos, why) in enumerate(tables):
            errs = fidelity.errors(cal.profile, nodes, fidelity.observation(name, algos))
            out[name[:2]] = (n > 0 and not why, {s: (math.log(m / t), how.split("/")[1]) for s, m, t, how in errs})
    return out


def error_pool() -> Errors:
    """The pool and its split (Errors): per SAME_HOST pair, d = the difference of the two tables' errors at each
    size where NCCL's model picks one protocol for both; the per-algorithm variance is mean(d^2) / 2."""
    tables = table_errors()
    pool = [e for kept, errs in tables.values() if kept for e, _p in errs.values()]
    diffs, parts = [], []
    for a, b, what in SAME_HOST:
        ea, eb = tables[a][1], tables[b][1]
        d = [ea[s][0] - eb[s][0] for s in ea.keys() & eb.keys() if ea[s][1] == eb[s][1]]
        diffs += d
        parts.append(f"{a}/{b} ({what}): {len(d)} sizes, {statistics.fmean(x * x for x in d) / 2:.4f}")
    own_var, total = statistics.fmean(x * x for x in diffs) / 2, statistics.pvariance(pool)
    fit = (f"per-algorithm variance {own_var:.4f} (sd {math.sqrt(own_var):.3f}) of the pool's {total:.4f}, the rest "
           f"({total - own_var:.4f}, sd {math.sqrt(max(0.0, total - own_var)):.3f}) shared per (protocol, size); fitted "
           f"on the tables of one host run another way: " + "; ".join(parts) + " (a pair's first table is its fit "
           f"where it is one: its residual is small, so the per-algorithm part is if anything overstated)")
    return Errors(pool, min(1.0, own_var / total), fit)


ERROR_MODELS = {"algorithm": "drawn once per (algorithm, size, world): every algorithm's error its own",
                "protocol": "drawn once per (protocol, size, world): the algorithms of one protocol share it",
                "mixed": "the sum of a part drawn per (protocol, size, world) and one per (algorithm, size, world), "
                         "their variances as fitted on the public tables (below)"}


class World:
    """One modelled cluster: an algorithm's measured time at a size = its simulated time x exp(e), e drawn from
    the pool as ``model`` says (ERROR_MODELS); ``mixed`` scales a shared and an own draw to the fitted split."""

    def __init__(self, errors: Errors, seed: int, model: str) -> None:
        self.pool, self.seed, self.model = errors.pool, seed, model
        own = {"algorithm": 1.0, "protocol": 0.0}.get(model, errors.own)
        self.weights = (math.sqrt(1 - own), math.sqrt(own))

    def draw(self, who: str, i: int) -> float:
        import hashlib

        h = int.from_bytes(hashlib.blake2b(f"{who}|{i}|{self.seed}".encode(), digest_size=8).digest(), "big")
        return self.pool[h % len(self.pool)]

    def measure(self, config: str, row: dict) -> list[float]:
        protocol = json.loads(config).get("protocol", "")
        shared, own = self.weights
        return [t * math.exp((shared and shared * self.draw(protocol, i)) + (own and own * self.draw(row["cache_key"], i)))
                for i, t in enumerate(row["times"])]

    def best(self, table: Table) -> list[float]:
        rows = [self.measure(k, r) for k, r in table.rows.items() if "times" in r]
        return [min(ts) for ts in zip(*rows)]


def oracle(table: Table, errors: Errors, model: str, worlds: dict[int, World], budget: int, draws: int = 48) -> float:
    """The ceiling of a policy that sees only simulated times: the ``budget`` algorithms chosen greedily to
    maximize the expected quality over ``draws`` fresh worlds of ``model`` (knowing the model, not the draws),
    then scored in ``worlds`` (median quality). No measurement informs the choice."""
    import numpy as np

    rows = [(k, r) for k, r in table.rows.items() if "times" in r]

    def measured(world: World):
        return np.log([world.measure(k, r) for k, r in rows])       # rows x sizes

    def qualities(logs, chosen):
        best = logs.min(axis=1)                                      # worlds x sizes
        return np.exp((best - logs[:, chosen].min(axis=1)).mean(axis=1))

    train = np.stack([measured(World(errors, 10_000 + d, model)) for d in range(draws)])
    chosen: list[int] = []
    so_far = np.full(train.shape[::2], np.inf)                           # worlds x sizes
    best = train.min(axis=1)
    for _ in range(min(budget, len(rows))):
        gain = np.exp((best[:, None, :] - np.minimum(so_far[:, None, :], train)).mean(axis=2)).mean(axis=0)
        gain[chosen] = -1
        pick = int(gain.argmax())
        chosen.append(pick)
        so_far = np.minimum(so_far, train[:, pick])
    test = np.stack([measured(w) for w in worlds.values()])
    return float(np.median(qualities(test, chosen)))


@dataclass
class MeasuredRun:
    times: list[list[float]]     # per measured trial: its measured time per size
    simulated: list[int]         # trials (all simulated) up to each measured one

    def quality(self, best: list[float], cap: int) -> list[float]:
        """After each of ``cap`` measured trials (the last value kept once the sweep ran out of trials)."""
        so_far, out = [math.inf] * len(best), []
        for times in self.times:
            so_far = [min(a, b) for a, b in zip(so_far, times)]
            out.append(quality(so_far, best))
        return (out + [out[-1] if out else 0.0] * cap)[:cap]


def parse_measured(name: str) -> tuple[str, float | None, float]:
    """``sampler`` (every trial measured) or ``sampler@sim[:margin[:explore]]`` (the simulator decides, as tune
    does): (sampler, margin or None, share of the trials simulated only first); tune's defaults where not given."""
    base, _, fid = name.partition("@")
    if not fid:
        return base, None, 0.0
    kind, _, rest = fid.partition(":")
    margin, _, explore = rest.partition(":")
    if kind != "sim":
        raise SystemExit(f"--measured: {name!r}: expected SAMPLER or SAMPLER@sim[:MARGIN[:EXPLORE]]")
    return base, float(margin) if margin else MARGIN, float(explore) if explore else EXPLORE


def replay_measured(table: Table, variant: Variant, margin: float | None, explore: float, world: World, seed: int,
                    cap: int, sim_cap: int) -> MeasuredRun:
    """A sweep with a real runner on the modelled cluster, until ``cap`` measurements or ``sim_cap`` trials.

    ``margin`` None: every new algorithm is measured; else the rule tune's objective applies (prefilter.decide,
    the first ``explore`` share of ``sim_cap`` simulated only). An algorithm measured already is not measured
    again (its measurement is reused, as in tune, for free)."""
    space = table.space
    study = optuna.create_study(sampler=variant.make(seed, space), directions=["minimize"])
    seed_study(study, space, table.graph, table.collective)
    first = prefilter.explore_trials(explore, sim_cap)
    run = MeasuredRun([], [])
    for n in range(sim_cap):
        if len(run.times) >= cap:
            break
        trial = study.ask()
        params = sample(trial, space)
        if is_repeat(study, params, space) and stuck(study):
            enqueue_unseen(study, space, seed=seed * 100_003 + n)
        config = {k: v for k, v in params.items() if k not in space.fixed}
        row = table.get(config)
        if "times" not in row:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        trial.set_user_attr("cache_key", row["cache_key"])
        trial.set_user_attr("sim_times", row["times"])
        trial.set_user_attr("protocol", settings(space, {**space.fixed, **config}).protocol)
        done = prefilter.measured(study)
        if (same := prefilter.twin(done, row["cache_key"])) is not None:
            for key in ("fidelity", "results"):                 # its measurement reused, as tune does
                trial.set_user_attr(key, same.user_attrs[key])
            trial.set_user_attr("same_as", same.number)
            study.tell(trial, same.value)
            continue
        sim_rel = table.relative(row)
        if margin is not None and not prefilter.decide(study, done, trial.number, trial.user_attrs, space.sizes, margin,
                                                       first, sim_cap - first)[0]:
            trial.set_user_attr("results", [{"size": s, "relative": r} for s, r in zip(space.sizes, sim_rel)])
            trial.report(table.score(row), 0)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        times = world.measure(config_key(config, space), row)
        rel = [m / t * r for m, t, r in zip(times, row["times"], sim_rel)]   # against the simulated baseline
        trial.set_user_attr("fidelity", "modelled")
        trial.set_user_attr("results", [{"size": s, "relative": r, "time_us": m}
                                        for s, r, m in zip(space.sizes, rel, times)])
        study.tell(trial, math.exp(statistics.fmean(math.log(r) for r in rel)))
        run.times.append(times)
        run.simulated.append(n + 1)
    return run


def measured_section(table: Table, args, names: list[str], errors: Errors, model: str) -> list[str]:
    """The measured-trial table of a section: what a sweep with a real runner pays for."""
    all_variants = variants()
    cap, sim_cap = args.trials, args.sim_trials
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    worlds = {s: World(errors, s, model) for s in seeds}
    bests = {s: w.best(table) for s, w in worlds.items()}
    start = time.perf_counter()
    runs = {}
    for name in names:
        base, margin, explore = parse_measured(name)
        runs[name] = {s: replay_measured(table, all_variants[base], margin, explore, worlds[s], s, cap, sim_cap)
                      for s in seeds}
    wall = time.perf_counter() - start
    ceiling = oracle(table, errors, model, worlds, 30)
    pool = errors.pool
    lines = ["", f"### Measured trials, error model `{model}`", "",
             f"A modelled cluster ({len(pool)} errors, {args.seeds} worlds = seeds, "
             f"{cap} measurements or {sim_cap} trials per sweep, {wall:.0f} s): a measured time is the simulated "
             f"time x exp(e), e {ERROR_MODELS[model]}, from log(measured / simulated) per size on the public "
             f"tables of benchmarks/fidelity.py's targets (median |e| {statistics.median(abs(e) for e in pool):.3f}, "
             f"sd {statistics.pstdev(pool):.3f})" + (f"; {errors.fit}" if model == "mixed" else "") + ". Best known = "
             f"best modelled measurement per size over the table. `X` = sampler X, every new algorithm measured; "
             f"`X@sim[:m[:x]]` = tune's rule with a real runner (prefilter.decide: the first x of the {sim_cap} trials "
             f"simulated only, then the explored algorithms measured one at a time in the order that most raises the "
             f"expected quality given the measurements so far, and any candidate that "
             f"could improve some size among its protocol's within m; defaults {MARGIN:g}, {EXPLORE:g}). 'trials' = "
             f"all trials (simulated) until then. Oracle: the best 30 algorithms a policy that sees only simulated "
             f"times can measure, chosen greedily for the expected quality over 48 other worlds of this model: "
             f"quality at 30 measured **{ceiling:.2%}** (median over these worlds): "
             f"{'95% is reachable' if ceiling >= 0.95 else 'so 95% is out of reach of any such policy'}.", "",
             "| sweep | measured to 2% | trials then | measured to 5% | measured to 0.5% | quality at 30 measured | "
             f"measured in {sim_cap} trials | random / sweep (measured to 2%) | random / sweep (to 5%) |",
             "|---|---|---|---|---|---|---|---|---|"]
    med, med5 = {}, {}
    per_seed = []
    for name, rs in runs.items():
        curves = {s: r.quality(bests[s], cap) for s, r in rs.items()}
        two = [first_at(curves[s], 0.02) for s in seeds]
        five = [first_at(curves[s], 0.05) for s in seeds]
        half = [first_at(curves[s], 0.005) for s in seeds]
        then = [rs[s].simulated[t - 1] if t else None for s, t in zip(seeds, two)]
        med[name], med5[name] = median_or_none(two, cap), median_or_none(five, cap)
        q30 = statistics.median(c[min(29, cap - 1)] for c in curves.values())
        lines.append(f"| {name} | {cell(med[name], cap)} | {cell(median_or_none(then, sim_cap), sim_cap)} | "
                     f"{cell(med5[name], cap)} | {cell(median_or_none(half, cap), cap)} | {q30:.2%} | "
                     f"{statistics.median(len(r.times) for r in rs.values()):g} | "
                     f"{med.get('random', math.nan) / med[name]:.2f} | {med5.get('random', math.nan) / med5[name]:.2f} |")
        per_seed.append(f"- {name}: " + " ".join("-" if t is None else f"{t}({n})" for t, n in zip(two, then)))
    return lines + ["", "per seed, measured (trials) to 2% ('-': not reached):", "", *per_seed, ""]


def first_at(curve: list[float], goal: float) -> int | None:
    for i, q in enumerate(curve):
        if q >= 1 / (1 + goal) - 1e-12:
            return i + 1
    return None


# --------------------------------------------------------------------------- output

def median_or_none(values: list[int | None], cap: int) -> float:
    """Median, counting a run that never got there as ``cap + 1`` (so the median is honest, marked '>')."""
    return statistics.median(cap + 1 if v is None else v for v in values)


def cell(value: float, cap: int) -> str:
    return f">{cap}" if value > cap else f"{value:g}"


def plot(curves: dict[str, list[list[float]]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, cs in curves.items():
        med = [statistics.median(1 - c[i] for c in cs) for i in range(len(cs[0]))]
        ax.plot(range(1, len(med) + 1), [100 * m for m in med], label=name)
    ax.axhline(100 * (1 - 1 / 1.02), color="k", ls="--", lw=0.8, label="2%")
    ax.set_yscale("symlog", linthresh=0.5)
    ax.set_xlabel("trials")
    ax.set_ylabel("median regret, % (1 - best known / best so far)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def defaults_line() -> str:
    """What `default` stands for in this run (tests/test_search_efficiency.py checks the written file against it)."""
    return f"`default` = tune's defaults: sampler `{DEFAULT}`, margin {MARGIN:g}, explore {EXPLORE:g}."


def machine() -> str:
    """The commit and machine (``benchmarks/record.py``'s) and the Optuna the samplers come from."""
    import record

    return f"commit {record.commit()}, {record.machine()}, Optuna {optuna.__version__}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", action="append", help="shipped space name or file (repeatable; default "
                                                         "dgx-a100x2 and dgx2x2)")
    parser.add_argument("--collective", action="append", help="collective (repeatable; default allgather, allreduce)")
    parser.add_argument("--engine", default="greedy", choices=["greedy", "milp"])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed, first-seed + 1, ...")
    parser.add_argument("--trials", type=int, default=60, help="trials per replay")
    parser.add_argument("--samplers", default="random,default,tpe,tpe-mv,banded,qmc,lean-random,lean-banded")
    parser.add_argument("--measured", default="random,default@sim,tpe@sim,lean@sim",
                        help="sweeps replayed against a modelled cluster, counting measured trials: SAMPLER (every "
                             "new algorithm measured) or SAMPLER@sim[:MARGIN[:EXPLORE]] (tune's rule with a real runner); '' for none")
    parser.add_argument("--error-model", default="mixed,protocol,algorithm",
                        help=f"how measured times err, comma-separated: {', '.join(ERROR_MODELS)}")
    parser.add_argument("--sim-trials", type=int, default=300, help="trials (simulated) per measured replay at most")
    parser.add_argument("--build", action="store_true", help="tabulate the whole space before replaying")
    parser.add_argument("--tabulated-only", action="store_true",
                        help="replay only sections whose table is complete (the others: their size so far)")
    parser.add_argument("--cache-dir", default=os.environ.get("AUTOTACCL_BENCH_CACHE",
                                                              str(Path.home() / ".cache" / "autotaccl-bench")))
    parser.add_argument("--tables", default=str(ROOT / "benchmarks" / "results" / "search_efficiency" / "tables"),
                        help="the lookup tables: the reference run, committed so a replay costs no rebuild (a table is named by "
                             "its topology's fingerprint; after a change to synthesis, rebuild into another directory)")
    parser.add_argument("--out", default="benchmarks/results/search_efficiency", help="plots go here")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/search_efficiency.md")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    import logging

    logging.getLogger("autotaccl").setLevel(logging.ERROR)
    chosen = [variants()[n] for n in args.samplers.split(",") if n]
    measured = [n for n in args.measured.split(",") if n]
    for n in measured:
        if parse_measured(n)[0] not in variants():
            raise SystemExit(f"--measured: {n!r}: no sampler {parse_measured(n)[0]!r}")
    args.pool = error_pool() if measured else Errors([], 0.0, "")
    args.measured_names = measured
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# Search efficiency (`benchmarks/search_efficiency.py`)", "",
             f"{machine()}. Replays of {args.seeds} seeds x {args.trials} trials per sampler on lookup tables "
             f"of the {args.engine} engine's part of each space (simulated times). Quality = geomean over sizes "
             f"of best known / best so far, per size as export picks; 'to 2%' = trials (distinct cache keys) "
             f"until quality >= 1/1.02; '>N' = not reached in N trials (counted as N+1 in medians). "
             f"{defaults_line()}"
             + (" Only the greedy engine's part of each space is enumerated: the MILP knobs (ordering, contiguity) "
                "take minutes a synthesis, and nothing here speaks for the MILP part." if args.engine == "greedy" else ""),
             ""]
    for space_name in args.space or ["dgx-a100x2", "dgx2x2"]:
        space = engine_part(space_name, args.engine)
        for collective in args.collective or ["allgather", "allreduce"]:
            lines += section(space, collective, args, chosen, out)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        (ROOT / "benchmarks" / "results" / "search_efficiency.md").write_text(text)
    return 0


def section(space, collective: str, args, chosen: list[Variant], out: Path) -> list[str]:
    table = Table(space, collective, Path(args.cache_dir), Path(args.tables))
    configs = enumerate_space(space)
    start = time.perf_counter()
    if args.build:
        for c in configs:
            table.get(c)
    distinct = {config_key(c, space) for c in configs}
    if args.tabulated_only and not distinct <= table.rows.keys():
        have = len(distinct & table.rows.keys())
        return [f"## {space.target_name} {collective} ({args.engine})", "",
                f"Not replayed: its table holds {have} of the {len(distinct)} algorithms of the space "
                f"({len(configs)} configurations); build it with `--build`.", ""]
    runs = {v.name: [replay(table, v, s, args.trials)
                     for s in range(args.first_seed, args.first_seed + args.seeds)] for v in chosen}
    table.save()
    wall = time.perf_counter() - start
    best = best_times(table)          # the best of every row tabulated: the reference run
    curves = {name: [r.quality(best) for r in rs] for name, rs in runs.items()}
    feasible = [r for r in table.rows.values() if "times" in r]
    keys = {r["cache_key"] for r in table.rows.values()}
    within = sum(quality(r["times"], best) >= 1 / 1.02 for r in feasible)
    bound = [s / b / 1e3 for s, b in zip(space.sizes, table.ref.bound_algbw)]   # µs at the bound's algbw
    title = f"{space.target_name} {collective} ({args.engine})"
    ignored = ", ".join(ENGINE_IGNORES.get(space.fixed["engine"], ())) or "none"
    png = out / f"{space.name}-{collective}.png"
    plot(curves, title, png)
    algorithms = {config_key(c, space) for c in configs}
    have = len(algorithms & table.rows.keys())
    covered = f"the whole space (all {have} algorithms: a full enumeration)" if have == len(algorithms) else \
        f"{have} of its {len(algorithms)} algorithms (those any replay, ever, asked for)"
    lines = [f"## {title}", "",
             f"space: {len(configs)} configurations, {len({table.safe_key(canonical(c, space)) for c in configs})} distinct cache keys (algorithms: the knobs the engine ignores, {ignored}, do not split one). "
             f"Best known = best per size over the table: {covered}, {len(feasible)} feasible, {len(keys)} cache "
             f"keys ({table.new} synthesized in this run, {table.seconds:.0f} s of synthesis + simulation; "
             f"the run took {wall:.0f} s; {recorded_cost(table)}). {within} of {len(feasible)} tabulated configurations "
             f"({100 * within / max(1, len(feasible)):.1f}%) are on their own within 2% of the best known.", "",
             "| size | best known (µs) | attainable bound (µs) | bound / best | algorithms within 2% at this size |",
             "|---|---|---|---|---|"]
    for i, (size, b, lim) in enumerate(zip(space.sizes, best, bound)):
        near = sum(r["times"][i] <= 1.02 * b for r in feasible)
        lines.append(f"| {format_size(size)} | {b:.2f} | {lim:.2f} | {lim / b:.1%} | "
                     f"{near} ({near / max(1, len(feasible)):.1%}) |")
    lines += ["", f"regret curve (median over seeds): `{png.as_posix()}`", "",
              "| sampler | trials to 2% | distinct to 2% | trials to 0.5% | distinct to 0.5% | "
              "quality at 30 trials | random / sampler (trials to 2%) |", "|---|---|---|---|---|---|---|"]
    cap = args.trials
    med = {}
    for name, rs in runs.items():
        two = [first(c, r, 0.02) for c, r in zip(curves[name], rs)]
        half = [first(c, r, 0.005) for c, r in zip(curves[name], rs)]
        med[name] = median_or_none([t and t[0] for t in two], cap)
        q30 = statistics.median(c[min(29, len(c) - 1)] for c in curves[name])
        lines.append(f"| {name} | {cell(med[name], cap)} | {cell(median_or_none([t and t[1] for t in two], cap), cap)} "
                     f"| {cell(median_or_none([t and t[0] for t in half], cap), cap)} | "
                     f"{cell(median_or_none([t and t[1] for t in half], cap), cap)} | {q30:.2%} | "
                     f"{med.get('random', math.nan) / med[name]:.2f} |")
    lines += ["", "per seed, trials (distinct) to 2% ('-': not reached):", ""]
    for name, rs in runs.items():
        per = " ".join("-" if t is None else f"{t[0]}({t[1]})"
                       for t in (first(c, r, 0.02) for c, r in zip(curves[name], rs)))
        lines.append(f"- {name}: {per}")
    lines.append("")
    for model in args.error_model.split(",") if args.measured_names else ():
        lines += measured_section(table, args, args.measured_names, args.pool, model)
    print("\n".join(lines), file=sys.stderr)
    sys.stdout.flush()
    return lines


def recorded_cost(table: Table) -> str:
    """What building the table cost, as far as its rows recorded it (rows built before they did are not)."""
    costs = [r["seconds"] for r in table.rows.values() if "seconds" in r]
    return (f"the table's {len(costs)} rows that record it took {sum(costs):.0f} s of synthesis + simulation to build"
            if costs else "the table's rows do not record their build cost")


def best_times(table: Table) -> list[float]:
    rows = [r["times"] for r in table.rows.values() if "times" in r]
    return [min(ts) for ts in zip(*rows)] if rows else [math.inf] * len(table.space.sizes)


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
