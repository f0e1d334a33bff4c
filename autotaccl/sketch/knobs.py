"""Sketch <-> knobs: a sketch as flat, scalar values a search space can sample, and the sketch they describe.

A knob is one named value (a string, a number or a boolean) for one target (a hardware profile and a
node count). GPU maps are strings (``relay_map: "1:0+1,3:2"``: local sender -> local receivers),
symmetry too (``symmetry: "2/16;16/32"``: ``[offset, size]`` pairs, or ``none``). The search space
(``autotaccl.tuning.space``) adds the knobs that are not the sketch's (the MILP gap, the lowering's).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import InputError
from ..model.hardware import HardwareProfile
from .schema import (CONN_KEYWORDS, ENGINES, INTRANODE_STRATEGIES, MAX_CHUNKUP, ORDERINGS, SWITCH_OBJECTIVES,
                     TACCL_HEURISTICS, Engine, Pairs, Sketch, sketch_from_dict)

DEFAULT_ENGINE: Engine = "greedy"     # a sample without an engine knob: seconds per trial


@dataclass(frozen=True)
class KnobContext:
    """What a knob's value is checked against: GPUs per node and nodes of the target."""

    gpus: int
    nodes: int


Check = Callable[[Any, KnobContext], "str | None"]   # None if the value is fine, else what was expected


@dataclass(frozen=True)
class Knob:
    check: Check
    network: bool = False      # only for targets with nodes > 1


def one_of(*allowed: Any) -> Check:
    def check(value: Any, ctx: KnobContext) -> str | None:
        ok = any(value == a and type(value) is type(a) for a in allowed)
        return None if ok else f"one of: {', '.join(map(str, allowed))}"
    return check


def whole(low: int, high: int | None = None) -> Check:
    def check(value: Any, ctx: KnobContext) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
        return None if ok else (f"a whole number in {low}..{high}" if high else f"a whole number >= {low}")
    return check


# --------------------------------------------------------------------------- GPU maps and symmetry as strings


def parse_gpu_map(text: str, gpus: int, where: str = "map") -> dict[str, list[int]]:
    """``"1:0+1,3:2"`` -> ``{"1": [0, 1], "3": [2]}`` (local GPU ids); ValueError naming the problem."""
    out: dict[str, list[int]] = {}
    for part in str(text).split(","):
        head, sep, tail = part.strip().partition(":")
        try:
            sender = int(head)
            targets = [int(t) for t in tail.split("+")] if sep else []
        except ValueError:
            raise ValueError(f'{where}: "S:G[+G..],..." with local GPU ids, got {text!r}') from None
        if not targets or any(not 0 <= g < gpus for g in [sender, *targets]) or str(sender) in out:
            raise ValueError(f'{where}: "S:G[+G..],..." with distinct senders and GPU ids in 0..{gpus - 1}, got {text!r}')
        out[str(sender)] = sorted(set(targets))
    return out


def format_gpu_map(pairs: Pairs) -> str:
    """The inverse of :func:`parse_gpu_map`: ``((1, (0, 1)), (3, (2,)))`` -> ``"1:0+1,3:2"``."""
    return ",".join(f"{s}:{'+'.join(map(str, targets))}" for s, targets in pairs)


def parse_symmetry(text: str, ranks: int) -> list[list[int]]:
    """``"2/16;16/32"`` -> ``[[2, 16], [16, 32]]``; ``"none"`` -> ``[]``."""
    if str(text).strip().lower() == "none":
        return []
    offsets = []
    for part in str(text).split(";"):
        try:
            offset, size = (int(x) for x in part.split("/"))
        except ValueError:
            raise ValueError(f'"none" or "OFFSET/SIZE[;OFFSET/SIZE..]", got {text!r}') from None
        if not (0 < offset < size <= ranks and ranks % size == 0):
            raise ValueError(f"OFFSET/SIZE with 0 < OFFSET < SIZE, SIZE dividing the {ranks} ranks, got {part!r}")
        offsets.append([offset, size])
    return offsets


def format_symmetry(offsets: tuple[tuple[int, int], ...]) -> str:
    """The inverse of :func:`parse_symmetry`."""
    return ";".join(f"{o}/{s}" for o, s in offsets) if offsets else "none"


def _map_check(allow_any: bool) -> Check:
    def check(value: Any, ctx: KnobContext) -> str | None:
        if not isinstance(value, str):
            return 'a string "S:G[+G..],..."'
        if allow_any and value == "any":
            return None
        try:
            parse_gpu_map(value, ctx.gpus)
        except ValueError as err:
            return str(err).partition(": ")[2]
        return None
    return check


def _symmetry_check(value: Any, ctx: KnobContext) -> str | None:
    if not isinstance(value, str):
        return '"none" or a string "OFFSET/SIZE[;OFFSET/SIZE..]"'
    try:
        parse_symmetry(value, ctx.gpus * ctx.nodes)
    except ValueError as err:
        return str(err)
    return None


