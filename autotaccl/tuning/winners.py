"""The one rule that names the winner at a buffer size: the tune summary, ``export``, ``report`` and the
sweep's MLflow parent run all call :func:`pick`, so they name the same trial.

A trial wins only if it is strictly faster than the fastest baseline. Among trials equally fast (the
same algorithm found twice, or knobs the runner cannot tell apart) the tie goes to fewer steps, then
fewer transfers, then a trial that synthesized its algorithm (not a cache hit), then the earliest trial (a
trial redone after an interruption counts as the trial it redoes, and its cache hit on its own earlier
synthesis is not held against it, so an interruption changes no winner).
Baselines tied with each other go by name. Times within ``TIE`` (relative) of each other are equal, so a
value that went through JSON or a database and came back one ulp off does not change the winner.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

TIE = 1e-9


@dataclass(frozen=True)
class Entry:
    """One candidate at one size. ``trial``: the Optuna trial number, or the baseline's name."""
    trial: int | str
    time_us: float
    steps: int = 0
    transfers: int = 0
    cache_hit: bool = False
    handle: Any = None           # the caller's own record (an MLflow run, an Optuna trial)
    rank: int | None = None      # place among trials (default: the trial number; a retry: the trial it redoes)
    switch: bool = False         # the trial's switch candidate (tuning/evaluate.SWITCH), not its XML-loadable one

    @property
    def is_baseline(self) -> bool:
        return isinstance(self.trial, str)

    @property
    def place(self) -> int | str:
        return self.trial if self.rank is None else self.rank

    @property
    def is_retry(self) -> bool:
        """A trial redoing an interrupted one: its cache hit is its own earlier synthesis, not another trial's."""
        return self.rank is not None and self.rank != self.trial


def _fastest(entries: Sequence[Entry], order) -> Entry | None:
    if not entries:
        return None
    best = min(e.time_us for e in entries)
    return min((e for e in entries if e.time_us <= best * (1 + TIE)), key=order)


def pick(trials: Iterable[Entry], baselines: Iterable[Entry]) -> tuple[Entry, Entry]:
    """(winner, fastest baseline) at one size; ``baselines`` must not be empty. NaN times never win."""
    valid = [e for e in trials if e.time_us == e.time_us]
    base = _fastest([e for e in baselines if e.time_us == e.time_us], lambda e: str(e.trial))
    if base is None:
        raise ValueError("no baseline time at this size")
    best = _fastest(valid, lambda e: (e.steps, e.transfers, e.cache_hit and not e.is_retry, e.place, e.trial, e.switch))
    if best is not None and best.time_us < base.time_us * (1 - TIE):
        return best, base
    return base, base


def record(collective: str, size: int, trial: int | str) -> dict:
    """One item of the ``"winners"`` list that ``tune --json``, ``table.json`` and ``report.json`` carry."""
    return {"collective": collective, "bytes": int(size), "trial": trial}


def exportable(xml_error: Any) -> bool:
    """A trial whose MSCCL XML did not lower during the sweep (its ``xml_error``: an Optuna user attr, an
    MLflow tag; None, NaN or empty when it did) cannot be exported, so it never wins."""
    return xml_error is None or xml_error != xml_error or xml_error == ""


def result_at(trial: Any, size: int) -> dict | None:
    """The result of an Optuna trial at ``size`` bytes (None where it has none: a size added by ``--extend``
    after it ran)."""
    return next((r for r in trial.user_attrs.get("results", ()) if r["size"] == size), None)


def trial_entries(trials: Iterable[Any], size: int) -> list[Entry]:
    """The completed, exportable Optuna trials (``FrozenTrial``) that ran at ``size`` bytes."""
    return [Entry(t.number, float(r["time_us"]), int(t.user_attrs.get("steps", 0)),
                  int(t.user_attrs.get("transfers", 0)), bool(t.user_attrs.get("cache_hit", False)), t,
                  int(t.user_attrs.get("retry_of", t.number)))
            for t in trials if exportable(t.user_attrs.get("xml_error")) and (r := result_at(t, size)) is not None]


def run_entries(runs: Any, size: int, switch: bool = False) -> list[Entry]:
    """MLflow runs (rows of ``search_runs``) at ``size``: trials by Optuna number, baselines by name;
    ``switch``: the trials' switch candidates (their ``switch.*`` metrics) instead."""
    prefix = "switch." if switch else ""
    col = f"metrics.{prefix}time_us.{size}"

    def num(row, key: str) -> int:
        value = row.get(key)
        return 0 if value is None or value != value else int(value)

    out = []
    for _, row in runs.iterrows():
        if row.get(col) is None or row[col] != row[col]:
            continue
        if row.get("tags.autotaccl.kind") == "baseline":
            out.append(Entry(str(row["tags.baseline"]), float(row[col]), handle=row))
        else:
            out.append(Entry(int(row["tags.optuna.trial"]), float(row[col]), num(row, f"metrics.{prefix}steps"),
                             num(row, f"metrics.{prefix}transfers"), str(row.get("tags.cache_hit")) == "true", row,
                             int(rank) if isinstance(rank := row.get("tags.rank"), str) and rank.isdigit() else None,
                             switch))
    return out
