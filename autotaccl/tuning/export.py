"""Export the per-size winners of tracked sweeps: a table plus one checked MSCCL XML per winning range.

For each experiment (one target and collective) the candidates are its verified runs: completed trials
and the baselines, measured by the same runner; a trial only if its Optuna trial is COMPLETE (joined by
the sweep's study and the trial number: after a kill MLflow may disagree with Optuna). At every size the fastest candidate wins; a trial wins
only if it is strictly faster than every baseline. Adjacent sizes with the same winner form one range,
``[minBytes, maxBytes]``. A synthesized winner is re-verified (replay) and lowered, and its XML must pass
``check_xml`` before it is written; if it does not, that run is dropped and the winners are recomputed.
Everything is written to a temporary directory that replaces the output directory at the end.
"""
from __future__ import annotations

import html
import json
import logging
import math
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import optuna
import pandas as pd

from .. import tracking
from ..errors import InputError
from ..model.algorithm import VerificationError, load_algorithm, verify
from ..safety import file_stem, replaced_dir
from ..sizes import format_size
from .lowered import check, lower_xml

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Range:
    experiment: str
    collective: str
    target: str
    ranks: int
    min_size: int          # first swept size of the range
    max_size: int          # last swept size of the range
    min_bytes: int         # what the XML selects: 0 for the first range
    max_bytes: int         # next range's first size - 1; the last swept size for the last range
    winner: str            # "trial-N" or "baseline:<name>"
    run_id: str
    protocol: str
    instances: int
    time_us: tuple[float, ...]
    baseline: str
    baseline_time_us: tuple[float, ...]
    xml: str = ""          # file name, for synthesized winners
    nccl_time_us: tuple[float, ...] = ()   # stock NCCL per size as nccl-model predicts it (empty: none logged)

    @property
    def speedup(self) -> float:
        return _geomean(self.baseline_time_us, self.time_us)

    @property
    def speedup_vs_nccl(self) -> float | None:
        return _geomean(self.nccl_time_us, self.time_us) if self.nccl_time_us else None


def _geomean(reference: Sequence[float], times: Sequence[float]) -> float:
    return math.exp(sum(math.log(b / t) for b, t in zip(reference, times)) / len(times))


def nccl_times(experiment_id: str) -> dict[int, float]:
    """Size -> stock NCCL's predicted time, from the experiment's latest ``nccl-model`` run (empty if none)."""
    import mlflow

    runs = mlflow.search_runs(experiment_ids=[experiment_id], filter_string="tags.`autotaccl.kind` = 'nccl'",
                              order_by=["start_time DESC"], max_results=1)
    if runs.empty:
        return {}
    prefix = "metrics.time_us."
    return {int(c[len(prefix):]): float(v) for c, v in runs.iloc[0].items()
            if c.startswith(prefix) and isinstance(v, float) and not math.isnan(v)}


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
    sweeps = mlflow.search_runs(experiment_ids=[experiment_id], filter_string="tags.`autotaccl.kind` = 'sweep'",
                                order_by=["start_time DESC"], max_results=10_000)
    if not sweeps.empty and "params.runner" in frame:
        frame = frame[frame["params.runner"] == sweeps["params.runner"].iloc[0]]
    return frame[complete_in_optuna(frame, sweeps)]


def complete_in_optuna(frame: pd.DataFrame, sweeps: pd.DataFrame) -> pd.Series:
    """Which runs of ``frame`` may be exported: the baselines, and the trials whose Optuna trial (joined by
    the sweep run's study and the trial number) is COMPLETE. After a kill, MLflow can hold a FINISHED,
    verified run of a trial Optuna failed (killed after logging, before Optuna heard); it must not win."""
    from optuna.trial import TrialState

    from ..cluster.heartbeat import open_storage

    complete: set[tuple[str, str]] = set()
    for _, row in sweeps.iterrows():
        storage, name = row.get("tags.optuna.storage"), row.get("tags.optuna.study")
        if not isinstance(storage, str) or not isinstance(name, str):
            continue
        expected = ("the Optuna study of a sweep in this store (export keeps only the trials Optuna completed): "
                    "it is not there")
        if "://" not in storage and not Path(storage).is_file():
            raise InputError(storage, f"study {name}", expected)
        try:
            trials = optuna.load_study(study_name=name, storage=open_storage(storage)).get_trials(
                deepcopy=False, states=(TrialState.COMPLETE,))
        except KeyError:
            raise InputError(storage.split("@")[-1], f"study {name}", expected) from None
        complete |= {(row.run_id, str(t.number)) for t in trials}
    is_trial = frame["tags.autotaccl.kind"] == "trial"
    parent = frame.get("tags.mlflow.parentRunId", pd.Series("", index=frame.index)).astype(str)
    number = frame.get("tags.optuna.trial", pd.Series("", index=frame.index)).astype(str)
    joined = pd.Series([(p, n) in complete for p, n in zip(parent, number)], index=frame.index)
    return ~is_trial | joined


