"""What a runtime protocol costs, and what stock NCCL does on a machine: the profile's ``gpu``, ``protocols``
and ``nccl`` sections (schema and sources in ``hardware/README.md``).

NCCL's three protocols (``src/device/prims_*.h``): LL (8-byte lines, half flags, the lowest latency),
LL128 (120 data bytes per 128-byte line) and Simple (plain buffers, fences per step). Each
:class:`Protocol` has five terms whose defaults are NCCL's cost model, ``src/graph/tuning.cc``
(``ncclTunerConstantsDefaults``) per GPU generation; which constant gives which term:
``docs/internals.md``."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

PROTOCOLS = ("LL", "LL128", "Simple")
GENERATIONS = ("volta", "ampere", "hopper", "blackwell")
DEFAULT_GENERATION = "ampere"

# tuning.cc, per generation (Volta, Ampere, Hopper, Blackwell) on one node: llMaxBws[gen][0],
# perChMaxRingLL128Bws[gen][0], perChMaxTreeBws[gen][0] (GB/s); nvlsEfficiency[gen]
_LL_MAX = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
_LL128_CHANNEL = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}
_SIMPLE_CHANNEL = {"volta": 26.5, "ampere": 24.0, "hopper": 38.7, "blackwell": 70.0}
_NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}
# nvls.cc: NVLS channels (CTAs) per generation, on one node and on several (SM90 16; SM100 24 within one
# NVLink domain, 32 across nodes) and NCCL_NVLS_CHUNKSIZE's default
_NVLS_CHANNELS = {"hopper": (16, 16), "blackwell": (24, 32)}
NVLS_CHUNK_BYTES = 128 << 10
LL_CHANNELS = 24            # llMaxBws is a total; spread over the 24 channels NCCL opens on NVSwitch machines
# tuning.cc llMaxBws across nodes: keyed on the host CPU's vendor (rows Intel / AMD), not the GPU, for 2 and
# for 4 or more nodes (GB/s, a total like the one-node value)
CPUS = ("intel", "amd")
_LL_MAX_NET = {"intel": (39.0, 20.4), "amd": (22.5, 19.0)}
# tuning.cc ring base latencies and per-step latencies (µs) for LL, LL128, Simple
_BASE = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
_NVLINK_STEP = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}
_NET_STEP = {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}
_EFFICIENCY = {"LL": 0.5, "LL128": 120 / 128, "Simple": 1.0}
TREE_EFFICIENCY = 0.92      # tuning.cc: tree AllReduce bandwidth factor


@dataclass(frozen=True)
class Protocol:
    """The cost of moving data with one protocol.

    ``launch_us``: once per collective call. ``hop_us``/``net_hop_us``: added to the latency of every
    transfer inside a node / across the network (on top of the link's ``alpha_us``). ``efficiency``:
    the share of a link's bytes that are payload. ``channel_GBps``: the most one channel (one thread
    block per peer) moves, whatever the link could carry; ``net_channel_GBps`` the same across the network
    (None: ``channel_GBps``; LL's is lower on more than one node, :func:`across_nodes`).
    """

    name: str
    launch_us: float
    hop_us: float
    net_hop_us: float
    efficiency: float
    channel_GBps: float
    net_channel_GBps: float | None = None

    @property
    def hops(self) -> tuple[float, float]:
        """``(hop_us, net_hop_us)``, as :func:`edge_latency` takes them."""
        return self.hop_us, self.net_hop_us

    @property
    def ceilings(self) -> tuple[float, float]:
        """``(channel_GBps, net_channel_GBps)``: one channel's most inside a node and across the network."""
        return self.channel_GBps, self.channel_GBps if self.net_channel_GBps is None else self.net_channel_GBps


def is_net(edge: Mapping[str, Any]) -> bool:
    """Whether a topology edge crosses the network (its bytes go through NICs) rather than stay in a node."""
    return edge.get("kind") == "net"


def edge_latency(edge: Mapping[str, Any], hop_us: tuple[float, float] = (0.0, 0.0)) -> float:
    """What a transfer on a topology edge waits before its bytes move: the edge's ``alpha_us`` plus a
    protocol's per-step term, ``hop_us[0]`` inside a node and ``hop_us[1]`` across the network."""
    return float(edge["alpha_us"]) + hop_us[is_net(edge)]


@dataclass(frozen=True)
class Nvls:
    """NVLink SHARP: the switch reduces (multimem load-reduce) and multicasts (multimem store).

    ``efficiency``: the share of a GPU's switch port (after the link's own efficiency) multimem traffic
    reaches; ``latency_us``: a call's fixed cost (tuning.cc's NVLS NVLink latency); ``op_us``: what one
    multimem step of one chunk costs beyond its bytes (its synchronisation); ``channels``: the thread
    blocks NCCL runs it on, on one node and on several (nvls.cc); ``chunk_bytes``: the largest chunk one
    step moves (``NCCL_NVLS_CHUNKSIZE``; smaller calls use smaller chunks, :func:`autotaccl.model.switch.nvls_chunk`).
    """

    efficiency: float = 0.85
    latency_us: float = 25.0
    op_us: float = 0.0
    channels: tuple[int, int] = (16, 16)
    chunk_bytes: int = NVLS_CHUNK_BYTES

    def channels_on(self, nodes: int) -> int:
        """NCCL's NVLS channel count on ``nodes`` nodes."""
        return self.channels[nodes > 1]


@dataclass(frozen=True)
class NcclSettings:
    """What stock NCCL does on this machine: its channel count (``n coll channels`` in NCCL's INFO log),
    its send/receive channels per peer, the protocols it enables by default, where the switch supports
    it NVLS, the share of the link rate its double binary tree reaches (``tree_efficiency``), the host
    CPU's vendor (``cpu``: across nodes it sets LL's bandwidth ceiling, :func:`ll_scale`), and the time
    a call costs per channel it runs on (``channel_launch_us``: the host sets up every channel's work
    and the GPU schedules its thread block, so a call's fixed cost grows with NCCL's channel count)."""

    channels: int = 24
    p2p_channels_per_peer: int = 2
    protocols: tuple[str, ...] = PROTOCOLS
    nvls: Nvls | None = None
    tree_efficiency: float = TREE_EFFICIENCY
    cpu: str = "intel"                    # the host CPU's vendor: NCCL's LL ceiling across nodes depends on it
    channel_launch_us: float = 0.0        # per call and channel it runs on (its work setup); fitted by calibrate


def default_protocols(gpu: str = DEFAULT_GENERATION) -> dict[str, Protocol]:
    """NCCL's cost-model terms for GPU generation ``gpu`` (module docstring)."""
    channel = {"LL": _LL_MAX[gpu] / LL_CHANNELS, "LL128": _LL128_CHANNEL[gpu], "Simple": _SIMPLE_CHANNEL[gpu]}
    return {p: Protocol(p, _BASE[p], round(_NVLINK_STEP[p] - _NVLINK_STEP["LL"], 6),
                        round(_NET_STEP[p] - _NET_STEP["LL"], 6), _EFFICIENCY[p], round(channel[p], 6))
            for p in PROTOCOLS}


def ll_scale(gpu: str, cpu: str, nodes: int) -> float:
    """LL's per-channel ceiling across the network of ``nodes`` nodes as a share of its one-node value
    (``channel_GBps``).

    Across nodes an LL line crosses the NIC through the host's proxy, and tuning.cc caps LL by the CPU
    vendor and node count instead of the GPU (``llMaxBws``' CPU rows for 2 and 4+ nodes, :data:`_LL_MAX_NET`,
    well below a GPU's one-node row). The cap is the network path's: NCCL applies it
    to a whole algorithm because every one of its multi-node channels crosses the network, but a
    thread block that moves LL lines over NVLink inside a node of the same job goes no slower than on one
    node, so :func:`across_nodes` scales the network ceiling only."""
    if nodes <= 1:
        return 1.0
    return _LL_MAX_NET[cpu][0 if nodes == 2 else 1] / _LL_MAX[gpu]


def across_nodes(proto: Protocol, scale: float) -> Protocol:
    """``proto`` with LL's channel ceiling across the network at ``scale`` times its one-node value
    (:func:`ll_scale`); other protocols as they are."""
    return replace(proto, net_channel_GBps=proto.channel_GBps * scale) if proto.name == "LL" else proto


def default_nvls(gpu: str) -> Nvls | None:
    """NVLS as NCCL models it for ``gpu`` (None before Hopper)."""
    return Nvls(_NVLS_EFFICIENCY[gpu], channels=_NVLS_CHANNELS[gpu]) if gpu in _NVLS_EFFICIENCY else None


def canonical_protocol(name: Any, source: str = "--protocol") -> str:
    """``"ll128"`` -> ``"LL128"``, ``"simple"`` -> ``"Simple"`` (NCCL_PROTO spelling is case-insensitive)."""
    from ..errors import InputError

    for p in PROTOCOLS:
        if isinstance(name, str) and name.strip().lower() == p.lower():
            return p
    raise InputError(source, repr(name), f"one of: {', '.join(PROTOCOLS)}")


# --------------------------------------------------------------------------- reading a profile's sections


class _Fields:
    """The keys of one mapping, each checked by the profile reader ``r`` (``hardware._Reader``)."""

    def __init__(self, r, where: str, spec: Any, allowed: tuple[str, ...]) -> None:
        self.r, self.where, self.spec = r, where, r.mapping(spec, where)
        extra = sorted(set(map(str, self.spec)) - set(allowed))
        if extra:
            raise r.fail(f"{where}.{extra[0]}", f"one of: {', '.join(allowed)}")

    def number(self, key: str, default: float, allow_zero: bool = True, most: float | None = None) -> float:
        if key not in self.spec:
            return default
        value = self.r.number(self.spec[key], f"{self.where}.{key}", allow_zero=allow_zero)
        if most is not None and value > most:
            raise self.r.fail(f"{self.where}.{key}", f"a number in 0..{most:g}")
        return value


def read_protocols(r, data: Any, gpu: str) -> dict[str, Protocol]:
    """The ``protocols`` section over the defaults for ``gpu``; any subset of protocols and fields."""
    out = default_protocols(gpu)
    if data is None:
        return out
    for name, spec in r.mapping(data, "protocols").items():
        if name not in PROTOCOLS:
            raise r.fail(f"protocols.{name}", f"one of: {', '.join(PROTOCOLS)}")
        f = _Fields(r, f"protocols.{name}", spec, ("launch_us", "hop_us", "net_hop_us", "efficiency", "channel_GBps"))
        base = out[name]
        out[name] = replace(base, launch_us=f.number("launch_us", base.launch_us),
                            hop_us=f.number("hop_us", base.hop_us), net_hop_us=f.number("net_hop_us", base.net_hop_us),
                            efficiency=f.number("efficiency", base.efficiency, allow_zero=False, most=1.0),
                            channel_GBps=f.number("channel_GBps", base.channel_GBps, allow_zero=False))
    return out


def read_nccl(r, data: Any, gpu: str, has_switch: bool) -> NcclSettings:
    """The ``nccl`` section; NVLS defaults to on for Hopper-or-later profiles with a switch."""
    nvls = default_nvls(gpu) if has_switch else None
    if data is None:
        return NcclSettings(nvls=nvls)
    f = _Fields(r, "nccl", data, ("channels", "p2p_channels_per_peer", "protocols", "nvls", "tree_efficiency", "cpu",
                                      "channel_launch_us"))
    channels = r.integer(f.spec.get("channels", 24), "nccl.channels", 1, 64)
    per_peer = r.integer(f.spec.get("p2p_channels_per_peer", 2), "nccl.p2p_channels_per_peer", 1, 64)
    protocols = PROTOCOLS
    if "protocols" in f.spec:
        value = f.spec["protocols"]
        if not isinstance(value, list) or not value:
            raise r.fail("nccl.protocols", f"a non-empty list of: {', '.join(PROTOCOLS)}")
        protocols = tuple(p for p in PROTOCOLS if p in {canonical_protocol(v, f"{r.source}: nccl.protocols")
                                                        for v in value})
    if "nvls" in f.spec:
        spec = f.spec["nvls"]
        if spec is False or spec is None:
            nvls = None
        else:
            if not has_switch:
                raise r.fail("nccl.nvls", "false (NVLS needs an NVSwitch: the profile has no switches)")
            g = _Fields(r, "nccl.nvls", {} if spec is True else spec,
                        ("efficiency", "latency_us", "op_us", "channels", "chunk_bytes"))
            base = nvls or Nvls()
            lanes = base.channels
            if "channels" in g.spec:
                value = g.spec["channels"]
                value = value if isinstance(value, list) else [value, value]
                if len(value) != 2:
                    raise r.fail("nccl.nvls.channels", "a whole number, or [one node, several nodes]")
                lanes = tuple(r.integer(v, "nccl.nvls.channels", 2, 64) for v in value)
            chunk = r.integer(g.spec.get("chunk_bytes", base.chunk_bytes), "nccl.nvls.chunk_bytes", 4096, 1 << 30)
            nvls = Nvls(g.number("efficiency", base.efficiency, allow_zero=False, most=1.0),
                        g.number("latency_us", base.latency_us), g.number("op_us", base.op_us), lanes, chunk)
    tree = f.number("tree_efficiency", TREE_EFFICIENCY, allow_zero=False, most=1.0)
    cpu = f.spec.get("cpu", "intel")
    if cpu not in CPUS:
        raise r.fail("nccl.cpu", f"one of: {', '.join(CPUS)}")
    return NcclSettings(channels, per_peer, protocols, nvls, tree, cpu, f.number("channel_launch_us", 0.0))


def protocols_to_dict(protocols: Mapping[str, Protocol]) -> dict:
    return {p.name: {"launch_us": p.launch_us, "hop_us": p.hop_us, "net_hop_us": p.net_hop_us,
                     "efficiency": p.efficiency, "channel_GBps": p.channel_GBps} for p in protocols.values()}


def nccl_to_dict(nccl: NcclSettings) -> dict:
    return {"channels": nccl.channels, "p2p_channels_per_peer": nccl.p2p_channels_per_peer,
            "protocols": list(nccl.protocols), "tree_efficiency": nccl.tree_efficiency, "cpu": nccl.cpu,
            "channel_launch_us": nccl.channel_launch_us,
            "nvls": False if nccl.nvls is None else {"efficiency": nccl.nvls.efficiency, "latency_us": nccl.nvls.latency_us,
                                                   "op_us": nccl.nvls.op_us, "channels": list(nccl.nvls.channels),
                                                   "chunk_bytes": nccl.nvls.chunk_bytes}}
