"""The algorithm IR: an ordered list of chunk transfers, its JSON form, and ``verify``.

Every producer (synthesizer, baselines, XML import) emits an :class:`Algorithm`; every consumer
(simulator, verifier, mpi runner, lowering, tracking) reads one.

Semantics: the list order is program order. A transfer reads ``chunks`` on ``src`` as they are
after all earlier transfers and either copies them to ``dst`` (overwriting) or reduces them into
``dst``'s values. ``step`` is a non-decreasing logical step (transfers of one step may run at once
where their data allows); ``start_us`` is an optional planned start time. ``channel`` says which of the
algorithm's parallel channels moves it (NCCL's channels: transfers between the same ranks on different
channels run side by side; on one channel they take turns).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import networkx as nx

from ..documents import read_document
from ..errors import InputError
from .collectives import MAX_CHUNKS, NAMES, Collective
from .topology import reducing_switch

FORMAT = "autotaccl-algorithm"
VERSION = 1
SWITCH_OPS = ("switch_reduce", "switch_broadcast")
OPS = ("copy", "reduce") + SWITCH_OPS


@dataclass(frozen=True, slots=True)
class Transfer:
    chunks: tuple[int, ...]
    src: int
    dst: int
    step: int
    op: str = "copy"
    link: int = 0
    start_us: float | None = None
    channel: int = 0
    group: tuple[int, ...] = ()     # a switch operation's ranks (sorted); () for a copy or reduce

    @property
    def through_switch(self) -> bool:
        return bool(self.group)

    def at_step(self, step: int) -> Transfer:
        """This transfer at ``step``, built directly: ``dataclasses.replace`` took a third of the time of
        stepping a million-transfer schedule."""
        return Transfer(self.chunks, self.src, self.dst, step, self.op, self.link, self.start_us, self.channel,
                        self.group)


def switch_ops(algorithm: "Algorithm") -> int:
    """How many of ``algorithm``'s transfers are switch operations (a runtime without multimem runs none)."""
    return sum(1 for t in algorithm.transfers if t.group)


def fused_switch_pairs(transfers: Sequence[Transfer]) -> dict[int, int]:
    """switch_reduce -> the switch_broadcast of the same cells from the same rank over the same group that
    next touches any of them (nothing in between does). A runtime runs the pair as one operation that
    stores each piece as it load-reduces it (MSCCL++'s glres, as its DSL fuses them; the executor has no
    load-reduce without a store), so the lowering writes it once and the simulator times it once."""
    out: dict[int, int] = {}
    pending: dict[int, int] = {}                 # chunk -> open switch_reduce
    for t, tr in enumerate(transfers):
        opened = {pending.pop(c) for c in tr.chunks if c in pending}
        if len(opened) == 1 and tr.op == "switch_broadcast":
            u = opened.pop()
            first = transfers[u]
            if (first.src, first.group, sorted(first.chunks)) == (tr.src, tr.group, sorted(tr.chunks)):
                out[u] = t
                continue
        if tr.op == "switch_reduce":
            for c in tr.chunks:
                pending[c] = t
    return out


@dataclass(frozen=True)
class Algorithm:
    name: str
    collective: Collective
    transfers: tuple[Transfer, ...]
    topology: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ranks(self) -> int:
        return self.collective.ranks

    @property
    def num_steps(self) -> int:
        return 1 + max((t.step for t in self.transfers), default=-1)


# --------------------------------------------------------------------------- JSON


def to_json(algorithm: Algorithm) -> dict:
    def transfer(t: Transfer) -> dict:
        out = {"chunks": list(t.chunks), "src": t.src, "dst": t.dst, "step": t.step, "op": t.op}
        if t.link:
            out["link"] = t.link
        if t.start_us is not None:
            out["start_us"] = round(t.start_us, 6)
        if t.channel:
            out["channel"] = t.channel
        if t.group:
            out["group"] = list(t.group)
        return out

    c = algorithm.collective
    return {"format": FORMAT, "version": VERSION, "name": algorithm.name, "topology": algorithm.topology,
            "collective": {"name": c.name, "ranks": c.ranks, "chunkup": c.chunkup, "root": c.root},
            "transfers": [transfer(t) for t in algorithm.transfers], "metadata": dict(algorithm.metadata)}


