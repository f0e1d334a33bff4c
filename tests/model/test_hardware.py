"""Hardware profiles: shipped YAML files, TACCL topology JSON files unchanged, and malformed profiles."""
from __future__ import annotations

import dataclasses
import json

import pytest

from autotaccl.errors import InputError
from autotaccl.model.hardware import (RailNetwork, available_profiles, load_hardware, profile_from_dict,
                                      profile_to_dict, taccl_cost_scale)
from autotaccl.model.topology import build_topology
from autotaccl.model.protocols import ll_scale

SHIPPED = ["dgx-a100", "dgx-b200", "dgx-h100", "dgx-h100-rail", "dgx2", "fully-connected", "gb200-nvl72", "ndv2",
           "ring", "torus2d"]
MiB, KiB = 1 << 20, 1 << 10


def test_the_shipped_profiles_are_the_documented_ones():
    assert available_profiles() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_loads_and_spans_two_nodes(name):
    profile = load_hardware(name)
    assert profile.name == name
    assert profile.source.endswith(f"hardware/{name}.yaml")
    assert profile.description
    assert all(c.bandwidth_GBps > 0 and c.alpha_us >= 0 for c in profile.link_classes.values())
    assert profile.nics, "every shipped profile has a NIC, so it can span nodes"
    local = {g for link in profile.links for g in (link.a, link.b)} | {g for s in profile.switches for g in s.gpus}
    assert local == set(range(profile.gpus_per_node)), "every GPU has a link inside its node"
    assert {g for nic in profile.nics for g in nic.attach} == set(range(profile.gpus_per_node))


def test_shipped_profile_loads_by_path_too():
    by_name = load_hardware("ndv2")
    by_path = load_hardware(by_name.source)
    assert by_path.link_classes == by_name.link_classes and by_path.links == by_name.links


def test_todays_fabrics_carry_their_documented_numbers():
    # DGX B200 User Guide: 8 GPUs on NVLink5 switches (14.4 TB/s = 8 x 1.8 TB/s both ways), 8 CX-7 400G
    b200 = load_hardware("dgx-b200")
    assert b200.gpus_per_node == 8 and b200.link_classes["nvswitch"].bandwidth_GBps == 900.0
    assert [(n.link_class, dict(n.attach)) for n in b200.nics] == [("ib", {g: "pcie"}) for g in range(8)]
    assert b200.link_classes["ib"].bandwidth_GBps == 50.0 and b200.network is None
    # GB200 NVL72: a rack of 72 GPUs on one NVLink domain, 900 GB/s per GPU each way, a 400G NIC per GPU
    nvl72 = load_hardware("gb200-nvl72")
    assert nvl72.gpus_per_node == 72 and len(nvl72.switches) == 1 and nvl72.switches[0].gpus == tuple(range(72))
    assert nvl72.link_classes[nvl72.switches[0].link_class].bandwidth_GBps == 900.0
    assert [dict(n.attach) for n in nvl72.nics] == [{g: "pcie"} for g in range(72)]
    # dgx-h100-rail: dgx-h100's node on the SuperPOD's rail fabric (32-node units, non-blocking spine)
    rail, flat = load_hardware("dgx-h100-rail"), load_hardware("dgx-h100")
    assert (rail.link_classes, rail.switches, rail.nics) == (flat.link_classes, flat.switches, flat.nics)
    assert rail.network == RailNetwork(oversubscription=1.0, nodes_per_leaf=32, spine_alpha_us=0.6)


def test_network_section_defaults(small_profile, write_yaml):
    small_profile["network"] = {"kind": "rail"}
    assert load_hardware(write_yaml(small_profile)).network == RailNetwork(1.0, None, 0.0)
    small_profile["network"] = {"kind": "rail", "oversubscription": 3, "nodes_per_leaf": 4, "spine_alpha_us": 0}
    assert load_hardware(write_yaml(small_profile)).network == RailNetwork(3.0, 4, 0.0)


