"""`autotaccl tune --runner nccl-tests --binary B --np N` end to end: real synthesis, lowering, mpiexec,
Optuna journal storage and MLflow SQLite store.

There is no GPU here, so ``STAND_IN`` is a test double standing in for a cluster's nccl-tests binary
(all_gather_perf). Launched by the real mpiexec on every rank, rank 0 checks that the MSCCL environment
names an XML file that exists, is for this many ranks and passes ``autotaccl.formats.msccl.check_xml``, then
prints nccl-tests 2.19-format rows for the requested -b/-e/-f sizes with times derived from the XML
(its step count and protocol) and logs what it was given and printed; asked for -J FILE.json, it also
writes those rows as nccl-tests' JSON writer does, with its whole environment in "env". It reports wrong
elements (#wrong > 0) for LL128 XML, as a cluster would for an algorithm that computes a wrong result.
"""
from __future__ import annotations

import json
import sys

import mlflow
import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotaccl.cli import main
from support import PAIR_HARDWARE, fresh_store, runs, write_space

STAND_IN = """#!{python}
# Test double: stands in for a cluster's nccl-tests binary all_gather_perf (no GPU here).
import json, os, sys
if os.environ.get("PMI_RANK", "0") != "0":
    sys.exit(0)
import xml.etree.ElementTree as ET
from autotaccl.formats.msccl import check_xml
args = sys.argv[1:]
opt = {{args[i]: args[i + 1] for i in range(0, len(args) - 1, 2)}}
path = os.environ.get("MSCCL_XML_FILES")
ok = (path is not None and os.path.isfile(path) and os.environ.get("NCCL_ALGO") == "MSCCL,RING,TREE"
      and os.environ.get("NCCL_MSCCL_ENABLE") == "1"
      and os.listdir(os.environ["MSCCL_ALGO_DIR"]) == [os.path.basename(path)])
if not ok:
    print("NCCL WARN MSCCL environment missing or wrong", file=sys.stderr)
    sys.exit(3)
report = check_xml(path)
root = ET.parse(path).getroot()
ranks = int(os.environ["PMI_SIZE"])
if not report.valid or int(root.get("ngpus")) != ranks:
    print("NCCL WARN bad MSCCL XML: %s" % (report.first,), file=sys.stderr)
    sys.exit(4)
proto = root.get("proto")
wrong = 3 if proto == "LL128" else 0
per_step = {{"Simple": 0.5, "LL": 0.3, "LL128": 0.4}}[proto]
b, e, f = int(opt["-b"]), int(opt["-e"]), int(opt["-f"])
print("# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703")
print("# Collective test starting: all_gather_perf")
print("node01:1:1 [0] NCCL INFO Connected 1 MSCCL algorithms")
print("#" + " " * 62 + "out-of-place" + " " * 23 + "in-place")
printed, results = {{}}, []
size = b
while size <= e:
    t = round(5.0 + per_step * report.stats["steps"] + size / 2e3, 2)
    printed[size] = t
    cells, record = "", {{"size": size, "count": size // 4, "type": "float", "redop": "none", "root": "    -1"}}
    for time, key in ((t, "out_of_place"), (t + 1.0, "in_place")):   # in-place is slower: the runner takes out-of-place
        alg = size / time / 1e3
        cells += "  %7.2f  %6.2f  %6.2f  %6i" % (time, alg, alg * (ranks - 1) / ranks, wrong)
        record[key] = {{"time": time, "alg_bw": alg, "bus_bw": alg * (ranks - 1) / ranks, "nwrong": wrong}}
    print("%12li  %12li  %8s  %6s  %6i" % (size, size // 4, "float", "none", -1) + cells)
    results.append(record)
    size *= f
if "-J" in opt:
    with open(opt["-J"], "x") as out:
        json.dump({{"version": 3, "args": sys.argv, "env": ["%s=%s" % kv for kv in os.environ.items()],
                   "nccl_version": 22703, "results": results}}, out)
print("# Out of bounds values : %d %s" % (wrong, "FAILED" if wrong else "OK"))
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"xml": open(path).read(), "proto": proto, "ranks": ranks, "times": printed}}) + "\\n")
sys.exit(1 if wrong else 0)
"""

