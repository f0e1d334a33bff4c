"""An MSCCL++ execution plan as plain data, its JSON form, and the executor's constants.

The JSON form is what ``mscclpp``'s executor reads (``src/core/executor/execution_plan.cc``): a top
level (``name, collective, protocol, inplace, ...``), one entry per GPU in rank order with its buffer
sizes in chunks, its channels, the peer buffers it writes or reads, its semaphores and its thread
blocks, and per thread block the operations it runs in order. Chunk indices become byte offsets in the
executor: every buffer is cut into chunks of one size (``input size / input_chunks``). Channel and
buffer ids in an operation index the thread block's own lists, which index the GPU's lists.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

PROTOCOLS = ("Simple", "LL")
#: the protocol a plan runs for each NCCL protocol: MSCCL++ has no LL128, so that runs Simple
PLAN_PROTOCOL = {"LL": "LL", "LL128": "Simple", "Simple": "Simple"}
BUFFERS = ("i", "o", "s")
CHANNEL_TYPES = ("memory", "port", "switch", "none")
#: the collectives whose postcondition the checker proves (the IR's five)
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast")
#: every operation name the executor's parser accepts
OP_NAMES = ("nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re", "res", "rre",
            "rres", "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "glres", "gstore",
            "gstorepkt", "rlxsignal", "rlxwait", "pipeline", "sem_acquire", "sem_release")
PACKET_OPS = frozenset(("ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt"))
NO_LIMIT = (1 << 64) - 1                 # the executor's default max_message_size

# execution_common.hpp
MAX_OPERATIONS = 64                      # per thread block (a pipeline counts its inner operations too)
MAX_CHANNELS = 16                        # per thread block and channel type
MAX_CHANNELS_PER_OP = 8
MAX_BUFFERS_PER_OP = 10                  # MAX_LOCAL_BUFFER_PER_OPERATION + MAX_CHANNEL_PER_OPERATION
MAX_REMOTE_BUFFERS = 16                  # per thread block and channel type (RemoteBuffers arrays)
MAX_SYNCERS = 16                         # device syncers (barrier ids)
MAX_SEMAPHORES_PER_OP = 16
#: every thread block of the kernel spins on the others, so all must be resident at once (one per SM,
#: __launch_bounds__(1024, 1)); a V100, the smallest GPU of the shipped profiles, has 80 SMs
MAX_RESIDENT_TBS = 80


@dataclass(frozen=True)
class BufferRef:
    """``index``/``size`` in chunks of a local buffer (``type``), a peer's buffer (``buffer_id`` into the
    thread block's remote buffer refs of the operation's channel type) or a switch channel."""
    index: int
    size: int
    type: str | None = None
    buffer_id: int | None = None
    switch_channel_id: int | None = None

    def to_json(self) -> dict:
        if self.buffer_id is not None:
            return {"buffer_id": self.buffer_id, "index": self.index, "size": self.size}
        if self.switch_channel_id is not None:
            return {"switch_channel_id": self.switch_channel_id, "index": self.index, "size": self.size}
        return {"type": self.type, "index": self.index, "size": self.size}


@dataclass(frozen=True)
class Op:
    name: str
    channel_type: str | None = None
    channel_ids: tuple[int, ...] | None = None        # into the thread block's channels of channel_type
    src: tuple[BufferRef, ...] = ()
    dst: tuple[BufferRef, ...] = ()
    semaphore_ids: tuple[int, ...] | None = None
    barrier_id: int | None = None
    num_threadblocks: int | None = None
    tbg: tuple[int, int] | None = None                # (tb_id, tbg_size): this block's share of the buffers
    reduce_op: str | None = None
    inner: tuple["Op", ...] = ()                      # a pipeline's operations
    iter_context: Mapping[str, int] | None = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {"name": self.name}
        if self.src or self.dst:
            out["src_buff"] = [b.to_json() for b in self.src]
            out["dst_buff"] = [b.to_json() for b in self.dst]
        if self.channel_ids is not None:
            out["channel_ids"] = list(self.channel_ids)
        if self.channel_type is not None:
            out["channel_type"] = self.channel_type
        if self.reduce_op is not None:
            out["reduce_op"] = self.reduce_op
        if self.semaphore_ids is not None:
            out["semaphore_ids"] = list(self.semaphore_ids)
        if self.barrier_id is not None:
            out["barrier_id"] = self.barrier_id
            out["num_threadblocks"] = self.num_threadblocks
        if self.tbg is not None:
            out["tbg_info"] = {"tb_id": self.tbg[0], "tbg_size": self.tbg[1]}
        if self.name == "pipeline":
            out["iter_context"] = dict(self.iter_context or {})
            out["ops"] = [op.to_json() for op in self.inner]
        return out


@dataclass(frozen=True)
class ThreadBlock:
    id: int
    ops: tuple[Op, ...]
    channels: tuple[tuple[str, tuple[int, ...]], ...] = ()            # (type, ids into the GPU's channels)
    remote_buffer_refs: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (access type, ids into remote_buffers)

    def channel_list(self, kind: str) -> tuple[int, ...]:
        return tuple(i for t, ids in self.channels if t == kind for i in ids)

    def buffer_list(self, kind: str) -> tuple[int, ...]:
        return tuple(i for t, ids in self.remote_buffer_refs if t == kind for i in ids)

    @property
    def num_operations(self) -> int:
        """What the executor counts against MAX_OPERATIONS: a pipeline's inner operations too."""
        return sum(1 + len(op.inner) for op in self.ops)

    def to_json(self) -> dict:
        return {"id": self.id, "ops": [op.to_json() for op in self.ops],
                "channels": [{"channel_type": t, "channel_ids": list(ids)} for t, ids in self.channels],
                "remote_buffer_refs": [{"access_channel_type": t, "remote_buffer_ids": list(ids)}
                                       for t, ids in self.remote_buffer_refs]}


