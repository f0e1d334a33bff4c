"""Synthesis: a sketch-restricted logical topology in, a verified :class:`~autotaccl.model.algorithm.Algorithm` out.

``synthesize(graph, collective, sketch, SynthOptions(engine="milp"|"greedy", ...)) -> SynthResult``.
"""
from ..milp.solution import StageReport
from .pipeline import Loader, SynthOptions, SynthResult, check_routes, milp_problem, synthesize

__all__ = ["Loader", "StageReport", "SynthOptions", "SynthResult", "check_routes", "milp_problem", "synthesize"]
