"""The replaying plan checker: hand-written plans in the executor's JSON format, correct ones accepted
and broken ones (a missing wait, a shifted index, a dropped put, a put after its signal, a missing nop,
a missing handshake, an unflushed port put, a packet slot reused too soon, a deadlock, the executor's
limits) rejected with the first violation named."""
from __future__ import annotations

import copy
import json

import pytest

from autotaccl.cli import main
from autotaccl.errors import InputError
from autotaccl.formats.mscclpp import check_plan, parse_plan


def sig(name, kind="memory", ch=0):
    return {"name": name, "channel_ids": [ch], "channel_type": kind}


NOP = {"name": "nop"}


def buf(kind, index, size=1):
    return {"type": kind, "index": index, "size": size}


def peer_buf(index, size=1, buffer_id=0):
    return {"buffer_id": buffer_id, "index": index, "size": size}


def doc(collective, gpus, protocol="Simple", inplace=False, double=False, ranks_per_node=None) -> dict:
    out = {"name": "hand", "collective": collective, "protocol": protocol, "inplace": inplace,
           "reuse_resources": False, "gpus": gpus, "num_threads_per_block": 1024,
           "use_double_scratch_buffer": double, "buffer_alignment": 16, "min_message_size": 0,
           "max_message_size": 2 ** 64 - 1}
    if ranks_per_node:
        out["autotaccl"] = {"ranks_per_node": ranks_per_node}
    return out


def gpu(rank, i, o, s, tbs, channels=(), remote=(), semaphores=()):
    return {"id": rank, "input_chunks": i, "output_chunks": o, "scratch_chunks": s, "threadblocks": tbs,
            "channels": list(channels), "remote_buffers": list(remote),
            "semaphores": [{"init_value": v} for v in semaphores]}


def tb(tb_id, ops, memory=(), port=(), refs=None):
    channels = [{"channel_type": k, "channel_ids": list(v)} for k, v in (("memory", memory), ("port", port)) if v]
    return {"id": tb_id, "ops": ops, "channels": channels, "remote_buffer_refs": refs or []}


def allgather2(kind="memory", last_put="put") -> dict:
    """Out-of-place AllGather on 2 ranks: handshake, put own chunk into the peer's output, signal, wait."""
    gpus = []
    for r in (0, 1):
        put = {"name": last_put if kind == "port" else "put", "src_buff": [buf("i", 0)],
               "dst_buff": [peer_buf(r)], "channel_type": kind}
        if kind == "port":
            put["channel_ids"] = [0]
        ops = [sig("rlxsignal", kind), sig("rlxwait", kind), NOP, put,
               {"name": "copy", "src_buff": [buf("i", 0)], "dst_buff": [buf("o", r)]}]
        ops += [sig("wait", kind)] if kind == "port" and last_put != "put" else [NOP, sig("signal", kind),
                                                                                   sig("wait", kind)]
        refs = [{"access_channel_type": kind, "remote_buffer_ids": [0]}]
        gpus.append(gpu(r, 1, 2, 0, [tb(0, ops, **{kind: [0]}, refs=refs)],
                        [{"channel_type": kind, "connected_to": [1 - r]}],
                        [{"rank": 1 - r, "type": "o", "access_channel_types": [kind]}]))
    return doc("allgather", gpus, ranks_per_node=2 if kind == "memory" else 1)


def check(data, mode="plan", ranks_per_node=None):
    return check_plan(parse_plan(copy.deepcopy(data), "<hand>"), "<hand>", mode, ranks_per_node)


def ops_of(data, rank, tb_id=0) -> list:
    return data["gpus"][rank]["threadblocks"][tb_id]["ops"]


def test_a_correct_hand_written_plan_is_valid():
    report = check(allgather2())
    assert report.valid, str(report)
    assert report.calls == 2 and report.modes == ("outofplace",)
    assert report.stats["threadblocks"] == 2 and report.stats["operations"] == 16


