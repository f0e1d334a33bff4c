"""Lowering the IR to MSCCL XML: every algorithm, instance count and protocol passes the replaying
checker; IR -> XML -> IR keeps verify() and the simulated time; runtime limits are named."""
from __future__ import annotations

import json
from dataclasses import replace
import re

import pytest

from autotaccl.baselines import applicable_baselines, baseline
from autotaccl.cli import main
from autotaccl.errors import InputError
from autotaccl.formats.msccl import LoweringError, LoweringOptions, lower, check_xml, parse_xml
from autotaccl.formats.msccl.check.importer import import_xml
from autotaccl.model.algorithm import Algorithm, Transfer, save_algorithm, verify
from autotaccl.model.collectives import Collective
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.simulate import simulate

SEEDS = 2


def algo(name: str, coll: str, ranks: int, transfers, chunkup: int = 1) -> Algorithm:
    return Algorithm(name, Collective(coll, ranks, chunkup), tuple(Transfer(*t) for t in transfers))


def ring_allgather(R: int = 4) -> Algorithm:
    return algo("ring-ag", "allgather", R, [(((r - s) % R,), r, (r + 1) % R, s) for s in range(R - 1) for r in range(R)])


def ring_reduce_scatter_transfers(R: int):
    return [(((r - s - 1) % R,), r, (r + 1) % R, s, "reduce") for s in range(R - 1) for r in range(R)]


def ring_reducescatter(R: int = 4) -> Algorithm:
    return algo("ring-rs", "reducescatter", R, ring_reduce_scatter_transfers(R))


def ring_allreduce(R: int = 4) -> Algorithm:
    gather = [(((r - s) % R,), r, (r + 1) % R, R - 1 + s) for s in range(R - 1) for r in range(R)]
    return algo("ring-ar", "allreduce", R, ring_reduce_scatter_transfers(R) + gather)


def direct_alltoall(R: int = 4) -> Algorithm:
    return algo("direct-a2a", "alltoall", R, [((s * R + d,), s, d, 0) for s in range(R) for d in range(R) if s != d])


def relayed_alltoall(R: int = 4) -> Algorithm:
    """AllToAll on a line 0-1-2-3: every chunk hops through the ranks between, who keep it in scratch."""
    transfers = []
    for s in range(R):
        for d in range(R):
            path = list(range(s, d + 1)) if d > s else list(range(s, d - 1, -1))
            transfers += [((s * R + d,), a, b, 0) for a, b in zip(path, path[1:])]
    return algo("relay-a2a", "alltoall", R, transfers)


def batched_allgather(R: int = 4, k: int = 3) -> Algorithm:
    """Ring AllGather moving a whole rank's k chunks per transfer: one step with cnt=k."""
    return algo("batched-ag", "allgather", R, [(tuple(((r - s) % R) * k + j for j in range(k)), r, (r + 1) % R, s)
                                               for s in range(R - 1) for r in range(R)], k)


HAND = [ring_allgather, ring_reducescatter, ring_allreduce, direct_alltoall, relayed_alltoall, batched_allgather]


@pytest.mark.parametrize("make", HAND, ids=lambda f: f.__name__)
@pytest.mark.parametrize("instances", [1, 2, 3, 4])
def test_hand_built_algorithms_pass_the_checker(make, instances):
    a = make()
    verify(a)
    proto = ("Simple", "LL", "LL128", "Simple")[instances - 1]
    text = lower(a, LoweringOptions(instances=instances, proto=proto))
    report = check_xml(text, mode="both", seeds=SEEDS)
    assert report.valid, str(report)
    prog = parse_xml(text)
    assert prog.header["proto"] == proto and prog.header["ngpus"] == str(a.ranks)
    assert int(prog.header["nchannels"]) == instances
    assert int(prog.header["nchunksperloop"]) == max(a.collective.input_chunks(0), a.collective.output_chunks(0)) \
        * instances


@pytest.mark.parametrize("proto", ["Simple", "LL", "LL128"])
def test_each_protocol_for_each_runtime(proto):
    for runtime, mode in (("msccl-executor", None), ("msccl", "inplace"), ("msccl", "outofplace")):
        opts = LoweringOptions(proto=proto, runtime=runtime, inplace=mode == "inplace" if mode else None,
                               outofplace=mode == "outofplace" if mode else None)
        text = lower(ring_allreduce(), opts)
        report = check_xml(text, runtime=runtime, seeds=SEEDS)
        assert report.valid and report.runtime == runtime, str(report)
        assert report.modes == ((mode,) if mode else ("inplace", "outofplace"))


