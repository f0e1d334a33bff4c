"""``autotaccl check-plan PLAN.json``: static rules and a replay of an MSCCL++ execution plan.

Exit status 0: valid; 1: the plan breaks a rule (the first violation is printed with its rank, thread
block, operation and call); 2: the file is not a plan the executor's parser accepts (one line naming
the JSON path).
"""
from __future__ import annotations

from ..errors import InputError
from ..formats.mscclpp import check_plan_file
from .common import print_json


def register(subparsers) -> None:
    parser = subparsers.add_parser("check-plan", help="check an MSCCL++ execution plan by static rules and replay")
    parser.add_argument("plan", help="MSCCL++ execution plan (JSON)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--inplace", action="store_true", help="prove it for in-place calls")
    mode.add_argument("--outofplace", action="store_true", help="prove it for out-of-place calls")
    parser.add_argument("--ranks-per-node", type=int,
                        help="GPUs per node, to check memory channels stay inside a node (default: the plan's own "
                             "note, if it has one)")
    parser.add_argument("--offsets", action="store_true",
                        help="also replay with the buffers inside bigger allocations (not at their start), as "
                             "PyTorch's caching allocator places tensors")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.ranks_per_node is not None and args.ranks_per_node < 1:
        raise InputError("--ranks-per-node", str(args.ranks_per_node), "a whole number >= 1")
    mode = "inplace" if args.inplace else "outofplace" if args.outofplace else "plan"
    report = check_plan_file(args.plan, mode, args.ranks_per_node, args.offsets)
    if args.json:
        print_json(report.to_dict())
    else:
        print(report)
        for warning in report.warnings:
            print(f"  warning: {warning}")
    return 0 if report.valid else 1
