"""Steps: transfers become ``s``/``r``/``rcs``/``rrc``/``rrs``/``rrcs`` steps (contiguous chunks merged
into one step with ``cnt`` > 1), local moves become ``cpy``; then cross-thread-block dependencies.

Dependencies are the conflicts on memory cells in program order (:func:`autotaccl.model.dependencies.conflicts`)
under the aliasing of every enabled buffer mode; a step waits only for the latest conflicting step of
each other thread block, and not again for what an earlier step of its own thread block already
waited for. The first dependency sits on the step, each extra one on a ``nop``
just before it; every target gets ``hasdep=1`` (§1.7).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ....model.algorithm import Algorithm
from ....model.dependencies import conflicts
from ..program import inplace_cell
from .buffers import Layout, Loc
from .threadblocks import Plan, TbKey


@dataclass
class StepRec:
    tb: TbKey
    pos: tuple[int, int, int]
    type: str
    src: Loc
    dst: Loc
    cnt: int
    reads: list[tuple[int, Loc]] = field(default_factory=list)
    writes: list[tuple[int, Loc]] = field(default_factory=list)
    deps: list["StepRec"] = field(default_factory=list)
    index: int = -1
    xfer: int | None = None


def contiguous_runs(order: list[int], lists: list[dict[int, Loc]], max_cnt: int) -> list[list[int]]:
    """Split ``order`` where any location list stops being contiguous, then into pieces of <= max_cnt."""
    runs: list[list[int]] = []
    for k, c in enumerate(order):
        if k and len(runs[-1]) < max_cnt and all(
                loc[order[k - 1]][0] == loc[c][0] and loc[order[k - 1]][1] + 1 == loc[c][1] for loc in lists):
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


def build_steps(algorithm: Algorithm, plan: Plan, lay: Layout, max_cnt: int,
                origin: tuple[int, ...] | None = None) -> list[StepRec]:
    """Steps of every transfer; a receive step records ``origin[t]`` (the caller's transfer index) as xfer."""
    transfers = algorithm.transfers
    by_t = {m.t: m for m in lay.messages}
    fused_sends = set(plan.fused_next.values())
    steps: list[StepRec] = []
    for head in range(len(transfers)):
        if head in fused_sends:
            continue
        chain = [head]
        while chain[-1] in plan.fused_next:
            chain.append(plan.fused_next[chain[-1]])
        first = by_t[head]
        order = sorted(transfers[head].chunks, key=lambda c: first.read[c])
        lists = [first.read] + [loc for t in chain for loc in (by_t[t].operand, by_t[t].write) if loc is not None]
        for run_index, run in enumerate(contiguous_runs(order, lists, max_cnt)):
            c0, cnt = run[0], len(run)
            src_rank = transfers[head].src
            tgt = first.write if first.write is not None else first.operand
            fields = (first.read[c0], tgt[c0])
            steps.append(StepRec(plan.send_tb[head], (first.send_seq, run_index, 0), "s", *fields, cnt,
                                 reads=[(src_rank, first.read[c]) for c in run]))
            for t in chain:
                m, tr = by_t[t], transfers[t]
                fused = t in plan.fused_next
                reads = [(tr.dst, m.operand[c]) for c in run] if m.operand is not None else []
                writes = [(tr.dst, m.write[c]) for c in run] if m.write is not None else []
                if m.operand is None:
                    kind = "rcs" if fused else "r"
                    src, dst = (m.write[c0], m.write[c0]) if fused else (fields[0], m.write[c0])
                elif m.write is None:
                    kind, src, dst = "rrs", m.operand[c0], m.operand[c0]
                else:
                    kind, src, dst = ("rrcs" if fused else "rrc"), m.operand[c0], m.write[c0]
                steps.append(StepRec(plan.recv_tb[t], (m.seq, run_index, 1), kind, src, dst, cnt, reads, writes,
                                     xfer=t if origin is None else origin[t]))
                fields = (src, dst)
    copies = defaultdict(list)
    for cp in lay.copies:
        copies[cp.rank].append(cp)
    for rank, cps in copies.items():
        group: list = []
        for cp in cps + [None]:
            if group and cp is not None and len(group) < max_cnt and cp.seq == group[-1].seq + 1 and \
                    cp.src[0] == group[-1].src[0] and cp.src[1] == group[-1].src[1] + 1 and \
                    cp.dst[0] == group[-1].dst[0] and cp.dst[1] == group[-1].dst[1] + 1:
                group.append(cp)
                continue
            if group:
                steps.append(StepRec((rank, -1, -1, 0), (group[0].seq, 0, 0), "cpy", group[0].src, group[0].dst,
                                     len(group), reads=[(rank, g.src) for g in group],
                                     writes=[(rank, g.dst) for g in group]))
            group = [cp] if cp is not None else []
    steps.sort(key=lambda s: s.pos)
    return steps


def add_dependencies(steps: list[StepRec], coll_name: str, per_rank: int, inplace: bool, outofplace: bool,
                     conflicting: tuple[tuple[int, ...], ...] | None = None) -> tuple[tuple[int, ...], ...]:
    """Fill ``deps`` of every step (steps must be in program order); returns :func:`step_conflicts`
    (``conflicting``: those already found for steps with the same accesses, e.g. another thread-block
    plan of the same layout)."""
    if conflicting is None:
        conflicting = step_conflicts(steps, coll_name, per_rank, inplace, outofplace)
    per_tb_count: dict[TbKey, int] = defaultdict(int)
    for st in steps:
        st.index = per_tb_count[st.tb]
        per_tb_count[st.tb] += 1
    waited: dict[TbKey, dict[TbKey, int]] = defaultdict(dict)
    for st, earlier in zip(steps, conflicting):
        # per other thread block, its latest conflicting step (``earlier`` is in program order)
        found = {steps[j].tb: steps[j] for j in earlier if steps[j].tb != st.tb}
        mine = waited[st.tb]
        for tb, target in sorted(found.items()):
            if mine.get(tb, -1) >= target.index:
                continue
            mine[tb] = target.index
            st.deps.append(target)
    return conflicting


def step_conflicts(steps: list[StepRec], coll_name: str, per_rank: int, inplace: bool,
                   outofplace: bool) -> tuple[tuple[int, ...], ...]:
    """Per step (in program order), the earlier steps it conflicts with on a memory cell under the
    aliasing of every enabled buffer mode; it reads only the steps' types, reads and writes, not their
    thread blocks."""
    def cells(rank: int, loc: Loc) -> list[tuple]:
        out = []
        if outofplace:
            out.append(("x", rank) + loc)
        if inplace:
            out.append(("p", rank) + inplace_cell(coll_name, per_rank, rank, *loc))
        return out

    accesses = []
    for st in steps:
        read_cells = [c for rank, loc in st.reads for c in cells(rank, loc)]
        write_cells = [c for rank, loc in st.writes for c in cells(rank, loc)]
        if st.type == "cpy":              # an in-place identity copy writes nothing
            write_cells = [c for c in write_cells if c not in set(read_cells)]
        accesses.append((read_cells, write_cells))
    return conflicts(accesses)