def test_ring_is_fused_like_the_tools_write_it():
    prog = parse_xml(lower(ring_allreduce(4)))
    for gpu in prog.gpus:
        (tb,) = [t for t in gpu.tbs if t.send >= 0]
        assert (tb.send, tb.recv) == ((gpu.id + 1) % 4, (gpu.id - 1) % 4)
        assert [s.type for s in tb.steps] == ["s", "rrs", "rrs", "rrcs", "rcs", "rcs", "r"]
    ag = parse_xml(lower(ring_allgather(4)))
    assert [s.type for s in ag.gpus[0].tbs[1].steps] == ["s", "rcs", "rcs", "r"]


def test_a_receive_and_send_pair_that_fuses_nothing_gets_two_thread_blocks():
    """Rank 1 forwards chunk 0 from rank 0 to rank 2 (and chunk 2 back), but sends its own chunk between
    the receive and the forward, so no step can fuse them: one block for both would hold its own send
    behind the receive. Each peer gets a block of its own, and the program still checks."""
    alg = algo("star", "allgather", 3, [((0,), 0, 1, 0), ((2,), 2, 1, 0), ((1,), 1, 2, 1), ((1,), 1, 0, 1),
                                        ((0,), 1, 2, 2), ((2,), 1, 0, 2)])
    text = lower(alg)
    report = check_xml(text, mode="both", seeds=SEEDS)
    assert report.valid, str(report)
    tbs = [tb for tb in parse_xml(text).gpus[1].tbs if (tb.send, tb.recv) != (-1, -1)]   # not the local copy
    assert sorted((tb.send, tb.recv) for tb in tbs) == [(-1, 0), (-1, 2), (0, -1), (2, -1)]
    assert sorted([s.type for s in tb.steps] for tb in tbs) == [["r"], ["r"], ["s", "s"], ["s", "s"]]


def line_relay(k: int) -> Algorithm:
    """AllGather on a line 0 - 1 - 2, ``k`` chunks a rank: rank 1 sends its own chunks both ways at step 0,
    receives the ``k`` of each end at step 0 (one transfer each) and forwards them at step 1."""
    ends = {0: 2, 2: 0}      # an end, and where its chunks go through rank 1
    transfers = [Transfer(tuple(range(k, 2 * k)), 1, end, 0) for end in ends]
    transfers += [Transfer((k * end + j,), end, 1, 0) for end in ends for j in range(k)]
    transfers += [Transfer((k * end + j,), 1, far, 1) for end, far in ends.items() for j in range(k)]
    return Algorithm("line", Collective("allgather", 3, k), tuple(transfers))


def test_a_relay_that_receives_every_piece_before_forwarding_any_fuses_them_across_where_it_must():
    """Rank 1's block receiving from 0 and sending to 2 holds: send own, receive 0..k-1, send 0..k-1. No
    receive is right before its forward, so none fuses; across the receives before them, every forward
    fuses (its fused step sends ahead of the later receives, all from rank 0). The lowering fuses across
    only where the steps need more XML nodes than the runtime parses: with 4 chunks a rank the pairs fuse
    nothing (a block each); with 1200, 4800 receives and forwards on rank 1 would need more than 4096, and
    fused across, 2400 do not. Both programs replay correctly in both modes."""
    from autotaccl.formats.msccl.lower.threadblocks import Blocks, Uses, plan_threadblocks

    small = line_relay(4)
    channels = (0,) * len(small.transfers)
    for blocks, fused in ((Blocks(), 0), (Blocks(across=True), 8)):
        assert len(plan_threadblocks(small, channels, Uses.of(small), blocks=blocks).fused_next) == fused
    text = lower(small)
    assert check_xml(text, mode="both", seeds=SEEDS).valid
    assert {s.type for tb in parse_xml(text).gpus[1].tbs for s in tb.steps} == {"s", "r", "cpy"}
    text = lower(line_relay(1200))
    report = check_xml(text, mode="both", seeds=SEEDS)
    assert report.valid, str(report)
    relay = parse_xml(text).gpus[1]
    assert 1 + 3 + len(relay.tbs) + sum(len(tb.steps) for tb in relay.tbs) <= 4096
    assert sum(s.type == "rcs" for tb in relay.tbs for s in tb.steps) == 2400


def forwarding_star(ranks: int, channels: int = 32) -> Algorithm:
    """AllGather where rank 0 receives chunk j of every other rank p on channel j and forwards it to
    rank p % (ranks - 1) + 1 after sending that rank its own chunk j, so no step fuses; the rest direct."""
    def chunk(r: int, j: int) -> int:
        return r * channels + j

    def hub_peer(p: int) -> int:
        return p % (ranks - 1) + 1

    transfers = []
    for j in range(channels):
        for p in range(1, ranks):
            transfers.append(Transfer((chunk(p, j),), p, 0, 0, channel=j))
            transfers.append(Transfer((chunk(0, j),), 0, p, 1, channel=j))
            transfers.append(Transfer((chunk(p, j),), 0, hub_peer(p), 2, channel=j))
            transfers += [Transfer((chunk(p, j),), p, d, 0, channel=j) for d in range(1, ranks)
                          if d not in (p, hub_peer(p))]
    return Algorithm("star", Collective("allgather", ranks, channels), tuple(transfers))


