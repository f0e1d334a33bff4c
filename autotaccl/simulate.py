"""Alpha-beta, event-driven simulation of an :class:`~autotaccl.algorithm.Algorithm` on a topology graph.

Model (TACCL's port serialisation):

* A transfer on edge ``(u, v)`` moves ``len(chunks) * chunk_bytes`` bytes and takes
  ``alpha_us + bytes / (bandwidth_GBps * 1e3)`` µs. While it runs it holds *every* capacity-graph arc
  in the edge's ``resources`` exclusively (an NVLink bundle, switch ports, a PCIe hop, a NIC), so two
  transfers that share any arc serialise; the edge bandwidth is already the minimum over those arcs.
* It may start once its data dependencies have finished and all its resources are free. The
  dependencies follow from list order on ``(rank, chunk)``: the last earlier write of every value it
  reads or writes (read-after-write, write-after-write) and every earlier read of a value it overwrites
  since that value was last written (write-after-read). A reduce also reads its destination.
* Greedy list scheduling: whenever something finishes, the waiting transfers whose data is ready start
  in priority order (round, then list order) wherever all their resources are free.

Pipelining: a runtime never moves a large buffer in one piece. NCCL and MSCCL (Simple protocol) split
each chunk into slices of roughly 512 KiB-1 MiB per step and keep several steps in flight, so later
slices fill the pipeline while earlier ones are still travelling. We model that with rounds of at most
``ROUND_BYTES`` = 1 MiB per chunk: if a chunk is larger, the algorithm runs in
``k = min(ceil(chunk_bytes / ROUND_BYTES), MAX_ROUNDS)`` rounds over slices of ``chunk_bytes / k``.
Each round is an independent copy of the transfer list; the copies only compete for resources, where
earlier rounds win. Every algorithm (baselines and synthesized ones alike) is simulated this way.

Bandwidths follow nccl-tests (``msccl-xml-and-nccl-tests.md`` §5.4): ``algbw = size / time`` in
decimal GB/s (bytes/µs/1e3) and ``busbw = algbw * collective.busbw_factor``.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

import networkx as nx

from .algorithm import Algorithm, Transfer

ROUND_BYTES = 1 << 20
MAX_ROUNDS = 64


@dataclass(frozen=True)
class SimResult:
    bytes: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float


@dataclass(frozen=True)
class _Plan:
    """What does not depend on the size: dependencies, resources, per-transfer alpha and bandwidth."""
    deps: tuple[int, ...]                  # number of dependencies of each transfer
    dependents: tuple[tuple[int, ...], ...]
    resources: tuple[tuple[int, ...], ...]  # resource ids held by each transfer
    alpha_us: tuple[float, ...]
    chunks: tuple[int, ...]                 # chunks moved by each transfer
    bandwidth: tuple[float, ...]            # bytes per µs
    num_resources: int


def rounds(chunk_bytes: float) -> int:
    """How many pipelined rounds a chunk of ``chunk_bytes`` is split into."""
    return max(1, min(math.ceil(chunk_bytes / ROUND_BYTES), MAX_ROUNDS))


def simulate(algorithm: Algorithm, graph: nx.DiGraph, size: int) -> SimResult:
    """Simulated time and nccl-tests bandwidths of ``algorithm`` on ``graph`` at nccl-tests size ``size``."""
    return _run(_plan(algorithm, graph), algorithm, size)


def simulate_sizes(algorithm: Algorithm, graph: nx.DiGraph, sizes: Iterable[int]) -> list[SimResult]:
    plan = _plan(algorithm, graph)
    return [_run(plan, algorithm, size) for size in sizes]


# --------------------------------------------------------------------------- preparation


@lru_cache(maxsize=64)
def _dependencies(transfers: tuple[Transfer, ...]) -> tuple[tuple[int, ...], ...]:
    """For every transfer, the earlier transfers it must wait for (RAW, WAR, WAW on (rank, chunk))."""
    last_write: dict[tuple[int, int], int] = {}
    reads: dict[tuple[int, int], list[int]] = {}
    out = []
    for i, t in enumerate(transfers):
        deps: set[int] = set()
        for c in t.chunks:
            src, dst = (t.src, c), (t.dst, c)
            for value in ((src, dst) if t.op == "reduce" else (src,)):
                if value in last_write:
                    deps.add(last_write[value])
            if dst in last_write:
                deps.add(last_write[dst])
            deps.update(reads.pop(dst, ()))
        for c in t.chunks:
            reads.setdefault((t.src, c), []).append(i)
            if t.op == "reduce":
                reads.setdefault((t.dst, c), []).append(i)
            last_write[(t.dst, c)] = i
        deps.discard(i)
        out.append(tuple(sorted(deps)))
    return tuple(out)


def _plan(algorithm: Algorithm, graph: nx.DiGraph) -> _Plan:
    transfers = algorithm.transfers
    deps = _dependencies(transfers)
    dependents: list[list[int]] = [[] for _ in transfers]
    for i, ds in enumerate(deps):
        for d in ds:
            dependents[d].append(i)
    ids: dict[tuple, int] = {}
    resources, alphas, bws = [], [], []
    for i, t in enumerate(transfers):
        if not graph.has_edge(t.src, t.dst):
            raise ValueError(f"transfer {i}: no link from rank {t.src} to rank {t.dst} in {graph.graph.get('name')}")
        edge = graph.edges[t.src, t.dst]
        resources.append(tuple(ids.setdefault(arc, len(ids)) for arc in edge["resources"]))
        alphas.append(float(edge["alpha_us"]))
        bws.append(float(edge["bandwidth_GBps"]) * 1e3)
    return _Plan(tuple(len(d) for d in deps), tuple(map(tuple, dependents)), tuple(resources), tuple(alphas),
                 tuple(len(t.chunks) for t in transfers), tuple(bws), len(ids))


# --------------------------------------------------------------------------- event loop


def _run(plan: _Plan, algorithm: Algorithm, size: int) -> SimResult:
    collective = algorithm.collective
    n = len(plan.deps)
    if size <= 0 or n == 0:
        raise ValueError("simulate needs a positive size and at least one transfer")
    chunk = collective.chunk_bytes(size)
    k = rounds(chunk)
    piece = chunk / k
    duration = [a + c * piece / bw for a, c, bw in zip(plan.alpha_us, plan.chunks, plan.bandwidth)]
    time_us = _schedule(plan, duration, k)
    algbw = size / time_us / 1e3
    return SimResult(size, time_us, algbw, algbw * collective.busbw_factor)


def _schedule(plan: _Plan, duration: list[float], k: int) -> float:
    """Makespan of ``k`` rounds of the plan under greedy, priority-ordered list scheduling.

    Instance ``r * n + i`` is transfer ``i`` of round ``r``; its id is also its priority. A waiting
    instance is parked on one busy resource and reconsidered only when that resource frees, so each
    event looks at just the instances that might now start.
    """
    n = len(duration)
    resources, dependents = plan.resources, plan.dependents
    pending = list(plan.deps) * k            # unfinished dependencies per instance
    busy = [False] * plan.num_resources
    parked: list[list[int]] = [[] for _ in range(plan.num_resources)]  # heaps of instance ids
    running: list[tuple[float, int]] = []    # heap of (finish time, instance)
    candidates = [r * n + i for r in range(k) for i in range(n) if not plan.deps[i]]  # sorted: a heap
    source: dict[int, int] = {}              # candidate -> the freed resource whose parked heap fed it
    now = 0.0
    while True:
        # start what can start now, best priority first
        while candidates:
            job = heapq.heappop(candidates)
            i = job % n
            held = resources[i]
            for x in held:
                if busy[x]:
                    heapq.heappush(parked[x], job)
                    break
            else:
                for x in held:
                    busy[x] = True
                heapq.heappush(running, (now + duration[i], job))
            fed = source.pop(job, None)
            if fed is not None and not busy[fed] and parked[fed]:
                nxt = heapq.heappop(parked[fed])
                source[nxt] = fed
                heapq.heappush(candidates, nxt)
        if not running:
            break
        # finish everything that ends at the next event time
        now = running[0][0]
        freed = []
        while running and running[0][0] == now:
            _, job = heapq.heappop(running)
            i, base = job % n, job - job % n
            for x in resources[i]:
                busy[x] = False
                freed.append(x)
            for d in dependents[i]:
                pending[base + d] -= 1
                if not pending[base + d]:
                    heapq.heappush(candidates, base + d)
        for x in freed:
            if parked[x] and not busy[x]:
                nxt = heapq.heappop(parked[x])
                source[nxt] = x
                heapq.heappush(candidates, nxt)
    if any(pending):
        raise RuntimeError("simulation stalled with transfers still waiting")  # cannot happen: deps point backwards
    return now
