"""``lower_plan(algorithm, graph, options) -> Plan``: the IR as an MSCCL++ execution plan, checked.

Pipeline: verify on the topology -> replicate instances -> channel type per link (the topology graph's
edge kind: ``net`` edges are port channels through the proxy and NIC, NVLink and switch edges memory
channels) -> buffer layout (port puts staged through scratch unless the buffers start their
allocations) -> flows, thread blocks and their order -> numbering and operations -> the
executor's limits (a block with more than 64 operations splits its flow, or its final copies, into more
parts) -> the replaying checker.
"""
from __future__ import annotations

import json
import logging
import math
from collections import defaultdict

import networkx as nx

from ....model.algorithm import Algorithm, Transfer, VerificationError, switch_ops, verify
from ....model.topology import NETWORK
from ..check.check import check_plan
from ..plan import MAX_OPERATIONS, MAX_RESIDENT_TBS, NO_LIMIT, Plan, to_json
from .emit import render
from .layout import Unlowerable, layout, staged
from .options import PLACEMENTS, LoweringError, PlanOptions
from .schedule import Flow, schedule

log = logging.getLogger(__name__)
MAX_ROUNDS = 64
SWITCH_BARRIER_OPS = 24     # a switch block's two tree barriers and nops, at most (the rest: switch operations)


def lower_plan(algorithm: Algorithm, graph: nx.DiGraph, options: PlanOptions | None = None) -> Plan:
    """The plan of ``algorithm`` on ``graph`` (the topology it runs on), proven by :func:`check_plan`.

    Raises LoweringError naming the runtime limit it cannot fit, or the first violation if the plan failed
    its check (a lowering bug)."""
    opts = (options or PlanOptions()).validated()
    source = algorithm.name or "<algorithm>"
    try:
        verify(algorithm, graph)
    except VerificationError as err:
        raise LoweringError(source, "algorithm", f"an algorithm that passes verify on {graph.graph.get('name')} "
                            f"({err})") from None
    if switch_ops(algorithm):
        _check_switch(algorithm, opts, source)
    expanded, instance = replicate(algorithm, opts.instances)
    kinds_of = {(u, v): "port" if kind == NETWORK else "memory" for u, v, kind in graph.edges(data="kind")}
    packets = tuple(opts.proto == "LL" and not t.group and kinds_of[(t.src, t.dst)] == "memory"
                    for t in expanded.transfers)
    try:
        lay = layout(expanded, packets, opts.inplace)
    except Unlowerable as err:
        raise LoweringError(source, "transfers", f"switch operations a plan can address ({err})") from None
    if opts.placement == "anywhere":
        lay = staged(expanded, lay, tuple(not t.group and kinds_of[(t.src, t.dst)] == "port"
                                          for t in expanded.transfers))
    base = [None if t.group else (t.src, t.dst, i, t.link) for t, i in zip(expanded.transfers, instance)]
    members: dict[tuple, list[int]] = defaultdict(list)
    for t, key in enumerate(base):
        if key is not None:
            members[key].append(t)
    parts = {key: 1 for key in members}
    final_parts = switch_parts = 1
    coll = expanded.collective
    meta = {"ranks_per_node": graph.graph["gpus_per_node"], "topology": graph.graph.get("name", ""),
            "source": source, "placement": opts.placement, "placement_note": PLACEMENTS[opts.placement]}
    if coll.name == "broadcast":
        meta["root"] = coll.root
    name = opts.name or algorithm.name or f"autotaccl-{coll.name}"
    max_bytes = NO_LIMIT if opts.max_bytes is None else opts.max_bytes
    for _ in range(MAX_ROUNDS):
        flows = _flows(base, members, parts)
        kinds = {f: kinds_of[(f[0], f[1])] for f in set(flows) if f is not None}
        try:
            sched = schedule(expanded, lay, flows, kinds, opts.inplace, final_parts, switch_parts)
        except Unlowerable as err:
            raise LoweringError(source, "transfers", f"switch operations a plan can order ({err})") from None
        plan, owner = render(expanded, lay, sched, flows, opts.proto, opts.inplace, name, opts.min_bytes, max_bytes,
                             meta)
        _check_resident(plan, source)      # splitting only adds thread blocks: refuse before it
        over = [(g.id, tb.id, tb.num_operations) for g in plan.gpus for tb in g.threadblocks
                if tb.num_operations > MAX_OPERATIONS]
        if not over:
            break
        grow: dict[tuple, int] = {}
        finals, switches = final_parts, switch_parts
        for rank, tb, n in over:
            key = owner[(rank, tb)]
            if key[0] == "local":     # the most any rank's final copies need, from this round's parts
                finals = max(finals, final_parts + 1, math.ceil(final_parts * n / (MAX_OPERATIONS - 4)))
                continue
            if key[0] == "switch":    # its barriers stay: only the switch operations spread
                switches = max(switches, switch_parts + 1,
                               math.ceil(switch_parts * n / (MAX_OPERATIONS - SWITCH_BARRIER_OPS)))
                continue
            for flow in (f[:4] for f in key[1:]):           # a pair block holds two flows
                want = max(parts[flow] + 1, math.ceil(parts[flow] * n / (MAX_OPERATIONS - 4)))
                grow[flow] = max(grow.get(flow, 0), want)
        for flow, want in grow.items():
            if parts[flow] >= len(members[flow]):
                raise LoweringError(source, "operations per thread block",
                                    f"at most {MAX_OPERATIONS}; one transfer from rank {flow[0]} to rank {flow[1]} "
                                    f"needs more (it has too many separate runs of chunks)")
            parts[flow] = min(want, len(members[flow]))
        final_parts = finals
        if switches > switch_parts and switches > max(1, *(sum(1 for t in expanded.transfers if t.group and
                                                               t.src == r) for r in range(expanded.collective.ranks))):
            raise LoweringError(source, "operations per thread block", f"at most {MAX_OPERATIONS}; one switch "
                                "operation needs more (too many separate runs of chunks)")
        switch_parts = switches
        log.info("%s: %d thread block(s) over %d operations; splitting their flows", source, len(over),
                 MAX_OPERATIONS)
    else:
        raise LoweringError(source, "operations per thread block", f"at most {MAX_OPERATIONS} after "
                            f"{MAX_ROUNDS} rounds of splitting")
    report = check_plan(plan, source, "plan", offsets=opts.placement == "anywhere")
    if not report.valid:
        raise LoweringError(source, "lowering", f"a plan that replays correctly (a lowering bug): {report.first}")
    log.info("lowered %s: %d ranks, %d thread blocks, %d operations", source, plan.ranks,
             report.stats["threadblocks"], report.stats["operations"])
    return plan


