"""Switch (NVLS) channels in the plan reader and the replaying checker: hand-written NVLS AllReduce plans
in the executor's JSON format (glres over a switch channel, as MSCCL++'s DSL writes them), correct ones
accepted, broken ones (a glres before the peers' inputs are there, a closing handshake that carries no
data, a group missing a rank, the wrong buffer type) rejected, malformed switch entries refused in one
line with exit status 2."""
from __future__ import annotations

import copy
import json

import pytest

from autotaccl.cli import main
from autotaccl.errors import InputError
from autotaccl.formats.mscclpp import check_plan, parse_plan

NOP = {"name": "nop"}


def sync(name, peers):
    return {"name": name, "channel_ids": list(range(peers)), "channel_type": "memory"}


def switch_ref(channel, index, size=1):
    return {"switch_channel_id": channel, "index": index, "size": size}


def nvls_allreduce(ranks=4, inplace=True, closing="signal", opening=True, src_buffer="i") -> dict:
    """Rank r load-reduces chunk r over every rank and stores the sum to every rank (one glres), between
    an opening handshake (relaxed: the peers started the call) and a closing one (``closing``)."""
    gpus = []
    peers = ranks - 1
    for r in range(ranks):
        dst_channel = 0 if inplace else 1
        glres = {"name": "glres", "src_buff": [switch_ref(0, r)], "dst_buff": [switch_ref(dst_channel, r)],
                 "channel_type": "switch", "reduce_op": "sum"}
        ops = [sync("rlxsignal", peers), sync("rlxwait", peers), NOP] if opening else []
        ops += [glres, NOP, sync(closing, peers), sync(closing.replace("signal", "wait"), peers)]
        group = [{"size": ranks, "ranks": list(range(ranks))}]
        channels = [{"channel_type": "memory", "connected_to": [p for p in range(ranks) if p != r]},
                    {"channel_type": "switch", "buffer_type": src_buffer, "rank_groups": group}]
        if not inplace:
            channels.append({"channel_type": "switch", "buffer_type": "o", "rank_groups": copy.deepcopy(group)})
        tb_channels = [{"channel_type": "memory", "channel_ids": list(range(peers))},
                       {"channel_type": "switch", "channel_ids": [0] if inplace else [0, 1]}]
        gpus.append({"id": r, "input_chunks": ranks, "output_chunks": ranks, "scratch_chunks": 0,
                     "threadblocks": [{"id": 0, "ops": ops, "channels": tb_channels, "remote_buffer_refs": []}],
                     "channels": channels, "remote_buffers": [], "semaphores": []})
    return {"name": "nvls", "collective": "allreduce", "protocol": "Simple", "inplace": inplace,
            "reuse_resources": False, "gpus": gpus, "num_threads_per_block": 1024, "use_double_scratch_buffer": False,
            "buffer_alignment": 16, "min_message_size": 0, "max_message_size": 2 ** 64 - 1,
            "autotaccl": {"ranks_per_node": ranks}}


def check(data, mode="plan", offsets=False):
    return check_plan(parse_plan(copy.deepcopy(data), "<hand>"), "<hand>", mode, offsets=offsets)


def ops_of(data, rank):
    return data["gpus"][rank]["threadblocks"][0]["ops"]


@pytest.mark.parametrize("inplace", [True, False])
def test_an_nvls_allreduce_with_a_data_carrying_closing_handshake_is_valid(inplace):
    report = check(nvls_allreduce(inplace=inplace), offsets=True)
    assert report.valid, report.first
    assert report.calls >= 2


def test_a_relaxed_closing_handshake_leaves_the_multimem_stores_unordered():
    """MSCCL++ documents rlxsignal/rlxwait as execution-only (no data visibility): the host's read of the
    result may miss a peer's multimem store (the shape of upstream's reduce_nvls plan)."""
    report = check(nvls_allreduce(closing="rlxsignal"))
    assert not report.valid
    assert "(glres, call 1) writes it and the host's read of the result is not ordered" in str(report.first)


def test_a_glres_before_the_peers_inputs_are_there_races():
    report = check(nvls_allreduce(opening=False))
    assert not report.valid
    assert report.first.op == 0            # the glres, which reads every member's input
    assert "race on rank 1's i[0]: rank 1's host (between calls) writes it" in str(report.first)


def test_the_glres_reads_every_member_and_writes_every_member():
    """Out of place, a switch channel on the output for the load-reduce sums outputs nobody wrote."""
    report = check(nvls_allreduce(inplace=False, src_buffer="o"))
    assert not report.valid and "unwritten o" in str(report.first)
    data = nvls_allreduce()
    ops_of(data, 2)[3]["dst_buff"][0]["index"] = 3           # rank 2 stores its sum into chunk 3
    assert not check(data).valid


def test_a_switch_channel_missing_a_rank_is_refused():
    data = nvls_allreduce()
    data["gpus"][0]["channels"][1]["rank_groups"][0]["ranks"] = [0, 1, 2]
    report = check(data)
    assert not report.valid and "does not list the same groups" in str(report.first)


def test_a_pipeline_of_one_glres_is_that_glres():
    data = nvls_allreduce()
    for r in range(4):
        ops = ops_of(data, r)
        ops[3] = {"name": "pipeline", "iter_context": {"unit_size": 1 << 20, "num_chunks": 1}, "ops": [ops[3]]}
    assert check(data).valid
    ops_of(data, 0)[3]["iter_context"]["num_chunks"] = 0
    assert "does not model pipelined loops" in str(check(data).first)


@pytest.mark.parametrize("change, field, expected", [
    (lambda d: d["gpus"][1]["channels"][1]["rank_groups"][0].update(ranks=[0, 2, 3]),
     "gpus[1].channels[1].rank_groups[0].ranks", "include this GPU (1)"),
    (lambda d: d["gpus"][0]["channels"][1].pop("buffer_type"), "gpus[0].channels[1].buffer_type", "a string"),
    (lambda d: d["gpus"][0]["channels"][1].update(buffer_type="x"), "gpus[0].channels[1].buffer_type", "one of"),
    (lambda d: ops_of(d, 2)[3]["src_buff"][0].update(switch_channel_id=1),
     "gpus[2].threadblocks[0].ops[3].src_buff[0].switch_channel_id", "1 switch channels"),
    (lambda d: d["gpus"][3]["threadblocks"][0]["channels"][1].update(channel_ids=[4]),
     "gpus[3].threadblocks[0].channels[1].channel_ids[0]", "1 switch channels"),
])
def test_malformed_switch_entries_are_bad_input_in_one_line(tmp_path, capsys, change, field, expected):
    data = nvls_allreduce()
    change(data)
    with pytest.raises(InputError) as err:
        parse_plan(copy.deepcopy(data), "p.json")
    assert err.value.field == field and expected in str(err.value)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert main(["check-plan", str(path)]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"autotaccl: error: {path}: {field}") and not out.out


def test_cli_replays_a_switch_plan_with_offsets(tmp_path, capsys):
    path = tmp_path / "nvls.json"
    path.write_text(json.dumps(nvls_allreduce(inplace=False)))
    assert main(["check-plan", str(path), "--offsets", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] and out["modes"] == ["outofplace"]
