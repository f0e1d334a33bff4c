"""Rank side of link profiling: ping-pong between every pair of ranks, one pair at a time.

For each pair ``(a, b)`` and size, ``a`` sends to ``b`` and ``b`` sends back, ``iters`` times; the
one-way time is half the fastest round trip (a round trip that lost its core to another process only
ever takes longer, so the minimum rejects that noise). Ranks not in the current pair wait in a sleeping barrier, so they leave the CPUs to the
pair when ranks share cores.
"""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from .progress import Heartbeat


def _sleeping_barrier(comm: MPI.Comm) -> None:
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.0005)


def one_way_us(comm: MPI.Comm, a: int, b: int, buf: np.ndarray, iters: int, warmup: int) -> float:
    """Half the fastest of ``iters`` timed round trips of ``buf`` between ranks ``a`` and ``b`` (µs; call on both).

    The minimum, not the mean or median: on shared cores noise only adds time, so the fastest round
    trip is the best estimate of what the link itself costs.
    """
    rank = comm.Get_rank()
    peer = b if rank == a else a
    msg = [buf, MPI.BYTE]
    samples = []
    for i in range(warmup + iters):
        start = MPI.Wtime()
        if rank == a:
            comm.Send(msg, peer, 7)
            comm.Recv(msg, peer, 7)
        else:
            comm.Recv(msg, peer, 7)
            comm.Send(msg, peer, 7)
        if i >= warmup:
            samples.append(MPI.Wtime() - start)
    return float(np.min(samples)) / 2 * 1e6


def pingpong(comm: MPI.Comm, task: dict, beat: Heartbeat) -> dict:
    """``task``: sizes, iters, warmup, pairs (list of [a, b]). Returns hosts and times per pair."""
    rank = comm.Get_rank()
    hosts = comm.allgather(MPI.Get_processor_name())
    buf = np.zeros(max(task["sizes"]), np.uint8)
    out = []
    for a, b in task["pairs"]:
        beat.phase = f"ping-pong between ranks {a} and {b}"
        times = []
        if rank in (a, b):
            for size in task["sizes"]:
                beat.detail = lambda size=size: f"{size}-byte messages with rank {b if rank == a else a}"
                times.append(one_way_us(comm, a, b, buf[:size], task["iters"], task["warmup"]))
            beat.detail = None
        _sleeping_barrier(comm)
        times = comm.bcast(times, root=a)
        out.append({"a": a, "b": b, "sizes": task["sizes"], "times_us": times})
    return {"hosts": hosts, "pairs": out}
