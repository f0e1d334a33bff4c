"""The sweep report: one static HTML page with PNG plots per experiment (target x collective).

Per experiment: busbw against size for the best synthesized algorithm, every baseline and the bound;
Optuna's optimisation history and parameter importances (matplotlib backend, no plotly); a per-size
table. Every name that reaches the page is HTML-escaped.
"""
from __future__ import annotations

import datetime as dt
import html
import logging
import warnings
from pathlib import Path
from string import Template
from typing import Sequence

import pandas as pd

from autotaccl.sizes import format_size
from autotaccl.tracking import logged_sizes

from autotaccl.tracking.plots import busbw_figure, save_png

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


def experiment_section(experiment, frame: pd.DataFrame, out: Path) -> str:
    e = html.escape
    slug = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in experiment.name)
    kind = frame.get("tags.autotaccl.kind", pd.Series(dtype=str))
    bases = frame[kind == "baseline"]
    trials = frame[(kind == "trial") & (frame.get("tags.verified") == "true")]
    sweeps = frame[kind == "sweep"]
    sizes = logged_sizes(frame)
    parts = [f"<h2 id=\"{e(slug)}\">{e(experiment.name)}</h2>"]
    counts = frame[kind == "trial"].get("tags.state", pd.Series(dtype=str)).value_counts().to_dict()
    parts.append(f"<p>{len(frame[kind == 'trial'])} trials ("
                 + ", ".join(f"{e(str(k))}: {v}" for k, v in sorted(counts.items())) + f"), {len(bases)} baselines.</p>")
    plots: list[tuple[str, str]] = []
    notes: list[str] = []
    if sizes and not bases.empty:
        series = {}
        if not trials.empty:
            best_busbw = [trials[f"metrics.busbw_GBps.{s}"].max() for s in sizes]
            series["best synthesized"] = (sizes, best_busbw)
        for _, run in bases.iterrows():
            series[f"baseline {run['tags.baseline']}"] = (sizes, [run[f"metrics.busbw_GBps.{s}"] for s in sizes])
        nccl = frame[kind == "nccl"]
        nccl_t = {}
        if not nccl.empty and all(f"metrics.time_us.{s}" in nccl for s in sizes):
            series["stock NCCL (model)"] = (sizes, [nccl[f"metrics.busbw_GBps.{s}"].iloc[0] for s in sizes])
            nccl_t = {s: nccl[f"metrics.time_us.{s}"].iloc[0] for s in sizes}
        bound_cols = [f"metrics.bound_busbw_GBps.{s}" for s in sizes]
        if all(c in bases for c in bound_cols):
            series["bound"] = (sizes, [bases[c].iloc[0] for c in bound_cols])
        name = f"{slug}-busbw.png"
        save_png(busbw_figure(series, f"{experiment.name}: busbw vs size", {"bound": "k--", "best synthesized": "o-"}),
                 out / name)
        plots.append(("busbw vs size", name))
        rows = []
        for s in sizes:
            base = bases.loc[bases[f"metrics.time_us.{s}"].idxmin()]
            bt = base[f"metrics.time_us.{s}"]
            if not trials.empty:
                t = trials.loc[trials[f"metrics.time_us.{s}"].idxmin()]
                tt = t[f"metrics.time_us.{s}"]
                win = f"trial {t['tags.optuna.trial']}" if tt < bt else f"baseline {base['tags.baseline']}"
                best_t, best_bus, pct = min(tt, bt), max(t[f"metrics.busbw_GBps.{s}"], base[f"metrics.busbw_GBps.{s}"]), \
                    max(t[f"metrics.bound_pct.{s}"], base[f"metrics.bound_pct.{s}"])
            else:
                win, best_t, best_bus, pct = f"baseline {base['tags.baseline']}", bt, base[f"metrics.busbw_GBps.{s}"], \
                    base[f"metrics.bound_pct.{s}"]
            vs = f"{nccl_t[s] / best_t:.2f}x" if s in nccl_t else "–"
            rows.append(f"<tr><td>{e(format_size(s))}</td><td class=\"l\">{e(win)}</td><td>{best_t:.2f}</td>"
                        f"<td class=\"l\">{e(str(base['tags.baseline']))}</td><td>{bt / best_t:.2f}x</td>"
                        f"<td>{vs}</td><td>{best_bus:.2f}</td><td>{pct:.1f}%</td></tr>")
        table = ("<table><tr><th>size</th><th class=\"l\">winner</th><th>time (µs)</th><th class=\"l\">best baseline</th>"
                 "<th>speed-up</th><th>vs NCCL</th><th>busbw (GB/s)</th><th>% of bound</th></tr>" + "".join(rows)
                 + "</table>")
    else:
        table = "<p class=\"note\">No baseline or measured runs in this experiment.</p>"
    if not sweeps.empty and sweeps.get("params.runner", pd.Series(["sim"])).iloc[0] == "sim":
        notes.append("Measured by the simulator (protocols, channels and shared links modelled; calibrate the profile "
                     "with `autotaccl calibrate` from nccl-tests tables of the machine to trust its numbers).")
    if not sweeps.empty and "tags.optuna.storage" in sweeps:
        storage, study_name = sweeps["tags.optuna.storage"].iloc[0], sweeps["tags.optuna.study"].iloc[0]
        try:
            study = _load_study(storage, study_name)
            more, why = _optuna_plots(study, slug, out)
            plots += more
            notes += why
        except Exception as err:   # the storage may live on another machine
            notes.append(f"Optuna study {study_name} not readable here: {err}")
    parts.append("<div class=\"plots\">" + "".join(
        f"<figure><img src=\"{e(name)}\" alt=\"{e(title)}\">"
        f"<figcaption>{e(title)}</figcaption></figure>" for title, name in plots) + "</div>")
    parts.append(table)
    parts += [f"<p class=\"note\">{e(n)}</p>" for n in notes]
    return "\n".join(parts)


def build_report(tracking_uri: str, experiments: Sequence[str] | None, out_dir: str | Path) -> Path:
    """Write ``index.html`` and its PNGs into ``out_dir`` (replaced atomically); returns the page's path."""
    import mlflow

    from autotaccl.safety import replaced_dir
    from autotaccl.tracking import autotaccl_experiments

    client, found = autotaccl_experiments(tracking_uri, experiments)
    out = Path(out_dir).resolve()
    with replaced_dir(out) as tmp:
        sections = []
        for experiment in found:
            frame = mlflow.search_runs(experiment_ids=[experiment.experiment_id], max_results=50_000)
            sections.append(experiment_section(experiment, frame, tmp))
        page = Template(TEMPLATE.read_text()).substitute(
            title=html.escape("autotaccl sweep report: " + ", ".join(x.name for x in found)),
            source=html.escape(tracking_uri), generated=html.escape(dt.datetime.now().isoformat(timespec="seconds")),
            sections="\n".join(sections))
        (tmp / "index.html").write_text(page)
    return out / "index.html"
