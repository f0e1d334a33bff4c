"""A strict reader for MSCCL++ execution plans that follows the executor's parser (``execution_plan.cc``).

It requires what the parser reads unconditionally (``name, collective, protocol, inplace, gpus``; per
GPU ``id`` equal to its position, the three chunk counts, ``threadblocks``, ``channels``,
``remote_buffers``; per thread block ``id`` equal to its position, ``ops``, ``channels``; per operation
``name``; per buffer reference ``index`` and ``size``), applies the parser's defaults to what it reads
with ``value(...)`` (``reuse_resources``, ``num_threads_per_block``, ``use_double_scratch_buffer``,
``buffer_alignment``, the message sizes, ``semaphores``, ``remote_buffer_refs``) and refuses every name
the parser would throw on (operation, buffer, channel type), and switch (NVLS) entries the executor
would index unchecked or fail to join (a group without the GPU, a switch id past the lists). Anything else is
:class:`~autotaccl.errors.InputError` naming the JSON path. Whether the plan *works* is the checker's job.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...documents import read_document
from ...errors import InputError
from ...safety import TOO_DEEP
from .plan import (BUFFERS, NO_LIMIT, OP_NAMES, BufferRef, Channel, Gpu, META_KEY, Op, Plan, PROTOCOLS,
                   RemoteBuffer, ThreadBlock)

MAX_RANKS = 1024
MAX_CHUNKS = 1 << 20          # per buffer: far above any real plan, low enough to replay
MAX_ITEMS = 1 << 16           # thread blocks per GPU, operations per thread block, list entries
_KINDS = {"int": "a whole number", "bool": "true or false", "str": "a string", "list": "a list"}


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, expected: str) -> InputError:
        return InputError(self.source, where, expected)

    def obj(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, "a JSON object")
        return value

    def get(self, obj: dict, key: str, where: str, kind: str, default: Any = ..., low: int = 0,
            high: int | None = None) -> Any:
        """``obj[key]`` of ``kind`` (int, bool, str, list); missing: ``default`` or an error."""
        path = f"{where}.{key}" if where else key
        if key not in obj:
            if default is ...:
                raise self.fail(path, f"{_KINDS[kind]} (the executor reads it unconditionally)")
            return default
        value = obj[key]
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int) or value < low or \
                    (high is not None and value > high):
                raise self.fail(path, f"a whole number in {low}..{high if high is not None else 'any'}")
        elif kind == "bool":
            if not isinstance(value, bool):
                raise self.fail(path, "true or false")
        elif kind == "str":
            if not isinstance(value, str):
                raise self.fail(path, "a string")
        elif kind == "list":
            if not isinstance(value, list) or len(value) > MAX_ITEMS:
                raise self.fail(path, f"a list (of at most {MAX_ITEMS} entries)")
        return value

    def ints(self, obj: dict, key: str, where: str, high: int | None = None, default: Any = ...) -> tuple[int, ...]:
        values = self.get(obj, key, where, "list", default)
        if values is None:
            return None
        path = f"{where}.{key}"
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (high is not None and v > high):
                raise self.fail(f"{path}[{i}]", f"a whole number in 0..{high if high is not None else 'any'}")
        return tuple(values)

    def choice(self, obj: dict, key: str, where: str, choices: tuple[str, ...], default: Any = ...) -> str:
        value = self.get(obj, key, where, "str", default)
        if value is not None and value not in choices:
            raise self.fail(f"{where}.{key}" if where else key, f"one of: {', '.join(choices)}")
        return value


def read_plan(path: str | Path) -> tuple[Plan, str]:
    """(plan, source name) of a plan file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "file", "an existing MSCCL++ execution plan (JSON)")
    return parse_plan(read_document(path, "json"), str(path)), str(path)


def parse_plan(data: Any, source: str = "<plan>") -> Plan:
    try:
        return _plan(_Reader(source), data)
    except RecursionError:
        raise InputError(source, "document", TOO_DEEP) from None


