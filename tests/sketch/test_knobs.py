"""Sketch <-> knobs: every sketch a knob set describes maps back to the same knobs, and the default sketches of
the shipped hardware are expressible as knobs (so a sweep can enqueue them as trials)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from autotaccl.errors import InputError
from autotaccl.model.hardware import available_profiles, load_hardware
from autotaccl.sketch import default_sketch, knobs_of, sketch_from_knobs, sketch_key
from autotaccl.sketch.knobs import (SKETCH_KNOBS, KnobContext, format_gpu_map, format_symmetry, parse_gpu_map,
                                    parse_symmetry, sketch_document)


# every shipped profile on one node, and on two where it has NICs
TARGETS = [(name, nodes) for name in available_profiles() for nodes in (1, 2) if nodes == 1 or load_hardware(name).nics]


@pytest.mark.parametrize("name, nodes", TARGETS)
def test_default_sketches_survive_knobs_and_back(name, nodes, topo):
    profile = load_hardware(name)
    sketch = replace(default_sketch(topo(name, nodes)), engine="greedy")
    knobs = knobs_of(sketch)
    again = sketch_from_knobs(profile, nodes, knobs)
    assert again == sketch and sketch_key(again) == sketch_key(sketch)
    assert knobs_of(again) == knobs
    ctx = KnobContext(profile.gpus_per_node, nodes)
    assert all(SKETCH_KNOBS[k].check(v, ctx) is None for k, v in knobs.items())      # each value is a valid knob


def test_maps_and_symmetry_strings_round_trip():
    assert parse_gpu_map("1:0+1,3:2", 8) == {"1": [0, 1], "3": [2]}
    assert format_gpu_map(((1, (0, 1)), (3, (2,)))) == "1:0+1,3:2"
    assert parse_symmetry(format_symmetry(((2, 16), (16, 32))), 32) == [[2, 16], [16, 32]]
    assert format_symmetry(()) == "none" and parse_symmetry("none", 32) == []
    with pytest.raises(ValueError, match="distinct senders"):
        parse_gpu_map("1:0,1:2", 8)


def test_knobs_fill_the_hardware_defaults_and_name_the_source():
    profile = load_hardware("dgx2")
    doc = sketch_document(profile, 2, {"relay_map": "1:0+1", "chunkup": 2})
    assert doc["intranode_sketch"]["strategy"] == "switch"                  # the hardware has switches
    assert doc["internode_sketch"]["internode_conn"] == {"1": [0, 1]}       # relay_map implies relay
    assert doc["hyperparameters"] == {"input_chunkup": 2} and doc["autotaccl"]["engine"] == "greedy"
    with pytest.raises(InputError) as err:
        sketch_from_knobs(load_hardware("ndv2"), 1, {"intranode_strategy": "switch"}, "my-space.yaml")
    assert err.value.source == "my-space.yaml" and err.value.field == "intranode_strategy"