def _check_switch(algorithm: Algorithm, opts: PlanOptions, source: str) -> None:
    """Switch operations run Simple (the multimem packet store is not written) and each rank is in one
    switch group (its switch blocks synchronize over that group)."""
    if opts.proto != "Simple":
        raise LoweringError(source, "--proto", f"Simple for switch operations (multimem loads and stores move "
                                               f"plain data), not {opts.proto}")
    group_of: dict[int, tuple[int, ...]] = {}
    for i, t in enumerate(algorithm.transfers):
        for m in t.group:
            if group_of.setdefault(m, t.group) != t.group:
                raise LoweringError(source, f"transfers[{i}].group", f"the one switch group of rank {m} "
                                    f"({list(group_of[m])}): a plan's switch blocks synchronize over one group")


def replicate(algorithm: Algorithm, instances: int) -> tuple[Algorithm, tuple[int, ...]]:
    """The algorithm ``instances`` times side by side: instance ``i`` of chunk ``block*k + j`` is chunk
    ``block*k*I + i*k + j`` of the same collective with chunk-up ``k*I`` (blocked, so chunks one transfer
    moves together stay contiguous); returns it with each transfer's instance."""
    coll = algorithm.collective
    k = coll.chunkup
    transfers, instance = [], []
    for t in algorithm.transfers:
        for i in range(instances):
            chunks = tuple((c // k) * k * instances + i * k + c % k for c in t.chunks)
            transfers.append(Transfer(chunks, t.src, t.dst, t.step, t.op, t.link, t.start_us, t.channel, t.group))
            instance.append(i)
    return (Algorithm(algorithm.name, coll.with_chunkup(k * instances), tuple(transfers), algorithm.topology,
                      algorithm.metadata), tuple(instance))


def _flows(base, members, parts) -> tuple[Flow, ...]:
    flows: list[Flow] = [None] * len(base)
    for key, ts in members.items():
        n = parts[key]
        for pos, t in enumerate(ts):
            flows[t] = key + (pos * n // len(ts),)
    return tuple(flows)       # None for a switch operation (no flow: it runs in its issuer's switch block)


def plan_text(plan: Plan) -> str:
    """The plan's JSON text, as the executor reads it."""
    return json.dumps(to_json(plan), indent=1) + "\n"


def _check_resident(plan, source: str) -> None:
    """Refuse a plan with more thread blocks on a GPU than can be resident at once."""
    for g in plan.gpus:
        if len(g.threadblocks) > MAX_RESIDENT_TBS:
            raise LoweringError(source, "thread blocks per GPU",
                                f"at most {MAX_RESIDENT_TBS} (all must be resident at once, one per SM of a V100); "
                                f"rank {g.id} needs {len(g.threadblocks)}, {len(g.threadblocks) - MAX_RESIDENT_TBS} "
                                "too many (use fewer instances, or an algorithm with fewer peers per rank)")
