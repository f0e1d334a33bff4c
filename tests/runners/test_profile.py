"""``autotaccl profile``: a real ping-pong job writes a profile that loads; the fit and grouping on given data."""
from __future__ import annotations

import json

import pytest
import yaml

from autotaccl.cli import main
from autotaccl.errors import InputError
from autotaccl.model.hardware import load_hardware, profile_from_dict
from autotaccl.model.topology import build_topology
from runners.linkfit import PoorFitError, analyse, fit_alpha_beta, group_pairs, node_layout, profile_dict

SIZES = [1024, 4096, 16384, 65536, 262144, 1048576]


def line(alpha: float, gbps: float) -> list[float]:
    return [alpha + s / (gbps * 1e3) for s in SIZES]


@pytest.mark.mpi
def test_profile_job_writes_a_profile_that_loads(tmp_path, capsys):
    out = tmp_path / "measured.yaml"
    # any R² is accepted here: this test is about the job and the file; refusals are tested on given data
    code = main(["profile", "--np", "3", "--sizes", "1K:4M:x4", "--iters", "9",
                 "--min-r2=-inf", "-o", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    profile = load_hardware(out)
    assert profile.gpus_per_node == 3 and set(profile.link_classes) == {"intra"}
    intra = profile.link_classes["intra"]
    assert intra.alpha_us >= 0 and intra.bandwidth_GBps > 0
    assert sorted(map(tuple, doc["classes"]["intra"]["pairs"])) == [(0, 1), (0, 2), (1, 2)]
    intra_doc = doc["classes"]["intra"]
    assert len(intra_doc["residuals"]) == 3 * 7
    assert intra_doc["fitted"] == [s in (1024, 4096, 1 << 20, 4 << 20) for s in [1024 << 2 * k for k in range(7)] * 3]
    between = max((abs(r) for r, f in zip(intra_doc["residuals"], intra_doc["fitted"]) if not f), default=0)
    assert ("departs from alpha + size/bandwidth" in captured.err) == (between > 0.25)
    text = out.read_text()
    assert text.startswith("# Measured by `autotaccl profile` on ") and "ping-pong" in text
    graph = build_topology(profile)
    assert graph.number_of_edges() == 6
    assert graph.edges[0, 1]["alpha_us"] == pytest.approx(intra.alpha_us)


def test_fit_recovers_alpha_and_bandwidth():
    fit = fit_alpha_beta(SIZES, line(2.5, 8.0))
    assert fit.alpha_us == pytest.approx(2.5, rel=1e-6) and fit.bandwidth_GBps == pytest.approx(8.0, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0) and max(map(abs, fit.residuals)) < 1e-9


def test_fit_ignores_one_outlier_and_says_so():
    sizes = [1 << k for k in range(10, 27)] * 2    # two pairs, 1 KiB .. 64 MiB: four points at each end
    times = [2.0 + s / 9e3 for s in sizes]
    times[15] *= 3.0                     # one 32 MiB round trip that lost its core for a while
    fit = fit_alpha_beta(sizes, times)
    assert fit.alpha_us == pytest.approx(2.0, rel=1e-3) and fit.bandwidth_GBps == pytest.approx(9.0, rel=1e-3)
    assert fit.rejected == 1 and fit.r2 > 0.999
    plain = fit_alpha_beta(sizes, times, rounds=0)   # without re-weighting the outlier drags the line
    assert plain.rejected == 0 and abs(plain.bandwidth_GBps / 9.0 - 1) > 0.03 and plain.r2 < 0.95


def test_sizes_between_the_ends_are_reported_not_fitted():
    # shaped like this machine's shared memory: messages that fit in the caches move twice as fast, and
    # MPI's eager limit adds a step, so no straight line passes near every point
    sizes = [1 << k for k in range(10, 27)]
    times = [1.5 + s / 13e3 * (0.5 if 1 << 13 <= s <= 1 << 23 else 1.0) + (3.0 if s >= 1 << 13 else 0.0)
             for s in sizes]
    fit = fit_alpha_beta(sizes, times)
    assert fit.fitted == tuple(s <= 2048 or s >= 32 << 20 for s in sizes)
    assert fit.alpha_us == pytest.approx(1.5, rel=0.02)    # the +3 us step lifts only the bandwidth end: < 2%
    assert fit.bandwidth_GBps == pytest.approx(13.0, rel=0.02)
    assert fit.worst_residual() == pytest.approx(0, abs=0.05) and fit.worst_residual(False) < -0.5
    everything = [((t - 1.5 - s / 13e3) / t) for s, t in zip(sizes, times)]
    assert max(map(abs, everything)) > 0.5            # the shape is far from one line


def test_a_sweep_must_reach_both_regimes():
    with pytest.raises(PoorFitError, match="largest size .* latency-bound.*extend --sizes upwards"):
        fit_alpha_beta(SIZES, line(500.0, 100.0))
    with pytest.raises(PoorFitError, match="smallest size .* bandwidth-bound.*start --sizes lower"):
        fit_alpha_beta(SIZES, line(0.01, 1.0))


def test_two_hosts_give_intra_and_net_classes_and_a_loadable_profile():
    hosts = ["a", "a", "b", "b"]
    pairs = [{"a": x, "b": y, "sizes": SIZES, "times_us": line(1.0, 20.0) if hosts[x] == hosts[y] else line(5.0, 3.0)}
             for x in range(4) for y in range(x + 1, 4)]
    m = analyse({"hosts": hosts, "pairs": pairs})
    assert {c.name: c.pairs for c in m.classes} == {"intra": ((0, 1), (2, 3)), "net": ((0, 2), (0, 3), (1, 2), (1, 3))}
    data = profile_dict(m, "two-hosts")
    profile = profile_from_dict(yaml.safe_load(yaml.safe_dump(data)), "test")
    assert profile.link_classes["net"].bandwidth_GBps == pytest.approx(3.0, rel=1e-4)
    assert profile.link_classes["net"].alpha_us == pytest.approx(5.0, rel=1e-3)
    graph = build_topology(profile, 2)
    assert graph.edges[0, 2]["kind"] == "net" and graph.edges[0, 1]["kind"] == "nvlink"


def test_group_by_speed_splits_fast_and_slow_pairs():
    hosts = ["a"] * 3
    fits = {(0, 1): fit_alpha_beta(SIZES, line(1, 40)), (0, 2): fit_alpha_beta(SIZES, line(1, 10)),
            (1, 2): fit_alpha_beta(SIZES, line(1, 38))}
    assert group_pairs(hosts, fits, "speed") == {(0, 1): "link0", (1, 2): "link0", (0, 2): "link1"}
    pairs = [{"a": a, "b": b, "sizes": SIZES, "times_us": list(f.times_us)} for (a, b), f in fits.items()]
    data = profile_dict(analyse({"hosts": hosts, "pairs": pairs}, "speed"), "mixed")
    assert data["links"]["pairs"] == [[0, 1, 1, "link0"], [0, 2, 1, "link1"], [1, 2, 1, "link0"]]
    profile_from_dict(data, "test")


def test_a_poor_fit_is_refused():
    noisy = [2.0, 9.0, 3.0, 400.0, 30.0, 900.0]
    with pytest.raises(PoorFitError, match="R²"):
        analyse({"hosts": ["a", "a"], "pairs": [{"a": 0, "b": 1, "sizes": SIZES, "times_us": noisy}]})


def test_flat_times_have_no_bandwidth():
    with pytest.raises(PoorFitError, match="bandwidth"):
        fit_alpha_beta(SIZES, [3.0] * len(SIZES))


def test_ranks_must_be_in_blocks_per_host():
    assert node_layout(["a", "a", "b", "b"]) == 2
    with pytest.raises(InputError, match="placement"):
        node_layout(["a", "b", "a", "b"])
