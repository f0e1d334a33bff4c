"""Export the per-size winners of tracked sweeps: for every collective and band, the files that serve it in
each runtime, and a table saying which.

Candidates are an experiment's verified runs (complete trials and baselines); :func:`autotaccl.tuning.winners.pick`
names each size's winner and adjacent sizes with one winner form a band. Winners are lowered to every
runtime's file and checked (one whose XML or out-of-place plan fails is dropped and the winners picked
again); the whole is written to a temporary directory that replaces the output at the
end. The layout written and how to load it: ``docs/runtimes.md``."""
from __future__ import annotations

import html
import json
import logging
import math
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

import optuna
import pandas as pd
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

from .. import tracking
from ..errors import InputError
from ..model.algorithm import VerificationError, load_algorithm, verify
from ..model.switch import PROTOCOL as SWITCH_PROTOCOL
from ..safety import replaced_dir
from ..sizes import format_size
from . import runtimes as rt
from .lowered import check, lower_plan_text, lower_xml, plan_protocol, run_settings
from .winners import TIE, exportable, pick, record, run_entries

log = logging.getLogger(__name__)

#: trial params that describe the run, not the configuration sampled
BOOKKEEPING = ("collective", "target", "runner", "nodes", "topology")
SETTINGS = ("engine", "protocol", "instances")        # a band's own columns, not part of its configuration
NOT_MEASURED = "not measured"
#: what an export directory holds (``export -o`` replaces only a directory of these)
OUTPUT_FILES = ("msccl", "msccl-legacy", "mscclpp", "nccl", "*.xml", "table.csv", "table.md", "table.json", "README.md")


@dataclass(frozen=True)
class Range:
    experiment: str
    collective: str
    target: str
    ranks: int
    min_size: int          # first swept size of the band
    max_size: int          # last swept size of the band
    min_bytes: int         # band, inclusive: 0 for the first
    max_bytes: int | None  # the next band's first size - 1; None (no limit) for the last
    winner: str            # "trial-N" or "baseline:<name>"
    run_id: str
    protocol: str
    instances: int
    time_us: tuple[float, ...]
    baseline: str
    baseline_time_us: tuple[float, ...]
    nccl_time_us: tuple[float, ...] = ()   # stock NCCL per size as nccl-model predicts it (empty: none logged)
    trial: int | str = ""                  # Optuna trial number or the baseline's name
    nodes: int = 0
    engine: str = ""
    config: tuple[tuple[str, str], ...] = ()    # the sampled parameters of the winning trial
    not_measured: tuple[str, ...] = ()     # settings the runner cannot tell apart: exported at the default
    bound_pct: tuple[float, ...] = ()
    nccl_choice: tuple[tuple[str, str, int], ...] = ()   # per size: nccl-model's (algorithm, protocol, channels)
    xml: str = ""                          # msccl/<file> (synthesized winners)
    legacy_xml: str = ""                   # msccl-legacy/<file>
    plans: tuple[str, ...] = ()            # mscclpp/<file>, out-of-place first
    tuner_lines: tuple[int, ...] = ()      # lines of nccl/nccl_tuner.conf that cover the band
    notes: tuple[str, ...] = ()
    swept: tuple[int, ...] = ()            # the swept sizes in the band
    # what mscclpp/ serves: the best candidate an MSCCL++ plan runs (a trial's switch candidate too)
    plan_winner: str = ""                  # "trial-N", "trial-N (switch)" or "baseline:<name>" ("": as winner)
    plan_run_id: str = ""
    plan_switch: bool = False
    plan_time_us: tuple[float, ...] = ()
    plan_protocol: str = "Simple"
    plan_instances: int = 1
    nccl_wins: tuple[bool, ...] = ()       # per size: stock NCCL (nccl-model) beats every candidate a runtime runs
    tuner_winners: tuple[int, ...] = ()    # the lines of tuner_lines whose row is stock NCCL as the winner
    why: str = ""                          # why msccl/ and mscclpp/ serve different candidates

    @property
    def sizes(self) -> str:
        return rt.band_text(self.min_bytes, self.max_bytes)

    @property
    def speedup(self) -> float:
        return _geomean(self.baseline_time_us, self.time_us)

    @property
    def speedup_vs_nccl(self) -> float | None:
        return _geomean(self.nccl_time_us, self.time_us) if self.nccl_time_us else None

    def served_by(self) -> dict[str, str]:
        """Runtime -> what serves the band there."""
        fallback = "stock NCCL (no file)"
        tuner = (f"{rt.TUNER_FILE} line {', '.join(map(str, self.tuner_lines))}" if self.tuner_lines
                 else "stock NCCL (no tuner row)")
        if self.tuner_winners:
            some = set(self.tuner_winners) != set(self.tuner_lines)
            which = f" on line {' and '.join(map(str, self.tuner_winners))}" if some else ""
            algorithms = "/".join(sorted({c[0] for c, w in zip(self.nccl_choice, self.nccl_wins) if w}))
            tuner += (f" (winner{which}: stock NCCL's {algorithms} is faster than every candidate a runtime runs"
                      f"{'; elsewhere the fallback' if some and (self.xml or self.plans) else ''})")
        elif self.xml or self.plans:
            tuner += " (fallback: the synthesized algorithm needs msccl/mscclpp)"
        return {"msccl": self.xml or fallback, "msccl-legacy": self.legacy_xml or fallback,
                "mscclpp": ", ".join(self.plans) or fallback, "nccl": tuner}

    def fastest(self) -> str:
        """Who is fastest in the band: stock NCCL's algorithm (nccl-model), or the candidate of a runtime's file;
        per swept size where that changes."""
        def at(i: int) -> str:
            if self.nccl_wins and self.nccl_wins[i] and self.nccl_choice:
                return f"stock NCCL {'/'.join(map(str, self.nccl_choice[i][:2]))} (nccl-model)"
            better = self.plan_time_us and self.plan_time_us[i] < self.time_us[i] * (1 - 1e-9)
            return self.plan_winner if better else self.winner

        each = [at(i) for i in range(len(self.swept))] or [self.winner]
        if len(set(each)) == 1:
            return each[0]
        return "; ".join(f"{format_size(s)}: {w}" for s, w in zip(self.swept, each))


