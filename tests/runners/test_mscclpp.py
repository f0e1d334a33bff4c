"""The ``mscclpp`` runner on a machine without GPUs: registered like the others, refusing in one line
what it cannot run here, the command it would launch, the rows it makes of the ranks' output, and the
plan tuning would give it. The ranks' job itself needs GPUs and MSCCL++: ``launch.run`` is replaced by a
stand-in for that GPU job (it writes rows as rank 0 of ``runners.mscclpp_rank`` would)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from autotaccl.baselines import baseline
from autotaccl.cli import main
from autotaccl.errors import InputError
from autotaccl.formats.mscclpp import PlanOptions, check_plan, lower_plan, parse_plan, plan_text
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.tuning.lowered import lower_trial_plan, lowering

import runners.mscclpp_plan as mp
from runners import MSCCLPP_PLAN, build_options, get_runner
from runners.launch import Outcome
from runners.mscclpp_rank import counts, expected, pattern

GRAPH = build_topology(load_hardware("ndv2"), 2)


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "ag.inplace.plan.json"
    path.write_text(plan_text(lower_plan(baseline(GRAPH, "allgather", "ring"), GRAPH, PlanOptions(inplace=True))))
    return path


def test_registered_as_a_runner_of_plan_files():
    runner = get_runner("mscclpp")
    assert isinstance(runner, mp.MscclppRunner) and runner.real_hardware
    assert runner.runtime_file == MSCCLPP_PLAN and MSCCLPP_PLAN.suffix == ".plan.json"


@pytest.mark.skipif(importlib.util.find_spec("mscclpp") is not None, reason="this machine has mscclpp installed")
def test_without_mscclpp_bench_refuses_in_one_line(plan_file, capsys):
    assert main(["bench", str(plan_file), "--runner", "mscclpp", "--np", "16", "--sizes", "1K:1M"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the Python package mscclpp" in err[0]


def test_without_a_gpu_it_names_the_gpu(tmp_path, monkeypatch):
    """Importable stand-ins for the mscclpp and cupy packages (they need GPUs to build): what is still
    missing is the GPU."""
    for name in ("mscclpp", "cupy"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(mp, "GPU_DEVICES", (str(tmp_path / "no-such-device"),))
    assert mp.missing().startswith("a GPU")
    monkeypatch.setattr(mp, "GPU_DEVICES", (str(tmp_path / "mscclpp"),))
    assert mp.missing() is None


def test_bad_options_name_their_flag(plan_file):
    runner = get_runner("mscclpp")
    with pytest.raises(InputError) as err:
        build_options(runner, {})
    assert err.value.source == "--np"
    with pytest.raises(InputError) as err:
        build_options(runner, {"np": 16, "offset": 8})
    assert err.value.source == "--offset"
    for flag, value in (("dtype", "float64"), ("op", "max")):      # the executor has no float64; plans sum
        with pytest.raises(InputError) as err:
            build_options(runner, {"np": 16, flag: value})
        assert err.value.source == f"--{flag}"
    with pytest.raises(InputError) as err:
        runner.measure(plan_file, [1024], build_options(runner, {"np": 8}))
    assert err.value.source == "--np" and "16 ranks" in str(err.value)


def test_the_command_it_would_run(plan_file):
    options = build_options(get_runner("mscclpp"), {"np": 16, "iters": 7, "offset": 256, "check": True})
    argv = mp.rank_command(options, plan_file, [1024, 1 << 20], Path("/x/rows.json"))
    assert argv[1:3] == ["-n", "16"] and argv[0].endswith("mpiexec")
    assert argv[3:6] == [options.python, "-m", "runners.mscclpp_rank"] and argv[6] == str(plan_file)
    assert argv[argv.index("--sizes") + 1] == "1024,1048576" and argv[argv.index("--iters") + 1] == "7"
    assert argv[argv.index("--offset") + 1] == "256" and argv[-1] == "--check"
    whole = build_options(get_runner("mscclpp"), {"launcher": "srun -n 16 --gpus-per-task 1", "check": False})
    argv = mp.rank_command(whole, plan_file, [1024], Path("/x/rows.json"))
    assert argv[:5] == ["srun", "-n", "16", "--gpus-per-task", "1"] and "--check" not in argv


def test_measure_turns_the_ranks_rows_into_nccl_tests_columns(plan_file, tmp_path, monkeypatch):
    """``launch.run`` replaced by a stand-in for the GPU job: it checks the command and writes rank 0's
    rows; one size has wrong elements."""
    seen = {}

    def job(argv, workdir, timeout, **kwargs):
        seen["argv"] = argv
        out = Path(argv[argv.index("--out") + 1])
        out.write_text(json.dumps([{"size": 1024, "count": 256, "time_us": 10.0, "wrong": 0},
                                   {"size": 1 << 20, "count": 1 << 18, "time_us": 200.0, "wrong": 3}]))
        return Outcome(0, "", "", 1.0, False)

    monkeypatch.setattr(mp, "missing", lambda: None)
    monkeypatch.setattr(mp.launch, "run", job)
    options = build_options(get_runner("mscclpp"), {"np": 16, "check": True, "workdir": str(tmp_path)})
    df = get_runner("mscclpp").measure(plan_file, [1024, 1 << 20], options)
    assert list(df["size"]) == [1024, 1 << 20] and df["inplace"].all()      # the plan's own mode
    assert df.loc[0, "algbw"] == pytest.approx(1024 / 10.0 / 1e3)
    assert df.loc[0, "busbw"] == pytest.approx(df.loc[0, "algbw"] * 15 / 16)
    assert list(df["wrong"]) == [0.0, 3.0] and np.isnan(df.loc[1, "time_us"])
    assert "--check" in seen["argv"]


def test_failed_job_is_a_job_error(plan_file, monkeypatch):
    from runners.launch import JobError

    monkeypatch.setattr(mp, "missing", lambda: None)
    monkeypatch.setattr(mp.launch, "run", lambda argv, workdir, timeout, **kw: Outcome(1, "", "cuda error", 1.0, False))
    with pytest.raises(JobError, match="cuda error"):
        get_runner("mscclpp").measure(plan_file, [1024], build_options(get_runner("mscclpp"), {"np": 16}))


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce", "alltoall", "broadcast"])
def test_the_ranks_check_expects_the_collectives_result(collective):
    """The rank program's expected output, against the collective's definition on 4 ranks' patterns."""
    R, size = 4, 4 * 4 * 8
    n_in, n_out = counts(collective, size, 4, R)
    ins = [pattern(np, n_in, q, np.float32) for q in range(R)]
    for r in range(R):
        got = expected(np, collective, r, R, n_in, n_out, np.float32, root=2)
        want = {"allgather": np.concatenate(ins), "allreduce": np.sum(ins, axis=0),
                "reducescatter": np.sum(ins, axis=0)[r * n_out:(r + 1) * n_out],
                "alltoall": np.concatenate([ins[b].reshape(R, -1)[r] for b in range(R)]),
                "broadcast": ins[2]}[collective]
        assert got.shape == (n_out,) and np.array_equal(got, want)
    assert len({pattern(np, 8, q, np.float32).tobytes() for q in range(R)}) == R     # ranks tell apart


def test_tune_lowers_a_trial_to_a_checked_plan():
    assert lowering(get_runner("mscclpp")) is lower_trial_plan
    text = lower_trial_plan(baseline(GRAPH, "allgather", "ring"), "LL128", 1)
    plan = parse_plan(json.loads(text), "<trial>")
    assert plan.protocol == "Simple" and not plan.inplace and check_plan(plan, offsets=True).valid
