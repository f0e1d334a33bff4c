"""``autotaccl verify ALGO.json``: prove an algorithm implements its collective."""
from __future__ import annotations

from ..model.algorithm import VerificationError, load_algorithm, verify
from .common import print_json


def register(subparsers) -> None:
    parser = subparsers.add_parser("verify", help="replay an algorithm and prove its postcondition")
    parser.add_argument("algorithm", help="algorithm JSON file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    algorithm = load_algorithm(args.algorithm)
    try:
        verify(algorithm)
        error, index = None, None
    except VerificationError as err:
        error, index = str(err), err.index
    if args.json:
        print_json({"valid": error is None, "error": error, "transfer": index, "name": algorithm.name,
                    "collective": algorithm.collective.name, "ranks": algorithm.ranks,
                    "transfers": len(algorithm.transfers), "steps": algorithm.num_steps})
    elif error is None:
        print(f"{args.algorithm}: valid {algorithm.collective.name} on {algorithm.ranks} ranks "
              f"({len(algorithm.transfers)} transfers, {algorithm.num_steps} steps)")
    else:
        print(f"{args.algorithm}: INVALID: {error}")
    return 0 if error is None else 1
