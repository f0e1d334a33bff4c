"""The runner contract: options dataclasses built in one place, the entry-point registry, hosts and leases.

A site's own runner is installed the real way, as a distribution whose ``autotaccl.runners`` entry point
``importlib.metadata`` finds on the path (``support.install_runner``), and driven through ``autotaccl
bench`` and ``autotaccl tune``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import socket
import subprocess
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotaccl.cli import main
from autotaccl.cluster.locks import Lock
from autotaccl.errors import InputError
from autotaccl.model.algorithm import Algorithm, Transfer, from_json, save_algorithm
from autotaccl.model.collectives import Collective
from autotaccl.model.topology import topology_for
from autotaccl.simulate import simulate
from autotaccl.tuning.objective import SweepConfig
from runners import build_options, get_runner, options_dict, runner_names
from runners.launch import hosts
from runners.mpi import MpiOptions
from runners.nccl_tests import NcclTestsOptions
from runners.sim import SimOptions
from support import PAIR_HARDWARE, REPO, VENV_BIN, fresh_store, install_runner, write_space

# A site's runner, standing in for hardware we do not have: it times the algorithm with the simulator on
# its own profile, `slowdown` times slower, occupies the hosts it is told, and logs every call.
SITE_RUNNER = '''
import json
from dataclasses import dataclass

from autotaccl.model.topology import topology_for
from runners import sim
from runners.contract import check


@dataclass(frozen=True)
class SiteOptions:
    hardware: str
    nodes: int = 1
    slowdown: float = 1.0
    hosts: str = "site-a,site-b"
    log: str | None = None

    def __post_init__(self):
        check(self.slowdown > 0, "--slowdown", self.slowdown, "a positive factor")


class SiteRunner:
    name = "site-sim"
    real_hardware = True
    runtime_file = None
    Options = SiteOptions

    def hosts(self, options):
        return tuple(options.hosts.split(","))

    def measure(self, target, sizes, options):
        frame = sim.measure(target, sizes, topology_for(options.hardware, options.nodes))
        frame["time_us"] *= options.slowdown
        frame["algbw"] /= options.slowdown
        frame["busbw"] /= options.slowdown
        if options.log:
            with open(options.log, "a") as log:
                log.write(json.dumps({"algorithm": target.name, "sizes": list(sizes)}) + "\\n")
        return frame
'''


def ring_allgather(ranks: int) -> Algorithm:
    ts = [Transfer(((r - s) % ranks,), r, (r + 1) % ranks, s) for s in range(ranks - 1) for r in range(ranks)]
    return Algorithm("ring-ag", Collective("allgather", ranks), tuple(ts))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """The site runner installed under tmp_path/site, on this process's path (PYTHONPATH for children)."""
    root = install_runner(tmp_path / "site", "site-sim", "site_sim_runner:SiteRunner", SITE_RUNNER)
    monkeypatch.syspath_prepend(str(root))
    (tmp_path / "pair.yaml").write_text(yaml.safe_dump(PAIR_HARDWARE))
    return root


# --------------------------------------------------------------------------- options


def test_an_option_the_runner_does_not_have_is_an_error_naming_its_flag():
    mpi = get_runner("mpi")
    with pytest.raises(InputError, match=r"^--binary: 'x': not an option of the mpi runner \(its options: np, "):
        build_options(mpi, {"np": 2, "binary": "x"})
    with pytest.raises(InputError, match="^--timeout-per-run: 5: not an option of the sim runner"):
        build_options(get_runner("sim"), {"timeout": 5}, {"timeout": "--timeout-per-run"})
    # a field's own check names the flag the command gave it
    with pytest.raises(InputError, match="^--timeout-per-run: -1: a positive number of seconds"):
        build_options(mpi, {"timeout": -1}, {"timeout": "--timeout-per-run"})
    assert build_options(mpi, {"np": "4", "check": "false"}) == MpiOptions(np=4, check=False)   # text is typed
    with pytest.raises(InputError, match="^--np: 'four': a value of type int"):
        build_options(mpi, {"np": "four"})