def test_split_pairs_that_exceed_the_dependency_targets_stay_pairs():
    """Split, each forwarding pair's receive block becomes a dependency target of its send block: on 5
    ranks rank 0 has 4 x 32 = 128 of them, as many as the runtime addresses, so they are split; on 6 ranks
    160 would be, so the pairs stay (no cross-block dependency: one block receives and forwards)."""
    for ranks, paired in ((5, False), (6, True)):
        text = lower(forwarding_star(ranks))
        report = check_xml(text, mode="both", seeds=SEEDS)
        assert report.valid, str(report)
        tbs = parse_xml(text).gpus[0].tbs
        assert sum(tb.send >= 0 and tb.recv >= 0 for tb in tbs) == (32 * (ranks - 1) if paired else 0)


def test_a_rank_that_forwards_every_chunk_twice_is_refused_on_dependency_targets_before_its_layout():
    """Rank 0 forwards each chunk it receives to two peers: one forward can share the receiving block,
    the other is sent by another block, which waits for it. On 6 ranks that makes 5 x 32 = 160 receive
    blocks dependency targets, more than the 128 the runtime numbers; the plan alone says so ("at least")."""
    ranks, channels = 6, 32
    transfers = []
    for j in range(channels):
        for p in range(1, ranks):
            transfers.append(Transfer((p * channels + j,), p, 0, 0, channel=j))
            transfers.append(Transfer((j,), 0, p, 0, channel=j))
            forwards = (p % (ranks - 1) + 1, (p + 1) % (ranks - 1) + 1)
            transfers += [Transfer((p * channels + j,), 0, d, 1, channel=j) for d in forwards]
            transfers += [Transfer((p * channels + j,), p, d, 0, channel=j) for d in range(1, ranks)
                          if d != p and d not in forwards]
    twice = Algorithm("twice", Collective("allgather", ranks, channels), tuple(transfers))
    verify(twice)
    with pytest.raises(LoweringError) as err:
        lower(twice)
    assert err.value.field == "dependency target thread blocks"
    assert "rank 0 needs at least 160, 32 too many" in err.value.expected


@pytest.mark.parametrize("inplace", [True, False])
def test_in_place_the_blocks_that_send_an_input_value_its_result_overwrites_are_sure_targets(inplace):
    """A direct AllReduce on 3 ranks: each rank sends its input of chunk c to rank c, which sums and sends
    the result back. In place, input and output of a chunk are one cell, so the block that only sends
    (to the highest other rank) waits for nothing but is waited for by the block that receives the
    result; the early count sees every target the dependencies make, in both modes."""
    R = 3
    direct = algo("direct", "allreduce", R, [((c,), r, c, 0, "reduce") for c in range(R) for r in range(R) if r != c]
                  + [((c,), c, r, 1) for c in range(R) for r in range(R) if r != c])
    sure, targets = sure_and_program_targets(direct, (0,) * len(direct.transfers), inplace)
    send_only = {(r, max(set(range(R)) - {r}), -1, 0) for r in range(R)}
    assert sure == targets
    assert (send_only <= sure) == inplace and len(sure) == (9 if inplace else 6)


@pytest.mark.parametrize("inplace", [True, False])
@pytest.mark.parametrize("seed", range(40))
def test_the_sure_dependency_targets_are_targets_of_the_program(seed, inplace):
    """What the early check counts (``sure_targets``) is a subset of the blocks the dependencies make
    targets, on random algorithms, with in-place calls enabled or not."""
    import random
    rng = random.Random(seed)
    a = random_algorithm(rng)
    sure, targets = sure_and_program_targets(a, tuple(t.link for t in a.transfers), inplace, rng.random() < 0.5)
    assert sure <= targets


def sure_and_program_targets(a: Algorithm, channels, inplace: bool, split_idle: bool = True):
    """The blocks ``sure_targets`` counts and those the program's dependencies make targets, for one plan."""
    from autotaccl.formats.msccl.lower.buffers import layout
    from autotaccl.formats.msccl.lower.steps import add_dependencies, build_steps
    from autotaccl.formats.msccl.lower.threadblocks import Blocks, Uses, plan_threadblocks, sure_targets
    uses = Uses.of(a)
    plan = plan_threadblocks(a, channels, uses, blocks=Blocks(split_idle=split_idle))
    steps = build_steps(a, plan, layout(a, plan, inplace), 71)
    add_dependencies(steps, a.collective.name, a.collective.chunkup, inplace, True)
    return set().union(*sure_targets(a, plan, uses, inplace).values()), {d.tb for st in steps for d in st.deps}


