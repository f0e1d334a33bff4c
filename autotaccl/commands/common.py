"""Argument helpers shared by several sub-commands."""
from __future__ import annotations

import argparse
import json
from typing import Any

import networkx as nx

from ..model.collectives import canonical_name
from ..model.hardware import load_hardware
from ..model.topology import build_topology
from ..sizes import parse_size


def register(subparsers) -> None:
    """Not a command: this module only holds helpers."""


def print_json(obj: Any) -> None:
    """The one JSON object a ``--json`` command prints."""
    print(json.dumps(obj, indent=1, default=str))


def add_hardware_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hardware", required=True, help="profile name (see hardware/) or a YAML / TACCL JSON file")
    parser.add_argument("--nodes", type=int, default=1, help="number of nodes (default 1)")
    parser.add_argument("--chunk-size", help="chunk size a TACCL topology JSON was profiled for (e.g. 1M)")


def topology_from_args(args: argparse.Namespace) -> nx.DiGraph:
    chunk = parse_size(args.chunk_size, "--chunk-size") if getattr(args, "chunk_size", None) else None
    return build_topology(load_hardware(args.hardware, chunk), args.nodes)


def collective_arg(value: str) -> str:
    return canonical_name(value)
