"""The nccl-tests runner: the parser on nccl-tests' exact output formats, and the launcher end to end.

There is no GPU here, so ``STAND_IN`` below is a test double: a small executable that stands in for a
cluster's nccl-tests binary. It records how it was called and prints a table in nccl-tests 2.19's
exact format for the sizes it was asked for. The launcher around it is the real mpiexec.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

from autotaccl.cli import main
from autotaccl.errors import InputError
from runners import get_runner
from runners.launch import JobError
from runners.nccl_tests import NcclTestsOptions, command, msccl_environment, parse, sweeps, xml_collective
from support import MSCCL_XML

XML = MSCCL_XML / "ag_ring4_tools_oop.xml"

# nccl-tests 2.19 (version line, root column, #wrong); the spec's sample, 8 ranks, all_reduce_perf -b 1K -e 64M -f 4
NEW = """\
# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 67108864 step: 4(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41230 on     node01 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41231 on     node01 device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong 
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         
        1024           256     float     sum      -1    14.10    0.07    0.13       0    13.87    0.07    0.13       0
     1048576        262144     float     sum      -1    47.80   21.94   38.39       0    47.22   22.21   38.86       0
    67108864      16777216     float     sum      -1   701.90   95.61  167.32       0   699.80   95.90  167.82       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 48.5978 
#
# Collective test concluded: all_reduce_perf
#

"""

# nccl-tests <= 2.13 (no version line, [0x..] devices, %6.2f bandwidths), 2 ranks, all_gather_perf; one wrong cell
OLD = """\
# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 validation: 1 
#
# Using devices
#   Rank  0 Pid  12345 on     node01 device  0 [0x18] Tesla V100-SXM2-32GB
#   Rank  1 Pid  12346 on     node01 device  1 [0x19] Tesla V100-SXM2-32GB
#
#                                                       out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
        1024           128     float    none      -1    12.34    0.08    0.04      0    12.10    0.08    0.04      0
        2048           256     float    none      -1    12.56    0.16    0.08      0    12.40    0.17    0.08      0
        4096           512     float    none      -1    13.01    0.31    0.16      0    12.90    0.32    0.16      3
# Out of bounds values : 1 FAILED
# Avg bus bandwidth    : 0.0933333 
#
"""

# the oldest nccl-tests (~2.10): no root column, an "error" column (largest deviation) instead of #wrong
OLDEST = """\
# nThread 1 nGpus 1 minBytes 1024 maxBytes 1048576 step: 1024(factor) warmup iters: 5 iters: 20 validation: 1 
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256   float     sum    25.10    0.04    0.06  2e-07    24.90    0.04    0.06  2e-07
     1048576        262144   float     sum   310.50    3.38    5.07  5e-01   308.20    3.40    5.10  0e+00
 Out of bounds values : 1 FAILED
 Avg bus bandwidth    : 2.57 
