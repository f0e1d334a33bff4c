"""The wide rails (``forest._wide_rails``): beyond ``MAX_SHALLOW_NODES`` nodes, where a root's data is one
slice, the rail trees one network hop deep instead of chains. Shown on four DGX-H100 with the threshold
lowered to two nodes, so the small fabric takes the path that 32 and 64 nodes take (the real
msccl-executor lowering decides whether it loads; the simulator whether it is faster)."""
from __future__ import annotations

import pytest

from autotaccl.formats.loading import loader
from autotaccl.model.algorithm import verify
from autotaccl.simulate import simulate
from autotaccl.sketch import default_sketch, logical_topology
from autotaccl.synth.greedy import forest
from autotaccl.synth.greedy.forest import orders, rail_schedules

M = 1 << 20
GPN = 8


@pytest.fixture
def many_nodes(monkeypatch):
    """Four nodes count as many: beyond the threshold the one-slice rails are chains, and wide beside them."""
    monkeypatch.setattr(forest, "MAX_SHALLOW_NODES", 2)


def schedules(topo, collective: str, size: int = M, nodes: int = 4) -> tuple:
    g = topo("dgx-h100", nodes)
    lt = logical_topology(g, collective, default_sketch(g, collective), size)
    return g, lt, dict(rail_schedules(lt))


def fastest_order(lt, algorithm, protocol: str) -> float:
    """The simulated time of the faster of a schedule's list orders, as the engine offers both."""
    return min(simulate(a, lt.graph, M, protocol).time_us for a in orders(lt, algorithm))


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_at_1m_the_wide_rails_cross_the_network_once_load_and_beat_the_chains(topo, many_nodes, collective):
    g, lt, found = schedules(topo, collective)
    wide, chains = found["wide rails"], found["rails"]
    verify(wide, g)

    def crossings(algorithm):
        """Per network transfer, whether it leaves or enters its root's node (chunk c is root c // chunkup's)."""
        k = algorithm.collective.chunkup
        return [(t.chunks[0] // k) // GPN in (t.src // GPN, t.dst // GPN)
                for t in algorithm.transfers if t.src // GPN != t.dst // GPN]

    # one network hop from or into the root's node, never between two other nodes as a chain forwards
    assert crossings(wide) and all(crossings(wide)) and not all(crossings(chains))
    assert loader("msccl-executor").problem(wide, "Simple", 1) is None
    # under Simple (what synth judges by default) a network hop costs the most, so depth shows most
    assert fastest_order(lt, wide, "Simple") < 0.8 * fastest_order(lt, chains, "Simple")
    assert fastest_order(lt, wide, "LL128") < fastest_order(lt, chains, "LL128")


@pytest.mark.slow
@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_on_eight_nodes_the_wide_rails_are_faster_under_ll128_too_and_load(topo, many_nodes, collective):
    g, lt, found = schedules(topo, collective, nodes=8)
    wide = found["wide rails"]
    assert fastest_order(lt, wide, "LL128") < 0.85 * fastest_order(lt, found["rails"], "LL128")
    assert all(loader("msccl-executor").problem(a, "LL128", 1) is None for a in orders(lt, wide))


def test_the_wide_rails_are_only_for_one_slice_beyond_the_threshold(topo, many_nodes, monkeypatch):
    *_, large = schedules(topo, "allgather", 1 << 30)
    assert "wide rails" not in large
    monkeypatch.setattr(forest, "MAX_SHALLOW_NODES", 16)
    *_, few = schedules(topo, "allgather")
    assert "wide rails" not in few
