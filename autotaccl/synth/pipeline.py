"""``synthesize``: sketch + topology + collective -> a verified Algorithm, by one of two engines.

``greedy`` (:mod:`autotaccl.synth.greedy`: seconds, any size) or ``milp`` (TACCL's stages: routing MILP,
ordering heuristic, scheduling MILP, combine for reductions; warm-started from greedy). The MILP engine
returns the faster of its algorithm and greedy's at ``options.size`` (status ``heuristic`` when greedy
won, ``fallback`` when the model is too big or the solver finds nothing), and is skipped, or stops a
stage, once within ``options.bound_gap`` of the bound (:mod:`.stopping`)."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Mapping

import networkx as nx

from .. import sketch as sketches
from ..errors import InfeasibleError, ParameterError
from ..gcpause import gc_paused
from ..milp.gurobi import LicenceLimitError
from ..milp.solution import SOLVERS, NoSolutionError, Solver, SolverOptions, StageReport
from ..model.algorithm import Algorithm, switch_ops, verify
from ..model.collectives import canonical_name
from ..model.protocols import PROTOCOLS
from ..sketch import ENGINES, Engine
from ..sketch.logical import LogicalTopology
from .greedy import greedy
from .stopping import skip_reason, stop_at_bound

log = logging.getLogger(__name__)

MAX_ROUTING_CANDIDATES = 60_000   # (chunk, link) pairs beyond which the routing MILP is not attempted


@dataclass(frozen=True)
class Loader:
    """The runtime a schedule is synthesized for (``autotaccl.formats.loading.loader`` makes one per runtime):
    ``problem(algorithm, protocol, instances)`` is None when ``name`` loads the algorithm run that way,
    else why not, in one line (a runtime limit the lowering would exceed). ``switch``: it runs switch
    operations (multimem), so synthesis offers it schedules with them."""

    name: str
    problem: Callable[[Algorithm, str, int], str | None] = field(compare=False, repr=False)
    switch: bool = False


@dataclass(frozen=True)
class SynthOptions:
    """How to synthesize: everything besides the topology, the collective and the sketch that decides the result."""

    engine: Engine = "milp"
    solver: Solver = "auto"
    time_limit: float = 600.0       # seconds per MILP stage
    threads: int = 1
    mip_gap: float = 1e-4
    size: int = 1 << 20             # nccl-tests buffer size the schedule is tuned for (bytes)
    bound_gap: float = 0.01         # within this share of the bound no search is worth it (0: search on)
    protocol: str = "Simple"        # the run it is tuned for: the simulator judges candidates under this
    instances: int = 1              # runtime protocol and instance count
    runtime: Loader | None = None   # only schedules this runtime loads with them (None: any)

    def __post_init__(self) -> None:
        def fail(name: str, value: object, expected: str) -> ParameterError:
            return ParameterError(f"SynthOptions.{name}", str(value), expected)

        if self.engine not in ENGINES:
            raise fail("engine", repr(self.engine), f"one of: {', '.join(ENGINES)}")
        if self.solver not in SOLVERS:
            raise fail("solver", repr(self.solver), f"one of: {', '.join(SOLVERS)}")
        if not self.time_limit > 0:
            raise fail("time_limit", self.time_limit, "a positive number of seconds")
        if self.threads < 1:
            raise fail("threads", self.threads, "a whole number >= 1")
        if not self.mip_gap >= 0:
            raise fail("mip_gap", self.mip_gap, "a number >= 0")
        if self.size <= 0:
            raise fail("size", self.size, "a positive size")
        if not 0 <= self.bound_gap < 1:
            raise fail("bound_gap", self.bound_gap, "a share of the bound in [0, 1)")
        if self.protocol not in PROTOCOLS:
            raise fail("protocol", repr(self.protocol), f"one of: {', '.join(PROTOCOLS)}")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int) or self.instances < 1:
            raise fail("instances", repr(self.instances), "a whole number >= 1")
        if self.runtime is not None and not isinstance(self.runtime, Loader):
            raise fail("runtime", repr(self.runtime), "a Loader (autotaccl.loader) or None")

    def settings(self) -> dict:
        """Every option as plain data (cache keys, tracking): the runtime by its name, left out when None."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "runtime"}
        if self.runtime is not None:
            out["runtime"] = self.runtime.name
        return out

    def admit(self) -> Callable[[Algorithm], str | None] | None:
        """Why the runtime cannot load an algorithm run with these options (None: it can); None: no runtime."""
        loader = self.runtime
        if loader is None:
            return None
        return lambda algorithm: loader.problem(algorithm, self.protocol, self.instances)


