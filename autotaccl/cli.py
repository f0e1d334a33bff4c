"""``autotaccl`` command line: one sub-command per module in :mod:`autotaccl.commands`.

Each command module defines ``register(subparsers)``, which adds its parser and sets ``func`` to a
function taking the parsed arguments and returning an exit status. Bad input (an
:class:`~autotaccl.errors.InputError`) becomes one line on stderr and exit status 2; a bad argument the
library names by its parameter (:class:`~autotaccl.errors.ParameterError`) is named by the flag that set it.
A failure of the environment (a full disk, an I/O error) is one line and exit status 1; Ctrl-C is one
line and 130 (``errors.stop_status``).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
import textwrap
from typing import Sequence

from . import commands
from .errors import InfeasibleError, InputError, ParameterError, stop_status
from .interrupts import raise_lost_interrupts

# library parameters whose command-line option has another name (``dest``); every other parameter is
# its option's dest (``trials`` -> --trials, ``time_limit`` -> --time-limit)
PARAMETER_DESTS = {"collectives": "collective", "experiments": "experiment"}

# the page (in the repository) that explains a command in depth, as the README's command table links it;
# its ``--help`` ends with a line naming them (tests/test_docs.py keeps this and the table in step)
SYNTH, RUNTIMES = "docs/synthesis.md", "docs/runtimes.md"
SWEEP_DOCS = ("docs/sweeps.md", f"{RUNTIMES}#what-export-writes-and-how-to-load-it")
DOCS = {
    "topo show": ("hardware/README.md",),
    "bounds": (f"{SYNTH}#bounds",),
    "baseline": (f"{SYNTH}#baseline-verify-simulate",),
    "synth": (f"{SYNTH}#synth",),
    "verify": (f"{SYNTH}#baseline-verify-simulate",),
    "simulate": (f"{SYNTH}#baseline-verify-simulate",),
    "nccl-model": (f"{SYNTH}#nccl-model-and-calibrate",),
    "calibrate": (f"{SYNTH}#nccl-model-and-calibrate",),
    "lower": (f"{RUNTIMES}#msccl-xml", f"{RUNTIMES}#msccl-execution-plans"),
    "check-xml": (f"{RUNTIMES}#msccl-xml",),
    "import-xml": (f"{RUNTIMES}#msccl-xml",),
    "check-plan": (f"{RUNTIMES}#msccl-execution-plans",),
    "bench": ("docs/cluster.md", "docs/runtimes.md#running-plans-on-gpus"),
    "profile": ("docs/cluster.md#running-on-a-cluster",),
    **dict.fromkeys(("tune", "export", "report", "ui", "demo"), SWEEP_DOCS),
}


class _Help(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the text already says it; paths and links in the
    description and epilog are never broken across lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent,
                             break_long_words=False, break_on_hyphens=False)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS) and "default" not in text:
            text += " (default %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
        self.exit(2, f"autotaccl: error: {self.prog}: {message}\n")


def flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Library parameter name -> the option of ``parser`` that sets it (its longest spelling).

    argparse has no public listing of a parser's options; ``_actions`` is where it keeps them.
    """
    by_dest = {a.dest: max(a.option_strings, key=len) for a in parser._actions if a.option_strings}
    by_dest.update({name: by_dest[dest] for name, dest in PARAMETER_DESTS.items() if dest in by_dest})
    return by_dest


def _leaves(parser: argparse.ArgumentParser):
    """The parsers that run a command (``topo show``, not ``topo``)."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield parser
    for group in groups:
        for child in dict.fromkeys(group.choices.values()):
            yield from _leaves(child)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autotaccl", description="autotaccl command line: one sub-command per step of a sweep "
                                                   "(see autotaccl COMMAND -h)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{info.name}").register(sub)
    for leaf in _leaves(parser):
        leaf.set_defaults(flags=flags(leaf))
    for name, pages in DOCS.items():
        command = _command(parser, name)
        command.epilog = "\n".join(filter(None, [command.epilog, "See " + ", ".join(pages)]))
    return parser


def _command(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of ``name`` ("topo show": the sub-command's sub-command)."""
    for word in name.split():
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    raise_lost_interrupts()
    try:
        return int(args.func(args) or 0)
    except (InputError, InfeasibleError) as err:
        if isinstance(err, ParameterError):
            err = err.for_flags(args.flags)
        print(f"autotaccl: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader (e.g. `head`) went away
        sys.stderr.close()
        return 0
    except (KeyboardInterrupt, Exception) as err:   # Ctrl-C; a full disk, an I/O error: said in one line
        stop = stop_status(err)
        if stop is None:
            raise
        status, text = stop
        print(f"autotaccl: {text}" if status == 130 else f"autotaccl: error: {text}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
