"""The sweep report: one static HTML page with PNG plots per experiment (target x collective), and
``report.json`` with the per-size winners.

Per experiment: what to deploy (per band the winning configuration, its files in the export with links,
the load command of each runtime, speed-up against stock NCCL and the baselines, % of the bound); busbw
and time against size on log-log axes for the winner, every baseline, stock NCCL and the bound; Optuna's
optimisation history and parameter importances (matplotlib backend, no plotly); a per-size table. The
bands are the export's (``table.json`` of the latest ``autotaccl export`` of the experiment, or of
``export_dir``); without an export they are computed by the same code, so the winners are the same.
Every name that reaches the page is HTML-escaped.
"""
from __future__ import annotations

import datetime as dt
import html
import json
import logging
import math
import os
import warnings
from pathlib import Path
from string import Template
from typing import Sequence

import pandas as pd

from autotaccl.sizes import format_size
from autotaccl.tracking import local_path, logged_sizes
from autotaccl.tracking.plots import busbw_figure, progress_figure, save_png
from autotaccl.tuning import export as ex
from autotaccl.tuning import runtimes as rt
from autotaccl.tuning.winners import record

log = logging.getLogger(__name__)
TEMPLATE = Path(__file__).with_name("template.html")


def _load_study(storage: str, name: str):
    import optuna

    if "://" not in storage:
        if not Path(storage).is_file():
            raise FileNotFoundError(storage)
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        storage = JournalStorage(JournalFileBackend(storage))
    return optuna.load_study(study_name=name, storage=storage)


def _optuna_plots(study, slug: str, out: Path) -> tuple[list[tuple[str, str]], list[str]]:
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as ovm

    plots, notes = [], []
    for title, fn, fname in (("Optimisation history", ovm.plot_optimization_history, "history"),
                             ("Parameter importances", ovm.plot_param_importances, "importances")):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                ax = fn(study)
            fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            fig.set_size_inches(7, 4.2)
            fig.tight_layout()
            name = f"{slug}-{fname}.png"
            save_png(fig, out / name)
            plots.append((title, name))
        except Exception as err:   # e.g. fewer than two completed trials: no importances to show
            plt.close("all")
            notes.append(f"{title}: not available ({err})")
    return plots, notes


def _progress_plot(study, slug: str, out: Path) -> list[tuple[str, str]]:
    """Best so far per size (share of its attainable bound) against trials: is the sweep done?"""
    from autotaccl.tuning.done import best_so_far, history

    steps = best_so_far(history(study))
    sizes = [b.size for b in steps[-1]] if steps else []
    if not sizes:
        return []
    series = {format_size(s): [next((b.share for b in step if b.size == s), 0.0) for step in steps] for s in sizes}
    name = f"{slug}-progress.png"
    save_png(progress_figure(series, f"{study.study_name}: best so far per size"), out / name)
    return [("best so far per size vs trials", name)]


def export_rows(client, experiment, export_dir: Path | None) -> tuple[list[dict], Path | None]:
    """The experiment's bands as ``table.json`` rows, and the export directory they come from (None:
    computed here by the export's own code, no files written)."""
    import mlflow

    if export_dir is None:
        # the latest export of this experiment: in the exports' own experiment, or (a store exported before
        # they had one) in the sweep's
        exports = client.get_experiment_by_name(ex.EXPORTS)
        found = [mlflow.search_runs(experiment_ids=[exports.experiment_id], order_by=["start_time DESC"],
                                    filter_string=f"tags.`autotaccl.kind` = 'export' and "
                                                  f"tags.`autotaccl.experiment` = '{experiment.name}'", max_results=1)
                 ] if exports is not None else []
        found.append(mlflow.search_runs(experiment_ids=[experiment.experiment_id], max_results=1,
                                        filter_string="tags.`autotaccl.kind` = 'export'", order_by=["start_time DESC"]))
        found = [runs for runs in found if not runs.empty and isinstance(runs["tags.export.dir"].iloc[0], str)]
        if found:
            latest = max(found, key=lambda runs: runs["start_time"].iloc[0])
            export_dir = Path(latest["tags.export.dir"].iloc[0])
    if export_dir is not None and (export_dir / "table.json").is_file():
        rows = [r for r in json.loads((export_dir / "table.json").read_text()).get("ranges", [])
                if r.get("experiment") == experiment.name]
        if rows:
            return rows, export_dir
    frame = ex.candidates(client, experiment.experiment_id)
    if frame.empty or not (frame["tags.autotaccl.kind"] == "baseline").any():
        return [], None
    ranges = ex.ranges_for(experiment, frame, ex.excluded_runs(frame), *ex.nccl_run(experiment.experiment_id),
                           ex.unmeasured(experiment.experiment_id)[1])
    return ex.table_frame(ranges).to_dict("records"), None


