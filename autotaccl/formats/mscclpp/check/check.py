"""``check_plan``: static rules, then a replay of several back-to-back calls in each buffer mode."""
from __future__ import annotations

import itertools
import logging
from dataclasses import replace
from pathlib import Path

from ....errors import InputError
from ..parse import read_plan
from ..plan import Plan
from .replay import Replay
from .report import PlanReport, Problem
from .static import static_problems

log = logging.getLogger(__name__)
MODES = ("plan", "inplace", "outofplace", "both")


def plan_stats(plan: Plan) -> dict:
    tbs = [tb for g in plan.gpus for tb in g.threadblocks]
    return {"ranks": plan.ranks, "threadblocks": len(tbs),
            "max_threadblocks_per_rank": max(len(g.threadblocks) for g in plan.gpus),
            "operations": sum(tb.num_operations for tb in tbs),
            "max_operations_per_threadblock": max((tb.num_operations for tb in tbs), default=0),
            "memory_channels": sum(len(g.peers("memory")) for g in plan.gpus),
            "port_channels": sum(len(g.peers("port")) for g in plan.gpus),
            "max_scratch_chunks": max(g.scratch_chunks for g in plan.gpus)}


def check_plan(plan: Plan, source: str = "<plan>", mode: str = "plan", ranks_per_node: int | None = None,
               calls: int | None = None, offsets: bool = False) -> PlanReport:
    """Every rule ``plan`` breaks, for the buffer mode(s) ``mode`` (``plan``: the one its ``inplace`` flag
    selects it for). ``ranks_per_node`` (default: the plan's own note) lets memory channels be checked to
    stay inside a node. The replay places each buffer at the start of its allocation; ``offsets`` replays
    each mode again with the buffers further inside (as a caching allocator hands them out)."""
    if mode not in MODES:
        raise InputError("--mode", repr(mode), f"one of: {', '.join(MODES)}")
    modes = {"plan": ("inplace" if plan.inplace else "outofplace",), "both": ("inplace", "outofplace")}.get(mode, (mode,))
    if ranks_per_node is None:
        note = plan.meta.get("ranks_per_node") if isinstance(plan.meta, dict) else None
        ranks_per_node = note if isinstance(note, int) and not isinstance(note, bool) and note > 0 else None
    errors, warnings = static_problems(plan, ranks_per_node)
    if ranks_per_node is None and any(g.peers("memory") for g in plan.gpus) and plan.ranks > 1:
        warnings.append(Problem("ranks per node unknown: memory channels are not checked to stay inside a node"))
    replay_calls = 0
    if not errors:
        for m, shifted in itertools.product(modes, (False, True) if offsets else (False,)):
            replay = Replay(plan, m, calls, shifted)
            replay_calls = replay.calls
            problem = replay.run()
            if problem is not None:
                if shifted:
                    problem = replace(problem, mode=f"{m}, buffers inside their allocations")
                errors.append(problem)
                break
    report = PlanReport(source, plan.collective, plan.ranks, modes, tuple(errors), tuple(warnings), replay_calls,
                        plan_stats(plan))
    log.info("%s", report)
    return report


def check_plan_file(path: str | Path, mode: str = "plan", ranks_per_node: int | None = None,
                    offsets: bool = False) -> PlanReport:
    """``check_plan`` of a plan file; InputError if it is not a plan the executor's parser accepts."""
    plan, source = read_plan(path)
    return check_plan(plan, source, mode, ranks_per_node, offsets=offsets)
