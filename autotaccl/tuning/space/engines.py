"""Which synthesis engines a search space's target can really use: an ``engine: milp`` choice whose routing
model cannot be built would return the greedy schedule in every trial (status ``fallback``), so the
space says so at load time instead of falling back silently, trial after trial."""
from __future__ import annotations

import logging
from typing import Any, Mapping

from ...errors import InputError
from ...sketch import logical_topology
from ...sketch.knobs import sketch_from_knobs
from ...synth import milp_problem
from .model import SearchSpace

log = logging.getLogger(__name__)


def milp_choice(space: SearchSpace) -> str | None:
    """The field that lets trials choose ``engine: milp`` (``fixed.engine`` or ``parameters.engine.choices[i]``),
    or None."""
    if space.fixed.get("engine") == "milp":
        return "fixed.engine"
    for p in space.parameters:
        if p.name == "engine" and "milp" in p.choices:
            return f"parameters.engine.choices[{p.choices.index('milp')}]"
    return None


def check_engines(space: SearchSpace) -> None:
    """Refuse an ``engine: milp`` choice when no collective of the target can build its routing model (at
    chunkup 1 and the space's fixed knobs); log one warning line naming the collectives where it cannot,
    at chunkup 1 or at the largest chunkup the space samples.

    Raises InputError naming the field and the reason.
    """
    where = milp_choice(space)
    if where is None:
        return
    graph = space.graph()
    problems = {}
    for chunkup in sorted({1, _most_chunkup(space)}):
        knobs: Mapping[str, Any] = {**space.fixed, "engine": "milp", "chunkup": chunkup}
        sketch = sketch_from_knobs(space.profile, space.nodes, knobs, space.source)
        for collective in space.collectives:
            problem = milp_problem(logical_topology(graph, collective, sketch, space.sizes[0]))
            if problem and collective not in problems:
                problems[collective] = f"{problem} at chunkup {chunkup}"
    if not problems:
        return
    said = "; ".join(f"{c}: {p}" for c, p in problems.items())
    if len(problems) == len(space.collectives) and all(p.endswith("at chunkup 1") for p in problems.values()):
        raise InputError(space.source, where, f"greedy: the milp engine cannot build its routing model on "
                                              f"{space.target_name} ({said})")
    log.warning("%s: %s: engine milp falls back to greedy on %s", space.source, where, said)


def _most_chunkup(space: SearchSpace) -> int:
    """The largest chunk-up factor the space's trials can use."""
    if "chunkup" in space.fixed:
        return int(space.fixed["chunkup"])
    for p in space.parameters:
        if p.name == "chunkup":
            return int(max(p.choices) if p.kind == "categorical" else p.high)
    return 1
