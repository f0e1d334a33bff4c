"""Instances: the algorithm run ``I`` times side by side on disjoint chunks and disjoint channels.

Instance ``i`` of chunk ``c`` (``c = block*k + j``, ``k`` the chunk-up factor) becomes chunk
``block*k*I + i*k + j`` of the same collective with chunk-up ``k*I``: blocked, so the chunks one
transfer moves together stay contiguous. The algorithm's own channels and links form its *lanes*: a
transfer on channel ``c`` and link ``l`` (of ``L`` links) is on lane ``c*L + l``, and lane ``n`` of
instance ``i`` uses NCCL channel ``n*I + i``.
"""
from __future__ import annotations

from dataclasses import replace

from ....model.algorithm import Algorithm


def instance_chunk(chunk: int, chunkup: int, instances: int, instance: int) -> int:
    block, j = divmod(chunk, chunkup)
    return block * chunkup * instances + instance * chunkup + j


def original_chunk(chunk: int, chunkup: int, instances: int) -> int:
    """The chunk of the algorithm that ``chunk`` of the replicated one (chunk-up ``chunkup * instances``)
    is an instance of (:func:`instance_chunk`'s inverse, up to the instance)."""
    block, rest = divmod(chunk, chunkup * instances)
    return block * chunkup + rest % chunkup


def lanes(algorithm: Algorithm) -> int:
    """How many lanes the algorithm's channels and links need: lane ``channel * L + link``, ``L`` links."""
    return _links(algorithm) * (1 + max((t.channel for t in algorithm.transfers), default=0))


def transfer_lanes(algorithm: Algorithm) -> tuple[int, ...]:
    """Each transfer's lane, ``channel * L + link`` (``L`` links)."""
    links = _links(algorithm)
    return tuple(t.channel * links + t.link for t in algorithm.transfers)


def _links(algorithm: Algorithm) -> int:
    return 1 + max((t.link for t in algorithm.transfers), default=0)


def replicate(algorithm: Algorithm, instances: int) -> tuple[Algorithm, tuple[int, ...]]:
    """(the replicated algorithm, the channel of each of its transfers), transfer ``t`` of instance ``i``
    at position ``t*I + i``."""
    coll = algorithm.collective
    k = coll.chunkup
    transfers, channels = [], []
    for t, lane in zip(algorithm.transfers, transfer_lanes(algorithm)):
        for i in range(instances):
            chunks = tuple(instance_chunk(c, k, instances, i) for c in t.chunks)
            transfers.append(replace(t, chunks=chunks))
            channels.append(lane * instances + i)
    expanded = Algorithm(algorithm.name, coll.with_chunkup(k * instances), tuple(transfers), algorithm.topology,
                         algorithm.metadata)
    return expanded, tuple(channels)