@pytest.mark.parametrize("network, field", [
    ({}, "network.kind"),
    ({"kind": "fat-tree"}, "network.kind"),
    ({"kind": "rail", "oversubscription": 0.5}, "network.oversubscription"),
    ({"kind": "rail", "oversubscription": 0}, "network.oversubscription"),
    ({"kind": "rail", "oversubscription": "2:1"}, "network.oversubscription"),
    ({"kind": "rail", "nodes_per_leaf": 0}, "network.nodes_per_leaf"),
    ({"kind": "rail", "nodes_per_leaf": 2.5}, "network.nodes_per_leaf"),
    ({"kind": "rail", "spine_alpha_us": -1}, "network.spine_alpha_us"),
    ({"kind": "rail", "spine": 2}, "network.spine"),
    (["rail"], "network"),
])
def test_malformed_network_is_rejected_naming_the_field(small_profile, write_yaml, network, field):
    small_profile["network"] = network
    path = write_yaml(small_profile)
    with pytest.raises(InputError) as err:
        load_hardware(path)
    assert (err.value.source, err.value.field) == (str(path), field)


def test_a_network_needs_nics(small_profile, write_yaml):
    del small_profile["nics"]
    small_profile["network"] = {"kind": "rail"}
    with pytest.raises(InputError, match="network: nics"):
        load_hardware(write_yaml(small_profile))


def test_ndv2_profile_matches_taccls_cube_mesh():
    profile = load_hardware("ndv2")
    double = {frozenset((l.a, l.b)) for l in profile.links if l.count == 2}
    single = {frozenset((l.a, l.b)) for l in profile.links if l.count == 1}
    assert double == {frozenset(p) for p in [(0, 1), (0, 4), (1, 3), (2, 3), (2, 6), (4, 5), (5, 7), (6, 7)]}
    assert single == {frozenset(p) for p in [(0, 2), (0, 3), (1, 2), (1, 5), (3, 7), (4, 6), (4, 7), (5, 6)]}
    (nic,) = profile.nics
    assert nic.far == frozenset(range(2, 8)) and nic.attach[0] == "pcie" and nic.attach[5] == "host-pcie"


# --------------------------------------------------------------------------- TACCL topology JSON


def _gbps(chunk: int, beta: float, scale: float) -> float:
    """TACCL's per-chunk β (in its scaled units) as GB/s: chunk bytes per (β/scale) µs."""
    return chunk / (beta / scale) / 1e3


@pytest.mark.parametrize("stem, chunk, scale", [("topo-ndv2-1MB", MiB, 1), ("topo-ndv2-32KB", 32 * KiB, 10),
                                                ("topo-ndv2-1KB", KiB, 100), ("topo-dgx2-1MB", MiB, 1),
                                                ("topo-dgx2-1KB", KiB, 100)])
def test_taccl_topology_json_loads_unchanged(taccl_topo_dir, stem, chunk, scale):
    path = taccl_topo_dir / f"{stem}.json"
    raw = json.loads(path.read_text())
    assert taccl_cost_scale(chunk) == scale
    profile = load_hardware(path, chunk_bytes=chunk)
    assert profile.gpus_per_node == raw["gpus_per_node"]
    betas = raw["node_betas_list"]
    classes = profile.link_classes
    if len(betas) == 2:
        assert classes["nvlink-double"].bandwidth_GBps == pytest.approx(_gbps(chunk, betas[0], scale))
        assert classes["nvlink-single"].bandwidth_GBps == pytest.approx(_gbps(chunk, betas[1], scale))
        assert len(profile.links) == 16 and not profile.switches
    else:
        assert classes["switch"].bandwidth_GBps == pytest.approx(_gbps(chunk, betas[0], scale))
        assert profile.switches[0].gpus == tuple(range(16))
    assert classes["ib"].bandwidth_GBps == pytest.approx(_gbps(chunk, raw["remote_beta"], scale))
    assert classes["ib"].alpha_us == pytest.approx(raw["remote_alpha"] / scale)
    assert len(profile.nics) == raw["nics_per_node"]
    assert build_topology(profile, 2).number_of_nodes() == 2 * raw["gpus_per_node"]


