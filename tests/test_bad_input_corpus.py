"""The bad-input corpus (tests/bad_inputs/): every malformed file or argument a user can give us, fed
through the real CLI command that reads it.

Each case must end with exit status 2 and exactly one stderr line ``autotaccl: error: SOURCE: FIELD:
EXPECTED`` naming the file (or argument), the field and what was expected; no traceback; nothing written
(the -o target, the run directory and the working directory stay as they were). The index of cases,
with the command and the field each must name, is tests/bad_inputs/MANIFEST.yaml.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotaccl.cli import main

CORPUS = Path(__file__).parent / "bad_inputs"
MANIFEST = yaml.safe_load((CORPUS / "MANIFEST.yaml").read_text())
PREFIX = "autotaccl: error: "
FORMATS = ("hardware", "taccl_topo", "taccl_sketch", "sketch_yaml", "space", "algorithm", "xml", "hostfile", "plan",
           "nccl_tests")


def _cases() -> list:
    cases = []
    for entry in MANIFEST["files"]:
        fmt = entry["file"].split("/")[0]
        command = entry.get("command", MANIFEST["commands"][fmt])
        cases.append(pytest.param(command, entry["file"], entry["field"], id=f"{entry['file']}:{command[0]}"))
    for i, entry in enumerate(MANIFEST["arguments"]):
        cases.append(pytest.param(entry["command"], entry["names"], entry["field"],
                                  id=f"arg{i}:{entry['command'][0]}:{entry['names']}"))
    return cases


def _fill(parts, tmp: Path, names: str, readonly: Path | None = None) -> tuple[list[str], str]:
    out = tmp / "out"
    subs = {"{good}": str(CORPUS / "_good"), "{out}": str(out), "{file}": str(CORPUS / names), "{ro}": str(readonly)}

    def fill(text: str) -> str:
        for key, value in subs.items():
            text = text.replace(key, value)
        return text

    return [fill(p) for p in parts], (subs["{file}"] if "/" in names and not names.startswith("-") else names)


def _snapshot(*dirs: Path) -> dict:
    return {d: sorted((str(p.relative_to(d)), p.stat().st_size) for p in d.rglob("*")) for d in dirs}


def check_one_line(stderr: str, source: str, field: str, argv: list[str]) -> None:
    assert "Traceback" not in stderr, f"{argv}: traceback\n{stderr}"
    lines = stderr.strip("\n").splitlines()
    assert len(lines) == 1, f"{argv}: expected one stderr line, got {len(lines)}:\n{stderr}"
    line = lines[0]
    assert line.startswith(PREFIX), line
    rest = line[len(PREFIX):]
    assert rest.startswith(f"{source}: "), f"does not name {source!r} first: {line}"
    assert f": {field}: " in f": {rest[len(source) + 2:]}", f"does not name field {field!r}: {line}"
    expected = rest[len(source) + 2:].split(f"{field}: ", 1)[1]
    assert expected.strip(), f"says nothing about what was expected: {line}"


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """An output directory with a sentinel and an empty working directory: both must stay unchanged."""
    out, cwd = tmp_path / "out", tmp_path / "cwd"
    out.mkdir()
    cwd.mkdir()
    (out / "sentinel.txt").write_text("keep me\n")
    monkeypatch.chdir(cwd)
    return tmp_path


@pytest.fixture(scope="session")
def readonly(tmp_path_factory):
    """A directory no file can be created in, holding an empty ``store.db``: a read-only tmpfs (root passes
    every permission check, so only a read-only mount stops it), or mode 0555 for anyone else."""
    folder = tmp_path_factory.mktemp("readonly")
    (folder / "store.db").write_bytes(b"")
    if os.geteuid() != 0:
        (folder / "store.db").chmod(0o444)
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], check=True)
    (folder / "store.db").write_bytes(b"")
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.mark.parametrize("command, names, field", _cases())
def test_bad_input(command, names, field, sandbox, readonly, capsys):
    argv, source = _fill(command, sandbox, names, readonly)
    field = _fill([field], sandbox, names, readonly)[0][0]
    before = _snapshot(sandbox / "out", sandbox / "cwd")
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2, f"{argv}: exit {status}\n{captured.err}"
    check_one_line(captured.err, source, field, argv)
    assert _snapshot(sandbox / "out", sandbox / "cwd") == before, f"{argv} wrote files"
    assert not Path("/tmp/autotaccl-pwned").exists()


def test_corpus_covers_every_format():
    counts = {fmt: len(list((CORPUS / fmt).glob("*"))) for fmt in FORMATS}
    listed = {e["file"] for e in MANIFEST["files"]}
    on_disk = {str(p.relative_to(CORPUS)) for fmt in FORMATS for p in (CORPUS / fmt).glob("*")}
    assert on_disk == listed, f"files not in the MANIFEST: {sorted(on_disk - listed)}; missing: {sorted(listed - on_disk)}"
    assert all(n >= 5 for n in counts.values()), counts
    flags = {e["names"] for e in MANIFEST["arguments"]}
    assert {"--sizes", "--size", "--storage", "--tracking-uri", "--study", "--hostfile"} <= flags
    assert sum(counts.values()) + len(MANIFEST["arguments"]) >= 50


# a few cases through the installed console script, in a real subprocess
SUBPROCESS = [
    (["baseline", "--hardware", "{file}", "--collective", "allgather", "--algorithm", "ring", "-o", "{out}/a.json"],
     "hardware/python_tag.yaml", "line 1"),
    (["import-xml", "{file}", "-o", "{out}/a.json"], "xml/entity_bomb.xml", "line 1"),
    (["tune", "--space", "{file}", "--out", "{out}/run", "--no-progress"], "space/name_traversal.yaml", "name"),
    (["lower", "{file}", "-o", "{out}/a.xml"], "algorithm/step_inf.json", "transfers[0].step"),
]


@pytest.mark.parametrize("command, names, field", SUBPROCESS, ids=[c[1] for c in SUBPROCESS])
def test_console_script(command, names, field, sandbox):
    argv, source = _fill(command, sandbox, names)
    script = Path(sys.executable).with_name("autotaccl")
    before = _snapshot(sandbox / "out", sandbox / "cwd")
    proc = subprocess.run([str(script), *argv], capture_output=True, text=True, timeout=120, cwd=sandbox / "cwd",
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2, proc.stderr
    check_one_line(proc.stderr, source, field, argv)
    assert _snapshot(sandbox / "out", sandbox / "cwd") == before
    assert not Path("/tmp/autotaccl-pwned").exists()


def test_good_hostfiles_pass_the_check(tmp_path):
    """The hostfile check accepts both launchers' formats (so the corpus cases fail for their one bad line)."""
    from runners.mpi import launcher_command

    good = tmp_path / "hosts"
    good.write_text("# cluster\nnode1:4\nnode2 slots=8 max_slots=8\n10.0.0.3  # a comment\n\nnode-4.example.org:2:ib0\n")
    cmd = launcher_command("mpiexec", 4, str(good))
    assert cmd[-2:] == ["-hostfile", str(good.resolve())]
