"""In-switch reduction (NVLS) in the model: the profile's terms, the simulator's multimem steps, NCCL's NVLS
rows, the bounds with the switch, and the public H100 NVLS tables they are held against (issue 11's targets:
median <= 15%, worst <= 30% of busbw at >= 64 KiB, on tables the fit did not see)."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from autotaccl.bounds import bounds, switch_bounds
from autotaccl.cli import main
from autotaccl.errors import InputError
from autotaccl.model.hardware import load_hardware, profile_from_dict, profile_to_dict
from autotaccl.model.switch import multimem_us, nvls_chunk, switch_port
from autotaccl.model.topology import build_topology
from autotaccl.nccl_model import Terms, nccl_model
from autotaccl.selection import attainable_us
from autotaccl.simulate import simulate_switch
from runners.nccl_output import read_table
from support import PUBLIC_TABLES

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
FIT = "06-h100-sxm-1node-allreduce-nvls.txt"              # Together AI, NCCL 2.26, NVLS enabled
UNSEEN = [("10-h100-sxm-1node-allreduce-nccl2.29-32M-16G.txt", "intel"),   # xxrjun cluster, NCCL 2.29 defaults
          ("19-h100-aws-p5-1node-allreduce-8B-16G.txt", "amd")]            # AWS p5 (AMD EPYC hosts)
SIZES = [64 * KiB, MiB, 16 * MiB, 256 * MiB, GiB, 4 * GiB]


def h100(cpu: str = "intel", nvls=None):
    profile = load_hardware("dgx-h100")
    nccl = replace(profile.nccl, cpu=cpu, nvls=nvls or profile.nccl.nvls)
    return build_topology(replace(profile, nccl=nccl))


def table_errors(graph, name: str) -> list[float]:
    """|predicted busbw / measured - 1| of nccl-model (NCCL's free choice) per size >= 64 KiB of table ``name``."""
    times = read_table(PUBLIC_TABLES / name).times()
    sizes = [s for s in sorted(times) if s >= 64 * KiB]
    rows = nccl_model(graph, "allreduce", sizes).rows
    return [abs(times[r.bytes] / r.time_us - 1) for r in rows]


def test_profiles_declare_what_their_switches_can_do():
    h, b, g, a = (load_hardware(n) for n in ("dgx-h100", "dgx-b200", "gb200-nvl72", "dgx-a100"))
    assert a.nccl.nvls is None
    assert h.nccl.nvls.channels == (16, 16) and b.nccl.nvls.channels == g.nccl.nvls.channels == (24, 32)
    assert b.nccl.nvls.efficiency == g.nccl.nvls.efficiency == 0.74        # tuning.cc nvlsEfficiency, Blackwell
    assert {p.nccl.nvls.latency_us for p in (h, b, g)} == {25.0}            # tuning.cc NVLS NVLink latency
    assert b.nccl.nvls.channels_on(1) == 24 and b.nccl.nvls.channels_on(2) == 32
    again = profile_from_dict(profile_to_dict(b), "<round trip>")
    assert again.nccl.nvls == b.nccl.nvls


@pytest.mark.parametrize("spec, field", [({"channels": [24]}, "nccl.nvls.channels"),
                                         ({"channels": 1}, "nccl.nvls.channels"),
                                         ({"chunk_bytes": 12}, "nccl.nvls.chunk_bytes"),
                                         ({"op_us": -1}, "nccl.nvls.op_us"),
                                         ({"rate": 3}, "nccl.nvls.rate")])
def test_bad_nvls_terms_name_their_field(spec, field):
    data = profile_to_dict(load_hardware("dgx-h100"))
    data["nccl"]["nvls"] = spec
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        profile_from_dict(data, "<p>")


def test_chunks_shrink_for_small_calls_as_nccls_rule():
    lanes = 16 * 8
    assert nvls_chunk(GiB, lanes, 128 * KiB) == 128 * KiB
    assert nvls_chunk(GiB - 1, lanes, 128 * KiB) == 64 * KiB
    assert nvls_chunk(64 * MiB - 1, lanes, 128 * KiB) == 32 * KiB
    assert nvls_chunk(8 * MiB - 1, lanes, 128 * KiB) == 16 * KiB
    assert nvls_chunk(MiB, lanes, 32 * KiB) == 16 * KiB


def test_multimem_steps_cost_their_bytes_and_a_step_each():
    port = switch_port(load_hardware("dgx-h100"), 1)
    assert port.lanes == 128 and port.rate == pytest.approx(450e3 * 0.824 * 0.96)
    one = multimem_us(128 * 16 * KiB, MiB, port)        # every lane moves one 16 KiB chunk: one step
    assert one == pytest.approx(128 * 16 * KiB / port.rate + 7.8)
    two = multimem_us(128 * 16 * KiB + 1, MiB, port)    # a byte more needs a second step
    assert two - one == pytest.approx(7.8, abs=1e-3)
    assert multimem_us(0, MiB, port) == 0.0


@pytest.mark.parametrize("hardware", ["dgx-h100", "dgx-b200", "gb200-nvl72"])
@pytest.mark.parametrize("collective", ["allreduce", "reducescatter", "allgather"])
def test_nccl_models_nvls_rows_are_the_simulators_switch_collective(hardware, collective):
    graph = build_topology(load_hardware(hardware))
    rows = nccl_model(graph, collective, SIZES, ["nvls"]).rows
    launch = graph.graph["profile"].nccl.channel_launch_us
    for row in rows:
        sim = simulate_switch(graph, collective, row.bytes)
        assert row.algorithm == "nvls" and row.time_us == pytest.approx(sim.time_us + row.channels * launch)
        assert row.busbw == pytest.approx(sim.busbw_GBps)
    # AllReduce moves 1 + 1/n of the size per port, the others 1: slower at large sizes
    if collective == "allreduce":
        rs = simulate_switch(graph, "reducescatter", 4 * GiB).time_us
        assert rows[-1].time_us > rs


def test_the_switch_runs_simple_on_one_node_of_a_profile_that_has_it():
    with pytest.raises(InputError, match="Simple"):
        simulate_switch(h100(), "allreduce", MiB, "LL")
    with pytest.raises(InputError, match="nccl.nvls"):
        simulate_switch(build_topology(load_hardware("dgx-a100")), "allreduce", MiB)
    with pytest.raises(InputError, match="one node"):
        simulate_switch(build_topology(load_hardware("dgx-h100"), 2), "allreduce", MiB)
    with pytest.raises(InputError, match="one node"):
        simulate_switch(h100(), "alltoall", MiB)


def test_shipped_h100_nvls_terms_hold_on_the_unseen_public_tables():
    """The shipped terms were fitted on table 06 alone (the test below refits them)."""
    for name, cpu in UNSEEN:
        errs = table_errors(h100(cpu), name)
        assert np.median(errs) <= 0.15 and max(errs) <= 0.30, (name, np.median(errs), max(errs))
    times = read_table(PUBLIC_TABLES / UNSEEN[0][0]).times()
    assert {r.algorithm for r in nccl_model(h100(), "allreduce", sorted(times)).rows} == {"nvls"}


def test_fitting_on_table_06_gives_the_shipped_terms_and_predicts_10_and_19():
    from scipy.optimize import least_squares

    graph = h100()
    base = Terms.of(graph)
    times = read_table(PUBLIC_TABLES / FIT).times()
    sizes = [s for s in sorted(times) if s >= 64 * KiB]

    def residuals(p):
        terms = replace(base, nvls=replace(base.nvls, efficiency=p[0], op_us=p[1]))
        return [math.log(times[r.bytes] / r.time_us) for r in nccl_model(graph, "allreduce", sizes, terms=terms).rows]

    fit = least_squares(residuals, [0.85, 3.0], bounds=([0.3, 0.0], [1.0, 50.0])).x
    shipped = graph.graph["profile"].nccl.nvls
    assert fit[0] == pytest.approx(shipped.efficiency, abs=0.01) and fit[1] == pytest.approx(shipped.op_us, abs=0.1)
    fitted = replace(shipped, efficiency=float(fit[0]), op_us=float(fit[1]))
    for name, cpu in UNSEEN:
        errs = table_errors(h100(cpu, fitted), name)
        assert np.median(errs) <= 0.15 and max(errs) <= 0.30, (name, np.median(errs), max(errs))


def test_the_switch_lifts_the_allreduce_bound_only():
    one, two = build_topology(load_hardware("dgx-h100")), build_topology(load_hardware("dgx-h100"), 2)
    assert switch_bounds(one, "allreduce").algbw_GBps == pytest.approx(450.0)       # S each way per 450 GB/s port
    assert bounds(one, "allreduce").algbw_GBps == pytest.approx(450.0 * 8 / 14)      # RS + AG through the GPUs
    assert switch_bounds(two, "allreduce").algbw_GBps == pytest.approx(400.0)       # 8 NICs x 50 GB/s a node
    for graph in (one, two):
        for c in ("reducescatter", "allgather"):
            assert switch_bounds(graph, c) == bounds(graph, c)
    assert switch_bounds(one, "alltoall") is None
    assert switch_bounds(build_topology(load_hardware("dgx-a100")), "allreduce") is None


@pytest.mark.parametrize("hardware", ["dgx-h100", "dgx-b200", pytest.param("gb200-nvl72", marks=pytest.mark.slow)])
def test_the_attainable_bound_holds_the_switch_and_nccl_under_it(hardware):
    graph = build_topology(load_hardware(hardware))
    for size in SIZES:
        for c in ("allreduce", "reducescatter", "allgather"):
            assert simulate_switch(graph, c, size).time_us >= attainable_us(graph, c, size)
            least = min(attainable_us(graph, c, size, p) for p in ("LL", "LL128", "Simple"))
            assert nccl_model(graph, c, [size]).rows[0].time_us >= least
    if hardware == "dgx-h100":    # the bound without the switch (Simple's launch, RS + AG at the link's
        without = 8.4 + GiB / (450 * 0.824 * 8 / 14 * 1e3)     # efficiency) is one NCCL's NVLS beats
        assert nccl_model(graph, "allreduce", [GiB]).rows[0].time_us < without


def test_bounds_cli_prints_the_switch_bound_beside_todays(capsys):
    assert main(["bounds", "--hardware", "dgx-h100", "--collective", "allreduce"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "algbw <= 257.14" in out[0] and "in-switch reduction" in out[1] and "algbw <= 450.00" in out[1]
    assert main(["bounds", "--hardware", "dgx-a100", "--collective", "allreduce", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["switch"] is None