def winners(frame: pd.DataFrame, sizes: Sequence[int], excluded: set[str]) -> list[dict]:
    """Per size: the fastest baseline, and the fastest trial if it is strictly faster.

    Among trials tied at the fastest time (the same algorithm found twice), the previous size's winner
    is kept, so ties do not split a range.
    """
    rows = []
    is_base = frame["tags.autotaccl.kind"] == "baseline"
    trials = frame[~is_base & ~frame.run_id.isin(excluded)]
    bases = frame[is_base]
    previous = None
    for size in sizes:
        col = f"metrics.time_us.{size}"
        base = bases.loc[bases[col].idxmin()]
        best = base
        valid = trials[trials[col].notna()]
        if not valid.empty:
            # exact ties (configurations the runner cannot tell apart) go to the smallest parameter set, so
            # the export does not depend on the order trials ran in (several workers, retries)
            params = sorted(c for c in valid.columns if c.startswith("params."))     # the same order in any store
            key = ["|".join(map(str, row)) for row in valid[params].itertuples(index=False)]
            t = valid.assign(_key=key).sort_values([col, "_key"], kind="stable").iloc[0]
            if previous is not None and previous.run_id in set(valid.run_id):
                kept = valid[valid.run_id == previous.run_id].iloc[0]
                if kept[col] <= t[col] * (1 + 1e-9):
                    t = kept
            if t[col] < base[col]:
                best = t
        previous = best
        rows.append({"size": size, "run": best, "time_us": float(best[col]), "baseline": base["tags.baseline"],
                     "baseline_time_us": float(base[col])})
    return rows


def _label(run: pd.Series) -> str:
    if run["tags.autotaccl.kind"] == "baseline":
        return f"baseline:{run['tags.baseline']}"
    return f"trial-{run['tags.optuna.trial']}"


def ranges_for(experiment, frame: pd.DataFrame, excluded: set[str], nccl: dict[int, float] | None = None) -> list[Range]:
    sizes = tracking.logged_sizes(frame)
    nccl = nccl or {}
    per_size = winners(frame, sizes, excluded)
    groups: list[list[dict]] = []
    for row in per_size:
        if groups and groups[-1][-1]["run"].run_id == row["run"].run_id:
            groups[-1].append(row)
        else:
            groups.append([row])
    tags = experiment.tags
    ranks = _ranks(tags)
    out = []
    for i, group in enumerate(groups):
        run = group[0]["run"]
        nxt = groups[i + 1][0]["size"] - 1 if i + 1 < len(groups) else group[-1]["size"]
        protocol = run.get("params.protocol") or "Simple"
        instances = int(float(run.get("params.instances") or 1))
        out.append(Range(experiment.name, tags.get("autotaccl.collective", ""), tags.get("autotaccl.target", ""), ranks,
                         group[0]["size"], group[-1]["size"], 0 if i == 0 else group[0]["size"], nxt, _label(run),
                         run.run_id, protocol if isinstance(protocol, str) else "Simple", instances,
                         tuple(r["time_us"] for r in group), group[0]["baseline"],
                         tuple(r["baseline_time_us"] for r in group), "",
                         tuple(nccl[r["size"]] for r in group) if all(r["size"] in nccl for r in group) else ()))
    return out


