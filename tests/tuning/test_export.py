"""`autotaccl export`: the table is checked against the tracked runs; every XML passes check_xml."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import mlflow
import pandas as pd
import pytest
import yaml

from autotaccl.cli import main
from autotaccl.tuning.export import winners
from autotaccl.tuning.sweep import TuneRequest, tune
from support import fresh_store
from autotaccl.formats.msccl import check_xml

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
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    space = tmp / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    out = tmp / "runs"
    fresh_store(out)
    tune(TuneRequest(space=str(space), trials=4, out=str(out), sampler="random", seed=3, progress=False))
    uri = f"sqlite:///{out / 'mlflow.db'}"
    target = tmp / "export"
    target.mkdir()
    (target / "stale.xml").write_text("<algo/>")      # a previous export's leftover
    assert main(["export", "--tracking-uri", uri, "--experiment", "ndv2x2-allgather", "-o", str(target)]) == 0
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["ndv2x2-allgather"])
    return uri, target, runs, pd.read_csv(target / "table.csv")


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
        best_trial = trials.loc[trials[col].idxmin()]
        best_base = bases.loc[bases[col].idxmin()]
        if best_trial[col] < best_base[col]:
            chosen = trials[trials.run_id == row.run_id].iloc[0]     # a tie may keep the previous size's winner
            assert chosen[col] == best_trial[col]
            assert row.winner == f"trial-{chosen['tags.optuna.trial']}"
            assert row.protocol == chosen["params.protocol"]
        else:
            assert row.winner == f"baseline:{best_base['tags.baseline']}"
            assert pd.isna(row.xml) or row.xml == ""


def test_ranges_are_merged_and_contiguous(exported):
    _, _, _, table = exported
    assert table.min_bytes.iloc[0] == 0
    for a, b in zip(table.itertuples(), list(table.itertuples())[1:]):
        assert b.min_bytes == a.max_bytes + 1 == b.min_size
        assert a.run_id != b.run_id                       # equal neighbours would have been merged
    assert table.max_bytes.iloc[-1] == SIZES[-1]
    covered = sum(1 for s in SIZES for r in table.itertuples() if r.min_size <= s <= r.max_size)
    assert covered == len(SIZES)


def test_every_exported_xml_passes_check_xml_and_carries_its_range(exported):
    _, target, _, table = exported
    files = sorted(p.name for p in target.glob("*.xml"))
    listed = sorted(x for x in table.xml.dropna() if x)
    assert files == listed and files, "at least one synthesized algorithm should beat the baselines somewhere"
    for row in table[table.xml.notna() & (table.xml != "")].itertuples():
        report = check_xml(target / row.xml)
        assert report.valid, str(report)
        algo = ET.parse(target / row.xml).getroot()
        assert int(algo.get("minBytes")) == row.min_bytes
        assert int(algo.get("maxBytes")) == row.max_bytes
        assert algo.get("proto") == row.protocol
        assert int(algo.get("ngpus")) == 16
    assert not (target / "stale.xml").exists()           # replaced as a whole
    for name in ("table.md", "table.json", "README.md"):
        assert (target / name).is_file()
    assert "MSCCL_ALGO_DIR" in (target / "README.md").read_text()


def test_export_table_is_logged_to_mlflow(exported):
    uri, _, _, table = exported
    runs = mlflow.search_runs(experiment_names=["ndv2x2-allgather"], filter_string="tags.`autotaccl.kind` = 'export'")
    assert len(runs) >= 1
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
        {"run_id": "t1", "tags.autotaccl.kind": "trial", "tags.baseline": None,
         "metrics.time_us.1024": 10.0, "metrics.time_us.2048": 16.0, "metrics.time_us.4096": 30.0},
    ])
    rows = winners(frame, [1024, 2048, 4096], excluded=set())
    assert [r["run"].run_id for r in rows] == ["b1", "b2", "t1"]   # tie -> baseline; slower trial loses
    assert [r["baseline"] for r in rows] == ["ring", "direct", "ring"]
    rows = winners(frame, [4096], excluded={"t1"})
    assert rows[0]["run"].run_id == "b1"


def test_a_tie_keeps_the_previous_winner_so_ranges_do_not_split():
    frame = pd.DataFrame([
        {"run_id": "b", "tags.autotaccl.kind": "baseline", "tags.baseline": "ring",
         "metrics.time_us.1024": 50.0, "metrics.time_us.2048": 50.0},
        {"run_id": "t2", "tags.autotaccl.kind": "trial", "tags.baseline": None,
         "metrics.time_us.1024": 11.0, "metrics.time_us.2048": 20.0},
        {"run_id": "t1", "tags.autotaccl.kind": "trial", "tags.baseline": None,
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