def save_algorithm(algorithm: Algorithm, path: str | Path) -> None:
    """Write the JSON form atomically (a crash leaves no half-written file)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(to_json(algorithm), indent=1) + "\n")
    tmp.replace(path)


def load_algorithm(path: str | Path) -> Algorithm:
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "file", "an existing algorithm JSON file")
    return from_json(read_document(path, "json"), str(path))


def load_verified(path: str | Path) -> Algorithm:
    """``load_algorithm`` plus ``verify``: an algorithm that does not implement its collective is bad input."""
    algorithm = load_algorithm(path)
    try:
        verify(algorithm)
    except VerificationError as err:
        where = "transfers" if err.index is None else f"transfers[{err.index}]"
        raise InputError(str(path), where, f"a correct {algorithm.collective.name} ({err})") from None
    return algorithm


def from_json(data: Any, source: str = "<algorithm>") -> Algorithm:
    """Validate and build an Algorithm; every error names the offending field."""
    def fail(where: str, expected: str) -> InputError:
        return InputError(source, where, expected)

    if not isinstance(data, dict):
        raise fail("document", "a JSON object")
    if data.get("format") != FORMAT:
        raise fail("format", f'"{FORMAT}"')
    if type(data.get("version")) is not int or data["version"] != VERSION:     # true == 1 in Python
        raise fail("version", f"{VERSION} (this autotaccl reads version {VERSION})")
    coll = data.get("collective")
    if not isinstance(coll, dict):
        raise fail("collective", "an object with name, ranks, chunkup")
    if coll.get("name") not in NAMES:
        raise fail("collective.name", f"one of: {', '.join(NAMES)}")
    ints = {}
    for key, low, default in (("ranks", 2, None), ("chunkup", 1, 1), ("root", 0, 0)):
        value = coll.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise fail(f"collective.{key}", f"a whole number >= {low}")
        ints[key] = value
    if ints["root"] >= ints["ranks"]:
        raise fail("collective.root", f"a rank in 0..{ints['ranks'] - 1}")
    collective = Collective(coll["name"], ints["ranks"], ints["chunkup"], ints["root"])
    if collective.num_chunks > MAX_CHUNKS:
        raise fail("collective.ranks", f"a collective of at most {MAX_CHUNKS} chunks (ranks x chunkup gives "
                                       f"{collective.num_chunks})")
    raw = data.get("transfers")
    if not isinstance(raw, list):
        raise fail("transfers", "a list")
    transfers = []
    last_step = 0
    for i, t in enumerate(raw):
        where = f"transfers[{i}]"
        if not isinstance(t, dict):
            raise fail(where, "an object")
        unknown = sorted(set(t) - {"chunks", "src", "dst", "step", "op", "link", "start_us", "channel", "group"})
        if unknown:
            raise fail(f"{where}.{unknown[0]}", "only chunks, src, dst, step, op, link, start_us, channel, group")
        chunks = t.get("chunks")
        if (not isinstance(chunks, list) or not chunks
                or any(isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < collective.num_chunks for c in chunks)):
            raise fail(f"{where}.chunks", f"a non-empty list of chunk ids in 0..{collective.num_chunks - 1}")
        if len(set(chunks)) != len(chunks):
            raise fail(f"{where}.chunks", "each chunk once")
        for key in ("src", "dst"):
            value = t.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < collective.ranks:
                raise fail(f"{where}.{key}", f"a rank in 0..{collective.ranks - 1}")
        op = t.get("op", "copy")
        if op not in OPS:
            raise fail(f"{where}.op", f"one of: {', '.join(OPS)}")
        group = _group(t, op, collective.ranks, fail, where)
        if not group and t["src"] == t["dst"]:
            raise fail(f"{where}.dst", "a rank other than src")
        step = t.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < last_step:
            raise fail(f"{where}.step", f"a whole number >= {last_step} (steps never decrease)")
        last_step = step
        link, channel = t.get("link", 0), t.get("channel", 0)
        for key, value in (("link", link), ("channel", channel)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise fail(f"{where}.{key}", "a whole number >= 0")
        start = t.get("start_us")
        if start is not None and (isinstance(start, bool) or not isinstance(start, (int, float)) or not 0 <= start < math.inf):
            raise fail(f"{where}.start_us", "a number >= 0")
        transfers.append(Transfer(tuple(chunks), t["src"], t["dst"], step, op, link,
                                  None if start is None else float(start), channel, group))
    name = data.get("name", "")
    metadata = data.get("metadata", {})
    if not isinstance(name, str):
        raise fail("name", "a string")
    if not isinstance(metadata, dict):
        raise fail("metadata", "an object")
    return Algorithm(name, collective, tuple(transfers), str(data.get("topology", "")), metadata)


def _group(t: dict, op: str, ranks: int, fail, where: str) -> tuple[int, ...]:
    """A switch operation's group (sorted, with its issuing rank ``src == dst``); () for a copy or reduce."""
    group = t.get("group")
    if op not in SWITCH_OPS:
        if group is not None:
            raise fail(f"{where}.group", f"no group: only switch operations ({', '.join(SWITCH_OPS)}) have one")
        return ()
    if (not isinstance(group, list) or len(group) < 2 or len(set(group)) != len(group)
            or any(isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < ranks for g in group)):
        raise fail(f"{where}.group", f"a list of two or more distinct ranks in 0..{ranks - 1}")
    if t["src"] != t["dst"] or t["src"] not in group:
        raise fail(f"{where}.dst", "the rank that issues the switch operation: src, a member of group")
    return tuple(sorted(group))


