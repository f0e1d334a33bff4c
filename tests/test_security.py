"""Security properties of the whole tool.

* No unsafe deserialisation or shell anywhere in the repository's Python: an AST scan (not grep) for
  pickle/marshal loads, eval/exec, yaml.load and its unsafe loaders, shell=True, os.system/os.popen.
* Servers the tool starts listen on 127.0.0.1.
* Names a user controls (hardware profile -> experiment and algorithm names) reach the report HTML, the
  exported XML, README.md and table.md escaped; names cannot steer output files out of the output
  directory (export/report of a store whose experiment is named ``../../...``; tune's --study/--out;
  an algorithm name given to the nccl-tests runner).
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from autotaccl.cli import main

REPO = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".venv", ".git", "build", "dist", "node_modules", "__pycache__"}
EVIL = 'nd<script>alert("x&y")'          # a hardware profile name: legal, but full of markup

# --------------------------------------------------------------------------- AST scan

_MODULE_CALLS = {
    "pickle": {"load", "loads", "Unpickler"}, "_pickle": {"load", "loads", "Unpickler"},
    "cPickle": {"load", "loads"}, "dill": {"load", "loads"}, "cloudpickle": {"load", "loads"},
    "marshal": {"load", "loads"}, "shelve": {"open"}, "pandas": {"read_pickle"}, "numpy": set(),
    "yaml": {"load", "load_all", "unsafe_load", "unsafe_load_all", "full_load", "full_load_all"},
    "os": {"system", "popen"}, "asyncio": {"create_subprocess_shell"},
    "subprocess": {"getoutput", "getstatusoutput"},
}
_UNSAFE_ATTRS = {"yaml": {"Loader", "UnsafeLoader", "FullLoader"}}
_SUBPROCESS = {"run", "call", "check_call", "check_output", "Popen"}
_BUILTINS = {"eval", "exec"}


def dangerous_calls(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: what`` for every dangerous call in ``source`` (import aliases resolved)."""
    tree = ast.parse(source, filename)
    modules: dict[str, str] = {}      # local name -> module
    functions: dict[str, str] = {}    # local name -> "module.function"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules[(alias.asname or alias.name).split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            for alias in node.names:
                functions[alias.asname or alias.name] = f"{root}.{alias.name}"
    found = []

    def qualified(func: ast.expr) -> str | None:
        if isinstance(func, ast.Name):
            if func.id in functions:
                return functions[func.id]
            return f"builtins.{func.id}" if func.id in _BUILTINS else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            base = modules.get(func.value.id) or (func.value.id if func.value.id == "builtins" else None)
            if base is None and func.value.id in functions:      # from pandas import io; io.x -> not tracked
                return None
            return f"{base}.{func.attr}" if base else None
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = qualified(node.func)
            if name:
                module, _, attr = name.partition(".")
                if module == "builtins" and attr in _BUILTINS:
                    found.append(f"{filename}:{node.lineno}: {attr}()")
                elif attr in _MODULE_CALLS.get(module, ()):
                    found.append(f"{filename}:{node.lineno}: {name}()")
                elif module == "subprocess" and attr in _SUBPROCESS:
                    for kw in node.keywords:
                        if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                            found.append(f"{filename}:{node.lineno}: {name}(shell=...)")
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("read_pickle",):
                found.append(f"{filename}:{node.lineno}: .read_pickle()")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = modules.get(node.value.id)
            if module and node.attr in _UNSAFE_ATTRS.get(module, ()):
                found.append(f"{filename}:{node.lineno}: {module}.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "yaml":
            found += [f"{filename}:{node.lineno}: yaml.{a.name}" for a in node.names
                      if a.name in _UNSAFE_ATTRS["yaml"]]
    return found


def python_files() -> list[Path]:
    files = []
    for path in REPO.rglob("*.py"):
        if not SKIP_DIRS & set(path.relative_to(REPO).parts):
            files.append(path)
    return files


def test_the_scan_finds_every_pattern():
    planted = '''
import pickle as pk, subprocess, os, yaml, marshal
from subprocess import Popen as P
from yaml import unsafe_load, FullLoader
import pandas as pd
pk.loads(b"")
eval("1")
exec("x = 1")
yaml.load("a: 1", Loader=yaml.Loader)
unsafe_load("a")
subprocess.run("ls", shell=True)
P("ls", shell=1)
subprocess.check_output("ls", shell=flag)
os.system("ls")
os.popen("ls")
marshal.loads(b"")
pd.read_pickle("x")
yaml.safe_load("a: 1")
subprocess.run(["ls"], shell=False)
'''
    found = dangerous_calls(planted)
    lines = sorted({int(f.split(":")[1]) for f in found})
    assert lines == [4, *range(6, 18)], found          # every line but `import pandas` and the safe ones (18, 19)
    assert not any(":18:" in f or ":19:" in f for f in found)


def test_no_unsafe_loading_or_shell_in_the_repository():
    files = python_files()
    assert len(files) > 50 and any(p.name == "cli.py" for p in files)
    found = [hit for path in files for hit in dangerous_calls(path.read_text(), str(path.relative_to(REPO)))]
    assert not found, "\n".join(found)


# --------------------------------------------------------------------------- servers


def test_ui_server_listens_on_loopback_only():
    from autotaccl.commands.ui import server_command

    cmd, env = server_command("sqlite:////tmp/x/mlflow.db", 5123)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd.count("--host") == 1 and "0.0.0.0" not in " ".join(cmd) and "::" not in cmd
    assert cmd[cmd.index("--port") + 1] == "5123"


def test_no_other_server_binds_beyond_loopback():
    """Every literal host the code (and its test and benchmark fixtures) hands to a server is the loopback address."""
    hosts = []
    for path in python_files():
        if path.name == Path(__file__).name:     # this file names 0.0.0.0 in its assertions
            continue
        text = path.read_text()
        hosts += [(path.name, h) for h in re.findall(r'"--host",\s*"([^"]+)"', text)]
        assert "0.0.0.0" not in text, path
        assert not re.search(r"\.bind\(\(\s*['\"]{2}", text), path           # bind(("", port)): every interface
    assert hosts and all(h == "127.0.0.1" for _, h in hosts), hosts


# --------------------------------------------------------------------------- escaping and containment


@pytest.fixture(scope="module")
def evil_sweep(tmp_path_factory):
    """A real 3-trial sweep on a copy of ndv2 whose profile name is markup, then export and report.

    Before exporting, the experiment is renamed to a path that climbs out of the output directory.
    """
    import yaml
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("evil")
    work = root / "work"
    work.mkdir()
    profile = yaml.safe_load((REPO / "hardware" / "ndv2.yaml").read_text())
    profile["name"] = EVIL
    (work / "hw.yaml").write_text(yaml.safe_dump(profile))
    (work / "space.yaml").write_text(yaml.safe_dump({
        "target": {"hardware": "hw.yaml", "nodes": 2, "collective": "allgather"},
        "sizes": "1K,1M", "fixed": {"engine": "greedy"},
        "parameters": {"internode_conn": {"type": "categorical", "choices": ["relay", "fully-connected"]},
                       "relay_map": {"type": "categorical", "choices": ["0:1", "0:1,1:0"],
                                     "when": {"internode_conn": "relay"}},
                       "chunkup": {"type": "int", "low": 1, "high": 2}}}))
    runs = work / "runs"
    assert main(["tune", "--space", str(work / "space.yaml"), "--trials", "3", "--sampler", "random", "--seed", "3",
                 "--out", str(runs), "--no-progress"]) == 0
    uri = f"sqlite:///{runs / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    (experiment,) = [e for e in client.search_experiments() if "autotaccl.target" in e.tags]
    tuned_name = experiment.name
    client.rename_experiment(experiment.experiment_id, f"../../escaped/{EVIL}-allgather")
    assert main(["export", "--tracking-uri", uri, "-o", str(work / "export")]) == 0
    assert main(["report", "--tracking-uri", uri, "-o", str(work / "report")]) == 0
    return root, work, tuned_name


@pytest.mark.slow
def test_tune_accepts_the_name_and_writes_only_inside_its_run_directory(evil_sweep):
    root, work, tuned_name = evil_sweep
    assert tuned_name == f"{EVIL}x2-allgather"
    assert sorted(p.name for p in root.iterdir()) == ["work"]
    assert sorted(p.name for p in work.iterdir()) == ["export", "hw.yaml", "report", "runs", "space.yaml"]
    assert not (root.parent / "escaped").exists() and not (work.parent / "escaped").exists()


def test_exported_files_stay_inside_and_escape_the_name(evil_sweep):
    _, work, _ = evil_sweep
    export = work / "export"
    files = sorted(p.relative_to(export).as_posix() for p in export.rglob("*") if p.is_file())
    xmls = [f for f in files if f.startswith("msccl/")]
    assert xmls, files                      # the synthesized winner was exported: the names reached the XML
    assert all(re.fullmatch(r"[A-Za-z0-9._+-]+", p.name) for p in export.rglob("*")), files
    # every file sits in the export directory or one of its runtime directories, never elsewhere
    assert all(p.parent == export or p.parent.parent == export and p.parent.name in
               ("msccl", "msccl-legacy", "mscclpp", "nccl") for p in export.rglob("*")), files
    for name in ("table.md", "README.md"):
        text = (export / name).read_text()
        assert "<script" not in text and '"x&y"' not in text, name
    assert "&lt;script&gt;" in (export / "table.md").read_text()
    from autotaccl.formats.msccl.check.importer import import_xml

    for f in xmls:
        text = (export / f).read_text()
        assert "<script" not in text and "&lt;script&gt;alert(&quot;x&amp;y&quot;)" in text
        assert EVIL in import_xml(str(export / f)).name        # the strict reader gets the name back
    table = json.loads((export / "table.json").read_text())
    assert {r["xml"] for r in table["ranges"] if r["xml"]} == set(xmls)


def test_report_escapes_the_name_and_keeps_its_images_inside(evil_sweep):
    _, work, _ = evil_sweep
    report = work / "report"
    page = (report / "index.html").read_text()
    assert "<script" not in page and "&lt;script&gt;" in page
    assert all(p.parent == report for p in report.rglob("*"))
    images = re.findall(r'<img src="([^"]+)"', page)
    assert images and all(re.fullmatch(r"[A-Za-z0-9._-]+\.png", i) and (report / i).is_file() for i in images)


def test_an_algorithm_name_is_escaped_in_lowered_xml(tmp_path):
    from autotaccl.formats.msccl.check.importer import import_xml

    algorithm = json.loads((REPO / "tests" / "bad_inputs" / "_good" / "ag2.json").read_text())
    algorithm["name"] = '"><script>alert(1)</script>&amp;'
    (tmp_path / "a.json").write_text(json.dumps(algorithm))
    assert main(["lower", str(tmp_path / "a.json"), "-o", str(tmp_path / "a.xml")]) == 0
    text = (tmp_path / "a.xml").read_text()
    assert "<script" not in text and text.count("<algo ") == 1
    name = import_xml(str(tmp_path / "a.xml")).name        # the strict reader gets the (possibly cut) name back
    assert len(name) >= 10 and algorithm["name"].startswith(name)


def test_study_and_out_cannot_escape(tmp_path, capsys):
    space = REPO / "tests" / "bad_inputs" / "_good" / "space.yaml"
    for study in ("../../etc/x", "/abs/x", "a\\b", ".hidden", "x\x00y"):
        assert main(["tune", "--space", str(space), "--study", study, "--out", str(tmp_path / "run")]) == 2
        assert "--study" in capsys.readouterr().err
    assert main(["tune", "--space", str(space), "--out", str(tmp_path / "r\x00un")]) == 2
    assert list(tmp_path.iterdir()) == []


def test_nccl_tests_runner_keeps_an_algorithm_named_like_a_path_in_its_workdir(tmp_path):
    """The binary is a test double (no GPU, no nccl-tests here): it fails at once, after the XML was written."""
    from autotaccl.model.algorithm import load_algorithm
    from runners import get_runner
    from runners.nccl_tests import NcclTestsOptions

    algorithm = load_algorithm(REPO / "tests" / "bad_inputs" / "_good" / "ag2.json")
    algorithm = type(algorithm)("../../escaped-xml", algorithm.collective, algorithm.transfers)
    exe = tmp_path / "bin" / "all_gather_perf"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\nexit 3\n")
    exe.chmod(0o755)
    work = tmp_path / "a" / "b" / "work"
    with pytest.raises(Exception):
        get_runner("nccl-tests").measure(algorithm, [4096], NcclTestsOptions(binary=str(exe), np=1, timeout=60,
                                                                             workdir=str(work)))
    written = list(tmp_path.rglob("*escaped-xml*"))
    assert written and all(p.is_relative_to(work) for p in written), written
    assert not (tmp_path / "escaped-xml.xml").exists()
