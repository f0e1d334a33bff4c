"""Runs on channels: a transfer whose chunks are not contiguous in memory is sent as several messages
(runs). A thread block that forwards what it receives (``rcs``, ``rrs``) must then hold several messages
of one transfer in flight, which deadlocks on the runtime's two-message connection buffers. Splitting
such transfers into one transfer per run, run ``j`` on its own channel copy (as msccl-tools puts chunk
``j`` on channel ``j``), keeps every forwarding thread block at one message per transfer.
"""
from __future__ import annotations

from dataclasses import replace

from ....model.algorithm import Algorithm
from .buffers import layout
from .steps import contiguous_runs
from .threadblocks import Uses, plan_threadblocks


def split_runs(algorithm: Algorithm, channels: tuple[int, ...], origin: tuple[int, ...], inplace: bool,
               max_channels: int):
    """(algorithm, channels, origin) with every multi-run transfer split by run onto channel copies
    ``c + j * base``; None if nothing needs splitting or the channels would not fit."""
    plan = plan_threadblocks(algorithm, channels, Uses.of(algorithm), None)   # no fusion: plain locations
    lay = layout(algorithm, plan, inplace)
    runs_of = []
    for m in sorted(lay.messages, key=lambda m: m.t):
        lists = [loc for loc in (m.read, m.operand, m.write) if loc is not None]
        order = sorted(algorithm.transfers[m.t].chunks, key=lambda c: lists[0][c])
        runs_of.append(contiguous_runs(order, lists, len(order)))
    most = max((len(r) for r in runs_of), default=1)
    base = 1 + max(channels, default=0)
    if most == 1 or base * most > max_channels:
        return None
    transfers, new_channels, new_origin = [], [], []
    for t, tr in enumerate(algorithm.transfers):
        for j, run in enumerate(runs_of[t]):
            transfers.append(replace(tr, chunks=tuple(run)))
            new_channels.append(channels[t] + j * base)
            new_origin.append(origin[t])
    split = Algorithm(algorithm.name, algorithm.collective, tuple(transfers), algorithm.topology, algorithm.metadata)
    return split, tuple(new_channels), tuple(new_origin)