def test_bench_and_tune_reject_a_flag_of_another_runner(tmp_path, capsys):
    algo = tmp_path / "ring.json"
    save_algorithm(ring_allgather(2), algo)
    cases = ((["bench", str(algo), "--runner", "mpi", "--binary", "x"], "--binary: 'x': not an option of the mpi runner"),
             (["bench", str(algo), "--runner", "sim", "--hardware", "ndv2", "--iters", "3"],
              "--iters: 3: not an option of the sim runner"),
             (["bench", str(algo), "--runner", "nccl-tests", "--binary", "b", "--np", "2", "--nodes", "2"],
              "--nodes: 2: not an option of the nccl-tests runner"),
             (["bench", str(algo), "--runner", "mpi", "--runner-option", "np"], "--runner-option: 'np': KEY=VALUE"),
             (["bench", str(algo), "--np", "2", "--runner-option", "np=2"], "an option not given already (by --np)"),
             (["tune", "--space", "ndv2x1", "--out", str(tmp_path / "o"), "--runner", "mpi", "--binary", "x"],
              "--binary: 'x': not an option of the mpi runner"),
             (["tune", "--space", "ndv2x1", "--out", str(tmp_path / "o"), "--timeout-per-run", "9"],
              "--timeout-per-run: 9.0: not an option of the sim runner"))
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (argv, err)
    assert not (tmp_path / "o").exists()              # tune rejected its runner options before creating anything


def test_nccl_tests_needs_a_binary_and_ranks_or_a_whole_launcher_line():
    with pytest.raises(InputError, match="^--binary: \\(missing\\)"):
        NcclTestsOptions(np=2)
    with pytest.raises(InputError, match="^--np: \\(missing\\)"):
        NcclTestsOptions(binary="b")
    with pytest.raises(InputError, match="^--np: \\(missing\\)"):            # a hostfile needs --np to go with it
        NcclTestsOptions(binary="b", launcher="mpirun", hostfile="hosts")
    assert NcclTestsOptions(binary="b", launcher="mpirun -np 8").np is None   # the whole launcher line
    with pytest.raises(InputError, match="^--env-flag: '-X'"):
        NcclTestsOptions(binary="b", np=2, env_flag="-X")


def test_bench_without_binary_is_one_line_and_exit_2(tmp_path, capsys):
    algo = tmp_path / "ring.json"
    save_algorithm(ring_allgather(2), algo)
    assert main(["bench", str(algo), "--runner", "nccl-tests", "--np", "2"]) == 2
    assert capsys.readouterr().err.strip() == ("autotaccl: error: --binary: (missing): the nccl-tests binary or "
                                               "build directory for --runner nccl-tests")


@pytest.mark.parametrize("name, values", [
    ("sim", {"hardware": "ndv2", "nodes": 2, "chunk_size": "1M", "dtype": "float16"}),
    ("mpi", {"np": 4, "hostfile": "hosts", "timeout": 60.0, "check": False, "launcher": "srun --mpi=pmi2"}),
    ("nccl-tests", {"binary": "/opt/nccl-tests/build", "launcher": "mpirun -np 8", "runtime": "legacy",
                    "env_flag": "-x", "iters": 7})])
def test_options_round_trip_through_the_sweep_config(tmp_path, name, values):
    runner = get_runner(name)
    options = build_options(runner, values)
    assert all(getattr(options, k) == v for k, v in values.items())
    config = SweepConfig(space="s", collective="allgather", out_dir="o", storage="j", study_name="st",
                         tracking_uri="u", experiment_id="1", parent_run_id="p", reference="r", runner=name,
                         runner_options=options_dict(options))
    config.save(tmp_path / "sweep.json")
    loaded = SweepConfig.load(tmp_path / "sweep.json")
    assert json.loads((tmp_path / "sweep.json").read_text())["runner_options"] == options_dict(options)
    assert build_options(runner, loaded.runner_options) == options
    with pytest.raises(dataclasses.FrozenInstanceError):        # a value, not a bag of settings
        options.dtype = "int32"


