"""The mpi runner with real mpiexec and real ranks (4 ranks oversubscribed on this machine)."""
from __future__ import annotations

import math
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from autotaccl.errors import InputError
from autotaccl.model.algorithm import Algorithm, Transfer, verify
from autotaccl.model.collectives import Collective
from runners import get_runner
from runners.launch import JobError, JobTimeout, Outcome, alive
from runners.mpi import MpiOptions, explain, measure_many
from runners.program import compile_rank
from runners.progress import read_heartbeats

pytestmark = pytest.mark.mpi

R = 4


def ring_allgather(k: int = 1) -> Algorithm:
    """Each transfer moves a rank's whole block of k chunks one hop around the ring."""
    ts = [Transfer(tuple(range(((r - s) % R) * k, ((r - s) % R) * k + k)), r, (r + 1) % R, s)
          for s in range(R - 1) for r in range(R)]
    return Algorithm(f"ring-ag-k{k}", Collective("allgather", R, k), tuple(ts))


def gather_scatter_allgather() -> Algorithm:
    """Everyone sends to rank 0, which sends each rank all others' chunks at once (non-adjacent slots)."""
    ts = [Transfer((r,), r, 0, 0) for r in range(1, R)]
    ts += [Transfer(tuple(c for c in range(R) if c != r), 0, r, 1) for r in range(1, R)]
    return Algorithm("gather-scatter-ag", Collective("allgather", R), tuple(ts))


def ring_reducescatter() -> tuple[Transfer, ...]:
    return tuple(Transfer(((r - s - 1) % R,), r, (r + 1) % R, s, "reduce") for s in range(R - 1) for r in range(R))


def ring_allreduce() -> Algorithm:
    ag = [Transfer(((r - s) % R,), r, (r + 1) % R, R - 1 + s) for s in range(R - 1) for r in range(R)]
    return Algorithm("ring-ar", Collective("allreduce", R), ring_reducescatter() + tuple(ag))


def direct_alltoall() -> Algorithm:
    ts = [Transfer((r * R + (r + s) % R,), r, (r + s) % R, s - 1) for s in range(1, R) for r in range(R)]
    return Algorithm("direct-a2a", Collective("alltoall", R), tuple(ts))


def chain_broadcast() -> Algorithm:
    ts = [Transfer((0, 1), r, r + 1, r) for r in range(R - 1)]
    return Algorithm("chain-bcast", Collective("broadcast", R, 2), tuple(ts))


ALGORITHMS = [ring_allgather(), ring_allgather(2), gather_scatter_allgather(),
              Algorithm("ring-rs", Collective("reducescatter", R), ring_reducescatter()),
              ring_allreduce(), direct_alltoall(), chain_broadcast()]


def corrupted() -> list[Algorithm]:
    """Two broken algorithms: a ring AllGather missing one hop, a ring AllReduce copying where it must add."""
    ag = ring_allgather()
    ar = ring_allreduce()
    bad_ar = tuple(Transfer(t.chunks, t.src, t.dst, t.step, "copy") if i == 5 else t for i, t in enumerate(ar.transfers))
    return [Algorithm("ag-missing-hop", ag.collective, ag.transfers[:-1]),
            Algorithm("ar-copy-not-add", ar.collective, bad_ar)]


@pytest.fixture(scope="module")
def job():
    """One MPI job: every hand-built algorithm, two broken ones and MPI's own collectives."""
    for a in ALGORITHMS:
        verify(a)
    baselines = [Collective(n, R) for n in ("allgather", "reducescatter", "allreduce", "alltoall")]
    items = ALGORITHMS + corrupted() + baselines
    frames = measure_many(items, [4096, 65536], MpiOptions(iters=3, warmup=1, check=True, timeout=120))
    return dict(zip([getattr(i, "name", None) if isinstance(i, Algorithm) else f"mpi-{i.name}" for i in items], frames))