def _geomean(reference: Sequence[float], times: Sequence[float]) -> float:
    return math.exp(sum(math.log(b / t) for b, t in zip(reference, times)) / len(times))


def nccl_run(experiment_id: str) -> tuple[dict[int, float], dict[int, tuple[str, str, int]]]:
    """Size -> stock NCCL's predicted time and (algorithm, protocol, channels), from the experiment's latest
    ``nccl-model`` run (empty if none)."""
    import mlflow

    runs = mlflow.search_runs(experiment_ids=[experiment_id], filter_string="tags.`autotaccl.kind` = 'nccl'",
                              order_by=["start_time DESC"], max_results=1)
    if runs.empty:
        return {}, {}
    row = runs.iloc[0]
    times = {int(c[len("metrics.time_us."):]): float(v) for c, v in row.items()
             if c.startswith("metrics.time_us.") and isinstance(v, float) and not math.isnan(v)}
    choices = {}
    for c, v in row.items():
        if c.startswith("tags.nccl.") and isinstance(v, str) and v.count("/") == 2:
            a, p, n = v.split("/")
            choices[int(c[len("tags.nccl."):])] = (a, p, int(n))
    return times, choices


def candidates(client, experiment_id: str) -> pd.DataFrame:
    """Verified, finished trials and baselines of an experiment, measured by the runner of its latest sweep;
    a trial only if its Optuna trial is COMPLETE."""
    import mlflow

    # only FINISHED runs: one cut off mid-write stays RUNNING and may lack metrics or artifacts
    frame = mlflow.search_runs(experiment_ids=[experiment_id],
                               filter_string="tags.verified = 'true' and attributes.status = 'FINISHED'",
                               max_results=50_000)
    if frame.empty:
        return frame
    runner = sweep_runner(experiment_id)
    if runner is not None and "params.runner" in frame:
        frame = frame[frame["params.runner"] == runner]
    sweeps = mlflow.search_runs(experiment_ids=[experiment_id], filter_string="tags.`autotaccl.kind` = 'sweep'",
                                max_results=10_000)
    return frame[complete_in_optuna(frame, sweeps, client.tracking_uri)]


def complete_in_optuna(frame: pd.DataFrame, sweeps: pd.DataFrame, tracking_uri: str) -> pd.Series:
    """Which runs of ``frame`` may be exported: the baselines, and the trials whose Optuna trial (joined by
    the sweep run's study and the trial number) is COMPLETE. After a kill, MLflow can hold a FINISHED,
    verified run of a trial Optuna failed (killed after logging, before Optuna heard); it must not win.
    A study the runs were not logged from (another copy's journal: a trial it lacks, another value) is
    refused rather than joined."""
    from optuna.trial import TrialState

    from ..cluster.heartbeat import open_storage

    complete: set[tuple[str, str]] = set()
    for _, row in sweeps.iterrows():
        storage, name = row.get("tags.optuna.storage"), row.get("tags.optuna.study")
        if not isinstance(storage, str) or not isinstance(name, str):
            continue
        storage = tracking.local_path(tracking_uri, storage)     # relative: to the store's run directory
        expected = ("the Optuna study of a sweep in this store (export keeps only the trials Optuna completed): "
                    "it is not there")
        if "://" not in storage and not Path(storage).is_file():
            raise InputError(storage, f"study {name}", expected)
        try:
            study = optuna.load_study(study_name=name, storage=open_storage(storage))
        except KeyError:
            raise InputError(storage.split("@")[-1], f"study {name}", expected) from None
        trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        _same_study(frame, row, study.user_attrs, trials, storage.split("@")[-1], name)
        complete |= {(row.run_id, str(n)) for n, t in trials.items() if t.state == TrialState.COMPLETE}
    is_trial = frame["tags.autotaccl.kind"] == "trial"
    parent = frame.get("tags.mlflow.parentRunId", pd.Series("", index=frame.index)).astype(str)
    number = frame.get("tags.optuna.trial", pd.Series("", index=frame.index)).astype(str)
    joined = pd.Series([(p, n) in complete for p, n in zip(parent, number)], index=frame.index)
    return ~is_trial | joined


def _same_study(frame: pd.DataFrame, sweep: pd.Series, attrs, trials, where: str, name: str) -> None:
    """Refuse a study the sweep's runs were not logged from, in one line (:func:`_other_study`)."""
    why = _other_study(frame, sweep, attrs, trials)
    if why:
        raise InputError(where, f"study {name}", f"the study this store's runs were logged from ({why}): the runs "
                         f"point at another copy of it; run `autotaccl tune` on the run directory that holds this "
                         f"store to point them at its own study")


