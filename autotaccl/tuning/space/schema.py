"""Search space files: load and validate a ``search_spaces/*.yaml`` file, and write a space back as one.

The schema is ``search_spaces/README.md``. Everything is checked at load time, before any trial runs;
a mistake is an :class:`~autotaccl.errors.InputError` naming the file and the field.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from ...documents import read_document
from ...errors import InputError
from ...model.collectives import canonical_name
from ...model.hardware import load_hardware
from ...model.topology import nodes_problem
from ...resources import data_dir
from ...safety import safe_name
from ...sizes import parse_size, parse_size_range
from .engines import check_engines
from .knobs import KNOBS, KnobContext
from .model import TYPES, Parameter, SearchSpace

_TOP_KEYS = {"name", "description", "target", "sizes", "parameters", "fixed", "seeds"}
MAX_STEPS = 1_000_000     # values of a stepped parameter (grid and brute-force samplers enumerate them)
_PARAM_KEYS = {"type", "choices", "low", "high", "step", "log", "when"}


# --------------------------------------------------------------------------- loading


def shipped_spaces() -> list[Path]:
    return sorted(data_dir("search_spaces").glob("*.yaml"))


def load_space(path: str | Path) -> SearchSpace:
    """Read and fully validate a search space file (a path, or the name of a shipped space)."""
    path = Path(path)
    if not path.suffix and not path.exists():
        shipped = data_dir("search_spaces") / f"{path}.yaml"
        path = shipped if shipped.exists() else path
    if not path.is_file():
        names = ", ".join(p.stem for p in shipped_spaces())
        raise InputError(str(path), "file", f"an existing search space YAML file or one of: {names}")
    data = read_document(path, "yaml")
    return space_from_dict(data, str(path), default_name=path.stem, base_dir=path.parent)


def space_from_dict(data: Any, source: str = "<search space>", default_name: str = "space",
                    base_dir: Path | None = None) -> SearchSpace:
    def fail(where: str, expected: str) -> InputError:
        return InputError(source, where, expected)

    if not isinstance(data, dict):
        raise fail("document", "a mapping with target, sizes and parameters")
    unknown = sorted(set(map(str, data)) - _TOP_KEYS)
    if unknown:
        raise fail(unknown[0], f"one of the known fields: {', '.join(sorted(_TOP_KEYS))}")
    name = safe_name(data.get("name", default_name), source, "name")

    # target
    target = data.get("target")
    if not isinstance(target, dict):
        raise fail("target", "a mapping with hardware, nodes and collectives")
    extra = sorted(set(map(str, target)) - {"hardware", "nodes", "collective", "collectives"})
    if extra:
        raise fail(f"target.{extra[0]}", "only hardware, nodes, collective(s)")
    hardware = target.get("hardware")
    if not isinstance(hardware, str) or not hardware:
        raise fail("target.hardware", "a hardware profile name or file")
    spec = hardware
    if Path(hardware).suffix and base_dir is not None and not Path(hardware).is_absolute():
        spec = str(base_dir / hardware)
    try:
        profile = load_hardware(spec)
    except InputError as err:
        raise fail("target.hardware", f"{err.expected} (got {hardware!r})") from None
    nodes = target.get("nodes", 1)
    problem = nodes_problem(profile, nodes)
    if problem:
        raise fail("target.nodes", problem)
    if ("collective" in target) == ("collectives" in target):
        raise fail("target.collectives", "either collective: NAME or collectives: [NAMES]")
    raw_colls = target.get("collectives", [target.get("collective")])
    where = "target.collectives" if "collectives" in target else "target.collective"
    if not isinstance(raw_colls, list) or not raw_colls:
        raise fail(where, "a non-empty list of collective names")
    collectives = []
    for i, c in enumerate(raw_colls):
        try:
            collectives.append(canonical_name(c, source))
        except InputError as err:
            raise fail(f"{where}[{i}]" if "collectives" in target else where, err.expected) from None
    if len(set(collectives)) != len(collectives):
        raise fail(where, "each collective once")

    # sizes
    raw_sizes = data.get("sizes")
    try:
        if isinstance(raw_sizes, list) and raw_sizes:
            sizes = sorted({parse_size(s) for s in raw_sizes})
        elif isinstance(raw_sizes, (str, int)) and not isinstance(raw_sizes, bool):
            sizes = parse_size_range(str(raw_sizes))
        else:
            raise fail("sizes", "a size range such as 1K:64M:x4 or a non-empty list of sizes")
    except InputError as err:
        if err.source == source:
            raise
        raise fail("sizes", f"{err.expected} (got {err.field})") from None

    ctx = KnobContext(profile.gpus_per_node, nodes)

    def check_knob(knob: str, value: Any, where: str) -> None:
        problem = KNOBS[knob].check(value, ctx)
        if problem:
            raise fail(where, problem)

    def knob_name(key: Any, where: str) -> str:
        if key not in KNOBS:
            raise fail(where, f"a known knob: {', '.join(KNOBS)}")
        if KNOBS[key].network and nodes == 1:
            raise fail(where, "an intra-node knob (inter-node knobs need target.nodes > 1)")
        return key

    # fixed
    fixed_raw = data.get("fixed") or {}
    if not isinstance(fixed_raw, dict):
        raise fail("fixed", "a mapping of knob: value")
    fixed = {}
    for key, value in fixed_raw.items():
        knob_name(key, f"fixed.{key}")
        check_knob(key, value, f"fixed.{key}")
        fixed[key] = value

    # parameters
    raw_params = data.get("parameters")
    if raw_params is None:
        raw_params = {}
    if not isinstance(raw_params, dict):
        raise fail("parameters", "a mapping of knob: {type, ...}")
    params: list[Parameter] = []
    for key, spec_ in raw_params.items():
        where = f"parameters.{key}"
        knob_name(key, where)
        if key in fixed:
            raise fail(where, "a knob that is not also fixed")
        params.append(_parameter(key, spec_, where, fail, check_knob, params, fixed))
    if not params:
        raise fail("parameters", "at least one searched parameter")

    # seeds
    seeds_raw = data.get("seeds") or []
    if not isinstance(seeds_raw, list):
        raise fail("seeds", "a list of {parameter: value} mappings")
    seeds = []
    by_name = {p.name: p for p in params}
    for i, seed in enumerate(seeds_raw):
        where = f"seeds[{i}]"
        if not isinstance(seed, dict) or not seed:
            raise fail(where, "a non-empty mapping of parameter: value")
        values = dict(fixed)
        for p in params:
            if p.name in seed:
                if not p.active(values):
                    raise fail(f"{where}.{p.name}", f"absent (its condition {dict(p.when)} does not hold)")
                if not p.contains(seed[p.name]):
                    raise fail(f"{where}.{p.name}", f"a value of the parameter's distribution, got {seed[p.name]!r}")
                values[p.name] = seed[p.name]
        extra = sorted(set(map(str, seed)) - set(by_name))
        if extra:
            raise fail(f"{where}.{extra[0]}", f"one of the parameters: {', '.join(by_name)}")
        seeds.append({k: v for k, v in seed.items()})

    space = SearchSpace(name.strip(), source, spec, nodes, tuple(collectives), tuple(sizes), tuple(params),
                        fixed, tuple(seeds), profile)
    check_engines(space)
    return space


def _parameter(key: str, spec: Any, where: str, fail, check_knob, earlier: list[Parameter],
               fixed: Mapping[str, Any]) -> Parameter:
    if not isinstance(spec, dict):
        raise fail(where, "a mapping with type and choices or low/high")
    extra = sorted(set(map(str, spec)) - _PARAM_KEYS)
    if extra:
        raise fail(f"{where}.{extra[0]}", f"one of: {', '.join(sorted(_PARAM_KEYS))}")
    kind = spec.get("type")
    if kind not in TYPES:
        raise fail(f"{where}.type", f"one of: {', '.join(TYPES)} (got {kind!r})")

    when: list[tuple[str, tuple]] = []
    cond = spec.get("when") or {}
    if not isinstance(cond, dict):
        raise fail(f"{where}.when", "a mapping of parameter: value (or list of values)")
    known = {p.name: p for p in earlier}
    for other, allowed in cond.items():
        if other not in known and other not in fixed:
            raise fail(f"{where}.when.{other}", f"a parameter declared above or a fixed knob "
                                                f"(known: {', '.join([*known, *fixed]) or 'none'})")
        allowed = tuple(allowed) if isinstance(allowed, list) else (allowed,)
        if not allowed:
            raise fail(f"{where}.when.{other}", "a value or a non-empty list of values")
        for value in allowed:
            ok = known[other].contains(value) if other in known else fixed[other] == value
            if not ok:
                raise fail(f"{where}.when.{other}", f"a value {other} can take, got {value!r}")
        when.append((other, allowed))

    if kind == "categorical":
        for k in ("low", "high", "step", "log"):
            if k in spec:
                raise fail(f"{where}.{k}", "absent for a categorical parameter (use choices)")
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise fail(f"{where}.choices", "a non-empty list")
        for i, c in enumerate(choices):
            if not isinstance(c, (str, int, float, bool)):
                raise fail(f"{where}.choices[{i}]", "a string, number or boolean")
            check_knob(key, c, f"{where}.choices[{i}]")
        if len({(type(c), c) for c in choices}) != len(choices):
            raise fail(f"{where}.choices", "distinct values")
        return Parameter(key, kind, tuple(choices), when=tuple(when))

    if "choices" in spec:
        raise fail(f"{where}.choices", f"absent for an {kind} parameter (use low and high)")
    numbers = {}
    for k in ("low", "high"):
        v = spec.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind == "int" and not isinstance(v, int)) \
                or not math.isfinite(v):
            raise fail(f"{where}.{k}", f"{'a whole number' if kind == 'int' else 'a finite number'} (required)")
        check_knob(key, v, f"{where}.{k}")
        numbers[k] = v
    if numbers["low"] > numbers["high"]:
        raise fail(f"{where}.low", f"at most high ({numbers['high']}), got {numbers['low']}")
    step = spec.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float)) or not step > 0
                             or not math.isfinite(step)
                             or (kind == "int" and not isinstance(step, int))):
        raise fail(f"{where}.step", "a positive number (whole for int)")
    if step is not None and (numbers["high"] - numbers["low"]) / step > MAX_STEPS:
        raise fail(f"{where}.step", f"a step that gives at most {MAX_STEPS} values from low to high")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise fail(f"{where}.log", "true or false")
    if log and (numbers["low"] <= 0 or step is not None):
        raise fail(f"{where}.log", "false unless low > 0 and no step")
    return Parameter(key, kind, (), numbers["low"], numbers["high"], step, log, tuple(when))


# --------------------------------------------------------------------------- writing


def parameter_to_dict(p: Parameter) -> dict[str, Any]:
    """A parameter as its entry under ``parameters:`` in a space file."""
    spec: dict[str, Any] = {"type": p.kind}
    if p.kind == "categorical":
        spec["choices"] = list(p.choices)
    else:
        spec.update(low=p.low, high=p.high)
        if p.step is not None:
            spec["step"] = p.step
        if p.log:
            spec["log"] = True
    if p.when:
        spec["when"] = {name: list(allowed) for name, allowed in p.when}
    return spec


def space_to_dict(space: SearchSpace, hardware: str) -> dict[str, Any]:
    """The space as a document ``space_from_dict`` reads back equal, its target's profile named by ``hardware``
    (a profile name or file): what the sweep driver writes for its workers, whatever the space came from."""
    return {"name": space.name,
            "target": {"hardware": hardware, "nodes": space.nodes, "collectives": list(space.collectives)},
            "sizes": list(space.sizes), "parameters": {p.name: parameter_to_dict(p) for p in space.parameters},
            "fixed": dict(space.fixed), "seeds": [dict(seed) for seed in space.seeds]}