def test_taccl_ndv2_1mb_numbers(taccl_topo_dir):
    """topo-ndv2-1MB: a double NVLink moves 1 MiB in 23 µs, a single one in 46 µs, IB in 105 µs (+2.6 µs alpha)."""
    graph = build_topology(load_hardware(taccl_topo_dir / "topo-ndv2-1MB.json", chunk_bytes=MiB), 2)
    assert graph.edges[0, 1]["bandwidth_GBps"] == pytest.approx(45.590, abs=1e-3)   # 1048576 B / 23 µs
    assert graph.edges[0, 2]["bandwidth_GBps"] == pytest.approx(22.795, abs=1e-3)   # / 46 µs
    assert graph.edges[0, 1]["alpha_us"] == pytest.approx(0.3)
    assert graph.edges[0, 8]["bandwidth_GBps"] == pytest.approx(9.986, abs=1e-3)    # / 105 µs
    assert graph.edges[0, 8]["alpha_us"] == pytest.approx(2.6)
    assert not graph.has_edge(0, 5)


def test_taccl_dgx2_1kb_numbers(taccl_topo_dir):
    """topo-dgx2-1KB at cost scale 100: β = 1 means 0.01 µs per KiB (102.4 GB/s), alpha 30 means 0.3 µs."""
    profile = load_hardware(taccl_topo_dir / "topo-dgx2-1KB.json", chunk_bytes=KiB)
    assert profile.link_classes["switch"].bandwidth_GBps == pytest.approx(102.4)
    assert profile.link_classes["switch"].alpha_us == pytest.approx(0.3)


def test_taccl_json_needs_the_chunk_size(taccl_topo_dir):
    with pytest.raises(InputError) as err:
        load_hardware(taccl_topo_dir / "topo-ndv2-1MB.json")
    assert err.value.field == "--chunk-size"


def test_taccl_cost_scale_can_be_given(taccl_topo_dir):
    profile = load_hardware(taccl_topo_dir / "topo-ndv2-1MB.json", chunk_bytes=MiB, cost_scale=10)
    assert profile.link_classes["nvlink-double"].bandwidth_GBps == pytest.approx(455.90, abs=1e-2)


@pytest.mark.parametrize("change, field", [
    ({"node_betas_list": [1, 2, 3]}, "node_betas_list"),
    ({"node_betas_list": [-23, 46]}, "node_betas_list[0]"),
    ({"gpus_per_node": 16}, "gpus_per_node"),
    ({"nics_per_node": 3}, "nics_per_node"),
    ({"remote_beta": "fast"}, "remote_beta"),
])
def test_malformed_taccl_json_names_the_field(taccl_topo_dir, tmp_path, change, field):
    data = {**json.loads((taccl_topo_dir / "topo-ndv2-1MB.json").read_text()), **change}
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        load_hardware(path, chunk_bytes=MiB)
    assert err.value.field == field and err.value.source == str(path)


def test_broken_json_is_named_by_line(tmp_path):
    path = tmp_path / "topo.json"
    path.write_text('{\n "gpus_per_node": 8,\n')
    with pytest.raises(InputError) as err:
        load_hardware(path, chunk_bytes=MiB)
    assert err.value.source == str(path) and err.value.field.startswith("line ")


# --------------------------------------------------------------------------- malformed YAML profiles


