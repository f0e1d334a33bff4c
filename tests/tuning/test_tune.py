"""`autotaccl tune`: real Optuna journal storage, real MLflow SQLite store, the sim runner, real synthesis."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import mlflow
import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotaccl.cli import main
from autotaccl.tuning.sweep import TuneRequest, tune
from support import NDV2_SPACE, fresh_store, install_runner, runs, write_space

SIZES = [1024, 65536, 4194304]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    space = write_space(tmp)
    out = tmp / "runs"                          # no store yet: the driver creates it
    request = TuneRequest(space=str(space), trials=3, out=str(out), sampler="random", seed=7, progress=False)
    first = tune(request)
    return tmp, space, out, request, first


@pytest.mark.slow
def test_sweep_records_every_trial_in_mlflow(sweep):
    _, _, out, _, (summary,) = sweep
    df = runs(out)
    kinds = df["tags.autotaccl.kind"].value_counts().to_dict()
    assert kinds["sweep"] == 1
    assert kinds["trial"] == 3
    assert kinds["baseline"] >= 2               # ring, hierarchical, direct apply to AllGather on ndv2x2
    parent = df[df["tags.autotaccl.kind"] == "sweep"].run_id.iloc[0]
    children = df[df["tags.autotaccl.kind"] != "sweep"]
    assert (children["tags.mlflow.parentRunId"] == parent).all()
    trials = df[df["tags.autotaccl.kind"] == "trial"]
    for column in ("params.internode_conn", "params.chunkup", "params.protocol", "params.engine",
                   "params.instances", "tags.sketch_key", "tags.state", "tags.solver_status"):
        assert trials[column].notna().all(), column
    for size in SIZES:                          # one metric column per size, as search_runs shows them
        for key in ("time_us", "algbw_GBps", "busbw_GBps", "bound_pct"):
            assert trials[f"metrics.{key}.{size}"].notna().all(), (key, size)
    ok = trials[trials["tags.state"] == "COMPLETE"]
    assert len(ok) == summary.counts["COMPLETE"] >= 1
    client = mlflow.MlflowClient()
    curve = client.get_metric_history(ok.run_id.iloc[0], "busbw_GBps")    # for MLflow's own charts
    assert sorted(m.step for m in curve) == [10, 16, 22]                    # log2 of 1K, 64K, 4M
    assert {m.step: m.value for m in curve}[22] == pytest.approx(ok[f"metrics.busbw_GBps.{SIZES[-1]}"].iloc[0])
    names = {a.path for a in client.list_artifacts(ok.run_id.iloc[0])}
    assert {"sketch.json", "algorithm.json", "measurements.csv", "busbw.png"} <= names
    sketch = json.loads(Path(client.download_artifacts(ok.run_id.iloc[0], "sketch.json", str(out))).read_text())
    assert sketch["nnodes"] == 2


def test_objective_is_geomean_of_time_relative_to_best_baseline(sweep):
    _, _, out, request, (summary,) = sweep
    study = optuna.load_study(study_name="ndv2x2-allgather",
                              storage=optuna.storages.JournalStorage(
                                  optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal"))))
    baselines = runs(out)
    baselines = baselines[baselines["tags.autotaccl.kind"] == "baseline"]
    for t in study.get_trials(states=(TrialState.COMPLETE,)):
        rel = []
        for r in t.user_attrs["results"]:
            best = baselines[f"metrics.time_us.{r['size']}"].min()
            assert r["baseline_time_us"] == pytest.approx(best)
            rel.append(r["time_us"] / best)
        geomean = 1.0
        for x in rel:
            geomean *= x
        assert t.value == pytest.approx(geomean ** (1 / len(rel)))
    # the summary's per-size winner is really the fastest trial or baseline at that size
    for w in summary.per_size:
        times = [t.user_attrs["results"][SIZES.index(w.size)]["time_us"]
                 for t in study.get_trials(states=(TrialState.COMPLETE,))]
        assert w.time_us == pytest.approx(min(times + [w.baseline_time_us]))


@pytest.mark.slow
def test_resume_with_two_workers_does_not_repeat_finished_trials(sweep, capsys):
    tmp, space, out, request, (first,) = sweep
    study_name = "ndv2x2-allgather"
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal")))
    before = {t.number: (t.params, t.datetime_complete) for t in optuna.load_study(study_name=study_name,
                                                                                     storage=storage).trials}
    import os

    environment = dict(os.environ)
    assert main(["tune", "--space", str(space), "--trials", "5", "--workers", "2", "--out", str(out),
                 "--sampler", "random", "--seed", "8", "--heartbeat", "7", "--no-progress"]) == 0
    assert dict(os.environ) == environment          # the heartbeat reaches the workers in their config
    assert json.loads((out / "sweeps" / f"{study_name}.json").read_text())["heartbeat"] == 7
    study = optuna.load_study(study_name=study_name, storage=storage)
    finished = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)]
    assert 5 <= len(finished) <= 6              # 2 more trials, at most one overshoot between the two workers
    for t in study.trials:                      # the first three trials were not run again
        if t.number in before:
            assert (t.params, t.datetime_complete) == before[t.number]
    df = runs(out)
    trial_runs = df[df["tags.autotaccl.kind"] == "trial"]
    assert len(trial_runs) == len(finished)
    assert trial_runs["tags.optuna.trial"].is_unique
    assert (df["tags.autotaccl.kind"] == "sweep").sum() == 1        # the same parent run was resumed
    assert sorted(trial_runs["tags.optuna.trial"].astype(int)) == sorted(t.number for t in finished)
    assert "study ndv2x2-allgather" in capsys.readouterr().out


@pytest.mark.slow
def test_each_greedy_trial_synthesizes_for_its_protocol_and_the_export_picks_the_fastest(tmp_path):
    """A greedy trial synthesizes for its protocol and instances: one synthesis (and cache entry) each. The
    simulator tells them apart, so no two protocols tie at any size, and the export writes, per size, the
    protocol and instance count the model says is fastest, with the algorithm synthesized for them."""
    from autotaccl.model.algorithm import from_json
    from autotaccl.model.hardware import load_hardware
    from autotaccl.model.topology import build_topology
    from autotaccl.simulate import simulate
    from autotaccl.tuning.export import export

    data = dict(NDV2_SPACE, parameters={"protocol": {"type": "categorical", "choices": ["Simple", "LL", "LL128"]},
                                        "instances": {"type": "categorical", "choices": [1, 2]}},
                fixed={"engine": "greedy", "internode_conn": "relay", "relay_map": "1:0"}, seeds=[])
    out = tmp_path / "runs"
    uri = fresh_store(out)
    request = TuneRequest(space=str(write_space(tmp_path, data)), trials=6, out=str(out), sampler="bruteforce",
                          seed=0, progress=False)
    (summary,) = tune(request)
    assert summary.counts["COMPLETE"] == 6
    assert all(w.nccl_time_us is not None and w.speedup_vs_nccl > 0 for w in summary.per_size)
    df = runs(out)
    trials = df[df["tags.autotaccl.kind"] == "trial"]
    assert (df["tags.autotaccl.kind"] == "nccl").sum() == 1           # stock NCCL, predicted, logged beside
    assert sorted(zip(trials["params.protocol"], trials["params.instances"].astype(int))) == \
        sorted((p, i) for p in ("LL", "LL128", "Simple") for i in (1, 2))
    assert trials["tags.sketch_key"].nunique() == 1
    assert set(trials["tags.cache_hit"]) == {"false"} and trials["tags.cache_key"].nunique() == 6
    assert len(list((out / "cache").glob("*.json"))) == 6
    assert (trials["params.synth.protocol"] == trials["params.protocol"]).all()
    client = mlflow.MlflowClient()
    graph = build_topology(load_hardware("ndv2"), 2)
    model = {}
    for _, trial in trials.iterrows():
        where = tmp_path / trial.run_id
        algorithm = from_json(json.loads(Path(client.download_artifacts(trial.run_id, "algorithm.json",
                                                                        str(where))).read_text()))
        p, i = trial["params.protocol"], int(trial["params.instances"])
        model[p, i] = [simulate(algorithm, graph, s, p, i).time_us for s in SIZES]
    for j, size in enumerate(SIZES):
        column = trials[f"metrics.time_us.{size}"]
        by_protocol = {p: column[(trials["params.protocol"] == p).to_numpy()].min() for p in ("LL", "LL128", "Simple")}
        assert len(set(by_protocol.values())) == 3, (size, by_protocol)       # no exact ties between protocols
        for (p, i), times in model.items():
            row = trials[(trials["params.protocol"] == p) & (trials["params.instances"].astype(int) == i)]
            assert row[f"metrics.time_us.{size}"].iloc[0] == pytest.approx(times[j])
    ranges = export(uri, ["ndv2x2-allgather"], tmp_path / "export")
    assert any(r.winner.startswith("trial-") for r in ranges)
    for r in ranges:
        covered = [s for s in SIZES if r.min_size <= s <= r.max_size]
        for s, t in zip(covered, r.time_us):
            j = SIZES.index(s)
            fastest = min(model, key=lambda key: model[key][j])
            if r.winner.startswith("trial-"):
                assert (r.protocol, r.instances) == fastest, (s, r, fastest)
                assert t == pytest.approx(model[fastest][j])
            else:                      # a baseline won: no synthesized trial was faster
                assert model[fastest][j] >= min(r.baseline_time_us)
        assert r.speedup_vs_nccl is not None
    table = (tmp_path / "export" / "table.md").read_text()
    assert "speed-up vs NCCL" in table


def test_bad_space_is_one_line_and_exit_2(tmp_path, capsys):
    data = dict(NDV2_SPACE, parameters={"chunkup": {"type": "int", "low": 3, "high": 1}})
    path = write_space(tmp_path, data)
    assert main(["tune", "--space", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{path}: parameters.chunkup.low" in err
    assert not (tmp_path / "o").exists()             # validated before anything was created


def test_a_stuck_sampler_gets_an_unseen_configuration_enqueued(tmp_path):
    from autotaccl.tuning.explore import enqueue_unseen, is_repeat, stuck
    from autotaccl.tuning.space import enumerate_space, load_space

    space = load_space(write_space(tmp_path))
    study = optuna.create_study(storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log"))))
    same = {"internode_conn": "direct-map", "chunkup": 1, "protocol": "LL"}
    for _ in range(4):                               # a sampler circling one configuration
        study.enqueue_trial(same)
        trial = study.ask()
        params = {"engine": "greedy", **{k: trial.suggest_categorical(k, [v]) for k, v in same.items()}}
        study.tell(trial, 1.0)
    assert is_repeat(study, params, space) and stuck(study)
    new = enqueue_unseen(study, space, seed=0)
    assert new is not None and new != same
    assert new in enumerate_space(space)
    assert study.get_trials(states=(TrialState.WAITING,))[0].system_attrs["fixed_params"] == new


@pytest.mark.slow
def test_progress_bar_on_stderr_counts_trials_and_no_progress_removes_it(tmp_path, capsys):
    space = write_space(tmp_path)
    out = tmp_path / "runs"
    fresh_store(out)
    common = ["tune", "--space", str(space), "--out", str(out), "--sampler", "random", "--seed", "4"]
    assert main([*common, "--trials", "2"]) == 0
    captured = capsys.readouterr()
    assert "0/2" in captured.err and "2/2" in captured.err and "trials:" in captured.err, captured.err
    assert "2/2" not in captured.out and "study ndv2x2-allgather" in captured.out     # the summary table
    best = min(t.value for t in optuna.load_study(study_name="ndv2x2-allgather", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal")))).trials if t.value is not None)
    assert f"best {best:.4f}" in captured.err
    assert main([*common, "--trials", "3", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "trials:" not in captured.err and "1/1" not in captured.err, captured.err
    assert "study ndv2x2-allgather" in captured.out
    assert len(optuna.load_study(study_name="ndv2x2-allgather", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal")))).trials) == 3


ONE_NIC = {   # 2 GPUs per node, only GPU 0 reaches the network: a relay from GPU 1 has no link
    "name": "pair1nic", "gpus_per_node": 2,
    "link_classes": {"nvlink": {"alpha_us": 0.7, "bandwidth_GBps": 25.0}, "pcie": {"alpha_us": 0.5, "bandwidth_GBps": 16.0},
                     "ib": {"alpha_us": 2.6, "bandwidth_GBps": 12.5}},
    "links": {"class": "nvlink", "pairs": [[0, 1, 1]]},
    "nics": [{"class": "ib", "via": "pcie", "gpus": [0]}],
}


# Test double for a real runner whose ranks computed a wrong result, installed as a site's runner (a real
# entry point): it times algorithms with the simulator and reports its first measurement of a synthesized
# algorithm as both fastest and wrong (wrong > 0), as a faulty rank would; later measurements are right.
WRONG_ONCE = """
import socket
from dataclasses import dataclass