def _ranks(tags) -> int:
    from ..model.hardware import load_hardware

    try:
        return load_hardware(tags["autotaccl.hardware"]).gpus_per_node * int(tags["autotaccl.nodes"])
    except (KeyError, InputError, ValueError):
        return 0


def _xml_for(client, rng: Range, workdir: Path) -> tuple[str | None, str]:
    """(XML text, "") for a range's synthesized winner, or (None, why it cannot be exported)."""
    try:
        path = client.download_artifacts(rng.run_id, "algorithm.json", str(workdir))
        algorithm = load_algorithm(path)
        verify(algorithm)
    except (InputError, VerificationError, OSError) as err:
        return None, f"algorithm of run {rng.run_id} not verified: {err}"
    except Exception as err:   # a missing artifact (MlflowException)
        return None, f"algorithm of run {rng.run_id} unavailable: {err}"
    try:
        text = lower_xml(algorithm, rng.protocol, rng.instances, rng.min_bytes, rng.max_bytes)
    except (InputError, ValueError) as err:
        return None, f"lowering run {rng.run_id} failed: {err}"
    report = check(text)
    if not report.valid:
        return None, f"XML of run {rng.run_id} failed check_xml: {report.first}"
    return text, ""


def xml_name(rng: Range) -> str:
    """A file name inside the export directory, whatever the experiment is called."""
    return f"{file_stem(rng.experiment)}-{format_size(rng.min_size)}-{format_size(rng.max_size)}.xml"


def _md(text: object) -> str:
    """A Markdown table cell or list item: HTML-escaped (renderers pass HTML through), pipes escaped."""
    return html.escape(str(text)).replace("|", "\\|").replace("\n", " ")


def export(tracking_uri: str, experiments: Sequence[str] | None, out_dir: str | Path) -> list[Range]:
    """Write table.csv/.md/.json, one XML per synthesized winning range and README.md into ``out_dir``."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")   # MLflow: a bar per download otherwise
    client, found = tracking.autotaccl_experiments(tracking_uri, experiments)
    out = Path(out_dir).resolve()
    with replaced_dir(out) as tmp:
        all_ranges: list[Range] = []
        notes: list[str] = []
        work = tmp / ".downloads"
        work.mkdir()
        for experiment in found:
            frame = candidates(client, experiment.experiment_id)
            if frame.empty or not (frame["tags.autotaccl.kind"] == "baseline").any():
                notes.append(f"{experiment.name}: no verified baseline runs; nothing exported")
                continue
            # trials whose XML already failed to lower during the sweep cannot be exported either
            excluded: set[str] = set(frame.run_id[frame["tags.xml_error"].notna()]) if "tags.xml_error" in frame else set()
            if excluded:
                notes.append(f"{experiment.name}: {len(excluded)} trial(s) skipped: their XML did not lower during the "
                             f"sweep (tag xml_error)")
            nccl = nccl_times(experiment.experiment_id)
            while True:
                ranges = ranges_for(experiment, frame, excluded, nccl)
                texts, rejected = {}, False
                for rng in ranges:
                    if rng.winner.startswith("baseline:"):
                        continue
                    text, why = _xml_for(client, rng, work)
                    if text is None:
                        notes.append(f"{experiment.name}: {rng.winner} rejected: {why}")
                        excluded.add(rng.run_id)
                        rejected = True
                        break
                    texts[rng.run_id, rng.min_size] = text
                if not rejected:
                    break
            for rng in ranges:
                text = texts.get((rng.run_id, rng.min_size))
                if text is not None:
                    rng = Range(**{**asdict(rng), "xml": xml_name(rng)})
                    (tmp / rng.xml).write_text(text)
                all_ranges.append(rng)
        shutil.rmtree(work)
        table = table_frame(all_ranges)
        table.to_csv(tmp / "table.csv", index=False)
        (tmp / "table.json").write_text(json.dumps({"ranges": table.to_dict("records"), "notes": notes}, indent=1))
        (tmp / "table.md").write_text(markdown(table))
        (tmp / "README.md").write_text(readme(all_ranges, notes))
    _log_export(client, found, out, table)
    return all_ranges


def table_frame(ranges: Sequence[Range]) -> pd.DataFrame:
    rows = [{"experiment": r.experiment, "collective": r.collective, "target": r.target, "ranks": r.ranks,
             "min_size": r.min_size, "max_size": r.max_size, "min_bytes": r.min_bytes, "max_bytes": r.max_bytes,
             "winner": r.winner, "run_id": r.run_id, "protocol": r.protocol, "instances": r.instances,
             "time_us": ";".join(f"{t:.3f}" for t in r.time_us), "baseline": r.baseline,
             "speedup": round(r.speedup, 4),
             "speedup_vs_nccl": None if r.speedup_vs_nccl is None else round(r.speedup_vs_nccl, 4), "xml": r.xml}
            for r in ranges]
    columns = ["experiment", "collective", "target", "ranks", "min_size", "max_size", "min_bytes", "max_bytes",
               "winner", "run_id", "protocol", "instances", "time_us", "baseline", "speedup", "speedup_vs_nccl", "xml"]
    return pd.DataFrame(rows, columns=columns)


def markdown(table: pd.DataFrame) -> str:
    head = ("| collective | target | sizes | winner | protocol | instances | speed-up vs best baseline | "
            "speed-up vs NCCL | XML |\n|---|---|---|---|---|---|---|---|---|\n")
    def span(r) -> str:
        return format_size(r.min_size) if r.min_size == r.max_size else f"{format_size(r.min_size)}–{format_size(r.max_size)}"

    def vs(value) -> str:
        return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}x"

    lines = [f"| {_md(r.collective)} | {_md(r.target)} | {span(r)} | {_md(r.winner)} | "
             f"{_md(r.protocol)} | {r.instances} | {r.speedup:.2f}x | {vs(r.speedup_vs_nccl)} | "
             f"{_md(r.xml) if r.xml else '– (NCCL fallback)'} |"
             for r in table.itertuples()]
    return "# Best algorithm per collective and size\n\n" + head + "\n".join(lines) + "\n"


def readme(ranges: Sequence[Range], notes: Sequence[str]) -> str:
    xmls = [_md(r.xml) for r in ranges if r.xml]
    text = f"""# Exported collective algorithms

