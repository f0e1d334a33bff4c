"""What a search space's knobs mean: the sketch's own (``autotaccl.sketch.knobs``) plus how to synthesize
and how to lower, and the sketch and settings one sample of a space stands for."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ...errors import InputError
from ...formats.msccl.program import PROTOCOLS, Protocol
from ...sizes import parse_size
from ...sketch import Engine, Sketch
from ...sketch.knobs import DEFAULT_ENGINE, SKETCH_KNOBS, Knob, KnobContext, knobs_of, one_of, sketch_from_knobs, whole
from .model import SearchSpace


def _nonneg_number(value: Any, ctx: KnobContext) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    return None if ok else "a number >= 0"


def _size_check(value: Any, ctx: KnobContext) -> str | None:
    try:
        parse_size(value)
    except InputError as err:
        return err.expected
    return None


MAX_INSTANCES = 8     # a space's instances knob: a whole number in 1..MAX_INSTANCES


# every knob a space may search or fix, in the order its error messages list them
KNOBS: dict[str, Knob] = {
    **SKETCH_KNOBS,
    "mip_gap": Knob(_nonneg_number),
    "synth_size": Knob(_size_check),
    "instances": Knob(whole(1, MAX_INSTANCES)),
    "protocol": Knob(one_of(*PROTOCOLS)),
}


@dataclass(frozen=True)
class Settings:
    """The non-sketch knobs of one sample: how to synthesize and how to lower."""

    engine: Engine = DEFAULT_ENGINE
    mip_gap: float | None = None
    synth_size: int = 0
    instances: int = 1
    protocol: Protocol = "Simple"


def settings(space: SearchSpace, params: Mapping[str, Any]) -> Settings:
    """The settings of one sample (``synth_size`` defaults to the middle size of the sweep)."""
    sizes = space.sizes
    middle = sizes[len(sizes) // 2]
    return Settings(engine=params.get("engine", DEFAULT_ENGINE), mip_gap=params.get("mip_gap"),
                    synth_size=parse_size(params["synth_size"]) if "synth_size" in params else middle,
                    instances=int(params.get("instances", 1)), protocol=params.get("protocol", "Simple"))


def params_to_sketch(space: SearchSpace, params: Mapping[str, Any]) -> Sketch:
    """The synthesis sketch for one sample of ``space``."""
    return sketch_from_knobs(space.profile, space.nodes, params, space.source)


def sketch_to_params(space: SearchSpace, sketch: Sketch) -> dict[str, Any] | None:
    """The parameter values that describe ``sketch`` in ``space`` (None if the space cannot express it).

    Used to enqueue known-good sketches (``default_sketch``) as ordinary trials.
    """
    knobs = knobs_of(sketch)
    for name, value in space.fixed.items():
        if name in knobs and knobs[name] != value:
            return None
    params: dict[str, Any] = {}
    values: dict[str, Any] = dict(space.fixed)
    for p in space.parameters:
        if not p.active(values) or p.name not in knobs:
            continue
        if not p.contains(knobs[p.name]):
            return None
        params[p.name] = values[p.name] = knobs[p.name]
    return params