def test_contiguous_chunks_become_one_step_and_long_runs_split_at_71():
    prog = parse_xml(lower(batched_allgather(4, 3)))
    sends = [s for g in prog.gpus for tb in g.tbs for s in tb.steps if s.type in ("s", "rcs", "r")]
    assert sends and all(s.cnt == 3 for s in sends)
    big = algo("big", "allgather", 2, [(tuple(range(100)), 0, 1, 0), (tuple(range(100, 200)), 1, 0, 0)], 100)
    text = lower(big)
    cnts = sorted(s.cnt for g in parse_xml(text).gpus for tb in g.tbs for s in tb.steps if s.type == "s")
    assert cnts == [29, 29, 71, 71]
    assert check_xml(text, mode="both", seeds=SEEDS).valid


def test_relays_use_scratch_and_inplace_alltoall_evacuates():
    text = lower(relayed_alltoall(4))
    prog = parse_xml(text)
    assert [g.s_chunks for g in prog.gpus] == [0, 4, 4, 0]   # ranks 1 and 2 relay 4 chunks each
    # in-place AllToAll: rank 0 receives into o[1] (= i[1]) before it sends i[1]: i[1] moves to scratch first
    late = algo("late", "alltoall", 2, [((2,), 1, 0, 0), ((1,), 0, 1, 1)])
    inplace = lower(late, LoweringOptions(inplace=True, outofplace=False))
    assert check_xml(inplace, mode="inplace", seeds=SEEDS).valid
    rank0 = parse_xml(inplace).gpus[0]
    assert rank0.s_chunks == 1 and any(s.type == "cpy" and (s.srcbuf, s.srcoff, s.dstbuf) == ("i", 1, "s")
                                       for tb in rank0.tbs for s in tb.steps)
    assert parse_xml(lower(late, LoweringOptions(outofplace=True, inplace=False))).gpus[0].s_chunks == 0
    assert check_xml(lower(late, LoweringOptions(outofplace=True, inplace=False)), mode="inplace",
                     seeds=SEEDS).valid is False          # out-of-place only: the in-place replay must fail
    # both modes: the direct AllToAll sends before it receives, so it only needs dependencies
    assert check_xml(lower(direct_alltoall(4)), mode="both", seeds=SEEDS).valid


def test_dependencies_hasdep_and_nops_follow_the_runtime_rules():
    # rank 0 reduces two chunks arriving from ranks 1 and 2 into o[0] and then forwards the sum
    a = algo("fan-in", "reducescatter", 3, [((1,), 0, 1, 0, "reduce"), ((2,), 0, 2, 0, "reduce"),
                                            ((0,), 1, 0, 0, "reduce"), ((0,), 2, 0, 1, "reduce"),
                                            ((1,), 2, 1, 1, "reduce"), ((2,), 1, 2, 1, "reduce")])
    verify(a)
    text = lower(a)
    assert check_xml(text, mode="both", seeds=SEEDS).valid
    prog = parse_xml(text)
    targets = {(g.id, s.depid, s.deps) for g in prog.gpus for tb in g.tbs for s in tb.steps if s.depid >= 0}
    assert targets
    for rank, tb, s in targets:
        assert prog.gpus[rank].tbs[tb].steps[s].hasdep == 1
    for g in prog.gpus:
        for tb in g.tbs:
            for k, st in enumerate(tb.steps):
                if st.type == "nop":
                    assert st.depid >= 0 and tb.steps[k + 1].depid >= 0


def test_header_per_runtime():
    executor = parse_xml(lower(ring_reducescatter(), LoweringOptions(min_bytes=1024, max_bytes=None)))
    assert executor.header["coll"] == "reducescatter" and executor.header["maxBytes"] == "0"   # 0: no limit
    assert executor.header["minBytes"] == "1024" and executor.header["outofplace"] == "1"
    legacy = parse_xml(lower(ring_reducescatter(), LoweringOptions(runtime="msccl", max_bytes=1 << 20)))
    assert legacy.header["coll"] == "reduce_scatter" and legacy.header["maxBytes"] == str((1 << 20) + 1)
    assert legacy.header["inplace"] == "0" and "outofplace" not in legacy.header   # legacy-only file
    assert parse_xml(lower(ring_reducescatter(), LoweringOptions(runtime="msccl"))).header["maxBytes"] != "0"
    with pytest.raises(InputError, match="one mode"):
        lower(ring_reducescatter(), LoweringOptions(runtime="msccl", inplace=True, outofplace=True))


