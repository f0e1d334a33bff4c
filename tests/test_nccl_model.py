"""The NCCL model: hand-computed ring times, NCCL's channel rule, restrictions, and measured tables."""
from __future__ import annotations

import math

import pytest

from autotaccl.errors import InputError
from autotaccl.model.hardware import load_hardware, profile_from_dict
from autotaccl.model.topology import build_topology
from autotaccl.nccl_model import nccl_channels, nccl_model
from runners.nccl_output import read_table
from support import PUBLIC_TABLES

GiB, MiB = 1 << 30, 1 << 20


def switch8(**nccl):
    """8 GPUs on one switch (100 GB/s ports, 1 µs per transfer), protocol terms easy to add up."""
    return build_topology(profile_from_dict({
        "name": "sw8", "gpus_per_node": 8,
        "link_classes": {"sw": {"alpha_us": 1.0, "bandwidth_GBps": 100.0, "efficiency": 0.8}},
        "switches": [{"class": "sw", "gpus": list(range(8))}],
        "protocols": {"Simple": {"launch_us": 10.0, "hop_us": 2.0, "efficiency": 1.0, "channel_GBps": 5.0},
                      "LL": {"launch_us": 4.0, "hop_us": 0.0, "efficiency": 0.5, "channel_GBps": 1.0},
                      "LL128": {"launch_us": 6.0, "hop_us": 1.0, "efficiency": 0.9375, "channel_GBps": 2.0}},
        "nccl": {"channels": 8, "protocols": ["LL", "LL128", "Simple"], **nccl}}, "<sw8>"), 1)


def test_ring_allreduce_is_launch_plus_steps_plus_the_busiest_port():
    graph = switch8()
    rows = nccl_model(graph, "allreduce", [8, GiB], ["ring"], ["Simple"]).rows
    steps, traffic = 14, 2 * 7 / 8                      # 2(R-1) hops; every GPU sends 2(R-1)/R of the buffer
    port = 100 * 0.8                                     # line rate x efficiency, shared by the 8 channels
    for row, size in zip(rows, (8, GiB)):
        bandwidth = max(traffic * size / (port * 1e3), traffic * size / (8 * 5.0 * 1e3))   # ports vs channel ceilings
        assert row.time_us == pytest.approx(10.0 + steps * (1.0 + 2.0) + bandwidth)
        assert (row.algorithm, row.protocol) == ("ring", "Simple")
    assert rows[1].busbw == pytest.approx(8 * 5.0, rel=2e-3)       # 8 channels of 5 GB/s: below the 80 GB/s port


def test_every_channel_a_call_runs_on_costs_its_launch_share():
    base, slow = switch8(), switch8(channel_launch_us=0.5)
    for size, protocol in ((64 << 10, "LL"), (256 << 10, "Simple"), (GiB, "Simple")):
        fast, = nccl_model(base, "allreduce", [size], ["ring"], [protocol]).rows
        row, = nccl_model(slow, "allreduce", [size], ["ring"], [protocol]).rows
        assert row.time_us - fast.time_us == pytest.approx(0.5 * nccl_channels(size, 8, "ring", protocol, 8))
    assert nccl_channels(64 << 10, 8, "ring", "LL", 8) == 2 and nccl_channels(GiB, 8, "ring", "Simple", 8) == 8


def test_ll_across_nodes_runs_at_the_host_cpus_ceiling():
    # two nodes of sw8 joined by one fast NIC per GPU: at 1 GiB only the 8 LL channels of 1.0 GB/s bind on one
    # node; across nodes tuning.cc's llMaxBws row of the host CPU scales them (AMD 22.5, Intel 39 of 87.7)
    def busbw(cpu: str, nodes: int) -> float:
        graph = build_topology(profile_from_dict({
            "name": "sw8n", "gpus_per_node": 8, "gpu": "ampere",
            "link_classes": {"sw": {"alpha_us": 1.0, "bandwidth_GBps": 100.0}, "net": {"alpha_us": 2.0, "bandwidth_GBps": 100.0}},
            "switches": [{"class": "sw", "gpus": list(range(8))}],
            "nics": [{"class": "net", "gpus": [g]} for g in range(8)],
            "protocols": {"LL": {"launch_us": 4.0, "hop_us": 0.0, "efficiency": 0.5, "channel_GBps": 1.0}},
            "nccl": {"channels": 8, "cpu": cpu}}, "<sw8n>"), nodes)
        return nccl_model(graph, "allreduce", [GiB], ["ring"], ["LL"]).rows[0].busbw
    assert busbw("amd", 1) == pytest.approx(8.0, rel=2e-3) == busbw("intel", 1)
    assert busbw("amd", 2) == pytest.approx(8.0 * 22.5 / 87.7, rel=2e-3)
    assert busbw("intel", 2) == pytest.approx(8.0 * 39.0 / 87.7, rel=2e-3)
    assert busbw("intel", 4) == pytest.approx(8.0 * 20.4 / 87.7, rel=2e-3)


def test_the_fastest_protocol_wins_and_restrictions_hold():
    graph = switch8()
    rows = nccl_model(graph, "allreduce", [64, GiB]).rows
    assert rows[0].protocol == "LL" and rows[1].protocol == "Simple"
    only = nccl_model(graph, "allreduce", [64, GiB], protocols=["ll128"]).rows
    assert {r.protocol for r in only} == {"LL128"}
    assert nccl_model(graph, "allgather", [GiB]).rows[0].algorithm == "ring"


