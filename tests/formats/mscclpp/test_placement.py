"""Where the executor's addresses land: hand-made 2-rank AllGather plans, one per rule of its address
arithmetic (``Executor::execute`` registers input and output from their allocation's start and passes the
buffers' offsets in them as const offsets), each checked in place and out of place, with the buffers at
their allocation's start and (``offsets``) inside a bigger allocation; and the in-place AllGather across
nodes that the lowering wrote before it knew those rules, refused, beside today's."""
from __future__ import annotations

import copy

import pytest

from autotaccl.baselines import baseline
from autotaccl.formats.mscclpp import PlanOptions, check_plan, lower_plan, parse_plan, to_json
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology

NOP = {"name": "nop"}


def sig(name, kind="memory", ch=0):
    return {"name": name, "channel_ids": [ch], "channel_type": kind}


def buf(kind, index, size=1):
    return {"type": kind, "index": index, "size": size}


def peer_buf(index, size=1, buffer_id=0):
    return {"buffer_id": buffer_id, "index": index, "size": size}


def doc(collective, gpus, ranks_per_node) -> dict:
    return {"name": "hand", "collective": collective, "protocol": "Simple", "inplace": False,
            "reuse_resources": False, "gpus": gpus, "num_threads_per_block": 1024,
            "use_double_scratch_buffer": False, "buffer_alignment": 16, "min_message_size": 0,
            "max_message_size": 2 ** 64 - 1, "autotaccl": {"ranks_per_node": ranks_per_node}}


def gpu(rank, i, o, s, tbs, channels, remote):
    return {"id": rank, "input_chunks": i, "output_chunks": o, "scratch_chunks": s, "threadblocks": tbs,
            "channels": list(channels), "remote_buffers": list(remote), "semaphores": []}


def tb(tb_id, ops, memory=(), port=(), refs=None):
    channels = [{"channel_type": k, "channel_ids": list(v)} for k, v in (("memory", memory), ("port", port)) if v]
    return {"id": tb_id, "ops": ops, "channels": channels, "remote_buffer_refs": refs or []}


def ops_of(data, rank, tb_id=0) -> list:
    return data["gpus"][rank]["threadblocks"][tb_id]["ops"]

MODES = ("inplace", "outofplace")


def verdicts(data) -> dict[tuple[str, bool], bool]:
    """(mode, buffers inside bigger allocations) -> valid, for all four placements."""
    plan = parse_plan(copy.deepcopy(data), "<hand>")
    out = {}
    for mode in MODES:
        out[(mode, False)] = check_plan(plan, "<hand>", mode).valid
        report = check_plan(plan, "<hand>", mode, offsets=True)
        out[(mode, True)] = report.valid
    return out


def first_problem(data, mode, offsets) -> str:
    report = check_plan(parse_plan(copy.deepcopy(data), "<hand>"), "<hand>", mode, offsets=offsets)
    assert not report.valid
    return str(report.first)


def put_plan(kind: str, source, staged: bool = False) -> dict:
    """Rank r sends its block to the peer's o[r] over a ``kind`` channel, reading ``source(r)`` (a
    buffer reference); ``staged`` first copies the input into scratch and sends from there."""
    gpus = []
    for r in (0, 1):
        src = buf("s", 0) if staged else source(r)
        put = {"name": "pwsf" if kind == "port" else "put", "src_buff": [src], "dst_buff": [peer_buf(r)],
               "channel_type": kind}
        ops = [{"name": "copy", "src_buff": [buf("i", 0)], "dst_buff": [buf("o", r)]}]
        if staged:
            ops += [NOP, {"name": "copy", "src_buff": [buf("i", 0)], "dst_buff": [buf("s", 0)]}]
        ops += [NOP, sig("rlxsignal", kind), sig("rlxwait", kind), NOP, put]
        if kind == "port":
            put["channel_ids"] = [0]
            ops += [sig("wait", kind)]
        else:
            ops += [NOP, sig("signal", kind), sig("wait", kind)]
        refs = [{"access_channel_type": kind, "remote_buffer_ids": [0]}]
        gpus.append(gpu(r, 1, 2, 1 if staged else 0, [tb(0, ops, **{kind: [0]}, refs=refs)],
                        [{"channel_type": kind, "connected_to": [1 - r]}],
                        [{"rank": 1 - r, "type": "o", "access_channel_types": [kind]}]))
    return doc("allgather", gpus, ranks_per_node=2 if kind == "memory" else 1)


def put_into(peer_type: str) -> dict:
    """Rank r puts its block over a memory channel into the peer's ``peer_type`` buffer (o at index r, or
    i at index 0): the executor adds rank r's own const offset of that buffer type to the peer's
    registered memory."""
    data = put_plan("memory", lambda r: buf("i", 0))
    for r in (0, 1):
        g = data["gpus"][r]
        g["remote_buffers"][0]["type"] = peer_type
        put = next(op for op in ops_of(data, r) if op["name"] == "put")
        put["dst_buff"] = [peer_buf(r if peer_type == "o" else 0)]
    return data


ALL = {(m, o): True for m in MODES for o in (False, True)}


def test_port_put_source_is_the_registered_memory_without_offset():
    """A port put names registered memory at the plan's index: from the input, right only when the input
    starts its allocation (out of place, nothing in front of it); in place rank 1's input is block 1 of
    the output, so it sends block 0."""
    data = put_plan("port", lambda r: buf("i", 0))
    assert verdicts(data) == {("inplace", False): False, ("inplace", True): False,
                              ("outofplace", False): True, ("outofplace", True): False}
    # rank 1's put reads o[0], the block rank 0 is writing there
    assert "race on rank 1's o[0]: rank 0 tb 0 op 5 (pwsf, call 1) writes it" in first_problem(data, "inplace", False)
    assert "through the registered memory" in first_problem(data, "outofplace", True)