def _other_study(frame: pd.DataFrame, sweep: pd.Series, attrs, trials) -> str | None:
    """Why the study (``attrs``, ``trials`` by number) is not the one the sweep's runs were logged from:
    another study's uid, or a trial run whose trial it lacks or completed with another objective."""
    from .records import STUDY_UID
    from .study import UID

    uid = sweep.get(f"tags.{STUDY_UID}")
    if isinstance(uid, str) and attrs.get(UID) not in (None, uid):
        return f"the sweep run {sweep.run_id} belongs to study uid {uid}, this one is {attrs.get(UID)}"
    parent = frame.get("tags.mlflow.parentRunId", pd.Series("", index=frame.index)).astype(str)
    for _, run in frame[(frame["tags.autotaccl.kind"] == "trial") & (parent == sweep.run_id)].iterrows():
        number = str(run.get("tags.optuna.trial", ""))
        trial = trials.get(int(number)) if number.isdigit() else None
        value = run.get("metrics.objective")
        if trial is None:
            return f"run {run.run_id} is of trial {number}, which it does not have ({len(trials)} trials)"
        if trial.value is not None and isinstance(value, float) and not math.isclose(value, trial.value, rel_tol=1e-9):
            return f"run {run.run_id} has objective {value:.6g} for trial {number}, the study {trial.value:.6g}"
    return None


def sweep_runner(experiment_id: str) -> str | None:
    """The runner of the experiment's latest sweep (None: no sweep run)."""
    import mlflow

    sweeps = mlflow.search_runs(experiment_ids=[experiment_id], filter_string="tags.`autotaccl.kind` = 'sweep'",
                                order_by=["start_time DESC"], max_results=1)
    return None if sweeps.empty or "params.runner" not in sweeps else sweeps["params.runner"].iloc[0]


def unmeasured(experiment_id: str) -> tuple[str | None, tuple[str, ...]]:
    """The runner of the latest sweep and the settings it cannot tell apart (:func:`unmeasured_settings`)."""
    from runners import get_runner

    from .lowered import unmeasured_settings

    runner = sweep_runner(experiment_id)
    return runner, unmeasured_settings(get_runner(runner)) if runner else ()


def excluded_runs(frame: pd.DataFrame) -> set[str]:
    """Trials whose XML already failed to lower during the sweep: they cannot be exported (tag xml_error)."""
    if "tags.xml_error" not in frame:
        return set()
    return set(frame.run_id[~frame["tags.xml_error"].map(exportable)])


def winners(frame: pd.DataFrame, sizes: Sequence[int], excluded: set[str], plan: bool = False,
            rejected: Mapping[tuple[str, bool], str] | None = None) -> list[dict]:
    """Per size: the winner by :func:`autotaccl.tuning.winners.pick` and the fastest baseline, among the trials'
    XML-loadable algorithms or, ``plan``, among what an MSCCL++ plan runs: those and the trials' switch
    candidates. ``rejected``: (run id, switch) of candidates the export could not write for that runtime."""
    is_base = frame["tags.autotaccl.kind"] == "baseline"
    trials = frame[~is_base & ~frame.run_id.isin(excluded)]
    bases = frame[is_base]
    rejected = rejected or {}
    rows = []
    for size in sizes:
        entries = run_entries(trials, size) + (run_entries(trials, size, switch=True) if plan else [])
        won, base = pick([e for e in entries if (e.handle.run_id, e.switch) not in rejected], run_entries(bases, size))
        rows.append({"size": size, "run": won.handle, "trial": won.trial, "time_us": won.time_us,
                     "baseline": str(base.trial), "baseline_time_us": base.time_us, "switch": won.switch})
    return rows


def _label(run: pd.Series, switch: bool = False) -> str:
    if run["tags.autotaccl.kind"] == "baseline":
        return f"baseline:{run['tags.baseline']}"
    return f"trial-{run['tags.optuna.trial']}" + (" (switch)" if switch else "")


def _param(run: pd.Series, name: str) -> str | None:
    value = run.get(f"params.{name}")
    return value if isinstance(value, str) and value else None


def _config(run: pd.Series) -> tuple[tuple[str, str], ...]:
    if run["tags.autotaccl.kind"] == "baseline":
        return ()
    keys = sorted(c[len("params."):] for c in run.index if c.startswith("params.") and isinstance(run[c], str))
    return tuple((k, run[f"params.{k}"]) for k in keys
                 if "." not in k and k not in BOOKKEEPING + SETTINGS)


