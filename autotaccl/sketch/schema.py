"""Communication sketches: TACCL's sketch files, read unchanged, validated, keyed and written back.

A sketch (``taccl.md`` §2) narrows what synthesis may do: which links, which inter-node sender and
receiver pairs, a symmetry hint and a chunk-up factor. Files are TACCL's JSON byte for byte, or the same
as YAML; autotaccl's own knobs (engine, ordering, contiguity, batch_window) sit in an optional top-level
``autotaccl:`` section that TACCL does not read (an example: ``docs/internals.md``)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import networkx as nx

from ..documents import read_document
from ..errors import InfeasibleError, InputError
from ..model.collectives import Collective, make_collective

# The choices of a sketch's fields: each a Literal type (for dataclasses) and its values (for argparse
# ``choices=``, search-space knobs and validation), defined here once.
IntranodeStrategy = Literal["none", "switch", "minmax", "maxmin"]
SwitchObjective = Literal["uc-min", "uc-max"]
ConnKeyword = Literal["direct-map", "fully-connected"]
Engine = Literal["milp", "greedy"]               # the synthesis engines (autotaccl.synth)
OrderingName = Literal["auto", "backward", "longest-first", "own-node-first", "own-node-earliest", "earliest-first"]
INTRANODE_STRATEGIES: tuple[IntranodeStrategy, ...] = get_args(IntranodeStrategy)
SWITCH_OBJECTIVES: tuple[SwitchObjective, ...] = get_args(SwitchObjective)
CONN_KEYWORDS: tuple[ConnKeyword, ...] = get_args(ConnKeyword)
ENGINES: tuple[Engine, ...] = get_args(Engine)
ORDERINGS: tuple[OrderingName, ...] = get_args(OrderingName)
TACCL_HEURISTICS: dict[int, OrderingName] = {5: "backward", 10: "longest-first", 13: "own-node-first",
                                             14: "own-node-earliest", 15: "earliest-first"}
MAX_CHUNKUP = 64       # each rank's buffer is split into ranks * chunkup chunks

Pairs = tuple[tuple[int, tuple[int, ...]], ...]   # ((local GPU, (local GPUs...)), ...) sorted


@dataclass(frozen=True)
class Sketch:
    """A validated sketch; GPU indices are local to a node (0..G-1).

    With a sender map, a chunk leaves its node only through the senders that list its owner; an
    owner no sender lists is not restricted (TACCL crashes on such maps).
    """

    nnodes: int
    intranode_strategy: IntranodeStrategy = "none"
    switches: tuple[tuple[int, ...], ...] = ()
    switch_hyperedge_strategy: tuple[SwitchObjective, ...] = ()
    internode_strategy: Literal["relay"] | None = None   # required when nnodes > 1
    internode_conn: ConnKeyword | Pairs | None = None    # a keyword or sender -> receivers
    sender_map: Pairs | None = None                # gpus_to_sender_rev_map: sender -> GPUs whose chunks it carries out
    enforce_ordering: bool = False
    symmetry_offsets: tuple[tuple[int, int], ...] = ()
    input_chunkup: int = 1
    engine: Engine | None = None
    ordering: OrderingName = "auto"
    contiguity: bool = True
    batch_window: int = 6
    source: str = field(default="<sketch>", compare=False)

    @property
    def switch_objective(self) -> SwitchObjective:
        """TACCL reads only the first switch's unique-connection strategy."""
        return self.switch_hyperedge_strategy[0] if self.switch_hyperedge_strategy else "uc-min"

    def connections(self, gpus_per_node: int) -> dict[int, tuple[int, ...]]:
        """Local sender -> local receivers on every other node ({} for a single-node sketch)."""
        conn = self.internode_conn
        if conn is None:
            return {}
        if conn == "direct-map":
            return {g: (g,) for g in range(gpus_per_node)}
        if conn == "fully-connected":
            return {g: tuple(range(gpus_per_node)) for g in range(gpus_per_node)}
        return dict(conn)


# --------------------------------------------------------------------------- reading


def load_sketch(path: str | Path) -> Sketch:
    """A sketch from TACCL's JSON (unchanged) or the same content as YAML."""
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "file", "an existing sketch file (TACCL JSON or YAML)")
    data = read_document(path)
    return sketch_from_dict(data, str(path))