"""


def test_parse_v2_19_format():
    df = parse(NEW)
    assert list(df["size"]) == [1024, 1024, 1048576, 1048576, 67108864, 67108864]
    assert list(df["inplace"]) == [False, True] * 3
    row = df.iloc[4]
    assert (row["count"], row["type"], row["redop"]) == (16777216, "float", "sum")
    assert (row["time_us"], row["algbw"], row["busbw"], row["wrong"]) == (701.90, 95.61, 167.32, 0)
    # the table's own numbers follow the formulas: algbw = S/t, busbw = algbw * 2(n-1)/n with n = 8
    assert abs(67108864 / 701.90 / 1e3 - row["algbw"]) < 0.01
    assert abs(row["algbw"] * 2 * 7 / 8 - row["busbw"]) < 0.01


def test_parse_old_format_counts_wrong_and_drops_the_speed():
    df = parse(OLD)
    assert len(df) == 6 and set(df["redop"]) == {"none"}
    bad = df[(df["size"] == 4096) & df["inplace"]].iloc[0]
    assert bad["wrong"] == 3 and math.isnan(bad["busbw"]) and math.isnan(bad["time_us"])
    good = df[(df["size"] == 2048) & ~df["inplace"]].iloc[0]
    assert (good["time_us"], good["algbw"], good["busbw"], good["wrong"]) == (12.56, 0.16, 0.08, 0)


def test_parse_oldest_format_reads_the_error_column_as_pass_or_fail():
    df = parse(OLDEST)
    assert list(df["size"]) == [1024, 1024, 1048576, 1048576]
    assert list(df["wrong"]) == [0, 0, 1, 0]           # 5e-01 is beyond float's tolerance
    assert df.iloc[3]["busbw"] == 5.10 and math.isnan(df.iloc[2]["busbw"])


def test_parse_ignores_nccl_log_lines():
    noisy = "node01:41230:41230 [0] NCCL INFO Connected 1 MSCCL algorithms\n" + NEW
    assert len(parse(noisy)) == 6


def test_sweeps_and_command_line():
    assert sweeps([1024, 2048, 4096]) == [(1024, 4096, 2)]
    assert sweeps([1024, 4096, 16384]) == [(1024, 16384, 4)]
    assert sweeps([1024, 3000]) == [(1024, 1024, 2), (3000, 3000, 2)]
    argv = command("mpirun -np 8 --hostfile h", "/bin/all_gather_perf", (1024, 4096, 2), iters=20, warmup=5,
                   dtype="float16", op="max", env={"A": "1", "B": "2"}, env_flag="-x")
    assert argv == ["mpirun", "-np", "8", "--hostfile", "h", "-x", "A", "-x", "B", "/bin/all_gather_perf",
                    "-b", "1024", "-e", "4096", "-f", "2", "-g", "1", "-c", "1", "-n", "20", "-w", "5",
                    "-d", "half", "-o", "max"]
    assert command(["srun"], "x", (1, 1, 2), iters=1, warmup=0, dtype="float32", op="sum",
                   env={"A": "1"}, env_flag="-genv")[:4] == ["srun", "-genv", "A", "1"]


def test_environment_loads_the_xml_in_both_runtimes(tmp_path):
    env = msccl_environment(XML, "both", tmp_path)
    assert env["MSCCL_XML_FILES"] == str(XML.resolve()) and env["NCCL_ALGO"] == "MSCCL,RING,TREE"
    assert env["NCCL_MSCCL_ENABLE"] == "1"
    assert [p.name for p in Path(env["MSCCL_ALGO_DIR"]).iterdir()] == [XML.name]
    assert set(msccl_environment(XML, "legacy", tmp_path)) == {"MSCCL_XML_FILES", "NCCL_ALGO"}
    with pytest.raises(InputError, match="--runtime"):
        NcclTestsOptions(binary="b", np=1, runtime="new")
    assert xml_collective(XML) == "allgather"


STAND_IN = """#!{python}
# Test double: stands in for a cluster's nccl-tests binary (no GPU here). It records its arguments and
# the MSCCL environment, then prints (as rank 0) a table in nccl-tests 2.19's exact format and, given
# -J FILE.json, writes FILE.json as nccl-tests' JSON writer (version 3) lays it out: the whole process
# environment in "env", times at full precision. With STAND_IN_NO_JSON set it is an older nccl-tests:
# -J is an invalid option, answered with the usage and exit status 0.
import json, os, sys, time
args = sys.argv[1:]
opt = {{args[i]: args[i + 1] for i in range(0, len(args) - 1, 2)}}
if "-J" in opt and os.environ.get("STAND_IN_NO_JSON"):
    with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
        f.write(json.dumps({{"argv": sys.argv, "env": {{}}, "rank": os.environ.get("PMI_RANK")}}) + "\\n")
    print("invalid option 'J'")
    print("USAGE: %s \\n\\t[-t,--nthreads <num threads>] \\n\\t[-h,--help]" % sys.argv[0])
    sys.exit(0)
keys = ("MSCCL_XML_FILES", "NCCL_ALGO", "NCCL_MSCCL_ENABLE", "MSCCL_ALGO_DIR", "NCCL_DEBUG")
with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
    f.write(json.dumps({{"argv": sys.argv, "env": {{k: os.environ.get(k) for k in keys}},
                        "rank": os.environ.get("PMI_RANK")}}) + "\\n")
if os.environ.get("PMI_RANK", "0") != "0":
    sys.exit(0)
n, b, e, f = 2, int(opt["-b"]), int(opt["-e"]), int(opt["-f"])
wrong = int(os.environ.get("STAND_IN_WRONG", "0"))
if "-J" in opt:
    print("# Writing JSON output to %s" % opt["-J"])