def ranges_for(experiment, frame: pd.DataFrame, excluded: set[str], nccl: dict[int, float] | None = None,
               choices: dict[int, tuple[str, str, int]] | None = None,
               not_measured: Sequence[str] = (), ranks: int = 0,
               rejected: Mapping[str, Mapping[tuple[str, bool], str]] | None = None) -> list[Range]:
    """The bands: adjacent sizes whose XML winner (msccl/, msccl-legacy/) and plan winner (mscclpp/) are the
    same. ``rejected``: per file kind ("xml", "plan") the (run id, switch) candidates the export could not
    write for it, and why (``export`` finds them)."""
    sizes = tracking.logged_sizes(frame)
    nccl, choices, rejected = nccl or {}, choices or {}, rejected or {}
    xml_rows = winners(frame, sizes, excluded, rejected=rejected.get("xml"))
    plan_rows = winners(frame, sizes, excluded, plan=True, rejected=rejected.get("plan"))
    free_rows = winners(frame, sizes, excluded, plan=True) if rejected.get("plan") else plan_rows
    def served(row: tuple[dict, dict, dict]) -> tuple[str, str, bool]:
        return row[0]["run"].run_id, row[1]["run"].run_id, row[1]["switch"]

    groups: list[list[tuple[dict, dict, dict]]] = []
    for row in zip(xml_rows, plan_rows, free_rows):
        if groups and served(groups[-1][-1]) == served(row):
            groups[-1].append(row)
        else:
            groups.append([row])
    tags = experiment.tags
    nodes = int(tags.get("autotaccl.nodes", 0) or 0)
    out = []
    for i, group in enumerate(groups):
        xml, plan = [g[0] for g in group], [g[1] for g in group]
        run, plan_run = xml[0]["run"], plan[0]["run"]
        skipped, (protocol, instances) = _settings(run, not_measured)
        plan_settings = (SWITCH_PROTOCOL, 1) if plan[0]["switch"] else _settings(plan_run, not_measured)[1]

        def per(key: str) -> tuple[float, ...]:
            return tuple(float(run.get(f"metrics.{key}.{r['size']}", math.nan)) for r in xml)

        swept = tuple(r["size"] for r in xml)
        ours = [min(x["time_us"], p["time_us"]) for x, p in zip(xml, plan)]
        out.append(Range(
            experiment.name, tags.get("autotaccl.collective", ""), tags.get("autotaccl.target", ""), ranks,
            swept[0], swept[-1], 0 if i == 0 else swept[0],
            groups[i + 1][0][0]["size"] - 1 if i + 1 < len(groups) else None, _label(run), run.run_id, protocol,
            instances, tuple(r["time_us"] for r in xml), xml[0]["baseline"],
            tuple(r["baseline_time_us"] for r in xml),
            tuple(nccl[s] for s in swept) if all(s in nccl for s in swept) else (),
            trial=xml[0]["trial"], nodes=nodes,
            engine=_param(run, "engine") or ("baseline" if isinstance(xml[0]["trial"], str) else ""),
            config=_config(run), not_measured=skipped, bound_pct=per("bound_pct"),
            nccl_choice=tuple(choices[s] for s in swept) if all(s in choices for s in swept) else (),
            swept=swept, plan_winner=_label(plan_run, plan[0]["switch"]), plan_run_id=plan_run.run_id,
            plan_switch=plan[0]["switch"], plan_time_us=tuple(r["time_us"] for r in plan),
            plan_protocol=plan_settings[0], plan_instances=plan_settings[1],
            nccl_wins=tuple(s in nccl and nccl[s] < t * (1 - TIE) for s, t in zip(swept, ours)),
            why=_why(_label(run), _label(plan_run, plan[0]["switch"]), plan[0]["switch"],
                     [g[2] for g in group], rejected.get("plan", {}))))
    return out


def _settings(run: pd.Series, not_measured: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, int]]:
    """(the knobs not measured for ``run``, its (protocol, instances) as the runtime files run it)."""
    skipped = tuple(k for k in not_measured if run["tags.autotaccl.kind"] != "baseline")
    return skipped, run_settings(_param(run, "protocol") or "Simple", int(float(_param(run, "instances") or 1)),
                                 skipped)


def _why(xml: str, plan: str, switch: bool, free: Sequence[dict], rejected: Mapping[tuple[str, bool], str]) -> str:
    """Why msccl/ and mscclpp/ serve different candidates in a band, and which faster one mscclpp/ could not
    load ("" where nothing needs saying)."""
    parts = []
    if plan != xml:
        if switch:
            stock = " (stock NCCL: no XML file)" if xml.startswith("baseline:") else ""
            parts.append(f"mscclpp/ runs {plan}, a switch schedule; MSCCL XML has no switch operations, so msccl/ and "
                         f"msccl-legacy/ serve the best XML-expressible: {xml}{stock}")
        else:
            parts.append(f"mscclpp/ serves {plan}, msccl/ and msccl-legacy/ {xml}")
    lost = {(r["run"].run_id, r["switch"]): r for r in free if (r["run"].run_id, r["switch"]) in rejected}
    for key, r in lost.items():
        parts.append(f"mscclpp/: {_label(r['run'], r['switch'])}, faster here, does not load "
                     f"({rejected[key].splitlines()[0][:300]}); mscclpp/ serves the best loadable: {plan}")
    return "; ".join(parts)


def _graph(client, frame: pd.DataFrame, tags, workdir: Path):
    """The swept topology: the profile the trials logged (``hardware.yaml``), or the shipped one the
    experiment names; None if neither can be read."""
    from ..model.hardware import load_hardware
    from ..model.topology import build_topology

    trials = frame[frame["tags.autotaccl.kind"] == "trial"]
    for run_id in list(trials.run_id[:1]):
        try:
            path = client.download_artifacts(run_id, "hardware.yaml", str(workdir))
            return build_topology(load_hardware(path), int(tags["autotaccl.nodes"]))
        except Exception as err:   # an old run without the artifact (MlflowException), a bad profile
            log.info("hardware.yaml of run %s not usable: %s", run_id, err)
    try:
        return build_topology(load_hardware(tags["autotaccl.hardware"]), int(tags["autotaccl.nodes"]))
    except (KeyError, InputError, ValueError):
        return None


@dataclass(frozen=True)
class Files:
    """The runtime files of one synthesized band: relative path -> text, and what could not be written."""
    texts: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refused:
    """A band's candidate the export cannot write for a kind of file: "all" (its algorithm is unusable),
    "xml" (msccl/) or "plan" (mscclpp/); ``key``: (run id, switch)."""
    kind: str
    key: tuple[str, bool]
    why: str


def _algorithm(client, run_id: str, artifact: str, graph, workdir: Path):
    """The verified algorithm a run logged as ``artifact``, or the reason it cannot be used."""
    try:
        algorithm = load_algorithm(client.download_artifacts(run_id, artifact, str(workdir)))
        verify(algorithm, graph)
        return algorithm, ""
    except (InputError, VerificationError, OSError) as err:
        return None, f"algorithm of run {run_id} not verified: {err}"
    except Exception as err:   # a missing artifact (MlflowException)
        return None, f"algorithm of run {run_id} unavailable: {err}"


