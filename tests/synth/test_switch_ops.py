"""Switch operations (NVLink SHARP multimem) in the IR, ``verify``, the simulator and greedy; runtimes that
cannot run them are never handed one."""
from __future__ import annotations

import json

import pytest

from autotaccl.errors import InputError
from autotaccl.formats.loading import loader
from autotaccl.model.algorithm import (Algorithm, Transfer, VerificationError, from_json, switch_ops, to_json,
                                       verify)
from autotaccl.model.collectives import Collective
from autotaccl.model.dependencies import transfer_dependencies
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.selection import attainable_us
from autotaccl.simulate import floor_us, simulate, simulate_switch
from autotaccl.sketch import default_sketch, logical_topology
from autotaccl.synth import SynthOptions, synthesize
from autotaccl.synth.greedy.switch import switch_schedule, switch_schedules

G = 1 << 30


@pytest.fixture(scope="module")
def h100():
    return build_topology(load_hardware("dgx-h100"), 1)


def nvls_allreduce(ranks: int, group=None) -> Algorithm:
    """NCCL's NVLS AllReduce on one switch: every rank load-reduces its slice, then stores it to all."""
    group = tuple(range(ranks)) if group is None else group
    transfers = [Transfer((r,), r, r, 0, "switch_reduce", group=group) for r in range(ranks)]
    transfers += [Transfer((r,), r, r, 1, "switch_broadcast", group=group) for r in range(ranks)]
    return Algorithm("nvls", Collective("allreduce", ranks), tuple(transfers))


def test_switch_operations_round_trip_through_json(h100):
    algorithm = nvls_allreduce(8)
    verify(algorithm, h100)
    again = from_json(json.loads(json.dumps(to_json(algorithm))))
    assert again == algorithm and switch_ops(again) == 16
    assert to_json(algorithm)["transfers"][0]["group"] == list(range(8))


@pytest.mark.parametrize("change, field", [
    ({"group": [0]}, "group"),                      # one rank is no group
    ({"group": [1, 2]}, "dst"),                     # the issuer must be a member
    ({"dst": 1}, "dst"),                            # issued by src == dst
    ({"op": "copy"}, "group"),                      # a copy has no group
])
def test_bad_switch_operations_name_their_field(change, field):
    data = to_json(nvls_allreduce(8))
    data["transfers"][0].update(change)
    with pytest.raises(InputError, match=rf"transfers\[0\]\.{field}"):
        from_json(data)


def test_verify_replays_the_load_reduce_and_the_store(h100):
    ok = nvls_allreduce(8)
    # the stores before the load-reduces: every rank's input has then reached every rank, so the
    # load-reduce adds each input once per member
    swapped = Algorithm("x", ok.collective, tuple(sorted(ok.transfers, key=lambda t: -t.step)))
    with pytest.raises(VerificationError, match=r"counts rank\(s\) \[0\] twice"):
        verify(swapped)
    # a load-reduce over a group that misses rank 7: everyone lacks its input
    partial = nvls_allreduce(8, group=tuple(range(7)))
    with pytest.raises(VerificationError, match=r"missing contributions from rank\(s\) \[7\]"):
        verify(Algorithm("x", partial.collective, partial.transfers[:7] + ok.transfers[8:]))
    # two load-reduces of the same sums into one rank count every rank twice when added up
    twice = Algorithm("x", ok.collective, (ok.transfers[0], Transfer((0,), 1, 0, 0, "reduce")))
    with pytest.raises(VerificationError, match="twice"):
        verify(twice)
    # ranks that share no switch that reduces: dgx-a100's NVSwitch has no nccl.nvls
    a100 = build_topology(load_hardware("dgx-a100"), 1)
    with pytest.raises(VerificationError, match="no switch that reduces"):
        verify(ok, a100)
    verify(ok, h100)


def test_dependencies_follow_every_member_cell():
    ok = nvls_allreduce(4)
    deps = transfer_dependencies(ok.transfers)
    # rank 0's store overwrites chunk 0 on ranks 1..3, which every other rank's load-reduce of chunk 0...
    assert deps[4] == (0,)
    # ... and the load-reduces of other chunks read nothing it writes
    assert all(d == () for d in deps[:4])


@pytest.mark.parametrize("hardware", ["dgx-h100", "gb200-nvl72", "dgx-b200"])
def test_simulated_nvls_allreduce_meets_the_switch_model(hardware):
    """The IR's NVLS AllReduce in the simulator against simulate_switch (NCCL's NVLS in model/switch.py):
    the same ports, rates and per-step costs; each rank's load-reduce and store are one glres, which
    stores as it reduces, so no pipeline fill, and the lanes' steps round up alike: the two agree."""
    graph = build_topology(load_hardware(hardware), 1)
    algorithm = nvls_allreduce(graph.number_of_nodes())
    model = simulate_switch(graph, "allreduce", G).time_us
    assert floor_us(algorithm, graph, G) == pytest.approx(model, rel=0.01)
    for size in (16 << 20, G):
        assert simulate(algorithm, graph, size).time_us == pytest.approx(simulate_switch(graph, "allreduce", size).time_us,
                                                                         rel=1e-9)


def test_a_fused_load_reduce_and_store_cross_the_askers_ports_twice_with_one_latency(h100):
    """Rank 0's glres of one cell alone: its bytes cross rank 0's switch ports twice (the load-reduce's
    result and the store's source), so it takes twice a lone load-reduce's bytes time, and no second
    latency."""
    coll, group = Collective("allreduce", 8), tuple(range(8))
    reduce, store = (Transfer((0,), 0, 0, s, op, group=group) for s, op in ((0, "switch_reduce"), (2, "switch_broadcast")))
    launch = simulate(Algorithm("r", coll, (reduce,)), h100, G).time_us
    alone = launch - h100.graph["profile"].nccl.nvls.latency_us
    fused = simulate(Algorithm("f", coll, (reduce, store)), h100, G).time_us
    assert fused - launch == pytest.approx(alone, rel=1e-9)


