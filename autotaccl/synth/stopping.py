"""When synthesis may stop searching: its result is within a gap of the known bound (``autotaccl.bounds``).

Two rules, one gap (``SynthOptions.bound_gap``):

* a MILP stage stops as soon as its incumbent's makespan is within the gap of the collective's bound at
  the target size (the stage's makespan is at least that bound, so nothing better than the gap remains);
* the MILP is not run at all when the greedy schedule is already within the gap of the best time the
  simulator can give any algorithm that copies between GPUs (``autotaccl.selection.attainable_us``
  without the switch: no synthesized schedule moves data through it, so its bound would never be met).
"""
from __future__ import annotations

from dataclasses import replace

import networkx as nx

from ..bounds import bound_time_us, bounds
from ..milp.solution import SolverOptions
from ..model.algorithm import Algorithm
from ..selection import share_of_bound


def stop_at_bound(solver: SolverOptions, graph: nx.DiGraph, collective: str, size: float | None,
                  gap: float | None) -> SolverOptions:
    """``solver`` told to stop once a stage's makespan is within ``gap`` of ``collective``'s bound at
    ``size`` bytes on ``graph``; unchanged when ``size`` or ``gap`` is None."""
    if size is None or gap is None:
        return solver
    return replace(solver, stop_at=bound_time_us(bounds(graph, collective), size) * (1 + gap))


def skip_reason(greedy: Algorithm, graph: nx.DiGraph, size: int, gap: float, protocol: str | None = None,
                instances: int = 1) -> str | None:
    """Why the MILP need not run (``skipped: greedy at <share> of the bound``), or None when it may help."""
    share = share_of_bound(greedy, graph, size, protocol, instances, switch=False)
    return f"skipped: greedy at {100 * share:.1f}% of the bound" if share >= 1 - gap else None
