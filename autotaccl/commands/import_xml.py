"""``autotaccl import-xml FILE.xml -o ALGO.json``: an MSCCL XML algorithm as an IR algorithm."""
from __future__ import annotations

from ..formats.msccl.check.importer import import_xml
from ..model.algorithm import save_algorithm
from ..safety import output_file


def register(subparsers) -> None:
    parser = subparsers.add_parser("import-xml", help="turn an MSCCL XML algorithm into an algorithm JSON")
    parser.add_argument("xml", help="MSCCL XML file")
    parser.add_argument("-o", "--output", required=True, help="algorithm JSON file to write")
    parser.set_defaults(func=run)


def run(args) -> int:
    output_file(args.output)
    algorithm = import_xml(args.xml)
    save_algorithm(algorithm, args.output)
    print(f"{args.output}: {algorithm.collective.name} on {algorithm.ranks} ranks, chunk-up "
          f"{algorithm.collective.chunkup}, {len(algorithm.transfers)} transfers, {algorithm.num_steps} steps")
    return 0