@dataclass(frozen=True)
class SynthResult:
    algorithm: Algorithm
    status: str                                   # optimal | time_limit | heuristic | fallback | skipped: ...
    stages: Mapping[str, StageReport] = field(default_factory=dict)
    seconds: float = 0.0


@gc_paused()
def synthesize(graph: nx.DiGraph, collective_name: str, sketch: "sketches.Sketch | None" = None,
               options: SynthOptions = SynthOptions()) -> SynthResult:
    """A verified algorithm for ``collective_name`` on ``graph`` under ``sketch`` (default: the hardware's).

    Raises InputError for sketch fields the topology cannot satisfy and InfeasibleError when the sketch
    admits no algorithm (the message says which GPU cannot reach which node).
    """
    began = time.perf_counter()
    name = canonical_name(collective_name)
    if sketch is None:
        sketch = sketches.default_sketch(graph, name)
    lt = sketches.logical_topology(graph, name, sketch, options.size)
    check_routes(lt)
    if options.engine == "greedy":
        algorithm, stages, status = _greedy(lt, options, sketch)
    else:
        algorithm, stages, status = _milp(lt, options, sketch)
    metadata = {**dict(algorithm.metadata), "engine": options.engine, "status": status,
                "sketch_key": sketches.sketch_key(sketch), "synth_size": options.size}
    algorithm = replace(algorithm, metadata=metadata)
    verify(algorithm, graph)
    seconds = time.perf_counter() - began
    log.info("synthesized %s on %s with %s in %.2f s (%s)", name, graph.graph.get("name"), options.engine, seconds, status)
    return SynthResult(algorithm, status, stages, seconds)


