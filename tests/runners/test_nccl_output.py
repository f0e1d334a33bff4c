"""Reading measured tables: every public nccl-tests table, the -I 1 and -J formats, autotaccl bench output, bad files."""
from __future__ import annotations

import json
import math

import pytest

from autotaccl.errors import InputError
from runners.nccl_output import parse_json, parse_text, read_table
from support import PUBLIC_TABLES

TABLES = sorted(PUBLIC_TABLES.glob("*.txt"))
V219 = """# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703
# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
        1024            32     float    none      -1    10.00    0.10    0.09       0     9.00    0.11    0.10       0
        2048            64     float    none      -1    12.00    0.17    0.15       3    11.00    0.19    0.16       0
        4096           128     float    none      -1    14.00    0.29    0.26       0      N/A    0.00    0.00     N/A
"""


def test_every_public_table_reads_with_its_collective_and_rank_count():
    assert len(TABLES) == 21
    for path in TABLES:
        table = read_table(path)
        assert table.collective in ("allreduce", "allgather"), path.name
        times = table.times()
        assert len(times) >= 10 and all(t > 0 for t in times.values())
        expected = {"1node": 8, "2node": 16, "4node": 32, "10node": 80}
        nodes = next(k for k in expected if f"-{k}-" in path.name)
        assert table.ranks(table.collective) == expected[nodes], path.name


def test_fastest_of_modes_and_repeats_and_wrong_rows_dropped():
    table = parse_text(V219, "<v2.19>")
    assert table.collective == "allgather" and table.nccl_version.startswith("nccl-tests version 2.19.6")
    # 2048: out-of-place had 3 wrong elements, so only in-place counts; 4096: in-place not timed
    assert table.times() == {1024: 9.0, 2048: 11.0, 4096: 14.0}
    wrong = table.rows[(table.rows["size"] == 2048) & ~table.rows["inplace"]]
    assert wrong["wrong"].iloc[0] == 3 and math.isnan(wrong["time_us"].iloc[0])


def test_old_formats_error_column_is_a_tolerance():
    old = ("#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
           "        1024           256   float     sum    20.00    0.05    0.09  1e-07    21.00    0.05    0.09  2e-02\n")
    table = parse_text(old, "<old>")
    assert table.times() == {1024: 20.0}            # in-place deviates by 2e-2 > float's 1e-5: failed


def test_per_iteration_columns_and_launcher_tags():
    row = "[1,0]<stdout>:     8192   2048  float  sum  -1  30.0  0.27  0.48  0  29.0  31.0  30.5  1.2  28.0  0.29  0.51  0  27.5  29.0  28.6  1.0"
    assert parse_text(row + "\n", "<-I 1>").times() == {8192: 28.0}


def test_autotaccl_bench_output_reads_the_first_table():
    from runners.results import frame, make_row
    from runners.table import format_table
    from autotaccl.model.collectives import Collective

    coll = Collective("allreduce", 4)
    ours = frame([make_row(coll, s, s // 4, "float32", "sum", m, t, 0) for s, t in ((1024, 5.0), (4096, 7.0))
                  for m in (False, True)])
    mpi = frame([make_row(coll, s, s // 4, "float32", "sum", m, 99.0, 0) for s in (1024, 4096) for m in (False, True)])
    text = (format_table(ours, mpi, "autotaccl bench ring-allreduce: runner mpi, allreduce on 4 ranks") + "\n"
            + format_table(mpi, None, "baseline: MPI's own allreduce"))
    table = parse_text(text, "<bench>")
    assert table.collective == "allreduce" and table.times() == {1024: 5.0, 4096: 7.0}
    as_json = parse_json({"algorithm": "ring", "runner": "mpi", "rows": ours.to_dict("records"), "baseline": None},
                         "<bench.json>")
    assert as_json.times() == {1024: 5.0, 4096: 7.0} and as_json.collective is None


def test_nccl_tests_json_as_its_writer_shapes_it():
    data = {"version": 3, "args": ["/opt/nccl-tests/build/all_reduce_perf", "-b", "8"],
            "env": ["HOME=/root", "NCCL_ALGO=Ring", "SECRET_TOKEN=x", "NCCL_PROTO=Simple"], "nccl_version": 22703,
            "results": [{"size": 1 << 20, "count": 1 << 18, "type": "float", "redop": "sum", "root": "    -1",
                         "out_of_place": {"time": 50.0, "alg_bw": 21.0, "bus_bw": 36.7, "nwrong": 0},
                         "in_place": {"time": "nan", "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": None}}]}
    table = parse_json(data, "<json>")
    assert table.collective == "allreduce" and table.times() == {1 << 20: 50.0}
    assert table.restrictions == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}     # nothing else of env is kept


@pytest.mark.parametrize("text, where", [
    ("# size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n 1024 256 float sum -1 x 1 1 0 1 1 1 0\n",
     "line 2"),
    ("        1024           256   float     sum    20.00    0.05\n", "line 1"),
    ("# size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "  1024 256 float sum -1 1 1 1 0 1 1 1\n", "line 2"),
    ("# size count shape time algbw busbw #wrong\n", "line 1"),
    ("just some log text\nNCCL INFO nothing to see\n", "rows"),
    ("  -5 256 float sum -1 1 1 1 0 1 1 1 0\n", "rows"),
])
def test_malformed_text_is_one_input_error_naming_the_line(text, where):
    with pytest.raises(InputError) as err:
        parse_text(text, "bad.txt")
    assert err.value.source == "bad.txt" and err.value.field == where


@pytest.mark.parametrize("data, where", [
    ([], "document"), ({"results": []}, "results"), ({"results": [7]}, "results[0]"),
    ({"results": [{"size": -1, "count": 0, "type": "float", "redop": "sum"}]}, "results[0].size"),
    ({"results": [{"size": 8, "count": 2, "type": "float", "redop": "sum",
                   "out_of_place": {"time": "fast", "alg_bw": 1, "bus_bw": 1, "nwrong": 0}}]}, "results[0].out_of_place.time"),
    ({"rows": [{"size": "big"}]}, "rows[0]"),
])
def test_malformed_json_is_one_input_error_naming_the_field(data, where):
    with pytest.raises(InputError) as err:
        parse_json(data, "bad.json")
    assert err.value.field == where


def test_unreadable_files(tmp_path):
    with pytest.raises(InputError, match="existing nccl-tests output"):
        read_table(tmp_path / "missing.txt")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError, match="line 1"):
        read_table(tmp_path / "bad.json")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="UTF-8"):
        read_table(tmp_path / "bin.txt")
    (tmp_path / "ok.json").write_text(json.dumps({"rows": [{"size": 8, "count": 2, "time_us": 1.0, "algbw": 0.01,
                                                             "busbw": 0.01, "wrong": 0}]}))
    assert read_table(tmp_path / "ok.json").times() == {8: 1.0}