def _trial(value) -> int | str:
    text = str(value)
    return int(text) if text.isdigit() else text


def row_winners(rows: Sequence[dict], sizes: Sequence[int]) -> list[dict]:
    """The per-size ``winners`` of the bands ``rows``."""
    out = []
    for s in sizes:
        row = next((r for r in rows if int(r["min_size"]) <= s <= int(r["max_size"])), None)
        if row is not None:
            out.append(record(row["collective"], s, _trial(row["trial"])))
    return out


def _pct_range(text: str) -> str:
    values = [float(v) for v in str(text or "").split(";") if v and v != "nan"]
    if not values:
        return "–"
    lo, hi = min(values), max(values)
    return f"{lo:.1f}%" if math.isclose(lo, hi, abs_tol=0.05) else f"{lo:.1f}–{hi:.1f}%"


def file_label(path: str, rest: str = "") -> tuple[str, str]:
    """The short label of an exported file in the deploy table (``XML``, ``plan out``, ``plan in``, ``tuner
    line N``) and what its cell says beyond it (the tuner row's fallback note), so that no column is as wide
    as a file name: the band's file names differ only in the band, which the row already gives."""
    if path.endswith(".xml"):
        return "XML", rest
    if path.endswith(".outofplace.plan.json"):
        return "plan out", rest
    if path.endswith(".inplace.plan.json"):
        return "plan in", rest
    if path.endswith("nccl_tuner.conf"):
        line, _, note = rest.partition(" (")
        return f"tuner {line}".strip(), note.rstrip(")")
    return path.rsplit("/", 1)[-1], rest


def deploy_section(rows: Sequence[dict], export_dir: Path | None, page_dir: Path) -> str:
    """What to deploy: per band the winner's configuration, its files (links into the export) and the
    speed-ups; then the command that loads the export in each runtime."""
    e = html.escape

    def link(cell: str) -> str:
        """A file cell's files by short label (its path on hover), each a link into the export."""
        names = [n for n in str(cell or "").split(", ") if n]
        if not names or names[0].startswith("stock NCCL"):
            return e(str(cell or "–"))
        out = []
        for name in names:
            path, _, rest = name.partition(" ")
            label, note = file_label(path, rest)
            shown = f"{export_dir / path}" if export_dir is not None else path
            note = f" <span class=\"note\" title=\"{e(note)}\">({e(note.split(':')[0])})</span>" if note else ""
            if export_dir is None:
                out.append(f"<span class=\"file\" title=\"{e(shown)}\">{e(label)}</span>{note}")
            else:
                href = os.path.relpath(export_dir / path, page_dir)
                out.append(f"<a class=\"file\" href=\"{e(href)}\" title=\"{e(shown)}\">{e(label)}</a>{note}")
        return "<br>".join(out)

    def num(value, fmt: str) -> str:
        try:
            v = float(value)
        except (TypeError, ValueError):
            return "–"
        return "–" if math.isnan(v) else fmt.format(v)

    def served(r: dict, col: str) -> str:
        """Under the mscclpp cell, the candidate it serves where that is not the band's winner (a switch
        schedule MSCCL XML cannot express, or what loads), with the export's reason on hover."""
        plan = r.get("mscclpp_winner")
        if col != "mscclpp" or not plan or plan == r.get("winner"):
            return ""
        return f"<br><span class=\"note\" title=\"{e(str(r.get('why') or ''))}\">{e(str(plan))}</span>"

    body = []
    for r in rows:
        hi = None if r.get("max_bytes") in ("", None) or (isinstance(r.get("max_bytes"), float)
                                                          and math.isnan(r["max_bytes"])) else int(r["max_bytes"])
        config = "<br>".join(e(c) for c in str(r.get("config") or "").split(";") if c) or "–"
        unmeasured = str(r.get("not_measured") or "")
        knob = (lambda name, v: f"{e(str(v))} <span class=\"note\">(not measured)</span>"
                if name in unmeasured else e(str(v)))
        body.append(
            f"<tr><td>{e(rt.band_text(int(r['min_bytes']), hi))}</td><td class=\"l\">{e(str(r['winner']))}</td>"
            f"<td class=\"l\">{e(str(r.get('engine') or '–'))}</td><td class=\"l\">{config}</td>"
            f"<td>{knob('protocol', r['protocol'])}</td><td>{knob('instances', r['instances'])}</td>"
            f"<td>{num(r.get('speedup_vs_nccl'), '{:.2f}x')}</td><td>{num(r.get('speedup'), '{:.2f}x')}</td>"
            f"<td>{_pct_range(r.get('bound_pct'))}</td>"
            + "".join(f"<td class=\"l\">{link(r.get(col))}{served(r, col)}</td>"
                      for col in ("msccl", "msccl_legacy", "mscclpp", "nccl"))
            + "</tr>")
    table = ("<table class=\"winners\"><tr><th>bytes (inclusive)</th><th class=\"l\">winner</th>"
             "<th class=\"l\">engine</th><th class=\"l\">sketch parameters</th><th>protocol</th><th>instances</th>"
             "<th>vs stock NCCL</th><th>vs best baseline</th><th>% of bound</th><th class=\"l\">msccl</th>"
             "<th class=\"l\">msccl-legacy</th><th class=\"l\">mscclpp</th><th class=\"l\">nccl</th></tr>"
             + "".join(body) + "</table>")
    where = str(export_dir) if export_dir is not None else "EXPORT"
    load = rt.load_commands(where)
    commands = "".join(f"<dt>{e(name)}</dt><dd><code>{e(cmd)}</code></dd>" for name, cmd in load.items())
    note = (f"<p class=\"note\">Files under <code>{e(str(export_dir))}</code>: hover a label for its path.</p>"
            if export_dir is not None else "<p class=\"note\">No export of this experiment found: run "
            "<code>autotaccl export</code> to write the files (hover a label for its name).</p>")
    return f"<h3>What to deploy</h3>{table}{note}<dl class=\"load\">{commands}</dl>"


