"""The sketch's rotations as automorphisms of the logical topology, and the orbits they make of columns."""
from __future__ import annotations

import logging

from ...sketch.logical import LogicalTopology

log = logging.getLogger(__name__)


def symmetry_permutations(lt: LogicalTopology) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The sketch's rotations that are automorphisms of the logical topology, as (rank map, chunk map).

    A rotation ``[offset, size]`` maps ``r -> (r mod size + offset) mod size + (r div size) * size``.
    Rotations that do not preserve the allowed links, their costs and kinds, the chunk structure and
    the sender map are dropped (logged), so the substitution never changes the problem.
    """
    coll = lt.collective
    R, n_chunks = coll.ranks, coll.num_chunks
    key = {}
    for c in range(n_chunks):
        key[(coll.precondition(c), coll.postcondition(c), c % coll.chunkup)] = c
    out = []
    for offset, size in lt.symmetry:
        if size <= 0 or R % size:
            log.warning("symmetry [%d, %d] ignored: size does not divide %d ranks", offset, size, R)
            continue
        sigma = tuple((r % size + offset) % size + (r // size) * size for r in range(R))
        if sigma == tuple(range(R)):
            continue
        reason = _check_automorphism(lt, sigma)
        chunk_map = []
        if not reason:
            for c in range(n_chunks):
                image = key.get((frozenset(sigma[r] for r in coll.precondition(c)),
                                 frozenset(sigma[r] for r in coll.postcondition(c)), c % coll.chunkup))
                if image is None:
                    reason = f"chunk {c} has no image"
                    break
                chunk_map.append(image)
        if not reason:
            for c, s in lt.senders.items():
                if lt.senders.get(chunk_map[c]) != frozenset(sigma[r] for r in s):
                    reason = f"the sender map of chunk {c} is not symmetric"
                    break
        if reason:
            log.warning("symmetry [%d, %d] ignored: %s", offset, size, reason)
            continue
        out.append((sigma, tuple(chunk_map)))
    return out


def _check_automorphism(lt: LogicalTopology, sigma: tuple[int, ...]) -> str:
    for u, v in lt.edges:
        a, b = sigma[u], sigma[v]
        if (a, b) not in lt.edges:
            return f"link {u}->{v} maps to {a}->{b}, which the sketch does not allow"
        e, f = lt.graph.edges[u, v], lt.graph.edges[a, b]
        if e["kind"] != f["kind"] or abs(lt.cost_us(u, v) - lt.cost_us(a, b)) > 1e-9 * max(1.0, lt.cost_us(u, v)):
            return f"link {u}->{v} and its image {a}->{b} differ in kind or cost"
    return ""


def group_order(perms) -> int:
    """How many rank permutations the symmetry generators produce (the identity included)."""
    if not perms:
        return 1
    ident = tuple(range(len(perms[0][0])))
    seen, todo = {ident}, [ident]
    while todo:
        p = todo.pop()
        for sigma, _ in perms:
            q = tuple(sigma[i] for i in p)
            if q not in seen:
                seen.add(q)
                todo.append(q)
    return len(seen)


class Orbits:
    """Union-find over hashable items; ``index`` numbers the orbits 0, 1, ..."""

    def __init__(self, items) -> None:
        self.parent = {x: x for x in items}

    def find(self, x):
        p = self.parent
        while p[x] != x:
            p[x] = p[p[x]]
            x = p[x]
        return x

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def index(self) -> dict:
        roots: dict = {}
        return {x: roots.setdefault(self.find(x), len(roots)) for x in sorted(self.parent)}