def _files_for(client, rng: Range, graph, workdir: Path) -> tuple[Files | None, Refused | None]:
    """Every runtime's file for a band's synthesized winners (msccl/ and msccl-legacy/ the XML winner's,
    mscclpp/ the plan winner's), or (None, the candidate that cannot be written and why)."""
    from .evaluate import SWITCH

    if graph is None:
        key = (rng.run_id, False) if not rng.winner.startswith("baseline:") else (rng.plan_run_id, rng.plan_switch)
        return None, Refused("plan" if key[1] else "all", key, "the swept topology is unknown (no hardware.yaml "
                                                               "logged, no shipped profile of that name)")
    stem = rt.band_name(rng.experiment, rng.min_bytes, rng.max_bytes)
    texts, notes = {}, []
    algorithm = None
    if not rng.winner.startswith("baseline:"):
        algorithm, why = _algorithm(client, rng.run_id, "algorithm.json", graph, workdir)
        if algorithm is None:
            return None, Refused("all", (rng.run_id, False), why)
        try:
            text = lower_xml(algorithm, rng.protocol, rng.instances, rng.min_bytes, rng.max_bytes)
        except (InputError, ValueError) as err:
            return None, Refused("xml", (rng.run_id, False), f"lowering run {rng.run_id} failed: {err}")
        report = check(text)
        if not report.valid:
            return None, Refused("xml", (rng.run_id, False),
                                 f"XML of run {rng.run_id} failed check_xml: {report.first}")
        texts[f"msccl/{stem}.xml"] = text
        try:
            legacy = lower_xml(algorithm, rng.protocol, rng.instances, rng.min_bytes,
                               rt.LEGACY_CAP - 1 if rng.max_bytes is None else rng.max_bytes, runtime="msccl")
            report = check(legacy, runtime="msccl")
            if report.valid:
                texts[f"msccl-legacy/{stem}.xml"] = legacy
            else:
                notes.append(f"msccl-legacy: XML failed check_xml ({report.first}); stock NCCL serves the band there")
        except (InputError, ValueError) as err:
            notes.append(f"msccl-legacy: not lowered ({err}); stock NCCL serves the band there")
    if rng.plan_winner.startswith("baseline:"):
        return Files(texts, tuple(notes)), None
    key = (rng.plan_run_id, rng.plan_switch)
    if rng.plan_switch or rng.plan_run_id != rng.run_id or algorithm is None:
        artifact = f"{SWITCH}/algorithm.json" if rng.plan_switch else "algorithm.json"
        algorithm, why = _algorithm(client, rng.plan_run_id, artifact, graph, workdir)
        if algorithm is None:
            return None, Refused("plan" if rng.plan_switch else "all", key, why)
    proto = plan_protocol(rng.plan_protocol)
    why = rt.refusal("mscclpp", algorithm, graph, proto, rng.plan_instances)
    if why is not None:
        return None, Refused("plan", key, why)
    if proto != rng.plan_protocol:
        notes.append(f"mscclpp: the plan runs {proto} (MSCCL++ has no {rng.plan_protocol}); {NOT_MEASURED}")
    for mode, inplace in (("outofplace", False), ("inplace", True)):
        try:
            texts[f"mscclpp/{stem}.{mode}.plan.json"] = lower_plan_text(algorithm, graph, proto, rng.plan_instances,
                                                                       rng.min_bytes, rng.max_bytes, inplace)
        except (InputError, ValueError) as err:
            if not inplace:
                return None, Refused("plan", key, f"MSCCL++ plan of run {rng.plan_run_id} failed: {err}")
            notes.append(f"mscclpp: no in-place plan ({str(err).splitlines()[0][:200]})")
    return Files(texts, tuple(notes)), None


