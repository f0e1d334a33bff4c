"""benchmarks/gpu_check.sh on this machine (no GPU): it parses, and it refuses in one line, exit 2, before
running anything; with stand-ins for nvidia-smi and the Python that imports mscclpp (a PATH entry and an
interpreter shim replace the GPU driver and MSCCL++), it runs the export's plans through
``bench --runner mscclpp`` (a stand-in ``autotaccl`` records the commands) and prints what matched."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.sh"


def run(*args, env=None):
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


def test_it_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def test_without_a_gpu_it_refuses_in_one_line(tmp_path):
    (tmp_path / "mscclpp").mkdir()
    empty = tmp_path / "bin"
    empty.mkdir()
    out = run(tmp_path, env={"PATH": f"{empty}:/usr/bin:/bin"})
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == ["gpu_check: no GPU on this machine (nvidia-smi is missing or lists none)"]
    out = run(tmp_path / "missing")
    assert out.returncode == 2 and "not a directory" in out.stderr


def test_with_stand_ins_it_runs_every_plan_and_reports(tmp_path):
    export = tmp_path / "export"
    (export / "mscclpp").mkdir(parents=True)
    (export / "msccl").mkdir()
    plan = {"gpus": [{}] * 16, "min_message_size": 0, "max_message_size": 2 ** 64 - 1}
    (export / "mscclpp" / "ag.outofplace.plan.json").write_text(json.dumps(plan))
    (export / "msccl" / "ag.xml").write_text('<algo name="x" ngpus="16" coll="allgather" minBytes="1048576" '
                                             'maxBytes="4194303"></algo>')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in'\n")
    (bin_dir / "python").write_text(f"#!/bin/sh\nexec {os.sys.executable} \"$@\"\n")   # imports checked below
    (bin_dir / "autotaccl").write_text(f"#!/bin/sh\necho \"$@\" >> {log}\necho '#  size  wrong'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    shims = tmp_path / "site"
    for name in ("mscclpp", "cupy", "mpi4py"):
        (shims / name).mkdir(parents=True)
        (shims / name / "__init__.py").write_text("")
    out = run(export, env={"PATH": f"{bin_dir}:/usr/bin:/bin", "AUTOTACCL": str(bin_dir / "autotaccl"),
                           "PYTHONPATH": str(shims)})
    assert out.returncode == 0, out.stderr
    calls = log.read_text().splitlines()
    assert calls == [f"bench {export}/mscclpp/ag.outofplace.plan.json --runner mscclpp --np 16 --sizes "
                     f"4096:{64 << 20} --check"]
    assert f"matched  mscclpp {export}/mscclpp/ag.outofplace.plan.json" in out.stdout
    assert "skipped  msccl" in out.stdout and "1 ran, 1 matched, 0 failed, 1 skipped" in out.stdout
    out = run(export, tmp_path / "nccl-tests-build",
              env={"PATH": f"{bin_dir}:/usr/bin:/bin", "AUTOTACCL": str(bin_dir / "autotaccl"), "PYTHONPATH": str(shims)})
    last = log.read_text().splitlines()[-1]
    assert "--runner nccl-tests --binary" in last and "--np 16" in last
    assert "--sizes 1048576:4194303" in last                          # the XML's own band, not a fixed sweep
    assert "2 ran, 2 matched" in out.stdout