def experiment_section(experiment, frame: pd.DataFrame, out: Path, client=None, export_dir: Path | None = None,
                       page_dir: Path | None = None, tracking_uri: str | None = None) -> tuple[str, list[dict]]:
    """The experiment's HTML section and its per-size winners (``tracking_uri`` resolves the study's storage
    where the runs name it relative to their run directory)."""
    e = html.escape
    slug = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in experiment.name)
    kind = frame.get("tags.autotaccl.kind", pd.Series(dtype=str))
    bases = frame[kind == "baseline"]
    sweeps = frame[kind == "sweep"]
    sizes = logged_sizes(frame)
    parts = [f"<h2 id=\"{e(slug)}\">{e(experiment.name)}</h2>"]
    counts = frame[kind == "trial"].get("tags.state", pd.Series(dtype=str)).value_counts().to_dict()
    parts.append(f"<p>{len(frame[kind == 'trial'])} trials ("
                 + ", ".join(f"{e(str(k))}: {v}" for k, v in sorted(counts.items())) + f"), {len(bases)} baselines.</p>")
    plots: list[tuple[str, str]] = []
    notes: list[str] = []
    rows, found_dir = export_rows(client, experiment, export_dir) if client is not None else ([], None)
    won = row_winners(rows, sizes)
    if sizes and not bases.empty and rows:
        parts.append(deploy_section(rows, found_dir, page_dir or out))
        by_id = frame.set_index("run_id")
        band = {s: next(r for r in rows if int(r["min_size"]) <= s <= int(r["max_size"])) for s in sizes}
        winner_runs = {s: by_id.loc[band[s]["run_id"]] for s in sizes}
        busbw, times = {}, {}
        busbw["winner"] = (sizes, [winner_runs[s][f"metrics.busbw_GBps.{s}"] for s in sizes])
        times["winner"] = (sizes, [winner_runs[s][f"metrics.time_us.{s}"] for s in sizes])
        for _, run in bases.iterrows():
            busbw[f"baseline {run['tags.baseline']}"] = (sizes, [run[f"metrics.busbw_GBps.{s}"] for s in sizes])
            times[f"baseline {run['tags.baseline']}"] = (sizes, [run[f"metrics.time_us.{s}"] for s in sizes])
        nccl = frame[kind == "nccl"]
        nccl_t = {}
        if not nccl.empty and all(f"metrics.time_us.{s}" in nccl for s in sizes):
            busbw["stock NCCL (model)"] = (sizes, [nccl[f"metrics.busbw_GBps.{s}"].iloc[0] for s in sizes])
            nccl_t = {s: nccl[f"metrics.time_us.{s}"].iloc[0] for s in sizes}
            times["stock NCCL (model)"] = (sizes, [nccl_t[s] for s in sizes])
        bound_cols = [f"metrics.bound_busbw_GBps.{s}" for s in sizes]
        if all(c in bases for c in bound_cols):
            busbw["bound"] = (sizes, [bases[c].iloc[0] for c in bound_cols])
        styles = {"bound": "k--", "winner": "o-"}
        for what, series, label in (("busbw", busbw, "busbw (GB/s)"), ("time", times, "time (µs)")):
            name = f"{slug}-{what}.png"
            save_png(busbw_figure(series, f"{experiment.name}: {what} vs size (log-log)", styles, label, logy=True),
                     out / name)
            plots.append((f"{what} vs size", name))
        table_rows = []
        for s in sizes:
            run, row = winner_runs[s], band[s]
            base = bases.loc[bases[f"metrics.time_us.{s}"].idxmin()]
            best_t, bt = run[f"metrics.time_us.{s}"], base[f"metrics.time_us.{s}"]
            vs = f"{nccl_t[s] / best_t:.2f}x" if s in nccl_t else "–"
            table_rows.append(
                f"<tr><td>{e(format_size(s))}</td><td class=\"l\">{e(str(row['winner']))}</td><td>{best_t:.2f}</td>"
                f"<td class=\"l\">{e(str(base['tags.baseline']))}</td><td>{bt / best_t:.2f}x</td><td>{vs}</td>"
                f"<td>{run[f'metrics.busbw_GBps.{s}']:.2f}</td><td>{run[f'metrics.bound_pct.{s}']:.1f}%</td></tr>")
        table = ("<h3>Per size</h3><table class=\"sizes\"><tr><th>size</th><th class=\"l\">winner</th><th>time (µs)</th>"
                 "<th class=\"l\">best baseline</th><th>speed-up</th><th>vs NCCL</th><th>busbw (GB/s)</th>"
                 "<th>% of bound</th></tr>" + "".join(table_rows) + "</table>")
    else:
        table = "<p class=\"note\">No baseline or measured runs in this experiment.</p>"
    if not sweeps.empty and sweeps.get("params.runner", pd.Series(["sim"])).iloc[0] == "sim":
        notes.append("Measured by the simulator (protocols, channels and shared links modelled; calibrate the profile "
                     "with `autotaccl calibrate` from nccl-tests tables of the machine to trust its numbers).")
    if not sweeps.empty and "tags.optuna.storage" in sweeps:
        storage, study_name = sweeps["tags.optuna.storage"].iloc[0], sweeps["tags.optuna.study"].iloc[0]
        try:
            storage = local_path(tracking_uri, storage) if tracking_uri else storage
            study = _load_study(storage, study_name)
            more, why = _optuna_plots(study, slug, out)
            plots += more + _progress_plot(study, slug, out)
            notes += why
        except Exception as err:   # the storage may live on another machine
            notes.append(f"Optuna study {study_name} not readable here: {err}")
    parts.append("<div class=\"plots\">" + "".join(
        f"<figure><img src=\"{e(name)}\" alt=\"{e(title)}\">"
        f"<figcaption>{e(title)}</figcaption></figure>" for title, name in plots) + "</div>")
    parts.append(table)
    parts += [f"<p class=\"note\">{e(n)}</p>" for n in notes]
    return "\n".join(parts), won


