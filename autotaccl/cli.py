"""``autotaccl`` command line: one sub-command per module in :mod:`autotaccl.commands`.

Each command module defines ``register(subparsers)``, which adds its parser and sets ``func`` to a
function taking the parsed arguments and returning an exit status. Bad input (an
:class:`~autotaccl.errors.InputError`) becomes one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from typing import Sequence

from . import commands
from .errors import InfeasibleError, InputError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
        self.exit(2, f"autotaccl: error: {self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autotaccl", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{info.name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except (InputError, InfeasibleError) as err:
        print(f"autotaccl: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader (e.g. `head`) went away
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("autotaccl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