@pytest.mark.parametrize("name", [a.name for a in ALGORITHMS])
def test_every_collective_moves_correct_data_in_both_modes(job, name):
    df = job[name]
    assert sorted(df["inplace"].unique()) == [False, True]
    assert len(df) == 4
    assert (df["wrong"] == 0).all(), df
    assert (df["time_us"] > 0).all()


@pytest.mark.parametrize("name", [a.name for a in ALGORITHMS] + ["mpi-allgather", "mpi-reducescatter",
                                                                  "mpi-allreduce", "mpi-alltoall"])
def test_busbw_over_algbw_is_the_nccl_tests_factor(job, name):
    df = job[name]
    coll = next((a.collective for a in ALGORITHMS if a.name == name), None)
    factor = {"allreduce": 2 * (R - 1) / R, "broadcast": 1.0}.get(coll.name if coll else name[4:], (R - 1) / R)
    assert (df["busbw"] / df["algbw"]).sub(factor).abs().max() < 1e-12
    assert (df["algbw"] - df["size"] / df["time_us"] / 1e3).abs().max() < 1e-9


def test_mpi_builtins_are_checked_too(job):
    for name in ("mpi-allgather", "mpi-reducescatter", "mpi-allreduce", "mpi-alltoall"):
        assert (job[name]["wrong"] == 0).all(), name