def test_a_missing_wait_is_rejected():
    data = allgather2()
    ops_of(data, 1).pop()                 # rank 1 no longer waits for rank 0's data
    report = check(data)
    assert not report.valid
    assert "2 signal(s) per call but rank 1 waits 1 time(s)" in str(report.first)


def test_a_shifted_index_is_rejected():
    data = allgather2()
    ops_of(data, 0)[3]["dst_buff"][0]["index"] = 1       # rank 0 writes over rank 1's own block
    report = check(data)
    assert not report.valid
    assert "race on rank 1's o[1]" in str(report.first) or "output o[0]" in str(report.first)


def test_a_dropped_put_is_rejected():
    data = allgather2()
    del ops_of(data, 0)[3]
    report = check(data)
    assert not report.valid and report.first.rank == 1
    assert "output o[0] ends as unwritten o[0] of rank 1 but allgather needs in0[0]@call1" in report.first.message


def test_a_put_after_its_signal_is_rejected():
    data = allgather2()
    ops = ops_of(data, 0)
    ops[3], ops[6] = ops[6], ops[3]      # signal, then put
    report = check(data)
    assert not report.valid
    assert "rank 1's o[0]" in report.first.message
    assert "race" in report.first.message or "unwritten" in report.first.message


def test_a_put_beside_its_signal_races_the_reader():
    data = allgather2()
    del ops_of(data, 0)[5]               # no nop between the put and the signal: threads signal before all wrote
    report = check(data)
    assert not report.valid
    first = report.first
    assert "race on rank 1's o[0]: rank 0 tb 0 op 3 (put, call 1) writes it" in first.message
    assert first.rank == 1                # found where the result is read: rank 1's host after the call


def test_the_start_handshake_keeps_the_next_call_out():
    """Without rlxsignal/rlxwait a fast rank's next call writes into a peer that may still be in the
    previous one (here: while the peer's host reads its result)."""
    data = allgather2()
    for r in (0, 1):
        del ops_of(data, r)[:3]
    report = check(data)
    assert not report.valid and report.first.call == 2
    assert "race on rank 1's o[0]" in report.first.message and "host" in report.first.message


def test_a_wait_before_every_signal_deadlocks():
    data = allgather2()
    for r in (0, 1):
        ops = ops_of(data, r)
        ops[6], ops[7] = ops[7], ops[6]
    report = check(data)
    assert not report.valid
    assert report.first.message.startswith("deadlock: waits for signal 2 from rank")


def test_memory_channels_must_stay_inside_a_node():
    report = check(allgather2(), ranks_per_node=1)
    assert not report.valid
    assert "memory channel 0 connects ranks 0 and 1 of different nodes" in str(report.first)


def test_an_unflushed_port_put_races_the_next_call_input():
    """The proxy reads a port put's source whenever it gets to it: without pwsf the rank's next call may
    overwrite the input first. The kernel's own flush op takes its channel count from dst_buff, so a
    plain flush does not help (and is warned about)."""
    assert check(allgather2("port", "pwsf")).valid
    report = check(allgather2("port", "pws"))
    assert not report.valid and report.first.call == 2
    assert "rank 0's i[0]" in report.first.message and "host's next input write" in report.first.message
    data = allgather2("port", "pws")
    for r in (0, 1):
        ops_of(data, r).insert(4, {"name": "flush", "channel_ids": [0], "channel_type": "port"})
    report = check(data)
    assert not report.valid
    assert any("flushes nothing" in w.message for w in report.warnings)


def ll_allgather2(double: bool) -> dict:
    """LL AllGather on 2 ranks: packets into the peer's scratch, unpacked there; no signals."""
    gpus = []
    for r in (0, 1):
        ops = [{"name": "ppkt", "src_buff": [buf("i", 0)], "dst_buff": [peer_buf(0)], "channel_type": "memory"},
               {"name": "copy", "src_buff": [buf("i", 0)], "dst_buff": [buf("o", r)]},
               {"name": "upkt", "src_buff": [buf("s", 0)], "dst_buff": [buf("o", 1 - r)]}]
        gpus.append(gpu(r, 1, 2, 1, [tb(0, ops, memory=[0], refs=[{"access_channel_type": "memory",
                                                                    "remote_buffer_ids": [0]}])],
                        [{"channel_type": "memory", "connected_to": [1 - r]}],
                        [{"rank": 1 - r, "type": "s", "access_channel_types": ["memory"]}]))
    return doc("allgather", gpus, protocol="LL", double=double, ranks_per_node=2)


