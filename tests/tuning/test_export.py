"""`autotaccl export`: the table is checked against the tracked runs; every XML passes check_xml."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import mlflow
import pandas as pd
import pytest
import yaml

from autotaccl.cli import main
from autotaccl.formats.msccl import check_xml
from autotaccl.formats.mscclpp import check_plan_file, read_plan
from autotaccl.tuning.export import EXPORTS, winners
from autotaccl.tuning.winners import Entry, pick
from support import fresh_store, plugin_choice, plugin_rules, swept_store

SIZES = [1024, 32768, 1048576, 16777216]
SPACE = {
    "target": {"hardware": "ndv2", "nodes": 2, "collective": "allgather"},
    "sizes": "1K,32K,1M,16M",
    "fixed": {"engine": "greedy"},
    "parameters": {
        "internode_conn": {"type": "categorical", "choices": ["relay", "fully-connected"]},
        "relay_map": {"type": "categorical", "choices": ["0:1", "0:1,1:0"], "when": {"internode_conn": "relay"}},
        "chunkup": {"type": "int", "low": 1, "high": 2},
        "protocol": {"type": "categorical", "choices": ["Simple", "LL128"]},
    },
}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    out, (summary,) = swept_store(tmp, SPACE, trials=6, sampler="random", seed=3)
    return tmp, f"sqlite:///{out / 'mlflow.db'}", summary


@pytest.fixture(scope="module")
def exported(swept):
    tmp, uri, _ = swept
    target = tmp / "export"
    target.mkdir()
    (target / "stale.xml").write_text("<algo/>")      # a previous export's leftover
    assert main(["export", "--tracking-uri", uri, "--experiment", "ndv2x2-allgather", "-o", str(target)]) == 0
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["ndv2x2-allgather"])
    return uri, target, runs, pd.read_csv(target / "table.csv", keep_default_na=False)


@pytest.mark.slow
def test_table_picks_the_fastest_verified_run_at_every_size(exported):
    _, _, runs, table = exported
    trials = runs[(runs["tags.autotaccl.kind"] == "trial") & (runs["tags.verified"] == "true")]
    bases = runs[runs["tags.autotaccl.kind"] == "baseline"]
    assert not trials.empty and not bases.empty
    for size in SIZES:
        col = f"metrics.time_us.{size}"
        row = table[(table.min_size <= size) & (table.max_size >= size)]
        assert len(row) == 1, size
        row = row.iloc[0]
        best_trial = trials[col].min()
        best_base = bases[col].min()
        if best_trial < best_base:
            chosen = trials[trials.run_id == row.run_id].iloc[0]
            assert chosen[col] == best_trial
            assert row.winner == f"trial-{chosen['tags.optuna.trial']}"
            assert row.protocol == chosen["params.protocol"]
            tied = trials[trials[col] == best_trial]     # the tie-break: fewer steps, then transfers, then earlier
            key = tied.apply(lambda t: (t["metrics.steps"], t["metrics.transfers"], t["tags.cache_hit"] == "true",
                                        int(t["tags.optuna.trial"])), axis=1)
            assert key[tied.run_id == row.run_id].iloc[0] == min(key)
        else:
            assert row.winner == f"baseline:{bases.loc[bases[col].idxmin(), 'tags.baseline']}"
            assert row.xml == "" and row.msccl.startswith("stock NCCL")


def test_summary_table_report_and_parent_run_name_the_same_winner(swept, exported, tmp_path, capsys):
    uri, target, runs, _ = exported
    tmp, _, summary = swept
    assert main(["report", "--tracking-uri", uri, "--experiment", "ndv2x2-allgather", "-o", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    # the sweep is complete: `tune --json` runs no trial and prints the summary again
    assert main(["tune", "--space", str(tmp / "space.yaml"), "--trials", "6", "--out", str(tmp / "runs"),
                 "--sampler", "random", "--seed", "3", "--json"]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    table = json.loads((target / "table.json").read_text())["winners"]
    report = json.loads((tmp_path / "r" / "report.json").read_text())["winners"]
    assert summary.winners == printed["winners"] == table == report
    assert [w["bytes"] for w in table] == SIZES and {w["collective"] for w in table} == {"allgather"}
    parent = runs[runs["tags.autotaccl.kind"] == "sweep"].iloc[0]
    assert [parent[f"tags.winner.{s}"] for s in SIZES] == [str(w["trial"]) for w in table]


def test_ranges_are_merged_and_contiguous(exported):
    _, _, _, table = exported
    assert table.min_bytes.iloc[0] == 0
    for a, b in zip(table.itertuples(), list(table.itertuples())[1:]):
        assert b.min_bytes == int(a.max_bytes) + 1 == b.min_size
        assert a.run_id != b.run_id                       # equal neighbours would have been merged
    assert table.max_bytes.iloc[-1] == ""                 # the largest band is open-ended
    covered = sum(1 for s in SIZES for r in table.itertuples() if r.min_size <= s <= r.max_size)
    assert covered == len(SIZES)


def test_every_exported_xml_passes_check_xml_and_carries_its_band(exported):
    _, target, _, table = exported
    files = sorted(p.relative_to(target).as_posix() for p in target.glob("msccl/*.xml"))
    listed = sorted(x for x in table.xml if x)
    assert files == listed and files, "at least one synthesized algorithm should beat the baselines somewhere"
    for row in table[table.xml != ""].itertuples():
        report = check_xml(target / row.xml, runtime="msccl-executor")   # its parser's tokenizer and attributes
        assert report.valid, str(report)
        legacy = check_xml(target / row.msccl_legacy, runtime="msccl-executor")
        assert not legacy.valid and "outofplace" in str(legacy.first)        # what the README warns of
        algo = ET.parse(target / row.xml).getroot()
        assert int(algo.get("minBytes")) == row.min_bytes
        assert int(algo.get("maxBytes")) == (0 if row.max_bytes == "" else int(row.max_bytes))   # 0: no limit
        assert algo.get("proto") == row.protocol
        assert int(algo.get("ngpus")) == 16
        assert row.msccl == row.xml
    assert not (target / "stale.xml").exists()           # replaced as a whole
    for name in ("table.md", "table.json", "README.md"):
        assert (target / name).is_file()
    readme = (target / "README.md").read_text()
    for needle in ("MSCCL_ALGO_DIR", "MSCCL_XML_FILES", "ExecutionPlan", "MSCCLPP_EXECUTION_PLAN_DIR",
                   "NCCL_TUNER_PLUGIN", "NCCL_TUNER_CONFIG_FILE", "Placement: input and output may sit anywhere",
                   "msccl-executor-nccl refuses these: no outofplace attribute",
                   "no `outofplace` attribute, which msccl-executor-nccl's\nparser requires"):
        assert needle in readme, needle


def band_of(name: str) -> tuple[int, int | None]:
    """The band a file name says it serves: ``...-from512K-below4M...`` = [512K, 4M - 1], ``-up`` = no limit."""
    from autotaccl.sizes import parse_size

    m = re.search(r"-from([0-9]+[KMG]?)-(?:below([0-9]+[KMG]?)|up)\.", name)
    assert m, name
    return parse_size(m.group(1)), None if m.group(2) is None else parse_size(m.group(2)) - 1


def test_each_runtime_covers_the_size_axis_with_no_gap_or_overlap_in_its_own_convention(exported):
    """Every size in [0, 2^40] is selected by exactly one band of the table, and each runtime's file for a
    band selects exactly that band: executor inclusive (0 = no limit), legacy exclusive (capped at 1 GiB),
    MSCCL++ inclusive (2^64-1 = no limit). File names say the band."""
    _, target, _, table = exported
    bands = [(r.min_bytes, None if r.max_bytes == "" else int(r.max_bytes)) for r in table.itertuples()]
    probes = sorted({0, 1, 2 ** 40} | {b + d for lo, hi in bands for b in (lo, hi or lo) for d in (-1, 0, 1) if b + d >= 0})
    for n in probes:
        assert sum(lo <= n and (hi is None or n <= hi) for lo, hi in bands) == 1, n
    for row in table.itertuples():
        band = (row.min_bytes, None if row.max_bytes == "" else int(row.max_bytes))
        if not row.xml:
            continue
        legacy = ET.parse(target / row.msccl_legacy).getroot()
        lo, hi = int(legacy.get("minBytes")), int(legacy.get("maxBytes"))     # legacy: minBytes <= n < maxBytes
        assert lo == band[0] and hi == (band[1] + 1 if band[1] is not None else 1 << 30)
        assert check_xml(target / row.msccl_legacy, runtime="msccl").valid
        plans = row.mscclpp.split(", ")
        assert [p.rsplit(".", 3)[1] for p in plans] == ["outofplace", "inplace"]
        for name in [row.xml, row.msccl_legacy, *plans]:
            assert band_of(name) == band, name
        for name in plans:
            plan, _ = read_plan(target / name)
            assert (plan.min_message_size, plan.max_message_size) == (band[0], (1 << 64) - 1 if band[1] is None
                                                                      else band[1])
            assert plan.inplace == name.endswith(".inplace.plan.json")
            report = check_plan_file(target / name)
            assert report.valid, f"{name}: {report}"


# --------------------------------------------------------------------------- NCCL's example tuner plugin
# (the reader, support.plugin_rules / plugin_choice, follows plugins/tuner/example/plugin.c of NVIDIA/nccl)

def test_the_reader_follows_the_plugin_on_its_own_kind_of_file():
    rules = plugin_rules("# c\n\nallreduce,0,100,tree,simple,2,1,-1\nallreduce,50,200,ring,ll128,-1,-1,-1,4\n"
                         " allgather , 0 , 10 , nvls , simple , 3 , -1 , 8\nshort,1,2\nalltoall,0,9,ring,ll,5,-1,-1\n")
    assert plugin_choice(rules, "allreduce", 60, 1, 8) == ("tree", "simple", 2)             # first match wins
    assert plugin_choice(rules, "allreduce", 60, 2, 8) == (None, None, 1)    # nNodes exact; pipeOps 4 != 1
    assert plugin_choice(rules, "allreduce", 60, 2, 8, pipe_ops=4) == ("ring", "ll128", 1)  # -1: stays 1
    assert plugin_choice(rules, "allreduce", 60, 1, 8, ignored={("tree", "simple")}) == (None, None, 1)
    assert plugin_choice(rules, "allgather", 10, 4, 8) == ("nvls", "simple", 3)            # max inclusive
    assert plugin_choice(rules, "allreduce", 5, 3, 3) == ("ring", "ll", 5)     # "alltoall" parses as allreduce


def test_nccl_tuner_config_resolves_every_band_to_nccl_models_choice(exported):
    uri, target, runs, table = exported
    text = (target / "nccl" / "nccl_tuner.conf").read_text()
    rules = plugin_rules(text)
    assert rules and all(r["channels"] > 0 for r in rules)     # -1 would leave NCCL at the plugin's 1 channel
    nccl = runs[runs["tags.autotaccl.kind"] == "nccl"].iloc[0]
    by_size = {s: tuple(nccl[f"tags.nccl.{s}"].split("/")) for s in SIZES}
    proto = {"LL": "ll", "LL128": "ll128", "Simple": "simple"}
    lines = text.splitlines()
    for row in table.itertuples():
        hi = None if row.max_bytes == "" else int(row.max_bytes)
        for n in {row.min_bytes, row.min_size, row.max_size, hi if hi is not None else 1 << 50}:
            algo, protocol, channels = plugin_choice(rules, "allgather", n, 2, 16)
            chosen = max((s for s in SIZES if s <= n), default=SIZES[0])    # the band's sizes share a choice
            a, p, c = by_size[chosen]
            assert (algo, protocol, channels) == (a, proto[p], int(c)), n
        assert plugin_choice(rules, "allgather", row.min_bytes, 1, 8) == (None, None, 1)   # another target
        for ln in row.nccl.split(" line ")[1].split(" ")[0].split(","):
            assert lines[int(ln) - 1].startswith("allgather,")          # the table points at its rows


def test_export_table_is_logged_to_mlflow_beside_the_sweep_not_in_it(exported):
    """The export's run goes to its own experiment (tagged with the sweep's), so the sweep's runs table
    lists only trials, baselines, stock NCCL and the sweep run."""
    uri, _, _, table = exported
    runs = mlflow.search_runs(experiment_names=[EXPORTS], filter_string="tags.`autotaccl.experiment` = 'ndv2x2-allgather'")
    assert len(runs) >= 1 and set(runs["tags.autotaccl.kind"]) == {"export"}
    sweep = mlflow.search_runs(experiment_names=["ndv2x2-allgather"])
    assert set(sweep["tags.autotaccl.kind"]) <= {"sweep", "trial", "baseline", "nccl"}
    kinds = {e.name: e.tags.get("mlflow.experimentKind") for e in mlflow.MlflowClient().search_experiments()}
    assert kinds["ndv2x2-allgather"] == kinds[EXPORTS] == "custom_model_development"
    logged = mlflow.MlflowClient().load_table(runs.experiment_id.iloc[0], "export/table.json",
                                              run_ids=[runs.run_id.iloc[0]])
    assert list(logged["winner"]) == list(table["winner"])


def test_unknown_experiment_is_exit_2_and_leaves_output_alone(exported, tmp_path, capsys):
    uri, target, _, _ = exported
    before = sorted(p.name for p in target.iterdir())
    assert main(["export", "--tracking-uri", uri, "--experiment", "nope-allgather", "-o", str(target)]) == 2
    assert "--experiment: nope-allgather" in capsys.readouterr().err
    assert sorted(p.name for p in target.iterdir()) == before


def test_baseline_wins_ties_and_where_trials_are_slower():
    frame = pd.DataFrame([
        {"run_id": "b1", "tags.autotaccl.kind": "baseline", "tags.baseline": "ring",
         "metrics.time_us.1024": 10.0, "metrics.time_us.2048": 20.0, "metrics.time_us.4096": 40.0},
        {"run_id": "b2", "tags.autotaccl.kind": "baseline", "tags.baseline": "direct",
         "metrics.time_us.1024": 12.0, "metrics.time_us.2048": 15.0, "metrics.time_us.4096": 50.0},
        {"run_id": "t1", "tags.autotaccl.kind": "trial", "tags.baseline": None, "tags.optuna.trial": "0",
         "metrics.time_us.1024": 10.0, "metrics.time_us.2048": 16.0, "metrics.time_us.4096": 30.0},
    ])
    rows = winners(frame, [1024, 2048, 4096], excluded=set())
    assert [r["run"].run_id for r in rows] == ["b1", "b2", "t1"]   # tie -> baseline; slower trial loses
    assert [r["trial"] for r in rows] == ["ring", "direct", 0]
    assert [r["baseline"] for r in rows] == ["ring", "direct", "ring"]
    rows = winners(frame, [4096], excluded={"t1"})
    assert rows[0]["run"].run_id == "b1"


def test_ties_go_to_fewer_steps_then_transfers_then_a_fresh_synthesis_then_the_earliest_trial():
    base = [Entry("ring", 100.0)]
    t = [Entry(5, 10.0, steps=3, transfers=9), Entry(3, 10.0, steps=4, transfers=1), Entry(9, 11.0, steps=1)]
    assert pick(t, base)[0].trial == 5                                         # fewer steps
    t = [Entry(5, 10.0, 3, 9), Entry(7, 10.0 * (1 + 1e-12), 3, 8)]             # equal within TIE; fewer transfers
    assert pick(t, base)[0].trial == 7
    t = [Entry(2, 10.0, 3, 8, cache_hit=True), Entry(6, 10.0, 3, 8), Entry(4, 10.0, 3, 8)]
    assert pick(t, base)[0].trial == 4                                         # not a cache hit, then earliest
    assert pick(list(reversed(t)), base)[0].trial == 4                         # whatever the order given
    assert pick([Entry(1, float("nan"))], base)[0].trial == "ring"             # NaN never wins
    assert pick([], [Entry("tree", 5.0), Entry("direct", 5.0)])[0].trial == "direct"


def test_a_tie_goes_to_the_same_trial_at_every_size_so_bands_do_not_split():
    frame = pd.DataFrame([
        {"run_id": "b", "tags.autotaccl.kind": "baseline", "tags.baseline": "ring",
         "metrics.time_us.1024": 50.0, "metrics.time_us.2048": 50.0},
        {"run_id": "t2", "tags.autotaccl.kind": "trial", "tags.baseline": None, "tags.optuna.trial": "2",
         "metrics.time_us.1024": 11.0, "metrics.time_us.2048": 20.0},
        {"run_id": "t1", "tags.autotaccl.kind": "trial", "tags.baseline": None, "tags.optuna.trial": "1",
         "metrics.time_us.1024": 10.0, "metrics.time_us.2048": 20.0},
    ])
    assert [r["run"].run_id for r in winners(frame, [1024, 2048], set())] == ["t1", "t1"]


def test_a_missing_store_is_bad_input_not_a_new_empty_store(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'nothing' / 'mlflow.db'}"
    assert main(["export", "--tracking-uri", uri, "-o", str(tmp_path / "out")]) == 2
    assert "--tracking-uri" in capsys.readouterr().err
    assert not (tmp_path / "nothing").exists() and not (tmp_path / "out").exists()


def test_a_run_still_running_never_wins_even_if_faster(exported):
    """A run cut off mid-write stays RUNNING; with the fastest times of all it must still not be a candidate."""
    from autotaccl.tuning.export import candidates

    uri, _, runs, _ = exported
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient()
    experiment_id = runs.experiment_id.iloc[0]
    done = runs[(runs["tags.autotaccl.kind"] == "trial") & (runs["tags.verified"] == "true")].iloc[0]
    run = client.create_run(experiment_id, run_name="trial-cut-off",
                            tags={"autotaccl.kind": "trial", "verified": "true", "optuna.trial": "99"})
    try:
        client.log_param(run.info.run_id, "runner", done["params.runner"])
        for size in SIZES:
            client.log_metric(run.info.run_id, f"time_us.{size}", float(runs[f"metrics.time_us.{size}"].min()) / 10)
        assert client.get_run(run.info.run_id).info.status == "RUNNING"
        frame = candidates(client, experiment_id)
        assert run.info.run_id not in set(frame.run_id) and done.run_id in set(frame.run_id)
        everything = mlflow.search_runs(experiment_ids=[experiment_id], filter_string="tags.verified = 'true'")
        assert all(r["run"].run_id == run.info.run_id for r in winners(everything, SIZES, set()))  # it would win
        assert all(r["run"].run_id != run.info.run_id for r in winners(frame, SIZES, set()))
    finally:
        client.delete_run(run.info.run_id)


def test_knobs_the_runner_cannot_tell_apart_are_exported_at_the_default_and_marked():
    """The mpi runner moves the algorithm's bytes without a protocol or instances: a trial's LL128 x2 is
    exported as Simple x1 and marked "not measured"; the simulator and runtime-file runners measure both."""
    from types import SimpleNamespace

    from runners import get_runner

    from autotaccl.tuning.export import markdown, ranges_for, table_frame
    from autotaccl.tuning.lowered import unmeasured_settings

    assert unmeasured_settings(get_runner("mpi")) == ("protocol", "instances")
    assert unmeasured_settings(get_runner("sim")) == () == unmeasured_settings(get_runner("nccl-tests"))
    frame = pd.DataFrame([
        {"run_id": "b", "tags.autotaccl.kind": "baseline", "tags.baseline": "ring", "metrics.time_us.1024": 50.0},
        {"run_id": "t", "tags.autotaccl.kind": "trial", "tags.baseline": None, "tags.optuna.trial": "4",
         "params.protocol": "LL128", "params.instances": "2", "params.engine": "greedy",
         "params.chunkup": "2", "metrics.time_us.1024": 10.0}])
    experiment = SimpleNamespace(name="x-allgather", tags={"autotaccl.collective": "allgather", "autotaccl.nodes": "2"})
    (measured,) = ranges_for(experiment, frame, set())
    assert (measured.protocol, measured.instances, measured.not_measured) == ("LL128", 2, ())
    (rng,) = ranges_for(experiment, frame, set(), not_measured=("protocol", "instances"))
    assert (rng.protocol, rng.instances, rng.not_measured) == ("Simple", 1, ("protocol", "instances"))
    assert rng.config == (("chunkup", "2"),) and rng.engine == "greedy" and rng.max_bytes is None
    table = table_frame([rng])
    assert table.not_measured.iloc[0] == "protocol (not measured);instances (not measured)"
    assert "Simple (not measured) | 1 (not measured)" in markdown(table)


@pytest.mark.slow
def test_an_exact_three_way_tie_goes_to_the_same_trial_everywhere(tmp_path, capsys):
    """mip_gap does nothing to the greedy engine: three trials synthesize the same algorithm and tie exactly.
    Before one rule, the summary, the table and the report broke such a tie three different ways."""
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "target": {"hardware": "ndv2", "nodes": 2, "collective": "allgather"}, "sizes": "1K,32M",
        "fixed": {"engine": "greedy", "internode_conn": "relay", "relay_map": "1:0", "symmetry": "8/16", "chunkup": 1},
        "parameters": {"mip_gap": {"type": "categorical", "choices": [0.0, 0.01, 0.02]}}}, sort_keys=False))
    out = tmp_path / "runs"
    fresh_store(out)
    assert main(["tune", "--space", str(space), "--trials", "3", "--out", str(out), "--sampler", "bruteforce",
                 "--json"]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    uri = f"sqlite:///{out / 'mlflow.db'}"
    assert main(["export", "--tracking-uri", uri, "-o", str(tmp_path / "export")]) == 0
    assert main(["report", "--tracking-uri", uri, "-o", str(tmp_path / "report")]) == 0
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["ndv2x2-allgather"])
    trials = runs[runs["tags.autotaccl.kind"] == "trial"]
    big = trials["metrics.time_us.33554432"]
    assert len(trials) == 3 and big.nunique() == 1 and trials["metrics.steps"].nunique() == 1   # an exact tie
    assert big.iloc[0] < runs.loc[runs["tags.autotaccl.kind"] == "baseline", "metrics.time_us.33554432"].min()
    expected = [{"collective": "allgather", "bytes": 1024, "trial": printed["winners"][0]["trial"]},
                {"collective": "allgather", "bytes": 33554432, "trial": 0}]            # the earliest trial
    assert printed["winners"] == expected
    assert json.loads((tmp_path / "export" / "table.json").read_text())["winners"] == expected
    assert json.loads((tmp_path / "report" / "report.json").read_text())["winners"] == expected
    parent = runs[runs["tags.autotaccl.kind"] == "sweep"].iloc[0]
    assert parent["tags.winner.33554432"] == "0"