@dataclass(frozen=True)
class Channel:
    """One ``channels`` entry: for memory and port channels the peers (one channel per peer, numbered
    across the GPU's entries of that type); a switch channel's buffer and rank groups."""
    type: str
    peers: tuple[int, ...] = ()
    buffer_type: str | None = None
    rank_groups: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def to_json(self) -> dict:
        if self.type == "switch":
            return {"channel_type": "switch", "buffer_type": self.buffer_type,
                    "rank_groups": [{"size": s, "ranks": list(r)} for s, r in self.rank_groups]}
        return {"channel_type": self.type, "connected_to": list(self.peers)}


@dataclass(frozen=True)
class RemoteBuffer:
    rank: int
    type: str
    access: tuple[str, ...]

    def to_json(self) -> dict:
        return {"rank": self.rank, "type": self.type, "access_channel_types": list(self.access)}


@dataclass(frozen=True)
class Gpu:
    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    threadblocks: tuple[ThreadBlock, ...]
    channels: tuple[Channel, ...] = ()
    remote_buffers: tuple[RemoteBuffer, ...] = ()
    semaphores: tuple[int, ...] = ()                  # initial values

    def switch_channels(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(buffer type, ranks) of each switch (NVLS) channel in the executor's numbering: one per rank
        group, across the GPU's switch entries in order."""
        return tuple((ch.buffer_type, ranks) for ch in self.channels if ch.type == "switch"
                     for _, ranks in ch.rank_groups)

    def peers(self, kind: str) -> tuple[int, ...]:
        """The peer of each channel of ``kind``, in the executor's numbering."""
        return tuple(p for ch in self.channels if ch.type == kind for p in ch.peers)

    def to_json(self) -> dict:
        return {"id": self.id, "input_chunks": self.input_chunks, "output_chunks": self.output_chunks,
                "scratch_chunks": self.scratch_chunks, "threadblocks": [tb.to_json() for tb in self.threadblocks],
                "channels": [ch.to_json() for ch in self.channels],
                "remote_buffers": [rb.to_json() for rb in self.remote_buffers],
                "semaphores": [{"init_value": v} for v in self.semaphores]}


@dataclass(frozen=True)
class Plan:
    name: str
    collective: str
    protocol: str
    inplace: bool
    gpus: tuple[Gpu, ...]
    reuse_resources: bool = False
    num_threads_per_block: int = 1024
    use_double_scratch_buffer: bool = False
    buffer_alignment: int = 16
    min_message_size: int = 0
    max_message_size: int = NO_LIMIT
    #: our own top-level key (the executor ignores keys it does not read): ranks per node, root, source
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ranks(self) -> int:
        return len(self.gpus)


META_KEY = "autotaccl"


def to_json(plan: Plan) -> dict:
    """The plan as the executor reads it, in the key order the MSCCL++ DSL writes."""
    out = {"name": plan.name, "collective": plan.collective, "protocol": plan.protocol, "inplace": plan.inplace,
           "reuse_resources": plan.reuse_resources, "gpus": [g.to_json() for g in plan.gpus],
           "num_threads_per_block": plan.num_threads_per_block,
           "use_double_scratch_buffer": plan.use_double_scratch_buffer, "buffer_alignment": plan.buffer_alignment,
           "min_message_size": plan.min_message_size, "max_message_size": plan.max_message_size}
    if plan.meta:
        out[META_KEY] = dict(plan.meta)
    return out


def channel_partners(plan: Plan) -> dict[tuple[int, str, int], tuple[int, int] | None]:
    """(rank, type, channel) -> (peer, the peer's channel it is connected to), or None if unpaired.

    The executor connects a rank's ``k``-th channel of a type to a peer with the peer's ``k``-th channel
    of that type back to the rank (one connection tag per peer, memory channels before port channels).
    """
    out: dict[tuple[int, str, int], tuple[int, int] | None] = {}
    for gpu in plan.gpus:
        for kind in ("memory", "port"):
            seen: dict[int, int] = {}
            for j, peer in enumerate(gpu.peers(kind)):
                k = seen.get(peer, 0)
                seen[peer] = k + 1
                back = [i for i, p in enumerate(plan.gpus[peer].peers(kind)) if p == gpu.id] \
                    if peer < len(plan.gpus) else []
                out[(gpu.id, kind, j)] = (peer, back[k]) if k < len(back) else None
    return out


def switch_channel(gpu: Gpu, tb: ThreadBlock, ref: BufferRef) -> tuple[str, tuple[int, ...]]:
    """(buffer type, ranks) of the switch channel a ``switch_channel_id`` reference names (the reader
    checked that it resolves)."""
    return gpu.switch_channels()[tb.channel_list("switch")[ref.switch_channel_id]]


def remote_buffer(gpu: Gpu, tb: ThreadBlock, kind: str, buffer_id: int) -> RemoteBuffer | None:
    """The peer buffer an operation's ``buffer_id`` names (through the thread block's refs of ``kind``)."""
    ids = tb.buffer_list(kind)
    if not 0 <= buffer_id < len(ids) or not 0 <= ids[buffer_id] < len(gpu.remote_buffers):
        return None
    return gpu.remote_buffers[ids[buffer_id]]
