"""Argument helpers shared by several sub-commands."""
from __future__ import annotations

import argparse
import json
from typing import Any

import networkx as nx

from ..model.collectives import canonical_name
from ..model.hardware import load_hardware
from ..model.topology import MAX_RANKS, build_topology
from ..sizes import parse_size


def register(subparsers) -> None:
    """Not a command: this module only holds helpers."""


def print_json(obj: Any) -> None:
    """The one JSON object a ``--json`` command prints."""
    print(json.dumps(obj, indent=1, default=str))


def add_hardware_args(parser: argparse.ArgumentParser, required: bool = True, nodes_help: str = "default 1") -> None:
    parser.add_argument("--hardware", required=required,
                        help="profile name (see hardware/) or a YAML / TACCL JSON file")
    parser.add_argument("--nodes", type=int, default=1 if required else None, help=f"number of nodes ({nodes_help})")
    parser.add_argument("--chunk-size", help="chunk size a TACCL topology JSON was profiled for (e.g. 1M)")


def topology_from_args(args: argparse.Namespace) -> nx.DiGraph:
    from ..errors import InputError

    chunk = parse_size(args.chunk_size, "--chunk-size") if getattr(args, "chunk_size", None) else None
    if args.nodes < 1:
        raise InputError("--nodes", str(args.nodes), "a whole number >= 1")
    profile = load_hardware(args.hardware, chunk)
    if args.nodes * profile.gpus_per_node > MAX_RANKS:
        raise InputError("--nodes", str(args.nodes),
                         f"at most {MAX_RANKS // profile.gpus_per_node} nodes of {profile.name} ({MAX_RANKS} ranks in all)")
    try:
        return build_topology(profile, args.nodes)
    except ValueError as err:
        raise InputError(profile.source, "nics", str(err)) from None


def collective_arg(value: str) -> str:
    return canonical_name(value)
