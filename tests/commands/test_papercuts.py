"""The command line as a new user meets it (issue 12 item 8): one test per papercut."""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from autotaccl.cli import _leaves, build_parser, main
from support import REPO, VENV_BIN, fresh_store

MARKUP = re.compile(r"``|:(class|func|mod|meth|attr|data):|\*\*")


def options(parser: argparse.ArgumentParser):
    """Every argument a user types (options and positionals), without argparse's own -h."""
    return [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def test_every_option_has_help_with_its_default_and_no_docstring_markup():
    parser = build_parser()
    leaves = list(_leaves(parser))
    assert len(leaves) > 15
    for leaf in [parser, *leaves]:
        text = leaf.format_help()
        assert not MARKUP.search(text), (leaf.prog, MARKUP.search(text).group(0))
        for action in options(leaf):
            name = "/".join(action.option_strings) or action.dest
            assert action.help, f"{leaf.prog} {name}: no help"
            shown = leaf._get_formatter()._expand_help(action)
            if action.default not in (None, False, argparse.SUPPRESS) and action.option_strings:
                assert "default" in shown, f"{leaf.prog} {name}: help does not give its default {action.default!r}"


def one_error_line(capsys, argv: list[str]) -> str:
    """Run ``argv``: exit 2, nothing on stdout, one line on stderr (argparse's own errors included)."""
    try:
        code = main(argv)
    except SystemExit as stop:     # argparse refuses an argument by exiting
        code = stop.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotaccl: error: "), err
    return lines[0]


def test_synth_json_prints_only_json_even_from_highs(capfd):
    """HiGHS writes its banner from C (file descriptor 1), past Python's sys.stdout: capfd sees it. At
    64 KiB the MILP runs (at 1 KiB greedy is at the bound and the MILP is skipped)."""
    code = main(["synth", "--hardware", "ndv2", "--nodes", "1", "--collective", "allgather", "--engine", "milp", "--solver", "highs",
                 "--size", "64K", "--time-limit", "5", "--json"])
    out, err = capfd.readouterr()
    assert code == 0, err
    data = json.loads(out)            # the whole of stdout is one JSON document
    assert "highs" in {stage["solver"] for stage in data["stages"].values()}
    assert "HiGHS" not in err


def test_two_slash_sqlite_uri_is_one_line(capsys, tmp_path):
    for argv in (["export", "--tracking-uri", "sqlite://runs.db", "-o", str(tmp_path / "e")],
                 ["report", "--tracking-uri", "sqlite://runs.db", "-o", str(tmp_path / "r")],
                 ["tune", "--space", "demo", "--tracking-uri", "sqlite://runs.db", "--out", str(tmp_path / "t")],
                 ["tune", "--space", "demo", "--storage", "sqlite://study.db", "--out", str(tmp_path / "t")]):
        line = one_error_line(capsys, argv)
        assert "'sqlite://" in line and "sqlite:///relative/file.db" in line, line
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("argv", [
    ["synth", "--hardware", "ndv2"], ["baseline", "--hardware", "ndv2", "--algorithm", "ring", "-o", "x.json"],
    ["bounds", "--hardware", "ndv2"], ["nccl-model", "--hardware", "ndv2", "--sizes", "1M"],
    ["tune", "--space", "demo"]])
def test_a_misspelt_collective_lists_the_choices(capsys, argv):
    line = one_error_line(capsys, [*argv, "--collective", "allgahter"])
    assert "'allgahter'" in line and "allgather, reducescatter, allreduce, alltoall, broadcast" in line, line


def test_the_readme_cites_only_documents_of_the_repository():
    readme = (REPO / "README.md").read_text()
    cited = set(re.findall(r"[\w./-]+\.md\b", readme))
    assert cited and all((REPO / name).is_file() for name in cited), cited
    assert "§" not in readme and "../" not in readme


def readme_step_by_step() -> list[str]:
    readme = (REPO / "README.md").read_text()
    block = readme.split("## A sweep, step by step", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def shell(line: str, cwd) -> subprocess.CompletedProcess:
    """A README line as a user with the venv active types it: ``autotaccl`` found on PATH."""
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(shlex.split(line), cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """The README's step-by-step, run as written in an empty directory (but ``ui``, which serves until
    stopped): each line's completed process."""
    cwd = tmp_path_factory.mktemp("readme")
    fresh_store(cwd / "autotaccl-runs")          # the store tune would create, migrated once per machine
    lines = readme_step_by_step()
    assert [line.split()[:2] for line in lines] == [["autotaccl", "tune"], ["autotaccl", "export"],
                                                   ["autotaccl", "report"], ["autotaccl", "ui"]]
    return cwd, {line.split()[1]: shell(line, cwd) for line in lines[:3]}


@pytest.mark.slow     # runs the README's sweep, export and report (about 2 minutes)
def test_the_readme_step_by_step_works_as_written(readme_run):
    cwd, done = readme_run
    for command, proc in done.items():
        assert proc.returncode == 0, (command, proc.stderr[-3000:])
    assert (cwd / "autotaccl-export" / "table.md").is_file() and (cwd / "autotaccl-report" / "index.html").is_file()
    assert "study ndv2x2-allgather: 12 complete" in done["tune"].stdout


@pytest.mark.slow     # runs the README's sweep, export and report (about 2 minutes)
def test_export_and_report_default_to_the_store_tune_writes(readme_run):
    cwd, done = readme_run          # the README's export and report lines give no --tracking-uri
    assert all("--tracking-uri" not in line for line in readme_step_by_step())
    table = json.loads((cwd / "autotaccl-export" / "table.json").read_text())
    assert table and "ndv2x2-allgather" in json.dumps(table)
    assert "ndv2x2-allgather" in (cwd / "autotaccl-report" / "index.html").read_text()
    parser = build_parser()
    export = parser.parse_args(["export", "-o", "x"])
    tune_out = parser.parse_args(["tune", "--space", "demo"]).out
    assert export.tracking_uri == f"sqlite:///{tune_out}/mlflow.db"


@pytest.mark.slow     # runs the README's sweep, export and report (about 2 minutes)
def test_tune_prints_where_it_stored_everything_and_the_exact_next_commands(readme_run, tmp_path):
    cwd, done = readme_run
    printed = dict(line.split(None, 1) for line in done["tune"].stdout.splitlines()
                   if line.startswith(("Optuna study", "MLflow runs", "synthesis cache", "export:", "report:", "browse:"))
                   for line in [line.replace("Optuna study", "study").replace("MLflow runs", "runs")
                                .replace("synthesis cache", "cache")])
    assert Path(printed["study"].strip()).is_file() and Path(printed["cache"].strip()).is_dir()
    assert printed["runs"].strip() == f"sqlite:///{cwd / 'autotaccl-runs' / 'mlflow.db'}"
    for command in ("export:", "report:"):       # exactly as printed, from another directory
        proc = shell(printed[command], tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "autotaccl-export" / "table.csv").is_file() and (tmp_path / "autotaccl-report" / "index.html").is_file()
    ui = build_parser().parse_args(shlex.split(printed["browse:"])[1:])
    assert Path(ui.out) == cwd / "autotaccl-runs"


@pytest.mark.slow     # runs the README's sweep, export and report (about 2 minutes)
def test_gitignore_covers_what_the_readme_and_the_demo_write(readme_run):
    cwd, _ = readme_run
    written = [str(p.relative_to(cwd)) for p in cwd.rglob("*") if p.is_file()]
    demo_out = build_parser().parse_args(["demo"]).out
    written += [f"{demo_out}/{name}" for name in ("runs/mlflow.db", "runs/optuna.journal", "export/table.md",
                                                  "report/index.html")]
    proc = subprocess.run(["git", "-C", str(REPO), "check-ignore", "--no-index", "--stdin"], input="\n".join(written),
                          capture_output=True, text=True)
    assert sorted(proc.stdout.split()) == sorted(written)
