"""``--write`` for every benchmark: run it as usual, and also record what it printed, with the command, the
commit and the machine, in ``benchmarks/results/<name>.md``.

Each benchmark ends with ``record.main(main)``: the helper takes ``--write`` off the command line (so the
benchmark's own parser never sees it), tees standard output while ``main`` runs and, when asked, writes the
file only once ``main`` has returned (a benchmark that fails leaves the last good results in place), keeping
the file's figures carried over from the code (``CARRIED``). Those files are where measured figures live;
library docstrings name the benchmark, not its numbers.
"""
from __future__ import annotations

import datetime as dt
import io
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable

RESULTS = Path(__file__).resolve().parent / "results"
FLAG = "--write"
#: a results file's section of figures that stood in library docstrings before they moved here: kept when the
#: benchmark rewrites the file, until a run of the benchmark measures them again and someone drops it
CARRIED = "## Carried over from the code"
NOTE = "--note"
HELP = (f"  {FLAG}  also record this output, the commit and the machine in benchmarks/results/<name>.md\n"
        f"  {NOTE} TEXT  with --write: a line for the file's header (why this setting, what it leaves out)")


class _Tee(io.TextIOBase):
    def __init__(self, stream) -> None:
        self.stream, self.text = stream, io.StringIO()

    def write(self, s: str) -> int:
        self.text.write(s)
        return self.stream.write(s)

    def flush(self) -> None:
        self.stream.flush()


def commit(repo: Path = RESULTS.parent.parent) -> str:
    """The checkout's commit, ``+ local changes`` when its tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "HEAD") or "unknown"
    return head + (" + local changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def machine() -> str:
    """CPU model, cores, OS and Python: what the figures depend on."""
    model = platform.processor() or platform.machine()
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def results_page(name: str, argv: list[str], output: str, when: dt.datetime | None = None,
                 note: str = "") -> str:
    """The Markdown of ``benchmarks/results/<name>.md``; ``note`` says why the run used this setting."""
    when = when or dt.datetime.now(dt.timezone.utc)
    command = shlex.join(["python", f"benchmarks/{name}.py", *argv])
    return (f"# {name}\n\nLatest results of `{command}` (written with `{FLAG}`).\n\n"
            + (f"{note.strip()}\n\n" if note.strip() else "") +
            f"* commit: {commit()}\n* machine: {machine()}\n* date: {when:%Y-%m-%d %H:%M} UTC\n\n"
            f"```text\n{output.rstrip()}\n```\n")


def main(run: Callable[[], int | None], argv: list[str] | None = None) -> None:
    """Run a benchmark's ``main`` (exit status its return value); with ``--write``, record its output."""
    args = list(sys.argv[1:] if argv is None else argv)
    write = FLAG in args
    note = ""
    if NOTE in args:
        at = args.index(NOTE)
        note = args[at + 1] if at + 1 < len(args) else ""
        del args[at:at + 2]
    sys.argv[1:] = [a for a in args if a != FLAG]
    asked_help = bool({"-h", "--help"} & set(args))
    if asked_help:
        print(HELP)
    name = Path(sys.modules["__main__"].__file__ or "benchmark").stem
    tee = _Tee(sys.stdout)
    sys.stdout = tee
    try:
        status = run()
    except SystemExit as stop:          # a benchmark that ends with sys.exit(status) is recorded as well
        status = stop.code
    finally:
        sys.stdout = tee.stream
    if write and not status and not asked_help:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{name}.md"
        old = path.read_text() if path.is_file() else ""
        carried = old[old.index(CARRIED):] if CARRIED in old else ""
        path.write_text(results_page(name, sys.argv[1:], tee.text.getvalue(), note=note) + ("\n" + carried if carried else ""))
        print(f"wrote {path.relative_to(RESULTS.parent.parent)}")
    sys.exit(status)
