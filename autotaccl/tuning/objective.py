"""The Optuna objective of a sweep: sample -> sketch -> synthesize (cached) -> measure -> score -> MLflow.

Two fidelities: every trial is simulated; with a real-hardware runner, the first ``explore`` share of the trials
is simulated only, then the simulator's best per size and protocol are measured and so is any later candidate
that could improve some size among its protocol's (tuning/prefilter.py); the rest are pruned with a
``prune_reason``; each measurement checks the simulator's ranking (``sim_rank_agreement``).
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import optuna
from optuna.trial import TrialState

from runners import build_options, get_runner
from runners.launch import JobError

from .. import faults, tracking
from ..cluster.lease import measuring
from ..cluster.loop import sample_index
from ..documents import yaml_text
from ..errors import InfeasibleError, InputError
from ..formats.msccl import LoweringError
from ..model.algorithm import VerificationError, to_json
from ..model.hardware import profile_to_dict
from ..model.topology import fingerprint
from ..safety import anchored, relative_inside
from ..tracking import outbox
from .cache import SynthesisCache
from .evaluate import (SizeResult, WrongResults, results_frame, runner_times, score, simulate_times, size_results,
                       switch_candidate, switch_logged, synth_options, synthesize_cached)
from .explore import enqueue_unseen, is_repeat, stuck
from . import prefilter
from .lowered import lower_xml, lowering, unmeasured_settings
from .reference import Reference, load_reference
from .space import load_space, params_to_sketch, settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepConfig:
    """Everything a worker needs to join a sweep (the driver writes it as JSON)."""

    space: str
    collective: str
    out_dir: str
    storage: str
    study_name: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    reference: str
    runner: str = "sim"
    runner_options: Mapping[str, Any] = field(default_factory=dict)   # runners.options_dict of its Options
    margin: float = 0.0
    explore: float = 0.5            # with a real runner: the share of the trials simulated only, first
    synth_time_limit: float | None = None
    trials: int = 20
    timeout: float | None = None
    sampler: str = "random"
    seed: int | None = None
    heartbeat: float = 60.0         # seconds between a running trial's heartbeats
    until: float | None = None      # stop once every size is within this share of its bound (tuning/done.py)
    patience: int | None = None     # stop once this many finished trials in a row improved no size

    def save(self, path: Path) -> None:
        """Written to ``OUT/sweeps/<study>.json``, every path inside OUT relative to OUT (a copied or moved
        run directory names its own stores), atomically."""
        base = Path(path).resolve().parent.parent
        data = asdict(self)
        for key in PATHS:
            data[key] = relative_inside(data[key], base)
        if (db := tracking.sqlite_path(self.tracking_uri)) is not None and relative_inside(str(db), base) != str(db):
            data["tracking_uri"] = "sqlite:///" + relative_inside(str(db), base)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "SweepConfig":
        """The record at ``path``; a file that is not one (cut short, overwritten) is an InputError naming it."""
        try:
            data = json.loads(Path(path).read_text())
            base = Path(path).resolve().parent.parent
            for key in PATHS:
                data[key] = anchored(data[key], base)
            db = tracking.sqlite_path(data["tracking_uri"])
            if db is not None and not db.is_absolute():
                data["tracking_uri"] = tracking.sqlite_uri(base / db)
            return cls(**data)
        except (ValueError, TypeError, KeyError, AttributeError) as err:   # JSONDecodeError is a ValueError
            raise InputError(str(path), "sweep record", f"the JSON record `autotaccl tune` writes ({err}); run the "
                             f"same tune with --repair to rebuild it from the Optuna study") from None


PATHS = ("space", "out_dir", "storage", "reference")     # SweepConfig fields that name files


class TrialFailed(RuntimeError):
    """The configuration produced no usable algorithm (infeasible, failed verification, wrong data)."""


class Objective:
    def __init__(self, config: SweepConfig) -> None:
        self.config = config
        self.space = load_space(config.space)
        self.graph = self.space.graph()
        self.topology = fingerprint(self.graph)
        self.hardware = yaml_text(profile_to_dict(self.space.profile))    # logged with every trial
        self.ranks = self.graph.number_of_nodes()
        self.reference: Reference = load_reference(Path(config.reference))
        self.runner = get_runner(config.runner)
        self.options = build_options(self.runner, config.runner_options)
        self.lower = lowering(self.runner)
        self.unmeasured = unmeasured_settings(self.runner)   # run as Simple x 1 (run_settings)
        self.cache = SynthesisCache(Path(config.out_dir) / "cache")
        self.client = tracking.MlflowClient(tracking_uri=config.tracking_uri)

    # ------------------------------------------------------------------ the objective
    def __call__(self, trial: optuna.Trial) -> float:
        """Evaluate a trial the worker loop admitted and sampled (an interruption is the loop's to record);
        stop the study once it is done (``until``, ``patience``), counting this trial's outcome."""
        try:
            value = self._evaluate(trial)
        except optuna.TrialPruned:
            self._stop_if_done(trial, TrialState.PRUNED)
            raise
        except TrialFailed:
            self._stop_if_done(trial, TrialState.FAIL)
            raise
        self._stop_if_done(trial, TrialState.COMPLETE)
        return value

    def _stop_if_done(self, trial: optuna.Trial, state: TrialState) -> None:
        if self.config.until is None and self.config.patience is None:
            return
        from .done import history, outcome, stop_reason

        runs = [*history(trial.study), (trial.number, outcome(trial, state))]
        reason = stop_reason(runs, self.reference.sizes, self.config.until, self.config.patience)
        if reason is not None:
            log.warning("%s: stopping after trial %d: %s", self.config.study_name, trial.number, reason)
            trial.study.stop()

    def _evaluate(self, trial: optuna.Trial) -> float:
        cfg = self.config
        params = {**self.space.fixed, **trial.params}
        if is_repeat(trial.study, params, self.space):
            trial.set_user_attr("repeat", True)
            if stuck(trial.study):
                enqueue_unseen(trial.study, self.space, seed=sample_index(trial.study, trial.number))
        record: dict[str, Any] = {"params": params}
        try:
            sketch = params_to_sketch(self.space, params)
            st = settings(self.space, params)
            record["sketch"] = sketch
            record["settings"] = st
            record["options"] = options = synth_options(st, cfg.synth_time_limit, self.unmeasured)
            faults.point("trial.synthesis")
            synth = synthesize_cached(self.graph, cfg.collective, sketch, options, self.cache)
        except (InfeasibleError, InputError, VerificationError) as err:
            self._fail(trial, record, f"synthesis: {err}")
        record["synth"] = synth
        trial.set_user_attr("sketch_key", synth.sketch_key)
        trial.set_user_attr("cache_key", synth.key)
        trial.set_user_attr("cache_hit", synth.cache_hit)
        trial.set_user_attr("synth_seconds", synth.seconds)
        trial.set_user_attr("solver_status", synth.status)
        trial.set_user_attr("steps", synth.algorithm.num_steps)          # tie-breaks of tuning/winners.py
        trial.set_user_attr("transfers", len(synth.algorithm.transfers))

        sim_times = simulate_times(synth.algorithm, self.graph, self.reference.sizes, st.protocol, st.instances)
        sim = size_results(sim_times, self.reference, cfg.collective, self.ranks, simulated=True)
        sim_score = score(sim)
        trial.set_user_attr("sim_score", sim_score)
        trial.set_user_attr("sim_times", list(sim_times))
        record["results"], record["fidelity"] = sim, "sim"
        record["switch"] = self._switch(trial, sketch, st)
        if self.runner.real_hardware:
            done = prefilter.measured(trial.study)
            same = prefilter.twin(done, synth.key)
            if same is not None:     # the same algorithm: its measurement, not a second one
                trial.set_user_attr("same_as", same.number)
                value = same.value
                trial.set_user_attr("fidelity", cfg.runner)
                trial.set_user_attr("results", same.user_attrs["results"])
                trial.set_user_attr("verified", True)
                record["results"] = [SizeResult(**r) for r in same.user_attrs["results"]]
                record["fidelity"] = cfg.runner
                self._log(trial, record, "COMPLETE", value=value)
                return value
            trial.set_user_attr("protocol", st.protocol)
            explore = prefilter.explore_trials(cfg.explore, cfg.trials)
            measure, why = prefilter.decide(trial.study, done, trial.number, trial.user_attrs, self.reference.sizes,
                                            cfg.margin, explore, cfg.trials - trial.number - 1)
            if not measure:
                reason = f"{why}; not measured with the {cfg.runner} runner"
                trial.set_user_attr("prune_reason", reason)
                trial.set_user_attr("results", [asdict(r) for r in sim])
                trial.report(sim_score, 0)
                self._log(trial, record, "PRUNED", reason=reason)
                raise optuna.TrialPruned(reason)
            try:
                text = None
                if self.lower is not None:
                    text = self.lower(synth.algorithm, st.protocol, st.instances)
                with measuring(cfg.storage, cfg.out_dir, self.runner.hosts(self.options)) as window:
                    trial.set_user_attr("measure_hosts", list(window.hosts))
                    times, frame = runner_times(synth.algorithm, self.reference.sizes, self.runner, self.options, text)
                trial.set_user_attr("measure_window", [window.start, window.end])
            except (WrongResults, LoweringError, JobError) as err:   # bad runner options (InputError) stop the sweep
                self._fail(trial, record, f"{cfg.runner} runner: {err}")
            record["results"] = size_results(times, self.reference, cfg.collective, self.ranks, simulated=False)
            record["fidelity"], record["raw"] = cfg.runner, frame
            self._check_ranking(trial, done, sim_times, times, why)
        value = score(record["results"])
        trial.set_user_attr("fidelity", record["fidelity"])
        trial.set_user_attr("results", [asdict(r) for r in record["results"]])
        trial.set_user_attr("verified", True)
        self._log(trial, record, "COMPLETE", value=value)
        return value

    def _switch(self, trial, sketch, st):
        """The trial's switch candidate (``evaluate.switch_candidate``; None: none), kept in its user attrs."""
        candidate = switch_candidate(self.graph, self.config.collective, sketch, st, self.runner, self.cache,
                                     self.reference, self.config.synth_time_limit)
        for key, value in (candidate.attrs() if candidate else {}).items():
            trial.set_user_attr(key, value)
        return candidate

    def _check_ranking(self, trial: optuna.Trial, done, sim_times, times, why: str) -> None:
        """Log how well the simulator has ranked the measured candidates so far, this one included."""
        pairs = [(t.user_attrs["sim_times"], [r["time_us"] for r in t.user_attrs["results"]]) for t in done]
        agreement = prefilter.rank_agreement([*pairs, (list(sim_times), list(times))])
        trial.set_user_attr("measured_because", why)
        if agreement is None:
            return
        trial.set_user_attr("sim_rank_agreement", agreement)
        log.log(logging.WARNING if agreement < 0.6 and len(pairs) >= 4 else logging.INFO,
                "%s: trial %d measured (%s); the simulator orders the %d measured candidates as the %s runner does "
                "in %.0f%% of pairs per size", self.config.study_name, trial.number, why, len(pairs) + 1,
                self.config.runner, 100 * agreement)

    def _fail(self, trial: optuna.Trial, record: dict, reason: str) -> None:
        trial.set_user_attr("failure_reason", reason)
        self._log(trial, record, "FAIL", reason=reason)
        raise TrialFailed(reason)

    def relog(self, trial: optuna.trial.FrozenTrial) -> None:
        """Log a COMPLETE trial's MLflow run again from what the study kept (its parameters, results and
        attributes; the algorithm from the synthesis cache, or synthesized again): the run a lost or damaged
        store had. A real runner's raw output is not in the study, so that one artifact is not rebuilt."""
        from dataclasses import replace

        params = {**self.space.fixed, **trial.params}
        sketch = params_to_sketch(self.space, params)
        st = settings(self.space, params)
        options = synth_options(st, self.config.synth_time_limit, self.unmeasured)
        synth = synthesize_cached(self.graph, self.config.collective, sketch, options, self.cache)
        attrs = trial.user_attrs
        synth = replace(synth, cache_hit=attrs.get("cache_hit", synth.cache_hit), status=attrs.get("solver_status", synth.status),
                        seconds=attrs.get("synth_seconds", synth.seconds))
        record = {"params": params, "sketch": sketch, "settings": st, "options": options, "synth": synth,
                  "results": [SizeResult(**r) for r in attrs["results"]], "fidelity": attrs.get("fidelity", "sim"),
                  "switch": self._switch(_Kept(trial), sketch, st)}
        self._log(_Kept(trial), record, "COMPLETE", value=trial.value)

    # ------------------------------------------------------------------ MLflow
    def _log(self, trial: optuna.Trial, record: dict, state: str, value: float | None = None,
             reason: str = "") -> None:
        from ..sketch import sketch_to_dict

        cfg = self.config
        params: dict[str, Any] = {k: v for k, v in record["params"].items()}
        params.update(collective=cfg.collective, target=self.space.target_name, runner=cfg.runner,
                      nodes=self.space.nodes, topology=self.topology)
        tags = {tracking.KIND: "trial", "state": state, "optuna.trial": trial.number, "optuna.study": cfg.study_name,
                "collective": cfg.collective, "target": self.space.target_name,
                "rank": trial.user_attrs.get("retry_of", trial.number)}     # a redone trial keeps its place
        if reason:
            tags["failure_reason" if state == "FAIL" else "prune_reason"] = reason[:5000]
        if "same_as" in trial.user_attrs:      # the measurement of that trial's algorithm, reused
            tags["same_as"] = trial.user_attrs["same_as"]
        metrics: dict[str, float] = {}
        artifacts: dict[str, str | bytes] = {"hardware.yaml": self.hardware}    # with nodes: the topology
        if "sketch" in record:      # the sketch in full; its searched knobs are params under their own names
            artifacts["sketch.json"] = json.dumps(sketch_to_dict(record["sketch"]), indent=1)
        if "settings" in record:    # each setting once, under its knob's name, also where the space left it default
            for knob, setting in asdict(record["settings"]).items():
                if setting is not None:
                    params.setdefault(knob, setting)
        if "options" in record:
            params.update({f"synth.{k}": v for k, v in record["options"].settings().items()})
        synth = record.get("synth")
        if synth is not None:
            tags.update(sketch_key=synth.sketch_key, cache_key=synth.key, solver_status=synth.status, cache_hit=str(synth.cache_hit).lower())
            metrics.update(synth_seconds=synth.seconds, model_variables=synth.variables,
                           model_constraints=synth.constraints, steps=synth.algorithm.num_steps,
                           transfers=len(synth.algorithm.transfers))
            artifacts["algorithm.json"] = json.dumps(to_json(synth.algorithm))
            if state == "COMPLETE":
                st = record["settings"]
                try:
                    artifacts["algorithm.xml"] = lower_xml(synth.algorithm, st.protocol, st.instances)
                except Exception as err:   # lowering is reported, never fatal to a measured trial
                    tags["xml_error"] = str(err)[:2000]
                    trial.set_user_attr("xml_error", str(err)[:2000])
                for logged, part in zip((metrics, artifacts, tags), switch_logged(record.get("switch"))):
                    logged.update(part)
        results: list[SizeResult] | None = record.get("results")
        curves: dict[str, list[tuple[int, float]]] = {}
        if results:
            frame = results_frame(results)
            metrics.update(tracking.size_metrics(frame.to_dict("records")))
            curves = tracking.size_curves(frame.to_dict("records"))
            metrics["sim_objective"] = trial.user_attrs.get("sim_score", score(results))
            if "sim_rank_agreement" in trial.user_attrs:
                metrics["sim_rank_agreement"] = trial.user_attrs["sim_rank_agreement"]
            metrics["bound_pct_mean"] = float(frame["bound_pct"].mean())
            artifacts["measurements.csv"] = frame.to_csv(index=False)
            if "raw" in record:
                artifacts[f"{cfg.runner}-raw.csv"] = record["raw"].to_csv(index=False)
                environment = record["raw"].attrs.get("environment")    # runner-filtered (NCCL_*, MSCCL*)
                if environment:
                    artifacts[f"{cfg.runner}-environment.json"] = json.dumps(environment, indent=1, sort_keys=True)
            artifacts["busbw.png"] = self._plot(trial.number, results)
        if value is not None:
            metrics["objective"] = value
            tags["fidelity"] = record["fidelity"]
        tags["verified"] = "true" if state == "COMPLETE" else "false"
        run_id = outbox.log_run(self.client, cfg.out_dir, cfg.experiment_id,
                                tracking.trial_run_name(trial.number, record["params"]),
                                key=outbox.trial_key(trial.number), parent_run_id=cfg.parent_run_id, params=params, metrics=metrics, tags=tags,
                                artifacts=artifacts, state=state, curves=curves)
        if run_id is None:       # the tracking server was unreachable: recorded locally, replayed later
            trial.set_user_attr("mlflow_pending", str(cfg.out_dir))
        else:
            trial.set_user_attr("mlflow_run_id", run_id)

    def _plot(self, number: int, results: list[SizeResult]) -> bytes:
        from ..tracking.plots import busbw_figure, png_bytes

        sizes = [r.size for r in results]
        factor = results[0].busbw / results[0].algbw
        series = {f"trial {number}": (sizes, [r.busbw for r in results]),
                  "best baseline": (sizes, [r.size / r.baseline_time_us / 1e3 * factor for r in results]),
                  "bound": (sizes, [b * factor for b in self.reference.bound_algbw])}
        title = f"{self.space.target_name} {self.config.collective}: trial {number}"
        return png_bytes(busbw_figure(series, title, {"bound": "k--", "best baseline": "s-"}))


class _Kept:
    """A finished trial as ``Objective._log`` sees a running one: its attributes stay as the study has them."""

    def __init__(self, trial: optuna.trial.FrozenTrial) -> None:
        self.number, self.params, self.user_attrs = trial.number, trial.params, trial.user_attrs

    def set_user_attr(self, key: str, value: Any) -> None:
        pass
