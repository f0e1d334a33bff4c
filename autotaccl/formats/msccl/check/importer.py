"""``import_xml``: any MSCCL algorithm as an IR :class:`~autotaccl.model.algorithm.Algorithm`.

The file is checked first, then replayed in synchronous rounds; every message becomes one transfer
(emitted when it is sent, with the round as its step) of the IR chunks its labels name, numbered as in
:mod:`autotaccl.model.collectives`. A relay through scratch thus becomes a multi-hop transfer. A message
received by ``rrc``/``rrs``/``rrcs`` is a reduce; one received by ``r``/``rcs`` is a copy, unless it
lands beside a disjoint partial sum (received into scratch for a later local ``re``): then a reduce.
Local ``cpy``/``re`` steps move nothing between ranks and leave no transfer.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ....errors import InputError
from ....model.algorithm import Algorithm, Transfer, VerificationError, renumber_steps, verify
from ....model.collectives import Collective
from .check import check_program, detect_runtime, header_modes
from .parse import read_xml
from .replay import Replay
from .static import collective_of

_RECEIVES = ("r", "rcs", "rrs", "rrc", "rrcs")


def import_xml(path: str | Path, runtime: str = "auto", seeds: int = 2) -> Algorithm:
    program, source = read_xml(path)
    runtime = detect_runtime(program) if runtime == "auto" else runtime
    coll_name = collective_of(program, runtime)
    if coll_name not in ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast"):
        raise InputError(source, "coll", f"a collective the IR has (allgather, reducescatter, allreduce, alltoall, "
                                         f"broadcast), not {program.coll!r}")
    modes = header_modes(program, runtime)
    modes = sorted(modes, key=lambda m: m != "outofplace") or ["outofplace"]
    report = None
    for mode in modes:
        report = check_program(program, source, runtime, mode, seeds)
        if report.valid:
            break
    if report is None or not report.valid:
        raise InputError(source, "algorithm", f"a valid MSCCL algorithm to import ({report.first})")
    n, N = program.ngpus, program.nchunksperloop
    if N % n and coll_name != "broadcast":
        raise InputError(source, "nchunksperloop", f"a multiple of ngpus={n} (the IR cuts every rank's share alike)")
    B = N // n
    replay = Replay(program, coll_name, report.modes[0])
    receive_kinds: dict[tuple[int, int, int], list[tuple[str, int | None]]] = {}
    for g, (rank, tb) in enumerate(replay.tbs):
        if tb.recv >= 0:
            receive_kinds[(tb.recv, rank, tb.chan)] = [(op.kind, op.xfer) for op in replay.ops[g]
                                                       if op.kind in _RECEIVES]
    sent = defaultdict(int)
    roots = set()
    reduction = coll_name in ("reducescatter", "allreduce")
    messages: list[tuple[int, int, int, str, int | None, list]] = []

    def chunk_of(label: tuple) -> tuple[int, int]:
        """(IR chunk, contributing rank) of an input label."""
        _, q, idx = label
        if coll_name == "allgather":
            return q * B + idx, q
        if coll_name == "alltoall":
            return (q * n + idx // B) * B + idx % B, q
        if coll_name == "broadcast":
            roots.add(q)
        return idx, q

    def on_message(src: int, dst: int, chan: int, values, round_no: int) -> None:
        key = (src, dst, chan)
        kind, xfer = receive_kinds[key][sent[key]]
        sent[key] += 1
        messages.append((round_no, src, dst, kind, xfer, values))

    problem = replay.run(None, races=False, on_message=on_message, rounds=True)
    if problem is not None:
        raise InputError(source, "algorithm", f"one the IR can express ({problem})")
    try:
        records = _records(messages, chunk_of, reduction, n, N)
    except ValueError as err:
        raise InputError(source, "algorithm", f"one the IR can express ({err})") from None
    root = min(roots) if roots else 0
    if len(roots) > 1:
        raise InputError(source, "algorithm", f"a broadcast from one root, not from ranks {sorted(roots)}")
    chunkup = N if coll_name == "broadcast" else B
    collective = Collective(coll_name, n, chunkup, root)
    transfers = renumber_steps(_transfers(records))
    algorithm = Algorithm(program.header.get("name", Path(source).stem), collective, transfers, "",
                          {"source": "msccl-xml", "file": source, "proto": program.header.get("proto", ""),
                           "nchannels": program.header.get("nchannels", ""), "mode": report.modes[0],
                           "runtime": runtime})
    try:
        verify(algorithm)
    except VerificationError as err:
        raise InputError(source, "algorithm", f"one whose IR form verifies ({err})") from None
    return algorithm


def _records(messages, chunk_of, reduction: bool, n: int, N: int) -> list:
    """(xfer, round, chunks, src, dst, op) per message, in an order where every transfer reads the value
    its sender really sent. Messages of one round read the values from before the round, so within a
    round a message that reads a (rank, chunk) goes before one that changes it."""
    value: dict[tuple[int, int], frozenset[int]] = {}
    if reduction:
        value = {(r, c): frozenset((r,)) for r in range(n) for c in range(N)}
    records = []
    by_round: dict[int, list] = defaultdict(list)
    for m in messages:
        by_round[m[0]].append(m)
    for round_no in sorted(by_round):
        parsed = []
        for _, src, dst, kind, xfer, values in by_round[round_no]:
            chunks = []
            for v in values:
                if not v or any(label[0] != 0 for label in v):
                    raise ValueError(f"rank {src} sends unwritten memory to rank {dst}")
                pairs = [chunk_of(label) for label in v]
                ids = {p[0] for p in pairs}
                if len(ids) != 1:
                    raise ValueError(f"rank {src} sends one value mixing chunks {sorted(ids)}")
                chunks.append((ids.pop(), frozenset(p[1] for p in pairs)))
            parsed.append((src, dst, kind, xfer, chunks))
        def deferred(message) -> bool:
            """A copy beside a disjoint partial sum: it lands in scratch for a later local re and leaves
            the receiver's value alone until then (so it goes last in its round)."""
            _, dst, kind, _, chunks = message
            return reduction and kind in ("r", "rcs") and all(
                value.get((dst, c)) and not value[(dst, c)] & contrib for c, contrib in chunks)

        late = [m for m in parsed if deferred(m)]
        for src, dst, kind, xfer, chunks in _read_before_write([m for m in parsed if not deferred(m)]) + late:
            ops = []
            for c, contrib in chunks:
                if reduction and value[(src, c)] != contrib:
                    raise ValueError(f"rank {src} sends a partial sum of chunk {c} (ranks {sorted(contrib)}) while "
                                     f"its value holds ranks {sorted(value[(src, c)])}")
                old = value.get((dst, c))
                # a reduce-type receive reduces; so does a copy beside a disjoint partial sum (a later local re)
                reduces = kind in ("rrs", "rrc", "rrcs") or (reduction and bool(old) and not old & contrib)
                value[(dst, c)] = (old | contrib) if reduces else contrib
                ops.append("reduce" if reduces else "copy")
            for op in ("copy", "reduce"):
                part = tuple(c for (c, _), o in zip(chunks, ops) if o == op)
                if part:
                    records.append((xfer, round_no, part, src, dst, op))
    return records