def check_routes(lt: LogicalTopology) -> None:
    """Raise InfeasibleError unless every chunk can reach every node that needs it under the sketch."""
    coll = lt.collective
    gpn = lt.graph.graph["gpus_per_node"]
    out: dict[int, list[int]] = {}
    for u, v in lt.edges:
        out.setdefault(u, []).append(v)
    seen_owner: dict[tuple[int, frozenset], set[int]] = {}
    for c in range(coll.num_chunks):
        owners = (c // coll.chunkup,) if coll.is_reduction else tuple(coll.precondition(c))
        for owner in owners:
            senders = lt.senders.get(c)
            key = (owner, senders or frozenset())
            if key not in seen_owner:
                node = owner // gpn
                reached, todo = {owner}, [owner]
                while todo:
                    u = todo.pop()
                    for v in out.get(u, ()):
                        leaving = u // gpn == node and v // gpn != node
                        if v not in reached and not (leaving and senders is not None and u not in senders):
                            reached.add(v)
                            todo.append(v)
                seen_owner[key] = reached
            reached = seen_owner[key]
            targets = range(coll.ranks) if coll.is_reduction else coll.postcondition(c)
            for r in sorted(targets):
                if r not in reached:
                    raise InfeasibleError(f"no route from GPU {owner} to node {r // gpn} (GPU {r}) under this sketch")


# --------------------------------------------------------------------------- engines


def _greedy(lt: LogicalTopology, options: SynthOptions, sketch) -> tuple[Algorithm, dict, str]:
    began = time.perf_counter()
    algorithm = greedy(lt, options.size, batching=sketch.contiguity, gap=options.bound_gap,   # batch_window: the MILP's
                       protocol=options.protocol, instances=options.instances, admit=options.admit(),
                       switch=options.runtime is None or options.runtime.switch)
    report = StageReport(time.perf_counter() - began, 0, 0, "heuristic", "greedy",
                         f"{algorithm.metadata.get('strategy')} routing, batching {algorithm.metadata.get('batching')}")
    return algorithm, {"greedy": report}, "heuristic"


def milp_problem(lt: LogicalTopology) -> str | None:
    """Why the MILP engine cannot run on ``lt`` (it would return the greedy schedule), or None.

    The routing candidates grow with the chunks, i.e. linearly in the chunk-up factor."""
    candidates = lt.collective.num_chunks * len(lt.edges)
    if candidates > MAX_ROUTING_CANDIDATES:
        return f"{candidates} routing candidates exceed {MAX_ROUTING_CANDIDATES}"
    return None


def _milp(lt: LogicalTopology, options: SynthOptions, sketch) -> tuple[Algorithm, dict, str]:
    solver = SolverOptions(options.solver, options.time_limit, options.mip_gap, options.threads)
    coll = lt.collective
    problem = milp_problem(lt)
    if problem:
        return _fallback(lt, options, sketch, problem)
    stages: dict[str, StageReport] = {}
    quick, quick_stages, _ = _greedy(lt, options, sketch)
    skipped = (skip_reason(quick, lt.graph, options.size, options.bound_gap, options.protocol, options.instances)
               if options.bound_gap else None)
    if switch_ops(quick):     # the MILP routes copies only: nothing it finds starts from, or beats, the switch
        skipped = "skipped: greedy schedule through the switch (the MILP has no switch operations)"
    if skipped:
        log.info("milp engine %s", skipped)
        return quick, {**quick_stages, "milp": StageReport(0.0, 0, 0, "skipped", "bound", skipped)}, skipped
    gap = options.bound_gap or None
    try:
        if coll.is_reduction:
            from .combine import combine_stage
            algorithm, stages = combine_stage(lt, sketch, solver, size=options.size, gap=gap)
        else:
            from .routing import sends_of
            solver = stop_at_bound(solver, lt.graph, coll.name, options.size, gap)
            algorithm, stages = _forward(lt, sketch, solver, start=sends_of(quick))
    except NoSolutionError as err:
        return _fallback(lt, options, sketch, str(err))
    except LicenceLimitError as err:   # only when gurobi was asked for by name; auto falls back to highs
        raise ParameterError("SynthOptions.solver", "gurobi",
                             f"a solver that admits this model ({err}); use auto or highs") from None
    done = ("optimal", "at_bound", "heuristic")
    worst = "optimal" if all(s.status in done for s in stages.values()) else "time_limit"
    chosen, report = _select(lt, options, algorithm, quick)
    stages = {**quick_stages, **stages, "select": report}
    if chosen is quick:
        return quick, stages, "heuristic"
    return algorithm, stages, worst


def _select(lt: LogicalTopology, options: SynthOptions, milp: Algorithm, quick: Algorithm) -> tuple[Algorithm, StageReport]:
    """The faster of the MILP's and the greedy algorithm, simulated at the options' size and run (greedy on
    exact ties: it has fewer steps more often than not, and is what the MILP was started from)."""
    from ..selection import Candidate, fastest
    from ..sizes import format_size

    began = time.perf_counter()
    size = options.size
    best, timings = fastest([Candidate(quick, "greedy"), Candidate(milp, "milp")], lt.graph, size, margin=1e-9,
                            prune=False, protocol=options.protocol, instances=options.instances,
                            admit=options.admit())   # both times named
    winner = "greedy" if best is None else best.candidate.label
    times = {t.candidate.label: t.time_us for t in timings}
    refused = "".join(f"; {t.candidate.label} refused: {t.refused}" for t in timings if t.refused)
    message = (f"{winner} kept: milp {times['milp']:.2f} us, greedy {times['greedy']:.2f} us "
               f"at {format_size(size)}{refused}")
    log.info("select: %s", message)
    report = StageReport(time.perf_counter() - began, 0, 0, "heuristic", "simulator", message)
    return (milp if winner == "milp" else quick), report


def _forward(lt: LogicalTopology, sketch, solver: SolverOptions, start=None) -> tuple[Algorithm, dict]:
    from .ordering import order
    from .routing import RoutingOptions, route
    from .scheduling import ScheduleOptions, schedule

    routed = route(lt, RoutingOptions(milp=solver, start=start))
    ordered = order(lt, routed, sketch.ordering)
    scheduled = schedule(lt, routed, ordered, ScheduleOptions(milp=solver, contiguity=sketch.contiguity,
                                                              batch_window=sketch.batch_window))
    stages = {"routing": routed.report, "ordering": ordered.report, "scheduling": scheduled.report}
    return scheduled.algorithm, stages


def _fallback(lt: LogicalTopology, options: SynthOptions, sketch, why: str) -> tuple[Algorithm, dict, str]:
    log.warning("milp engine: %s; using the greedy schedule", why)
    algorithm, stages, _ = _greedy(lt, options, sketch)
    stages = {name: replace(r, message=f"fallback: {why}") for name, r in stages.items()}
    return algorithm, stages, "fallback"

