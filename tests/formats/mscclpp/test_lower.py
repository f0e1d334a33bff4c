"""Lowering the IR to MSCCL++ plans: every baseline and synthesized algorithm, every collective, both buffer
modes and both protocols lower to plans the replaying checker proves; channels follow the topology; the
executor's limits hold; the plan is what the executor's parser reads; broken variants are rejected."""
from __future__ import annotations

import dataclasses
import json
import random

import pytest

from autotaccl.baselines import applicable_baselines, baseline
from autotaccl.cli import main
from autotaccl.errors import InputError
from autotaccl.formats.mscclpp import (LoweringError, PlanOptions, check_plan, lower_plan, parse_plan, plan_stats,
                                       plan_text, to_json)
from autotaccl.formats.mscclpp.lower.options import PLACEMENTS
from autotaccl.formats.mscclpp.plan import MAX_OPERATIONS, MAX_RESIDENT_TBS, PACKET_OPS
from autotaccl.model.algorithm import Algorithm, Transfer, save_algorithm, verify
from autotaccl.model.collectives import Collective
from autotaccl.model.hardware import load_hardware, profile_from_dict
from autotaccl.model.topology import build_topology

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast")
GRAPHS = {name: build_topology(load_hardware(hw), nodes)
          for name, hw, nodes in (("ndv2x1", "ndv2", 1), ("ndv2x2", "ndv2", 2), ("dgx-a100x1", "dgx-a100", 1))}
BASELINES = [(g, c, b) for g, graph in GRAPHS.items() for c in COLLECTIVES for b in applicable_baselines(graph, c)]