# --------------------------------------------------------------------------- verify


class VerificationError(ValueError):
    """The algorithm does not implement its collective; ``index`` is the first offending transfer (or None)."""

    def __init__(self, message: str, index: int | None = None) -> None:
        self.index = index
        super().__init__(message if index is None else f"transfer {index}: {message}")


def initial_state(collective: Collective) -> list[dict[int, frozenset[int]]]:
    """Per rank, chunk -> the set of ranks whose input its value contains."""
    state: list[dict[int, frozenset[int]]] = [{} for _ in range(collective.ranks)]
    for c in range(collective.num_chunks):
        pre = collective.precondition(c)
        for r in pre:
            state[r][c] = frozenset((r,)) if collective.is_reduction else pre
    return state


def verify(algorithm: Algorithm, graph: nx.DiGraph | None = None) -> None:
    """Replay chunk possession (and partial sums) and prove the postcondition, or raise VerificationError.

    With ``graph``, every transfer must also use an existing link.
    """
    coll = algorithm.collective
    if graph is not None and graph.number_of_nodes() != coll.ranks:
        raise VerificationError(f"the algorithm has {coll.ranks} ranks but the topology has {graph.number_of_nodes()}")
    state = initial_state(coll)
    for i, t in enumerate(algorithm.transfers):
        if t.group:
            _verify_switch(t, i, coll, state, graph)
            continue
        if not (0 <= t.src < coll.ranks and 0 <= t.dst < coll.ranks) or t.src == t.dst:
            raise VerificationError(f"ranks {t.src}->{t.dst} are not two ranks of 0..{coll.ranks - 1}", i)
        if graph is not None:
            if not graph.has_edge(t.src, t.dst):
                raise VerificationError(f"no link from rank {t.src} to rank {t.dst}", i)
            if t.link >= graph.edges[t.src, t.dst].get("links", 1):
                raise VerificationError(f"link index {t.link} does not exist between {t.src} and {t.dst}", i)
        if t.op == "reduce" and not coll.is_reduction:
            raise VerificationError(f"a reduce in {coll.name}, which combines nothing", i)
        src, dst = state[t.src], state[t.dst]
        for c in t.chunks:
            if not 0 <= c < coll.num_chunks:
                raise VerificationError(f"chunk {c} does not exist", i)
            value = src.get(c)
            if value is None:
                raise VerificationError(f"chunk {c} sent from rank {t.src} before it arrived there", i)
            if t.op == "copy":
                dst[c] = value
            else:
                old = dst.get(c)
                if old is None:
                    raise VerificationError(f"chunk {c} reduced into rank {t.dst}, which holds no value of it", i)
                twice = old & value
                if twice:
                    raise VerificationError(
                        f"chunk {c} reduced into rank {t.dst} counts rank(s) {sorted(twice)} twice", i)
                dst[c] = old | value
    for c in range(coll.num_chunks):
        full = coll.precondition(c)
        for r in sorted(coll.postcondition(c)):
            value = state[r].get(c)
            if value is None:
                raise VerificationError(f"rank {r} never gets chunk {c}")
            if value != full:
                raise VerificationError(
                    f"rank {r} ends with chunk {c} missing contributions from rank(s) {sorted(full - value)}")