def test_nccl_tests_sizes_and_counts(job):
    ag, ar, a2a = job["ring-ag-k1"], job["ring-ar"], job["direct-a2a"]
    assert list(ag["size"].unique()) == [4096, 65536]
    assert list(ag["count"].unique()) == [4096 // 4 // R, 65536 // 4 // R]      # per-rank count
    assert list(ar["count"].unique()) == [4096 // 4, 65536 // 4]                # whole buffer
    assert list(a2a["count"].unique()) == [4096 // 4 // R, 65536 // 4 // R]     # per peer
    assert set(ar["redop"]) == {"sum"} and set(ag["redop"]) == {"none"} and set(ag["type"]) == {"float"}


@pytest.mark.parametrize("name", ["ag-missing-hop", "ar-copy-not-add"])
def test_a_wrong_algorithm_is_reported_as_wrong_never_as_a_speed(job, name):
    df = job[name]
    assert (df["wrong"] > 0).all(), df
    assert df["time_us"].isna().all() and df["busbw"].isna().all()


def test_missing_hop_counts_exactly_the_missing_elements(job):
    # The last ring hop delivers one chunk (1/R of the output) to one rank.
    df = job["ag-missing-hop"]
    assert list(df["wrong"]) == [s // 4 // R for s in df["size"]]


def test_inplace_alltoall_waits_before_overwriting_live_input():
    """In-place, rank r's slot d holds its input for d until sent; a receive into it must go elsewhere first."""
    a = Algorithm("early-recv", Collective("alltoall", 2), (Transfer((2,), 1, 0, 0), Transfer((1,), 0, 1, 1)))
    verify(a)
    program = compile_rank(a, 0, inplace=True)
    recv = next(op for op in program.ops if op.kind == "recv")
    assert recv.writes == (("scratch", 0),)
    assert program.final_copies == ((("scratch", 0), ("out", 1)),)
    df = get_runner("mpi").measure(a, [1024], MpiOptions(iters=1, warmup=0, timeout=60))
    assert (df["wrong"] == 0).all()


def test_wrong_np_is_bad_input():
    with pytest.raises(InputError, match="--np"):
        get_runner("mpi").measure(ring_allgather(), [1024], MpiOptions(np=3))


def _launch_in_thread(tmp_path: Path, timeout: float):
    """A long job (it would run for minutes) in a thread; returns (thread, outcome dict)."""
    outcome: dict = {}

    def target():
        start = time.monotonic()
        try:
            options = MpiOptions(iters=10 ** 6, warmup=0, check=False, timeout=timeout, workdir=str(tmp_path))
            measure_many([ring_allgather()], [1 << 16], options, inplace=(False,))
        except JobError as err:
            outcome["error"] = err
        outcome["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=target)
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        beats = read_heartbeats(tmp_path)
        if len(beats) == R and all("timed" in b["phase"] for b in beats.values()):
            return thread, outcome, beats
        time.sleep(0.1)
    thread.join()
    pytest.fail(f"the job never reached its timed loop: {outcome}")


def _no_rank_survives(beats: dict) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(b["pid"]) for b in beats.values()):
        time.sleep(0.1)
    assert not [b["pid"] for b in beats.values() if alive(b["pid"])]


def test_a_killed_rank_ends_the_job_and_is_named(tmp_path):
    thread, outcome, beats = _launch_in_thread(tmp_path, timeout=30)
    os.kill(beats[2]["pid"], signal.SIGKILL)
    thread.join(40)
    assert not thread.is_alive()
    err = outcome["error"]
    assert not isinstance(err, JobTimeout)
    assert outcome["seconds"] < 30
    assert f"rank 2 (pid {beats[2]['pid']} on {beats[2]['host']}) died first" in str(err), str(err)
    _no_rank_survives(beats)


def test_a_hung_rank_is_killed_at_the_timeout_and_named(tmp_path):
    timeout = 10.0  # a loaded machine may take 6 s to reach the timed loop; rank 1 must be silent a while
    thread, outcome, beats = _launch_in_thread(tmp_path, timeout=timeout)
    os.kill(beats[1]["pid"], signal.SIGSTOP)  # a rank that stops answering, as a hung GPU kernel would
    thread.join(timeout + 20)
    assert not thread.is_alive()
    err = outcome["error"]
    assert isinstance(err, JobTimeout)
    assert outcome["seconds"] < timeout + 10
    text = str(err)
    assert "rank 1" in text and "silent" in text
    # its neighbour waits on it: rank 2 receives rank 1's chunks in the ring
    assert re.search(r"rank 2 \(pid \d+ on \S+\) waiting for chunk \d+ from rank 1 at step \d+", text), text
    _no_rank_survives(beats)
    assert math.isfinite(outcome["seconds"])


def test_a_rank_that_raises_ends_the_job_with_its_error(tmp_path):
    from runners.mpi import JobOptions, run_job
    settings = {"sizes": [1024], "dtype": "float32", "op": "sum", "iters": 1, "warmup": 0, "check": True,
                "modes": [False]}
    start = time.monotonic()
    with pytest.raises(JobError) as info:
        run_job([{"kind": "algorithm", "algorithm": {"format": "not-an-algorithm"}}], JobOptions(2, timeout=60,
                workdir=str(tmp_path)), settings)
    assert time.monotonic() - start < 30
    text = str(info.value)
    assert "raised InputError" in text and "format" in text and not isinstance(info.value, JobTimeout)
    _no_rank_survives(read_heartbeats(tmp_path))


def _beat(rank: int) -> dict:
    return {"rank": rank, "pid": 100 + rank, "host": "h", "phase": "timed iterations", "time": 5.0}


@pytest.mark.parametrize("deaths, first, tied", [
    ({2: 1.0, 0: 1.2, 1: 1.2}, [2], []),                 # noticed apart: the earliest alone is first
    ({1: 1.0, 2: 1.0, 3: 1.4}, [1, 2], [1, 2]),          # noticed in one wake-up: both named, as tied
])
def test_the_first_death_is_named_and_a_tie_is_said_to_be_one(deaths, first, tied):
    killed = Outcome(9, "", "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n", 3.0, False)
    text = explain(killed, {r: _beat(r) for r in range(R)}, 30.0, deaths)
    named = [int(m) for m in re.findall(r"rank (\d) \(pid \d+ on h\) died first \(Killed \(signal 9\)\)", text)]
    assert named == first, text
    assert text.index(f"rank {first[0]} ") < text.index(f"rank {min(set(range(R)) - set(first))} "), text
    assert [int(m) for m in re.findall(r"rank (\d) \(pid \d+ on h\) died first[^;]*tied", text)] == tied, text
