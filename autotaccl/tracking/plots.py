"""Matplotlib (Agg) plots shared by the tracking artifacts and the HTML report: no display, no plotly."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..sizes import format_size  # noqa: E402


def busbw_figure(series: Mapping[str, tuple[Sequence[int], Sequence[float]]], title: str,
                 styles: Mapping[str, str] | None = None, ylabel: str = "busbw (GB/s)", logy: bool = False):
    """A value (busbw in GB/s unless ``ylabel`` says otherwise) against buffer size (log2 x axis, and a log
    y axis with ``logy``), one line per label."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    styles = styles or {}
    for label, (sizes, values) in series.items():
        ax.plot(list(sizes), list(values), styles.get(label, "o-"), label=label, markersize=3)
    ax.set_xscale("log", base=2)
    sizes = sorted({s for xs, _ in series.values() for s in xs})
    if sizes:
        ticks = sizes if len(sizes) <= 12 else sizes[:: max(1, len(sizes) // 10)]
        ax.set_xticks(ticks)
        ax.set_xticklabels([format_size(s) for s in ticks], rotation=45, fontsize=8)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("buffer size (bytes)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def save_png(fig, path: Path) -> Path:
    path = Path(path)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def png_bytes(fig) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def progress_figure(series: Mapping[str, Sequence[float]], title: str):
    """Share of the attainable bound of the best trial so far (%) against trials, one line per size."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    for label, values in series.items():
        ax.plot(range(1, len(values) + 1), [100 * v for v in values], "-", label=label, drawstyle="steps-post")
    ax.set_xlabel("finished trials")
    ax.set_ylabel("best so far, % of attainable bound")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
