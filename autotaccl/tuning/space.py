"""Search spaces: load and validate a ``search_spaces/*.yaml`` file, sample it, turn samples into sketches.

The schema is ``search_spaces/README.md``. Everything is checked at load time, before any trial runs;
a mistake is an :class:`~autotaccl.errors.InputError` naming the file and the field.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import networkx as nx

from ..documents import read_document
from ..errors import InputError
from ..model.collectives import canonical_name
from ..model.hardware import HardwareProfile, load_hardware
from ..model.topology import MAX_RANKS, build_topology
from ..resources import data_dir
from ..safety import safe_name
from ..sizes import format_size, parse_size, parse_size_range

TYPES = ("categorical", "int", "float")
_TOP_KEYS = {"name", "description", "target", "sizes", "parameters", "fixed", "seeds"}
_PARAM_KEYS = {"type", "choices", "low", "high", "step", "log", "when"}


@dataclass(frozen=True)
class Parameter:
    """One searched knob: a distribution, sampled only when its ``when`` condition holds."""

    name: str
    kind: str
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    when: tuple[tuple[str, tuple], ...] = ()

    def active(self, values: Mapping[str, Any]) -> bool:
        return all(name in values and values[name] in allowed for name, allowed in self.when)

    def contains(self, value: Any) -> bool:
        if self.kind == "categorical":
            return any(value == c and type(value) is type(c) for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == "int" and not isinstance(value, int):
            return False
        if not self.low <= value <= self.high:
            return False
        return self.step is None or math.isclose((value - self.low) / self.step,
                                                 round((value - self.low) / self.step), abs_tol=1e-9)

    def values(self) -> list:
        """Every value (categorical, or int with a finite grid); used by exhaustive enumeration."""
        if self.kind == "categorical":
            return list(self.choices)
        if self.kind == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        raise ValueError(f"parameter {self.name} is continuous")


@dataclass(frozen=True)
class SearchSpace:
    name: str
    source: str
    hardware: str
    nodes: int
    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    parameters: tuple[Parameter, ...]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    seeds: tuple[Mapping[str, Any], ...] = ()
    profile: HardwareProfile | None = field(default=None, compare=False, repr=False)

    def graph(self) -> nx.DiGraph:
        return build_topology(self.profile, self.nodes)

    @property
    def target_name(self) -> str:
        return f"{self.profile.name}x{self.nodes}"

    def experiment_name(self, collective: str) -> str:
        """MLflow experiment / Optuna study name of one collective of this target: ``ndv2x2-allgather``."""
        return f"{self.target_name}-{collective}"

    def parameter(self, name: str) -> Parameter:
        return next(p for p in self.parameters if p.name == name)


# --------------------------------------------------------------------------- knobs


@dataclass(frozen=True)
class _Ctx:
    gpus: int
    nodes: int


def _enum(*allowed: Any) -> Callable[[Any, _Ctx], str | None]:
    def check(value: Any, ctx: _Ctx) -> str | None:
        ok = any(value == a and type(value) is type(a) for a in allowed)
        return None if ok else f"one of: {', '.join(map(str, allowed))}"
    return check


def _whole(low: int, high: int | None = None) -> Callable[[Any, _Ctx], str | None]:
    def check(value: Any, ctx: _Ctx) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
        return None if ok else (f"a whole number in {low}..{high}" if high else f"a whole number >= {low}")
    return check


def _nonneg_number(value: Any, ctx: _Ctx) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    return None if ok else "a number >= 0"


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


def _map_check(allow_any: bool) -> Callable[[Any, _Ctx], str | None]:
    def check(value: Any, ctx: _Ctx) -> str | None:
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


def _symmetry_check(value: Any, ctx: _Ctx) -> str | None:
    if not isinstance(value, str):
        return '"none" or a string "OFFSET/SIZE[;OFFSET/SIZE..]"'
    try:
        parse_symmetry(value, ctx.gpus * ctx.nodes)
    except ValueError as err:
        return str(err)
    return None


def _ordering_check(value: Any, ctx: _Ctx) -> str | None:
    from ..sketch import ORDERINGS, TACCL_HEURISTICS

    ok = value in ORDERINGS if isinstance(value, str) else (
        isinstance(value, int) and not isinstance(value, bool) and value in TACCL_HEURISTICS)
    return None if ok else f"one of: {', '.join(ORDERINGS)} (or TACCL's {', '.join(map(str, TACCL_HEURISTICS))})"


def _size_check(value: Any, ctx: _Ctx) -> str | None:
    try:
        parse_size(value)
    except InputError as err:
        return err.expected
    return None


# knob -> (stage, value check); stage "net" knobs need nodes > 1
KNOBS: dict[str, tuple[str, Callable[[Any, _Ctx], str | None]]] = {
    "engine": ("synth", _enum("greedy", "milp")),
    "intranode_strategy": ("sketch", _enum("none", "switch", "maxmin", "minmax")),
    "switch_policy": ("sketch", _enum("uc-min", "uc-max")),
    "internode_conn": ("net", _enum("relay", "direct-map", "fully-connected")),
    "relay_map": ("net", _map_check(False)),
    "sender_map": ("net", _map_check(True)),
    "enforce_ordering": ("net", _enum(True, False)),
    "symmetry": ("sketch", _symmetry_check),
    "chunkup": ("sketch", _whole(1, 64)),
    "ordering": ("sketch", _ordering_check),
    "contiguity": ("sketch", _enum(True, False)),
    "batch_window": ("sketch", _whole(1, 64)),
    "mip_gap": ("synth", _nonneg_number),
    "synth_size": ("synth", _size_check),
    "instances": ("lowering", _whole(1, 8)),
    "protocol": ("lowering", _enum("Simple", "LL", "LL128")),
}


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


def space_from_dict(data: Any, source: str, default_name: str = "space", base_dir: Path | None = None) -> SearchSpace:
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
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise fail("target.nodes", "a whole number >= 1")
    if nodes * profile.gpus_per_node > MAX_RANKS:
        raise fail("target.nodes", f"at most {MAX_RANKS // profile.gpus_per_node} nodes of {profile.name} "
                                   f"({MAX_RANKS} ranks in all)")
    if nodes > 1 and not profile.nics:
        raise fail("target.nodes", f"1 (profile {profile.name} has no NICs)")
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

    ctx = _Ctx(profile.gpus_per_node, nodes)

    def check_knob(knob: str, value: Any, where: str) -> None:
        problem = KNOBS[knob][1](value, ctx)
        if problem:
            raise fail(where, problem)

    def knob_name(key: Any, where: str) -> str:
        if key not in KNOBS:
            raise fail(where, f"a known knob: {', '.join(KNOBS)}")
        if KNOBS[key][0] == "net" and nodes == 1:
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

    return SearchSpace(name.strip(), source, spec, nodes, tuple(collectives), tuple(sizes), tuple(params),
                       fixed, tuple(seeds), profile)


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
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise fail(f"{where}.log", "true or false")
    if log and (numbers["low"] <= 0 or step is not None):
        raise fail(f"{where}.log", "false unless low > 0 and no step")
    return Parameter(key, kind, (), numbers["low"], numbers["high"], step, log, tuple(when))


# --------------------------------------------------------------------------- sampling


def sample(trial, space: SearchSpace) -> dict[str, Any]:
    """Define-by-run: suggest each active parameter in file order; returns fixed knobs + sampled values."""
    values: dict[str, Any] = dict(space.fixed)
    for p in space.parameters:
        if not p.active(values):
            continue
        if p.kind == "categorical":
            values[p.name] = trial.suggest_categorical(p.name, list(p.choices))
        elif p.kind == "int":
            values[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
        else:
            values[p.name] = trial.suggest_float(p.name, float(p.low), float(p.high), step=p.step, log=p.log)
    return values


def enumerate_space(space: SearchSpace) -> list[dict[str, Any]]:
    """Every configuration of a space without float parameters (conditions respected), fixed knobs excluded."""
    configs: list[dict[str, Any]] = [dict(space.fixed)]
    for p in space.parameters:
        grown = []
        for values in configs:
            if p.active(values):
                grown.extend({**values, p.name: v} for v in p.values())
            else:
                grown.append(values)
        configs = grown
    return [{k: v for k, v in c.items() if k not in space.fixed} for c in configs]


# --------------------------------------------------------------------------- params -> sketch and settings


def sketch_dict(space: SearchSpace, params: Mapping[str, Any]) -> dict[str, Any]:
    """The TACCL-format sketch (taccl.md §2) that ``params`` describe for the space's target."""
    profile, nodes, gpus = space.profile, space.nodes, space.profile.gpus_per_node
    strategy = params.get("intranode_strategy", "switch" if profile.switches else "none")
    intranode: dict[str, Any] = {"strategy": strategy}
    if strategy == "switch":
        if not profile.switches:
            raise InputError(space.source, "intranode_strategy", f"not switch: {profile.name} has no switches")
        intranode["switches"] = [list(s.gpus) for s in profile.switches]
        intranode["switch_hyperedge_strategy"] = [params.get("switch_policy", "uc-min")] * len(profile.switches)
    sketch: dict[str, Any] = {"nnodes": nodes, "intranode_sketch": intranode}
    if nodes > 1:
        conn = params.get("internode_conn", "relay" if "relay_map" in params else "direct-map")
        if conn == "relay":
            conn = parse_gpu_map(params.get("relay_map", "0:0"), gpus, "relay_map")
        internode: dict[str, Any] = {"strategy": "relay", "internode_conn": conn,
                                     "enforce_ordering": bool(params.get("enforce_ordering", False))}
        sender_map = params.get("sender_map", "any")
        if sender_map != "any":
            internode["gpus_to_sender_rev_map"] = parse_gpu_map(sender_map, gpus, "sender_map")
        sketch["internode_sketch"] = internode
    sketch["symmetry_offsets"] = parse_symmetry(params.get("symmetry", "none"), gpus * nodes)
    sketch["hyperparameters"] = {"input_chunkup": int(params.get("chunkup", 1))}
    own = {key: params[key] for key in ("ordering", "contiguity", "batch_window") if key in params}
    sketch["autotaccl"] = {"engine": params.get("engine", "greedy"), **own}
    return sketch


