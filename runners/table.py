"""Print measurements in nccl-tests' table layout (v2.19, ``msccl-xml-and-nccl-tests.md`` §5.5).

Each row shows out-of-place then in-place (time, algbw, busbw, #wrong); with a baseline, every group
gets a ``%base`` column: busbw as a percentage of the baseline's busbw at the same size and mode.
"""
from __future__ import annotations

import math

import pandas as pd

GROUP = ("time", "algbw", "busbw", "#wrong")


def fixed(value: float, width: int) -> str:
    """nccl-tests' number format: 2 decimals if they fit the width, else 1, else 0, else scientific."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "N/A"
    for digits in (2, 1, 0):
        text = f"{value:.{digits}f}"
        if len(text) <= width:
            return text
    return f"{value:.{max(width - 6, 0)}e}"


def _wrong(value: float) -> str:
    return "N/A" if math.isnan(value) else f"{value:g}"


def _cells(row, base: pd.Series | None, with_base: bool) -> str:
    if row is None:
        text = f"  {'':>7s}  {'':>6s}  {'':>6s}  {'':>6s}"
        return text + (f"  {'':>6s}" if with_base else "")
    text = f"  {fixed(row.time_us, 7):>7s}  {fixed(row.algbw, 6):>6s}  {fixed(row.busbw, 6):>6s}  {_wrong(row.wrong):>6s}"
    if with_base:
        pct = math.nan
        if base is not None and base.busbw > 0 and not math.isnan(row.busbw):
            pct = 100.0 * row.busbw / base.busbw
        text += f"  {fixed(pct, 6):>6s}"
    return text


def format_table(df: pd.DataFrame, baseline: pd.DataFrame | None = None, title: str = "") -> str:
    """The table, the out-of-bounds line and the average bus bandwidth, as nccl-tests prints them."""
    with_base = baseline is not None
    extra = ("%base",) if with_base else ()
    group_width = 2 + 7 + 3 * 8 + len(extra) * 8
    lines = [f"# {title}"] if title else []
    lines.append("#" + " " * 61 + "out-of-place".center(group_width) + "in-place".center(group_width))
    names = "  ".join(f"{n:>7s}" if n == "time" else f"{n:>6s}" for n in GROUP + extra)
    units = "  ".join(f"{u:>7s}" if i == 0 else f"{u:>6s}"
                      for i, u in enumerate(("(us)", "(GB/s)", "(GB/s)", "") + ("(%)",) * len(extra)))
    lines.append(f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  {names}  {names}")
    lines.append(f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  {units}  {units}")
    base = {}
    if with_base:
        base = {(int(r.size), bool(r.inplace)): r for r in baseline.itertuples()}
    for size in sorted(df["size"].unique()):
        cells = {bool(r.inplace): r for r in df[df["size"] == size].itertuples()}
        first = next(iter(cells.values()))
        text = f"{int(size):12d}  {int(first.count):12d}  {first.type:>8s}  {first.redop:>6s}  {-1:6d}"
        for mode in (False, True):
            text += _cells(cells.get(mode), base.get((int(size), mode)), with_base)
        lines.append(text)
    bad = int((df["wrong"].fillna(0) > 0).sum())
    lines.append(f"# Out of bounds values : {bad} {'OK' if bad == 0 else 'FAILED'}")
    mean = df["busbw"].mean()
    lines.append(f"# Avg bus bandwidth    : {0.0 if math.isnan(mean) else mean:g} ")
    lines.append("#")
    return "\n".join(lines)
