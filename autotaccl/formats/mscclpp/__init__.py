"""MSCCL++ execution plans: the plan model and the executor's constants (``plan``), a strict reader
(``parse``), the replaying checker (``check``) and the lowering of the IR (``lower``)."""
from .check.check import MODES, check_plan, check_plan_file, plan_stats
from .check.report import PlanReport, Problem
from .lower.lower import lower_plan, plan_text
from .lower.options import LoweringError, PlanOptions
from .parse import parse_plan, read_plan
from .plan import Plan, to_json

__all__ = ["MODES", "LoweringError", "Plan", "PlanOptions", "PlanReport", "Problem", "check_plan", "check_plan_file",
           "lower_plan", "parse_plan", "plan_stats", "plan_text", "read_plan", "to_json"]