from autotaccl.model.topology import topology_for
from runners import sim

corrupted = 0


@dataclass(frozen=True)
class Options:
    hardware: str
    nodes: int = 1


class WrongOnce:
    name = "wrong-once"
    real_hardware = True
    runtime_file = None
    Options = Options

    def hosts(self, options):
        return (socket.gethostname(),)

    def measure(self, algorithm, sizes, options):
        global corrupted
        frame = sim.measure(algorithm, sizes, topology_for(options.hardware, options.nodes))
        if "sketch_key" in algorithm.metadata and not corrupted:      # baselines have no sketch
            corrupted += 1
            frame["time_us"] = frame["time_us"] / 100          # it would win every size if it counted
            frame["wrong"] = 7
        return frame
"""


@pytest.mark.slow
def test_infeasible_sketch_and_wrong_data_fail_their_trials_and_export_skips_them(tmp_path, monkeypatch):
    (tmp_path / "pair1nic.yaml").write_text(yaml.safe_dump(ONE_NIC))
    space = write_space(tmp_path, {
        "target": {"hardware": "pair1nic.yaml", "nodes": 2, "collective": "allgather"}, "sizes": "1K,64K",
        "fixed": {"engine": "greedy"},
        "parameters": {"relay_map": {"type": "categorical", "choices": ["0:0", "1:1"]},
                       "protocol": {"type": "categorical", "choices": ["Simple", "LL"]}}})
    monkeypatch.syspath_prepend(str(install_runner(tmp_path / "site", "wrong-once", "wrong_once:WrongOnce",
                                                   WRONG_ONCE)))
    out = tmp_path / "runs"
    fresh_store(out)
    (summary,) = tune(TuneRequest(space=str(space), trials=4, out=str(out), sampler="bruteforce", seed=0,
                                  runner="wrong-once", margin=10.0, explore=0.0,
                                  runner_options={"hardware": str(tmp_path / "pair1nic.yaml"), "nodes": 2}))
    assert importlib.import_module("wrong_once").corrupted == 1, "the double reported one wrong result"

    study = optuna.load_study(study_name=summary.study, storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal"))))
    trials = study.trials
    infeasible = [t for t in trials if t.params.get("relay_map") == "1:1"]
    wrong = [t for t in trials if "wrong elements" in t.user_attrs.get("failure_reason", "")]
    assert len(infeasible) == 2 and len(wrong) == 1            # relay 1:1 with either protocol; one bad measurement
    for t in infeasible:
        assert t.state == TrialState.FAIL
        assert t.user_attrs["failure_reason"].startswith("synthesis:")
        assert "internode_conn 1->1: the topology has no link from rank 1" in t.user_attrs["failure_reason"]
    assert wrong[0].state == TrialState.FAIL and wrong[0].params["relay_map"] == "0:0"
    assert wrong[0].user_attrs["failure_reason"].startswith(
        "wrong-once runner: wrong-once runner found wrong elements at sizes")
    good = [t for t in trials if t not in infeasible and t not in wrong]
    assert good and all(t.state == TrialState.COMPLETE for t in good)      # the sweep went on past both
    assert len(trials) == 4                                  # every configuration of the space, once

    df = runs(out, "pair1nicx2-allgather")
    mine = df[df["tags.autotaccl.kind"] == "trial"]
    failed = {t.number: t.user_attrs["failure_reason"] for t in infeasible + wrong}
    bad = mine[mine["tags.state"] == "FAIL"]
    assert dict(zip(bad["tags.optuna.trial"].astype(int), bad["tags.failure_reason"])) == failed
    assert (bad["status"] == "FAILED").all() and (bad["tags.verified"] == "false").all()

    target = tmp_path / "export"
    assert main(["export", "--tracking-uri", f"sqlite:///{out / 'mlflow.db'}", "--experiment",
                 "pair1nicx2-allgather", "-o", str(target)]) == 0
    import pandas as pd

    table = pd.read_csv(target / "table.csv")
    assert not set(table.run_id) & set(bad.run_id)          # failed runs are never exported
    exportable = set(mine[mine["tags.state"] == "COMPLETE"].run_id) | set(df[df["tags.autotaccl.kind"] == "baseline"].run_id)
    assert set(table.run_id) <= exportable


@pytest.mark.slow
def test_a_trial_is_reproduced_from_its_mlflow_run(sweep):
    """The run holds the profile's content, the node count, the sketch and every solver setting: synthesizing
    again from those alone gives the same algorithm."""
    from dataclasses import fields

    from autotaccl import SynthOptions, build_topology, load_hardware, load_sketch, loader, synthesize
    from autotaccl.model.algorithm import to_json
    from autotaccl.model.topology import fingerprint

    _, _, out, _, _ = sweep
    df = runs(out)
    ok = df[(df["tags.autotaccl.kind"] == "trial") & (df["tags.state"] == "COMPLETE")]
    assert len(ok) >= 1
    client = mlflow.MlflowClient()
    for _, run in ok.iterrows():
        where = out / "reproduce" / run.run_id
        where.mkdir(parents=True)
        files = {name: Path(client.download_artifacts(run.run_id, name, str(where)))
                 for name in ("hardware.yaml", "sketch.json", "algorithm.json")}
        graph = build_topology(load_hardware(files["hardware.yaml"]), int(run["params.nodes"]))
        assert fingerprint(graph) == run["params.topology"]
        defaults = SynthOptions()
        options = SynthOptions(**{f.name: type(getattr(defaults, f.name))(run[f"params.synth.{f.name}"])
                                  for f in fields(SynthOptions) if f.name in defaults.settings()},
                               runtime=loader(run["params.synth.runtime"]))
        assert options.time_limit == 60.0 and options.threads == 1     # the sweep's settings, not the defaults
        assert (options.protocol, options.instances) == (run["params.protocol"], int(run["params.instances"]))
        again = synthesize(graph, run["params.collective"], load_sketch(files["sketch.json"]), options)
        assert to_json(again.algorithm) == json.loads(files["algorithm.json"].read_text())


def test_profiles_of_one_shape_with_other_numbers_do_not_share_schedules(tmp_path, topo):
    """Two profiles with the same links but other bandwidths, one cache: each gets its own synthesis; equal
    configurations (and only those) are served from the cache, also across solver settings."""
    from dataclasses import replace

    from autotaccl.model.algorithm import to_json
    from autotaccl.model.hardware import LinkClass, load_hardware
    from autotaccl.model.topology import build_topology
    from autotaccl.sketch import default_sketch
    from autotaccl.synth import SynthOptions
    from autotaccl.tuning.cache import SynthesisCache
    from autotaccl.tuning.evaluate import synthesize_cached

    ndv2 = load_hardware("ndv2")
    slow_net = replace(ndv2, link_classes={**ndv2.link_classes, "ib": LinkClass("ib", 2.6, 1.0)})
    fast, slow = topo("ndv2", 2), build_topology(slow_net, 2)
    sketch = default_sketch(fast, "allgather")
    cache = SynthesisCache(tmp_path / "cache")
    options = SynthOptions(engine="greedy", size=1 << 20, threads=1)
    first = synthesize_cached(fast, "allgather", sketch, options, cache)
    other = synthesize_cached(slow, "allgather", sketch, options, cache)
    assert not first.cache_hit and not other.cache_hit and first.key != other.key
    assert synthesize_cached(fast, "allgather", sketch, options, cache).cache_hit
    again = synthesize_cached(slow, "allgather", sketch, options, cache)
    assert again.cache_hit and again.key == other.key and to_json(again.algorithm) == to_json(other.algorithm)
    for changed in (replace(options, time_limit=5.0), replace(options, solver="highs"), replace(options, threads=2)):
        assert not synthesize_cached(fast, "allgather", sketch, changed, cache).cache_hit, changed
    assert len(list((tmp_path / "cache").glob("*.json"))) == 5


@pytest.mark.slow
def test_a_space_object_runs_in_worker_processes(tmp_path):
    """A SearchSpace built in Python has no file: the driver writes it (and its profile) for the workers,
    and the sweep's heartbeat reaches them through their config, not the environment."""
    import os
    from dataclasses import replace

    from autotaccl.tuning.space import load_space, space_from_dict

    space = space_from_dict(NDV2_SPACE, "<python>")
    out = tmp_path / "runs"
    fresh_store(out)
    def ours():
        return {k: v for k, v in os.environ.items() if k.startswith("AUTOTACCL")}

    environment = ours()
    (summary,) = tune(TuneRequest(space=space, trials=3, workers=2, heartbeat=7, out=str(out), sampler="random",
                                  seed=3))
    assert ours() == environment            # MLflow's client settings may be set; nothing of ours is
    config = json.loads((out / "sweeps" / f"{summary.study}.json").read_text())
    assert config["heartbeat"] == 7 and config["space"] == f"sweeps/{summary.study}.space.yaml"   # relative to OUT
    written = load_space(out / config["space"])
    assert written == replace(space, source=str(out / config["space"]), hardware=written.hardware)
    assert written.profile == replace(space.profile, source=written.hardware)
    study = optuna.load_study(study_name=summary.study, storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal"))))
    finished = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)]
    assert len(finished) == 3 and summary.counts["COMPLETE"] >= 1
    assert all(not t.user_attrs["worker"].endswith(f":{os.getpid()}") for t in finished)   # run by the workers
    trials = runs(out)
    assert (trials["tags.autotaccl.kind"] == "trial").sum() == 3


