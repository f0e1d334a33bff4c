"""The MSCCL XML program as plain data, shared by the lowering (which builds it), the writer, the parser
and the checker (which read it), plus the runtimes' constants (``msccl-xml-and-nccl-tests.md`` §1.9).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, get_args

from ...model.buffers import inplace_layout

Runtime = Literal["msccl-executor", "msccl"]
Protocol = Literal["Simple", "LL", "LL128"]
RUNTIMES: tuple[Runtime, ...] = get_args(Runtime)
PROTOCOLS: tuple[Protocol, ...] = get_args(Protocol)
BUFFERS = ("i", "o", "s")
STEP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop", "ra")
SENDS = frozenset(("s", "rcs", "rrs", "rrcs"))
RECEIVES = frozenset(("r", "rcs", "rrs", "rrc", "rrcs"))

#: the ``coll`` value each runtime accepts for each collective (None: not accepted)
COLL_NAMES = {
    "msccl-executor": {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reducescatter",
                       "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce"},
    "msccl": {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
              "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce"},
}
#: ``coll`` attribute value -> our collective name, per runtime (what that runtime accepts)
COLL_ACCEPTED = {
    "msccl-executor": {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reducescatter",
                       "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce", "alltoallv": None,
                       "send": None, "recv": None, "gather": None, "scatter": None},
    "msccl": {"allreduce": "allreduce", "allgather": "allgather", "reduce_scatter": "reducescatter",
              "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce", "custom": None},
}
HEADER_REQUIRED = {
    "msccl-executor": ("proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                       "minBytes", "maxBytes"),
    "msccl": ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace"),
}
GPU_ATTRS = ("id", "i_chunks", "o_chunks", "s_chunks")
TB_ATTRS = ("id", "send", "recv", "chan")
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")


@dataclass(frozen=True)
class Limits:
    """Hard limits of one runtime."""
    steps_per_tb: int
    tbs_per_gpu: int
    channels: int = 32
    max_cnt: int = 71
    dep_target_tb: int = 127
    nodes_per_rank: int = 4096
    max_offset: int = 32767
    attrs_per_element: int = 16
    chars_per_value: int = 255
    children_per_element: int = 1024
    tbs_per_channel_direction: int = 32


LIMITS = {"msccl-executor": Limits(steps_per_tb=64, tbs_per_gpu=1024),
          "msccl": Limits(steps_per_tb=256, tbs_per_gpu=216)}
#: legacy runtime: maxBytes is exclusive and defaults to 2^27; we write 1 GiB for "no limit"
LEGACY_NO_LIMIT = 1 << 30


def inplace_cell(coll: str, per_rank: int, rank: int, buf: str, off: int) -> tuple[str, int]:
    """The memory cell ``buf[off]`` of ``rank`` names in an in-place call (§1.6): ``i`` and ``o`` alias
    as :func:`autotaccl.model.buffers.inplace_layout` says, and a cell is named after the buffer that holds both.

    ``per_rank`` = nchunksperloop / ngpus. AllGather: i[j] = o[rank*per_rank+j]; ReduceScatter:
    o[j] = i[rank*per_rank+j]; every other collective: o[k] = i[k].
    """
    if buf not in ("i", "o"):
        return buf, off
    alias = inplace_layout(coll, per_rank, rank)
    return _XML_BUFFER[alias.holder], off + (alias.input_offset if buf == "i" else alias.output_offset)


_XML_BUFFER = {"input": "i", "output": "o"}


@dataclass(frozen=True)
class Step:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int = -1
    deps: int = -1
    hasdep: int = 0
    line: int = 0
    xfer: int | None = None   # optional: the IR transfer a receive step receives (runtimes ignore it)


@dataclass(frozen=True)
class ThreadBlock:
    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]
    line: int = 0


@dataclass(frozen=True)
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: tuple[ThreadBlock, ...]
    line: int = 0


@dataclass(frozen=True)
class Program:
    """One ``<algo>``: ``header`` holds its attributes as written (strings), in order."""
    header: Mapping[str, str]
    gpus: tuple[Gpu, ...]
    line: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)

    def int_attr(self, name: str, default: int | None = None) -> int | None:
        value = self.header.get(name)
        return default if value is None else int(value)

    @property
    def ngpus(self) -> int:
        return int(self.header["ngpus"])

    @property
    def nchunksperloop(self) -> int:
        return int(self.header["nchunksperloop"])

    @property
    def coll(self) -> str:
        return self.header["coll"]

    def chunks(self, gpu: Gpu, buf: str) -> int:
        return {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}[buf]