def test_ll_packets_need_the_double_scratch_buffer_or_a_handshake():
    report = check(ll_allgather2(double=True))
    assert report.valid and report.calls == 3, str(report)
    report = check(ll_allgather2(double=False))
    assert not report.valid and report.first.call == 2
    assert "race on rank 1's s[0]" in report.first.message
    simple = ll_allgather2(double=True)
    simple["protocol"] = "Simple"
    assert "ppkt is a packet operation but the protocol is Simple" in str(check(simple).first)


def chain3(with_acquire: bool = True) -> dict:
    """Broadcast 0 -> 1 -> 2: rank 1 receives in one thread block and forwards from another, ordered by a
    semaphore."""
    mem = "memory"
    put = {"name": "put", "src_buff": [buf("i", 0)], "dst_buff": [peer_buf(0)], "channel_type": mem}
    fwd = {"name": "put", "src_buff": [buf("o", 0)], "dst_buff": [peer_buf(0)], "channel_type": mem}
    copy0 = {"name": "copy", "src_buff": [buf("i", 0)], "dst_buff": [buf("o", 0)]}
    refs = [{"access_channel_type": mem, "remote_buffer_ids": [0]}]
    g0 = gpu(0, 1, 1, 0, [tb(0, [sig("rlxwait"), NOP, put, copy0, NOP, sig("signal")], memory=[0], refs=refs)],
             [{"channel_type": mem, "connected_to": [1]}], [{"rank": 1, "type": "o", "access_channel_types": [mem]}])
    acquire = [{"name": "sem_acquire", "semaphore_ids": [0]}, NOP] if with_acquire else []
    g1 = gpu(1, 1, 1, 0, [tb(0, [sig("rlxsignal"), sig("wait"), NOP, {"name": "sem_release", "semaphore_ids": [0]}],
                              memory=[0]),
                           tb(1, [sig("rlxwait", ch=0)] + acquire + [NOP, fwd, NOP, sig("signal", ch=0)], memory=[1],
                              refs=refs)],
             [{"channel_type": mem, "connected_to": [0, 2]}],
             [{"rank": 2, "type": "o", "access_channel_types": [mem]}], semaphores=[0])
    g2 = gpu(2, 1, 1, 0, [tb(0, [sig("rlxsignal"), sig("wait")], memory=[0])],
             [{"channel_type": mem, "connected_to": [1]}])
    return doc("broadcast", [g0, g1, g2], ranks_per_node=3)


def test_semaphores_order_thread_blocks_of_one_rank():
    assert check(chain3()).valid
    report = check(chain3(with_acquire=False))
    assert not report.valid
    assert "race on rank 1's o[0]: rank 1 tb 0 op 1 (wait, call 1) writes it" in report.first.message or \
        "rank 1's o[0]" in report.first.message


def test_executor_limits():
    data = allgather2()
    ops_of(data, 0).extend([NOP] * (65 - len(ops_of(data, 0))))
    assert "65 operations; the executor allows 64 per thread block (1 too many)" in str(check(data).first)
    data = allgather2()
    for r in (0, 1):
        data["gpus"][r]["channels"][0]["connected_to"] = [1 - r] * 17
        data["gpus"][r]["threadblocks"][0]["channels"][0]["channel_ids"] = list(range(17))
    assert "17 memory channels; at most 16 per thread block" in str(check(data).first)
    data = allgather2()
    ops_of(data, 0)[3]["dst_buff"][0]["index"] = 2
    assert "outside rank 1's o (2 chunks)" in str(check(data).first)