def test_output_is_what_the_runtime_tokenizer_accepts():
    a = ring_allgather()
    a = Algorithm('my "ring" <a&b>', a.collective, a.transfers)
    text = lower(a)
    assert "\t" not in text and not text.startswith("<?")
    assert 'name="my &quot;ring&quot; &lt;a&amp;b&gt;"' in text.splitlines()[0]
    for line in text.splitlines():
        assert re.fullmatch(r" *<(/?)(algo|gpu|tb|step)( [A-Za-z_]+=\"[^\"]*\")*(/?)>", line), line
        assert not re.search(r'="-?0\d', line)
    assert parse_xml(text).header["name"] == 'my "ring" <a&b>'


def test_limits_name_the_limit_and_the_excess():
    def many(link: int) -> Algorithm:
        return algo("many", "allgather", 2, [((c,), 0, 1, 0, "copy", link) for c in range(70)]
                    + [((70 + c,), 1, 0, 0, "copy", link) for c in range(70)], 70)

    # 70 steps on one thread block: chunks are spread over a second channel copy (35 steps each) ...
    spread = lower(many(0))
    assert parse_xml(spread).header["nchannels"] == "2" and check_xml(spread, seeds=1).valid
    # a 66-rank ring has 66 steps per block: 2 copies per instance; with 2 instances each instance's chunks
    # are all even or all odd, so they are spread by their number within the instance (by the expanded
    # chunk's, 2 copies would split nothing and it took 3)
    ring = lower(ring_allgather(66), LoweringOptions(instances=2))
    assert parse_xml(ring).header["nchannels"] == "4" and check_xml(ring, seeds=1).valid
    # ... unless the channels are used up (link 31 already needs all 32)
    with pytest.raises(LoweringError, match=r"steps per thread block.*at most 64.*needs at least 70, 6 too many"):
        lower(many(31))
    assert check_xml(lower(many(31), LoweringOptions(runtime="msccl")), runtime="msccl", seeds=1).valid  # 256
    wide = algo("wide", "allgather", 2, [((0,), 0, 1, 0, "copy", 8), ((1,), 1, 0, 0, "copy", 8)])
    with pytest.raises(LoweringError, match=r"channels.*= 36, 4 too many"):
        lower(wide, LoweringOptions(instances=4))
    with pytest.raises(InputError, match="instances"):
        lower(ring_allgather(), LoweringOptions(instances=33))
    broken = algo("broken", "allgather", 2, [((0,), 1, 0, 0)])
    with pytest.raises(LoweringError, match="verify"):
        lower(broken)


# ----------------------------------------------------------------------------- baselines


GRAPHS = {name: build_topology(load_hardware(hw), nodes)
          for name, hw, nodes in (("ndv2x1", "ndv2", 1), ("ndv2x2", "ndv2", 2), ("dgx-a100x1", "dgx-a100", 1))}
BASELINES = [(g, c, b) for g, graph in GRAPHS.items()
             for c in ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast")
             for b in applicable_baselines(graph, c)]


def test_every_collective_has_baselines_to_lower():
    assert len(BASELINES) >= 25
    assert {c for _, c, _ in BASELINES} == {"allgather", "reducescatter", "allreduce", "alltoall", "broadcast"}


@pytest.mark.parametrize("graph_name, coll, name", BASELINES, ids=["-".join(b) for b in BASELINES])
def test_baseline_lowers_checks_and_round_trips(tmp_path, graph_name, coll, name):
    graph = GRAPHS[graph_name]
    a = baseline(graph, coll, name)
    index = BASELINES.index((graph_name, coll, name))
    instances = 1 + index % 4 if a.ranks <= 8 else 1 + index % 2
    proto = ("Simple", "LL", "LL128")[index % 3]
    report = check_xml(lower(a, LoweringOptions(instances=instances, proto=proto)), mode="both", seeds=1)
    assert report.valid, f"instances={instances}: {report}"
    path = tmp_path / "a.xml"
    path.write_text(lower(a))
    back = import_xml(path)
    verify(back, graph)
    assert (back.collective, len(back.transfers)) == (a.collective, len(a.transfers))
    for size in (1 << 12, 1 << 22, 1 << 28):
        assert simulate(back, graph, size).time_us == pytest.approx(simulate(a, graph, size).time_us, rel=1e-12)


# ----------------------------------------------------------------------------- CLI