def _verify_switch(t: Transfer, i: int, coll: Collective, state: list[dict[int, frozenset[int]]],
                   graph: nx.DiGraph | None) -> None:
    """Replay one switch operation (module docstring) on ``state``: a load-reduce sums every member's
    contributions, each counted once; a store copies the issuer's value to every member."""
    if t.op not in SWITCH_OPS or t.src != t.dst or t.src not in t.group or len(set(t.group)) < 2:
        raise VerificationError(f"a switch operation ({', '.join(SWITCH_OPS)}) issued by src == dst, a member of "
                                f"its group of two or more ranks", i)
    if any(not 0 <= g < coll.ranks for g in t.group):
        raise VerificationError(f"group {list(t.group)} holds ranks outside 0..{coll.ranks - 1}", i)
    if t.op == "switch_reduce" and not coll.is_reduction:
        raise VerificationError(f"a switch_reduce in {coll.name}, which combines nothing", i)
    if graph is not None:
        if reducing_switch(graph, t.group) is None:
            raise VerificationError(f"ranks {list(t.group)} share no switch that reduces (nccl.nvls)", i)
    for c in t.chunks:
        if not 0 <= c < coll.num_chunks:
            raise VerificationError(f"chunk {c} does not exist", i)
        if t.op == "switch_broadcast":
            value = state[t.src].get(c)
            if value is None:
                raise VerificationError(f"chunk {c} stored through the switch from rank {t.src} before it arrived "
                                        f"there", i)
            for g in t.group:
                state[g][c] = value
            continue
        values = [state[g].get(c) for g in t.group]
        if None in values:
            g = t.group[values.index(None)]
            raise VerificationError(f"chunk {c} load-reduced from rank {g}, which holds no value of it", i)
        total = frozenset().union(*values)
        if len(total) != sum(map(len, values)):      # some contribution in two members' values
            twice = sorted(r for r in total if sum(r in v for v in values) > 1)
            raise VerificationError(f"chunk {c} load-reduced over {list(t.group)} counts rank(s) {twice} twice", i)
        state[t.dst][c] = total


def renumber_steps(transfers: Iterable[Transfer]) -> tuple[Transfer, ...]:
    """Transfers sorted stably by step, with steps renumbered 0, 1, 2, ... without gaps."""
    ordered = sorted(transfers, key=lambda t: t.step)
    mapping = {s: i for i, s in enumerate(sorted({t.step for t in ordered}))}
    return tuple(t.at_step(mapping[t.step]) for t in ordered)