def _read_before_write(parsed: list) -> list:
    """Messages of one round ordered so that none changes a (rank, chunk) another still has to send."""
    writes = defaultdict(list)
    for i, (_, dst, _, _, chunks) in enumerate(parsed):
        for c, _ in chunks:
            writes[(dst, c)].append(i)
    after = defaultdict(set)          # i -> messages that must wait for i
    indegree = [0] * len(parsed)
    for i, (src, _, _, _, chunks) in enumerate(parsed):
        for c, _ in chunks:
            for j in writes.get((src, c), ()):
                if j != i and j not in after[i]:
                    after[i].add(j)
                    indegree[j] += 1
    ready = [i for i in range(len(parsed)) if indegree[i] == 0]
    order = []
    while ready:
        i = min(ready)
        ready.remove(i)
        order.append(parsed[i])
        for j in after[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(j)
    if len(order) != len(parsed):
        raise ValueError("ranks exchange values of one chunk in the same round (the IR moves one value at a time)")
    return order


def _transfers(records) -> list[Transfer]:
    """Transfers in the order they were sent; if every receive step names its transfer (``xfer``, written
    by our lowering), the pieces of one transfer are joined again and the original order restored."""
    if not records or any(r[0] is None for r in records):
        return [Transfer(chunks, s, d, step, op) for _, step, chunks, s, d, op in records]
    grouped: dict[tuple[int, str], list] = {}
    for xfer, step, chunks, s, d, op in records:
        g = grouped.setdefault((xfer, op), [step, [], s, d])
        g[0] = max(g[0], step)
        g[1].extend(chunks)
    out, last = [], 0
    for (_, op), (step, chunks, s, d) in sorted(grouped.items()):
        last = max(last, step)
        out.append(Transfer(tuple(chunks), s, d, last, op))
    return out
