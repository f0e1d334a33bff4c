"""`autotaccl demo`: one command from sweep to exported table and report (a short run of it)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from autotaccl.cli import main
from support import fresh_store


@pytest.mark.slow
def test_demo_sweeps_exports_and_reports(tmp_path, capsys):
    out = tmp_path / "demo"
    fresh_store(out / "runs")
    assert main(["demo", "--out", str(out), "--trials", "4"]) == 0
    printed = capsys.readouterr().out
    for path in (out / "runs" / "optuna.journal", out / "export" / "table.md", out / "report" / "index.html"):
        assert path.is_file() and str(path) in printed
    table = pd.read_csv(out / "export" / "table.csv", keep_default_na=False)
    assert set(table.collective) == {"allgather"} and table.min_bytes.iloc[0] == 0
    assert "study ndv2x2-allgather: 4 complete" in printed
    export = out / "export"
    # all three runtimes' files, and every plan passes `autotaccl check-plan`
    plans = sorted(export.glob("mscclpp/*.plan.json"))
    assert plans and sorted(export.glob("msccl/*.xml")) and (export / "nccl" / "nccl_tuner.conf").is_file()
    for plan in plans:
        assert main(["check-plan", str(plan)]) == 0, plan
    assert "valid" in capsys.readouterr().out.lower()
    report = json.loads((out / "report" / "report.json").read_text())["winners"]
    assert report == json.loads((export / "table.json").read_text())["winners"]