def params_to_sketch(space: SearchSpace, params: Mapping[str, Any]):
    """The synthesis sketch (``autotaccl.sketch.Sketch``) for one sample of ``space``."""
    from ..sketch import sketch_from_dict

    return sketch_from_dict(sketch_dict(space, params), f"{space.source} (params {dict(params)})")


@dataclass(frozen=True)
class Settings:
    """The non-sketch knobs of one sample: how to synthesize and how to lower."""

    engine: str = "greedy"
    mip_gap: float | None = None
    synth_size: int = 0
    instances: int = 1
    protocol: str = "Simple"


def settings(space: SearchSpace, params: Mapping[str, Any]) -> Settings:
    sizes = space.sizes
    middle = sizes[len(sizes) // 2]
    return Settings(engine=params.get("engine", "greedy"), mip_gap=params.get("mip_gap"),
                    synth_size=parse_size(params["synth_size"]) if "synth_size" in params else middle,
                    instances=int(params.get("instances", 1)), protocol=params.get("protocol", "Simple"))


def describe(space: SearchSpace) -> str:
    sizes = f"{format_size(space.sizes[0])}..{format_size(space.sizes[-1])} ({len(space.sizes)} sizes)"
    return (f"{space.name}: {space.target_name}, {', '.join(space.collectives)}, {sizes}, "
            f"{len(space.parameters)} parameters")


def sketch_to_params(space: SearchSpace, sketch) -> dict[str, Any] | None:
    """The parameter values that describe ``sketch`` in ``space`` (None if the space cannot express it).

    Used to enqueue known-good sketches (``default_sketch``) as ordinary trials.
    """
    knobs: dict[str, Any] = {"chunkup": sketch.input_chunkup, "intranode_strategy": sketch.intranode_strategy,
                             "switch_policy": sketch.switch_objective, "ordering": sketch.ordering,
                             "contiguity": sketch.contiguity, "batch_window": sketch.batch_window}
    if sketch.engine:
        knobs["engine"] = sketch.engine
    offsets = sketch.symmetry_offsets
    knobs["symmetry"] = ";".join(f"{o}/{s}" for o, s in offsets) if offsets else "none"
    if space.nodes > 1:
        conn = sketch.internode_conn
        knobs["enforce_ordering"] = sketch.enforce_ordering
        if isinstance(conn, str):
            knobs["internode_conn"] = conn
        else:
            knobs["internode_conn"] = "relay"
            knobs["relay_map"] = ",".join(f"{s}:{'+'.join(map(str, r))}" for s, r in conn)
        knobs["sender_map"] = ("any" if sketch.sender_map is None else
                               ",".join(f"{s}:{'+'.join(map(str, g))}" for s, g in sketch.sender_map))
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
