"""The bound ends the search: MILP stages stop at it, and the MILP is skipped when greedy is already there.

Real HiGHS runs on NDv2 x2 (16 GPUs); every result passes ``verify`` (``synthesize`` runs it, and so do
the tests on the stage outputs).
"""
import pytest

from autotaccl.bounds import bound_time_us, bounds
from autotaccl.errors import ParameterError
from autotaccl.milp import SolverOptions
from autotaccl.model.algorithm import verify
from autotaccl.sketch import default_sketch, logical_topology
from autotaccl.synth import SynthOptions, synthesize
from autotaccl.synth.routing import RoutingOptions, route
from autotaccl.synth.stopping import skip_reason, stop_at_bound

MiB, GiB = 1 << 20, 1 << 30


def a2a_lt(topo):
    graph = topo("ndv2", 2)
    return logical_topology(graph, "alltoall", default_sketch(graph, "alltoall"), MiB)


def test_the_routing_makespan_is_never_below_the_bound_and_stops_within_the_gap(topo):
    lt = a2a_lt(topo)
    bound = bound_time_us(bounds(lt.graph, "alltoall"), MiB)
    exact = route(lt, RoutingOptions(milp=SolverOptions("highs", 60)))
    assert exact.report.status == "optimal"
    assert exact.makespan >= bound * (1 - 1e-6)            # the bound holds for the model's makespan
    solver = stop_at_bound(SolverOptions("highs", 60), lt.graph, "alltoall", MiB, 0.01)
    assert solver.stop_at == pytest.approx(bound * 1.01)
    stopped = route(lt, RoutingOptions(milp=solver))
    assert stopped.report.status == "at_bound" and "within the gap of the known bound" in stopped.report.message
    assert bound * (1 - 1e-6) <= stopped.makespan <= solver.stop_at
    assert stop_at_bound(solver, lt.graph, "alltoall", None, 0.01) is solver      # no size: unchanged


@pytest.mark.slow
def test_synthesis_stops_each_stage_at_the_bound_and_verifies(topo):
    graph = topo("ndv2", 2)
    result = synthesize(graph, "alltoall", options=SynthOptions(engine="milp", solver="highs", time_limit=3, size=MiB))
    assert result.stages["routing"].status == "at_bound"
    verify(result.algorithm, graph)
    assert result.algorithm.metadata["status"] == result.status


@pytest.mark.slow
def test_the_milp_is_skipped_when_greedy_is_at_the_bound(topo):
    graph = topo("ndv2", 2)
    options = SynthOptions(engine="milp", solver="highs", time_limit=20, size=GiB)
    result = synthesize(graph, "allgather", options=options)
    assert result.status.startswith("skipped: greedy at ") and result.status.endswith("% of the bound")
    share = float(result.status.split(" at ")[1].split("%")[0])
    assert 99.0 <= share <= 100.0
    assert set(result.stages) == {"greedy", "milp"} and result.stages["milp"].status == "skipped"
    assert result.algorithm.metadata["engine"] == "milp"
    verify(result.algorithm, graph)
    # bound_gap 0: the MILP runs (and select keeps the faster)
    searched = synthesize(graph, "allgather", options=SynthOptions(engine="milp", solver="highs", time_limit=20,
                                                                   size=GiB, bound_gap=0.0))
    assert not searched.status.startswith("skipped") and "routing" in searched.stages


def test_greedy_far_from_the_bound_is_not_skipped(topo):
    graph = topo("ndv2", 1)
    lt = logical_topology(graph, "allgather", default_sketch(graph, "allgather"), MiB)
    result = synthesize(graph, "allgather", options=SynthOptions(engine="greedy", size=MiB))
    assert skip_reason(result.algorithm, lt.graph, MiB, 0.01) is None
    assert skip_reason(result.algorithm, lt.graph, MiB, 0.99).startswith("skipped: greedy at ")


def test_bound_gap_is_checked():
    with pytest.raises(ParameterError, match="bound_gap"):
        SynthOptions(bound_gap=1.0)


@pytest.mark.parametrize("field, value", [("protocol", "ll"), ("protocol", "NVLS"), ("instances", 0),
                                          ("instances", True), ("instances", 1.5)])
def test_the_run_is_checked(field, value):
    with pytest.raises(ParameterError, match=f"SynthOptions.{field}"):
        SynthOptions(**{field: value})