def test_channels_follow_nccls_thread_threshold_rule():
    # Simple: nc * 512 threads * 64 bytes; LL on a ring: 8 bytes per thread times the rank count
    assert nccl_channels(1 << 20, 24, "ring", "Simple", 8) == 24
    assert nccl_channels(256 << 10, 24, "ring", "Simple", 8) == 8
    assert nccl_channels(64 << 10, 24, "ring", "LL", 8) == 2
    assert nccl_channels(64 << 10, 24, "tree", "LL", 8) == 16
    assert nccl_channels(100, 24, "ring", "LL128", 8) == 1


def test_nvls_needs_a_switch_that_has_it():
    a100, h100 = build_topology(load_hardware("dgx-a100")), build_topology(load_hardware("dgx-h100"))
    with pytest.raises(InputError, match="no NVLS-capable switch"):
        nccl_model(a100, "allreduce", [GiB], ["nvls"])
    (row,) = nccl_model(h100, "allreduce", [8 * GiB], ["nvls"]).rows
    # every port moves S(1 + 1/8) each way at 450 GB/s x 0.824 (link) x 0.96 (NVLS), in steps of 128 KiB on
    # 16 channels x 8 GPUs, each step 7.8 us beyond its bytes
    port = 8 * GiB * 9 / 8
    steps = math.ceil(port / (16 * 8 * 128 * 1024))
    assert row.algbw == pytest.approx(8 * GiB / (25.0 + port / (450 * 0.824 * 0.96 * 1e3) + steps * 7.8) / 1e3)
    assert row.channels == 16
    notes = nccl_model(a100, "allgather", [GiB]).notes
    assert any("PAT" in n for n in notes) and any("CollNet" in n for n in notes)


def test_bad_choices_are_input_errors():
    graph = switch8()
    with pytest.raises(InputError, match="--algorithm"):
        nccl_model(graph, "allreduce", [GiB], ["ringg"])
    with pytest.raises(InputError, match="--protocol"):
        nccl_model(graph, "allreduce", [GiB], protocols=["LL256"])
    with pytest.raises(InputError, match="NCCL algorithm for broadcast"):
        nccl_model(graph, "broadcast", [GiB], ["tree"])


@pytest.mark.parametrize("name, algorithms, within", [
    ("07-h100-sxm-1node-allreduce-ring-samenodes-as-06.txt", ["ring"], 0.05),
    ("06-h100-sxm-1node-allreduce-nvls.txt", None, 0.05),
    ("24-a100-40g-1node-allreduce-superbench.txt", None, 0.05),
])
def test_shipped_profiles_predict_the_large_sizes_of_measured_tables(name, algorithms, within):
    """Uncalibrated, from NCCL's own constants: H100 ring (368 GB/s busbw) and NVLS (479), A100 (235)."""
    profile = "dgx-h100" if "h100" in name else "dgx-a100"
    table = read_table(PUBLIC_TABLES / name)
    times = {s: t for s, t in table.times().items() if s >= GiB}
    rows = nccl_model(build_topology(load_hardware(profile)), "allreduce", sorted(times), algorithms).rows
    for row in rows:
        assert row.time_us == pytest.approx(times[row.bytes], rel=within), row
    if name.startswith("06"):
        assert {r.algorithm for r in rows} == {"nvls"}


def test_cli_prints_nccl_tests_columns_and_the_json_shape(capsys):
    import json

    from autotaccl.cli import main

    assert main(["nccl-model", "--hardware", "dgx-h100", "--collective", "allreduce", "--sizes", "8,1G"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = next(line for line in out if "algorithm" in line).split()
    assert header[1:] == ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "algorithm", "protocol",
                          "channels"]
    rows = [line.split() for line in out if not line.startswith("#")]
    assert [r[0] for r in rows] == ["8", "1073741824"] and rows[0][9] == "LL"
    assert main(["nccl-model", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "allgather", "--sizes", "1M",
                 "--algorithm", "ring", "--protocol", "Simple", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (row,) = data["rows"]
    assert set(row) == {"bytes", "time_us", "algbw", "busbw", "algorithm", "protocol", "channels"}
    assert (row["algorithm"], row["protocol"], row["channels"]) == ("ring", "Simple", 24)


def test_simulate_cli_takes_protocol_and_instances(tmp_path, capsys):
    import json

    from autotaccl.cli import main

    path = tmp_path / "ring.json"
    assert main(["baseline", "--hardware", "dgx-h100", "--collective", "allgather", "--algorithm", "ring",
                 "-o", str(path)]) == 0
    times = {}
    for protocol, instances in (("Simple", 1), ("Simple", 8), ("LL", 1)):
        capsys.readouterr()
        assert main(["simulate", str(path), "--hardware", "dgx-h100", "--sizes", "1K,1G", "--protocol", protocol,
                     "--instances", str(instances), "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert (data["protocol"], data["instances"]) == (protocol, instances)
        times[protocol, instances] = [r["time_us"] for r in data["rows"]]
    assert times["Simple", 8][1] < times["Simple", 1][1] / 4     # one channel cannot fill the switch port
    assert times["LL", 1][0] < times["Simple", 1][0]             # LL's latency wins small