# --------------------------------------------------------------------------- registry


def test_the_shipped_runners_are_entry_points_and_an_unknown_one_lists_them(tmp_path, capsys):
    assert {"sim", "mpi", "nccl-tests"} <= set(runner_names())
    for name, real, file in (("sim", False, None), ("mpi", True, None), ("nccl-tests", True, ".xml")):
        runner = get_runner(name)
        assert (runner.name, runner.real_hardware) == (name, real)
        assert (runner.runtime_file and runner.runtime_file.suffix) == file
    with pytest.raises(InputError, match=r"^--runner: 'mpii': one of: .*mpi, mscclpp, nccl-tests, sim"):
        get_runner("mpii")
    algo = tmp_path / "ring.json"
    save_algorithm(ring_allgather(2), algo)
    assert main(["bench", str(algo), "--runner", "mpii"]) == 2
    assert "--runner: 'mpii': one of:" in capsys.readouterr().err


def test_a_broken_site_runner_is_named(tmp_path, monkeypatch):
    bad = install_runner(tmp_path / "bad", "half-runner", "half_runner:Half",
                         "class Half:\n    name = 'half-runner'\n\n    def measure(self, target, sizes, options):\n"
                         "        return None\n")
    missing = install_runner(tmp_path / "missing", "gone-runner", "gone_runner:Gone", "")
    clash = install_runner(tmp_path / "clash", "mpi", "clash_runner:Mpi", "")
    monkeypatch.syspath_prepend(str(bad))
    monkeypatch.syspath_prepend(str(missing))
    with pytest.raises(InputError, match=r"^entry point half-runner = half_runner:Half: runner: a runner named "
                                         r"'half-runner' with name, real_hardware"):
        get_runner("half-runner")
    with pytest.raises(InputError, match="^entry point gone-runner = gone_runner:Gone: runner: an importable"):
        get_runner("gone-runner")
    monkeypatch.syspath_prepend(str(clash))
    with pytest.raises(InputError, match=r"mpi: one runner per name \(.* both claim it\)"):
        get_runner("sim")