def assert_follows_topology(plan, graph) -> None:
    """Memory channels exactly on links inside a node, port channels exactly on network links; LL packets
    only over memory channels."""
    gpn = graph.graph["gpus_per_node"]
    for gpu in plan.gpus:
        for kind in ("memory", "port"):
            for peer in gpu.peers(kind):
                assert graph.has_edge(gpu.id, peer) or graph.has_edge(peer, gpu.id)
                assert (gpu.id // gpn == peer // gpn) == (kind == "memory"), (gpu.id, peer, kind)
        for tb in gpu.threadblocks:
            assert tb.num_operations <= MAX_OPERATIONS and len(tb.channel_list("memory")) <= 16
            for op in tb.ops:
                if op.name in PACKET_OPS and op.channel_type is not None:
                    assert op.channel_type == "memory"
                if op.channel_type == "port" and op.src:
                    assert op.name in ("put", "pws", "pwsf")
        assert len(gpu.threadblocks) <= MAX_RESIDENT_TBS


def test_every_collective_has_baselines_to_lower():
    assert len(BASELINES) >= 25 and {c for _, c, _ in BASELINES} == set(COLLECTIVES)


@pytest.mark.parametrize("graph_name, coll, name", BASELINES, ids=["-".join(b) for b in BASELINES])
def test_baseline_lowers_to_plans_that_pass_the_checker(graph_name, coll, name):
    graph = GRAPHS[graph_name]
    a = baseline(graph, coll, name)
    ll_mode = BASELINES.index((graph_name, coll, name)) % 2 == 0      # each mode gets LL on every other baseline
    for inplace in (False, True):
        proto = "LL" if inplace == ll_mode else "Simple"
        plan = lower_plan(a, graph, PlanOptions(inplace=inplace, proto=proto))       # raises unless it checks
        assert (plan.inplace, plan.protocol, plan.collective, plan.ranks) == (inplace, proto, coll, a.ranks)
        assert_follows_topology(plan, graph)
        assert parse_plan(json.loads(plan_text(plan))) == plan      # what is written is what was checked
        if proto == "LL":
            names = {op.name for g in plan.gpus for tb in g.threadblocks for op in tb.ops}
            assert "ppkt" in names and ("port" in {c.type for g in plan.gpus for c in g.channels}) == \
                (graph.graph["nodes"] > 1)


@pytest.mark.parametrize("coll", COLLECTIVES)
def test_greedy_synthesized_algorithms_lower_in_both_modes(coll):
    from autotaccl.synth import SynthOptions, synthesize
    graph = GRAPHS["ndv2x2"]
    a = synthesize(graph, coll, None, SynthOptions(engine="greedy")).algorithm
    for inplace, proto in ((False, "LL"), (True, "Simple")) if coll in ("allgather", "allreduce") else \
            ((False, "Simple"), (True, "LL")):
        plan = lower_plan(a, graph, PlanOptions(inplace=inplace, proto=proto))
        assert_follows_topology(plan, graph)


def test_ring_allgather_plan_has_the_shape_we_document():
    """A ring rank is one block that receives from its predecessor and forwards to its successor: it first
    tells its predecessor it may write (rlxsignal), waits once for the same from its successor, then per
    step puts straight into the successor's output, signals, and waits for the next chunk; its own block
    is copied input -> output by a second block. No semaphores, no scratch."""
    graph = GRAPHS["ndv2x1"]
    plan = lower_plan(baseline(graph, "allgather", "ring"), graph)
    first = [op.name for op in plan.gpus[0].threadblocks[0].ops]
    assert first == ["rlxsignal", "rlxwait", "nop"] + ["put", "nop", "signal", "wait", "nop"] * 6 + \
        ["put", "nop", "signal", "wait"]
    for gpu in plan.gpus:
        ring, local = gpu.threadblocks
        names = [op.name for op in ring.ops]
        assert [names.count(n) for n in ("rlxsignal", "rlxwait", "put", "signal", "wait")] == [1, 1, 7, 7, 7]
        assert [rb.type for rb in gpu.remote_buffers] == ["o"]          # straight into the successor's output
        assert [op.name for op in local.ops] == ["copy"]
        assert gpu.scratch_chunks == 0 and gpu.semaphores == () and len(gpu.peers("memory")) == 2


def test_port_puts_flush_where_a_proxy_read_must_finish():
    """Across nodes the last put of every flow is pwsf (the kernel's flush op flushes nothing)."""
    graph = GRAPHS["ndv2x2"]
    plan = lower_plan(baseline(graph, "allgather", "ring"), graph)
    for gpu in plan.gpus:
        for tb in gpu.threadblocks:
            port = [op.name for op in tb.ops if op.channel_type == "port" and op.src]
            if port:
                assert port[-1] == "pwsf" and set(port) <= {"put", "pws", "pwsf"}
    assert not any(op.name == "flush" for g in plan.gpus for tb in g.threadblocks for op in tb.ops)


@pytest.mark.parametrize("instances", [2, 3])
def test_instances_run_side_by_side(instances):
    graph = GRAPHS["ndv2x1"]
    a = baseline(graph, "allreduce", "ring")
    one = lower_plan(a, graph)
    plan = lower_plan(a, graph, PlanOptions(instances=instances, proto="LL"))
    assert plan.gpus[0].input_chunks == instances * one.gpus[0].input_chunks
    for peer in set(one.gpus[0].peers("memory")):            # every instance has its own channels
        assert plan.gpus[0].peers("memory").count(peer) >= instances


def test_message_range_name_and_note():
    graph = GRAPHS["ndv2x2"]
    plan = lower_plan(baseline(graph, "broadcast", "ring"), graph,
                      PlanOptions(min_bytes=1024, max_bytes=1 << 20, name="bc"))
    data = to_json(plan)
    assert (data["name"], data["min_message_size"], data["max_message_size"]) == ("bc", 1024, 1 << 20)
    assert data["autotaccl"] == {"ranks_per_node": 8, "topology": "ndv2x2", "source": "ring-broadcast",
                                 "placement": "anywhere", "placement_note": PLACEMENTS["anywhere"], "root": 0}
    assert "same offsets on every rank" in PLACEMENTS["anywhere"] and "start" in PLACEMENTS["start"]
    assert list(data)[:11] == ["name", "collective", "protocol", "inplace", "reuse_resources", "gpus",
                               "num_threads_per_block", "use_double_scratch_buffer", "buffer_alignment",
                               "min_message_size", "max_message_size"]
    assert to_json(lower_plan(baseline(graph, "broadcast", "ring"), graph))["max_message_size"] == 2 ** 64 - 1
    assert plan_text(plan) == plan_text(lower_plan(baseline(graph, "broadcast", "ring"), graph,
                                                   PlanOptions(min_bytes=1024, max_bytes=1 << 20, name="bc")))


def pair_graph(gpus: int, nodes: int = 1):
    profile = profile_from_dict({
        "name": f"mesh{gpus}", "description": "every pair linked", "gpus_per_node": gpus,
        "link_classes": {"nvlink": {"alpha_us": 0.7, "bandwidth_GBps": 25.0},
                         "pcie": {"alpha_us": 0.5, "bandwidth_GBps": 16.0},
                         "ib": {"alpha_us": 2.6, "bandwidth_GBps": 12.5}},
        "links": {"class": "nvlink", "pattern": "fully-connected"},
        "nics": [{"class": "ib", "via": "pcie", "gpus": list(range(gpus))}]}, "<test>")
    return build_topology(profile, nodes)


def test_long_flows_spread_over_thread_blocks():
    """200 chunks one after another from rank 0 to rank 1: more than 64 operations for one block, so the
    flow is cut into parts, each on its own channel pair and blocks."""
    n = 200
    a = Algorithm("long", Collective("allgather", 2, n),
                  tuple(Transfer((c,), 0, 1, c) for c in range(n)) + tuple(Transfer((n + c,), 1, 0, c) for c in range(n)))
    plan = lower_plan(a, pair_graph(2))
    stats = plan_stats(plan)
    assert stats["max_operations_per_threadblock"] <= MAX_OPERATIONS
    assert len(plan.gpus[0].peers("memory")) >= 2 * 4          # >= 4 parts each way
    assert stats["max_threadblocks_per_rank"] >= 8


def test_more_thread_blocks_than_resident_is_a_named_error():
    graph = pair_graph(8, 2)
    a = baseline(graph, "alltoall", "direct")
    with pytest.raises(LoweringError) as err:
        lower_plan(a, graph, PlanOptions(instances=3))
    assert err.value.field == "thread blocks per GPU" and "too many" in err.value.expected


def test_an_algorithm_off_the_topology_is_refused():
    graph = GRAPHS["ndv2x1"]
    a = Algorithm("x", Collective("allgather", 8, 1), tuple(Transfer((0,), 0, 7, 0) for _ in range(1)) +
                  tuple(Transfer((c,), c, (c + 1) % 8, 1) for c in range(1, 8)))
    with pytest.raises(LoweringError, match="verify"):
        lower_plan(a, graph)
    with pytest.raises(InputError, match="--proto"):
        lower_plan(baseline(graph, "allgather", "ring"), graph, PlanOptions(proto="LL128"))


# ----------------------------------------------------------------------------- broken plans are rejected


def _replace_ops(plan, rank, tb_id, ops):
    gpus = list(plan.gpus)
    tbs = list(gpus[rank].threadblocks)
    tbs[tb_id] = dataclasses.replace(tbs[tb_id], ops=tuple(ops))
    gpus[rank] = dataclasses.replace(gpus[rank], threadblocks=tuple(tbs))
    return dataclasses.replace(plan, gpus=tuple(gpus))


def _mutants(plan):
    """(what, plan) for every wait dropped, put dropped, put moved after its signals, put index shifted."""
    for gpu in plan.gpus:
        for tb in gpu.threadblocks:
            ops = list(tb.ops)
            for k, op in enumerate(ops):
                if op.name == "wait":
                    yield "missing wait", _replace_ops(plan, gpu.id, tb.id, ops[:k] + ops[k + 1:])
                if op.name == "put" and op.channel_type == "memory":
                    yield "dropped put", _replace_ops(plan, gpu.id, tb.id, ops[:k] + ops[k + 1:])
                    # after the block's last signal: right after its own, a later signal may still cover it
                    j = max(i for i in range(k, len(ops)) if ops[i].name == "signal")
                    yield "put after its signal", _replace_ops(plan, gpu.id, tb.id,
                                                               ops[:k] + ops[k + 1:j + 1] + [op] + ops[j + 1:])
                    d = op.dst[0]
                    shifted = dataclasses.replace(op, dst=(dataclasses.replace(d, index=d.index + 1),) + op.dst[1:])
                    yield "shifted index", _replace_ops(plan, gpu.id, tb.id, ops[:k] + [shifted] + ops[k + 1:])


@pytest.mark.parametrize("coll, name", [("allgather", "ring"), ("allreduce", "ring"), ("reducescatter", "ring")])
def test_every_hand_broken_variant_is_rejected(coll, name):
    graph = GRAPHS["ndv2x1"]
    plan = lower_plan(baseline(graph, coll, name), graph)
    by_kind: dict[str, list] = {}
    for what, broken in _mutants(plan):
        by_kind.setdefault(what, []).append(broken)
    assert set(by_kind) == {"missing wait", "dropped put", "put after its signal", "shifted index"}
    for what, plans in by_kind.items():
        assert len(plans) >= 8
        for broken in plans[::max(1, len(plans) // 12)]:        # ~12 per kind, spread over ranks and blocks
            assert not check_plan(broken, mode="plan").valid, what


# ----------------------------------------------------------------------------- random algorithms


def random_algorithm(rng: random.Random, ranks: int) -> Algorithm:
    """A random verified algorithm: per chunk a random spanning tree over the ranks that need it (copies),
    or a random reduction tree into its owner (reduces), then for AllReduce a random broadcast tree; the
    chunks' transfer lists interleaved at random, adjacent same-pair transfers sometimes batched."""
    name = rng.choice(COLLECTIVES)
    coll = Collective(name, ranks, rng.randint(1, 2), rng.randrange(ranks) if name == "broadcast" else 0)
    lists = []
    for c in range(coll.num_chunks):
        pre, post = sorted(coll.precondition(c)), sorted(coll.postcondition(c))
        hops = []
        if coll.is_reduction:
            root = post[0] if name == "reducescatter" else rng.randrange(ranks)
            order = [root] + rng.sample([r for r in range(ranks) if r != root], ranks - 1)
            parent = {order[i]: rng.choice(order[:i]) for i in range(1, ranks)}
            hops += [((c,), order[i], parent[order[i]], "reduce") for i in range(ranks - 1, 0, -1)]
            if name == "allreduce":
                have = [root]
                for r in rng.sample([r for r in range(ranks) if r != root], ranks - 1):
                    hops.append(((c,), rng.choice(have), r, "copy"))
                    have.append(r)
        else:
            have = [pre[0]]
            for r in rng.sample([r for r in post if r != pre[0]], len([r for r in post if r != pre[0]])):
                hops.append(((c,), rng.choice(have), r, "copy"))
                have.append(r)
        lists.append(hops)
    merged = []
    while any(lists):
        hop = rng.choice([h for h in lists if h]).pop(0)
        if merged and rng.random() < 0.4 and merged[-1][1:] == hop[1:] and hop[0][0] not in merged[-1][0]:
            merged[-1] = (merged[-1][0] + hop[0],) + hop[1:]
        else:
            merged.append(hop)
    a = Algorithm(f"random-{name}", coll, tuple(Transfer(ch, s, d, i, op) for i, (ch, s, d, op) in enumerate(merged)))
    verify(a)
    return a


@pytest.mark.parametrize("seed", range(24))
def test_random_algorithms_lower_to_plans_that_pass(seed):
    rng = random.Random(seed)
    gpus, nodes = rng.choice([(2, 1), (3, 1), (4, 1), (5, 1), (2, 2), (3, 2)])
    graph = pair_graph(gpus, nodes)
    a = random_algorithm(rng, gpus * nodes)
    plan = lower_plan(a, graph, PlanOptions(inplace=rng.random() < 0.5, proto=rng.choice(["Simple", "LL"]),
                                            instances=rng.choice([1, 1, 2])))
    assert_follows_topology(plan, graph)


# ----------------------------------------------------------------------------- CLI


def test_cli_lower_and_check_plan(tmp_path, capsys):
    src = tmp_path / "ar.json"
    assert main(["baseline", "--hardware", "ndv2", "--nodes", "2", "--collective", "allreduce", "--algorithm",
                 "hierarchical", "-o", str(src)]) == 0
    capsys.readouterr()
    out = tmp_path / "ar.plan.json"
    assert main(["lower", str(src), "--runtime", "mscclpp", "--hardware", "ndv2", "-o", str(out), "--inplace",
                 "--proto", "LL", "--instances", "2", "--min-bytes", "1K", "--max-bytes", "64M"]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"{out}: allreduce plan on 16 ranks for mscclpp (inplace, LL)") and "checked" in line
    data = json.loads(out.read_text())
    assert (data["inplace"], data["protocol"], data["min_message_size"], data["max_message_size"]) == \
        (True, "LL", 1024, 64 << 20)
    assert main(["check-plan", str(out)]) == 0
    assert "valid allreduce plan on 16 ranks (inplace)" in capsys.readouterr().out
    assert list(tmp_path.glob(".*.tmp")) == []


@pytest.mark.parametrize("extra, field", [
    ([], "--hardware"),
    (["--hardware", "ndv2", "--proto", "LL128"], "--proto"),
    (["--hardware", "ndv2", "--nodes", "2"], "--nodes"),
    (["--hardware", "dgx2"], "--nodes"),
    (["--hardware", "ndv2", "--instances", "0"], "--instances"),
])
def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, extra, field):
    src = tmp_path / "ag.json"
    graph = GRAPHS["ndv2x1"]          # 8 ranks: not 2 ndv2 nodes, not a whole number of 16-GPU dgx2 nodes
    save_algorithm(baseline(graph, "allgather", "ring"), src)
    out = tmp_path / "ag.plan.json"
    assert main(["lower", str(src), "--runtime", "mscclpp", "-o", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"autotaccl: error: {field}")
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


def test_cli_xml_runtimes_take_no_hardware(tmp_path, capsys):
    src = tmp_path / "ag.json"
    save_algorithm(baseline(GRAPHS["ndv2x1"], "allgather", "ring"), src)
    assert main(["lower", str(src), "-o", str(tmp_path / "a.xml"), "--hardware", "ndv2"]) == 2
    assert "only with --runtime mscclpp" in capsys.readouterr().err
    assert main(["lower", str(src), "-o", str(tmp_path / "a.xml")]) == 0


def test_final_copies_too_many_for_one_block_on_every_rank_are_split_once_per_round():
    """Greedy's AllReduce on two DGX-H100 has more final copies per rank than one thread block runs. The
    split count used to grow once per over-long block, not once per round (16 ranks: the count multiplied
    16 times), so out of place needed 115 thread blocks (refused, 80 resident) and in place ran for
    minutes. Split once per round, both modes fit."""
    from autotaccl.synth import SynthOptions, synthesize
    graph = build_topology(load_hardware("dgx-h100"), 2)
    a = synthesize(graph, "allreduce", None, SynthOptions(engine="greedy")).algorithm
    for inplace in (False, True):
        stats = plan_stats(lower_plan(a, graph, PlanOptions(inplace=inplace)))
        assert stats["max_threadblocks_per_rank"] <= MAX_RESIDENT_TBS
        assert stats["max_operations_per_threadblock"] <= MAX_OPERATIONS
