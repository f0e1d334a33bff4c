"""When a sweep is done: per size, its best trial against the attainable bound, and the stop rule.

Export picks the fastest trial per size, so a sweep's progress is per size too: the best time so far at
each size and its share of the bound (bound time / best time, 1.0 = at the bound). A sweep stops early
(``until``) once every size is within that share of its bound, or (``patience``) once that many finished
trials in a row improved no size's best.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

Results = Sequence[Mapping[str, Any]] | None      # a trial's per-size results (SizeResult dicts), None: none
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


@dataclass(frozen=True)
class SizeBest:
    size: int
    time_us: float | None       # best so far (None: no trial has a result yet)
    share: float                # of the attainable bound: bound time / best time (0 without a result)
    trial: int | None


def outcome(trial: FrozenTrial | optuna.Trial, state: TrialState) -> Results:
    """What a finished trial gave export: its per-size results if it completed verified, else None."""
    attrs = trial.user_attrs
    return attrs.get("results") if state == TrialState.COMPLETE and attrs.get("verified") else None


def history(study: optuna.Study) -> list[tuple[int, Results]]:
    """(trial number, outcome) of every finished trial that ran (interrupted ones are redone), in order."""
    trials = sorted(study.get_trials(deepcopy=False, states=_FINISHED), key=lambda t: t.number)
    return [(t.number, outcome(t, t.state)) for t in trials if not t.user_attrs.get("interrupted")]


def best_so_far(runs: Sequence[tuple[int, Results]]) -> list[list[SizeBest]]:
    """After each run in ``runs``: the best per size (sizes of the first result, in its order)."""
    best: dict[int, SizeBest] = {}
    out = []
    for number, results in runs:
        for r in results or ():
            old = best.get(r["size"])
            if old is None or r["time_us"] < old.time_us:
                best[r["size"]] = SizeBest(int(r["size"]), float(r["time_us"]), float(r["bound_pct"]) / 100, number)
        out.append([best[s] for s in sorted(best)])
    return out


def stop_reason(runs: Sequence[tuple[int, Results]], sizes: Sequence[int], until: float | None,
                patience: int | None) -> str | None:
    """Why the sweep can stop now (None: it goes on): every size within ``until`` of its bound, or the last
    ``patience`` runs improved no size."""
    if not runs:
        return None
    steps = best_so_far(runs)
    last = {b.size: b for b in steps[-1]}
    if until is not None and all(s in last and last[s].share >= until for s in sizes):
        worst = min(last[s].share for s in sizes)
        return f"every size is within {until:.0%} of its attainable bound (the farthest at {worst:.1%})"
    if patience is not None and len(runs) >= patience:
        idle = next(len(steps) - 1 - i for i in range(len(steps) - 1, -1, -1)
                    if i == 0 or _better(steps[i], steps[i - 1]))
        if idle >= patience:
            return f"no trial improved any size's best for {idle} trials (--patience {patience})"
    return None


def _better(now: Sequence[SizeBest], before: Sequence[SizeBest]) -> bool:
    old = {b.size: b.time_us for b in before}
    return any(b.size not in old or b.time_us < old[b.size] for b in now)
