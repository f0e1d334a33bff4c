"""Hardware profiles: what one node looks like and how fast each kind of link is.

A profile is a YAML file (schema in ``hardware/README.md``) or one of TACCL's topology JSON files.
Both become the same :class:`HardwareProfile`; :mod:`autotaccl.model.topology` turns a profile and a node
count into the graph that every other stage reads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


from ..documents import read_document
from ..errors import InputError, ParameterError
from ..resources import data_dir
from ..safety import safe_name
from .protocols import (DEFAULT_GENERATION, GENERATIONS, NcclSettings, Protocol, default_protocols, nccl_to_dict,
                        protocols_to_dict, read_nccl, read_protocols)


@dataclass(frozen=True)
class LinkClass:
    """A kind of link: latency per transfer (µs), line rate per link and direction (GB/s, 1e9 B/s), and
    ``efficiency``: the share of the line rate GPU copies reach on it (the simulator's and NCCL model's
    rate is ``bandwidth_GBps * efficiency``; the bounds stay line-rate ceilings)."""

    name: str
    alpha_us: float
    bandwidth_GBps: float
    efficiency: float = 1.0


@dataclass(frozen=True)
class PointLink:
    """``count`` parallel links of ``link_class`` between local GPUs ``a`` and ``b``, both directions."""

    a: int
    b: int
    count: int
    link_class: str


@dataclass(frozen=True)
class Switch:
    """A switch (NVSwitch) joining ``gpus``; each member has one port of ``link_class`` each way."""

    gpus: tuple[int, ...]
    link_class: str


@dataclass(frozen=True)
class Nic:
    """A network port of ``link_class``; ``attach`` maps each GPU that can use it to the class of its hop."""

    link_class: str
    attach: Mapping[int, str | None]
    far: frozenset[int] = frozenset()


@dataclass(frozen=True)
class RailNetwork:
    """A rail-optimized leaf/spine network between nodes (``network:`` in a profile).

    NIC ``j`` of every node plugs into rail ``j``'s leaf switch; ``nodes_per_leaf`` consecutive nodes (a
    scalable unit) share one leaf per rail. Traffic between rails or between units crosses the spine,
    where each NIC gets ``1 / oversubscription`` of its own rate (its share of the leaf's uplinks when
    every port of the leaf is busy) and pays ``spine_alpha_us`` more.
    """

    oversubscription: float = 1.0
    nodes_per_leaf: int | None = None      # None: every node on one leaf per rail
    spine_alpha_us: float = 0.0


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    gpus_per_node: int
    link_classes: Mapping[str, LinkClass]
    links: tuple[PointLink, ...] = ()
    switches: tuple[Switch, ...] = ()
    nics: tuple[Nic, ...] = ()
    source: str = "<built-in>"
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    network: RailNetwork | None = None     # None: one non-blocking switch joins every NIC
    gpu: str = DEFAULT_GENERATION
    protocols: Mapping[str, Protocol] = field(default_factory=default_protocols)
    nccl: NcclSettings = field(default_factory=NcclSettings)


# --------------------------------------------------------------------------- loading


def available_profiles() -> list[str]:
    """Names of the shipped profiles (``hardware/*.yaml``)."""
    return sorted(p.stem for p in data_dir("hardware").glob("*.yaml"))


def load_hardware(spec: str | Path, chunk_bytes: int | None = None, cost_scale: float | None = None) -> HardwareProfile:
    """A profile from a shipped name (``ndv2``), a YAML path, or a TACCL topology JSON path.

    TACCL files carry per-chunk costs, so they need the chunk size they were profiled for.
    """
    path = Path(spec)
    if not path.suffix and not path.exists():
        path = data_dir("hardware") / f"{spec}.yaml"
        if not path.exists():
            raise ParameterError("hardware", repr(str(spec)),
                             f"a profile file or one of: {', '.join(available_profiles())}")
    if not path.is_file():
        raise InputError(str(path), "file", "an existing hardware profile (YAML) or TACCL topology (JSON)")
    data = read_document(path)
    if path.suffix.lower() == ".json":
        if chunk_bytes is None:
            raise InputError(str(path), "--chunk-size", "the chunk size this TACCL profile was made for (e.g. 1M)")
        return profile_from_taccl(data, str(path), chunk_bytes, cost_scale)
    return profile_from_dict(data, str(path))


class _Reader:
    """Reads fields of a parsed document and names the field when one is wrong."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, expected: str) -> InputError:
        return InputError(self.source, where, expected)

    def mapping(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, "a mapping")
        return value

    def number(self, value: Any, where: str, allow_zero: bool = False,
               span: tuple[float, float] | None = None) -> float:
        """A finite number > 0 (>= 0 with ``allow_zero``), within ``span`` if given (a physical range:
        times and bandwidths beyond it overflow or divide by zero in the models)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(where, "a finite number")
        if value < 0 or (value == 0 and not allow_zero):
            raise self.fail(where, "a number >= 0" if allow_zero else "a positive number")
        if span is not None and not (span[0] <= value <= span[1] or (allow_zero and value == 0)):
            raise self.fail(where, f"a number from {span[0]:g} to {span[1]:g}")
        return float(value)

    def integer(self, value: Any, where: str, low: int = 1, high: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, "a whole number")
        if value < low or (high is not None and value > high):
            raise self.fail(where, f"a whole number in {low}..{high}" if high is not None else f"a whole number >= {low}")
        return value

    def gpu(self, value: Any, where: str, gpus: int) -> int:
        return self.integer(value, where, 0, gpus - 1)


# what a link can physically be: up to a second of latency, 1 KB/s to 1 PB/s (beyond, times overflow or
# divide by zero in the cost model, the bounds and the synthesized schedules)
ALPHA_US = (0.0, 1e6)
BANDWIDTH_GBPS = (1e-6, 1e6)
_PROFILE_KEYS = {"name", "description", "gpus_per_node", "gpu", "link_classes", "links", "switches", "nics",
                 "network", "protocols", "nccl"}


def profile_from_dict(data: Any, source: str) -> HardwareProfile:
    """Validate a parsed YAML profile (schema in ``hardware/README.md``)."""
    r = _Reader(source)
    data = r.mapping(data, "document")
    unknown = sorted(set(data) - _PROFILE_KEYS)
    if unknown:
        raise r.fail(unknown[0], f"one of the known fields: {', '.join(sorted(_PROFILE_KEYS))}")
    for key in ("name", "gpus_per_node", "link_classes"):
        if key not in data:
            raise r.fail(key, "a value (required field)")
    name = safe_name(data["name"], source, "name")   # it names experiments, studies and their files
    gpus = r.integer(data["gpus_per_node"], "gpus_per_node", 1, 4096)
    if not isinstance(data.get("description", ""), str):
        raise r.fail("description", "a string")
    gpu = data.get("gpu", DEFAULT_GENERATION)
    if gpu not in GENERATIONS:
        raise r.fail("gpu", f"one of: {', '.join(GENERATIONS)}")

    classes: dict[str, LinkClass] = {}
    for cname, spec in r.mapping(data["link_classes"], "link_classes").items():
        where = f"link_classes.{cname}"
        spec = r.mapping(spec, where)
        extra = sorted(set(spec) - {"alpha_us", "bandwidth_GBps", "efficiency"})
        if extra:
            raise r.fail(f"{where}.{extra[0]}", "only alpha_us, bandwidth_GBps and efficiency")
        for key in ("alpha_us", "bandwidth_GBps"):
            if key not in spec:
                raise r.fail(f"{where}.{key}", "a value (required field)")
        efficiency = r.number(spec.get("efficiency", 1.0), f"{where}.efficiency")
        if efficiency > 1:
            raise r.fail(f"{where}.efficiency", "a share of the line rate in (0, 1]")
        classes[str(cname)] = LinkClass(str(cname), r.number(spec["alpha_us"], f"{where}.alpha_us", allow_zero=True,
                                                             span=ALPHA_US),
                                        r.number(spec["bandwidth_GBps"], f"{where}.bandwidth_GBps", span=BANDWIDTH_GBPS),
                                        efficiency)
    if not classes:
        raise r.fail("link_classes", "at least one link class")

    def link_class(value: Any, where: str) -> str:
        if not isinstance(value, str) or value not in classes:
            raise r.fail(where, f"one of the link classes: {', '.join(classes)}")
        return value

    links: list[PointLink] = []
    if data.get("links") is not None:
        spec = r.mapping(data["links"], "links")
        extra = sorted(set(spec) - {"class", "pairs", "pattern", "dims"})
        if extra:
            raise r.fail(f"links.{extra[0]}", "only class, pairs, pattern and dims")
        default = link_class(spec.get("class"), "links.class")
        pairs = spec.get("pairs")
        if "pattern" in spec:
            if pairs is not None:
                raise r.fail("links", "either pairs or pattern, not both")
            pairs = _pattern_pairs(r, spec["pattern"], spec.get("dims"), gpus)
        if not isinstance(pairs, list):
            raise r.fail("links.pairs", "a list of [gpu_a, gpu_b, count] or [gpu_a, gpu_b, count, class]")
        seen = set()
        for i, pair in enumerate(pairs):
            where = f"links.pairs[{i}]"
            if not isinstance(pair, list) or len(pair) not in (3, 4):
                raise r.fail(where, "[gpu_a, gpu_b, count] or [gpu_a, gpu_b, count, class]")
            a, b = r.gpu(pair[0], f"{where}[0]", gpus), r.gpu(pair[1], f"{where}[1]", gpus)
            if a == b:
                raise r.fail(where, "two different GPUs")
            if frozenset((a, b)) in seen:
                raise r.fail(where, f"each GPU pair once (GPUs {a} and {b} repeat)")
            seen.add(frozenset((a, b)))
            count = r.integer(pair[2], f"{where}[2]", 1, 64)
            cls = link_class(pair[3], f"{where}[3]") if len(pair) == 4 else default
            links.append(PointLink(a, b, count, cls))

    switches: list[Switch] = []
    for i, spec in enumerate(_list(r, data.get("switches"), "switches")):
        where = f"switches[{i}]"
        spec = r.mapping(spec, where)
        extra = sorted(set(spec) - {"class", "gpus"})
        if extra:
            raise r.fail(f"{where}.{extra[0]}", "only class and gpus")
        members = _gpu_list(r, spec.get("gpus"), f"{where}.gpus", gpus)
        if len(members) < 2:
            raise r.fail(f"{where}.gpus", "at least two GPUs")
        switches.append(Switch(tuple(members), link_class(spec.get("class"), f"{where}.class")))

    nics: list[Nic] = []
    for i, spec in enumerate(_list(r, data.get("nics"), "nics")):
        where = f"nics[{i}]"
        spec = r.mapping(spec, where)
        extra = sorted(set(spec) - {"class", "gpus", "via", "far_gpus", "far_via"})
        if extra:
            raise r.fail(f"{where}.{extra[0]}", "only class, gpus, via, far_gpus and far_via")
        cls = link_class(spec.get("class"), f"{where}.class")
        via = link_class(spec["via"], f"{where}.via") if spec.get("via") is not None else None
        attach: dict[int, str | None] = {g: via for g in _gpu_list(r, spec.get("gpus"), f"{where}.gpus", gpus)}
        far: list[int] = []
        if spec.get("far_gpus") is not None:
            far_via = link_class(spec.get("far_via"), f"{where}.far_via")
            for g in _gpu_list(r, spec["far_gpus"], f"{where}.far_gpus", gpus):
                if g in attach:
                    raise r.fail(f"{where}.far_gpus", f"GPUs not already in gpus (GPU {g} is)")
                attach[g] = far_via
                far.append(g)
        nics.append(Nic(cls, attach, frozenset(far)))

    return HardwareProfile(name=name, gpus_per_node=gpus, link_classes=classes, links=tuple(links),
                           switches=tuple(switches), nics=tuple(nics), source=source,
                           description=str(data.get("description", "")), gpu=gpu,
                           network=_network(r, data.get("network"), nics),
                           protocols=read_protocols(r, data.get("protocols"), gpu),
                           nccl=read_nccl(r, data.get("nccl"), gpu, bool(switches)))


def profile_to_dict(profile: HardwareProfile) -> dict:
    """``profile`` in the YAML schema (:func:`profile_from_dict` reads it back to an equal profile)."""
    def cls(c: LinkClass) -> dict:
        out = {"alpha_us": c.alpha_us, "bandwidth_GBps": c.bandwidth_GBps}
        return out if c.efficiency == 1.0 else {**out, "efficiency": c.efficiency}

    data: dict[str, Any] = {"name": profile.name, "description": profile.description,
                            "gpus_per_node": profile.gpus_per_node, "gpu": profile.gpu,
                            "link_classes": {n: cls(c) for n, c in profile.link_classes.items()}}
    if profile.links:
        first = profile.links[0].link_class
        data["links"] = {"class": first, "pairs": [[l.a, l.b, l.count] + ([l.link_class] if l.link_class != first else [])
                                                   for l in profile.links]}
    if profile.switches:
        data["switches"] = [{"class": s.link_class, "gpus": list(s.gpus)} for s in profile.switches]
    if profile.nics:
        nics = []
        for nic in profile.nics:
            near = [g for g in nic.attach if g not in nic.far]
            spec: dict[str, Any] = {"class": nic.link_class, "gpus": near}
            via = {nic.attach[g] for g in near}
            if via != {None}:
                spec["via"] = via.pop()
            if nic.far:
                spec["far_gpus"] = sorted(nic.far)
                spec["far_via"] = nic.attach[min(nic.far)]
            nics.append(spec)
        data["nics"] = nics
    if profile.network is not None:
        net = profile.network
        data["network"] = {"kind": "rail", "oversubscription": net.oversubscription,
                           "spine_alpha_us": net.spine_alpha_us,
                           **({"nodes_per_leaf": net.nodes_per_leaf} if net.nodes_per_leaf is not None else {})}
    data["protocols"] = protocols_to_dict(profile.protocols)
    data["nccl"] = nccl_to_dict(profile.nccl)
    return data



def save_profile(data: Mapping[str, Any], path: str | Path, header: list[str], width: int = 80) -> None:
    """Write profile document ``data`` as YAML under the comment lines ``header``, atomically: the file is
    read back with :func:`load_hardware` before it replaces ``path`` (nothing is written if it does not load)."""
    import yaml

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(header) + "\n" + yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=None,
                                                              width=width))
    try:
        load_hardware(tmp)
    except InputError:
        tmp.unlink()
        raise
    tmp.replace(path)

def _list(r: _Reader, value: Any, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise r.fail(where, "a list")
    return value


def _gpu_list(r: _Reader, value: Any, where: str, gpus: int) -> list[int]:
    if not isinstance(value, list) or not value:
        raise r.fail(where, f"a non-empty list of GPU indices in 0..{gpus - 1}")
    members = [r.gpu(g, f"{where}[{i}]", gpus) for i, g in enumerate(value)]
    if len(set(members)) != len(members):
        raise r.fail(where, "each GPU once")
    return members


def _pattern_pairs(r: _Reader, pattern: Any, dims: Any, gpus: int) -> list[list[int]]:
    """Generated link lists for the generic shapes (ring, torus2d, fully-connected)."""
    if pattern == "ring":
        return [[i, (i + 1) % gpus, 1] for i in range(gpus if gpus > 2 else 1)]
    if pattern == "fully-connected":
        return [[a, b, 1] for a in range(gpus) for b in range(a + 1, gpus)]
    if pattern == "torus2d":
        if not (isinstance(dims, list) and len(dims) == 2 and all(isinstance(d, int) and d >= 2 for d in dims)
                and dims[0] * dims[1] == gpus):
            raise r.fail("links.dims", f"[rows, columns], each >= 2, with rows*columns = gpus_per_node ({gpus})")
        rows, cols = dims
        pairs: set[tuple[int, int]] = set()
        for y in range(rows):
            for x in range(cols):
                g = y * cols + x
                for other in (y * cols + (x + 1) % cols, ((y + 1) % rows) * cols + x):
                    if other != g:
                        pairs.add((min(g, other), max(g, other)))
        return [[a, b, 1] for a, b in sorted(pairs)]
    raise r.fail("links.pattern", "one of: ring, torus2d, fully-connected")


# --------------------------------------------------------------------------- network between nodes

_NETWORK_KEYS = {"kind", "oversubscription", "nodes_per_leaf", "spine_alpha_us"}
_NETWORK_KINDS = ("rail",)


def _network(r: _Reader, spec: Any, nics: list[Nic]) -> RailNetwork | None:
    """The ``network:`` section (schema in ``hardware/README.md``); absent: one non-blocking switch."""
    if spec is None:
        return None
    spec = r.mapping(spec, "network")
    extra = sorted(set(spec) - _NETWORK_KEYS)
    if extra:
        raise r.fail(f"network.{extra[0]}", f"one of: {', '.join(sorted(_NETWORK_KEYS))}")
    if spec.get("kind") not in _NETWORK_KINDS:
        raise r.fail("network.kind", f"one of: {', '.join(_NETWORK_KINDS)}")
    if not nics:
        raise r.fail("network", "nics to plug into it (a network needs at least one NIC per node)")
    ratio = r.number(spec.get("oversubscription", 1.0), "network.oversubscription")
    if ratio < 1:
        raise r.fail("network.oversubscription", "a ratio >= 1 (leaf downlink : uplink bandwidth; 1 = non-blocking)")
    per_leaf = spec.get("nodes_per_leaf")
    return RailNetwork(oversubscription=ratio,
                       nodes_per_leaf=None if per_leaf is None else r.integer(per_leaf, "network.nodes_per_leaf"),
                       spine_alpha_us=r.number(spec.get("spine_alpha_us", 0.0), "network.spine_alpha_us",
                                               allow_zero=True))


# --------------------------------------------------------------------------- TACCL topology JSON

_NDV2_DOUBLE = [(0, 1), (0, 4), (1, 3), (2, 3), (2, 6), (4, 5), (5, 7), (6, 7)]
_NDV2_SINGLE = [(0, 2), (0, 3), (1, 2), (1, 5), (3, 7), (4, 6), (4, 7), (5, 6)]


def taccl_cost_scale(chunk_bytes: int) -> float:
    """The cost scale TACCL's shipped profiles use for a chunk size: 1 (≥1 MiB), 10 (≥32 KiB), else 100."""
    if chunk_bytes >= 1 << 20:
        return 1.0
    if chunk_bytes >= 32 << 10:
        return 10.0
    return 100.0


def profile_from_taccl(data: Any, source: str, chunk_bytes: int, cost_scale: float | None = None) -> HardwareProfile:
    """TACCL's profile JSON (``taccl.md`` §1.1), unchanged, as a profile.

    TACCL stores per-chunk costs in a unit it scales by hand; ``cost_scale`` (default: TACCL's own
    convention for the chunk size) turns them back into µs, and the chunk size into GB/s.
    Two intra-node classes mean the NDv2 cube-mesh (double links first), one class a switch
    (DGX-2/HubAndSpoke), and a ``links`` matrix a custom topology.
    """
    r = _Reader(source)
    data = r.mapping(data, "document")
    scale = cost_scale or taccl_cost_scale(chunk_bytes)
    gpus = r.integer(data.get("gpus_per_node"), "gpus_per_node", 1, 4096)

    def bandwidth(beta: float) -> float:  # β in scaled cost units per chunk -> GB/s
        return chunk_bytes / (beta / scale * 1e-6) / 1e9

    alpha = r.number(data.get("alpha"), "alpha", allow_zero=True) / scale
    classes: dict[str, LinkClass] = {}
    links: list[PointLink] = []
    switches: list[Switch] = []
    if "links" in data:
        matrix = data["links"]
        betas = data.get("betas")
        if not (isinstance(matrix, list) and len(matrix) == gpus and all(isinstance(row, list) and len(row) == gpus for row in matrix)):
            raise r.fail("links", f"a {gpus}x{gpus} matrix [dst][src]")
        if not (isinstance(betas, list) and len(betas) == gpus and all(isinstance(row, list) and len(row) == gpus for row in betas)):
            raise r.fail("betas", f"a {gpus}x{gpus} matrix [dst][src]")
        for dst in range(gpus):
            for src in range(dst + 1, gpus):
                count = matrix[dst][src]
                if count:
                    beta = r.number(betas[dst][src], f"betas[{dst}][{src}]")
                    cname = f"link-{beta:g}"
                    classes.setdefault(cname, LinkClass(cname, alpha, bandwidth(beta)))
                    links.append(PointLink(src, dst, r.integer(count, f"links[{dst}][{src}]", 1, 64), cname))
    else:
        betas = data.get("node_betas_list")
        if not isinstance(betas, list) or len(betas) not in (1, 2):
            raise r.fail("node_betas_list", "a list of one (switch) or two (NDv2: double, single) β values")
        betas = [r.number(b, f"node_betas_list[{i}]") for i, b in enumerate(betas)]
        if len(betas) == 2:
            if gpus != 8:
                raise r.fail("gpus_per_node", "8 for the NDv2 cube-mesh (two node_betas_list entries)")
            classes["nvlink-double"] = LinkClass("nvlink-double", alpha, bandwidth(betas[0]))
            classes["nvlink-single"] = LinkClass("nvlink-single", alpha, bandwidth(betas[1]))
            links = [PointLink(a, b, 1, "nvlink-double") for a, b in _NDV2_DOUBLE]
            links += [PointLink(a, b, 1, "nvlink-single") for a, b in _NDV2_SINGLE]
        else:
            classes["switch"] = LinkClass("switch", alpha, bandwidth(betas[0]))
            switches = [Switch(tuple(range(gpus)), "switch")]
    nics: list[Nic] = []
    if "nics_per_node" in data:
        count = r.integer(data["nics_per_node"], "nics_per_node", 1, gpus)
        remote_alpha = r.number(data.get("remote_alpha"), "remote_alpha", allow_zero=True) / scale
        remote_beta = r.number(data.get("remote_beta"), "remote_beta")
        classes["ib"] = LinkClass("ib", remote_alpha, bandwidth(remote_beta))
        per_nic = gpus // count if gpus % count == 0 else None
        if per_nic is None:
            raise r.fail("nics_per_node", f"a divisor of gpus_per_node ({gpus})")
        nics = [Nic("ib", {g: None for g in range(k * per_nic, (k + 1) * per_nic)}) for k in range(count)]
    name = safe_name(str(data.get("name", Path(source).stem)), source, "name")
    return HardwareProfile(name=name, gpus_per_node=gpus,
                           link_classes=classes, links=tuple(links), switches=tuple(switches),
                           nics=tuple(nics), source=source,
                           description=f"TACCL profile for {chunk_bytes}-byte chunks, cost scale {scale:g}",
                           gpu="volta", protocols=default_protocols("volta"))   # TACCL profiled V100 machines
