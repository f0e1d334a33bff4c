"""Calibration: a table simulated from known terms is fitted back, inconsistent data are refused, bad input is
one line; the written profile loads everywhere and reproduces the measurement."""
from __future__ import annotations

import json

import pytest
import yaml

from autotaccl.cli import main
from autotaccl.model.collectives import Collective
from autotaccl.model.hardware import load_hardware, profile_from_dict, profile_to_dict
from autotaccl.model.topology import build_topology
from autotaccl.nccl_model import nccl_model
from runners.results import frame, make_row
from runners.table import format_table
from support import PUBLIC_TABLES

SIZES = [2 ** p for p in range(3, 34)]        # 8 B .. 8 GiB, as nccl-tests -b 8 -e 8G -f 2


def truth(tmp_path, efficiency: float = 0.7, offset: float = 10.0):
    """dgx-a100 with a slower NVSwitch and every launch ``offset`` µs longer: the machine to find back."""
    data = profile_to_dict(load_hardware("dgx-a100"))
    data["name"] = "truth"
    data["link_classes"]["nvswitch"]["efficiency"] = efficiency
    for p in data["protocols"].values():
        p["launch_us"] += offset
    path = tmp_path / "truth.yaml"
    path.write_text(yaml.safe_dump(data))
    return profile_from_dict(data, str(path))


def table_text(profile, collective: str, algorithms=None, bend=None) -> str:
    """nccl-tests output of what ``profile``'s NCCL model predicts (``bend``: size -> time factor)."""
    graph = build_topology(profile, 1)
    rows = nccl_model(graph, collective, SIZES, algorithms).rows
    coll = Collective(collective, 8)
    records = [make_row(coll, r.bytes, r.bytes // 4, "float32", "sum", mode, r.time_us * (bend or {}).get(r.bytes, 1.0), 0)
               for r in rows for mode in (False, True)]
    perf = {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf"}[collective]
    return f"# Collective test starting: {perf}\n" + format_table(frame(records))


def test_a_simulated_table_is_fitted_back_within_5_percent(tmp_path, capsys):
    (tmp_path / "ar.txt").write_text(table_text(truth(tmp_path), "allreduce", ["ring"]))
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", str(tmp_path / "ar.txt"), "--hardware", "dgx-a100", "--algorithm", "ring",
                 "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["accepted"] and report["stage"] == 1 and abs(report["worst_residual"]) < 0.01
    fitted = load_hardware(out)
    assert fitted.link_classes["nvswitch"].efficiency == pytest.approx(0.7, rel=0.05)
    for name, p in fitted.protocols.items():
        assert p.launch_us == pytest.approx(load_hardware("dgx-a100").protocols[name].launch_us + 10.0, rel=0.05)
    # the header carries every size's residual, and the profile works everywhere --hardware does
    header = [line for line in out.read_text().splitlines() if line.startswith("#  ar.txt:")]
    assert len(header) == len(SIZES)
    assert main(["nccl-model", "--hardware", str(out), "--collective", "allgather", "--sizes", "1M", "--json"]) == 0
    assert main(["topo", "show", "--hardware", str(out)]) == 0


def test_a_per_channel_launch_cost_is_fitted_back(tmp_path, capsys):
    # NCCL runs small calls on fewer channels: a cost per channel is told apart from one per call
    data = profile_to_dict(truth(tmp_path))
    data["nccl"]["channel_launch_us"] = 1.5
    (tmp_path / "ar.txt").write_text(table_text(profile_from_dict(data, "<truth>"), "allreduce", ["ring"]))
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", str(tmp_path / "ar.txt"), "--hardware", "dgx-a100", "--algorithm", "ring",
                 "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["accepted"] and report["stage"] == 2 and abs(report["worst_residual"]) < 0.05
    assert load_hardware(out).nccl.channel_launch_us == pytest.approx(1.5, rel=0.05)


@pytest.mark.slow
def test_fitted_profile_reproduces_a_measured_table(tmp_path, capsys):
    out = tmp_path / "h100.yaml"
    table = PUBLIC_TABLES / "03-h100-sxm-1node-allreduce-ring.txt"
    assert main(["calibrate", str(table), "--hardware", "dgx-h100", "--algorithm", "ring", "-o", str(out),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["median_residual"] < 0.05 and abs(report["worst_residual"]) < 0.25
    rows = nccl_model(build_topology(load_hardware(out)), "allreduce", [1 << 30, 8 << 30], ["ring"]).rows
    measured = {r["bytes"]: r["measured_us"] for r in report["residuals"]}
    for row in rows:
        assert row.time_us == pytest.approx(measured[row.bytes], rel=0.03)


def test_inconsistent_tables_are_refused_naming_the_sizes(tmp_path, capsys):
    profile = truth(tmp_path)
    # the same machine twice, but the second "measurement" is 3x slower from 1 MiB to 16 MiB
    (tmp_path / "a.txt").write_text(table_text(profile, "allreduce", ["ring"]))
    (tmp_path / "b.txt").write_text(table_text(profile, "allreduce", ["ring"],
                                               {s: 3.0 for s in SIZES if (1 << 20) <= s <= (16 << 20)}))
    out = tmp_path / "never.yaml"
    assert main(["calibrate", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--hardware", "dgx-a100",
                 "--algorithm", "ring", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "nothing written" in err and "b.txt 4194304 B" in err and err.count("\n") == 1
    assert not out.exists() and not list(tmp_path.glob(".never*"))


@pytest.mark.parametrize("content, args, expected", [
    ("garbage 1 2 3\n1024 256 float\n", [], "line 2"),
    (None, ["--nodes", "2"], "a table measured on 16 ranks"),
    ("#  size count type time algbw busbw error time algbw busbw error\n"
     " 1024 256 float 10 0.1 0.1 0 10 0.1 0.1 0\n 2048 512 float 11 0.1 0.1 0 11 0.1 0.1 0\n", [],
     "does not name its collective"),
    (None, ["--algorithm", "ringo"], "--algorithm"),
    (None, ["--max-residual", "0"], "--max-residual"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content, args, expected):
    path = tmp_path / "t.txt"
    if content is None:
        path.write_text(table_text(load_hardware("dgx-a100"), "allreduce"))
    else:
        path.write_text(content)
    assert main(["calibrate", str(path), "--hardware", "dgx-a100", "-o", str(tmp_path / "p.yaml"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err
    assert not (tmp_path / "p.yaml").exists()


def test_collective_suffix_must_agree_with_the_file(tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text(table_text(load_hardware("dgx-a100"), "allreduce"))
    assert main(["calibrate", f"{path}:allgather", "--hardware", "dgx-a100", "-o", str(tmp_path / "p.yaml")]) == 2
    assert "allreduce as the file says" in capsys.readouterr().err