`table.md` / `table.csv` / `table.json` list, per collective and buffer-size range, the fastest verified
algorithm found by `autotaccl tune`, or the best baseline where no synthesized algorithm beat it. Every
XML here was re-verified (replay of the algorithm) and passed `autotaccl check-xml` before it was written.
Each file's `minBytes`/`maxBytes` select it only for its size range; `proto` is the tuned protocol.
"Speed-up vs NCCL" compares with stock NCCL as `autotaccl nccl-model` predicts it on the same profile.

## Loading into the MSCCL runtime

* **msccl-executor** (Azure/msccl-executor-nccl, RCCL): put the files in a directory of their own and set
  `MSCCL_ALGO_DIR=/path/to/this/dir` (keep the directory free of other files: a malformed file fails
  communicator init). Use one MPI rank per GPU. Sizes outside every range fall back to NCCL.
* **legacy msccl** (microsoft/msccl): `NCCL_ALGO=MSCCL,RING,TREE MSCCL_XML_FILES=a.xml:b.xml` (at most 4
  files, colon separated). Its `maxBytes` is exclusive.

Ranges won by a baseline have no XML: NCCL's own algorithm runs there.

Files: {', '.join(xmls) if xmls else 'none (the baselines won everywhere)'}
"""
    if notes:
        text += "\n## Notes\n\n" + "\n".join(f"* {_md(n)}" for n in notes) + "\n"
    return text


def _log_export(client, experiments, out: Path, table: pd.DataFrame) -> None:
    for experiment in experiments:
        rows = table[table["experiment"] == experiment.name]
        run_id = tracking.log_run(client, experiment.experiment_id, "export",
                                  tags={tracking.KIND: "export", "export.dir": str(out)},
                                  metrics={"export.ranges": len(rows), "export.xml_files": int((rows["xml"] != "").sum())},
                                  artifacts={"export/table.md": markdown(rows), "export/table.csv": rows.to_csv(index=False)})
        client.log_table(run_id, data=rows.reset_index(drop=True), artifact_file="export/table.json")
