"""Switch schedules (greedy's NVLS schedules on DGX-H100) lowered to MSCCL++ plans with switch channels:
they replay to the collective's values in both buffer modes and with the buffers inside bigger
allocations; broken copies of them (no opening barrier, a group missing a rank, the wrong buffer type)
are refused; what a plan cannot run is one line."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from autotaccl.cli import main
from autotaccl.formats.mscclpp import LoweringError, PlanOptions, check_plan, lower_plan, parse_plan, to_json
from autotaccl.model.algorithm import to_json as algorithm_json
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.sketch import default_sketch, logical_topology
from autotaccl.synth.greedy.switch import switch_schedule

G = 1 << 30


def schedule(collective: str, nodes: int, pieces: int = 1):
    graph = build_topology(load_hardware("dgx-h100"), nodes)
    lt = logical_topology(graph, collective, default_sketch(graph, collective), G)
    return switch_schedule(lt, (1,) * pieces), graph


def op_names(plan) -> set[str]:
    return {op.name for g in plan.gpus for tb in g.threadblocks for op in tb.ops}


#: what the plan runs through the switch: one node fuses load-reduce and store into glres; across nodes
#: the load-reduce (glres into scratch) and the store (gstore) are apart, the rail exchange between them
SWITCH_OPS = {("allreduce", 1): {"glres"}, ("allreduce", 2): {"glres", "gstore"},
              ("reducescatter", 1): {"glres"}, ("reducescatter", 2): {"glres"},
              ("allgather", 1): {"gstore"}, ("allgather", 2): {"gstore"}}


@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("collective", ["allreduce", "reducescatter", "allgather"])
@pytest.mark.parametrize("inplace", [False, True])
def test_lowered_switch_schedules_replay_to_the_collective(collective, nodes, inplace):
    algorithm, graph = schedule(collective, nodes)
    plan = lower_plan(algorithm, graph, PlanOptions(inplace=inplace))
    assert op_names(plan) & {"glres", "gstore", "gstorepkt"} == SWITCH_OPS[(collective, nodes)]
    for g in plan.gpus:        # one switch group per node, on every member alike
        groups = {ranks for _, ranks in g.switch_channels()}
        assert groups == {tuple(range(g.id // 8 * 8, g.id // 8 * 8 + 8))}
    report = check_plan(plan, "<lowered>", "plan", offsets=True)
    assert report.valid, report.first
    again = parse_plan(json.loads(json.dumps(to_json(plan))))     # the JSON the executor reads, read back
    assert check_plan(again, "<json>", "plan").valid


def test_placement_start_plans_with_switch_channels_replay(tmp_path):
    algorithm, graph = schedule("allreduce", 2)
    for inplace in (False, True):
        plan = lower_plan(algorithm, graph, PlanOptions(inplace=inplace, placement="start"))
        assert check_plan(plan, "<lowered>", "plan").valid


def test_switch_blocks_split_at_the_operation_limit():
    algorithm, graph = schedule("allgather", 2, pieces=16)
    plan = lower_plan(algorithm, graph, PlanOptions())
    switch_blocks = [tb for g in plan.gpus[:1] for tb in g.threadblocks if tb.channel_list("switch")]
    assert len(switch_blocks) > 1 and all(tb.num_operations <= 64 for tb in switch_blocks)
    assert check_plan(plan, "<lowered>", "plan", offsets=True).valid


def lowered(collective="allreduce", nodes=1, inplace=False) -> dict:
    algorithm, graph = schedule(collective, nodes)
    return to_json(lower_plan(algorithm, graph, PlanOptions(inplace=inplace)))


def replay(data: dict):
    return check_plan(parse_plan(data, "<broken>"), "<broken>", "plan")


def test_a_glres_before_the_peers_inputs_are_there_is_refused():
    data = lowered()
    for g in data["gpus"]:                 # drop the opening barrier: the glres runs first
        ops = g["threadblocks"][0]["ops"]
        first = next(i for i, op in enumerate(ops) if op["name"] == "glres")
        g["threadblocks"][0]["ops"] = ops[first:]
    report = replay(data)
    assert not report.valid and "race on rank" in str(report.first)


def test_a_switch_channel_missing_a_rank_is_refused():
    data = lowered()
    group = data["gpus"][0]["channels"][-1]["rank_groups"][0]
    group["ranks"].remove(7)
    report = replay(data)
    assert not report.valid and "does not list the same groups" in str(report.first)


def test_a_switch_channel_on_the_wrong_buffer_is_refused():
    data = lowered()
    for g in data["gpus"]:                 # the load-reduce reads the outputs instead of the inputs
        for ch in g["channels"]:
            if ch["channel_type"] == "switch" and ch["buffer_type"] == "i":
                ch["buffer_type"] = "o"
    report = replay(data)
    assert not report.valid and "unwritten o" in str(report.first)


def test_lower_and_check_plan_through_the_cli(tmp_path, capsys):
    algorithm, _ = schedule("allreduce", 2)
    src, out = tmp_path / "sw.json", tmp_path / "plan.json"
    src.write_text(json.dumps(algorithm_json(algorithm)))
    assert main(["lower", str(src), "--runtime", "mscclpp", "--hardware", "dgx-h100", "--nodes", "2", "--inplace",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["check-plan", str(out), "--offsets"]) == 0
    assert "valid allreduce plan on 16 ranks (inplace)" in capsys.readouterr().out
    assert main(["lower", str(src), "--runtime", "mscclpp", "--hardware", "dgx-h100", "--nodes", "2", "--proto", "LL",
                 "-o", str(tmp_path / "ll.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--proto: Simple for switch operations" in err[0]
    assert not (tmp_path / "ll.json").exists()


def test_a_rank_in_two_switch_groups_is_one_line():
    algorithm, graph = schedule("allgather", 1)
    first = algorithm.transfers[0]          # rank 0 stores its chunks to half the node first, then to all
    transfers = (replace(first, group=tuple(range(4))),) + algorithm.transfers
    with pytest.raises(LoweringError, match=r"transfers\[1\].group: the one switch group of rank 0"):
        lower_plan(replace(algorithm, transfers=transfers), graph, PlanOptions())