print("# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703")
print("# Collective test starting: all_gather_perf")
print("node01:1:1 [0] NCCL INFO Connected 1 MSCCL algorithms")
print("#" + " " * 62 + "out-of-place" + " " * 23 + "in-place")
results = []
size = b
while size <= e:
    t = 10.0 + size / 1e4
    alg = size / t / 1e3
    cells = "".join("  %7.2f  %6.2f  %6.2f  %6g" % (t, alg, alg * (n - 1) / n, wrong) for _ in range(2))
    print("%12li  %12li  %8s  %6s  %6i" % (size, size // 4 // n, "float", "none", -1) + cells)
    cell = {{"time": round(t, 6), "alg_bw": round(alg, 6), "bus_bw": round(alg * (n - 1) / n, 6), "nwrong": wrong}}
    results.append({{"size": size, "count": size // 4 // n, "type": "float", "redop": "none", "root": "    -1",
                    "out_of_place": cell, "in_place": cell, "actual_iterations": int(opt["-n"]),
                    "experiment_name": ""}})
    size *= f
print("# Out of bounds values : %d %s" % (wrong, "OK" if not wrong else "FAILED"))
print("# Avg bus bandwidth    : 1 ")
if "-J" in opt:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with open(opt["-J"], "x") as out:
        json.dump({{"version": 3, "start_time": stamp, "args": sys.argv, "env": ["%s=%s" % kv for kv in os.environ.items()],
                   "nccl_version": 22703, "config": {{"nthreads": 1, "ngpus": 1}}, "devices": [], "results": results,
                   "out_of_bounds": {{"count": wrong, "okay": "true" if not wrong else "false"}},
                   "average_bus_bandwidth": {{"bandwidth": 1.0, "okay": "unchecked"}}, "errors": [],
                   "end_time": stamp}}, out)
sys.exit(1 if wrong else 0)
"""


@pytest.fixture
def stand_in(tmp_path):
    exe = tmp_path / "bin" / "all_gather_perf"
    exe.parent.mkdir()
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(0o755)
    return exe


def _mpiexec() -> str:
    return str(Path(sys.executable).parent / "mpiexec")


@pytest.mark.mpi
def test_runner_launches_with_the_xml_loaded_and_parses_the_table(stand_in, tmp_path):
    options = NcclTestsOptions(binary=str(stand_in.parent), launcher=f"{_mpiexec()} -n 2", iters=7, warmup=3,
                               timeout=60, workdir=str(tmp_path / "work"))
    df = get_runner("nccl-tests").measure(str(XML), [4096, 8192, 16384], options)
    calls = [json.loads(line) for line in (stand_in.parent / "calls.jsonl").read_text().splitlines()]
    assert sorted(c["rank"] for c in calls) == ["0", "1"]          # one process per rank, both launched
    argv = calls[0]["argv"][1:]
    assert argv == ["-b", "4096", "-e", "16384", "-f", "2", "-g", "1", "-c", "1", "-n", "7", "-w", "3",
                    "-d", "float", "-o", "sum", "-J", str((tmp_path / "work" / "nccl-tests-0.json").resolve())]
    env = calls[0]["env"]
    assert env["MSCCL_XML_FILES"] == str(XML.resolve()) and env["NCCL_ALGO"] == "MSCCL,RING,TREE"
    assert env["NCCL_MSCCL_ENABLE"] == "1" and os.listdir(env["MSCCL_ALGO_DIR"]) == [XML.name]
    assert list(df["size"]) == [4096, 4096, 8192, 8192, 16384, 16384]
    assert (df["wrong"] == 0).all() and df.attrs["msccl_loaded"]
    assert (df["algbw"] - (df["size"] / df["time_us"] / 1e3)).abs().max() < 0.01


def run_alone(stand_in, tmp_path, sizes):
    """The stand-in as rank 0 of a one-rank job, the launcher line being ``env`` (no MPI needed)."""
    options = NcclTestsOptions(binary=str(stand_in), launcher="env", timeout=60, workdir=str(tmp_path / "work"))
    return get_runner("nccl-tests").measure(str(XML), sizes, options)


def calls(stand_in) -> list[list[str]]:
    return [json.loads(line)["argv"][1:] for line in (stand_in.parent / "calls.jsonl").read_text().splitlines()]


def test_json_output_is_read_where_the_binary_writes_it_keeping_only_nccl_and_msccl_variables(
        stand_in, tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0")
    monkeypatch.setenv("STAND_IN_API_TOKEN", "do-not-log")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "nccl-tests-0.json").write_text("{}")     # a leftover: nccl-tests would write FILE.0
    df = run_alone(stand_in, tmp_path, [4096, 8192])
    (argv,) = calls(stand_in)
    assert argv[-2:] == ["-J", str((tmp_path / "work" / "nccl-tests-0.json").resolve())]
    assert list(df["size"]) == [4096, 4096, 8192, 8192]
    assert list(df["time_us"]) == [10.4096, 10.4096, 10.8192, 10.8192]     # the text says 10.41, 10.82
    env = df.attrs["environment"]
    assert env["NCCL_IB_HCA"] == "mlx5_0" and env["MSCCL_XML_FILES"] == str(XML.resolve())
    assert env["NCCL_ALGO"] == "MSCCL,RING,TREE" and env["NCCL_DEBUG"] == "INFO"
    assert all(k.startswith(("NCCL_", "MSCCL")) for k in env) and "do-not-log" not in json.dumps(env)


def test_a_binary_without_json_output_is_read_from_its_text_and_not_asked_again(stand_in, tmp_path, monkeypatch):
    monkeypatch.setenv("STAND_IN_NO_JSON", "1")
    df = run_alone(stand_in, tmp_path, [4096, 8192])
    first, second = calls(stand_in)
    assert first[-2] == "-J" and "-J" not in second             # refused, then run as before
    assert list(df["time_us"]) == [10.41, 10.41, 10.82, 10.82] and df.attrs["environment"] == {}
    run_alone(stand_in, tmp_path, [4096])
    assert "-J" not in calls(stand_in)[2]                       # it is remembered


def test_a_json_file_out_of_sight_falls_back_to_the_text(stand_in, tmp_path, monkeypatch):
    """Rank 0 on another node writes its -J file there: the same table comes from the text."""
    stand_in.write_text(stand_in.read_text().replace('with open(opt["-J"], "x") as out:',
                                                     'with open(os.devnull, "w") as out:'))
    df = run_alone(stand_in, tmp_path, [4096])
    assert list(df["time_us"]) == [10.41, 10.41] and df.attrs["environment"] == {}


@pytest.mark.mpi
def test_wrong_elements_fail_the_measurement(stand_in, monkeypatch):
    monkeypatch.setenv("STAND_IN_WRONG", "5")
    options = NcclTestsOptions(binary=str(stand_in), launcher=f"{_mpiexec()} -n 2", timeout=60)
    df = get_runner("nccl-tests").measure(str(XML), [4096], options)
    assert (df["wrong"] == 5).all() and df["busbw"].isna().all()


@pytest.mark.mpi
def test_a_binary_that_prints_no_table_is_an_error(tmp_path):
    exe = tmp_path / "all_gather_perf"
    exe.write_text("#!/bin/sh\necho 'NCCL WARN no GPU found' >&2\nexit 3\n")
    exe.chmod(0o755)
    with pytest.raises(JobError, match="exit status 3.*no GPU"):
        get_runner("nccl-tests").measure(str(XML), [4096], NcclTestsOptions(binary=str(exe), np=1, timeout=60))


def test_missing_binary_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="--binary"):
        get_runner("nccl-tests").measure(str(XML), [4096], NcclTestsOptions(binary=str(tmp_path), launcher="mpirun"))


@pytest.mark.mpi
def test_an_algorithm_is_lowered_to_xml_first(stand_in, tmp_path):
    from autotaccl.model.algorithm import Algorithm, Transfer
    from autotaccl.model.collectives import Collective
    ring = Algorithm("ring4", Collective("allgather", 4),
                     tuple(Transfer(((r - s) % 4,), r, (r + 1) % 4, s) for s in range(3) for r in range(4)))
    options = NcclTestsOptions(binary=str(stand_in.parent), np=1, runtime="executor", timeout=60,
                               workdir=str(tmp_path / "work"))
    df = get_runner("nccl-tests").measure(ring, [4096], options)
    env = json.loads((stand_in.parent / "calls.jsonl").read_text().splitlines()[0])["env"]
    assert env["MSCCL_XML_FILES"] is None and env["NCCL_MSCCL_ENABLE"] == "1"
    (xml,) = Path(env["MSCCL_ALGO_DIR"]).iterdir()
    assert xml_collective(xml) == "allgather" and 'ngpus="4"' in xml.read_text()
    assert len(df) == 2 and (df["wrong"] == 0).all()


@pytest.mark.mpi
def test_bench_cli_builds_the_launcher_from_np(stand_in, tmp_path, capsys):
    code = main(["bench", str(XML), "--runner", "nccl-tests", "--binary", str(stand_in), "--np", "2",
                 "--sizes", "4K:16K", "--timeout", "60", "--workdir", str(tmp_path / "work"), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    calls = [json.loads(line) for line in (stand_in.parent / "calls.jsonl").read_text().splitlines()]
    assert sorted(c["rank"] for c in calls) == ["0", "1"]       # mpiexec -n 2 from the venv
    rows = json.loads(out.out)["rows"]
    assert [r["size"] for r in rows] == [4096, 4096, 8192, 8192, 16384, 16384] and all(r["wrong"] == 0 for r in rows)
    assert main(["bench", str(XML), "--runner", "nccl-tests", "--binary", str(stand_in), "--sizes", "4K"]) == 2
    assert "--np" in capsys.readouterr().err
