"""``autotaccl bench``, the sim runner, and every baseline and synthesized algorithm on real MPI ranks with --check."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from autotaccl.baselines import applicable_baselines, baseline
from autotaccl.cli import main
from autotaccl.errors import InputError
from autotaccl.model.algorithm import Algorithm, Transfer, save_algorithm
from autotaccl.model.collectives import NAMES, Collective
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.simulate import simulate
from runners import get_runner, sim
from runners.mpi import MpiOptions, measure_many
from runners.nccl_tests import parse
from runners.sim import SimOptions

pytestmark = pytest.mark.mpi

FC4 = """name: fc4
description: test profile, 4 GPUs with a link between every pair
gpus_per_node: 4
link_classes:
  nvlink: {alpha_us: 0.7, bandwidth_GBps: 25.0}
  ib: {alpha_us: 2.6, bandwidth_GBps: 12.5}
links: {class: nvlink, pattern: fully-connected}
nics:
  - {class: ib, gpus: [0, 1, 2, 3]}
"""
PAIR = FC4.replace("name: fc4", "name: pair").replace("gpus_per_node: 4", "gpus_per_node: 2").replace(
    "gpus: [0, 1, 2, 3]", "gpus: [0, 1]")


def ring_allgather(ranks: int) -> Algorithm:
    ts = [Transfer(((r - s) % ranks,), r, (r + 1) % ranks, s) for s in range(ranks - 1) for r in range(ranks)]
    return Algorithm("ring-ag", Collective("allgather", ranks), tuple(ts))


@pytest.fixture
def cli(capsys):
    """Run the CLI in this process (the driver never initialises MPI; the ranks are real processes)."""
    def run(*args: str) -> SimpleNamespace:
        code = main(list(args))
        captured = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)
    return run


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    d = tmp_path_factory.mktemp("hw")
    (d / "fc4.yaml").write_text(FC4)
    (d / "pair.yaml").write_text(PAIR)
    return d


def test_every_baseline_moves_correct_data_on_real_ranks(profiles):
    """4 ranks: one node of 4 (ring, tree, direct) and two nodes of 2 (hierarchical, two-step)."""
    algorithms = []
    for profile, nodes in (("fc4.yaml", 1), ("pair.yaml", 2)):
        graph = build_topology(load_hardware(profiles / profile), nodes)
        for coll in NAMES:
            for name in applicable_baselines(graph, coll):
                a = baseline(graph, coll, name)
                algorithms.append(Algorithm(f"{profile}-{coll}-{name}", a.collective, a.transfers))
    names = {a.name.split("-", 2)[2] for a in algorithms}
    assert {"ring", "tree", "direct", "hierarchical", "two-step"} <= names
    frames = measure_many(algorithms, [24576], MpiOptions(iters=1, warmup=0, check=True, timeout=120))
    for a, df in zip(algorithms, frames):
        assert len(df) == 2, a.name
        assert (df["wrong"] == 0).all(), (a.name, df)


def test_sim_runner_wraps_the_simulator(profiles):
    graph = build_topology(load_hardware(profiles / "fc4.yaml"))
    a = ring_allgather(4)
    df = sim.measure(a, [1 << 20, 1 << 24], graph)
    assert list(df["inplace"]) == [False, True, False, True]
    for size in (1 << 20, 1 << 24):
        times = df[df["size"] == size]["time_us"]
        assert (times == simulate(a, graph, size).time_us).all()
    assert ((df["busbw"] / df["algbw"]) - 3 / 4).abs().max() < 1e-12 and (df["wrong"] == 0).all()
    same = get_runner("sim").measure(a, [1 << 20], SimOptions(hardware=str(profiles / "fc4.yaml")))
    assert same["time_us"].iloc[0] == df["time_us"].iloc[0]
    with pytest.raises(InputError, match="4 ranks"):
        get_runner("sim").measure(a, [1024], SimOptions(hardware="fully-connected"))
    broken = Algorithm("broken", a.collective, a.transfers[:-1])
    bad = sim.measure(broken, [1 << 20], graph)
    assert (bad["wrong"] > 0).all() and bad["busbw"].isna().all()


def test_sim_runner_runs_the_protocol_and_instances_it_is_given(profiles, tmp_path, cli):
    graph = build_topology(load_hardware(profiles / "fc4.yaml"))
    a = ring_allgather(4)
    algo = tmp_path / "ring.json"
    save_algorithm(a, algo)
    out = cli("bench", str(algo), "--runner", "sim", "--hardware", str(profiles / "fc4.yaml"), "--sizes", "1K,16M",
              "--runner-option", "protocol=ll", "--runner-option", "instances=2", "--json")
    assert out.returncode == 0, out.stderr
    rows = [r for r in json.loads(out.stdout)["rows"] if not r["inplace"]]
    assert [r["time_us"] for r in rows] == pytest.approx([simulate(a, graph, s, "LL", 2).time_us for s in (1024, 1 << 24)])
    assert rows[1]["time_us"] != pytest.approx(simulate(a, graph, 1 << 24).time_us)     # LL halves the payload
    with pytest.raises(InputError, match="^--protocol: 'LL64'"):
        SimOptions(hardware="ring", protocol="LL64")
    with pytest.raises(InputError, match="^--instances: 0"):
        SimOptions(hardware="ring", instances=0)


def test_bench_json_with_check_and_mpi_baseline(tmp_path, cli):
    algo = tmp_path / "ring.json"
    save_algorithm(ring_allgather(2), algo)
    out = cli("bench", str(algo), "--runner", "mpi", "--np", "2", "--sizes", "4K:16K", "--iters", "2",
              "--warmup", "1", "--check", "--baseline", "mpi", "--json", "--timeout", "60")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [r["size"] for r in doc["rows"]] == [4096, 4096, 8192, 8192, 16384, 16384]
    assert all(r["wrong"] == 0 and r["busbw"] > 0 for r in doc["rows"] + doc["baseline"])
    assert len(doc["baseline"]) == 6


def test_bench_table_is_nccl_tests_format(tmp_path, cli):
    algo = tmp_path / "ring.json"
    save_algorithm(ring_allgather(2), algo)
    out = cli("bench", str(algo), "--np", "2", "--sizes", "1K,64K", "--iters", "2", "--warmup", "0", "--check")
    assert out.returncode == 0, out.stderr
    rows = parse(out.stdout)   # our table reads back with the nccl-tests parser
    assert list(rows["size"]) == [1024, 1024, 65536, 65536] and (rows["wrong"] == 0).all()
    assert "# Out of bounds values : 0 OK" in out.stdout and "#wrong" in out.stdout


def test_bench_wrong_algorithm_exits_1(tmp_path, cli):
    a = ring_allgather(2)
    algo = tmp_path / "broken.json"
    save_algorithm(Algorithm("broken", a.collective, a.transfers[:1]), algo)
    out = cli("bench", str(algo), "--np", "2", "--sizes", "4K", "--iters", "1", "--check", "--json")
    assert out.returncode == 1
    assert all(r["wrong"] > 0 and r["busbw"] is None for r in json.loads(out.stdout)["rows"])


def test_bench_bad_input_is_one_line_exit_2(tmp_path, cli):
    algo = tmp_path / "ring.json"
    save_algorithm(ring_allgather(2), algo)
    for args, field in ((["--np", "3"], "--np"), (["--sizes", "1Q"], "--sizes"),
                        (["--runner", "sim"], "--hardware"), (["--launcher", "no-such-launcher"], "--launcher")):
        out = cli("bench", str(algo), *args)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and field in out.stderr, (args, out.stderr)


def test_synthesized_algorithms_move_correct_data_on_real_ranks(profiles):
    """Greedy and MILP (HiGHS) algorithms for the four collectives, 2 nodes x 2 GPUs: 4 ranks (the MILP
    engine keeps the faster of its own schedule and greedy's; here RS and A2A are its own)."""
    from autotaccl.synth.pipeline import SynthOptions, synthesize

    graph = build_topology(load_hardware(profiles / "pair.yaml"), 2)
    algorithms = []
    for engine in ("greedy", "milp"):
        for coll in ("allgather", "reducescatter", "allreduce", "alltoall"):
            a = synthesize(graph, coll, options=SynthOptions(engine=engine, solver="highs", time_limit=20)).algorithm
            algorithms.append(Algorithm(f"{engine}-{coll}", a.collective, a.transfers))
    frames = measure_many(algorithms, [24576, 1 << 20], MpiOptions(iters=1, warmup=0, check=True, timeout=180))
    for a, df in zip(algorithms, frames):
        assert len(df) == 4, a.name                     # 2 sizes x out-of-place and in-place
        assert (df["wrong"] == 0).all(), (a.name, df)
