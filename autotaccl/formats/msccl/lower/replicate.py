"""Instances: the algorithm run ``I`` times side by side on disjoint chunks and disjoint channels.

Instance ``i`` of chunk ``c`` (``c = block*k + j``, ``k`` the chunk-up factor) becomes chunk
``block*k*I + i*k + j`` of the same collective with chunk-up ``k*I``: blocked, so the chunks one
transfer moves together stay contiguous. A transfer on link ``l`` of instance ``i`` uses channel
``l*I + i``.
"""
from __future__ import annotations

from ....model.algorithm import Algorithm, Transfer


def instance_chunk(chunk: int, chunkup: int, instances: int, instance: int) -> int:
    block, j = divmod(chunk, chunkup)
    return block * chunkup * instances + instance * chunkup + j


def replicate(algorithm: Algorithm, instances: int) -> tuple[Algorithm, tuple[int, ...]]:
    """(the replicated algorithm, the channel of each of its transfers), transfer ``t`` of instance ``i``
    at position ``t*I + i``."""
    coll = algorithm.collective
    k = coll.chunkup
    transfers, channels = [], []
    for t in algorithm.transfers:
        for i in range(instances):
            chunks = tuple(instance_chunk(c, k, instances, i) for c in t.chunks)
            transfers.append(Transfer(chunks, t.src, t.dst, t.step, t.op, t.link, t.start_us))
            channels.append(t.link * instances + i)
    expanded = Algorithm(algorithm.name, coll.with_chunkup(k * instances), tuple(transfers), algorithm.topology,
                         algorithm.metadata)
    return expanded, tuple(channels)
