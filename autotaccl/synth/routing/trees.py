"""A routing as one tree of sends per chunk: checking one, reading one from given sends."""
from __future__ import annotations

import logging

from ...model.algorithm import Algorithm
from ...sketch.logical import LogicalTopology

log = logging.getLogger(__name__)

Send = tuple[int, int, int]          # (chunk, src, dst)


def sends_of(algorithm: Algorithm) -> tuple[Send, ...]:
    """The (chunk, src, dst) sends of an algorithm, in program order (a routing start, ``RoutingOptions.start``)."""
    return tuple((c, t.src, t.dst) for t in algorithm.transfers for c in t.chunks)


def start_trees(lt: LogicalTopology, sends) -> dict[int, dict[int, int]] | None:
    """chunk -> {rank: parent} from a routing's sends (first arrival kept), or None if it is not a routing."""
    coll = lt.collective
    trees: dict[int, dict[int, int]] = {c: {} for c in range(coll.num_chunks)}
    for c, u, v in sends:
        if not 0 <= c < coll.num_chunks or (u, v) not in lt.edges:
            log.info("routing: start send %s is not a link of the sketch; start dropped", (c, u, v))
            return None
        trees[c].setdefault(v, u)
    try:
        check_trees(lt, [(c, u, v) for c, tree in trees.items() for v, u in tree.items()],
                     {c: next(iter(coll.precondition(c))) for c in trees})
    except AssertionError as err:
        log.info("routing: the start is not a routing (%s); dropped", err)
        return None
    return trees


def check_trees(lt: LogicalTopology, sends, sources) -> None:
    """Every destination gets each chunk once, from a rank that had it (guards the model's correctness)."""
    coll = lt.collective
    got: dict[int, dict[int, int]] = {}
    for c, u, v in sends:
        if v in got.setdefault(c, {}):
            raise AssertionError(f"routing sends chunk {c} to rank {v} twice")
        got[c][v] = u
    for c in range(coll.num_chunks):
        have = got.get(c, {})
        for r in coll.postcondition(c) - {sources[c]}:
            if r not in have:
                raise AssertionError(f"routing leaves rank {r} without chunk {c}")
        for v, u in have.items():
            seen = set()
            while u != sources[c]:
                if u in seen or u not in have:
                    raise AssertionError(f"routing forwards chunk {c} from rank {u}, which never receives it")
                seen.add(u)
                u = have[u]