def test_cli_lower_import_round_trip(tmp_path, capsys):
    src = tmp_path / "ar.json"
    save_algorithm(ring_allreduce(4), src)
    xml = tmp_path / "ar.xml"
    assert main(["lower", str(src), "-o", str(xml), "--instances", "2", "--proto", "LL128",
                 "--min-bytes", "1K", "--max-bytes", "1M"]) == 0
    head = parse_xml(xml.read_text()).header
    assert (head["proto"], head["minBytes"], head["maxBytes"], head["nchannels"]) == ("LL128", "1024", "1048576", "2")
    assert main(["check-xml", str(xml), "--seeds", "2"]) == 0
    out = tmp_path / "back.json"
    assert main(["import-xml", str(xml), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["collective"]["chunkup"] == 2 and len(data["transfers"]) == 2 * len(ring_allreduce(4).transfers)
    assert main(["lower", str(src), "-o", str(tmp_path / "x.xml"), "--runtime", "msccl", "--inplace"]) == 0
    assert parse_xml((tmp_path / "x.xml").read_text()).header["inplace"] == "1"
    capsys.readouterr()
    bad = tmp_path / "nope.xml"
    assert main(["lower", str(src), "-o", str(bad), "--instances", "40"]) == 2
    assert not bad.exists() and len(capsys.readouterr().err.strip().splitlines()) == 1
    assert list(tmp_path.glob(".*.tmp")) == []


@pytest.mark.slow
def test_channel_copies_split_a_block_whose_chunks_share_a_residue():
    """A rail's thread block carries every gpn-th chunk (its roots'): on two channel copies by chunk
    mod 2 all of them would stay on one copy (and it took a third, and two wasted builds); the copies
    split them evenly whatever their step."""
    per_rank = 8 * 70
    transfers = []
    for src, dst in ((0, 1), (1, 0)):
        for m in range(70):
            first = src * per_rank + 8 * m
            transfers.append(((first,), src, dst, 0, "copy", 0))             # link 0: chunks 8m, all even
            transfers.append((tuple(range(first + 1, first + 8)), src, dst, 0, "copy", 1))   # link 1: 8m + 1, all odd
    program = parse_xml(text := lower(algo("rail-like", "allgather", 2, transfers, per_rank)))
    assert program.header["nchannels"] == "4" and check_xml(text, seeds=1).valid     # 2 links x 2 copies
    assert max(len(tb.steps) for gpu in program.gpus for tb in gpu.tbs) <= 64


def test_many_peers_spread_over_channels_and_dependency_targets_keep_low_ids():
    R = 66      # 65 peers each way: 131 thread blocks per rank, more than 32 per channel and direction
    a = algo("a2a66", "alltoall", R, [((s * R + d,), s, d, 0) for s in range(R) for d in range(R) if s != d])
    prog = parse_xml(lower(a))          # both modes: every receive waits for the send of the cell it overwrites
    assert int(prog.header["nchannels"]) == 3
    gpu = prog.gpus[0]
    assert len(gpu.tbs) == 131
    targets = {s.depid for tb in gpu.tbs for s in tb.steps if s.depid >= 0}
    assert len(targets) == 65 and max(targets) <= 127
    for chan in range(3):
        assert sum(tb.chan == chan and tb.send >= 0 for tb in gpu.tbs) <= 32
        assert sum(tb.chan == chan and tb.recv >= 0 for tb in gpu.tbs) <= 32


@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce", "alltoall"])
def test_greedy_synthesized_algorithms_lower_check_and_round_trip(tmp_path, coll):
    from autotaccl.synth import SynthOptions, synthesize
    graph = GRAPHS["ndv2x2"]
    a = synthesize(graph, coll, None, SynthOptions(engine="greedy")).algorithm
    assert check_xml(lower(a, LoweringOptions(instances=2, proto="LL128")), mode="both", seeds=1).valid
    path = tmp_path / "s.xml"
    path.write_text(lower(a))
    back = import_xml(path, seeds=1)
    verify(back, graph)
    assert simulate(back, graph, 1 << 24).time_us == pytest.approx(simulate(a, graph, 1 << 24).time_us, rel=1e-12)


# ----------------------------------------------------------------------------- random algorithms


def random_algorithm(rng) -> Algorithm:
    """A random verified algorithm: per chunk a random relay tree (copies) or reduction tree (reduces,
    then for AllReduce a random broadcast tree), steps by tree depth, same-step transfers sometimes
    batched into one multi-chunk transfer (non-contiguous chunks included), on links 0 and 1."""
    name = rng.choice(["allgather", "alltoall", "broadcast", "reducescatter", "allreduce"])
    coll = Collective(name, rng.randint(2, 5), rng.randint(1, 3), 0)
    R = coll.ranks

    def tree(root, nodes):
        order = [root] + rng.sample([n for n in nodes if n != root], len(nodes) - 1)
        depth, edges = {root: 0}, []
        for i, n in enumerate(order[1:], 1):
            parent = rng.choice(order[:i])
            depth[n] = depth[parent] + 1
            edges.append((parent, n, depth[n]))
        return edges, max(depth.values())

    items = []
    for c in range(coll.num_chunks):
        post = sorted(coll.postcondition(c))
        if not coll.is_reduction:
            (src,) = coll.precondition(c)
            others = [r for r in range(R) if r not in post and r != src]
            nodes = sorted(set(post) | {src} | set(rng.sample(others, rng.randint(0, len(others)))))
            edges, _ = tree(src, nodes)
            items += [(d, c, p, ch, "copy") for p, ch, d in edges]
        else:
            root = rng.choice(post)
            edges, height = tree(root, list(range(R)))
            items += [(height - d, c, ch, p, "reduce") for p, ch, d in edges]
            if name == "allreduce":
                edges, _ = tree(root, list(range(R)))
                items += [(height + d, c, p, ch, "copy") for p, ch, d in edges]
    items.sort(key=lambda x: (x[0], rng.random()))
    groups: list = []
    last: dict = {}
    for step, c, s, d, op in items:
        key = (step, s, d, op)
        if key in last and rng.random() < 0.7:
            groups[last[key]][1].append(c)
        else:
            last[key] = len(groups)
            groups.append((key, [c]))
    transfers = [Transfer(tuple(rng.sample(cs, len(cs))), s, d, step, op, rng.choice((0, 0, 1)))
                 for (step, s, d, op), cs in groups]
    return Algorithm("random", coll, tuple(transfers))


@pytest.mark.parametrize("seed", range(60))
def test_random_algorithms_lower_to_programs_that_pass_the_checker(seed):
    import random
    rng = random.Random(seed)
    a = random_algorithm(rng)
    verify(a)
    mode = rng.choice([None, "inplace", "outofplace"])
    opts = LoweringOptions(instances=rng.randint(1, 3), proto=rng.choice(["Simple", "LL", "LL128"]),
                           inplace=None if mode is None else mode == "inplace",
                           outofplace=None if mode is None else mode == "outofplace")
    report = check_xml(lower(a, opts), seeds=SEEDS, seed=seed)
    assert report.valid, f"{a.collective} {opts}: {report}"


def test_non_contiguous_ring_transfers_keep_fused_steps_on_separate_channels():
    # hierarchical AllReduce on 2 nodes moves chunks (c, c+8) together: two runs, which a fused ring
    # thread block cannot hold in a 2-message connection buffer; each run gets its own channel instead
    a = baseline(GRAPHS["ndv2x2"], "allreduce", "hierarchical")
    assert any(len(t.chunks) == 2 and abs(t.chunks[0] - t.chunks[1]) > 1 for t in a.transfers)
    text = lower(a)
    prog = parse_xml(text)
    kinds = {s.type for g in prog.gpus for tb in g.tbs for s in tb.steps}
    assert prog.header["nchannels"] == "2" and {"rrs", "rcs", "rrcs"} <= kinds
    assert check_xml(text, mode="both", seeds=SEEDS).valid


def test_a_relay_block_fuses_the_forwards_to_one_peer_so_the_size_check_counts_the_others_twice():
    """Rank 1 receives 3000 chunks from rank 0 and forwards half to rank 2, half to rank 3. On one lane its
    one block receiving from rank 0 sends to one of them: 1500 forwards fuse, 4505 XML nodes, refused at
    once. With each half on a lane of its own, each lane's block fuses its forwards: 3005 nodes, within
    4096, so the check passes and verify refuses the unverified algorithm."""
    n = 3000

    def relay(lanes: int) -> Algorithm:
        transfers = [Transfer((c,), 0, 1, 0, channel=c * lanes // n) for c in range(n)]
        transfers += [Transfer((c,), 1, 2 + c * 2 // n, 1, channel=c * lanes // n) for c in range(n)]
        return Algorithm("relay", Collective("allgather", 4, n), tuple(transfers))

    with pytest.raises(LoweringError) as err:
        lower(relay(1))
    assert err.value.field == "XML nodes per rank" and "rank 1 needs at least 4505 (4500 steps" in err.value.expected
    with pytest.raises(LoweringError) as err:
        lower(relay(2))
    assert err.value.field == "algorithm"


@pytest.mark.parametrize("seed", range(30))
def test_the_size_checks_least_steps_are_never_more_than_the_program_has(seed):
    """``least_steps`` is a floor: on random algorithms at 1 and 2 instances, every rank's XML nodes in the
    lowered program are at least 1 + ranks + least steps x instances."""
    import random
    from autotaccl.formats.msccl.lower.lower import least_steps
    rng = random.Random(seed)
    a = random_algorithm(rng)
    least = least_steps(a)
    for instances in (1, 2):
        program = parse_xml(lower(a, LoweringOptions(instances=instances)))
        for gpu in program.gpus:
            nodes = 1 + program.ngpus + len(gpu.tbs) + sum(len(tb.steps) for tb in gpu.tbs)
            assert 1 + program.ngpus + least[gpu.id] * instances <= nodes


def test_an_algorithm_too_large_for_the_runtime_is_refused_before_it_is_verified_or_lowered():
    """204,800 transfers used to take minutes of lowering to be refused; now the count alone refuses them:
    rank 0 sends each chunk before it gets it back, so no step both receives and forwards, 2 x 102,400.
    (An unverified algorithm: a check that ran verify or the lowering first would fail on it instead.)"""
    n = 102_400
    transfers = [Transfer((c,), 0, 1, c) for c in range(n)] + [Transfer((c,), 1, 0, c) for c in range(n)]
    big = Algorithm("big", Collective("allgather", 2, n), tuple(transfers))
    with pytest.raises(LoweringError) as err:
        lower(big)
    assert err.value.field == "XML nodes per rank" and "at least 204803" in err.value.expected


def test_the_size_check_counts_a_forwarded_chunk_as_one_step_and_anything_else_as_two():
    """Rank 1 receives 3000 chunks from rank 0 and sends 3000 to rank 2. Forwarding the chunks it received,
    a receive and a send share a step (3004 XML nodes, within 4096: the check passes and verify refuses
    the unverified algorithm); sending its own chunks, they cannot, and 6004 nodes are refused at once."""
    n = 3000

    def chain(sent: int) -> Algorithm:      # rank 1 sends rank ``sent``'s chunks
        transfers = [Transfer((c,), 0, 1, 0) for c in range(n)] + [Transfer((sent * n + c,), 1, 2, 1)
                                                                    for c in range(n)]
        return Algorithm("chain", Collective("allgather", 3, n), tuple(transfers))

    with pytest.raises(LoweringError) as err:
        lower(chain(0))
    assert err.value.field == "algorithm"
    with pytest.raises(LoweringError) as err:
        lower(chain(1))
    assert err.value.field == "XML nodes per rank" and "rank 1 needs at least 6004 (6000 steps" in err.value.expected


def _numbered_then_checked(monkeypatch):
    """The lowering as it was before the limits moved into ``_number``: every step made under no limit,
    then the program's counts checked against the runtime's (the reference for the pre-check)."""
    from autotaccl.formats.msccl.lower import lower as module
    from autotaccl.formats.msccl.program import LIMITS, Limits

    fast = module._number
    loose = Limits(steps_per_tb=1 << 30, tbs_per_gpu=1 << 30, nodes_per_rank=1 << 30, max_offset=1 << 30)

    def slow(steps, coll, scratch, source, runtime):
        limits = LIMITS[runtime]
        monkeypatch.setitem(LIMITS, runtime, replace(loose, dep_target_tb=limits.dep_target_tb))
        try:
            gpus = fast(steps, coll, scratch, source, runtime)
        finally:
            monkeypatch.setitem(LIMITS, runtime, limits)
        module._check_limits([module._Shape(g.id, g.i_chunks, g.o_chunks, g.s_chunks, tuple(
            (tb.id, tb.send, tb.recv, tb.chan, len(tb.steps)) for tb in g.tbs)) for g in gpus], coll.ranks, source,
            runtime)
        return gpus

    return module, slow


def _outcome(algorithm: Algorithm, options: LoweringOptions) -> str:
    try:
        return lower(algorithm, options)
    except LoweringError as err:
        return f"refused: {err}"


@pytest.mark.parametrize("steps,nodes,channels", [(4, 4096, 32), (9, 4096, 2), (12, 4096, 2), (64, 60, 32),
                                                   (64, 90, 32), (64, 4096, 32)])
@pytest.mark.parametrize("planned", [True, False], ids=["planned-check", "no-planned-check"])
def test_limits_checked_before_the_steps_are_made_refuse_what_the_program_check_refused(monkeypatch, steps, nodes,
                                                                                          channels, planned):
    """Counting a thread block's steps and nops before making them refuses (or keeps) exactly what checking
    the finished program did, with the same message, and the same XML where it loads. Without the earlier
    check of the planned steps (``planned`` off), every refusal comes from these counts."""
    from autotaccl.formats.msccl.program import LIMITS

    module, slow = _numbered_then_checked(monkeypatch)
    monkeypatch.setitem(LIMITS, "msccl-executor", replace(LIMITS["msccl-executor"], steps_per_tb=steps,
                                                          nodes_per_rank=nodes, channels=channels))
    if not planned:
        monkeypatch.setattr(module, "_check_steps", lambda *args: None)
    graph = build_topology(load_hardware("dgx-a100"), 2)
    cases = [(ring_allreduce(8), LoweringOptions()), (ring_allgather(16), LoweringOptions(instances=2)),
             (baseline(graph, "allreduce", "hierarchical"), LoweringOptions())]
    fast = [_outcome(a, o) for a, o in cases]
    monkeypatch.setattr(module, "_number", slow)
    assert fast == [_outcome(a, o) for a, o in cases]
    if not planned and channels == 2:     # too few channels to spread the chunks over
        assert any("on msccl-executor" in outcome for outcome in fast)
