"""``route``: build the routing MILP over the sketch's candidates, warm-start it, solve, read the trees."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Mapping

from ...errors import InfeasibleError
from ...milp import SolverOptions, solve
from ...milp.solution import NoSolutionError, Solution, StageReport
from ...sketch.logical import LogicalTopology
from .candidates import chunk_edges
from .model import RoutingModel, build
from .start import warm_start
from .symmetry import group_order, symmetry_permutations
from .trees import Send, check_trees, start_trees

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoutingOptions:
    milp: SolverOptions = SolverOptions()
    slack: int | None = None         # extra hops allowed beyond the sketch's shortest route; None = auto:
                                     # 1 while that keeps at most `auto_slack_limit` candidates, else 0
    auto_slack_limit: int = 4_000   # transfer columns (after symmetry) that slack 1 may create
    load_alpha: float = 0.0           # share of a transfer's alpha charged to resource loads (arrivals pay it
                                     # whole): batching and pipelining pay one alpha for many chunks, and
                                     # charging it per chunk makes the model spread chunks over slow links
    traffic_weight: float = 1e-3     # weight of the summed bandwidth time of all transfers, per transfer
    tie_weight: float = 1e-3         # weight of the unique-connection / min-max terms, relative to one transfer
    start: tuple[Send, ...] | None = None   # a known routing (e.g. the greedy schedule's sends) as the MIP start;
                                            # its links join the candidates; symmetric chunks take their
                                            # orbit representative's tree (a non-symmetric start is dropped)


@dataclass(frozen=True)
class Routing:
    """Each chunk's tree of transfers, with the routing model's arrival times (a relaxation)."""
    sends: tuple[Send, ...]                      # sorted by chunk, then estimated arrival
    arrival: Mapping[tuple[int, int], float]     # (chunk, rank) -> estimated arrival time (µs)
    makespan: float                              # the stage-1 bound
    report: StageReport
    reverse: bool = False                        # routed on the reversed graph (for combine)

    def parents(self) -> dict[tuple[int, int], int]:
        """(chunk, rank) -> the rank it receives the chunk from."""
        return {(c, v): u for c, u, v in self.sends}


def route(lt: LogicalTopology, options: RoutingOptions = RoutingOptions()) -> Routing:
    """Stage 1: solve the routing MILP and return each chunk's tree of transfers."""
    began = time.perf_counter()
    perms = symmetry_permutations(lt)
    cand, slack = _candidates(lt, options, perms)
    given = start_trees(lt, options.start) if options.start else None
    if given is not None:
        cand = _with_start_links(cand, given, perms)
    built = build(lt, options, cand, perms)
    start_from = warm_start(lt, built, given)
    sol = solve(built.model, options.milp)
    return _extract(lt, built, sol, f"slack {slack}; start {start_from}", began)


def _candidates(lt: LogicalTopology, options: RoutingOptions, perms) -> tuple[dict[int, list[tuple[int, int]]], int]:
    """Every chunk's candidate links and the slack they were built with (auto: 1 unless too many)."""
    C = lt.collective.num_chunks
    slack = 1 if options.slack is None else options.slack
    cand = {c: chunk_edges(lt, c, slack) for c in range(C)}
    if options.slack is None and sum(map(len, cand.values())) > options.auto_slack_limit * group_order(perms):
        slack = 0
        cand = {c: chunk_edges(lt, c, slack) for c in range(C)}
    return cand, slack


def _with_start_links(cand: dict[int, list[tuple[int, int]]], given: dict[int, dict[int, int]],
                      perms) -> dict[int, list[tuple[int, int]]]:
    """The candidates plus the links the start uses, and their images (candidate sets stay symmetric)."""
    extra = {(c, u, v) for c, tree in given.items() for v, u in tree.items() if (u, v) not in cand[c]}
    todo = list(extra)
    while todo:
        c, u, v = todo.pop()
        for sigma, cmap in perms:
            image = (cmap[c], sigma[u], sigma[v])
            if image not in extra:
                extra.add(image)
                todo.append(image)
    for c, u, v in extra:
        cand[c].append((u, v))
    return {c: sorted(set(edges)) for c, edges in cand.items()}


def _extract(lt: LogicalTopology, b: RoutingModel, sol: Solution, note: str, began: float) -> Routing:
    """The chosen sends (checked to be one tree per chunk) and arrival times of a solved model."""
    coll = lt.collective
    if sol.status == "infeasible":
        raise InfeasibleError(f"the routing model is infeasible for {coll.name} on {lt.graph.graph.get('name')}: "
                              f"the sketch's ordering or relay rules cannot all hold ({sol.message})")
    if sol.values is None:
        raise NoSolutionError(f"routing: {sol.message} ({sol.solver}, {sol.variables} variables)")
    vals, col_x, col_a = sol.values, b.col_x, b.col_a
    sends = sorted(((c, u, v) for c, u, v in b.triples if vals[col_x[(c, u, v)]] > 0.5),
                   key=lambda s: (s[0], vals[col_a[(s[0], s[2])]], s[1], s[2]))
    arrival = {(c, r): float(vals[col_a[(c, r)]]) for c, r in b.arrivals}
    check_trees(lt, sends, b.sources)
    report = StageReport(time.perf_counter() - began, sol.variables, sol.constraints, sol.status, sol.solver,
                         note + (f"; {sol.message}" if sol.message else ""))
    log.info("routing: %d sends, bound %.1f us, %s", len(sends), sol.objective or 0.0, report)
    return Routing(tuple(sends), arrival, float(vals[b.T]), report)