@pytest.mark.parametrize("collective", ["allreduce", "reducescatter", "allgather"])
@pytest.mark.parametrize("hardware, nodes", [("dgx-h100", 1), ("dgx-h100", 2),
                                             pytest.param("gb200-nvl72", 1, marks=pytest.mark.slow)])
def test_switch_schedules_verify_and_use_the_switch(collective, hardware, nodes):
    graph = build_topology(load_hardware(hardware), nodes)
    lt = logical_topology(graph, collective, default_sketch(graph, collective), G)
    made = list(switch_schedules(lt))
    assert made and all(switch_ops(a) for _, a in made)
    assert [a.metadata["pieces"] for _, a in made][:3] == ([1, 4, 16] if nodes > 1 else [1])
    for _, algorithm in made[:2] + made[-1:]:     # (every one replays alike: the fewest pieces and the most)
        verify(algorithm, graph)


def test_no_switch_schedule_where_the_switch_cannot_reduce():
    graph = build_topology(load_hardware("dgx-a100"), 1)
    lt = logical_topology(graph, "allreduce", default_sketch(graph, "allreduce"), G)
    with pytest.raises(Exception, match="no switch that reduces"):
        list(switch_schedules(lt))
    lt = logical_topology(graph, "alltoall", default_sketch(graph, "alltoall"), G)
    with pytest.raises(Exception, match="not alltoall"):
        list(switch_schedules(lt))


def test_synthesis_takes_the_switch_where_it_is_faster_and_xml_runtimes_never_get_it(h100):
    any_runtime = synthesize(h100, "allreduce", None, SynthOptions(engine="greedy", size=G)).algorithm
    assert any_runtime.metadata["strategy"] == "switch"
    xml = synthesize(h100, "allreduce", None, SynthOptions(engine="greedy", size=G,
                                                          runtime=loader("msccl-executor"))).algorithm
    assert switch_ops(xml) == 0
    # the switch beats the best copy-only schedule, and no copy-only schedule reaches its time
    assert simulate(any_runtime, h100, G).time_us < 0.8 * simulate(xml, h100, G).time_us
    assert simulate(any_runtime, h100, G).time_us < attainable_us(h100, "allreduce", G, switch=False)
    # a runtime that cannot run switch operations says so: its lowering refuses them first; MSCCL++ loads them
    for runtime in ("msccl-executor", "msccl"):
        assert "runs no switch operations" in loader(runtime, h100).problem(any_runtime, "Simple", 1)
    assert loader("mscclpp", h100).switch and loader("mscclpp", h100).problem(any_runtime, "Simple", 1) is None


def test_protocols_without_multimem_get_no_switch_schedule(h100):
    """Only Simple moves data through the switch: under LL the switch schedules are not offered."""
    ll = synthesize(h100, "allreduce", None, SynthOptions(engine="greedy", size=1 << 20, protocol="LL")).algorithm
    assert switch_ops(ll) == 0


def test_switch_schedule_pieces_cut_every_owner_cell(h100):
    lt = logical_topology(h100, "reducescatter", default_sketch(h100, "reducescatter"), G)
    one, four = switch_schedule(lt, (1,)), switch_schedule(lt, (1,) * 4)
    assert four.collective.chunkup == 4 * one.collective.chunkup
    assert len(four.transfers) == 4 * len(one.transfers)
    assert all(t.op == "switch_reduce" for t in one.transfers)


def test_one_node_switch_allreduce_is_one_piece_and_finer_pieces_gain_nothing(h100):
    """On one node each cell's load-reduce and store are one glres, which stores as it reduces: no pipeline
    fill for pieces to shorten, so the candidates stop at one piece, and 128 pieces take the same time."""
    lt = logical_topology(h100, "allreduce", default_sketch(h100, "allreduce"), G)
    assert [a.metadata["pieces"] for _, a in switch_schedules(lt)] == [1]
    one, fine = switch_schedule(lt, (1,)), switch_schedule(lt, (1,) * 128)
    assert simulate(fine, h100, G).time_us == pytest.approx(simulate(one, h100, G).time_us, rel=1e-9)
    assert simulate(one, h100, G).time_us == pytest.approx(floor_us(one, h100, G), rel=1e-6)


def test_the_xml_lowering_refuses_switch_operations_and_the_plan_lowering_writes_them(h100):
    """Lowered directly (``autotaccl lower``), a schedule through the switch is one refusal for MSCCL XML,
    not a crash; an MSCCL++ plan runs it (tests/formats/mscclpp/test_switch_lower.py)."""
    from autotaccl.formats import msccl, mscclpp

    algorithm = nvls_allreduce(8)
    with pytest.raises(msccl.LoweringError, match="no switch operations"):
        msccl.lower_program(algorithm)
    plan = mscclpp.lower_plan(algorithm, h100)
    assert {op.name for g in plan.gpus for tb in g.threadblocks for op in tb.ops} >= {"glres"}


def test_the_mpi_runner_refuses_switch_operations():
    """No MPI job starts for a schedule that needs a switch that reduces: one line naming the field."""
    from runners.mpi import measure_many

    with pytest.raises(InputError, match="transfers.*no switch operations"):
        measure_many([nvls_allreduce(8)], [1 << 20])
