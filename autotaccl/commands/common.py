"""Argument helpers shared by several sub-commands."""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
from typing import Any, Mapping

import networkx as nx

from ..errors import InputError
from ..model.collectives import canonical_name
from ..model.protocols import canonical_protocol
from ..model.topology import topology_for


#: where ``tune`` writes its study, runs and cache by default, and so where ``export`` and ``report`` look
RUN_DIR = "autotaccl-runs"
DEFAULT_TRACKING_URI = f"sqlite:///{RUN_DIR}/mlflow.db"     # relative: ./autotaccl-runs/mlflow.db


def add_tracking_uri_arg(parser: argparse.ArgumentParser) -> None:
    """``--tracking-uri`` of the commands that read a sweep's runs."""
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI,
                        help=f"MLflow tracking URI (default {DEFAULT_TRACKING_URI}, the store `tune` writes by "
                             f"default)")


def register(subparsers) -> None:
    """Not a command: this module only holds helpers."""


def description(doc: str) -> str:
    """A command's ``-h`` description: its module docstring's first line without reST markup."""
    line = re.sub(r":\w+:`~?([^`]*)`", r"\1", doc.splitlines()[0])
    return line.replace("``", "")


def print_json(obj: Any) -> None:
    """The one JSON object a ``--json`` command prints."""
    print(json.dumps(obj, indent=1, default=str))


def add_hardware_args(parser: argparse.ArgumentParser, required: bool = True, nodes_help: str = "default 1") -> None:
    parser.add_argument("--hardware", required=required,
                        help="profile name (see hardware/) or a YAML / TACCL JSON file")
    parser.add_argument("--nodes", type=int, default=1 if required else None, help=f"number of nodes ({nodes_help})")
    parser.add_argument("--chunk-size", help="chunk size a TACCL topology JSON was profiled for (e.g. 1M)")


def topology_from_args(args: argparse.Namespace) -> nx.DiGraph:
    return topology_for(args.hardware, args.nodes, getattr(args, "chunk_size", None))


def collective_arg(value: str) -> str:
    return canonical_name(value)


MAX_INSTANCES = 32


def add_run_args(parser: argparse.ArgumentParser, what: str) -> None:
    """``--protocol`` and ``--instances``: the run ``what`` is for."""
    parser.add_argument("--protocol", default="Simple",
                        help=f"runtime protocol {what}: LL, LL128 or Simple (default Simple)")
    parser.add_argument("--instances", type=int, default=1,
                        help=f"copies of the algorithm on separate channels {what} (default 1)")


def run_from_args(args: argparse.Namespace) -> tuple[str, int]:
    """The canonical protocol and the instance count of :func:`add_run_args`' flags."""
    protocol = canonical_protocol(args.protocol)
    if not 1 <= args.instances <= MAX_INSTANCES:
        raise InputError("--instances", str(args.instances), f"a whole number in 1..{MAX_INSTANCES}")
    return protocol, args.instances


RUNNER_HELP = ("what measures: sim, mpi, nccl-tests, mscclpp, or a runner a site installed (entry-point group "
               "autotaccl.runners)")


def add_runner_option_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runner-option", action="append", metavar="KEY=VALUE",
                        help="an option of the runner that has no flag of its own, e.g. a site runner's (repeatable)")


def runner_options_from_args(args: argparse.Namespace, runner, flags: Mapping[str, str],
                             defaults: Mapping[str, Any] | None = None) -> Any:
    """The runner's options dataclass from this command's flags and ``--runner-option KEY=VALUE``.

    ``flags`` maps an option to the flag that sets it here (``timeout`` -> ``--timeout-per-run``); a flag
    left out is not given. ``defaults`` are this command's own defaults for options the runner has.
    A flag the runner has no option for is an error (``--binary: not an option of the mpi runner``).
    """
    from runners import build_options

    values = {key: getattr(args, flag[2:].replace("-", "_")) for key, flag in flags.items()}
    values = {key: value for key, value in values.items() if value is not None}
    flags = dict(flags)
    for item in getattr(args, "runner_option", None) or ():
        key, equals, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not equals or not key.isidentifier():
            raise InputError("--runner-option", repr(item), "KEY=VALUE")
        if key in values:
            raise InputError("--runner-option", repr(item), f"an option not given already (by {flags[key]})")
        values[key], flags[key] = text, f"--runner-option {key}"
    fields = {f.name for f in dataclasses.fields(runner.Options)}
    for key, value in (defaults or {}).items():
        if key in fields:
            values.setdefault(key, value)
    return build_options(runner, values, flags)
