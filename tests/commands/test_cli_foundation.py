"""The foundation CLI: topo show, baseline, verify, simulate, bounds; bad input is one line and exit 2."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotaccl.cli import main
from autotaccl.model.algorithm import load_algorithm, to_json, verify
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def bad_input(capsys, *argv: str) -> str:
    """Run, expect exit 2 with exactly one line on stderr and nothing on stdout; return that line."""
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotaccl: error: "), err
    return lines[0]


@pytest.fixture
def ar_ring(tmp_path, capsys) -> Path:
    path = tmp_path / "ar.json"
    code, out, err = run(capsys, "baseline", "--hardware", "ndv2", "--nodes", "2", "--collective", "allreduce",
                         "--algorithm", "ring", "-o", path)
    assert code == 0, err
    assert f"wrote {path}" in out
    return path


# --------------------------------------------------------------------------- happy paths


def test_topo_show(capsys):
    data = run_json(capsys, "topo", "show", "--hardware", "ndv2", "--nodes", "2")
    assert data["ranks"] == 16 and data["by_kind"] == {"nvlink": 64, "net": 128}
    assert len(data["links_list"]) == data["links"] == 192
    code, out, _ = run(capsys, "topo", "show", "--hardware", "dgx-a100")
    assert code == 0 and out.startswith("dgx-a100x1: 1 node(s) x 8 GPUs = 8 ranks, 56 links (switch 56)")


def test_topo_show_taccl_json_with_chunk_size(capsys, taccl_topo_dir):
    path = taccl_topo_dir / "topo-ndv2-1MB.json"
    data = run_json(capsys, "topo", "show", "--hardware", path, "--chunk-size", "1M")
    link = next(l for l in data["links_list"] if (l["src"], l["dst"]) == (0, 1))
    assert link["bandwidth_GBps"] == pytest.approx(45.590, abs=1e-3)
    line = bad_input(capsys, "topo", "show", "--hardware", path)
    assert f"{path}: --chunk-size:" in line


def test_baseline_writes_a_verified_algorithm(ar_ring, capsys):
    algorithm = load_algorithm(ar_ring)
    assert algorithm.collective.name == "allreduce" and algorithm.ranks == 16
    verify(algorithm, build_topology(load_hardware("ndv2"), 2))
    code, out, _ = run(capsys, "verify", ar_ring)
    assert code == 0 and "valid allreduce on 16 ranks" in out
    assert [p.name for p in ar_ring.parent.iterdir()] == ["ar.json"]


def test_baseline_json_summary(tmp_path, capsys):
    out = tmp_path / "a2a.json"
    data = run_json(capsys, "baseline", "--hardware", "dgx2", "--nodes", "2", "--collective", "a2a",
                    "--algorithm", "two-step", "-o", out)
    assert data["output"] == str(out) and data["collective"] == "alltoall" and data["ranks"] == 32
    assert data["transfers"] == len(load_algorithm(out).transfers)


def test_simulate_json(ar_ring, capsys):
    data = run_json(capsys, "simulate", ar_ring, "--hardware", "ndv2", "--nodes", "2", "--sizes", "1K:1G:x4")
    rows = data["rows"]
    assert [r["bytes"] for r in rows] == [1 << e for e in range(10, 31, 2)]
    for r in rows:
        assert {"bytes", "time_us", "algbw", "busbw", "bound_algbw"} <= set(r)
        assert r["algbw"] == pytest.approx(r["bytes"] / r["time_us"] / 1e3)
        assert r["busbw"] == pytest.approx(r["algbw"] * 2 * 15 / 16)
        assert 0 < r["algbw"] <= r["bound_algbw"] * (1 + 1e-9)
        assert r["pct_of_bound"] == pytest.approx(100 * r["algbw"] / r["bound_algbw"])
    assert rows[-1]["algbw"] > rows[0]["algbw"]


def test_simulate_table_has_nccl_tests_columns(ar_ring, capsys):
    code, out, _ = run(capsys, "simulate", ar_ring, "--hardware", "ndv2", "--nodes", "2", "--sizes", "1M,4M")
    assert code == 0
    header = next(l for l in out.splitlines() if "count" in l)
    for column in ("size", "count", "type", "redop", "time", "algbw", "busbw", "% of bound"):
        assert column in header
    rows = [l.split() for l in out.splitlines() if not l.startswith("#")]
    assert [r[:5] for r in rows] == [["1048576", "262144", "float", "sum", "-1"],
                                     ["4194304", "1048576", "float", "sum", "-1"]]


def test_bounds_json(capsys):
    data = run_json(capsys, "bounds", "--hardware", "ndv2", "--nodes", "2", "--collective", "allgather")
    assert data["algbw_GBps"] == pytest.approx(25.0, rel=1e-3)   # 2 x the node's 12.5 GB/s NIC (peers-and-bounds §2.5)
    assert data["latency_us"] > 0
    data = run_json(capsys, "bounds", "--hardware", "dgx-a100", "--collective", "allreduce")
    assert data["algbw_GBps"] == pytest.approx(171.4, rel=1e-3)
    code, out, _ = run(capsys, "bounds", "--hardware", "dgx-a100", "--collective", "ar")
    assert code == 0 and "algbw <= 171.43 GB/s" in out


# (profile, nodes) -> AllGather ceiling, worked by hand (N GPUs, S the gathered size, N pieces of S/N):
# one node: a GPU takes in N-1 pieces through its NVSwitch port B: N * B / (N-1).
# more nodes: min(GPU ingress: N * (B + 50) / (N-1), a node takes in the other nodes' pieces through its
# NICs: N * NICs * 50 / (N - G)).
FABRIC_AG = {
    ("dgx-h100-rail", 1): 8 * 450 / 7, ("dgx-h100-rail", 2): 16 * 500 / 15, ("dgx-h100-rail", 4): 32 * 500 / 31,
    ("dgx-b200", 1): 8 * 900 / 7, ("dgx-b200", 2): 16 * 400 / 8, ("dgx-b200", 4): 32 * 400 / 24,
    ("gb200-nvl72", 1): 72 * 900 / 71, ("gb200-nvl72", 2): 144 * 950 / 143, ("gb200-nvl72", 4): 288 * 950 / 287,
}


@pytest.mark.parametrize("profile, nodes", [
    pytest.param(p, n, id=f"{p}-{n}", marks=[pytest.mark.slow] if p == "gb200-nvl72" and n > 1 else [])
    for p, n in FABRIC_AG])
def test_todays_fabrics_through_topo_bounds_and_baseline(tmp_path, capsys, profile, nodes):
    G = load_hardware(profile).gpus_per_node
    data = run_json(capsys, "topo", "show", "--hardware", profile, "--nodes", nodes)
    assert data["ranks"] == G * nodes
    net = {"net": nodes * (nodes - 1) * G * G} if nodes > 1 else {}
    assert data["by_kind"] == {"switch": nodes * G * (G - 1), **net}
    ag = run_json(capsys, "bounds", "--hardware", profile, "--nodes", nodes, "--collective", "allgather")
    assert ag["algbw_GBps"] == pytest.approx(FABRIC_AG[profile, nodes])
    for collective, algorithm in [("allgather", "ring"), ("allreduce", "hierarchical" if nodes > 1 else "tree"),
                                  ("alltoall", "two-step" if nodes > 1 else "direct")]:
        out = tmp_path / f"{collective}.json"   # the command verifies the algorithm before it writes it
        data = run_json(capsys, "baseline", "--hardware", profile, "--nodes", nodes, "--collective", collective,
                        "--algorithm", algorithm, "-o", out)
        assert data["ranks"] == G * nodes and load_algorithm(out).collective.name == collective


def test_console_script_end_to_end(tmp_path):
    """One real process of the installed ``autotaccl`` entry point."""
    exe = Path(sys.executable).with_name("autotaccl")
    assert exe.exists(), "the console script is installed next to the interpreter"
    out = tmp_path / "ag.json"
    done = subprocess.run([str(exe), "baseline", "--hardware", "dgx-h100", "--collective", "allgather",
                           "--algorithm", "ring", "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([str(exe), "simulate", str(out), "--hardware", "dgx-h100", "--sizes", "1G", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["rows"]
    assert row["bytes"] == 1 << 30 and 0 < row["algbw"] <= row["bound_algbw"]


# --------------------------------------------------------------------------- bad input


def test_unknown_hardware_name_writes_nothing(tmp_path, capsys):
    out = tmp_path / "x.json"
    line = bad_input(capsys, "baseline", "--hardware", "ndv9", "--collective", "ag", "--algorithm", "ring", "-o", out)
    assert "--hardware: 'ndv9':" in line and "ndv2" in line
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(gpus=4), "gpus"),
    (lambda d: d["link_classes"]["nvlink"].update(bandwidth_GBps=-25.0), "link_classes.nvlink.bandwidth_GBps"),
    (lambda d: d["nics"][0].update(gpus=[0, 1, 2, 4]), "nics[0].gpus[3]"),
    (lambda d: d["links"].update({"class": "nvlink3"}), "links.class"),
])
def test_malformed_profile(tmp_path, capsys, small_profile, write_yaml, mutate, field):
    mutate(small_profile)
    path = write_yaml(small_profile, "bad.yaml")
    out = tmp_path / "x.json"
    line = bad_input(capsys, "baseline", "--hardware", path, "--collective", "ag", "--algorithm", "ring", "-o", out)
    assert line.startswith(f"autotaccl: error: {path}: {field}: ")
    assert not out.exists()
    bad_input(capsys, "topo", "show", "--hardware", path)
    bad_input(capsys, "bounds", "--hardware", path, "--collective", "ag")


def test_broken_yaml_profile(capsys, write_yaml):
    path = write_yaml("name: x\n gpus_per_node: [", "broken.yaml")
    assert f"{path}: line " in bad_input(capsys, "topo", "show", "--hardware", path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sizes", ["1K:banana", "12Q", "0", "1K:1M:x1", "1M:1K", "-4", "1K:1G:xinf",
                                   "1K:1G:x1.0001", "1:1G:+1"])   # the last two would grow forever
def test_invalid_size_string(ar_ring, capsys, sizes):
    line = bad_input(capsys, "simulate", ar_ring, "--hardware", "ndv2", "--nodes", "2", "--sizes", sizes)
    assert "--sizes: " in line


def test_rank_count_must_match_the_topology(ar_ring, capsys):
    line = bad_input(capsys, "simulate", ar_ring, "--hardware", "ndv2", "--nodes", "4")
    assert line == f"autotaccl: error: {ar_ring}: collective.ranks: 32 ranks to match ndv2x4 (16 given)"


def test_ir_file_failing_validation(ar_ring, capsys):
    data = json.loads(ar_ring.read_text())
    data["transfers"][3]["src"] = 99
    ar_ring.write_text(json.dumps(data))
    for argv in (("verify", ar_ring), ("simulate", ar_ring, "--hardware", "ndv2", "--nodes", "2")):
        line = bad_input(capsys, *argv)
        assert f"{ar_ring}: transfers[3].src: a rank in 0..15" in line


def test_ir_that_does_not_implement_its_collective(ar_ring, capsys):
    algorithm = load_algorithm(ar_ring)
    data = to_json(algorithm)
    del data["transfers"][0]
    ar_ring.write_text(json.dumps(data))
    line = bad_input(capsys, "simulate", ar_ring, "--hardware", "ndv2", "--nodes", "2")
    assert f"{ar_ring}: transfers: a valid allreduce on ndv2x2" in line
    code, out, _ = run(capsys, "verify", ar_ring)
    assert code == 1 and "INVALID" in out


def test_ir_using_a_missing_link(ar_ring, capsys):
    data = json.loads(ar_ring.read_text())
    i = next(i for i, t in enumerate(data["transfers"]) if (t["src"], t["dst"]) == (1, 3))
    data["transfers"][i]["src"], data["transfers"][i]["dst"] = 0, 5   # GPUs 0 and 5 share no NVLink on NDv2
    ar_ring.write_text(json.dumps(data))
    line = bad_input(capsys, "simulate", ar_ring, "--hardware", "ndv2", "--nodes", "2")
    assert f"{ar_ring}: transfers[{i}]: " in line and "no link from rank 0 to rank 5" in line


def test_inapplicable_baseline_writes_nothing(tmp_path, capsys):
    out = tmp_path / "h.json"
    line = bad_input(capsys, "baseline", "--hardware", "ndv2", "--collective", "allreduce",
                     "--algorithm", "hierarchical", "-o", out)
    assert "--algorithm: hierarchical:" in line and "two nodes" in line
    assert not list(tmp_path.iterdir())


def test_output_in_a_missing_directory(tmp_path, capsys):
    out = tmp_path / "no" / "such" / "a.json"
    line = bad_input(capsys, "baseline", "--hardware", "ring", "--collective", "ag", "--algorithm", "ring", "-o", out)
    assert f"-o: '{out}':" in line


def test_unknown_collective_and_bad_nodes(tmp_path, capsys):
    assert "--collective: 'allgatherv'" in bad_input(capsys, "bounds", "--hardware", "ring", "--collective", "allgatherv")
    assert "--nodes: 0" in bad_input(capsys, "bounds", "--hardware", "ring", "--nodes", "0", "--collective", "ag")


def test_taccl_topology_through_baseline_simulate_and_bounds(tmp_path, capsys, taccl_topo_dir):
    hw = ["--hardware", taccl_topo_dir / "topo-ndv2-1MB.json", "--chunk-size", "1M", "--nodes", "2"]
    out = tmp_path / "ag.json"
    code, _, err = run(capsys, "baseline", *hw, "--collective", "allgather", "--algorithm", "hierarchical", "-o", out)
    assert code == 0, err
    (row,) = run_json(capsys, "simulate", out, *hw, "--sizes", "256M")["rows"]
    nic = (1 << 20) / 105 / 1e3            # one NIC per node: 1 MiB per 105 µs
    assert row["bound_algbw"] == pytest.approx(2 * nic, rel=1e-3)   # the node cut: 2 nodes x one NIC
    assert 0.5 * row["bound_algbw"] < row["algbw"] <= row["bound_algbw"]
    assert run_json(capsys, "bounds", *hw, "--collective", "ag")["algbw_GBps"] == pytest.approx(2 * nic, rel=1e-3)
