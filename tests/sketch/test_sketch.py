"""Sketch files (TACCL JSON unchanged, YAML), their validation, identity and logical topology."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotaccl.errors import InfeasibleError, InputError
from autotaccl.model.hardware import load_hardware, profile_from_dict
from autotaccl.model.topology import build_topology
from autotaccl.sketch import (Sketch, default_sketch, load_sketch, logical_topology, sketch_from_dict, sketch_key,
                              sketch_to_dict)
from support import SKETCHES

ALL = sorted(SKETCHES.glob("*.json"))


def topo(hw: str, nodes: int):
    return build_topology(load_hardware(hw), nodes)


def test_the_shipped_sketches_are_there():
    assert len(ALL) == 11


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_every_taccl_sketch_loads_unchanged(path):
    raw = json.loads(path.read_text())
    sketch = load_sketch(path)
    assert sketch.nnodes == raw["nnodes"]
    assert sketch.intranode_strategy == raw["intranode_sketch"]["strategy"]
    assert sketch.input_chunkup == raw["hyperparameters"]["input_chunkup"]
    assert [list(p) for p in sketch.symmetry_offsets] == raw["symmetry_offsets"]
    if raw["nnodes"] > 1:
        conn = raw["internode_sketch"]["internode_conn"]
        assert sketch.internode_strategy == "relay"
        if isinstance(conn, str):
            assert sketch.internode_conn == conn
        else:
            assert {str(s): list(r) for s, r in sketch.internode_conn} == {k: sorted(v) for k, v in conn.items()}
    # the canonical dict reads back to an equal sketch with the same key
    again = sketch_from_dict(sketch_to_dict(sketch), "roundtrip")
    assert again == sketch and sketch_key(again) == sketch_key(sketch)


def test_sk1_dgx2_n2_fields():
    s = load_sketch(SKETCHES / "sk1-dgx2-n2.json")
    assert s.switches == (tuple(range(16)),) and s.switch_objective == "uc-min"
    assert dict(s.internode_conn) == {2 * k + 1: (2 * k,) for k in range(8)}
    assert dict(s.sender_map) == {2 * k + 1: (2 * k, 2 * k + 1) for k in range(8)}
    assert s.enforce_ordering is True and s.symmetry_offsets == ((2, 16), (16, 32))


def test_yaml_equivalent_shares_the_key(tmp_path):
    path = SKETCHES / "sk1-dgx2-n2.json"
    data = json.loads(path.read_text())
    # written differently: YAML, keys reordered, integer keys, receivers in another order, a TACCL heuristic
    data["internode_sketch"]["gpus_to_sender_rev_map"] = {
        int(k): list(reversed(v)) for k, v in reversed(list(data["internode_sketch"]["gpus_to_sender_rev_map"].items()))}
    data["hyperparameters"]["heuristic"] = 4
    reordered = dict(reversed(list(data.items())))
    out = tmp_path / "sk1.yaml"
    out.write_text(yaml.safe_dump(reordered, sort_keys=False))
    assert sketch_key(load_sketch(out)) == sketch_key(load_sketch(path))
    assert load_sketch(out) == load_sketch(path)


def test_different_sketches_have_different_keys():
    keys = {sketch_key(load_sketch(p)) for p in ALL}
    assert len(keys) == len(ALL)


def test_autotaccl_section_round_trips_and_changes_the_key():
    data = json.loads((SKETCHES / "sk1-ndv2-n2.json").read_text())
    base = sketch_from_dict(data, "x")
    data["autotaccl"] = {"engine": "greedy", "ordering": 14, "contiguity": False, "batch_window": 3}
    own = sketch_from_dict(data, "x")
    assert (own.engine, own.ordering, own.contiguity, own.batch_window) == ("greedy", "own-node-earliest", False, 3)
    assert sketch_key(own) != sketch_key(base)
    assert sketch_from_dict(sketch_to_dict(own), "y") == own


def _mutate(path: str, value):
    data = json.loads((SKETCHES / "sk1-dgx2-n2.json").read_text())
    keys = path.split("/")
    node = data
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if value is KeyError:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


@pytest.mark.parametrize("where,value,field", [
    ("nnodes", 0, "nnodes"),
    ("nnodes", KeyError, "nnodes"),
    ("colour", "red", "colour"),
    ("intranode_sketch/strategy", "mesh", "intranode_sketch.strategy"),
    ("intranode_sketch/switches", [[0, 1, 1]], "intranode_sketch.switches[0]"),
    ("intranode_sketch/switches", [[0, "a"]], "intranode_sketch.switches[0][1]"),
    ("intranode_sketch/switch_hyperedge_strategy", ["uc-mid"], "intranode_sketch.switch_hyperedge_strategy[0]"),
    ("intranode_sketch/switch_hyperedge_strategy", ["uc-min", "uc-max"], "intranode_sketch.switch_hyperedge_strategy"),
    ("internode_sketch/strategy", "ring", "internode_sketch.strategy"),
    ("internode_sketch/internode_conn", "direct", "internode_sketch.internode_conn"),
    ("internode_sketch/internode_conn", {"3": [-1]}, "internode_sketch.internode_conn.3[0]"),
    ("internode_sketch/internode_conn", {"x": [1]}, "internode_sketch.internode_conn.x"),
    ("internode_sketch/gpus_to_sender_rev_map", {"2": [2]}, "internode_sketch.gpus_to_sender_rev_map.2"),
    ("internode_sketch/enforce_ordering", "yes", "internode_sketch.enforce_ordering"),
    ("internode_sketch", KeyError, "internode_sketch"),
    ("symmetry_offsets", [[2]], "symmetry_offsets[0]"),
    ("symmetry_offsets", [[16, 16]], "symmetry_offsets[0][0]"),
    ("hyperparameters/input_chunkup", 0, "hyperparameters.input_chunkup"),
    ("hyperparameters/chunks", 2, "hyperparameters.chunks"),
    ("autotaccl", {"engine": "cplex"}, "autotaccl.engine"),
    ("autotaccl", {"ordering": 7}, "autotaccl.ordering"),
    ("autotaccl", {"batch_window": 0}, "autotaccl.batch_window"),
])
def test_each_malformed_field_is_named(tmp_path, where, value, field):
    out = tmp_path / "bad.json"
    out.write_text(json.dumps(_mutate(where, value)))
    with pytest.raises(InputError) as err:
        load_sketch(out)
    assert err.value.field == field and err.value.source == str(out)
    assert str(out) in str(err.value)


def test_unreadable_files_are_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{ nnodes: ")
    with pytest.raises(InputError, match="bad.json: line 1"):
        load_sketch(bad)
    with pytest.raises(InputError, match="file"):
        load_sketch(tmp_path / "missing.yaml")


def test_gpu_index_out_of_range_names_the_field():
    data = _mutate("internode_sketch/internode_conn", {"3": [9]})
    data["internode_sketch"]["gpus_to_sender_rev_map"] = None
    data["intranode_sketch"] = {"strategy": "none"}
    sketch = sketch_from_dict(data, "sk.json")
    with pytest.raises(InputError) as err:
        logical_topology(topo("ndv2", 2), "allgather", sketch, 1 << 20)
    assert err.value.field == "internode_sketch.internode_conn.3[0]"
    assert err.value.expected == "a local GPU index in 0..7"


def test_nnodes_must_match_the_topology():
    with pytest.raises(InputError) as err:
        logical_topology(topo("ndv2", 4), "allgather", load_sketch(SKETCHES / "sk1-ndv2-n2.json"), 1 << 20)
    assert err.value.field == "nnodes"


def test_a_chunk_up_past_the_chunk_limit_is_refused_before_synthesis():
    """AllToAll on 512 ranks has 512^2 chunks per chunk-up step: 17 of them would be 4.5M chunks."""
    from autotaccl.model.collectives import MAX_CHUNKS

    ring = build_topology(profile_from_dict({"name": "ring512", "gpus_per_node": 512,
                                             "link_classes": {"nvlink": {"alpha_us": 0.7, "bandwidth_GBps": 25}},
                                             "links": {"class": "nvlink", "pattern": "ring"}}, "ring512.yaml"))
    assert logical_topology(ring, "alltoall", Sketch(nnodes=1, input_chunkup=16), 1 << 20).collective.num_chunks \
        == 16 * 512 * 512 <= MAX_CHUNKS
    with pytest.raises(InputError) as err:
        logical_topology(ring, "alltoall", Sketch(nnodes=1, input_chunkup=17, source="big.json"), 1 << 20)
    assert (err.value.source, err.value.field) == ("big.json", "hyperparameters.input_chunkup")
    assert f"within {MAX_CHUNKS} chunks" in err.value.expected


def _intra(g, nodes, gpn):
    return {(u, v) for u, v in g.edges if u // gpn == v // gpn}


def test_logical_topology_sk1_ndv2_n2():
    g = topo("ndv2", 2)
    lt = logical_topology(g, "allgather", load_sketch(SKETCHES / "sk1-ndv2-n2.json"), 1 << 20)
    assert lt.edges - _intra(g, 2, 8) == {(0, 9), (8, 1)}
    assert _intra(g, 2, 8) <= lt.edges and len(lt.edges) == 64 + 2
    assert lt.symmetry == ((8, 16),) and lt.senders == {}
    assert lt.collective.num_chunks == 16 and lt.chunk_bytes == (1 << 20) / 16


def test_logical_topology_sk2_ndv2_n2_fully_connected():
    g = topo("ndv2", 2)
    lt = logical_topology(g, "alltoall", load_sketch(SKETCHES / "sk2-ndv2-n2.json"), 1 << 20)
    inter = lt.edges - _intra(g, 2, 8)
    assert inter == {(u, v) for u in range(16) for v in range(16) if u // 8 != v // 8}
    assert lt.collective.num_chunks == 256


def test_logical_topology_sk3_ndv2_n2_direct_map():
    g = topo("ndv2", 2)
    lt = logical_topology(g, "allgather", load_sketch(SKETCHES / "sk3-ndv2-n2.json"), 1 << 20)
    assert lt.edges - _intra(g, 2, 8) == {(i, i + 8) for i in range(8)} | {(i + 8, i) for i in range(8)}


def test_logical_topology_sk1_dgx2_n2_senders():
    g = topo("dgx2", 2)
    lt = logical_topology(g, "allgather", load_sketch(SKETCHES / "sk1-dgx2-n2.json"), 1 << 30)
    inter = lt.edges - _intra(g, 2, 16)
    assert inter == {(2 * k + 1, 16 + 2 * k) for k in range(8)} | {(16 + 2 * k + 1, 2 * k) for k in range(8)}
    assert lt.collective.chunkup == 2 and lt.collective.num_chunks == 64
    # GPU 0 owns chunks 0 and 1; they leave node 0 only through GPU 1; GPU 16's through GPU 17
    assert lt.senders[0] == lt.senders[1] == frozenset({1})
    assert lt.senders[32] == frozenset({17}) and lt.senders[3] == frozenset({1}) and lt.senders[4] == frozenset({3})
    assert lt.enforce_ordering and lt.intranode_strategy == "switch"


def test_single_node_and_minmax_sketches_work():
    g = topo("ndv2", 1)
    lt = logical_topology(g, "allgather", load_sketch(SKETCHES / "sk-ndv2-n1-cUp6.json"), 1 << 20)
    assert lt.edges == set(g.edges) and lt.collective.num_chunks == 48
    mm = sketch_from_dict({"nnodes": 1, "intranode_sketch": {"strategy": "minmax"}}, "mm")
    assert logical_topology(g, "allreduce", mm, 1 << 20).intranode_strategy == "minmax"


def test_switch_strategy_keeps_only_links_inside_listed_switches():
    g = topo("dgx2", 1)
    sk = sketch_from_dict({"nnodes": 1, "intranode_sketch": {"strategy": "switch",
                                                           "switches": [list(range(8)), list(range(8, 16))]}}, "two")
    lt = logical_topology(g, "allgather", sk, 1 << 20)
    assert lt.edges == {(u, v) for u in range(16) for v in range(16) if u != v and u // 8 == v // 8}


def test_missing_physical_link_is_infeasible_and_names_the_pair():
    profile = profile_from_dict({"name": "two-nics", "gpus_per_node": 4,
                                 "link_classes": {"nv": {"alpha_us": 1, "bandwidth_GBps": 50},
                                                  "ib": {"alpha_us": 2, "bandwidth_GBps": 10}},
                                 "links": {"class": "nv", "pattern": "fully-connected"},
                                 "nics": [{"class": "ib", "gpus": [0]}]}, "inline")
    g = build_topology(profile, 2)
    sk = sketch_from_dict({"nnodes": 2, "internode_sketch": {"strategy": "relay", "internode_conn": {"1": [0]}}}, "sk")
    with pytest.raises(InfeasibleError, match=r"internode_conn 1->0: .*rank 1 \(node 0\) to rank 4 \(node 1\)"):
        logical_topology(g, "allgather", sk, 1 << 20)


@pytest.mark.parametrize("hw,nodes", [("ndv2", 1), ("ndv2", 2), ("dgx2", 2), ("dgx-a100", 2), ("dgx-h100", 8)])
def test_default_sketch_is_valid_and_connects_every_node(hw, nodes):
    g = topo(hw, nodes)
    sk = default_sketch(g, "allgather")
    assert isinstance(sk, Sketch) and sk.nnodes == nodes
    assert sketch_from_dict(sketch_to_dict(sk), "again") == sk
    lt = logical_topology(g, "allgather", sk, 1 << 20)
    gpn = g.graph["gpus_per_node"]
    for a in range(nodes):
        for b in range(nodes):
            if a != b:
                assert any(u // gpn == a and v // gpn == b for u, v in lt.edges)