def _ordering_check(value: Any, ctx: KnobContext) -> str | None:
    ok = value in ORDERINGS if isinstance(value, str) else (
        isinstance(value, int) and not isinstance(value, bool) and value in TACCL_HEURISTICS)
    return None if ok else f"one of: {', '.join(ORDERINGS)} (or TACCL's {', '.join(map(str, TACCL_HEURISTICS))})"


SKETCH_KNOBS: dict[str, Knob] = {
    "engine": Knob(one_of(*ENGINES)),
    "intranode_strategy": Knob(one_of(*INTRANODE_STRATEGIES)),
    "switch_policy": Knob(one_of(*SWITCH_OBJECTIVES)),
    "internode_conn": Knob(one_of("relay", *CONN_KEYWORDS), network=True),
    "relay_map": Knob(_map_check(False), network=True),
    "sender_map": Knob(_map_check(True), network=True),
    "enforce_ordering": Knob(one_of(True, False), network=True),
    "symmetry": Knob(_symmetry_check),
    "chunkup": Knob(whole(1, MAX_CHUNKUP)),
    "ordering": Knob(_ordering_check),
    "contiguity": Knob(one_of(True, False)),
    "batch_window": Knob(whole(1, 64)),
}


# --------------------------------------------------------------------------- knobs -> sketch -> knobs


def sketch_document(profile: HardwareProfile, nodes: int, knobs: Mapping[str, Any],
                    source: str = "<knobs>") -> dict[str, Any]:
    """The TACCL-format sketch (taccl.md §2) that ``knobs`` describe for ``nodes`` copies of ``profile``.

    Knobs that are not sketch knobs are ignored; absent ones take TACCL's defaults for the hardware.
    """
    gpus = profile.gpus_per_node
    strategy = knobs.get("intranode_strategy", "switch" if profile.switches else "none")
    intranode: dict[str, Any] = {"strategy": strategy}
    if strategy == "switch":
        if not profile.switches:
            raise InputError(source, "intranode_strategy", f"not switch: {profile.name} has no switches")
        intranode["switches"] = [list(s.gpus) for s in profile.switches]
        intranode["switch_hyperedge_strategy"] = [knobs.get("switch_policy", "uc-min")] * len(profile.switches)
    sketch: dict[str, Any] = {"nnodes": nodes, "intranode_sketch": intranode}
    if nodes > 1:
        conn = knobs.get("internode_conn", "relay" if "relay_map" in knobs else "direct-map")
        if conn == "relay":
            conn = parse_gpu_map(knobs.get("relay_map", "0:0"), gpus, "relay_map")
        internode: dict[str, Any] = {"strategy": "relay", "internode_conn": conn,
                                     "enforce_ordering": bool(knobs.get("enforce_ordering", False))}
        sender_map = knobs.get("sender_map", "any")
        if sender_map != "any":
            internode["gpus_to_sender_rev_map"] = parse_gpu_map(sender_map, gpus, "sender_map")
        sketch["internode_sketch"] = internode
    sketch["symmetry_offsets"] = parse_symmetry(knobs.get("symmetry", "none"), gpus * nodes)
    sketch["hyperparameters"] = {"input_chunkup": int(knobs.get("chunkup", 1))}
    own = {key: knobs[key] for key in ("ordering", "contiguity", "batch_window") if key in knobs}
    sketch["autotaccl"] = {"engine": knobs.get("engine", DEFAULT_ENGINE), **own}
    return sketch


def sketch_from_knobs(profile: HardwareProfile, nodes: int, knobs: Mapping[str, Any],
                      source: str = "<knobs>") -> Sketch:
    """The validated :class:`Sketch` that ``knobs`` describe (errors name ``source`` and the knobs)."""
    return sketch_from_dict(sketch_document(profile, nodes, knobs, source), f"{source} (params {dict(knobs)})")


def knobs_of(sketch: Sketch) -> dict[str, Any]:
    """The sketch knobs that describe ``sketch`` (the inverse of :func:`sketch_from_knobs`)."""
    knobs: dict[str, Any] = {"chunkup": sketch.input_chunkup, "intranode_strategy": sketch.intranode_strategy,
                             "switch_policy": sketch.switch_objective, "ordering": sketch.ordering,
                             "contiguity": sketch.contiguity, "batch_window": sketch.batch_window}
    if sketch.engine:
        knobs["engine"] = sketch.engine
    knobs["symmetry"] = format_symmetry(sketch.symmetry_offsets)
    if sketch.nnodes > 1:
        conn = sketch.internode_conn
        knobs["enforce_ordering"] = sketch.enforce_ordering
        if isinstance(conn, str):
            knobs["internode_conn"] = conn
        else:
            knobs["internode_conn"] = "relay"
            knobs["relay_map"] = format_gpu_map(conn)
        knobs["sender_map"] = "any" if sketch.sender_map is None else format_gpu_map(sketch.sender_map)
    return knobs
