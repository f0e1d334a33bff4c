"""Per-runtime winners: a real `tune` on one DGX-H100 (sim runner) whose trials also synthesize a switch
candidate, then `export`: mscclpp/ gets the best algorithm an MSCCL++ plan runs (switch or not), msccl/ the
best XML-expressible one, and the tuner config names stock NCCL's NVLS the winner where nccl-model says so.

Written to hold before and after MSCCL++ lowers switch operations (issue 36 part 3a): each test asks the
lowering (``runtimes.refusal``) whether mscclpp loads the switch schedule and checks the branch that applies.
"""
from __future__ import annotations

import json
import math

import mlflow
import optuna
import pandas as pd
import pytest

from runners import get_runner

from autotaccl.cli import main
from autotaccl.formats.mscclpp import check_plan_file
from autotaccl.model.algorithm import load_algorithm, switch_ops
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.tuning import runtimes as rt
from autotaccl.tuning.evaluate import switch_options
from autotaccl.tuning.export import ranges_for, table_frame
from autotaccl.tuning.space import Settings
from support import plugin_choice, plugin_rules, swept_store

SIZES = [1024, 1048576, 16777216, 268435456]
EXPERIMENT = "dgx-h100x1-allreduce"
SPACE = {
    "target": {"hardware": "dgx-h100", "nodes": 1, "collective": "allreduce"},
    "sizes": "1K,1M,16M,256M",
    "fixed": {"engine": "greedy", "synth_size": "256M"},
    "parameters": {"chunkup": {"type": "int", "low": 1, "high": 2},
                   "protocol": {"type": "categorical", "choices": ["Simple", "LL"]}},
}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("switch")
    out, (summary,) = swept_store(tmp, SPACE, trials=3, sampler="random", seed=1)
    uri = f"sqlite:///{out / 'mlflow.db'}"
    target = tmp / "export"
    assert main(["export", "--tracking-uri", uri, "--experiment", EXPERIMENT, "-o", str(target)]) == 0
    # `winner` (and table.json's "winners") stays the XML-loadable pick, the one `tune` names
    assert json.loads((target / "table.json").read_text())["winners"] == summary.winners
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[EXPERIMENT])
    study = optuna.load_study(study_name=EXPERIMENT, storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal"))))
    graph = build_topology(load_hardware("dgx-h100"), 1)
    return uri, target, runs, study, graph, pd.read_csv(target / "table.csv", keep_default_na=False)


def band(table: pd.DataFrame, size: int) -> pd.Series:
    (row,) = [r for _, r in table.iterrows() if r.min_size <= size <= r.max_size]
    return row


def switch_algorithm(uri: str, run_id: str, tmp_path):
    path = mlflow.MlflowClient(tracking_uri=uri).download_artifacts(run_id, "switch/algorithm.json", str(tmp_path))
    return load_algorithm(path)


@pytest.mark.slow
def test_each_trial_records_a_switch_candidate_beside_its_objective(swept):
    _, _, runs, study, _, _ = swept
    trials = runs[runs["tags.autotaccl.kind"] == "trial"]
    assert len(trials) == 3 and trials["metrics.switch.time_us.268435456"].notna().all()
    for t in study.trials:
        relative = [r["relative"] for r in t.user_attrs["results"]]      # the objective: XML-loadable only
        assert t.value == pytest.approx(math.exp(sum(map(math.log, relative)) / len(relative)))
        assert t.user_attrs["switch_score"] != t.value and len(t.user_attrs["switch_results"]) == len(SIZES)
    # at 256M the switch candidate beats every XML-loadable trial and every baseline
    bases = runs[runs["tags.autotaccl.kind"] == "baseline"]
    col = "metrics.time_us.268435456"
    assert trials["metrics.switch.time_us.268435456"].min() < min(trials[col].min(), bases[col].min())


@pytest.mark.slow
def test_mscclpp_gets_the_switch_schedule_where_it_loads_and_msccl_the_best_xml_expressible(swept, tmp_path):
    uri, target, runs, _, graph, table = swept
    row = band(table, 268435456)
    trials = runs[runs["tags.autotaccl.kind"] == "trial"]
    col = "metrics.switch.time_us.268435456"
    tied = trials[trials[col] <= trials[col].min() * (1 + 1e-9)]      # the same switch schedule found again
    labels = {f"trial-{n} (switch)" for n in tied["tags.optuna.trial"]}
    algorithm = switch_algorithm(uri, tied.run_id.iloc[0], tmp_path)
    assert switch_ops(algorithm) > 0 and rt.refusal("msccl", algorithm, graph) is not None   # XML: never
    assert row.msccl.startswith("stock NCCL") or switch_ops(load_algorithm_of_xml_winner(uri, row, tmp_path)) == 0
    plans = [p for p in row.mscclpp.split(", ") if p.endswith(".plan.json")]
    assert rt.refusal("mscclpp", algorithm, graph) is None        # MSCCL++ lowers switch operations
    assert row.mscclpp_winner in labels
    assert plans and all(check_plan_file(target / p).valid for p in plans)
    text = (target / plans[0]).read_text()
    assert "glres" in text or "gstore" in text                       # the plan runs the switch
    assert "best XML-expressible" in row.why and row.mscclpp_winner in row.why
    notes = json.loads((target / "table.json").read_text())["ranges"]
    assert any(r["why"] == row.why for r in notes) and row.why.split(";")[0] in (target / "table.md").read_text()


def load_algorithm_of_xml_winner(uri: str, row: pd.Series, tmp_path):
    path = mlflow.MlflowClient(tracking_uri=uri).download_artifacts(row.run_id, "algorithm.json", str(tmp_path))
    return load_algorithm(path)


@pytest.mark.slow
def test_the_tuner_routes_to_nccls_nvls_only_where_it_beats_every_candidate_a_runtime_runs(swept):
    _, target, runs, _, _, table = swept
    text = (target / "nccl" / "nccl_tuner.conf").read_text()
    rules, lines = plugin_rules(text), text.splitlines()
    nccl = runs[runs["tags.autotaccl.kind"] == "nccl"].iloc[0]
    for size in SIZES:
        row = band(table, size)
        algo, proto, channels = nccl[f"tags.nccl.{size}"].split("/")
        i = [s for s in SIZES if row.min_size <= s <= row.max_size].index(size)
        ours = min(float(row.time_us.split(";")[i]), float(row.mscclpp_time_us.split(";")[i]))
        assert plugin_choice(rules, "allreduce", size, 1, 8) == (algo, proto.lower(), int(channels))
        (at,) = [i for i, ln in enumerate(lines) if ln.startswith("allreduce,") and
                 int(ln.split(",")[1]) <= size <= int(ln.split(",")[2])]
        winner = f"stock NCCL's {algo}/{proto} wins here" in lines[at - 1]
        if abs(nccl[f"metrics.time_us.{size}"] - ours) > 5e-4:        # (a tie to the table's rounding says nothing)
            assert winner == (nccl[f"metrics.time_us.{size}"] < ours), (size, lines[at - 1])
    row = band(table, 268435456)
    assert nccl["tags.nccl.268435456"].startswith("nvls/")              # NVLS where the profile has it
    # the switch trial is NCCL's NVLS in the IR (one glres per slice): it ties NCCL's nvls, so the band ships it
    # and the tuner row says nothing of a NCCL win
    i = [s for s in SIZES if row.min_size <= s <= row.max_size].index(268435456)
    assert float(row.mscclpp_time_us.split(";")[i]) == pytest.approx(nccl["metrics.time_us.268435456"], abs=5e-4)
    assert row.fastest == "trial-0 (switch)" and "winner" not in row.nccl
    assert "winner" not in band(table, 1024).nccl and "fallback" in band(table, 1024).nccl   # ours wins there


def test_the_switch_candidate_is_made_only_where_the_switch_reduces_and_never_for_real_hardware():
    h100, ndv2 = build_topology(load_hardware("dgx-h100"), 1), build_topology(load_hardware("ndv2"), 1)
    st = Settings(engine="milp", synth_size=1 << 20)
    options = switch_options(h100, "allreduce", st, get_runner("sim"))
    assert (options.engine, options.protocol, options.instances, options.runtime) == ("greedy", "Simple", 1, None)
    assert switch_options(h100, "alltoall", st, get_runner("sim")) is None      # the switch cannot run it
    assert switch_options(ndv2, "allreduce", st, get_runner("sim")) is None     # no nccl.nvls: no reducing switch
    for runner in ("mpi", "nccl-tests"):                                         # they run no switch operation
        assert switch_options(h100, "allreduce", st, get_runner(runner)) is None


def test_bands_split_where_mscclpp_and_msccl_serve_different_candidates_and_say_why():
    """Hand-made runs: trial 0's switch candidate is fastest at 1K only; refused by the plan lowering, the
    band falls to the best it loads and says so."""
    from types import SimpleNamespace

    frame = pd.DataFrame([
        {"run_id": "b", "tags.autotaccl.kind": "baseline", "tags.baseline": "ring",
         "metrics.time_us.1024": 15.0, "metrics.time_us.2048": 25.0},
        {"run_id": "t", "tags.autotaccl.kind": "trial", "tags.baseline": None, "tags.optuna.trial": "0",
         "metrics.time_us.1024": 10.0, "metrics.time_us.2048": 20.0,
         "metrics.switch.time_us.1024": 8.0, "metrics.switch.time_us.2048": 30.0}])
    experiment = SimpleNamespace(name="x-allreduce", tags={"autotaccl.collective": "allreduce", "autotaccl.nodes": "1"})
    first, second = ranges_for(experiment, frame, set(), nccl={1024: 9.0, 2048: 21.0})
    assert (first.winner, first.plan_winner, first.plan_switch) == ("trial-0", "trial-0 (switch)", True)
    assert (second.winner, second.plan_winner, second.plan_switch) == ("trial-0", "trial-0", False)
    assert "best XML-expressible: trial-0" in first.why and second.why == ""
    assert first.nccl_wins == (False,) and second.nccl_wins == (False,)   # 9 > 8 and 21 > 20: ours is faster
    assert first.fastest() == "trial-0 (switch)" and table_frame([first]).fastest.iloc[0] == "trial-0 (switch)"
    (only,) = ranges_for(experiment, frame, set(), nccl={1024: 11.0, 2048: 19.0},
                         choices={1024: ("ring", "LL", 1), 2048: ("ring", "Simple", 2)},
                         rejected={"plan": {("t", True): "mscclpp: no switch operations"}})
    assert only.plan_winner == only.winner == "trial-0" and only.nccl_wins == (False, True)
    assert "trial-0 (switch), faster here, does not load (mscclpp: no switch operations)" in only.why
    assert only.fastest() == "1K: trial-0; 2K: stock NCCL ring/Simple (nccl-model)"


def test_the_report_shows_what_mscclpp_serves_where_it_is_not_the_winner(tmp_path):
    from dashboards.report import deploy_section

    row = {"min_bytes": 0, "max_bytes": "", "winner": "trial-1", "engine": "greedy", "config": "", "protocol": "LL",
           "instances": 1, "msccl": "msccl/a-from0-up.xml", "msccl_legacy": "stock NCCL (no file)",
           "mscclpp": "mscclpp/a-from0-up.outofplace.plan.json", "nccl": "nccl/nccl_tuner.conf line 3",
           "mscclpp_winner": "trial-0 (switch)", "why": "mscclpp/ runs trial-0 (switch), a switch schedule"}
    page = deploy_section([row], tmp_path / "export", tmp_path / "report")
    assert '<span class="note" title="mscclpp/ runs trial-0 (switch), a switch schedule">trial-0 (switch)</span>' in page
    assert page.count("trial-0 (switch)</span>") == 1                       # under the mscclpp cell only
    same = deploy_section([{**row, "mscclpp_winner": "trial-1"}], tmp_path / "export", tmp_path / "report")
    assert "trial-1</span>" not in same
