"""benchmarks/search_efficiency.py's table: one row per algorithm, and a configuration that makes no sketch
is an infeasible row, not a crash (the tests need no synthesis)."""
from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from support import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
spec = importlib.util.spec_from_file_location("search_efficiency", REPO / "benchmarks" / "search_efficiency.py")
se = importlib.util.module_from_spec(spec)
sys.modules["search_efficiency"] = se        # its dataclasses look their module up
spec.loader.exec_module(se)


def test_configurations_that_differ_only_in_ignored_knobs_are_one_row():
    from autotaccl.tuning.space import enumerate_space

    space = se.engine_part("dgx2x2", "greedy")
    configs = enumerate_space(space)
    assert space.fixed["engine"] == "greedy" and "ordering" not in {p.name for p in space.parameters}
    assert len(configs) == 4104
    keys = {se.config_key(c, space) for c in configs}
    # 2 switch policies x (1 direct-map + 3 relay maps x 3 sender maps) x 3 chunkup x 4 instances x 3 protocols
    assert len(keys) == 2 * (1 + 3 * 3) * 3 * 4 * 3
    one = next(c for c in configs if c["internode_conn"] == "relay")
    other = {**one, "symmetry": "none", "enforce_ordering": not one["enforce_ordering"]}
    assert se.config_key(one, space) == se.config_key(other, space)
    assert se.config_key(one, space) != se.config_key({**one, "chunkup": one["chunkup"] % 3 + 1}, space)


@pytest.mark.slow     # the attainable bound and baselines of dgx2x2 (about 6 s on a shared machine)
def test_a_sender_map_naming_non_senders_is_an_infeasible_row(tmp_path):
    space = se.engine_part("dgx2x2", "greedy")
    table = se.Table(space, "allgather", tmp_path)
    bad = {"switch_policy": "uc-min", "internode_conn": "relay", "relay_map": "1:0,3:2,5:4,7:6,9:8,11:10,13:12,15:14",
           "sender_map": "0:0+1,2:2+3,4:4+5,6:6+7,8:8+9,10:10+11,12:12+13,14:14+15", "enforce_ordering": True,
           "symmetry": "2/16;16/32", "chunkup": 1, "instances": 1, "protocol": "Simple"}
    row = table.get(bad)
    assert "times" not in row and "sender" in row["infeasible"] and row["cache_key"].startswith("invalid ")
    assert table.get({**bad, "symmetry": "none"}) is row                 # the same algorithm: the same row


def test_default_is_tunes_default_and_the_written_results_measured_it():
    from autotaccl.cli import build_parser
    from autotaccl.tuning.objective import SweepConfig
    from autotaccl.tuning.sweep import TuneRequest

    args = build_parser().parse_args(["tune", "--space", "demo"])
    assert (args.sampler, args.margin, args.explore) == (TuneRequest.sampler, TuneRequest.margin,
                                                         TuneRequest.explore) == (se.DEFAULT, se.MARGIN, se.EXPLORE)
    assert (SweepConfig.margin, SweepConfig.sampler, SweepConfig.explore) == (TuneRequest.margin, TuneRequest.sampler,
                                                                                TuneRequest.explore)
    assert se.parse_measured("default@sim") == ("default", se.MARGIN, se.EXPLORE)
    assert se.parse_measured("tpe@sim:0.1:0.25") == ("tpe", 0.1, 0.25) and se.parse_measured("random")[1] is None
    written = (REPO / "benchmarks" / "results" / "search_efficiency.md").read_text()
    assert se.defaults_line() in written        # rerun the benchmark with --write after changing a default


def test_a_modelled_measurement_errs_once_per_algorithm_size_and_world_or_per_protocol():
    row = {"cache_key": "k", "times": [10.0, 20.0]}
    pool = se.Errors([-0.1, 0.0, 0.2], 0.25, "")
    one, again = se.World(pool, 1, "algorithm"), se.World(pool, 1, "algorithm")
    config = '{"protocol": "LL"}'
    assert one.measure(config, row) == again.measure(config, row)
    assert all(any(abs(m / t - math.exp(e)) < 1e-12 for e in pool.pool)
               for m, t in zip(one.measure(config, row), row["times"]))
    other_algorithm = {"cache_key": "k2", "times": row["times"]}
    shared = se.World(pool, 1, "protocol")
    assert shared.measure(config, row) == shared.measure(config, other_algorithm)
    worlds = {tuple(se.World(pool, s, "algorithm").measure(config, row)) for s in range(20)}
    assert len(worlds) > 1                                               # each world draws its own errors
    mixed = se.World(pool, 1, "mixed")            # a shared part (weight sqrt(0.75)) plus an own one (sqrt(0.25))
    shared = [math.log(m / t) for m, t in zip(se.World(pool, 1, "protocol").measure(config, row), row["times"])]
    own = [math.log(m / t) for m, t in zip(one.measure(config, row), row["times"])]
    assert [math.log(m / t) for m, t in zip(mixed.measure(config, row), row["times"])] == pytest.approx(
        [math.sqrt(0.75) * a + math.sqrt(0.25) * b for a, b in zip(shared, own)])


@pytest.mark.slow     # calibrates the simulator on every machine of benchmarks/fidelity.py (about 20 s)
def test_the_mixed_split_is_fitted_on_tables_of_one_host():
    errors = se.error_pool()
    assert len(errors.pool) == 156 and 0 < errors.own < 1
    assert all(f"{a}/{b}" in errors.fit for a, b, _ in se.SAME_HOST)
