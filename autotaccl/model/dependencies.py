"""Which earlier operations a later one must wait for: conflicts on memory cells in program order.

One rule serves every consumer of an operation list (the simulator and the greedy engine on the IR's
transfers, the mpi runner on one rank's slots, the XML lowering on its buffer cells): an operation
follows the last writer of every cell it reads or writes (read after write, write after write) and
every reader of a cell it overwrites since that cell was last written (write after read). What a
*cell* is belongs to the caller: ``(rank, chunk)`` for the IR (:func:`transfer_cells`), a buffer slot
after in-place aliasing for a runtime program.
"""
from __future__ import annotations

from typing import Hashable, Iterable, Sequence

from .algorithm import Transfer

Cell = Hashable
Access = tuple[Sequence[Cell], Sequence[Cell]]      # (cells read, cells written) by one operation


def conflicts(accesses: Iterable[Access], war: bool = True) -> tuple[tuple[int, ...], ...]:
    """For every access in program order, the sorted indices of the earlier ones it must follow.

    ``war=False`` leaves out write-after-read (what a step rule that closes a step only on a value
    written within it needs).
    """
    last_write: dict[Cell, int] = {}
    readers: dict[Cell, list[int]] = {}
    out = []
    for i, (reads, writes) in enumerate(accesses):
        deps = {last_write[cell] for cell in reads if cell in last_write}
        deps.update(last_write[cell] for cell in writes if cell in last_write)
        if war:
            for cell in writes:
                deps.update(readers.pop(cell, ()))
            for cell in reads:
                readers.setdefault(cell, []).append(i)
            for cell in writes:          # readers since the last write: not this access's own reads
                readers.pop(cell, None)
        for cell in writes:
            last_write[cell] = i
        out.append(tuple(sorted(deps)))
    return tuple(out)


def transfer_cells(t: Transfer) -> Access:
    """The ``(rank, chunk)`` cells a transfer reads (its chunks on ``src``, and on ``dst`` for a reduce)
    and writes (its chunks on ``dst``); a switch load-reduce reads them on every member of its group, a
    switch store writes them there."""
    if t.group:
        mine = [(t.src, c) for c in t.chunks]
        members = [(g, c) for g in t.group for c in t.chunks]
        return (members, mine) if t.op == "switch_reduce" else (mine, [cell for cell in members if cell[0] != t.src])
    writes = [(t.dst, c) for c in t.chunks]
    reads = [(t.src, c) for c in t.chunks]
    return (reads + writes if t.op == "reduce" else reads), writes


def transfer_dependencies(transfers: Iterable[Transfer], war: bool = True) -> tuple[tuple[int, ...], ...]:
    """For every transfer, the earlier transfers it must wait for (:func:`conflicts` on ``(rank, chunk)``)."""
    return conflicts(map(transfer_cells, transfers), war)
