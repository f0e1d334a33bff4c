"""Thread blocks and their order: every transfer's send and receive as items of per-flow thread blocks,
with the nops and semaphores that order them.

A *flow* is the transfers from one rank to another on one link of one instance; it gets a block on the
sender and one on the receiver (a receive flow shares the block of the send flow it forwards most into).
Blocks run their items in the IR's program order and every ordering need points forward, so no schedule
deadlocks. A staged port put (``layout.staged``) first copies its source into scratch, chunk by chunk.
The ordering rules: ``docs/internals.md``."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ....model.algorithm import Algorithm
from .layout import Layout, SwitchMove, Unlowerable, canonical

#: (src, dst, instance, link, part)
Flow = tuple[int, int, int, int, int]
#: ("recv", flow) | ("send", flow) | ("pair", flow in, flow out) | ("local", rank, part)
TbKey = tuple


@dataclass
class Item:
    kind: str                      # rlxsignal rlxwait nop acquire put wait reduce unpack copy
    flow: Flow | None = None
    move: int | None = None        # transfer index
    copies: tuple = ()             # a copy item's (from, to, chunks): consecutive slots
    sems: list = field(default_factory=list)
    flush: bool = False            # a port put that must complete before its block goes on (pwsf)
    chunks: tuple = ()             # a put of these chunks of its move only (empty: all)
    signal: bool = True            # a put that signals its receiver (a move's last part)
    release: list = field(default_factory=list)    # semaphores released right after this item


@dataclass
class Block:
    key: TbKey
    rank: int
    items: list[Item] = field(default_factory=list)
    last_nop: int = -1

    def add(self, item: Item) -> int:
        self.items.append(item)
        if item.kind == "nop":
            self.last_nop = len(self.items) - 1
        return len(self.items) - 1


@dataclass
class Schedule:
    blocks: dict[TbKey, Block]
    semaphores: dict[int, list[tuple[TbKey, TbKey]]]      # rank -> (releasing block, acquiring block) per id
    channel_kind: dict[Flow, str]


def sync_flow(a: int, b: int, part: int) -> Flow:
    """The memory channel pair two ranks' switch blocks ``part`` synchronize on (instance -1: no transfer's)."""
    return (min(a, b), max(a, b), -1, -1, part)


def tree(group: tuple[int, ...], rank: int) -> tuple[int | None, list[int]]:
    """(parent, children) of ``rank`` in the binary tree over ``group`` its switch blocks synchronize on."""
    p = group.index(rank)
    return (group[(p - 1) // 2] if p else None), [group[k] for k in (2 * p + 1, 2 * p + 2) if k < len(group)]


def switch_barrier(b: Block, group: tuple[int, ...], part: int) -> None:
    """Every member's switch block ``part`` passes only once all have arrived, with what they did before:
    signal/wait (release/acquire) up the tree to the root and back down, a nop after each wait."""
    parent, children = tree(group, b.rank)
    for child in children:
        b.add(Item("wait", flow=sync_flow(b.rank, child, part)))
    if children:
        b.add(Item("nop"))
    if parent is not None:
        b.add(Item("signal", flow=sync_flow(b.rank, parent, part)))
        b.add(Item("wait", flow=sync_flow(b.rank, parent, part)))
        b.add(Item("nop"))
    for child in children:
        b.add(Item("signal", flow=sync_flow(b.rank, child, part)))


def schedule(algorithm: Algorithm, lay: Layout, flows: tuple[Flow, ...], kinds: dict[Flow, str], inplace: bool,
             final_parts: int = 1, switch_parts: int = 1) -> Schedule:
    coll = algorithm.collective
    kinds = dict(kinds)
    blocks: dict[TbKey, Block] = {}
    sem_ids: dict[tuple[TbKey, TbKey], int] = {}
    semaphores: dict[int, list] = defaultdict(list)
    covered: dict[tuple[TbKey, TbKey], int] = {}
    writer: dict[tuple, tuple[Block, int]] = {}
    readers: dict[tuple, list[tuple[Block, int]]] = defaultdict(list)

    paired = pair_flows(algorithm, flows)

    def block(key: TbKey, rank: int) -> Block:
        key = paired.get(key, key)
        if key not in blocks:
            blocks[key] = Block(key, rank)
            if key[0] in ("recv", "pair"):
                blocks[key].add(Item("rlxsignal", flow=key[1]))
        return blocks[key]

    def order(x: Block, reads, writes) -> None:
        """Make ``x``'s next item come after every earlier item it conflicts with."""
        need_nop = False
        acquire = []
        latest: dict[TbKey, tuple[Block, int]] = {}        # per earlier block, its last conflicting item
        for y, index in [writer[c] for c in list(reads) + list(writes) if c in writer] + \
                [r for c in writes for r in readers.get(c, ())]:
            if y.key not in latest or latest[y.key][1] < index:
                latest[y.key] = (y, index)
        for y, index in latest.values():
            if y is x:
                if x.last_nop < index and not y.items[index].release:
                    need_nop = True
                continue
            pair = (y.key, x.key)
            if covered.get(pair, -1) >= index:
                continue
            covered[pair] = index
            if pair not in sem_ids:
                sem_ids[pair] = len(semaphores[x.rank])
                semaphores[x.rank].append(pair)
            y.items[index].release.append(sem_ids[pair])
            acquire.append(sem_ids[pair])
        if acquire:
            x.add(Item("acquire", sems=sorted(acquire)))
        if acquire or need_nop:
            x.add(Item("nop"))

    def record(x: Block, index: int, reads, writes) -> None:
        for c in reads:
            touch[c][0].add(x.rank)
        for c in writes:
            touch[c][1].add(x.rank)
        for c in reads:
            readers[c].append((x, index))
        for c in writes:
            for y, j in readers.get(c, ()):
                item = y.items[j]
                if item.kind == "put" and kinds[item.flow] == "port":
                    item.flush = True          # its source is overwritten: the proxy must be done reading
            writer[c] = (x, index)
            readers[c] = []

    def cells(rank: int, locs) -> list[tuple]:
        return [canonical(coll, rank, loc, inplace) for loc in locs]

    group_of = {m: tr.group for tr in algorithm.transfers if tr.group for m in tr.group}
    issued: dict[int, int] = defaultdict(int)
    for move in lay.moves:
        if isinstance(move, SwitchMove):
            issued[move.rank] += 1
    for rank, group in sorted(group_of.items()):      # every member's switch blocks, opened by the barrier
        for part in range(switch_parts):
            b = blocks[("switch", rank, part)] = Block(("switch", rank, part), rank)
            switch_barrier(b, group, part)
            parent, children = tree(group, rank)
            for peer in children + ([parent] if parent is not None else []):
                kinds[sync_flow(rank, peer, part)] = "memory"
    touch: dict[tuple, list[set, set]] = defaultdict(lambda: [set(), set()])   # cell -> ranks reading, writing
    done: dict[int, int] = defaultdict(int)

    def switch(move: SwitchMove) -> None:
        r = move.rank
        part = done[r] * switch_parts // issued[r]
        done[r] += 1
        x = blocks[("switch", r, part)]
        chunks = sorted(move.land)
        if move.read:           # every member's cells, ordered like the issuer's own among its blocks
            reads = [cell for m in move.group for cell in cells(m, [move.read[c] for c in chunks])]
        else:
            reads = cells(r, [move.source[c] for c in chunks])
        writes = [cell for m in move.group for cell in cells(m, [move.land[c] for c in chunks])]
        order(x, reads, writes)
        index = x.add(Item("switch", move=move.t))
        record(x, index, reads, writes)

    started: set[Flow] = set()
    for move in lay.moves:
        if isinstance(move, SwitchMove):
            switch(move)
            continue
        flow = flows[move.t]
        tr = algorithm.transfers[move.t]
        s, d = tr.src, tr.dst
        sender = block(("send", flow), s)
        stage = dict((dst, src) for src, dst in lay.stage.get(move.t, ()))
        if stage and len(stage) == len(move.read):     # staged whole: chunk by chunk, copy k+1 beside put k
            parts = [(c,) for c in sorted(move.read)]
        else:
            parts = [()]
        for k, part in enumerate(parts):
            mine = [move.read[c] for c in part] if part else list(move.read.values())
            for loc in mine:                                # a staged port put's source first
                if loc in stage:
                    copy_reads, copy_writes = cells(s, [stage[loc]]), cells(s, [loc])
                    order(sender, copy_reads, copy_writes)
                    record(sender, sender.add(Item("copy", copies=(stage[loc], loc, 1))), copy_reads, copy_writes)
            reads = cells(s, mine)
            if flow not in started:
                started.add(flow)
                index = sender.add(Item("rlxwait", flow=flow))
                record(sender, index, [], [("ready", flow)])
                reads = reads + [("ready", flow)]
            order(sender, reads, [])
            index = sender.add(Item("put", flow=flow, move=move.t, chunks=part, signal=k == len(parts) - 1))
            record(sender, index, reads, [])
        if kinds[flow] == "memory" and not move.packets:
            sender.last_nop = index        # rendered as put, nop, signal: the nop closes the put's segment
        receiver = block(("recv", flow), d)
        landed = cells(d, move.land.values())
        if not move.packets:
            order(receiver, [], landed)
            record(receiver, receiver.add(Item("wait", flow=flow, move=move.t)), [], landed)
        if move.result is not None:
            reads = (cells(d, move.operand.values()) if move.operand else []) + (landed if not move.packets else [])
            writes = cells(d, move.result.values())
            order(receiver, reads, writes)
            kind = "unpack" if move.packets else "reduce"
            record(receiver, receiver.add(Item(kind, flow=flow, move=move.t)), reads, writes)
    for rank, copies in sorted(lay.finals.items()):
        groups = copy_runs(copies)
        for part in range(final_parts):
            mine = groups[part::final_parts]
            if not mine:
                continue
            x = block(("local", rank, part), rank)
            for src, dst, n in mine:
                reads = cells(rank, [(src[0], src[1] + i) for i in range(n)])
                writes = cells(rank, [(dst[0], dst[1] + i) for i in range(n)])
                order(x, reads, writes)
                record(x, x.add(Item("copy", copies=(src, dst, n))), reads, writes)
    for b in blocks.values():            # the last port put of a flow flushes: the call must not end before
        puts = [it for it in b.items if it.kind == "put" and kinds[it.flow] == "port"]   # the proxy read
        if puts:
            puts[-1].flush = True
    for cell, (readers_, writers_) in touch.items():    # semaphores order blocks of one rank only: a cell that
        if writers_ and len(readers_ | writers_) > 1:      # blocks of two ranks touch (through the switch) and
            raise Unlowerable(                             # one writes has no order the plan can express
                f"rank {cell[0]}'s {cell[1]}[{cell[2]}] is written and read by thread blocks of ranks "
                f"{sorted(readers_ | writers_)} (through the switch): nothing orders them across ranks")
    for rank, group in sorted(group_of.items()):      # the barrier closes every switch block: each member has
        for part in range(switch_parts):              # the others' multimem stores before its call ends
            b = blocks[("switch", rank, part)]
            b.add(Item("nop"))
            switch_barrier(b, group, part)
    return Schedule(blocks, dict(semaphores), kinds)