SPACE = {   # 2 nodes x 2 GPUs = 4 ranks; one sketch, the protocol is the only knob
    "target": {"hardware": "pair.yaml", "nodes": 2, "collective": "allgather"},
    "sizes": "1K,64K",
    "fixed": {"engine": "greedy", "internode_conn": "relay", "relay_map": "0:0"},
    "parameters": {"protocol": {"type": "categorical", "choices": ["Simple", "LL", "LL128"]}},
}
SIZES = [1024, 65536]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nccl-sweep")
    (tmp / "pair.yaml").write_text(yaml.safe_dump(PAIR_HARDWARE))
    space = write_space(tmp, SPACE)
    exe = tmp / "bin" / "all_gather_perf"
    exe.parent.mkdir()
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(0o755)
    out = tmp / "runs"
    fresh_store(out)
    assert main(["tune", "--space", str(space), "--trials", "3", "--out", str(out), "--sampler", "bruteforce",
                 "--seed", "0", "--runner", "nccl-tests", "--binary", str(exe.parent), "--np", "4",
                 "--margin", "10", "--explore", "0", "--timeout-per-run", "60", "--no-progress"]) == 0
    calls = [json.loads(line) for line in (exe.parent / "calls.jsonl").read_text().splitlines()]
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal")))
    trials = optuna.load_study(study_name="pairx2-allgather", storage=storage).trials
    return tmp, out, calls, {t.params["protocol"]: t for t in trials}


@pytest.mark.mpi
def test_trials_are_measured_by_nccl_tests_with_their_own_xml(sweep):
    tmp, out, calls, trials = sweep
    assert sorted(trials) == ["LL", "LL128", "Simple"]
    assert {c["ranks"] for c in calls} == {4}                        # --np 4 ranks, every launch
    df = runs(out, "pairx2-allgather")
    mine = df[df["tags.autotaccl.kind"] == "trial"].set_index("params.protocol")
    client = mlflow.MlflowClient()
    measured = {}
    for proto in ("Simple", "LL"):
        t = trials[proto]
        assert t.state == TrialState.COMPLETE and t.user_attrs["fidelity"] == "nccl-tests"
        run = mine.loc[proto]
        assert run["tags.fidelity"] == "nccl-tests" and run["tags.state"] == "COMPLETE"
        xml = open(client.download_artifacts(run.run_id, "algorithm.xml", str(tmp))).read()
        (call,) = [c for c in calls if c["xml"] == xml]                # the binary ran exactly this trial's XML
        assert call["proto"] == proto
        for size in SIZES:                                             # metrics are the stand-in's out-of-place times
            assert run[f"metrics.time_us.{size}"] == pytest.approx(call["times"][str(size)])
            assert t.user_attrs["results"][SIZES.index(size)]["time_us"] == pytest.approx(call["times"][str(size)])
        measured[proto] = [call["times"][str(s)] for s in SIZES]
    assert measured["Simple"] != measured["LL"]                        # different XML, different times
    env = json.loads(open(client.download_artifacts(mine.loc["LL"].run_id, "nccl-tests-environment.json",
                                                    str(tmp))).read())    # from the -J file: NCCL_*, MSCCL* only
    assert env["NCCL_ALGO"] == "MSCCL,RING,TREE" and env["NCCL_MSCCL_ENABLE"] == "1" and "MSCCL_XML_FILES" in env
    assert all(k.startswith(("NCCL_", "MSCCL")) for k in env) and "PATH" not in env
    base = df[df["tags.autotaccl.kind"] == "baseline"]
    assert len(base) >= 1 and (base["params.runner"] == "nccl-tests").all()


@pytest.mark.mpi
def test_wrong_elements_fail_the_trial_with_a_reason(sweep):
    _, out, calls, trials = sweep
    bad = trials["LL128"]
    assert any(c["proto"] == "LL128" for c in calls)                  # it was run, and reported #wrong 3
    assert bad.state == TrialState.FAIL
    assert bad.user_attrs["failure_reason"] == "nccl-tests runner: nccl-tests runner found wrong elements at sizes " \
                                               "[1024, 1024, 65536, 65536]"
    df = runs(out, "pairx2-allgather")
    run = df[(df["tags.autotaccl.kind"] == "trial") & (df["params.protocol"] == "LL128")].iloc[0]
    assert run["tags.state"] == "FAIL" and run["tags.failure_reason"] == bad.user_attrs["failure_reason"]
    assert run["status"] == "FAILED"


def test_nccl_tests_without_ranks_or_launcher_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "pair.yaml").write_text(yaml.safe_dump(PAIR_HARDWARE))
    space = write_space(tmp_path, SPACE)
    assert main(["tune", "--space", str(space), "--out", str(tmp_path / "o"), "--runner", "nccl-tests",
                 "--binary", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--np" in err
    assert not (tmp_path / "o").exists()                               # rejected before anything was created