def test_small_profile_is_valid(small_profile, write_yaml):
    profile = load_hardware(write_yaml(small_profile))
    assert profile.gpus_per_node == 4 and len(profile.links) == 6


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["link_classes"]["nvlink"].update(bandwidth_GBps=-25), "link_classes.nvlink.bandwidth_GBps"),
    (lambda d: d["link_classes"]["nvlink"].update(bandwidth_GBps=0), "link_classes.nvlink.bandwidth_GBps"),
    (lambda d: d["link_classes"]["pcie"].update(alpha_us=-0.5), "link_classes.pcie.alpha_us"),
    (lambda d: d["link_classes"]["nvlink"].update(bandwidth_GBps=float("inf")), "link_classes.nvlink.bandwidth_GBps"),
    (lambda d: d["link_classes"]["ib"].update(alpha_us=float("nan")), "link_classes.ib.alpha_us"),
    (lambda d: d["link_classes"]["ib"].update(alpha_us="2.6us"), "link_classes.ib.alpha_us"),
    (lambda d: d["link_classes"]["ib"].update(latency=1), "link_classes.ib.latency"),
    (lambda d: d["links"].update({"class": "nvlnk"}), "links.class"),
    (lambda d: d.update(links={"class": "nvlink", "pairs": [[0, 1, 1, "fast"]]}), "links.pairs[0][3]"),
    (lambda d: d["nics"][0].update({"class": "eth"}), "nics[0].class"),
    (lambda d: d["nics"][0].update(via="cxl"), "nics[0].via"),
    (lambda d: d.update(links={"class": "nvlink", "pairs": [[0, 4, 1]]}), "links.pairs[0][1]"),
    (lambda d: d.update(links={"class": "nvlink", "pairs": [[-1, 2, 1]]}), "links.pairs[0][0]"),
    (lambda d: d["nics"][0].update(gpus=[0, 9]), "nics[0].gpus[1]"),
    (lambda d: d.update(switches=[{"class": "nvlink", "gpus": [0, 7]}]), "switches[0].gpus[1]"),
    (lambda d: d.update(gpu_per_node=4), "gpu_per_node"),
    (lambda d: d["links"].update(shape="ring"), "links.shape"),
    (lambda d: d["nics"][0].update(port=1), "nics[0].port"),
    (lambda d: d.pop("gpus_per_node"), "gpus_per_node"),
    (lambda d: d.update(gpus_per_node="four"), "gpus_per_node"),
    (lambda d: d.update(links={"class": "nvlink", "pairs": [[0, 1, 1], [1, 0, 2]]}), "links.pairs[1]"),
    (lambda d: d.update(links={"class": "nvlink", "pairs": [[2, 2, 1]]}), "links.pairs[0]"),
    (lambda d: d.update(links={"class": "nvlink", "pattern": "torus2d", "dims": [3, 3]}), "links.dims"),
    (lambda d: d.update(links={"class": "nvlink", "pattern": "hypercube"}), "links.pattern"),
    (lambda d: d.update(link_classes={}), "link_classes"),
    (lambda d: d.update(link_classes=[1, 2]), "link_classes"),
    (lambda d: d.update(name=""), "name"),
])
def test_malformed_profile_is_rejected_naming_the_field(small_profile, write_yaml, mutate, field):
    mutate(small_profile)
    path = write_yaml(small_profile)
    with pytest.raises(InputError) as err:
        load_hardware(path)
    assert err.value.source == str(path)
    assert err.value.field == field
    assert str(err.value).startswith(f"{path}: {field}: ")


def test_unknown_field_in_a_switch_is_rejected(small_profile, write_yaml):
    small_profile["switches"] = [{"class": "nvlink", "gpus": [0, 1, 2, 3], "ports": 4}]
    with pytest.raises(InputError) as err:
        load_hardware(write_yaml(small_profile))
    assert err.value.field == "switches[0].ports"


@pytest.mark.parametrize("text, field", [
    ("name: x\ngpus_per_node: 4: 5\n", "line 2"),
    ("name: x\n  gpus_per_node: 4\n bad: [", "line 2"),
    ("- name\n- gpus_per_node\n", "document"),
    ("just a string\n", "document"),
    ("", "document"),
])
def test_bad_yaml_or_not_a_mapping(write_yaml, text, field):
    path = write_yaml(text)
    with pytest.raises(InputError) as err:
        load_hardware(path)
    assert err.value.source == str(path) and err.value.field == field