def test_plans_the_checker_cannot_prove_are_invalid_not_errors():
    data = allgather2()
    data["collective"] = "sendrecv"
    assert "the checker proves" in str(check(data).first)
    data = allgather2()
    ops_of(data, 0).insert(0, {"name": "pipeline", "iter_context": {"unit_size": 1024, "num_chunks": 1},
                               "ops": [NOP]})
    assert "does not model pipelined loops" in str(check(data).first)


def test_in_place_aliasing_is_checked_in_the_mode_asked_for():
    """The plan is for out-of-place calls; in place, rank r's input is its own output block, so the copy
    is an identity and the plan still holds."""
    assert check(allgather2(), mode="inplace").valid
    data = allgather2()
    for r in (0, 1):
        ops_of(data, r)[3]["src_buff"][0] = buf("o", 1 - r)     # sends the peer's block instead of its own
    assert check(data, mode="outofplace").valid is False


@pytest.mark.parametrize("path, change, field", [
    ("gpus[1].id", lambda d: d["gpus"][1].update(id=0), "gpus[1].id"),
    ("op name", lambda d: ops_of(d, 0).append({"name": "send"}), "gpus[0].threadblocks[0].ops[8].name"),
    ("protocol", lambda d: d.update(protocol="LL128"), "protocol"),
    ("inplace", lambda d: d.update(inplace=1), "inplace"),
    ("buffer", lambda d: ops_of(d, 0)[4]["src_buff"][0].update(type="x"), "gpus[0].threadblocks[0].ops[4].src_buff[0].type"),
    ("tb id", lambda d: d["gpus"][0]["threadblocks"][0].update(id=3), "gpus[0].threadblocks[0].id"),
    ("missing", lambda d: d["gpus"][0].pop("remote_buffers"), "gpus[0].remote_buffers"),
    ("two refs", lambda d: ops_of(d, 0)[3]["dst_buff"][0].update(type="o"), "gpus[0].threadblocks[0].ops[3].dst_buff[0]"),
])
def test_what_the_executor_cannot_parse_is_bad_input(path, change, field):
    data = allgather2()
    change(data)
    with pytest.raises(InputError) as err:
        parse_plan(data, "p.json")
    assert err.value.field == field and err.value.source == "p.json"


def test_reader_applies_the_executor_defaults():
    data = allgather2()
    for key in ("reuse_resources", "num_threads_per_block", "use_double_scratch_buffer", "buffer_alignment",
                "min_message_size", "max_message_size", "autotaccl"):
        data.pop(key, None)
    for g in data["gpus"]:
        g.pop("semaphores")
        g["threadblocks"][0].pop("remote_buffer_refs")
    plan = parse_plan(data)
    assert (plan.buffer_alignment, plan.num_threads_per_block, plan.max_message_size) == (16, 1024, 2 ** 64 - 1)
    assert plan.gpus[0].semaphores == () and plan.gpus[0].threadblocks[0].remote_buffer_refs == ()
    report = check_plan(plan)        # without its buffer refs the put names no peer buffer
    assert "buffer_id 0: the thread block has 0 remote buffers" in str(report.first)


def test_cli_exit_status_and_json(tmp_path, capsys):
    good, bad, broken = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "broken.json"
    good.write_text(json.dumps(allgather2()))
    data = allgather2()
    ops_of(data, 1).pop()
    bad.write_text(json.dumps(data))
    broken.write_text("{\"name\": \"x\",")
    assert main(["check-plan", str(good)]) == 0
    assert capsys.readouterr().out.startswith(f"{good}: valid allgather plan on 2 ranks (outofplace)")
    assert main(["check-plan", str(bad), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False and out["errors"][0]["rank"] == 0 and "signal(s) per call" in out["errors"][0]["message"]
    assert main(["check-plan", str(good), "--inplace", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["modes"] == ["inplace"]
    assert main(["check-plan", str(broken)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"autotaccl: error: {broken}: line 1: valid JSON")
    assert main(["check-plan", str(good), "--ranks-per-node", "1"]) == 1
    assert "different nodes" in capsys.readouterr().out