def test_port_put_from_the_common_buffer_is_right_in_place_only_at_the_allocation_start():
    """Naming the output block (the buffer that holds both, in place; the local copy wrote it out of place)
    is right while the output starts its allocation, and wrong inside a bigger one."""
    data = put_plan("port", lambda r: buf("o", r))
    assert verdicts(data) == {("inplace", False): True, ("inplace", True): False,
                              ("outofplace", False): True, ("outofplace", True): False}


def test_port_put_staged_through_scratch_is_right_wherever_the_buffers_sit():
    """Scratch is the executor's own allocation (it always starts it): a local copy into scratch, then a
    port put from there, is right in every placement."""
    assert verdicts(put_plan("port", None, staged=True)) == ALL


def test_memory_put_reads_its_source_through_the_real_pointer():
    """A memory-channel put reads src_buff through the buffer's own pointer: right in place and out of
    place, wherever the buffers sit (the destination is the peer's buffer at this rank's const offset,
    which every rank shares)."""
    assert verdicts(put_plan("memory", lambda r: buf("i", 0))) == ALL
    assert verdicts(put_plan("memory", lambda r: buf("o", r)))[("inplace", True)] is True


def test_own_src_buff_gets_no_const_offset():
    """The executor adds no offset to a rank's own src_buff: a plan that reads the output at index 0 on
    every rank, as if its own block's offset were added, sends block 0 from rank 1 in place."""
    data = put_plan("memory", lambda r: buf("o", 0))
    v = verdicts(data)
    assert v[("inplace", False)] is False and v[("inplace", True)] is False
    assert "rank 0" in first_problem(data, "inplace", False) or "o[1]" in first_problem(data, "inplace", False)


def test_peer_buffer_is_at_the_referring_ranks_const_offset():
    """A peer's buffer (buffer_id) is the peer's registered memory plus the *referring* rank's const offset
    of that buffer type. In place rank r's input offset is block r of the output, so a put into the peer's
    input at index 0 lands in the peer's block r, right wherever the buffers sit (the peer's own offset
    would have put it on the peer's block); out of place it overwrites the peer's input. Naming the peer's
    output at index r is right everywhere."""
    assert verdicts(put_into("i")) == {("inplace", False): True, ("inplace", True): True,
                                       ("outofplace", False): False, ("outofplace", True): False}
    assert verdicts(put_into("o")) == ALL


# --------------------------------------------------------------- the lowering, before and after


def in_place_ring_allgather(placement: str) -> dict:
    graph = build_topology(load_hardware("ndv2"), 2)
    algorithm = baseline(graph, "allgather", "ring")
    return to_json(lower_plan(algorithm, graph, PlanOptions(inplace=True, placement=placement)))


def as_old_lowering(data: dict) -> dict:
    """The plan as the lowering wrote it before it modelled the executor's addresses: a port put's source
    named the rank's input (``i``) for its own block, not that block of the output."""
    old = copy.deepcopy(data)
    n = old["gpus"][0]["input_chunks"]
    changed = 0
    for g in old["gpus"]:
        lo = g["id"] * n
        for block in g["threadblocks"]:
            for op in block["ops"]:
                if op.get("channel_type") != "port":
                    continue
                for ref in op.get("src_buff", []):
                    if ref.get("type") == "o" and lo <= ref["index"] < lo + n:
                        ref.update(type="i", index=ref["index"] - lo)
                        changed += 1
    assert changed, "the in-place plan has no port put of the rank's own block"
    return old


def valid(data, offsets=False) -> bool:
    return check_plan(parse_plan(copy.deepcopy(data), "<plan>"), "<plan>", "inplace", offsets=offsets).valid


def test_in_place_allgather_across_nodes_old_start_and_anywhere():
    """Ring AllGather on ndv2 x2, in place: the old lowering (port puts from ``i``) is refused; placement
    ``start`` (port puts from the output block) passes but not inside bigger allocations; the default
    ``anywhere`` (port puts from scratch) passes both, and its metadata says which it assumes."""
    start = in_place_ring_allgather("start")
    old = as_old_lowering(start)
    report = check_plan(parse_plan(copy.deepcopy(old), "<old>"), "<old>", "inplace")
    assert not report.valid
    assert "race on" in str(report.first) or "ends as" in str(report.first)
    assert valid(start) and not valid(start, offsets=True)
    anywhere = in_place_ring_allgather("anywhere")
    assert valid(anywhere) and valid(anywhere, offsets=True)
    assert (start["autotaccl"]["placement"], anywhere["autotaccl"]["placement"]) == ("start", "anywhere")
    port_sources = {ref["type"] for g in anywhere["gpus"] for block in g["threadblocks"] for op in block["ops"]
                    if op.get("channel_type") == "port" for ref in op.get("src_buff", [])}
    assert port_sources == {"s"}


def test_cli_offsets_replays_buffers_inside_bigger_allocations(tmp_path, capsys):
    import json

    from autotaccl.cli import main

    plain, staged = tmp_path / "port.json", tmp_path / "staged.json"
    plain.write_text(json.dumps(put_plan("port", lambda r: buf("i", 0))))
    staged.write_text(json.dumps(put_plan("port", None, staged=True)))
    assert main(["check-plan", str(plain), "--outofplace"]) == 0
    capsys.readouterr()
    assert main(["check-plan", str(plain), "--outofplace", "--offsets"]) == 1
    out = capsys.readouterr().out
    assert "[outofplace, buffers inside their allocations]" in out and "registered memory" in out
    assert main(["check-plan", str(staged), "--inplace", "--offsets"]) == 0
    assert main(["check-plan", str(staged), "--outofplace", "--offsets"]) == 0