def test_unknown_profile_name_lists_the_shipped_ones():
    with pytest.raises(InputError) as err:
        load_hardware("ndv3")
    assert err.value.parameter == "hardware" and "ndv2" in err.value.expected


def test_missing_profile_file(tmp_path):
    with pytest.raises(InputError) as err:
        load_hardware(tmp_path / "nope.yaml")
    assert err.value.field == "file"


def test_profile_from_dict_never_accepts_a_non_mapping():
    for value in (None, [], "ndv2", 3):
        with pytest.raises(InputError, match="document: a mapping"):
            profile_from_dict(value, "x.yaml")


@pytest.mark.parametrize("name", SHIPPED)
def test_a_profile_written_as_yaml_reads_back_equal(name, write_yaml):
    profile = load_hardware(name)
    path = write_yaml(profile_to_dict(profile), f"{name}-copy.yaml")
    again = load_hardware(path)
    assert again == dataclasses.replace(profile, source=str(path))
    assert [list(nic.attach) for nic in again.nics] == [list(nic.attach) for nic in profile.nics]   # NIC order too
    assert profile.nccl.channels > 1 and profile.gpu in ("volta", "ampere", "hopper", "blackwell")


def test_a_taccl_profile_written_as_yaml_needs_no_chunk_size_any_more(taccl_topo_dir, write_yaml):
    profile = load_hardware(taccl_topo_dir / "topo-ndv2-1MB.json", chunk_bytes=MiB)
    path = write_yaml(profile_to_dict(profile), "ndv2-1MB.yaml")
    assert load_hardware(path) == dataclasses.replace(profile, source=str(path))


def test_protocol_defaults_follow_the_gpu_generation():
    h100, a100 = load_hardware("dgx-h100"), load_hardware("dgx-a100")
    assert h100.protocols["Simple"].channel_GBps == 38.7 and a100.protocols["Simple"].channel_GBps == 24.0
    assert h100.protocols["LL"].efficiency == 0.5 and h100.protocols["LL128"].efficiency == 120 / 128
    assert h100.nccl.nvls is not None and a100.nccl.nvls is None
    partial = profile_from_dict({"name": "p", "gpus_per_node": 2, "gpu": "hopper",
                                 "link_classes": {"l": {"alpha_us": 1, "bandwidth_GBps": 10}},
                                 "links": {"class": "l", "pairs": [[0, 1, 1]]},
                                 "protocols": {"LL": {"launch_us": 3.0}}}, "<p>")
    assert partial.protocols["LL"].launch_us == 3.0 and partial.protocols["LL"].channel_GBps == 141.0 / 24


def test_lls_ceiling_across_nodes_follows_the_host_cpu_and_node_count():
    # tuning.cc llMaxBws: one node by GPU generation, 2 and 4+ nodes by the CPU vendor
    assert ll_scale("ampere", "amd", 1) == 1.0
    assert ll_scale("ampere", "amd", 2) == pytest.approx(22.5 / 87.7)
    assert ll_scale("ampere", "intel", 2) == pytest.approx(39.0 / 87.7)
    assert ll_scale("hopper", "amd", 4) == ll_scale("hopper", "amd", 10) == pytest.approx(19.0 / 141.0)
    assert load_hardware("dgx-a100").nccl.cpu == "amd" and load_hardware("dgx-h100").nccl.cpu == "intel"
    with pytest.raises(InputError, match="nccl.cpu.*one of: intel, amd"):
        profile_from_dict({"name": "p", "gpus_per_node": 2, "link_classes": {"l": {"alpha_us": 1, "bandwidth_GBps": 10}},
                           "links": {"class": "l", "pairs": [[0, 1, 1]]}, "nccl": {"cpu": "arm"}}, "<p>")
