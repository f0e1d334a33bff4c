"""The sweep driver: prepare storage, tracking, references and seeds once, then run the workers.

Layout of a run directory (default ``./autotaccl-runs``)::

    optuna.journal          Optuna JournalFileBackend storage (safe for several workers, ecosystem.md §1.3)
    mlflow.db, mlartifacts/ MLflow store created once here, artifacts beside it
    cache/                  synthesized algorithms by configuration key (JSON)
    sweeps/<study>.json     the SweepConfig every worker of a study reads
    sweeps/<study>.reference.json   baselines and bound at each sweep size
    sweeps/<study>.space.yaml, .hardware.yaml   a space given as an object (not a file), for the workers
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import optuna
from optuna.trial import TrialState

from runners import Runner, build_options, get_runner, options_dict

from .. import tracking
from ..cluster.heartbeat import INTERVAL, open_storage  # RDB storages with heartbeats, or a journal
from ..cluster.lease import measuring
from ..documents import write_yaml
from ..errors import InputError, ParameterError
from ..model.algorithm import verify
from ..model.hardware import profile_to_dict
from ..safety import output_dir, safe_name, storage_url, tracking_uri
from .damage import check_run_dir
from .evaluate import runner_times
from .lowered import lowering
from .objective import Objective, SweepConfig, TrialFailed
from .records import log_baselines, reconcile, sweep_run
from .reference import compute_reference, load_reference, save_reference
from .samplers import SAMPLERS, Sampler, make_sampler
from .space import SearchSpace, load_space, sample, sketch_to_params, space_to_dict
from .study import open_study, seed
from .winners import Entry, pick, record, result_at, trial_entries

log = logging.getLogger(__name__)

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
WORKERS_PER_CORE = 4
MAX_WORKERS = 256


def max_workers() -> int:
    """How many worker processes one ``tune`` may start on this host (each synthesizes on a core)."""
    return min(MAX_WORKERS, WORKERS_PER_CORE * (os.cpu_count() or 1))


@dataclass(frozen=True)
class TuneRequest:
    """One sweep: a search space (a file, a shipped space's name or a :class:`SearchSpace`) and how to run
    and record its trials. Values are checked here (ParameterError ``TuneRequest.<field>``); paths and
    URLs when :func:`tune` starts."""

    space: str | Path | SearchSpace
    trials: int = 20
    timeout: float | None = None
    runner: str = "sim"
    runner_options: Any = field(default_factory=dict)     # option -> value, or the runner's Options dataclass
    storage: str | None = None
    study: str | None = None
    tracking_uri: str | None = None
    workers: int = 1
    sampler: Sampler = "random"    # explores widest, what the sim fidelity's shortlist draws on
    seed: int | None = None
    out: str | Path = "autotaccl-runs"
    resume: bool = False        # the study must exist already (several hosts: start one, --resume the rest)
    extend: bool = False        # the space may have grown (choices, ranges, sizes) since the study was made
    adopt: bool = False         # log into an experiment of the same name that another tool created
    repair: bool = False        # rebuild a damaged or missing MLflow store, damaged sweep records (tuning/damage.py)
    margin: float = 0.0         # with a real runner: measure what beats some size's best measured (prefilter.py)
    explore: float = 0.5        # with a real runner: the share of the trials simulated only, before measuring
    synth_time_limit: float | None = 60.0
    heartbeat: float = INTERVAL     # seconds between a running trial's heartbeats (silent for 3: failed, retried)
    until: float | None = None      # stop once every size is within this share of its attainable bound
    patience: int | None = None     # stop once this many finished trials in a row improved no size
    progress: Callable[[int, int, float | None], None] | None = None   # (done, requested, best) per trial

    def __post_init__(self) -> None:
        def fail(name: str, expected: str) -> ParameterError:
            return ParameterError(f"TuneRequest.{name}", str(getattr(self, name)), expected)

        def whole(value: Any) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        if not whole(self.trials) or self.trials < 1:
            raise fail("trials", "a whole number >= 1")
        if not whole(self.workers) or not 1 <= self.workers <= max_workers():
            raise fail("workers", f"a whole number from 1 to {max_workers()} ({WORKERS_PER_CORE} per core of this "
                                  f"host, at most {MAX_WORKERS}; start tune on more hosts for more)")
        if self.seed is not None and (not whole(self.seed) or not 0 <= self.seed < 2 ** 32):
            raise fail("seed", "a whole number from 0 to 4294967295")
        if self.timeout is not None and not self.timeout > 0:
            raise fail("timeout", "a positive number of seconds")
        if self.synth_time_limit is not None and not self.synth_time_limit > 0:
            raise fail("synth_time_limit", "a positive number of seconds")
        if not self.heartbeat >= 1:
            raise fail("heartbeat", "a number of seconds >= 1")
        if self.until is not None and not 0 < self.until <= 1:
            raise fail("until", "a share of the attainable bound in (0, 1], such as 0.98")
        if self.patience is not None and (not whole(self.patience) or self.patience < 1):
            raise fail("patience", "a whole number of trials >= 1")
        if not 0 <= self.margin <= 10:
            raise fail("margin", "a fraction such as 0.1")
        if not 0 <= self.explore < 1:
            raise fail("explore", "a share of the trials in [0, 1), such as 0.5")
        if self.sampler not in SAMPLERS:
            raise ParameterError("TuneRequest.sampler", repr(self.sampler), f"one of: {', '.join(SAMPLERS)}")
        if self.study is not None:
            try:
                safe_name(self.study, "", "")
            except InputError as err:
                raise ParameterError("TuneRequest.study", repr(self.study), err.expected) from None

    def check_paths(self) -> None:
        """The run directory, storage and tracking URI can be used (before anything is created)."""
        output_dir(str(self.out), "TuneRequest.out")
        if self.storage is not None:
            storage_url(self.storage, "TuneRequest.storage")
        if self.tracking_uri is not None:
            tracking.usable_store(tracking_uri(self.tracking_uri, "TuneRequest.tracking_uri"), "TuneRequest.tracking_uri")


@dataclass(frozen=True)
class SizeWinner:
    size: int
    winner: str                 # "trial N" or "baseline:<name>"
    time_us: float
    baseline: str
    baseline_time_us: float
    busbw: float
    bound_pct: float
    nccl_time_us: float | None = None   # stock NCCL as nccl-model predicts it (None: no prediction)
    trial: int | str = ""               # the winner: Optuna trial number or the baseline's name

    @property
    def speedup(self) -> float:
        return self.baseline_time_us / self.time_us

    @property
    def speedup_vs_nccl(self) -> float | None:
        return None if self.nccl_time_us is None else self.nccl_time_us / self.time_us


@dataclass(frozen=True)
class StudySummary:
    study: str
    collective: str
    experiment_id: str
    parent_run_id: str
    counts: Mapping[str, int]
    best_value: float | None
    best_trial: int | None
    per_size: tuple[SizeWinner, ...]
    stopped: str = ""           # why the sweep stopped before --trials (--until, --patience), if it did

    @property
    def winners(self) -> list[dict]:
        return [record(self.collective, w.size, w.trial) for w in self.per_size]


# --------------------------------------------------------------------------- storage, sampler


def storage_spec(storage: str | None, out: Path) -> str:
    """A URL (``sqlite:///``, ``postgresql://``...) is used as given; anything else is a journal file path."""
    if storage is None:
        return str((out / "optuna.journal").resolve())
    return storage if "://" in storage else str(Path(storage).resolve())


def counted(trial: optuna.trial.FrozenTrial) -> bool:
    """A finished trial that counts towards --trials (an interrupted one is redone on resume)."""
    return trial.state in FINISHED and not trial.user_attrs.get("interrupted")


# --------------------------------------------------------------------------- driver


def prepare(request: TuneRequest, space: SearchSpace, collective: str, client, out: Path, storage: str,
            runner: Runner, options: Any) -> tuple[SweepConfig, optuna.Study]:
    """Reference, study, seeds, experiment, parent run and baselines for one collective, by the driver (under
    the prepare lock). Each step checks what an earlier start left and does only what is missing, so a
    start cut short anywhere is finished by the next one; then MLflow is made to agree with the study."""
    name = space.experiment_name(collective)
    study_name = study_name_for(request, space, collective)
    sweeps = out / "sweeps"
    sweeps.mkdir(parents=True, exist_ok=True)
    graph = space.graph()
    config_path = sweeps / f"{study_name}.json"
    known = SweepConfig.load(config_path) if config_path.is_file() else None
    sampler = make_sampler(request.sampler, request.seed, space.sizes, space.fixed)
    study = open_study(storage, study_name, space, collective, graph, sampler, request.heartbeat, request.extend, known)
    space_path = space_file(request, space, sweeps, study_name)

    ref_path = sweeps / f"{study_name}.reference.json"
    ref = load_reference(ref_path) if ref_path.is_file() else None
    if ref is None or ref.sizes != space.sizes or ref.runner != runner.name:
        def measure(algorithm):
            with measuring(storage, out, runner.hosts(options)):
                return runner_times(algorithm, space.sizes, runner, options)[0]

        ref = compute_reference(graph, collective, space.sizes, runner.name,
                                measure if runner.real_hardware else None)
        for base in ref.algorithms:
            verify(ref.algorithm(base), graph)
        save_reference(ref, ref_path)
    seed(study, space, graph, collective)

    target_tags = {"autotaccl.target": space.target_name, "autotaccl.collective": collective,
                   "autotaccl.hardware": space.profile.name, "autotaccl.nodes": str(space.nodes)}
    artifact_root = out / "mlartifacts" if request.tracking_uri is None else None
    experiment_id = tracking.ensure_experiment(client, name, artifact_root, target_tags, adopt=request.adopt,
                                               description=experiment_description(space, collective, runner.name))
    parent = sweep_run(client, experiment_id, study, {
        "name": f"sweep-{study_name}",
        "params": {"space": space_path.name, "sizes": ",".join(map(str, space.sizes)), "runner": runner.name,
                   "sampler": request.sampler, "margin": request.margin, "explore": request.explore,
                   "seed": request.seed}},
        tags={**target_tags, "optuna.study": study_name,
              "optuna.storage": tracking.relative_path(client.tracking_uri, storage)})   # a moved --out: its own
    log_baselines(client, out, experiment_id, parent, ref, space, collective)

    config = SweepConfig(space=str(space_path), collective=collective, out_dir=str(out),
                         storage=storage, study_name=study_name, tracking_uri=client.tracking_uri,
                         experiment_id=experiment_id, parent_run_id=parent, reference=str(ref_path),
                         runner=runner.name, runner_options=options_dict(options), margin=request.margin,
                         explore=request.explore,
                         synth_time_limit=request.synth_time_limit, trials=request.trials, timeout=request.timeout,
                         sampler=request.sampler, seed=request.seed, heartbeat=request.heartbeat,
                         until=request.until, patience=request.patience)
    reconcile(client, config, study)
    config.save(config_path)
    return config, study


def experiment_description(space: SearchSpace, collective: str, runner: str) -> str:
    """What an experiment holds and how its metrics are named (MLflow shows it above the runs)."""
    from ..sizes import format_size

    return (f"autotaccl sweep: {collective} on {space.target_name} ({space.profile.gpus_per_node * space.nodes} GPUs), "
            f"{format_size(space.sizes[0])} to {format_size(space.sizes[-1])}, measured by the {runner} runner.\n\n"
            "Runs: the sweep (parent), one per trial named by what it tried (t12 greedy relay 0:1 cu2 LL128: trial "
            "number, then the space's knobs), the NCCL-style baselines, and stock NCCL as nccl-model predicts it.\n\n"
            f"Metrics: {', '.join(tracking.PER_SIZE)} per buffer size, as one key per size (busbw_GBps.1048576, "
            "for search_runs and export) and as one curve per quantity with step = log2(bytes) (busbw_GBps at step "
            "20 is 1 MiB), which the run's chart view plots against size.")


def space_file(request: TuneRequest, space: SearchSpace, sweeps: Path, study_name: str) -> Path:
    """The space file workers load: the request's own, or (a space given as an object) the space and its
    hardware profile written to ``sweeps/<study>.space.yaml`` and ``.hardware.yaml``."""
    if not isinstance(request.space, SearchSpace):
        return Path(space.source).resolve()
    hardware = write_yaml(profile_to_dict(space.profile), sweeps / f"{study_name}.hardware.yaml")
    return write_yaml(space_to_dict(space, str(hardware)), sweeps / f"{study_name}.space.yaml")


def run_workers(config: SweepConfig, config_path: Path, study: optuna.Study, workers: int, remaining: int,
                progress: Callable[[int, int, float | None], None] | None = None) -> None:
    """Run ``remaining`` trials: in this process (1 worker) or in ``workers`` processes on the same storage;
    ``progress(done, remaining, best value)`` is called as trials finish."""
    if remaining <= 0:
        return
    start = len([t for t in study.get_trials(deepcopy=False) if counted(t)])

    def report() -> None:
        if progress:
            trials = study.get_trials(deepcopy=False)
            done = len([t for t in trials if counted(t)]) - start
            values = [t.value for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
            progress(min(done, remaining), remaining, min(values, default=None))

    report()                # 0 / remaining: the bar shows before the first trial ends
    if workers <= 1:
        optimize(config, study, remaining, report)
        return
    # every worker may run them all: the study-wide count (cluster/loop.py) stops them, and a worker
    # that outlives a killed one runs its retried trial
    cmd = [sys.executable, "-m", "autotaccl.tuning.worker", str(config_path), "--n-trials", str(remaining),
           "--parent", str(os.getpid())]          # a worker stops once this process is gone (SIGKILLed)
    procs = [subprocess.Popen([*cmd, "--index", str(i)]) for i in range(workers)]
    deadline = None if config.timeout is None else time.monotonic() + config.timeout + 300
    try:
        while any(p.poll() is None for p in procs):
            if deadline is not None and time.monotonic() > deadline:
                for p in procs:
                    p.terminate()
                break
            time.sleep(1.0)
            report()
    finally:
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    failed = [p.returncode for p in procs if p.returncode not in (0, None)]
    if failed:
        log.warning("%d worker(s) exited with status %s", len(failed), failed)


def optimize(config: SweepConfig, study: optuna.Study, n_trials: int,
             after_trial: Callable[[], None] | None = None) -> None:
    """The worker loop: stop after ``n_trials`` here, or once the study has ``config.trials`` counted trials."""
    from ..cluster.loop import run_trials

    objective = Objective(config)
    run_trials(config, study, objective, counted, lambda trial: sample(trial, objective.space), n_trials,
               failed_catch=(TrialFailed,), after_trial=after_trial)


def summarize(study: optuna.Study, config: SweepConfig) -> StudySummary:
    """Counts, the best objective and, per size, the winner by :func:`autotaccl.tuning.winners.pick`."""
    trials = study.get_trials(deepcopy=False)
    counts = {s.name: sum(1 for t in trials if t.state == s) for s in TrialState}
    ref = load_reference(Path(config.reference))
    complete = [t for t in trials if t.state == TrialState.COMPLETE and "results" in t.user_attrs]
    per_size = []
    for i, size in enumerate(ref.sizes):
        bases = [Entry(name, times[i]) for name, times in ref.times.items()]
        won, base = pick(trial_entries(complete, size), bases)
        nccl = ref.nccl_times[i] if ref.nccl_times else None
        if won.is_baseline:
            factor = size / base.time_us / 1e3
            busbw_factor = ref.algorithm(str(base.trial)).collective.busbw_factor
            per_size.append(SizeWinner(size, f"baseline:{base.trial}", base.time_us, str(base.trial), base.time_us,
                                       factor * busbw_factor, 100 * factor / ref.bound_algbw[i], nccl, won.trial))
        else:
            r = result_at(won.handle, size)
            per_size.append(SizeWinner(size, f"trial {won.trial}", r["time_us"], str(base.trial), base.time_us,
                                       r["busbw"], r["bound_pct"], nccl, won.trial))
    best_trial = min(complete, key=lambda t: t.value, default=None)
    return StudySummary(config.study_name, config.collective, config.experiment_id, config.parent_run_id, counts,
                        None if best_trial is None else best_trial.value,
                        None if best_trial is None else best_trial.number, tuple(per_size), stopped_early(study, config) or "")


def stopped_early(study: optuna.Study, config: SweepConfig) -> str | None:
    """Why the study needs no more trials under the sweep's ``until`` and ``patience`` (None: it does)."""
    if config.until is None and config.patience is None:
        return None
    from .done import history, stop_reason

    return stop_reason(history(study), load_reference(Path(config.reference)).sizes, config.until, config.patience)


def finish_parent(client, summary: StudySummary) -> None:
    metrics = {}
    if summary.best_value is not None:
        metrics["best_objective"] = summary.best_value
    for w in summary.per_size:
        metrics[f"best_time_us.{w.size}"] = w.time_us
        metrics[f"speedup.{w.size}"] = w.speedup
        if w.speedup_vs_nccl is not None:
            metrics[f"speedup_vs_nccl.{w.size}"] = w.speedup_vs_nccl
        metrics[f"best_bound_pct.{w.size}"] = w.bound_pct
    for state, n in summary.counts.items():
        metrics[f"trials_{state.lower()}"] = n
    from mlflow.entities import Metric, RunTag

    ts = int(time.time() * 1000)
    tags = [RunTag(f"winner.{w.size}", str(w.trial)) for w in summary.per_size]   # the same rule as export/report
    if summary.stopped:
        tags.append(RunTag("stopped_early", summary.stopped))
    client.log_batch(summary.parent_run_id, metrics=[Metric(k, float(v), ts, 0) for k, v in metrics.items()], tags=tags)
    client.set_terminated(summary.parent_run_id, "FINISHED")


def study_name_for(request: TuneRequest, space: SearchSpace, collective: str) -> str:
    if request.study and len(space.collectives) > 1:
        return f"{request.study}-{collective}"
    return request.study or space.experiment_name(collective)


def _require_study(storage: str, space: SearchSpace, request: TuneRequest, collective: str) -> None:
    name = study_name_for(request, space, collective)
    names = {s.study_name for s in optuna.get_all_study_summaries(open_storage(storage, request.heartbeat),
                                                                  include_best_trial=False)}
    if name not in names:
        raise ParameterError("TuneRequest.resume", name,
                             f"an existing study in {storage} (start the sweep first; resuming needs one)")


def tune(request: TuneRequest, collectives: Sequence[str] | None = None) -> list[StudySummary]:
    """Run (or resume) one study per collective of the space (or of ``collectives``); a summary per study."""
    request.check_paths()
    space = request.space if isinstance(request.space, SearchSpace) else load_space(request.space)
    runner = get_runner(request.runner)
    options = build_options(runner, request.runner_options)
    lowering(runner)          # a runtime file tuning cannot write is bad input, found before anything is created
    chosen = list(collectives or space.collectives)
    for c in chosen:
        if c not in space.collectives:
            raise ParameterError("collectives", c, f"one of the space's collectives: {', '.join(space.collectives)}")
    out = Path(request.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    storage = storage_spec(request.storage, out)
    uri = request.tracking_uri or tracking.default_tracking_uri(out)
    from ..cluster import locks
    from ..tracking import outbox

    outbox.limit_client_retries()
    with locks.Lock(storage, out, "prepare"):     # several `autotaccl tune` on one storage prepare one at a time
        check_run_dir(out, uri, [study_name_for(request, space, c) for c in chosen], request.repair)
        client = outbox.retrying(tracking.init_store, uri)
        if request.tracking_uri is None and (moved := tracking.own_artifacts(uri, out / "mlartifacts")):
            log.warning("%s was copied or moved: the runs of %s now keep their artifacts in its mlartifacts/", out,
                        ", ".join(moved))
        outbox.replay(out, client)
    summaries = []
    for collective in chosen:
        with locks.Lock(storage, out, "prepare"):
            if request.resume:
                _require_study(storage, space, request, collective)
            config, study = outbox.retrying(prepare, request, space, collective, client, out, storage, runner, options)
        done = len([t for t in study.get_trials(deepcopy=False) if counted(t)])
        remaining = request.trials - done
        reason = stopped_early(study, config) if remaining > 0 else None
        if reason:
            log.warning("%s: no trial to run: %s", config.study_name, reason)
            remaining = 0
        log.info("%s: %d trial(s) done, %d to run", config.study_name, done, max(remaining, 0))
        run_workers(config, out / "sweeps" / f"{config.study_name}.json", study, request.workers, remaining,
                    request.progress)
        outbox.replay(out, client)
        summary = summarize(study, config)
        try:
            finish_parent(client, summary)
        except Exception as err:     # the tracking server is down: the trials are recorded, the summary is not
            log.warning("%s: sweep run not updated (MLflow unreachable: %s); `autotaccl tune --resume` updates it",
                        config.study_name, str(err).splitlines()[0][:200])
        summaries.append(summary)
    return summaries
