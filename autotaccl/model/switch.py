"""What in-switch reduction and multicast cost: multimem load-reduce and store through an NVSwitch.

A switch that can reduce (NVLS, the profile's ``nccl.nvls``) serves a group of GPUs. A multimem
load-reduce reads one cell from every GPU of the group and returns their sum to the one that asked; a
multimem store sends one GPU's cell to every GPU of the group. Either moves the cell once over the
asking GPU's port, while the switch fans it in or out over the others' ports.

The runtime runs them as NCCL does: ``channels_on(nodes) * heads`` lanes (thread blocks times the
group's GPUs, each owning a slice) work in parallel; each lane moves its share of a port's bytes in
steps of at most one chunk, and a step costs its bytes at the lane's share of the port rate plus ``op_us``.
The chunk shrinks for smaller calls (NCCL's rule, :func:`nvls_chunk`). Only the Simple protocol moves
data through the switch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .protocols import Nvls

PROTOCOL = "Simple"
COLLECTIVES = ("allreduce", "reducescatter", "allgather")     # what the switch can run


@dataclass(frozen=True)
class SwitchPort:
    """One group's switch as multimem operations see it: its port rate (bytes/µs per GPU and direction,
    after the link's and NVLS's efficiency), the lanes working at once, and the NVLS terms."""

    rate: float
    lanes: int
    nvls: Nvls

    @classmethod
    def of(cls, line_GBps: float, link_efficiency: float, nvls: Nvls, nodes: int, heads: int) -> "SwitchPort":
        """A port of ``line_GBps`` at ``link_efficiency``, ``heads`` GPUs in the group, on ``nodes`` nodes."""
        return cls(line_GBps * 1e3 * link_efficiency * nvls.efficiency, nvls.channels_on(nodes) * heads, nvls)


def switch_port(profile, nodes: int) -> SwitchPort | None:
    """The first switch of ``profile`` where its ``nccl.nvls`` lets it reduce (None otherwise)."""
    nvls = profile.nccl.nvls
    if nvls is None or not profile.switches:
        return None
    switch = profile.switches[0]
    link = profile.link_classes[switch.link_class]
    return SwitchPort.of(link.bandwidth_GBps, link.efficiency, nvls, nodes, len(switch.gpus))


def nvls_chunk(nbytes: float, lanes: int, largest: int) -> int:
    """The chunk one multimem step moves in a call of ``nbytes`` (enqueue.cc: 64 KiB below 64 chunks per
    lane, 32 KiB below 8, 16 KiB below 2)."""
    chunk = largest
    for per_lane, smaller in ((64, 64 << 10), (8, 32 << 10), (2, 16 << 10)):
        if nbytes < per_lane * lanes * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def multimem_us(port_bytes: float, nbytes: float, port: SwitchPort) -> float:
    """Time (µs, without the call's latency) to move ``port_bytes`` per GPU port by multimem operations
    in a call of ``nbytes``: the bytes at the port rate, plus ``op_us`` for every step of the lanes (each
    moves at most one chunk per step)."""
    if port_bytes <= 0:
        return 0.0
    chunk = nvls_chunk(nbytes, port.lanes, port.nvls.chunk_bytes)
    steps = math.ceil(port_bytes / (port.lanes * chunk))
    return port_bytes / port.rate + steps * port.nvls.op_us


def byte_weight(nbytes: float, port: SwitchPort, plain_rate: float, port_bytes: float) -> float:
    """What one byte of a multimem operation in a call of ``nbytes`` costs a switch port, in bytes of a
    copy that moves at ``plain_rate`` (bytes/µs) over it: the port's NVLS rate, and the ``op_us`` of the
    lanes' steps over the busiest port's ``port_bytes`` (rounded up to whole steps, as
    :func:`multimem_us`) spread over those bytes, so the simulator's shared ports charge the switch's
    operations what this model charges them."""
    if port_bytes <= 0:
        return plain_rate / port.rate
    return plain_rate * multimem_us(port_bytes, nbytes, port) / port_bytes


def port_share(collective: str, group: int) -> float:
    """Bytes per port and direction, per byte of the call, of the switch's own ``collective`` over a
    group of ``group`` GPUs: AllReduce load-reduces each GPU's slice and stores it (``1 + 1/group``),
    ReduceScatter only loads, AllGather only stores (``1``)."""
    return 1 + 1 / group if collective == "allreduce" else 1.0


__all__ = ["PROTOCOL", "SwitchPort", "byte_weight", "multimem_us", "nvls_chunk", "port_share", "switch_port"]