def test_runs_compare_usefully_in_mlflow(sweep):
    """Issue 12 item 7, through search_runs: what a trial was is its name, each setting has one column,
    per-size quantities are curves over log2(bytes) beside their per-size keys, the experiment says what it holds."""
    _, _, out, _, (summary,) = sweep
    df = runs(out)
    trials = df[df["tags.autotaccl.kind"] == "trial"]
    for _, run in trials.iterrows():
        words = [f"t{run['tags.optuna.trial']}", run["params.engine"], run["params.internode_conn"]]
        words += [run["params.relay_map"]] if run["params.internode_conn"] == "relay" else []
        words += [f"cu{run['params.chunkup']}", run["params.protocol"]]
        assert run["tags.mlflow.runName"] == " ".join(words)
    assert not [c for c in df.columns if c.startswith(("params.settings.", "params.sketch."))]
    bases = df[df["tags.autotaccl.kind"] == "baseline"]
    assert set(bases["params.protocol"]) == {"Simple"} and set(bases["params.instances"]) == {"1"}
    mlflow.set_tracking_uri(f"sqlite:///{out / 'mlflow.db'}")
    for protocol in set(trials["params.protocol"]):
        found = mlflow.search_runs(experiment_names=["ndv2x2-allgather"],
                                   filter_string=f"params.protocol = '{protocol}' and tags.`autotaccl.kind` = 'trial'")
        assert set(found.run_id) == set(trials[trials["params.protocol"] == protocol].run_id)
    client = mlflow.MlflowClient()
    for _, run in df[df["tags.state"] == "COMPLETE"].iterrows():      # trials, baselines, the NCCL model
        for key in ("time_us", "algbw_GBps", "busbw_GBps", "bound_pct"):
            points = {m.step: m.value for m in client.get_metric_history(run.run_id, key)}
            assert points == pytest.approx({size.bit_length() - 1: run[f"metrics.{key}.{size}"] for size in SIZES}), \
                (run["tags.mlflow.runName"], key)
    note = client.get_experiment(summary.experiment_id).tags["mlflow.note.content"]
    assert "allgather on ndv2x2 (16 GPUs), 1K to 4M" in note and "step = log2(bytes)" in note
