"""``autotaccl synth``: JSON report shape, the algorithm file, and clean failures (exit 2, nothing written)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotaccl.cli import main
from autotaccl.model.algorithm import load_algorithm, verify
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from support import TACCL_EXAMPLES

SK = TACCL_EXAMPLES / "sketch"


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as err:    # argparse's own errors
        code = err.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_greedy_json_report_and_output(tmp_path, capsys):
    out = tmp_path / "ag.json"
    code, stdout, _ = run(capsys, "synth", "--hardware", "ndv2", "--nodes", "2", "--collective", "allgather",
                          "--sketch", str(SK / "sk1-ndv2-n2.json"), "--size", "1M", "--engine", "greedy",
                          "-o", str(out), "--json")
    assert code == 0
    report = json.loads(stdout)
    assert {"status", "stages", "synthesis_seconds", "simulated", "baseline", "output"} <= set(report)
    assert report["status"] == "heuristic" and report["output"] == str(out)
    assert set(report["stages"]["greedy"]) >= {"seconds", "variables", "constraints", "status", "solver"}
    assert [s["bytes"] for s in report["simulated"]] == [1 << 20, 1 << 30]
    for sim, base in zip(report["simulated"], report["baseline"]):
        assert sim["time_us"] > 0 and 0 < sim["algbw"] <= sim["bound_algbw"] * (1 + 1e-9)
        assert base["bytes"] == sim["bytes"] and base["algbw"] > 0 and base["name"]
    algorithm = load_algorithm(out)
    verify(algorithm, build_topology(load_hardware("ndv2"), 2))
    assert algorithm.collective.name == "allgather" and algorithm.ranks == 16


def test_milp_engine_reports_its_stages_and_the_selection(tmp_path, capsys):
    out = tmp_path / "ag1.json"
    code, stdout, _ = run(capsys, "synth", "--hardware", "ndv2", "--collective", "allgather",
                          "--sketch", str(SK / "sk1-ndv2-n1.json"), "--engine", "milp", "--time-limit", "60",
                          "-o", str(out), "--json")
    assert code == 0
    report = json.loads(stdout)
    assert set(report["stages"]) == {"greedy", "routing", "ordering", "scheduling", "select"}
    assert report["stages"]["select"]["message"].split()[0] in ("milp", "greedy")
    assert report["stages"]["routing"]["variables"] > 0 and report["stages"]["routing"]["constraints"] > 0
    assert report["status"] in ("optimal", "time_limit", "heuristic")
    assert (report["status"] == "heuristic") == report["stages"]["select"]["message"].startswith("greedy")
    verify(load_algorithm(out), build_topology(load_hardware("ndv2"), 1))


def test_taccl_topology_file_and_text_report(tmp_path, capsys):
    out = tmp_path / "a2a.json"
    code, stdout, _ = run(capsys, "synth", "--hardware", str(TACCL_EXAMPLES / "topo" / "topo-ndv2-1MB.json"), "--chunk-size", "1M",
                          "--collective", "alltoall", "--sketch", str(SK / "sk1-ndv2-n1.json"), "--engine", "greedy",
                          "-o", str(out))
    assert code == 0
    assert "synthesis:" in stdout and "of bound" in stdout and "best baseline" in stdout
    assert load_algorithm(out).collective.name == "alltoall"


def test_bad_sketch_exits_2_names_the_field_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    data = json.loads((SK / "sk1-ndv2-n2.json").read_text())
    data["internode_sketch"]["internode_conn"] = {"0": ["one"]}
    bad.write_text(json.dumps(data))
    out = tmp_path / "never.json"
    code, stdout, stderr = run(capsys, "synth", "--hardware", "ndv2", "--nodes", "2", "--collective", "allgather",
                               "--sketch", str(bad), "--engine", "greedy", "-o", str(out))
    assert code == 2 and stdout == ""
    assert f"{bad}: internode_sketch.internode_conn.0[0]:" in stderr and len(stderr.strip().splitlines()) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


@pytest.mark.parametrize("argv,needle", [
    (["--nodes", "4"], "nnodes"),                               # the sketch is for 2 nodes
    (["--size", "lots"], "--size"),
    (["--collective", "gatherall"], "gatherall"),
])
def test_other_bad_input_exits_2(tmp_path, capsys, argv, needle):
    out = tmp_path / "never.json"
    base = {"--hardware": "ndv2", "--nodes": "2", "--collective": "allgather", "--size": "1M"}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    args = ["synth", *[x for kv in base.items() for x in kv], "--sketch", str(SK / "sk1-ndv2-n2.json"),
            "--engine", "greedy", "-o", str(out)]
    code, _, stderr = run(capsys, *args)
    assert code == 2 and needle in stderr
    assert not out.exists()


def test_infeasible_sketch_exits_2_with_the_reason(tmp_path, capsys):
    sk = tmp_path / "split.yaml"
    sk.write_text("nnodes: 1\nintranode_sketch:\n  strategy: switch\n  switches: [[0, 1, 2, 3], [4, 5, 6, 7]]\n")
    out = tmp_path / "never.json"
    code, _, stderr = run(capsys, "synth", "--hardware", "dgx-a100", "--collective", "allgather", "--sketch", str(sk),
                          "--engine", "greedy", "-o", str(out))
    assert code == 2 and "no route from GPU 0 to node 0 (GPU 4) under this sketch" in stderr
    assert not out.exists()


def test_milp_allreduce_reports_combine_stages(tmp_path, capsys):
    out = tmp_path / "ar.json"
    code, stdout, _ = run(capsys, "synth", "--hardware", "ndv2", "--collective", "allreduce", "--sketch",
                          str(SK / "sk1-ndv2-n1.json"), "--engine", "milp", "--solver", "highs", "-o", str(out), "--json")
    assert code == 0
    report = json.loads(stdout)
    assert {"rs-routing", "rs-scheduling", "ag-routing", "ag-scheduling"} <= set(report["stages"])
    assert all(s["solver"] for s in report["stages"].values())
    algorithm = load_algorithm(out)
    verify(algorithm, build_topology(load_hardware("ndv2"), 1))
    assert algorithm.collective.name == "allreduce"


@pytest.mark.slow
def test_default_sketch_when_none_is_given(tmp_path, capsys):
    out = tmp_path / "bc.json"
    code, stdout, _ = run(capsys, "synth", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "broadcast",
                          "--engine", "greedy", "--size", "64K", "-o", str(out), "--json")
    assert code == 0
    report = json.loads(stdout)
    assert [s["bytes"] for s in report["simulated"]] == [64 << 10, 1 << 30]
    algorithm = load_algorithm(out)
    assert algorithm.collective.name == "broadcast" and algorithm.metadata["sketch_key"]
    verify(algorithm, build_topology(load_hardware("dgx-a100"), 2))


@pytest.mark.slow
def test_without_an_engine_synth_runs_greedy_and_skips_the_milp_at_the_bound(tmp_path, capsys):
    """The default routes around the MILP (issue 14: NDv2 x2 AllToAll took ~10 minutes for greedy's schedule);
    asked for by name at 1 GiB, the MILP is skipped because greedy is already at the bound."""
    base = ["synth", "--hardware", "ndv2", "--nodes", "2", "--collective", "alltoall", "--json"]
    code, stdout, _ = run(capsys, *base, "-o", str(tmp_path / "a.json"))
    report = json.loads(stdout)
    assert code == 0 and report["engine"] == "greedy" and set(report["stages"]) == {"greedy"}
    code, stdout, _ = run(capsys, *base, "--engine", "milp", "--size", "1G", "-o", str(tmp_path / "b.json"))
    report = json.loads(stdout)
    assert code == 0 and report["status"].startswith("skipped: greedy at ")
    assert report["stages"]["milp"]["status"] == "skipped"
    verify(load_algorithm(tmp_path / "b.json"), build_topology(load_hardware("ndv2"), 2))


def test_synth_chooses_and_simulates_for_the_run_it_is_told(capsys):
    base = ["synth", "--hardware", "ndv2", "--nodes", "2", "--collective", "allgather", "--engine", "greedy", "--json"]
    code, stdout, _ = run(capsys, *base, "--protocol", "ll128", "--instances", "2")
    report = json.loads(stdout)
    assert code == 0 and (report["protocol"], report["instances"]) == ("LL128", 2)
    code, plain, _ = run(capsys, *base)
    assert code == 0 and json.loads(plain)["simulated"][0]["time_us"] != report["simulated"][0]["time_us"]


@pytest.mark.parametrize("flag, value, expected", [("--protocol", "NVLS", "one of: LL, LL128, Simple"),
                                                    ("--instances", "0", "a whole number in 1..32")])
def test_synth_refuses_a_bad_run_in_one_line(tmp_path, capsys, flag, value, expected):
    out = tmp_path / "a.json"
    code, stdout, stderr = run(capsys, "synth", "--hardware", "ndv2", "--collective", "allgather", flag, value,
                               "-o", str(out))
    assert code == 2 and not out.exists() and stdout == ""
    assert len(stderr.strip().splitlines()) == 1 and flag in stderr and expected in stderr


@pytest.mark.slow
def test_what_synth_writes_lowers_with_the_same_run_unless_told_any_runtime(tmp_path, capsys):
    """By default synth ships only what msccl-executor loads with its --protocol and --instances, so
    `lower` with the same flags writes it; with --runtime any it may ship what no runtime loads (two
    DGX-H100, ReduceScatter at 1 GiB under x8: the rails in 64 slices) and `lower` says which limit."""
    base = ["synth", "--hardware", "dgx-h100", "--nodes", "2", "--collective", "reducescatter", "--size", "1G",
            "--instances", "8"]
    for runtime, lowered in (("msccl-executor", 0), ("any", 2)):
        algorithm = tmp_path / f"{runtime}.json"
        code, stdout, _ = run(capsys, *base, "--runtime", runtime, "-o", str(algorithm), "--json")
        assert code == 0 and json.loads(stdout)["runtime"] == runtime
        xml = tmp_path / f"{runtime}.xml"
        code, _, stderr = run(capsys, "lower", str(algorithm), "--instances", "8", "-o", str(xml))
        assert code == lowered and xml.exists() == (lowered == 0), stderr
    assert "XML nodes per rank: at most 4096" in stderr
