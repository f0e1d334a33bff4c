"""Alpha-beta, event-driven simulation of an :class:`~autotaccl.model.algorithm.Algorithm` on a topology graph.

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

from .model.algorithm import Algorithm
from .model.dependencies import transfer_dependencies

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
    """What does not depend on the size: dependencies, resources, per-transfer alpha and bandwidth.

    ``groups`` and ``bundles`` only serve the scheduler's bookkeeping (see :func:`_schedule`).
    """
    deps: tuple[int, ...]                  # number of dependencies of each transfer
    dependents: tuple[tuple[int, ...], ...]
    resources: tuple[tuple[int, ...], ...]  # resource ids held by each transfer, most contended first
    alpha_us: tuple[float, ...]
    chunks: tuple[int, ...]                 # chunks moved by each transfer
    bandwidth: tuple[float, ...]            # bytes per µs
    num_resources: int
    groups: tuple[int, ...]                 # transfers holding the same set of resources share a group
    num_groups: int
    bundles: tuple[tuple[int, ...], ...]    # per transfer: the bundle it waits in if resource j is busy
    pairs: tuple[tuple[int, int], ...]      # per bundle: (the busy resource, the partner); (y, y) if alone


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


# the dependencies of one transfer list, shared by simulate() calls on the same algorithm at several sizes
_dependencies = lru_cache(maxsize=64)(transfer_dependencies)


def _plan(algorithm: Algorithm, graph: nx.DiGraph) -> _Plan:
    transfers = algorithm.transfers
    deps = _dependencies(transfers)
    dependents: list[list[int]] = [[] for _ in transfers]
    for i, ds in enumerate(deps):
        for d in ds:
            dependents[d].append(i)
    ids: dict[tuple, int] = {}
    group_ids: dict[frozenset, int] = {}
    edges: dict[tuple[int, int], tuple[int, float, float]] = {}   # (src, dst) -> group, alpha, bytes/µs
    for i, t in enumerate(transfers):
        if (t.src, t.dst) not in edges:
            if not graph.has_edge(t.src, t.dst):
                raise ValueError(f"transfer {i}: no link from rank {t.src} to rank {t.dst} in {graph.graph.get('name')}")
            edge = graph.edges[t.src, t.dst]
            if not edge["resources"]:
                raise ValueError(f"transfer {i}: the link from rank {t.src} to rank {t.dst} holds no resources")
            held = frozenset(ids.setdefault(arc, len(ids)) for arc in edge["resources"])
            edges[t.src, t.dst] = (group_ids.setdefault(held, len(group_ids)), float(edge["alpha_us"]),
                                   float(edge["bandwidth_GBps"]) * 1e3)
    groups, alphas, bws = zip(*(edges[t.src, t.dst] for t in transfers))
    users = [0] * len(ids)                  # how many groups use each resource
    for held in group_ids:
        for x in held:
            users[x] -= 1
    rank = sorted(range(len(ids)), key=users.__getitem__)   # most contended first
    position = [0] * len(ids)
    for j, x in enumerate(rank):
        position[x] = j
    # per group: its resources, most contended first, and the bundle it waits in when resource j is
    # busy: that of the busy resource and the group's most contended other resource
    pair_ids: dict[tuple[int, int], int] = {}
    group_resources, group_bundles = [], []
    for held in group_ids:
        r = sorted(held, key=position.__getitem__)
        top = r[0]
        bundle = [pair_ids.setdefault((top, r[1] if len(r) > 1 else top), len(pair_ids))]
        for y in r[1:]:
            bundle.append(pair_ids.setdefault((y, top), len(pair_ids)))
        group_resources.append(tuple(r))
        group_bundles.append(tuple(bundle))
    return _Plan(tuple(len(d) for d in deps), tuple(map(tuple, dependents)),
                 tuple(group_resources[g] for g in groups), alphas, tuple(len(t.chunks) for t in transfers), bws,
                 len(ids), groups, len(group_ids), tuple(group_bundles[g] for g in groups), tuple(pair_ids))


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


_IDLE, _CANDIDATE, _RUNNING = -3, -2, -1   # where a group is when in no bundle (bundle ids are >= 0)


def _schedule(plan: _Plan, duration: list[float], k: int) -> float:
    """Makespan of ``k`` rounds of the plan under greedy, priority-ordered list scheduling.

    Instance ``r * n + i`` is transfer ``i`` of round ``r``; its id is also its priority. Semantics:
    whenever transfers finish, every waiting instance whose data is ready is considered in priority
    order and starts if all its resources are free. The loop below computes exactly that while
    looking at few waiting instances per event:

    * group: the instances whose transfers hold the same resource set. Only a group's best ready
      instance (its *head*) can start next; if it cannot, none of the group can, and once it starts
      the rest must wait for it (the group is _RUNNING, and a candidate again when it finishes). So
      waiting is tracked per group, never per instance.
    * bundle: blocked groups that all hold a pair of resources ``(y, z)``, ``y`` busy (a group
      blocked by ``y`` joins the bundle of ``y`` and its most contended other resource; a
      one-resource group waits in ``(y, y)``). A bundle is parked on one busy resource of its pair
      and moves as a whole when that frees while the other is busy: with many rounds waiting for
      two contended NICs this is one move where single groups would be re-parked by the hundred.
    * parking: each resource keeps a heap of the bundles parked on it, keyed by their best head.
    * an event: the resources that just freed are *waking*. The loop repeatedly takes the best of
      (a) the candidate groups (new heads, groups whose instance finished) and (b) the top bundles
      of the waking resources, so everything is considered in priority order. A bundle whose
      partner is busy moves there; otherwise its best group starts if all its resources are free
      and is re-parked if not. A resource stops waking when it is taken or has nothing parked.

    Heap entries are lazy: an entry is stale (and skipped) once its group or bundle has moved or its
    best head changed; every change pushes a fresh entry. Parking entries are ``head * B + bundle``
    (B bundles), waking entries ``key * R + resource`` (R resources).
    """
    n = len(duration)
    resources, dependents, group, bundles, pairs = plan.resources, plan.dependents, plan.groups, plan.bundles, plan.pairs
    heappush, heappop = heapq.heappush, heapq.heappop
    nb, nr = len(pairs), plan.num_resources
    pending = list(plan.deps) * k            # unfinished dependencies per instance
    busy = [False] * nr
    ready: list[list[int]] = [[] for _ in range(plan.num_groups)]     # heap of ready instances per group
    where = [_IDLE] * plan.num_groups        # _IDLE, _CANDIDATE, _RUNNING or the bundle holding it
    members: list[list[int]] = [[] for _ in range(nb)]   # per bundle: heap of the heads of its groups
    loc = [-1] * nb                          # per bundle: the resource it is parked on (-1: empty)
    parked: list[list[int]] = [[] for _ in range(nr)]    # per resource: heap of head * nb + bundle
    candidates: list[int] = []               # heap of group heads to consider at this event
    waking: list[int] = []                   # heap of key * nr + resource freed at this event
    running: list[tuple[float, int]] = []    # heap of (finish time, instance)
    now = 0.0

    def best(b: int) -> int:
        """The best head in bundle ``b`` (-1 if empty), dropping stale entries."""
        heap = members[b]
        while heap:
            job = heap[0]
            g = group[job % n]
            if where[g] == b and ready[g][0] == job:
                return job
            heappop(heap)
        return -1

    def wake(x: int, key: int) -> int:
        """One step of the waking resource ``x`` whose best parked entry had key ``key``: move its top
        bundle if the partner is busy, or take the bundle's best group out and return its head, to be
        considered now (-1 if none). ``x`` keeps waking while it is free and has bundles parked."""
        lot = parked[x]
        if busy[x] or not lot:
            return -1                        # taken, or nothing left: x stops waking
        top, b = divmod(lot[0], nb)
        if top == key:                       # (else the top changed: wake x again at the right key)
            heappop(lot)
            if loc[b] == x and best(b) == top:                    # else a stale entry
                y, z = pairs[b]
                other = z if y == x else y
                if busy[other]:              # the whole bundle stays blocked
                    loc[b] = other
                    heappush(parked[other], top * nb + b)
                else:
                    heappop(members[b])
                    where[group[top % n]] = _CANDIDATE
                    nxt = best(b) if members[b] else -1
                    if nxt < 0:
                        loc[b] = -1
                    else:
                        heappush(lot, nxt * nb + b)
                    return top               # (the caller wakes x again if it stays free)
        if lot:
            heappush(waking, lot[0] // nb * nr + x)
        return -1

    for r in range(k):                       # increasing ids: every list is a heap
        for i in range(n):
            if not plan.deps[i]:
                job, g = r * n + i, group[i]
                if not ready[g]:
                    where[g] = _CANDIDATE
                    candidates.append(job)
                ready[g].append(job)
    while True:
        # consider candidates and the waking resources' bundles, best first
        while candidates or waking:
            if waking and (not candidates or waking[0] < candidates[0] * nr):
                key, x = divmod(heappop(waking), nr)
                job = wake(x, key)
                if job < 0:
                    continue
                i = job % n
                g = group[i]
            else:
                job, x = heappop(candidates), -1
                i = job % n
                g = group[i]
                if where[g] != _CANDIDATE or ready[g][0] != job:
                    continue                 # stale entry
            # start the head job of its group if all its resources are free, else park the group
            held = resources[i]
            for y in held:
                if busy[y]:
                    b = bundles[i][held.index(y)]
                    # the bundle's best is read before g joins, else an old entry of g could look valid
                    old = best(b) if members[b] else -1
                    where[g] = b
                    heappush(members[b], job)
                    if old < 0:              # an empty bundle is parked on its busy resource y
                        loc[b] = y
                        heappush(parked[y], job * nb + b)
                    elif job < old:
                        heappush(parked[loc[b]], job * nb + b)
                    break
            else:
                heappop(ready[g])
                for y in held:
                    busy[y] = True
                heappush(running, (now + duration[i], job))
                where[g] = _RUNNING
            if x >= 0 and not busy[x] and parked[x]:
                heappush(waking, parked[x][0] // nb * nr + x)
        if not running:
            break
        # finish everything that ends at the next event time
        now = running[0][0]
        freed = []
        while running and running[0][0] == now:
            _, job = heappop(running)
            i, base = job % n, job - job % n
            freed += resources[i]
            for x in resources[i]:
                busy[x] = False
            g = group[i]
            if ready[g]:
                where[g] = _CANDIDATE
                heappush(candidates, ready[g][0])
            else:
                where[g] = _IDLE
            for d in dependents[i]:
                inst = base + d
                pending[inst] -= 1
                if not pending[inst]:        # ready: a new head is announced where its group is
                    g = group[d]
                    heappush(ready[g], inst)
                    if ready[g][0] == inst:
                        b = where[g]
                        if b >= 0:           # (the bundle is not empty: it holds g)
                            heappush(members[b], inst)
                            heappush(parked[loc[b]], inst * nb + b)
                        elif b != _RUNNING:
                            where[g] = _CANDIDATE
                            heappush(candidates, inst)
        for x in freed:
            if parked[x]:
                heappush(waking, parked[x][0] // nb * nr + x)
    if any(pending) or any(ready):
        raise RuntimeError("simulation stalled with transfers still waiting")  # cannot happen: deps point backwards
    return now
