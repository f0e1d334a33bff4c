"""Channels: transfer ``t`` on link ``l`` of instance ``i`` uses channel ``l*I + i``; where a rank would
then have more than 32 send (or receive) thread blocks on one channel (the runtime's per-channel limit,
§1.4), connections are moved to further copies of the channel set, first fit."""
from __future__ import annotations

from collections import defaultdict

from ....model.algorithm import Algorithm
from .options import LoweringError


def spread_channels(algorithm: Algorithm, channels: tuple[int, ...], per_channel: int, max_channels: int,
                    source: str) -> tuple[int, ...]:
    base = 1 + max(channels, default=0)
    peers_out: dict[tuple[int, int], set[int]] = defaultdict(set)
    peers_in: dict[tuple[int, int], set[int]] = defaultdict(set)
    for t, tr in enumerate(algorithm.transfers):
        peers_out[(tr.src, channels[t])].add(tr.dst)
        peers_in[(tr.dst, channels[t])].add(tr.src)
    if all(len(p) <= per_channel for p in peers_out.values()) and \
            all(len(p) <= per_channel for p in peers_in.values()):
        return channels
    sends: dict[tuple[int, int], int] = defaultdict(int)
    recvs: dict[tuple[int, int], int] = defaultdict(int)
    moved: dict[tuple[int, int, int], int] = {}
    for src, dst, chan in sorted({(tr.src, tr.dst, channels[t]) for t, tr in enumerate(algorithm.transfers)}):
        k = 0
        while sends[(src, chan + k * base)] >= per_channel or recvs[(dst, chan + k * base)] >= per_channel:
            k += 1
        c = chan + k * base
        if c >= max_channels:
            need = max(len(p) for p in list(peers_out.values()) + list(peers_in.values()))
            raise LoweringError(source, "channels", f"at most {per_channel} peers per channel and direction and "
                                f"{max_channels} channels; a rank talks to {need} peers on one channel, which "
                                f"needs more than {max_channels} channels")
        sends[(src, c)] += 1
        recvs[(dst, c)] += 1
        moved[(src, dst, chan)] = c
    return tuple(moved[(tr.src, tr.dst, channels[t])] for t, tr in enumerate(algorithm.transfers))