_TOP = ("nnodes", "intranode_sketch", "internode_sketch", "symmetry_offsets", "hyperparameters", "autotaccl")


def sketch_from_dict(data: Any, source: str = "<sketch>") -> Sketch:
    """Validate a parsed sketch document; every error names the offending field."""
    def fail(where: str, expected: str) -> InputError:
        return InputError(source, where, expected)

    def mapping(value: Any, where: str, allowed: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            raise fail(where, "a mapping")
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            raise fail(f"{where}.{unknown[0]}" if where != "document" else unknown[0],
                       f"one of the known fields: {', '.join(allowed)}")
        return value

    def integer(value: Any, where: str, low: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise fail(where, f"a whole number >= {low}")
        return value

    def gpu(value: Any, where: str) -> int:
        if isinstance(value, str) and value.strip().isdigit():   # JSON object keys are strings
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise fail(where, "a local GPU index (a whole number >= 0)")
        return value

    def gpu_list(value: Any, where: str) -> tuple[int, ...]:
        if not isinstance(value, list) or not value:
            raise fail(where, "a non-empty list of local GPU indices")
        items = [gpu(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if len(set(items)) != len(items):
            raise fail(where, "each GPU once")
        return tuple(sorted(items))

    def pairs(value: Any, where: str) -> Pairs:
        if not isinstance(value, dict) or not value:
            raise fail(where, "a non-empty mapping of local GPU -> list of local GPUs")
        out: dict[int, tuple[int, ...]] = {}
        for key, targets in value.items():
            g = gpu(key, f"{where}.{key}")
            if g in out:
                raise fail(f"{where}.{key}", "each GPU once")
            out[g] = gpu_list(targets, f"{where}.{key}")
        return tuple(sorted(out.items()))

    data = mapping(data, "document", _TOP)
    if "nnodes" not in data:
        raise fail("nnodes", "a whole number >= 1 (required field)")
    nnodes = integer(data["nnodes"], "nnodes", 1)

    intra = mapping(data.get("intranode_sketch", {"strategy": "none"}), "intranode_sketch",
                    ("strategy", "switches", "switch_hyperedge_strategy"))
    strategy = intra.get("strategy", "none")
    if strategy not in INTRANODE_STRATEGIES:
        raise fail("intranode_sketch.strategy", f"one of: {', '.join(INTRANODE_STRATEGIES)}")
    switches: tuple[tuple[int, ...], ...] = ()
    objectives: tuple[str, ...] = ()
    if intra.get("switches") is not None:
        raw = intra["switches"]
        if not isinstance(raw, list):
            raise fail("intranode_sketch.switches", "a list of lists of local GPU indices")
        switches = tuple(gpu_list(s, f"intranode_sketch.switches[{i}]") for i, s in enumerate(raw))
        for i, members in enumerate(switches):
            if len(members) < 2:
                raise fail(f"intranode_sketch.switches[{i}]", "at least two GPUs")
    if strategy == "switch" and not switches:
        raise fail("intranode_sketch.switches", "a non-empty list of switches (strategy is switch)")
    if intra.get("switch_hyperedge_strategy") is not None:
        raw = intra["switch_hyperedge_strategy"]
        if not isinstance(raw, list) or len(raw) != len(switches):
            raise fail("intranode_sketch.switch_hyperedge_strategy", f"a list of {len(switches)} entries, one per switch")
        for i, value in enumerate(raw):
            if value not in SWITCH_OBJECTIVES:
                raise fail(f"intranode_sketch.switch_hyperedge_strategy[{i}]", f"one of: {', '.join(SWITCH_OBJECTIVES)}")
        objectives = tuple(raw)
    elif switches:
        objectives = ("uc-min",) * len(switches)

    inter_strategy, conn, sender_map, enforce = None, None, None, False
    if data.get("internode_sketch") is not None or nnodes > 1:
        if data.get("internode_sketch") is None:
            raise fail("internode_sketch", "a mapping with strategy and internode_conn (required when nnodes > 1)")
        inter = mapping(data["internode_sketch"], "internode_sketch",
                        ("strategy", "internode_conn", "gpus_to_sender_rev_map", "enforce_ordering"))
        inter_strategy = inter.get("strategy")
        if inter_strategy != "relay":
            raise fail("internode_sketch.strategy", '"relay" (the only inter-node strategy)')
        if "internode_conn" not in inter:
            raise fail("internode_sketch.internode_conn", "a value (required field)")
        conn = inter["internode_conn"]
        if isinstance(conn, str):
            if conn not in CONN_KEYWORDS:
                raise fail("internode_sketch.internode_conn", f"{' or '.join(CONN_KEYWORDS)} or a mapping sender -> receivers")
        else:
            conn = pairs(conn, "internode_sketch.internode_conn")
        if inter.get("gpus_to_sender_rev_map") is not None:
            sender_map = pairs(inter["gpus_to_sender_rev_map"], "internode_sketch.gpus_to_sender_rev_map")
            if not isinstance(conn, str):
                senders = {s for s, _ in conn}
                for s, _ in sender_map:
                    if s not in senders:
                        raise fail(f"internode_sketch.gpus_to_sender_rev_map.{s}",
                                   f"a sender listed in internode_conn ({', '.join(map(str, sorted(senders)))})")
        enforce = inter.get("enforce_ordering", False)
        if not isinstance(enforce, bool):
            raise fail("internode_sketch.enforce_ordering", "true or false")

    raw = data.get("symmetry_offsets", [])
    if not isinstance(raw, list):
        raise fail("symmetry_offsets", "a list of [offset, size] pairs")
    symmetry = []
    for i, item in enumerate(raw):
        where = f"symmetry_offsets[{i}]"
        if not isinstance(item, list) or len(item) != 2:
            raise fail(where, "an [offset, size] pair")
        size = integer(item[1], f"{where}[1]", 1)
        offset = integer(item[0], f"{where}[0]", 0)
        if offset >= size:
            raise fail(f"{where}[0]", f"an offset in 0..{size - 1} (below the size)")
        symmetry.append((offset, size))

    hyper = mapping(data.get("hyperparameters", {}), "hyperparameters", ("input_chunkup", "heuristic"))
    chunkup = integer(hyper.get("input_chunkup", 1), "hyperparameters.input_chunkup", 1)
    if chunkup > MAX_CHUNKUP:
        raise fail("hyperparameters.input_chunkup", f"a whole number in 1..{MAX_CHUNKUP}")

    own = mapping(data.get("autotaccl", {}), "autotaccl", ("engine", "ordering", "contiguity", "batch_window"))
    engine = own.get("engine")
    if engine is not None and engine not in ENGINES:
        raise fail("autotaccl.engine", f"one of: {', '.join(ENGINES)}")
    ordering = own.get("ordering", "auto")
    if isinstance(ordering, int) and not isinstance(ordering, bool) and ordering in TACCL_HEURISTICS:
        ordering = TACCL_HEURISTICS[ordering]
    if ordering not in ORDERINGS:
        raise fail("autotaccl.ordering", f"one of: {', '.join(ORDERINGS)} (or TACCL's 5, 10, 13, 14, 15)")
    contiguity = own.get("contiguity", True)
    if not isinstance(contiguity, bool):
        raise fail("autotaccl.contiguity", "true or false")
    window = integer(own.get("batch_window", 6), "autotaccl.batch_window", 1)

    return Sketch(nnodes=nnodes, intranode_strategy=strategy, switches=switches, switch_hyperedge_strategy=objectives,
                  internode_strategy=inter_strategy, internode_conn=conn, sender_map=sender_map,
                  enforce_ordering=enforce, symmetry_offsets=tuple(symmetry), input_chunkup=chunkup,
                  engine=engine, ordering=ordering, contiguity=contiguity, batch_window=window, source=source)


# --------------------------------------------------------------------------- writing, identity


def sketch_to_dict(sketch: Sketch) -> dict:
    """The TACCL document (plus the ``autotaccl`` section); ``sketch_from_dict`` reads it back equal."""
    intra: dict[str, Any] = {"strategy": sketch.intranode_strategy}
    if sketch.switches:
        intra["switches"] = [list(s) for s in sketch.switches]
        intra["switch_hyperedge_strategy"] = list(sketch.switch_hyperedge_strategy)
    out: dict[str, Any] = {"nnodes": sketch.nnodes, "intranode_sketch": intra}
    if sketch.internode_strategy is not None:
        conn = sketch.internode_conn
        inter: dict[str, Any] = {
            "strategy": sketch.internode_strategy,
            "internode_conn": conn if isinstance(conn, str) else {str(s): list(r) for s, r in conn},
            "enforce_ordering": sketch.enforce_ordering}
        if sketch.sender_map is not None:
            inter["gpus_to_sender_rev_map"] = {str(s): list(g) for s, g in sketch.sender_map}
        out["internode_sketch"] = inter
    out["symmetry_offsets"] = [list(p) for p in sketch.symmetry_offsets]
    out["hyperparameters"] = {"input_chunkup": sketch.input_chunkup}
    own: dict[str, Any] = {"ordering": sketch.ordering, "contiguity": sketch.contiguity,
                           "batch_window": sketch.batch_window}
    if sketch.engine is not None:
        own["engine"] = sketch.engine
    out["autotaccl"] = own
    return out


def sketch_key(sketch: Sketch) -> str:
    """A short hash of the canonical form: equal sketches, however written, share it."""
    text = json.dumps(sketch_to_dict(sketch), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- defaults


def default_sketch(graph: nx.DiGraph, collective: str | Collective | None = None) -> Sketch:
    """A TACCL-style sketch known to work on the graph's hardware family.

    Switch hardware declares its switches (uc-min); multi-node sketches relay through the GPUs
    nearest each NIC: with one GPU per NIC, or GPUs that share NICs on one switch (DGX-2), every GPU
    talks to its peer (direct-map), the rails the greedy engine builds (``synth.rails``; faster than the
    pattern below there: ``benchmarks/synthesis.py``); with one
    NIC for a node without a switch (NDv2), the NIC's first near GPU sends to the last one of every
    other node and carries its NIC-mates' chunks out, its own first (TACCL's sk1-ndv2 pattern).
    """
    profile = graph.graph["profile"]
    gpn, nodes = graph.graph["gpus_per_node"], graph.graph["nodes"]
    switches = tuple(tuple(sorted(s.gpus)) for s in profile.switches)
    strategy = "switch" if switches else "none"
    objectives = ("uc-min",) * len(switches)
    symmetry: list[tuple[int, int]] = []
    conn: str | Pairs | None = None
    sender_map: Pairs | None = None
    enforce = False
    if nodes > 1:
        near_sets = [tuple(sorted(g for g in nic.attach if g not in nic.far)) or tuple(sorted(nic.attach))
                     for nic in profile.nics]
        all_near = sorted(g for s in near_sets for g in s) == list(range(gpn))
        if all_near and (all(len(s) == 1 for s in near_sets) or len(switches) == 1 and len(near_sets) > 1):
            conn = "direct-map"
        else:
            conn = tuple(sorted((s[0], (s[-1],)) for s in near_sets))
            if len(near_sets) > 1:   # with one sender per node, a sender map would restrict nothing
                sender_map = tuple(sorted((s[0], s) for s in near_sets))
                covered = {g for s in near_sets for g in s}
                if covered != set(range(gpn)):    # far GPUs hand their chunks to the first sender
                    first = sender_map[0]
                    sender_map = ((first[0], tuple(sorted(set(first[1]) | (set(range(gpn)) - covered)))),) + sender_map[1:]
                enforce = any(len(g) > 1 for _, g in sender_map)
        symmetry.append((gpn, gpn * nodes))
    if switches and len(switches) == 1 and len(switches[0]) == gpn and nodes > 1 and profile.nics:
        per_nic = gpn // len(profile.nics)
        if per_nic * len(profile.nics) == gpn and per_nic < gpn:
            symmetry.insert(0, (per_nic, gpn))
    return Sketch(nnodes=nodes, intranode_strategy=strategy, switches=switches, switch_hyperedge_strategy=objectives,
                  internode_strategy="relay" if nodes > 1 else None, internode_conn=conn, sender_map=sender_map,
                  enforce_ordering=enforce, symmetry_offsets=tuple(symmetry), input_chunkup=1,
                  source=f"<default sketch for {graph.graph.get('name', 'topology')}>")
