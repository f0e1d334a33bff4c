"""Stage 3: exact send times and network batching for a fixed routing and order (taccl.md §6, fixed).

The MILP chooses start times after each chunk's arrival, without overlap on each arc's chain of
transfers, batching up to ``batch_window`` consecutive chunks on network links into one transfer (which,
unlike the reference, really share one start and end), minimising the makespan. Stage 2's list schedule
is the MIP start and the big-M bound. Returns an :class:`~autotaccl.model.algorithm.Algorithm` with
``start_us`` set."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from ..milp import Model, SolverOptions, solve
from ..milp.solution import StageReport
from ..model.algorithm import Algorithm, Transfer, renumber_steps, verify
from ..simulate import rounds
from ..sketch.logical import LogicalTopology
from .ordering import Ordering
from .routing import Routing, Send

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScheduleOptions:
    milp: SolverOptions = SolverOptions()
    contiguity: bool = True                 # may batch consecutive chunks on a link into one transfer
    batch_window: int = 6                   # at most this many chunks per batch (TACCL's max_contig)
    batch_kinds: tuple[str, ...] = ("net",)  # link kinds that batch
    serialize_branches: bool = False        # a chunk's sends out of one rank never overlap (combine)
    # weight of the busiest arc's load (alpha saved by batching included) next to the makespan: large
    # buffers run as a pipeline of slices whose time is set by that load, so it is what they pay for
    # None = auto: the number of extra pipeline slices a runtime cuts a chunk of lt.chunk_bytes into
    # (autotaccl.simulate.rounds - 1, at least 1), i.e. how often that load repeats after the first slice
    throughput_weight: float | None = None


@dataclass(frozen=True)
class Schedule:
    algorithm: Algorithm
    makespan: float
    report: StageReport


def schedule(lt: LogicalTopology, routing: Routing, ordering: Ordering,
             options: ScheduleOptions = ScheduleOptions()) -> Schedule:
    """Stage 3: solve the contiguity MILP; returns the algorithm and its planned makespan.

    Large chunks run as a pipeline of ``k = rounds(chunk)`` slices (as runtimes and the simulator do),
    so the model prices one slice (``chunk / k``) and, by default, adds ``k - 1`` times the busiest
    arc's slice load: the makespan of a pipeline is about one slice's makespan plus that.
    """
    began = time.perf_counter()
    sends = list(routing.sends)
    slices = rounds(lt.chunk_bytes)
    weight = float(slices - 1) if options.throughput_weight is None else options.throughput_weight
    sliced = replace(lt, chunk_bytes=lt.chunk_bytes / slices)
    cost = {s: sliced.cost_us(s[1], s[2]) for s in sends}
    alpha = {s: lt.graph.edges[s[1], s[2]]["alpha_us"] for s in sends}
    beta = {s: cost[s] - alpha[s] for s in sends}
    parent = {(c, v): (c, u, v) for c, u, v in sends}
    pairs = _batch_pairs(lt, ordering, options) if options.contiguity and options.batch_window > 1 else []
    branch_pairs = _branch_pairs(sends, ordering) if options.serialize_branches else []
    list_start = timeline(sends, parent, ordering.resource_order, set(), lambda s, k: alpha[s] + k * beta[s],
                          branch_pairs)
    list_span = max((list_start[s] + cost[s] for s in sends), default=0.0)
    # no better solution ends later than the list schedule plus what the throughput term could repay
    alpha_saved = sum(alpha[b] for _, b in pairs)
    horizon = (list_span + max(0.0, weight) * alpha_saved) * (1 + 1e-9) + 1e-6
    batched = {s for p in pairs for s in p}

    m = Model("schedule")
    t_col = {s: m.add_var(0.0, horizon, name="t") for s in sends}
    e_col = {s: m.add_var(0.0, horizon, name="e") for s in sends if s in batched}
    w_col = {s: m.add_var(0.0, horizon, name="w") for s in sends if s in batched}
    z_col = {p: m.add_var(kind="B", name="z") for p in pairs}
    T = m.add_var(0.0, horizon, name="T")

    def end(s: Send) -> tuple[list[int], list[float], float]:
        """``end(s) = cols . coefs + const``."""
        if s in e_col:
            return [e_col[s]], [1.0], 0.0
        return [t_col[s]], [1.0], cost[s]

    def at_least(later: Send, earlier: Send) -> None:
        """t_later >= end(earlier)."""
        cols, coefs, const = end(earlier)
        m.add_row([t_col[later]] + cols, [1.0] + [-v for v in coefs], ">=", const)

    for s in sends:
        p = parent.get((s[0], s[1]))
        if p is not None:
            at_least(s, p)
        cols, coefs, const = end(s)
        m.add_row([T] + cols, [1.0] + [-v for v in coefs], ">=", const)
        if s in batched:
            m.add_row([w_col[s], t_col[s]], [1.0, -1.0], ">=", cost[s])
            m.add_row([e_col[s], w_col[s]], [1.0, -1.0], ">=", 0.0)

    chained: set[tuple[Send, Send]] = set()
    for segs in ordering.resource_order.values():
        for a, b in zip(segs, segs[1:]):
            if (a, b) in chained:
                continue
            chained.add((a, b))
            if (a, b) in z_col:
                z = z_col[(a, b)]
                m.add_row([t_col[b], t_col[a]], [1.0, -1.0], ">=", 0.0)
                m.add_indicator(z, 1, [t_col[b], t_col[a]], [1.0, -1.0], "<=", 0.0)     # one start
                m.add_indicator(z, 0, [t_col[b], e_col[a]], [1.0, -1.0], ">=", 0.0)     # or after a's batch
                m.add_indicator(z, 1, [w_col[b], w_col[a]], [1.0, -1.0], ">=", beta[b])  # alpha + k beta
                m.add_indicator(z, 1, [e_col[a], e_col[b]], [1.0, -1.0], ">=", 0.0)     # one end
            else:
                at_least(b, a)
    for a, b in branch_pairs:
        if (a, b) not in chained:
            at_least(b, a)
    # at most batch_window chunks per batch: no window of that many consecutive links all "together"
    run = _runs(pairs)
    w = options.batch_window
    for chain in run:
        for i in range(len(chain) - w + 1):
            window = [z_col[p] for p in chain[i:i + w]]
            m.add_row(window, [1.0] * w, "<=", w - 1)

    # objective: makespan + weight * busiest arc load, then (tie-break) fewer transfers and earlier starts
    unit = min(cost.values()) if cost else 1.0
    obj = {T: 1.0}
    if weight > 0:
        L = m.add_var(0.0, horizon, name="L")
        obj[L] = weight
        saved: dict[object, list[tuple[int, float]]] = {}
        for (a, b), z in z_col.items():
            for arc in lt.resources(a[1], a[2]):
                saved.setdefault(arc, []).append((z, cost[b] - beta[b]))
        seen = set()
        for arc, segs in ordering.resource_order.items():
            key = (tuple(segs), tuple(saved.get(arc, ())))
            if key in seen:
                continue
            seen.add(key)
            zs = saved.get(arc, [])
            m.add_row([L] + [z for z, _ in zs], [1.0] + [a for _, a in zs], ">=", sum(cost[s] for s in segs))
    for z in z_col.values():
        obj[z] = -1e-3 * unit
    for s in sends:
        obj[t_col[s]] = 1e-6
    m.set_objective(list(obj), list(obj.values()))
    # slice makespan + (k - 1) * busiest slice load >= k * that load and >= the latency: above the bound
    m.set_makespan([T, L] if weight > 0 else [T], [1.0, weight] if weight > 0 else [1.0])
    start = {t_col[s]: list_start[s] for s in sends}
    for s in batched:
        start[e_col[s]] = start[w_col[s]] = list_start[s] + cost[s]
    start.update({z: 0.0 for z in z_col.values()})
    start[T] = list_span
    if weight > 0:
        start[L] = max(sum(cost[s] for s in segs) for segs in ordering.resource_order.values())
    m.set_start(list(start), list(start.values()))

    sol = solve(m, options.milp)
    if sol.values is None:
        # the list schedule is feasible; keep it rather than fail
        log.warning("scheduling: %s; using the stage-2 list schedule", sol.message)
        together: set = set()
        status = "time_limit" if sol.status == "error" else sol.status
    else:
        v = sol.values
        together = {p for p, z in z_col.items() if v[z] > 0.5}
        status = sol.status
    # planned times at the full chunk size, keeping the solved order and batches
    full = {s: lt.cost_us(s[1], s[2]) - alpha[s] for s in sends}
    times = timeline(sends, parent, ordering.resource_order, together, lambda s, k: alpha[s] + k * full[s],
                     branch_pairs)
    led = {b for _, b in together}
    sizes = _batch_sizes(together)
    makespan = max((times[s] + alpha[s] + sizes.get(s, 1) * full[s] for s in sends if s not in led), default=0.0)
    algorithm = _algorithm(lt, sends, times, together, makespan)
    verify(algorithm, lt.graph)
    report = StageReport(time.perf_counter() - began, sol.variables, sol.constraints, status, sol.solver, sol.message)
    log.info("scheduling: %d slice(s), slice makespan %.1f us (list schedule %.1f), %d batched pairs, %s",
             slices, float(sol.values[T]) if sol.values is not None else list_span, list_span, len(together), report)
    return Schedule(algorithm, makespan, report)


def _branch_pairs(sends, ordering: Ordering) -> list[tuple[Send, Send]]:
    """Consecutive sends of one chunk out of one rank, in stage-2 order (serialised for combine)."""
    by_origin: dict[tuple[int, int], list[Send]] = {}
    for s in sends:
        by_origin.setdefault((s[0], s[1]), []).append(s)
    out = []
    for segs in by_origin.values():
        segs.sort(key=lambda s: (ordering.start[s], s))
        out.extend(zip(segs, segs[1:]))
    return out


def _batch_sizes(together) -> dict[Send, int]:
    """Leader of each batch -> number of chunks in it."""
    return {chain[0][0]: len(chain) + 1 for chain in _runs(sorted(together))}


def timeline(sends, parent, resource_order, together, duration, after=()) -> dict[Send, float]:
    """Earliest start of every transfer that keeps each arc's order and the batches.

    A batch (a run of ``together`` pairs) is one transfer led by its first member, starting when all
    members' chunks have arrived and the previous transfer on each arc has ended, lasting
    ``duration(leader, k)``. ``after`` holds extra (earlier, later) pairs. Raises ValueError if the orders and the routing form a cycle.
    """
    lead = {s: s for s in sends}
    for chain in _runs(sorted(together)):
        head = chain[0][0]
        for _, b in chain:
            lead[b] = head
    size: dict[Send, int] = {}
    for s in sends:
        size[lead[s]] = size.get(lead[s], 0) + 1
    preds: dict[Send, set[Send]] = {lead[s]: set() for s in sends}
    for s in sends:
        p = parent.get((s[0], s[1]))
        if p is not None:
            preds[lead[s]].add(lead[p])
    for segs in list(resource_order.values()) + [list(p) for p in after]:
        groups = [lead[s] for s in segs]
        for a, b in zip(groups, groups[1:]):
            if a != b:
                preds[b].add(a)
    succ: dict[Send, list[Send]] = {g: [] for g in preds}
    indeg = {g: len(p) for g, p in preds.items()}
    for g, ps in preds.items():
        for p in ps:
            succ[p].append(g)
    start: dict[Send, float] = {}
    todo = sorted(g for g, d in indeg.items() if d == 0)
    while todo:
        g = todo.pop()
        start[g] = max((start[p] + duration(p, size[p]) for p in preds[g]), default=0.0)
        for n in succ[g]:
            indeg[n] -= 1
            if not indeg[n]:
                todo.append(n)
    if len(start) != len(preds):
        raise ValueError("the transfer orders and the routing form a cycle")
    return {s: start[lead[s]] for s in sends}


def _batch_pairs(lt: LogicalTopology, ordering: Ordering, options: ScheduleOptions) -> list[tuple[Send, Send]]:
    """Consecutive transfers on one batching link that are also adjacent on every arc the link holds."""
    by_link: dict[tuple[int, int], list[Send]] = {}
    for s in ordering.start:
        if lt.graph.edges[s[1], s[2]]["kind"] in options.batch_kinds:
            by_link.setdefault((s[1], s[2]), []).append(s)
    nxt: dict[object, dict[Send, Send]] = {arc: dict(zip(segs, segs[1:])) for arc, segs in ordering.resource_order.items()}
    pairs = []
    for (u, v), segs in sorted(by_link.items()):
        segs.sort(key=lambda s: (ordering.start[s], s))
        arcs = lt.resources(u, v)
        for a, b in zip(segs, segs[1:]):
            if all(nxt[arc].get(a) == b for arc in arcs):
                pairs.append((a, b))
    return pairs


def _runs(pairs: list[tuple[Send, Send]]) -> list[list[tuple[Send, Send]]]:
    """Group pairs (a, b), (b, c), ... into chains."""
    after = {a: (a, b) for a, b in pairs}
    heads = {a for a, _ in pairs} - {b for _, b in pairs}
    out = []
    for h in sorted(heads):
        chain, cur = [], h
        while cur in after:
            chain.append(after[cur])
            cur = after[cur][1]
        out.append(chain)
    return out


def _algorithm(lt: LogicalTopology, sends: list[Send], times: dict[Send, float], together: set, makespan: float
               ) -> Algorithm:
    """Transfers in start order; a run of batched sends is one transfer carrying all its chunks."""
    follow = {a: b for a, b in together}
    led = {b for _, b in together}
    transfers = []
    for s in sends:
        if s in led:
            continue
        chunks, cur = [s[0]], s
        while cur in follow:
            cur = follow[cur]
            chunks.append(cur[0])
        transfers.append((times[s], s, tuple(chunks)))
    transfers.sort(key=lambda x: (round(x[0], 6), x[1]))
    steps = {t: i for i, t in enumerate(sorted({round(x[0], 6) for x in transfers}))}
    out = [Transfer(chunks, s[1], s[2], steps[round(t, 6)], start_us=max(0.0, t)) for t, s, chunks in transfers]
    coll = lt.collective
    name = f"{coll.name}-{lt.graph.graph.get('name', 'topology')}-milp"
    meta = {"synthesizer": "autotaccl-milp", "makespan_us": round(makespan, 6), "chunk_bytes": lt.chunk_bytes}
    return Algorithm(name, coll, renumber_steps(out), lt.graph.graph.get("name", ""), meta)