def build_report(tracking_uri: str, experiments: Sequence[str] | None, out_dir: str | Path,
                 export_dir: str | Path | None = None) -> Path:
    """Write ``index.html``, its PNGs and ``report.json`` into ``out_dir`` (replaced atomically); returns the
    page's path. ``export_dir``: the export to link to (default: each experiment's latest export)."""
    import mlflow

    from autotaccl.safety import replaced_dir
    from autotaccl.tracking import autotaccl_experiments

    client, found = autotaccl_experiments(tracking_uri, experiments)
    out = Path(out_dir).resolve()
    with replaced_dir(out) as tmp:
        sections, winners = [], []
        where = None if export_dir is None else Path(export_dir).resolve()
        for experiment in found:
            frame = mlflow.search_runs(experiment_ids=[experiment.experiment_id], max_results=50_000)
            section, won = experiment_section(experiment, frame, tmp, client, where, out, tracking_uri)
            sections.append(section)
            winners += won
        (tmp / "report.json").write_text(json.dumps({"winners": winners}, indent=1))
        page = Template(TEMPLATE.read_text()).substitute(
            title=html.escape("autotaccl sweep report: " + ", ".join(x.name for x in found)),
            source=html.escape(tracking_uri), generated=html.escape(dt.datetime.now().isoformat(timespec="seconds")),
            sections="\n".join(sections))
        (tmp / "index.html").write_text(page)
    return out / "index.html"
