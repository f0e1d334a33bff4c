"""The cyclic garbage collector is paused while synthesis, the XML lowering and the simulator build their
objects, and is left as it was found, whatever the stage raises."""
from __future__ import annotations

import gc
import importlib

import pytest

from autotaccl.formats.msccl import LoweringOptions, lower
from autotaccl.gcpause import gc_paused
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.synth import Loader, SynthOptions, synthesize


@pytest.fixture
def collector_on():
    was_on = gc.isenabled()
    gc.enable()
    yield
    gc.enable() if was_on else gc.disable()


def test_the_collector_is_off_inside_and_as_found_after_even_on_an_error(collector_on):
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():             # nested: the inner one leaves it off for the outer
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyboardInterrupt):
        with gc_paused():
            raise KeyboardInterrupt
    assert gc.isenabled()
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()        # off before: not switched on by the stage


def test_synthesis_and_its_runtime_checks_run_with_the_collector_off(collector_on, monkeypatch):
    """The runtime check runs inside synthesis (a real lowering of each choice); both see the collector off."""
    graph = build_topology(load_hardware("ndv2"), 1)
    seen = []

    def problem(algorithm, protocol, instances):
        seen.append(gc.isenabled())
        lower(algorithm, LoweringOptions(instances=instances, proto=protocol))
        return None

    synthesize(graph, "allgather", None, SynthOptions(engine="greedy", runtime=Loader("recorded", problem)))
    assert seen == [False] and gc.isenabled()
    states = []
    lowering = importlib.import_module("autotaccl.formats.msccl.lower.lower")
    real = lowering._program
    monkeypatch.setattr(lowering, "_program", lambda *args, **kw: states.append(gc.isenabled()) or real(*args, **kw))
    algorithm = synthesize(graph, "allgather", None, SynthOptions(engine="greedy")).algorithm
    assert "<algo" in lower(algorithm) and states == [False] and gc.isenabled()


def test_a_simulation_builds_its_plan_and_runs_its_event_loop_with_the_collector_off(collector_on, monkeypatch):
    """Simulating a ring AllGather on two NDv2 at 1 GiB: the plan (its protocol terms) and the event loop
    (its heap) see the collector off, and it is on again after."""
    from autotaccl.baselines import baseline
    sim = importlib.import_module("autotaccl.simulate")
    graph = build_topology(load_hardware("ndv2"), 2)
    ring = baseline(graph, "allgather", "ring")
    seen = {}
    terms, heapify = sim.protocol_terms, sim.heapq.heapify
    monkeypatch.setattr(sim, "protocol_terms", lambda *a: seen.setdefault("plan", gc.isenabled()) or terms(*a))
    monkeypatch.setattr(sim.heapq, "heapify", lambda xs: seen.setdefault("loop", gc.isenabled()) or heapify(xs))
    assert sim.simulate(ring, graph, 1 << 30).time_us > 0
    assert seen == {"plan": False, "loop": False} and gc.isenabled()
