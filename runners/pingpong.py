"""Rank side of link profiling: ping-pong between every pair of ranks, one pair at a time.

For each pair ``(a, b)`` and size, ``a`` sends to ``b`` and ``b`` sends back, ``iters`` times; the
one-way time is half the fastest round trip (a round trip that lost its core to another process only
ever takes longer, so the minimum rejects that noise). The round trips of a size are spread over
``ROUNDS`` passes through the sweep, so a slow spell of a second or two cannot own all of one size,
and small sizes get as many round trips as fit in ``MIN_SECONDS`` per pass (a 1 KiB round trip takes
microseconds: a handful of them is a poor sample of the fastest). Ranks not in the current pair wait in
a sleeping barrier, so they leave the CPUs to the pair when ranks share cores.
"""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from runners.progress import Heartbeat

ROUNDS = 3
MIN_SECONDS = 0.002      # per size and pass, at least this long of timed round trips ...
MAX_ITERS = 2000         # ... but no more than this many


def _sleeping_barrier(comm: MPI.Comm) -> None:
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.0005)


def one_way_us(comm: MPI.Comm, a: int, b: int, buf: np.ndarray, iters: int, warmup: int) -> float:
    """Half the fastest of at least ``iters`` timed round trips of ``buf`` between ranks ``a`` and ``b``
    (µs; call on both): rank ``a`` times the ``warmup`` round trips and asks for as many more as fill
    ``MIN_SECONDS`` (at most ``MAX_ITERS``).

    The minimum, not the mean or median: on shared cores noise only adds time, so the fastest round
    trip is the best estimate of what the link itself costs.
    """
    rank = comm.Get_rank()
    peer = b if rank == a else a
    msg = [buf, MPI.BYTE]

    def round_trip() -> float:
        start = MPI.Wtime()
        if rank == a:
            comm.Send(msg, peer, 7)
            comm.Recv(msg, peer, 7)
        else:
            comm.Recv(msg, peer, 7)
            comm.Send(msg, peer, 7)
        return MPI.Wtime() - start

    warmup = max(warmup, 1)
    per_trip = max(sum(round_trip() for _ in range(warmup)) / warmup, 1e-9)
    count = np.array([max(iters, min(MAX_ITERS, int(MIN_SECONDS / per_trip)))], np.int64)
    if rank == a:
        comm.Send(count, peer, 8)
    else:
        comm.Recv(count, peer, 8)
    return min(round_trip() for _ in range(int(count[0]))) / 2 * 1e6


def pingpong(comm: MPI.Comm, task: dict, beat: Heartbeat) -> dict:
    """``task``: sizes, iters, warmup, pairs (list of [a, b]). Returns hosts and times per pair."""
    rank = comm.Get_rank()
    hosts = comm.allgather(MPI.Get_processor_name())
    buf = np.zeros(max(task["sizes"]), np.uint8)
    out = []
    for a, b in task["pairs"]:
        beat.phase = f"ping-pong between ranks {a} and {b}"
        times = [float("inf")] * len(task["sizes"])
        if rank in (a, b):
            per_round = -(-task["iters"] // ROUNDS)
            for round_ in range(ROUNDS):
                for k, size in enumerate(task["sizes"]):
                    beat.detail = lambda size=size: f"{size}-byte messages with rank {b if rank == a else a}"
                    warmup = task["warmup"] if round_ == 0 else 1
                    times[k] = min(times[k], one_way_us(comm, a, b, buf[:size], per_round, warmup))
            beat.detail = None
        _sleeping_barrier(comm)
        times = comm.bcast(times, root=a)
        out.append({"a": a, "b": b, "sizes": task["sizes"], "times_us": times})
    return {"hosts": hosts, "pairs": out}