def export(tracking_uri: str, experiments: Sequence[str] | None, out_dir: str | Path) -> list[Range]:
    """Write every runtime's files, table.csv/.md/.json and README.md into ``out_dir``."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")   # MLflow: a bar per download otherwise
    client, found = tracking.autotaccl_experiments(tracking_uri, experiments)
    if (db := tracking.sqlite_path(tracking_uri)) is not None:      # a copied or moved run directory: its own
        tracking.own_artifacts(tracking_uri, db.parent / "mlartifacts")
    out = Path(out_dir).resolve()
    with replaced_dir(out) as tmp:
        all_ranges: list[Range] = []
        notes: list[str] = []
        tuner_rows: list[str] = []
        work = tmp / ".downloads"
        work.mkdir()
        for experiment in found:
            frame = candidates(client, experiment.experiment_id)
            if frame.empty or not (frame["tags.autotaccl.kind"] == "baseline").any():
                notes.append(f"{experiment.name}: no verified baseline runs; nothing exported")
                continue
            excluded = excluded_runs(frame)
            if excluded:
                notes.append(f"{experiment.name}: {len(excluded)} trial(s) skipped: their XML did not lower during the "
                             f"sweep (tag xml_error)")
            runner, knobs = unmeasured(experiment.experiment_id)
            if knobs:
                notes.append(f"{experiment.name}: the {runner} runner does not apply {' or '.join(knobs)}: "
                             f"exported at the runtime's default, {NOT_MEASURED}")
            nccl, choices = nccl_run(experiment.experiment_id)
            graph = _graph(client, frame, experiment.tags, work)
            ranks = 0 if graph is None else graph.number_of_nodes()
            rejected: dict[str, dict[tuple[str, bool], str]] = {"xml": {}, "plan": {}}
            written: dict[tuple, tuple[Files | None, Refused | None]] = {}    # a band's files, kept across rounds
            while True:
                ranges = ranges_for(experiment, frame, excluded, nccl, choices, knobs, ranks, rejected)
                files, refused = {}, None
                for rng in ranges:
                    if rng.winner.startswith("baseline:") and rng.plan_winner.startswith("baseline:"):
                        continue
                    band = (rng.min_bytes, rng.max_bytes, rng.run_id, rng.plan_run_id, rng.plan_switch)
                    if band not in written:
                        written[band] = _files_for(client, rng, graph, work)
                    got, refused = written[band]
                    if refused is not None:
                        _refuse(experiment.name, rng, refused, frame, excluded, rejected, notes)
                        break
                    files[rng.min_bytes] = got
                if refused is None:
                    break
            ranges = _tuner(experiment.name, ranges, tuner_rows, notes)
            for rng in ranges:
                got = files.get(rng.min_bytes, Files())
                for name, text in got.texts.items():
                    (tmp / name).parent.mkdir(exist_ok=True)
                    (tmp / name).write_text(text)
                names = list(got.texts)
                all_ranges.append(replace(
                    rng, xml=next((n for n in names if n.startswith("msccl/")), ""),
                    legacy_xml=next((n for n in names if n.startswith("msccl-legacy/")), ""),
                    plans=tuple(n for n in names if n.startswith("mscclpp/")),
                    notes=got.notes + ((rng.why,) if rng.why else ())))
        shutil.rmtree(work)
        if tuner_rows:
            (tmp / "nccl").mkdir()
            (tmp / rt.TUNER_FILE).write_text(rt.TUNER_HEADER + "".join(tuner_rows))
        table = table_frame(all_ranges)
        table.to_csv(tmp / "table.csv", index=False)
        (tmp / "table.json").write_text(json.dumps(table_json(all_ranges, notes), indent=1))
        (tmp / "table.md").write_text(markdown(table))
        (tmp / "README.md").write_text(readme(all_ranges, notes))
    _log_export(client, found, out, table)
    return all_ranges


def _refuse(experiment: str, rng: Range, refused: Refused, frame: pd.DataFrame, excluded: set[str],
            rejected: dict[str, dict[tuple[str, bool], str]], notes: list[str]) -> None:
    """Keep ``refused`` out of the next round: from every file kind ("all") or from its own; a switch
    candidate with every other trial's that is the same schedule (the same synthesis cache key)."""
    label = rng.plan_winner if refused.key == (rng.plan_run_id, rng.plan_switch) else rng.winner
    keys = [refused.key]
    if refused.key[1] and "tags.switch.cache_key" in frame:
        cache_key = frame.loc[frame.run_id == refused.key[0], "tags.switch.cache_key"]
        keys = [(run, True) for run in frame.run_id[frame["tags.switch.cache_key"] == cache_key.iloc[0]]] or keys
    same = f" (and {len(keys) - 1} other trial(s) with the same schedule)" if len(keys) > 1 else ""
    where = {"all": "", "xml": " for msccl/ and msccl-legacy/", "plan": " for mscclpp/"}[refused.kind]
    notes.append(f"{experiment}: {label}{same} rejected{where}: {refused.why}")
    for key in keys:
        if refused.kind == "all":
            excluded.add(key[0])
        else:
            rejected[refused.kind][key] = refused.why


def _tuner(experiment: str, ranges: list[Range], rows: list[str], notes: list[str]) -> list[Range]:
    """Append the experiment's tuner-config rows (a comment line and a row per band) to ``rows``; the ranges
    with the line numbers that cover them."""
    if not ranges:
        return ranges
    first = ranges[0]
    if first.collective not in rt.TUNER_COLLECTIVES:
        notes.append(f"{experiment}: NCCL's tuner plugin has no {first.collective}; no nccl_tuner.conf rows")
        return ranges
    sizes = [s for r in ranges for s in r.swept]
    choices = [c for r in ranges for c in r.nccl_choice]
    if not first.ranks:
        notes.append(f"{experiment}: the swept topology is unknown; no nccl_tuner.conf rows")
        return ranges
    if len(choices) != len(sizes) or any(c[0] not in rt.TUNER_ALGORITHMS for c in choices):
        notes.append(f"{experiment}: no nccl-model prediction logged for every size; no nccl_tuner.conf rows")
        return ranges
    wins = [w for r in ranges for w in r.nccl_wins]
    line = len(rt.TUNER_HEADER.splitlines()) + len("".join(rows).splitlines())
    rows.append(f"# {experiment} ({first.collective}, {first.nodes} node(s), {first.ranks} ranks)\n")
    line += 1
    out = []
    lines = []
    for lo, hi, choice, index in rt.tuner_segments(sizes, choices, [r.min_bytes for r in ranges], wins):
        owner = next(r for r in ranges if r.min_bytes <= lo and (r.max_bytes is None or lo <= r.max_bytes))
        rows.append(f"# {rt.band_text(lo, hi)}: {_tuner_comment(owner, sizes[index])}\n"
                    f"{rt.tuner_row(first.collective, lo, hi, choice, first.nodes, first.ranks)}\n")
        line += 2
        lines.append((lo, line, bool(wins) and wins[index]))
    for r in ranges:
        own = [(n, won) for lo, n, won in lines if r.min_bytes <= lo and (r.max_bytes is None or lo <= r.max_bytes)]
        out.append(replace(r, tuner_lines=tuple(n for n, _ in own), tuner_winners=tuple(n for n, won in own if won)))
    return out


