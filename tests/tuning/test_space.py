"""Search spaces: every shipped file loads; every kind of mistake names the file and the field."""
from __future__ import annotations

import optuna
import pytest
import yaml

from autotaccl.errors import InputError
from autotaccl.sketch import Sketch, sketch_key
from autotaccl.sketch.knobs import sketch_document
from autotaccl.tuning.space import enumerate_space, load_space, params_to_sketch, sample, settings, shipped_spaces
from autotaccl.tuning.space.knobs import MAX_INSTANCES

GOOD = {
    "target": {"hardware": "ndv2", "nodes": 2, "collectives": ["allgather", "alltoall"]},
    "sizes": "1K:1M:x4",
    "parameters": {
        "internode_conn": {"type": "categorical", "choices": ["relay", "direct-map"]},
        "relay_map": {"type": "categorical", "choices": ["0:1", "1:0"], "when": {"internode_conn": "relay"}},
        "chunkup": {"type": "int", "low": 1, "high": 3},
        "mip_gap": {"type": "float", "low": 0.0, "high": 0.1},
    },
    "seeds": [{"internode_conn": "relay", "relay_map": "0:1", "chunkup": 1}],
}


def write(tmp_path, data, name="space.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def mutate(**changes):
    data = yaml.safe_load(yaml.safe_dump(GOOD, sort_keys=False))
    for dotted, value in changes.items():
        node = data
        keys = dotted.split("__")
        for k in keys[:-1]:
            node = node[k]
        if value is KeyError:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return data


def test_every_shipped_space_loads_and_its_seeds_make_sketches():
    paths = shipped_spaces()
    targets = set()
    for path in paths:
        space = load_space(path)
        targets.add((space.profile.name, space.nodes))
        for seed in space.seeds:
            assert isinstance(params_to_sketch(space, {**space.fixed, **seed}), Sketch)
    assert {("ndv2", 1), ("ndv2", 2), ("ndv2", 4), ("dgx2", 1), ("dgx2", 2), ("dgx-a100", 2),
            ("dgx-h100", 2)} <= targets
    assert {c for p in paths for c in load_space(p).collectives} >= {"allgather", "alltoall", "allreduce"}


def test_good_space_parses(tmp_path):
    space = load_space(write(tmp_path, GOOD))
    assert space.collectives == ("allgather", "alltoall")
    assert space.sizes == (1024, 4096, 16384, 65536, 262144, 1048576)
    assert [p.name for p in space.parameters] == ["internode_conn", "relay_map", "chunkup", "mip_gap"]
    assert space.experiment_name("allgather") == "ndv2x2-allgather"


@pytest.mark.parametrize("changes, field", [
    ({"parameters__chunkup__type": "integer"}, "parameters.chunkup.type"),
    ({"parameters__internode_conn__choices": []}, "parameters.internode_conn.choices"),
    ({"parameters__chunkup__low": 5}, "parameters.chunkup.low"),
    ({"parameters__relay_map__when": {"engine": "milp"}}, "parameters.relay_map.when.engine"),
    ({"target__hardware": "dgx9"}, "target.hardware"),
    ({"sizes": "1K:1Q"}, "sizes"),
    ({"sizes": "64K:1K"}, "sizes"),
    ({"parameters__frobnicate": {"type": "int", "low": 1, "high": 2}}, "parameters.frobnicate"),
    ({"parameters__relay_map__choices": ["0:9"]}, "parameters.relay_map.choices[0]"),
    ({"target__collectives": ["allgathr"]}, "target.collectives[0]"),
    ({"seeds": [{"chunkup": 9}]}, "seeds[0].chunkup"),
    ({"seeds": [{"internode_conn": "direct-map", "relay_map": "0:1"}]}, "seeds[0].relay_map"),
    ({"target__nodes": 0}, "target.nodes"),
    ({"parameters__mip_gap__log": True}, "parameters.mip_gap.log"),
])
def test_mistakes_name_file_and_field(tmp_path, changes, field):
    path = write(tmp_path, mutate(**changes), "bad.yaml")
    with pytest.raises(InputError) as err:
        load_space(path)
    assert err.value.source == str(path)
    assert err.value.field == field
    assert str(err.value).startswith(f"{path}: {field}: ")


def test_inter_node_knob_on_one_node_is_rejected(tmp_path):
    data = mutate(target__nodes=1)
    with pytest.raises(InputError, match="internode_conn"):
        load_space(write(tmp_path, data))


def test_condition_must_name_an_earlier_parameter(tmp_path):
    data = mutate()
    data["parameters"] = {"relay_map": data["parameters"]["relay_map"],
                          "internode_conn": data["parameters"]["internode_conn"], "chunkup": data["parameters"]["chunkup"]}
    with pytest.raises(InputError) as err:
        load_space(write(tmp_path, data))
    assert err.value.field == "parameters.relay_map.when.internode_conn"


def test_sample_respects_conditions_and_sketch_follows(tmp_path):
    space = load_space(write(tmp_path, GOOD))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        params = sample(trial, space)
        assert ("relay_map" in params) == (params["internode_conn"] == "relay")
        sketch = params_to_sketch(space, params)
        if params["internode_conn"] == "relay":
            sender = int(params["relay_map"][0])
            assert dict(sketch.internode_conn) == {sender: (1 - sender,)}
        else:
            assert sketch.internode_conn == "direct-map"
        assert sketch.input_chunkup == params["chunkup"]
        assert settings(space, params).mip_gap == params["mip_gap"]
        seen.add(sketch_key(sketch))
        study.tell(trial, 0.0)
    assert len(seen) > 3


def test_enumeration_counts_conditional_configurations(tmp_path):
    data = mutate()
    del data["parameters"]["mip_gap"]
    space = load_space(write(tmp_path, data))
    configs = enumerate_space(space)
    assert len(configs) == (2 + 1) * 3      # relay x 2 maps, direct-map; times 3 chunk-ups
    assert len({tuple(sorted(c.items())) for c in configs}) == len(configs)


def test_switch_hardware_sketch_declares_switches():
    space = load_space("dgx2x2")
    params = {**space.fixed, **space.seeds[0]}
    d = sketch_document(space.profile, space.nodes, params)
    assert d["intranode_sketch"]["switches"] == [list(range(16))]
    assert d["internode_sketch"]["gpus_to_sender_rev_map"]["1"] == [0, 1]
    assert d["symmetry_offsets"] == [[2, 16], [16, 32]]


@pytest.mark.parametrize("path", shipped_spaces(), ids=lambda p: p.stem)
def test_a_space_written_back_reads_equal(path, tmp_path):
    """What the sweep driver writes for its workers when a space is given as an object."""
    from dataclasses import replace

    from autotaccl.documents import write_yaml
    from autotaccl.model.hardware import profile_to_dict
    from autotaccl.tuning.space import space_to_dict

    space = load_space(path)
    hardware = write_yaml(profile_to_dict(space.profile), tmp_path / "hardware.yaml")
    copy = load_space(write_yaml(space_to_dict(space, str(hardware)), tmp_path / "space.yaml"))
    assert copy == replace(space, source=str(tmp_path / "space.yaml"), hardware=str(hardware))
    assert copy.profile == replace(space.profile, source=str(hardware))


MILP_CHOICE = {"engine": {"type": "categorical", "choices": ["greedy", "milp"]}}


def test_a_milp_choice_that_can_never_build_its_routing_model_is_refused(tmp_path):
    data = {"target": {"hardware": "dgx2", "nodes": 2, "collective": "alltoall"}, "sizes": "1M", "parameters": MILP_CHOICE}
    path = write(tmp_path, data)
    with pytest.raises(InputError) as err:
        load_space(path)
    assert err.value.field == "parameters.engine.choices[1]"
    assert "greedy: the milp engine cannot build its routing model on dgx2x2" in str(err.value)
    assert "routing candidates exceed" in str(err.value) and "\n" not in str(err.value)


def test_a_milp_choice_that_falls_back_on_some_collectives_is_flagged(tmp_path, caplog):
    data = {"target": {"hardware": "ndv2", "nodes": 2, "collectives": ["allgather", "alltoall"]}, "sizes": "1M",
            "parameters": {**MILP_CHOICE, "chunkup": {"type": "int", "low": 1, "high": 4}}}
    with caplog.at_level("WARNING", logger="autotaccl.tuning.space.engines"):
        space = load_space(write(tmp_path, data))
    assert space.collectives == ("allgather", "alltoall")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "parameters.engine.choices[1]: engine milp falls back to greedy on alltoall:" in lines[0]
    assert "at chunkup 4" in lines[0] and "allgather" not in lines[0]


def test_a_milp_choice_the_target_can_use_is_silent(tmp_path, caplog):
    data = {"target": {"hardware": "ndv2", "nodes": 2, "collective": "allgather"}, "sizes": "1M", "parameters": MILP_CHOICE}
    with caplog.at_level("WARNING", logger="autotaccl.tuning.space.engines"):
        load_space(write(tmp_path, data))
    assert not caplog.records



def test_a_greedy_trial_synthesizes_for_the_protocol_and_instances_it_runs_with():
    """The greedy engine chooses for the trial's protocol and instances, among what msccl-executor loads:
    each pair is its own synthesis (cache key); for the settings a runner cannot tell apart, Simple x 1 (what
    the export writes). An AllReduce on two DGX-H100 at 1 MiB, run LL x 4, is faster synthesized for that
    run than for Simple x 1. The MILP's stages serve every protocol and instance count of a sketch."""
    from autotaccl import build_topology, load_hardware, synthesize
    from autotaccl.simulate import simulate
    from autotaccl.tuning.cache import cache_key
    from autotaccl.tuning.evaluate import synth_options
    from autotaccl.tuning.space.knobs import Settings

    size = 1 << 20
    told = synth_options(Settings(engine="greedy", synth_size=size, instances=4, protocol="LL"))
    plain = synth_options(Settings(engine="greedy", synth_size=size))
    assert (told.protocol, told.instances, told.runtime.name) == ("LL", 4, "msccl-executor")
    assert cache_key("allreduce", "k", "t", told) != cache_key("allreduce", "k", "t", plain)
    unmeasured = synth_options(Settings(engine="greedy", synth_size=size, instances=4, protocol="LL"),
                               unmeasured=("protocol", "instances"))
    assert unmeasured == plain and (plain.protocol, plain.instances) == ("Simple", 1)

    graph = build_topology(load_hardware("dgx-h100"), 2)
    for_run, for_simple = (synthesize(graph, "allreduce", None, o).algorithm for o in (told, plain))
    run, simple = (simulate(a, graph, size, "LL", 4).time_us for a in (for_run, for_simple))
    assert run < 0.9 * simple, (run, simple)

    milp = [synth_options(Settings(engine="milp", synth_size=size, instances=i, protocol=p)) for p, i in
            (("LL", 4), ("Simple", 1))]
    assert milp[0] == milp[1] and (milp[0].protocol, milp[0].instances, milp[0].runtime) == ("Simple", 1, None)


def test_the_instances_knob_takes_whole_numbers_up_to_max_instances(tmp_path):
    """A sweep can sample (and ship) every instance count in 1..MAX_INSTANCES, which the synthesis
    benchmark therefore tries; one more is refused, naming the field."""
    data = mutate(parameters__instances={"type": "int", "low": 1, "high": MAX_INSTANCES})
    assert "instances" in [p.name for p in load_space(write(tmp_path, data)).parameters]
    path = write(tmp_path, mutate(parameters__instances={"type": "int", "low": 1, "high": MAX_INSTANCES + 1}), "bad.yaml")
    with pytest.raises(InputError) as err:
        load_space(path)
    assert err.value.field.startswith("parameters.instances")