def _plan(rd: _Reader, data: Any) -> Plan:
    top = rd.obj(data, "document")
    name = rd.get(top, "name", "", "str")
    collective = rd.get(top, "collective", "", "str")
    protocol = rd.choice(top, "protocol", "", PROTOCOLS)
    inplace = rd.get(top, "inplace", "", "bool")
    raw_gpus = rd.get(top, "gpus", "", "list")
    if not 1 <= len(raw_gpus) <= MAX_RANKS:
        raise rd.fail("gpus", f"1..{MAX_RANKS} GPUs")
    meta = top.get(META_KEY, {})
    if not isinstance(meta, dict):
        raise rd.fail(META_KEY, "an object")
    ranks = len(raw_gpus)
    gpus = tuple(_gpu(rd, g, r, ranks) for r, g in enumerate(raw_gpus))
    alignment = rd.get(top, "buffer_alignment", "", "int", 16, low=1, high=1 << 20)
    return Plan(name, collective, protocol, inplace, gpus,
                reuse_resources=rd.get(top, "reuse_resources", "", "bool", False),
                num_threads_per_block=rd.get(top, "num_threads_per_block", "", "int", 1024, low=1, high=1024),
                use_double_scratch_buffer=rd.get(top, "use_double_scratch_buffer", "", "bool", False),
                buffer_alignment=alignment,
                min_message_size=rd.get(top, "min_message_size", "", "int", 0, high=NO_LIMIT),
                max_message_size=rd.get(top, "max_message_size", "", "int", NO_LIMIT, high=NO_LIMIT),
                meta=meta)


def _gpu(rd: _Reader, data: Any, rank: int, ranks: int) -> Gpu:
    where = f"gpus[{rank}]"
    g = rd.obj(data, where)
    if rd.get(g, "id", where, "int", high=MAX_RANKS) != rank:
        raise rd.fail(f"{where}.id", f"{rank} (the executor reads gpus[rank] and requires id == rank)")
    chunks = [rd.get(g, key, where, "int", high=MAX_CHUNKS) for key in ("input_chunks", "output_chunks",
                                                                         "scratch_chunks")]
    channels = []
    for i, ch in enumerate(rd.get(g, "channels", where, "list")):
        w = f"{where}.channels[{i}]"
        ch = rd.obj(ch, w)
        kind = rd.choice(ch, "channel_type", w, ("memory", "port", "switch"))
        if kind == "switch":
            groups = []
            for k, grp in enumerate(rd.get(ch, "rank_groups", w, "list")):
                gw = f"{w}.rank_groups[{k}]"
                grp = rd.obj(grp, gw)
                members = rd.ints(grp, "ranks", gw, ranks - 1)
                if rank not in members or len(set(members)) != len(members):
                    raise rd.fail(f"{gw}.ranks", f"distinct ranks that include this GPU ({rank}): the executor "
                                                 "joins the group's NVLS connection and throws if it is not a member")
                groups.append((rd.get(grp, "size", gw, "int", high=MAX_CHUNKS), members))
            channels.append(Channel("switch", buffer_type=rd.choice(ch, "buffer_type", w, BUFFERS),
                                    rank_groups=tuple(groups)))
        else:
            channels.append(Channel(kind, rd.ints(ch, "connected_to", w, ranks - 1)))
    remote = []
    for i, rb in enumerate(rd.get(g, "remote_buffers", where, "list")):
        w = f"{where}.remote_buffers[{i}]"
        rb = rd.obj(rb, w)
        access = rd.get(rb, "access_channel_types", w, "list")
        for k, a in enumerate(access):
            if a not in ("memory", "port"):
                raise rd.fail(f"{w}.access_channel_types[{k}]", "memory or port")
        remote.append(RemoteBuffer(rd.get(rb, "rank", w, "int", high=ranks - 1), rd.choice(rb, "type", w, BUFFERS),
                                   tuple(access)))
    semaphores = []
    for i, sem in enumerate(rd.get(g, "semaphores", where, "list", [])):
        w = f"{where}.semaphores[{i}]"
        semaphores.append(rd.get(rd.obj(sem, w), "init_value", w, "int", high=1 << 30))
    switches = sum(len(ch.rank_groups) for ch in channels if ch.type == "switch")
    tbs = tuple(_threadblock(rd, tb, f"{where}.threadblocks[{t}]", t, switches)
                for t, tb in enumerate(rd.get(g, "threadblocks", where, "list")))
    return Gpu(rank, *chunks, tbs, tuple(channels), tuple(remote), tuple(semaphores))