def _tuner_comment(band: Range, size: int) -> str:
    """What a tuner row is, for the band's swept ``size`` it starts at: stock NCCL's own algorithm as the
    winner (nccl-model predicts it faster than every candidate a runtime runs), or as the fallback."""
    i = band.swept.index(size)
    if band.nccl_wins and band.nccl_wins[i]:
        algorithm, protocol, _ = band.nccl_choice[i]
        ours = min(band.time_us[i], band.plan_time_us[i] if band.plan_time_us else math.inf)
        return (f"stock NCCL's {algorithm}/{protocol} wins here: nccl-model predicts {band.nccl_time_us[i]:.1f} us, "
                f"faster than every candidate a runtime runs (best {ours:.1f} us)")
    if band.winner.startswith("baseline:") and band.plan_winner.startswith("baseline:"):
        return "stock NCCL wins"
    serving = [d for d, w in (("msccl/", band.winner), ("mscclpp/", band.plan_winner)) if not w.startswith("baseline:")]
    who = band.winner if not band.winner.startswith("baseline:") else band.plan_winner
    if band.plan_winner != band.winner and len(serving) == 2:
        who = f"{band.winner} (msccl/), {band.plan_winner} (mscclpp/)"
    return f"{who} wins here ({', '.join(serving)}); stock NCCL's own choice for the fallback"


def _md(text: object) -> str:
    """A Markdown table cell or list item: HTML-escaped (renderers pass HTML through), pipes escaped."""
    return html.escape(str(text)).replace("|", "\\|").replace("\n", " ")


def table_frame(ranges: Sequence[Range]) -> pd.DataFrame:
    """One row per collective and band: its winner, configuration, and what serves it in each runtime."""
    rows = []
    for r in ranges:
        served = r.served_by()
        rows.append({
            "experiment": r.experiment, "collective": r.collective, "target": r.target, "ranks": r.ranks,
            "min_size": r.min_size, "max_size": r.max_size, "min_bytes": r.min_bytes,
            "max_bytes": "" if r.max_bytes is None else r.max_bytes, "winner": r.winner, "trial": str(r.trial),
            "run_id": r.run_id, "engine": r.engine, "config": ";".join(f"{k}={v}" for k, v in r.config),
            "protocol": r.protocol, "instances": r.instances,
            "not_measured": ";".join(f"{k} ({NOT_MEASURED})" for k in r.not_measured),
            "time_us": ";".join(f"{t:.3f}" for t in r.time_us), "baseline": r.baseline,
            "speedup": round(r.speedup, 4),
            "speedup_vs_nccl": None if r.speedup_vs_nccl is None else round(r.speedup_vs_nccl, 4),
            "bound_pct": ";".join(f"{p:.1f}" for p in r.bound_pct),
            "xml": r.xml, "msccl": served["msccl"], "msccl_legacy": served["msccl-legacy"],
            "mscclpp": served["mscclpp"], "nccl": served["nccl"], "notes": " ".join(r.notes),
            "mscclpp_winner": r.plan_winner or r.winner,
            "mscclpp_time_us": ";".join(f"{t:.3f}" for t in r.plan_time_us),
            "fastest": r.fastest(), "why": r.why})
    columns = ["experiment", "collective", "target", "ranks", "min_size", "max_size", "min_bytes", "max_bytes",
               "winner", "trial", "run_id", "engine", "config", "protocol", "instances", "not_measured", "time_us",
               "baseline", "speedup", "speedup_vs_nccl", "bound_pct", "xml", "msccl", "msccl_legacy", "mscclpp",
               "nccl", "notes", "mscclpp_winner", "mscclpp_time_us", "fastest", "why"]
    return pd.DataFrame(rows, columns=columns)


def table_json(ranges: Sequence[Range], notes: Sequence[str]) -> dict:
    """table.json: the bands, the per-size winners (the one rule of tuning/winners.py) and the notes."""
    return {"ranges": table_frame(ranges).to_dict("records"),
            "winners": [record(r.collective, s, r.trial) for r in ranges for s in r.swept],
            "load": rt.load_commands("."), "notes": list(notes)}


def markdown(table: pd.DataFrame) -> str:
    head = ("| collective | target | bytes (inclusive) | winner | engine | protocol | instances | "
            "speed-up vs best baseline | speed-up vs NCCL | msccl | msccl-legacy | mscclpp winner | mscclpp | nccl | "
            "fastest | why |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")

    def vs(value) -> str:
        return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}x"

    def knob(value, name: str, row) -> str:
        return f"{_md(value)} ({NOT_MEASURED})" if name in str(row.not_measured) else _md(value)

    lines = [f"| {_md(r.collective)} | {_md(r.target)} | "
             f"{_md(rt.band_text(r.min_bytes, None if r.max_bytes == '' else int(r.max_bytes)))} | {_md(r.winner)} | "
             f"{_md(r.engine)} | {knob(r.protocol, 'protocol', r)} | {knob(r.instances, 'instances', r)} | "
             f"{r.speedup:.2f}x | {vs(r.speedup_vs_nccl)} | {_md(r.msccl)} | {_md(r.msccl_legacy)} | "
             f"{_md(r.mscclpp_winner)} | {_md(r.mscclpp)} | {_md(r.nccl)} | {_md(r.fastest)} | {_md(r.why)} |"
             for r in table.itertuples()]
    return "# Best algorithm per collective and size, and the file that serves it in each runtime\n\n" + head + \
        "\n".join(lines) + "\n"