def copy_runs(copies) -> list[tuple]:
    """Final copies as runs (from, to, chunks) of consecutive slots on both sides."""
    out: list[list] = []
    for src, dst in sorted(copies, key=lambda p: p[1]):
        if out:
            s0, d0, n = out[-1]
            if s0[0] == src[0] and d0[0] == dst[0] and s0[1] + n == src[1] and d0[1] + n == dst[1]:
                out[-1][2] += 1
                continue
        out.append([src, dst, 1])
    return [tuple(g) for g in out]


def pair_flows(algorithm: Algorithm, flows: tuple[Flow, ...]) -> dict[TbKey, TbKey]:
    """Receive and send flows of a rank that share one block: per rank, the pair (p -> r, r -> q) that
    forwards the most chunks first (a ring's receive-reduce-send runs in one block, its forwards ordered by
    nops instead of semaphores), each flow in at most one pair."""
    last: dict[tuple[int, int], Flow] = {}
    counts: dict[tuple[Flow, Flow], int] = defaultdict(int)
    for tr, flow in zip(algorithm.transfers, flows):
        if flow is None:                 # a switch operation: in the switch blocks
            for c in tr.chunks:
                for m in tr.group:
                    last.pop((m, c), None)
            continue
        for c in tr.chunks:
            came = last.get((tr.src, c))
            if came is not None:
                counts[(came, flow)] += 1
        for c in tr.chunks:
            last[(tr.dst, c)] = flow
    out: dict[TbKey, TbKey] = {}
    for (f_in, f_out), _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if ("recv", f_in) not in out and ("send", f_out) not in out:
            out[("recv", f_in)] = out[("send", f_out)] = ("pair", f_in, f_out)
    return out
