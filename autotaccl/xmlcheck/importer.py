"""``import_xml``: any MSCCL algorithm as an IR :class:`~autotaccl.algorithm.Algorithm`.

The file is checked first, then replayed in synchronous rounds; every message becomes one transfer
(emitted when it is sent, with the round as its step) of the IR chunks its labels name, numbered as in
:mod:`autotaccl.collectives`. A relay through scratch thus becomes a multi-hop transfer. A message
received by ``rrc``/``rrs``/``rrcs`` is a reduce; one received by ``r``/``rcs`` is a copy, unless it
lands beside a disjoint partial sum (received into scratch for a later local ``re``): then a reduce.
Local ``cpy``/``re`` steps move nothing between ranks and leave no transfer.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ..algorithm import Algorithm, Transfer, VerificationError, renumber_steps, verify
from ..collectives import Collective
from ..errors import InputError
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
    value: dict[tuple[int, int], frozenset[int]] = {}
    reduction = coll_name in ("reducescatter", "allreduce")
    records: list[tuple[int | None, int, tuple[int, ...], int, int, str]] = []
    failures: list[str] = []

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
        chunks, ops = [], []
        for v in values:
            if not v or any(label[0] != 0 for label in v):
                failures.append(f"rank {src} sends unwritten memory to rank {dst}")
                return
            pairs = [chunk_of(label) for label in v]
            ids = {p[0] for p in pairs}
            if len(ids) != 1:
                failures.append(f"rank {src} sends one value mixing chunks {sorted(ids)}")
                return
            (c,) = ids
            contrib = frozenset(p[1] for p in pairs)
            if reduction and value[(src, c)] != contrib:
                failures.append(f"rank {src} sends a partial sum of chunk {c} the IR cannot name "
                                f"(ranks {sorted(contrib)}, while its own value holds {sorted(value[(src, c)])})")
                return
            old = value.get((dst, c))
            # a reduce-type receive reduces; so does a copy next to a disjoint partial sum (a later local re)
            reduces = kind in ("rrs", "rrc", "rrcs") or (reduction and bool(old) and not old & contrib)
            op = "reduce" if reduces else "copy"
            if op == "reduce":
                value[(dst, c)] = (old or frozenset()) | contrib
            else:
                value[(dst, c)] = contrib
            chunks.append(c)
            ops.append(op)
        for op in ("copy", "reduce"):
            part = tuple(c for c, o in zip(chunks, ops) if o == op)
            if part:
                records.append((xfer, round_no, part, src, dst, op))

    if reduction:
        for r in range(n):
            for c in range(N):
                value[(r, c)] = frozenset((r,))
    problem = replay.run(None, races=False, on_message=on_message, rounds=True)
    if problem is not None or failures:
        raise InputError(source, "algorithm", f"one the IR can express ({failures[0] if failures else problem})")
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
