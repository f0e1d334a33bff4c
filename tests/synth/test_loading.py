"""Synthesis for the runtime that loads it (``SynthOptions.runtime``): the greedy engine never returns a
schedule whose lowering exceeds the runtime's limits, and says so when none fits. The lowering is the
real one (MSCCL XML for msccl-executor, MSCCL++ plans) that ``lower`` and ``export`` write."""
from __future__ import annotations

import pytest

from autotaccl.errors import InfeasibleError, ParameterError
from autotaccl.formats import mscclpp
from autotaccl.formats.loading import loader
from autotaccl.formats.msccl import LoweringError, LoweringOptions, lower
from autotaccl.selection import attainable_us
from autotaccl.simulate import simulate
from autotaccl.synth import Loader, SynthOptions, synthesize
from autotaccl.tuning.cache import cache_key

G = 1 << 30


@pytest.mark.slow
def test_for_msccl_executor_the_reducescatter_in_slices_comes_in_as_many_pieces_as_it_loads(topo):
    """Two DGX-H100, ReduceScatter at 1 GiB under x8 instances: unchecked, the engine ships 64 pieces per
    root, which need about twice the executor's 4096 XML nodes per rank; for msccl-executor it ships
    fewer pieces that lower at x8 and stay within 1% of that time (97% of the attainable bound)."""
    g = topo("dgx-h100", 2)
    options = SynthOptions(engine="greedy", size=G, instances=8)
    unchecked = synthesize(g, "reducescatter", None, options).algorithm
    with pytest.raises(LoweringError, match="XML nodes per rank"):
        lower(unchecked, LoweringOptions(instances=8))
    loadable = synthesize(g, "reducescatter", None, SynthOptions(**{**options.__dict__,
                                                                   "runtime": loader("msccl-executor")})).algorithm
    assert loadable.metadata["pieces"] < unchecked.metadata["pieces"]
    assert "<algo" in lower(loadable, LoweringOptions(instances=8))
    fast, loaded = (simulate(a, g, G, "Simple", 8).time_us for a in (unchecked, loadable))
    assert loaded <= fast * 1.01 and attainable_us(g, "reducescatter", G) / loaded >= 0.97


@pytest.mark.slow
def test_for_mscclpp_the_schedule_keeps_its_thread_blocks_resident(topo):
    """Two DGX-H100, AllGather at 1 MiB under LL x8: the rails in pieces need more than the 80 thread
    blocks per rank an MSCCL++ plan keeps resident; synthesized for mscclpp, the schedule's plan fits."""
    g = topo("dgx-h100", 2)
    options = SynthOptions(engine="greedy", size=1 << 20, protocol="LL", instances=8)
    plan_options = mscclpp.PlanOptions(proto="LL", instances=8)
    with pytest.raises(mscclpp.LoweringError, match="thread blocks per GPU: at most 80"):
        mscclpp.lower_plan(synthesize(g, "allgather", None, options).algorithm, g, plan_options)
    loadable = synthesize(g, "allgather", None, SynthOptions(**{**options.__dict__,
                                                                "runtime": loader("mscclpp", g)})).algorithm
    assert max(len(gpu.threadblocks) for gpu in mscclpp.lower_plan(loadable, g, plan_options).gpus) <= 80


def test_where_the_runtime_loads_nothing_the_engine_says_why(topo):
    g = topo("ndv2", 1)
    refuse = Loader("nothing", lambda algorithm, protocol, instances: f"nothing loads {protocol} x {instances}")
    with pytest.raises(InfeasibleError, match="no greedy schedule of allgather loads: nothing loads LL x 3"):
        synthesize(g, "allgather", None, SynthOptions(engine="greedy", protocol="LL", instances=3, runtime=refuse))


def test_a_runtime_is_named_in_the_cache_key_and_checked(topo):
    g = topo("ndv2", 1)
    plain = SynthOptions(engine="greedy")
    keys = {cache_key("allgather", "sk", "fp", SynthOptions(engine="greedy", runtime=loader(name, g)))
            for name in ("msccl-executor", "msccl", "mscclpp")}
    assert len(keys | {cache_key("allgather", "sk", "fp", plain)}) == 4
    with pytest.raises(ParameterError, match="runtime"):
        loader("nccl")
    with pytest.raises(ParameterError, match="graph"):
        loader("mscclpp")
    with pytest.raises(ParameterError, match="SynthOptions.runtime"):
        SynthOptions(runtime="msccl-executor")


@pytest.mark.slow
@pytest.mark.timeout(1800)      # minutes of CPU: a synthesis and two lowerings of 261 120 transfers
def test_on_256_gpus_the_default_runtime_loads_a_schedule_near_the_bound(topo):
    """DGX-H100 x32, AllReduce at 1 GiB, synthesized as ``synth`` does by default (msccl-executor,
    Simple x1): the schedule's XML fits the executor's limits (steps per thread block, XML nodes per
    rank) and it is within 90% of the attainable bound (issue 36 part 4)."""
    from autotaccl.formats.msccl import lower_program
    from autotaccl.formats.msccl.program import LIMITS

    g = topo("dgx-h100", 32)
    algorithm = synthesize(g, "allreduce", None, SynthOptions(engine="greedy", size=G,
                                                             runtime=loader("msccl-executor"))).algorithm
    assert attainable_us(g, "allreduce", G, switch=False) / simulate(algorithm, g, G).time_us >= 0.90
    program = lower_program(algorithm, LoweringOptions())
    limits = LIMITS["msccl-executor"]
    assert max(len(tb.steps) for gpu in program.gpus for tb in gpu.tbs) <= limits.steps_per_tb
    assert max(1 + program.ngpus + len(gpu.tbs) + sum(len(tb.steps) for tb in gpu.tbs)
               for gpu in program.gpus) <= limits.nodes_per_rank


def test_a_loader_lowers_an_algorithm_asked_again_once(topo, monkeypatch):
    """Asked again right after about the same object and run, a loader answers from its one lowering (the
    same answer, a refusal too); another run, or another object, is lowered anew."""
    from dataclasses import replace

    from autotaccl.formats import msccl
    from autotaccl.sketch import default_sketch, logical_topology
    from autotaccl.synth.greedy.select import sketch_baselines

    g = topo("ndv2", 2)
    ring = sketch_baselines(logical_topology(g, "allgather", default_sketch(g, "allgather"), 1 << 20))[0]
    real, lowered = msccl.lower_program, []
    monkeypatch.setattr(msccl, "lower_program", lambda a, o: lowered.append(a) or real(a, o))
    check = loader("msccl-executor")
    assert check.problem(ring, "Simple", 1) is None and check.problem(ring, "Simple", 1) is None
    assert len(lowered) == 1
    assert check.problem(ring, "Simple", 2) is None and len(lowered) == 2       # another run
    broken = replace(ring, transfers=ring.transfers[:-1])                        # fails verify: refused
    refused = check.problem(broken, "Simple", 1)
    assert refused and "verify" in refused and check.problem(broken, "Simple", 1) == refused and len(lowered) == 3
    twin = replace(ring)                                                          # equal, another object
    assert twin == ring and check.problem(twin, "Simple", 1) is None and len(lowered) == 4