def readme(ranges: Sequence[Range], notes: Sequence[str]) -> str:
    from ..formats.mscclpp.lower.options import PLACEMENTS

    placement_note = PLACEMENTS["anywhere"]
    load = rt.load_commands("/path/to/this/export")
    files = sorted({f for r in ranges for f in (r.xml, r.legacy_xml, *r.plans) if f})
    def band(r: Range) -> str:
        text = f"* {_md(r.collective)} {_md(r.sizes)}: {_md(r.winner)}"
        if r.plan_winner and r.plan_winner != r.winner:
            text += f" (mscclpp/: {_md(r.plan_winner)})"
        if any(r.nccl_wins):
            text += f"; fastest: {_md(r.fastest())}"
        return text + (f". {_md(r.why)}" if r.why else "")

    bands = "\n".join(band(r) for r in ranges)
    text = f"""# Exported collective algorithms

`table.md` / `table.csv` / `table.json` list, per collective and buffer-size band, the fastest verified
algorithm `autotaccl tune` found (or the best baseline where none beat it) and which file serves the band
in each runtime. Bands are inclusive byte ranges of the whole buffer (for allgather the output, for
reducescatter the input); together they cover every size with no gap and no overlap, and the largest is
open-ended. File names give the band as a half-open range (`from512K-below4M`: 512K <= bytes < 4M).
Every file was re-verified and checked by its runtime's own checker (`autotaccl check-xml`,
`autotaccl check-plan`) before it was written. "vs NCCL" compares with stock NCCL as `autotaccl nccl-model`
predicts it on the same profile.

## MSCCL: `msccl/` (msccl-executor-nccl) and `msccl-legacy/` (microsoft/msccl)

    {load["msccl"]}
    {load["msccl-legacy"]}

Keep each directory free of other files (a malformed file fails communicator init), and never copy a
`msccl-legacy/` file into `MSCCL_ALGO_DIR`: it has no `outofplace` attribute, which msccl-executor-nccl's
parser requires, so that runtime refuses it. The executor's
`maxBytes` is inclusive and `0` is no limit; the legacy runtime's is exclusive and `0` means never, so its
files say `maxBytes` = the next band's first size and the largest band stops at {rt.LEGACY_CAP} bytes (1 GiB),
above which stock NCCL runs. Sizes no file selects (bands a baseline won) run stock NCCL.

## MSCCL++: `mscclpp/*.plan.json`

    {load["mscclpp"]}

Each band's plan is the fastest candidate an MSCCL++ plan runs: where a trial's switch schedule (NVLS
multimem operations, which MSCCL XML cannot express) beats the XML-expressible winner, the plan is that
schedule and `msccl/` keeps the best XML-expressible one (table columns `mscclpp_winner` and `why`); a
candidate the MSCCL++ lowering refuses leaves the plan to the best one it loads, and `why` says so.
`min_message_size`/`max_message_size` are inclusive (2^64-1: no limit). There is one plan per buffer mode
(`.outofplace`, `.inplace`); the NCCL shim picks by world size, ranks per node, collective, in-place flag and size,
and falls back to NCCL elsewhere. Placement: {placement_note} (each plan's `autotaccl.placement` says so), so
tensors from PyTorch's caching allocator, which sit inside bigger allocations, are fine.

## Stock NCCL: `nccl/nccl_tuner.conf` (NCCL's example tuner plugin, NCCL >= 2.19)

    {load["nccl"]}

One row per band, both bounds inclusive, `nNodes`/`nRanks` of the swept target; the plugin takes the
first row that matches. Each row is stock NCCL's own choice (algorithm, protocol, channels) as nccl-model
predicts it (NVLS and NVLS-tree where the profile has them): where its comment says "wins here", nccl-model
predicts it faster than every candidate a runtime's file runs, so it is the winner (the table's `fastest`
says so too); where a baseline won, it is what to run; where a synthesized algorithm won, it is the
fallback for a process that loads only the tuner. The example plugin runs 1 channel when no row matches
or a row says -1, so every band has a row with an explicit channel count.

## Bands

{bands or "none"}

Files: {', '.join(_md(f) for f in files) if files else 'none (the baselines won everywhere)'}
"""
    if notes:
        text += "\n## Notes\n\n" + "\n".join(f"* {_md(n)}" for n in notes) + "\n"
    return text


#: the experiment export logs its runs into: one per sweep exported, tagged with the sweep's experiment, kept
#: out of the sweeps' own experiments so that their runs tables list trials and baselines only
EXPORTS = "autotaccl-exports"


def _exports_experiment(client, experiments) -> str:
    """The id of :data:`EXPORTS`, created beside the first sweep's experiment (its artifacts there too)."""
    existing = client.get_experiment_by_name(EXPORTS)
    if existing is not None and existing.lifecycle_stage == "active":
        return existing.experiment_id
    if existing is not None:
        raise InputError("--tracking-uri", client.tracking_uri,
                         f"a store whose experiment {EXPORTS!r} is not deleted (restore it with `mlflow experiments "
                         f"restore --experiment-id {existing.experiment_id}`)")
    sweep_location = experiments[0].artifact_location or ""
    location = sweep_location.rsplit("/", 1)[0] + f"/{EXPORTS}" if sweep_location.startswith("file:") else None
    return client.create_experiment(EXPORTS, artifact_location=location, tags={
        **tracking.EXPERIMENT_KIND, MLFLOW_RUN_NOTE: "One run per sweep exported by `autotaccl export` "
                                                           "(tag autotaccl.experiment names the sweep)."})


def _log_export(client, experiments, out: Path, table: pd.DataFrame) -> None:
    exports_id = _exports_experiment(client, experiments) if experiments else None
    for experiment in experiments:
        rows = table[table["experiment"] == experiment.name]
        run_id = tracking.log_run(client, exports_id, f"export {experiment.name}",
                                  tags={tracking.KIND: "export", "export.dir": str(out),
                                        "autotaccl.experiment": experiment.name},
                                  metrics={"export.ranges": len(rows), "export.xml_files": int((rows["xml"] != "").sum())},
                                  artifacts={"export/table.md": markdown(rows), "export/table.csv": rows.to_csv(index=False)})
        client.log_table(run_id, data=rows.reset_index(drop=True), artifact_file="export/table.json")