def _threadblock(rd: _Reader, data: Any, where: str, position: int, switches: int) -> ThreadBlock:
    tb = rd.obj(data, where)
    if rd.get(tb, "id", where, "int", high=MAX_ITEMS) != position:
        raise rd.fail(f"{where}.id", f"{position} (the executor keeps operations in list order but channels by id)")
    channels = []
    for i, ch in enumerate(rd.get(tb, "channels", where, "list")):
        w = f"{where}.channels[{i}]"
        ch = rd.obj(ch, w)
        kind = rd.choice(ch, "channel_type", w, ("memory", "port", "switch"))
        if "buff" in ch:
            rd.choice(ch, "buff", w, BUFFERS)
        ids = rd.ints(ch, "channel_ids", w)
        if kind == "switch":
            for k, c in enumerate(ids):
                if c >= switches:
                    raise rd.fail(f"{w}.channel_ids[{k}]", f"one of the GPU's {switches} switch channels (one per "
                                                           "rank group; the executor indexes them unchecked)")
        channels.append((kind, ids))
    tb_switches = sum(len(ids) for kind, ids in channels if kind == "switch")
    refs = []
    for i, ref in enumerate(rd.get(tb, "remote_buffer_refs", where, "list", [])):
        w = f"{where}.remote_buffer_refs[{i}]"
        ref = rd.obj(ref, w)
        refs.append((rd.choice(ref, "access_channel_type", w, ("memory", "port")),
                     rd.ints(ref, "remote_buffer_ids", w)))
    ops = tuple(_op(rd, op, f"{where}.ops[{k}]", tb_switches)
                for k, op in enumerate(rd.get(tb, "ops", where, "list")))
    return ThreadBlock(position, ops, tuple(channels), tuple(refs))


def _op(rd: _Reader, data: Any, where: str, switches: int, inner: bool = False) -> Op:
    op = rd.obj(data, where)
    name = rd.choice(op, "name", where, OP_NAMES)
    channel_type = rd.choice(op, "channel_type", where, ("memory", "port", "switch", "none"), None)
    channel_ids = rd.ints(op, "channel_ids", where, 255, None)
    tbg = None
    if "tbg_info" in op:
        w = f"{where}.tbg_info"
        info = rd.obj(op["tbg_info"], w)
        size = rd.get(info, "tbg_size", w, "int", low=1, high=1024)
        tbg = (rd.get(info, "tb_id", w, "int", high=size - 1), size)
    bufs = {}
    for key in ("src_buff", "dst_buff"):
        refs = []
        for i, ref in enumerate(rd.get(op, key, where, "list", [])):
            w = f"{where}.{key}[{i}]"
            ref = rd.obj(ref, w)
            kinds = [k for k in ("type", "buffer_id", "switch_channel_id") if k in ref]
            if len(kinds) != 1:
                raise rd.fail(w, "exactly one of type (a local buffer), buffer_id (a peer's) or switch_channel_id")
            switch = rd.get(ref, "switch_channel_id", w, "int", None, high=255)
            if switch is not None and switch >= switches:
                raise rd.fail(f"{w}.switch_channel_id", f"one of the thread block's {switches} switch channels "
                                                        "(the executor indexes them unchecked)")
            refs.append(BufferRef(rd.get(ref, "index", w, "int", high=MAX_CHUNKS),
                                  rd.get(ref, "size", w, "int", high=MAX_CHUNKS),
                                  type=rd.choice(ref, "type", w, BUFFERS, None),
                                  buffer_id=rd.get(ref, "buffer_id", w, "int", None, high=255),
                                  switch_channel_id=switch))
        bufs[key] = tuple(refs)
    sems = rd.ints(op, "semaphore_ids", where, None, None)
    barrier = rd.get(op, "barrier_id", where, "int", None, high=1 << 20)
    nblocks = rd.get(op, "num_threadblocks", where, "int", None, high=MAX_ITEMS)
    reduce_op = rd.get(op, "reduce_op", where, "str", None)
    iter_context, inner_ops = None, ()
    if name == "pipeline":
        if inner:
            raise rd.fail(f"{where}.name", "an operation other than pipeline (pipelines do not nest)")
        w = f"{where}.iter_context"
        ctx = rd.obj(op.get("iter_context"), w)
        iter_context = {"unit_size": rd.get(ctx, "unit_size", w, "int", low=1, high=1 << 32),
                        "num_chunks": rd.get(ctx, "num_chunks", w, "int", high=MAX_CHUNKS)}
        inner_ops = tuple(_op(rd, o, f"{where}.ops[{k}]", switches, inner=True)
                          for k, o in enumerate(rd.get(op, "ops", where, "list")))
    return Op(name, channel_type, channel_ids, bufs["src_buff"], bufs["dst_buff"], sems, barrier, nblocks, tbg,
              reduce_op, inner_ops, iter_context)