@pytest.mark.slow
def test_a_site_runner_from_its_entry_point_measures_through_bench(site, tmp_path):
    algo = tmp_path / "ring.json"
    save_algorithm(ring_allgather(4), algo)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    bench = [str(VENV_BIN / "autotaccl"), "bench", str(algo), "--runner", "site-sim", "--sizes", "1K,1M", "--json"]
    done = subprocess.run([*bench, "--hardware", str(tmp_path / "pair.yaml"), "--runner-option", "nodes=2",
                           "--runner-option", "slowdown=3"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    graph = topology_for(str(tmp_path / "pair.yaml"), 2)
    assert doc["runner"] == "site-sim"
    for row in doc["rows"]:
        assert row["time_us"] == pytest.approx(3 * simulate(ring_allgather(4), graph, row["size"]).time_us)
    bad = subprocess.run([*bench, "--hardware", str(tmp_path / "pair.yaml"), "--np", "4",
                          "--runner-option", "slowdown=0"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "--np: 4: not an option of the site-sim runner (its options: hardware, nodes, slowdown" in bad.stderr
    zero = subprocess.run([*bench, "--hardware", str(tmp_path / "pair.yaml"), "--runner-option", "slowdown=0"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert zero.returncode == 2 and "--runner-option slowdown: 0.0: a positive factor" in zero.stderr


@pytest.mark.slow
def test_a_site_runner_is_the_second_fidelity_of_tune_and_leases_its_hosts(site, tmp_path):
    space = write_space(tmp_path, {"target": {"hardware": "pair.yaml", "nodes": 2, "collective": "allgather"},
                                   "sizes": "1K,64K", "fixed": {"engine": "greedy", "internode_conn": "relay"},
                                   "parameters": {"relay_map": {"type": "categorical", "choices": ["0:0", "0:1"]}}})
    out = tmp_path / "runs"
    fresh_store(out)
    log = tmp_path / "calls.jsonl"
    assert main(["tune", "--space", str(space), "--trials", "2", "--sampler", "bruteforce", "--seed", "0",
                 "--out", str(out), "--no-progress", "--runner", "site-sim", "--margin", "10", "--explore", "0",
                 "--runner-option", f"hardware={tmp_path / 'pair.yaml'}", "--runner-option", "nodes=2",
                 "--runner-option", "slowdown=2", "--runner-option", "hosts=site-b,site-a",
                 "--runner-option", f"log={log}"]) == 0
    journal = str(out / "optuna.journal")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    trials = optuna.load_study(study_name="pairx2-allgather", storage=storage).trials
    assert len(trials) == 2 and all(t.state == TrialState.COMPLETE for t in trials)
    ref = json.loads((out / "sweeps" / "pairx2-allgather.reference.json").read_text())
    assert ref["runner"] == "site-sim"
    graph = topology_for(str(tmp_path / "pair.yaml"), 2)
    for name, times in ref["times"].items():      # the site runner ran each baseline as it is: Simple, one channel
        algo = from_json(ref["algorithms"][name])
        assert times == pytest.approx([2 * simulate(algo, graph, s, "Simple").time_us for s in ref["sizes"]])
    for t in trials:
        assert t.user_attrs["fidelity"] == "site-sim" and t.user_attrs["measure_hosts"] == ["site-b", "site-a"]
        # the score compares the site runner's trial times with its own baseline times, not the simulator's
        results = t.user_attrs["results"]
        assert [r["baseline_time_us"] for r in results] == pytest.approx(
            [min(times[i] for times in ref["times"].values()) for i in range(len(ref["sizes"]))])
        assert t.value == pytest.approx(math.exp(sum(math.log(r["relative"]) for r in results) / len(results)))
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == len(ref["times"]) + 2 and all(c["sizes"] == [1024, 65536] for c in calls)
    for host in ("site-a", "site-b"):                 # the leases were taken on the runner's hosts
        assert Lock(journal, out, f"host:{host}").path.is_file()
    config = json.loads((out / "sweeps" / "pairx2-allgather.json").read_text())
    assert config["runner"] == "site-sim" and config["runner_options"]["slowdown"] == 2.0


# --------------------------------------------------------------------------- hosts


def test_hosts_come_from_the_runner(tmp_path, monkeypatch):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two nodes\nnode02:8\nnode01 slots=8\nnode02:8\n")
    assert get_runner("mpi").hosts(MpiOptions(hostfile=str(hostfile))) == ("node01", "node02")
    nccl = get_runner("nccl-tests")
    assert nccl.hosts(NcclTestsOptions(binary="b", np=16, hostfile=str(hostfile))) == ("node01", "node02")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert nccl.hosts(NcclTestsOptions(binary="b", launcher="srun -n 16")) == ("slurm-job-4242",)
    assert hosts("mpiexec", None) == (socket.gethostname(),)
    assert get_runner("sim").hosts(SimOptions()) == ()


def test_tuning_cluster_and_commands_never_branch_on_a_runner_name():
    compare = re.compile(r"runner(\.name)?\s*(==|!=|\bin\b|\bnot in\b)\s*[\"'(\[]")
    for folder in ("autotaccl/tuning", "autotaccl/cluster", "autotaccl/commands"):
        for path in sorted((REPO / folder).glob("*.py")):
            text = path.read_text()
            assert not compare.search(text), path
            assert '"nccl-tests"' not in text and "'nccl-tests'" not in text, path
