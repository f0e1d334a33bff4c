"""benchmarks/record.py: every benchmark's ``--write`` (its output, command, commit and machine in
benchmarks/results/<name>.md), and the results files it keeps."""
from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from support import REPO

spec = importlib.util.spec_from_file_location("record", REPO / "benchmarks" / "record.py")
record = importlib.util.module_from_spec(spec)
spec.loader.exec_module(record)


def test_every_benchmark_ends_with_the_shared_helper():
    scripts = [p for p in sorted((REPO / "benchmarks").glob("*.py")) if p.name != "record.py"]
    assert len(scripts) >= 10
    for script in scripts:
        assert script.read_text().rstrip().endswith("record.main(main)"), script.name


def run(monkeypatch, tmp_path, argv, output, status=None):
    monkeypatch.setattr(record, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["bench.py", *argv])
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(tmp_path / "bench.py"), raising=False)
    seen = []

    def main():
        seen.append(list(sys.argv[1:]))
        print(output)
        return status

    with pytest.raises(SystemExit) as stop:
        record.main(main)
    return stop.value.code, seen[0]


def test_write_records_the_output_command_commit_and_machine(monkeypatch, tmp_path, capsys):
    code, argv = run(monkeypatch, tmp_path, ["--size", "1G", "--write"], "case  s/call\nring  0.5")
    assert code is None and argv == ["--size", "1G"]          # the benchmark never sees --write
    page = (tmp_path / "bench.md").read_text()
    assert "`python benchmarks/bench.py --size 1G`" in page and "ring  0.5" in page
    assert re.search(r"\* commit: [0-9a-f]{40}", page) and "* machine: " in page and "cores" in page
    assert "ring  0.5" in capsys.readouterr().out              # and it still printed as usual


def test_without_write_or_on_failure_nothing_is_written(monkeypatch, tmp_path):
    assert run(monkeypatch, tmp_path, [], "x")[0] is None and not (tmp_path / "bench.md").exists()
    assert run(monkeypatch, tmp_path, ["--write"], "x", status=1)[0] == 1 and not (tmp_path / "bench.md").exists()


def test_figures_carried_over_from_the_code_survive_a_rewrite(monkeypatch, tmp_path):
    (tmp_path / "bench.md").write_text(f"# bench\n\nold\n\n{record.CARRIED}\n\n### a.py f\n\n```text\n97.9%\n```\n")
    run(monkeypatch, tmp_path, ["--write"], "new table")
    page = (tmp_path / "bench.md").read_text()
    assert "new table" in page and "old" not in page and page.endswith("### a.py f\n\n```text\n97.9%\n```\n")


def test_the_results_files_name_a_commit_and_their_carried_figures_a_source():
    pages = sorted((REPO / "benchmarks" / "results").glob("*.md"))
    assert pages
    for page in pages:
        text = page.read_text()
        assert re.search(r"commit: [0-9a-f]{40}|at commit [0-9a-f]{40}", text), page.name
        if record.CARRIED in text:
            assert re.search(r"at commit [0-9a-f]{40}", text.split(record.CARRIED, 1)[1]), page.name


def test_a_note_goes_in_the_header_and_a_benchmark_may_end_with_sys_exit(monkeypatch, tmp_path):
    monkeypatch.setattr(record, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["bench.py", "--write", "--note", "smallest setting: 2 workers", "-n", "2"])
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(tmp_path / "bench.py"), raising=False)

    def main():
        assert sys.argv[1:] == ["-n", "2"]
        print("table")
        sys.exit(0)

    with pytest.raises(SystemExit) as stop:
        record.main(main)
    page = (tmp_path / "bench.md").read_text()
    assert stop.value.code == 0 and "`python benchmarks/bench.py -n 2`" in page
    assert "smallest setting: 2 workers\n\n* commit:" in page and "table" in page
