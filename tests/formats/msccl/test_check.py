"""The replaying MSCCL XML checker: the shared corpus, deliberately broken variants, malformed files."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from autotaccl.cli import main
from autotaccl.errors import InputError
from autotaccl.formats.msccl import check_xml, parse_xml
from autotaccl.formats.msccl.lower.xmlwrite import write_xml
from support import MSCCL_XML, allpairs3

SEEDS = 3


def manifest() -> dict[str, set[str]]:
    """file -> the modes its MANIFEST says it is valid in."""
    modes = {}
    for line in (MSCCL_XML / "MANIFEST.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].endswith(".xml"):
            text = cells[4]
            modes[cells[0]] = {m for m, word in (("inplace", "in-place"), ("outofplace", "out-of-place"))
                               if re.search(rf"(^|[^-]){word}", text) and f"{word} claim is false" not in text}
    return modes


MANIFEST = manifest()


def test_manifest_lists_every_file():
    assert set(MANIFEST) == {p.name for p in MSCCL_XML.glob("*.xml")}
    assert MANIFEST["ag8x.xml"] == {"inplace"} and MANIFEST["ag_ring4.xml"] == {"inplace", "outofplace"}
    assert MANIFEST["a2a_allpairs4.xml"] == {"outofplace"}


@pytest.mark.parametrize("name", sorted(MANIFEST))
@pytest.mark.parametrize("mode", ["inplace", "outofplace"])
def test_corpus_valid_exactly_in_its_manifest_modes(name, mode):
    report = check_xml(MSCCL_XML / name, mode=mode, seeds=SEEDS)
    assert report.valid == (mode in MANIFEST[name]), str(report)
    if not report.valid:
        assert report.first.mode == mode and report.first.rank is not None


def test_corpus_runtime_detection_and_header_modes():
    tools = check_xml(MSCCL_XML / "ag_ring4_tools.xml", seeds=1)
    assert tools.runtime == "msccl" and tools.modes == ("outofplace",)          # legacy: inplace="0"
    executor = check_xml(MSCCL_XML / "ag_ring4_tools_oop.xml", seeds=1)
    assert executor.runtime == "msccl-executor"
    # the executor does not load files without outofplace/minBytes/maxBytes
    strict = check_xml(MSCCL_XML / "ag_ring4_tools.xml", runtime="msccl-executor", seeds=1)
    assert not strict.valid and "outofplace" in str(strict.first)
    # ag8x claims out-of-place, which is false
    both = check_xml(MSCCL_XML / "ag8x.xml", mode="both", seeds=1)
    assert not both.valid and both.first.mode == "outofplace" and "never written" in both.first.message


# ----------------------------------------------------------------------------- broken variants

def program(name: str):
    return parse_xml((MSCCL_XML / name).read_text(), name)


def edit_step(prog, rank: int, tb: int, s: int, **changes):
    gpus = list(prog.gpus)
    tbs = list(gpus[rank].tbs)
    steps = list(tbs[tb].steps)
    steps[s] = dataclasses.replace(steps[s], **changes)
    tbs[tb] = dataclasses.replace(tbs[tb], steps=tuple(steps))
    gpus[rank] = dataclasses.replace(gpus[rank], tbs=tuple(tbs))
    return dataclasses.replace(prog, gpus=tuple(gpus))


def drop_step(prog, rank: int, tb: int, s: int):
    gpus = list(prog.gpus)
    tbs = list(gpus[rank].tbs)
    steps = [st for st in tbs[tb].steps if st.s != s]
    steps = [dataclasses.replace(st, s=i) for i, st in enumerate(steps)]
    tbs[tb] = dataclasses.replace(tbs[tb], steps=tuple(steps))
    gpus[rank] = dataclasses.replace(gpus[rank], tbs=tuple(tbs))
    return dataclasses.replace(prog, gpus=tuple(gpus))


def check(prog, mode="outofplace"):
    return check_xml(write_xml(prog), mode=mode, seeds=SEEDS)


def test_writer_reproduces_every_corpus_file_byte_for_byte():
    for name in MANIFEST:
        text = (MSCCL_XML / name).read_text()
        assert write_xml(parse_xml(text, name)) == text, name
    assert check(program("ar_2gpu.xml")).valid


def test_missing_dependency_is_a_race():
    prog = program("ar_2gpu.xml")
    assert prog.gpus[0].tbs[0].steps[1].depid == 1
    report = check(edit_step(prog, 0, 0, 1, depid=-1, deps=-1))
    assert not report.valid
    first = report.first
    assert "race on o[0]" in first.message and first.rank == 0
    # the two unordered accesses: tb 0 step 1 (the send that lost its dependency) and tb 1 step 0
    assert (first.tb, first.step) == (0, 1) or "tb 0 step 1" in first.message


def test_wrong_offset_leaves_an_output_unwritten():
    prog = program("ag_ring4.xml")
    step = prog.gpus[2].tbs[0].steps[4]
    assert (step.type, step.dstoff) == ("r", 3)
    report = check(edit_step(prog, 2, 0, 4, dstoff=1, srcoff=1))
    assert not report.valid
    assert report.first.rank == 2 and "output o[" in report.first.message


def test_missing_copy_sends_unwritten_memory():
    prog = program("ag_ring4.xml")
    assert prog.gpus[1].tbs[0].steps[0].type == "cpy"
    report = check(drop_step(prog, 1, 0, 0))
    assert not report.valid
    assert "unwritten o[1] of rank 1" in report.first.message


def test_missing_hasdep_on_a_dependency_target():
    prog = program("ar_2gpu.xml")
    report = check(edit_step(prog, 1, 1, 0, hasdep=0))
    assert not report.valid and "hasdep=0" in report.first.message
    assert (report.first.rank, report.first.tb, report.first.step) == (1, 1, 0)


def test_unterminated_nop_chain():
    prog = program("a2a_two_step_2x4.xml")
    tb = prog.gpus[0].tbs[7]
    assert [s.type for s in tb.steps] == ["nop", "nop", "nop", "s"]
    report = check(drop_step(prog, 0, 7, 3))
    assert not report.valid and "unterminated nop chain" in report.first.message
    report = check(edit_step(prog, 0, 7, 3, depid=-1, deps=-1))
    assert not report.valid and "nop" in report.first.message and report.first.step == 3


def test_nop_without_dependency_is_rejected():
    prog = program("a2a_two_step_2x4.xml")
    report = check(edit_step(prog, 0, 7, 1, depid=-1, deps=-1))
    assert not report.valid and "nop without a dependency" in report.first.message


def test_mismatched_cnt_on_a_connection():
    prog = program("a2a_two_step_2x4.xml")
    step = prog.gpus[0].tbs[7].steps[3]
    assert step.cnt == 4
    report = check(edit_step(prog, 0, 7, 3, cnt=3))
    assert not report.valid
    assert "cnt=4" in report.first.message and "cnt=3" in report.first.message


def test_two_thread_blocks_on_one_connection():
    prog = program("ag_ring4_tools.xml")
    gpus = list(prog.gpus)
    tbs = list(gpus[0].tbs)
    tbs[4] = dataclasses.replace(tbs[4], chan=2)            # tb 3 already sends to 1 on channel 2
    gpus[0] = dataclasses.replace(gpus[0], tbs=tuple(tbs))
    report = check(dataclasses.replace(prog, gpus=tuple(gpus)))
    assert not report.valid and "both send to rank 1 on channel 2" in report.first.message


def test_dependency_cycle_is_a_deadlock():
    prog = program("ar_2gpu.xml")
    # tb 1's first step now waits for tb 0's last step, which waits for tb 1's first step
    prog = edit_step(prog, 0, 1, 0, depid=0, deps=1)
    prog = edit_step(prog, 0, 0, 1, hasdep=1)
    report = check(prog)
    assert not report.valid and "deadlock" in report.first.message and report.first.rank == 0


def test_exceeding_steps_per_threadblock_names_the_limit():
    prog = program("ar_ring4.xml")
    tb = prog.gpus[0].tbs[0]
    long = tuple(dataclasses.replace(st, s=i) for i, st in enumerate(tb.steps * 10))
    assert len(long) == 70
    gpus = list(prog.gpus)
    gpus[0] = dataclasses.replace(gpus[0], tbs=(dataclasses.replace(tb, steps=long),))
    prog = dataclasses.replace(prog, gpus=tuple(gpus), header={**prog.header, "outofplace": "0",
                                                                "minBytes": "0", "maxBytes": "0"})
    report = check_xml(write_xml(prog), runtime="msccl-executor", seeds=1)
    assert any("allows 64 per thread block (6 too many)" in p.message for p in report.errors)


# ----------------------------------------------------------------------------- malformed files

GOOD = (MSCCL_XML / "ar_2gpu.xml").read_text()


@pytest.mark.parametrize("text, line, words", [
    ("this is not XML\n", 1, "an element"),
    (GOOD.replace(' cnt="1" depid="1"', ' depid="1"', 1), 5, "attribute cnt"),
    (GOOD.replace("\n  <gpu", "\n\t<gpu", 1), 2, "TAB"),
    (GOOD.replace('srcoff="1" dstbuf="o" dstoff="1"', 'srcoff="01" dstbuf="o" dstoff="1"', 1), 4, "octal"),
    (GOOD.replace('type="rrc"', 'type="xx"', 1), 8, "type"),
    ('<?xml version="1.0"?>\n' + GOOD, 1, "declaration"),
    (GOOD.replace(' cnt="1" depid="-1"', '\n cnt="1" depid="-1"', 1), 4, "one line"),
    (GOOD.replace('hasdep="0"/>', 'hasdep="0"' + "".join(f' x{i}="1"' for i in range(7)) + "/>", 1), 4,
     "at most 16 attributes"),
    (GOOD.replace('name="ar2_rs_ag"', 'name="' + "n" * 300 + '"'), 1, "at most 255 characters"),
])
def test_malformed_xml_is_one_line_with_the_line_number(tmp_path, capsys, text, line, words):
    path = tmp_path / "bad.xml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        check_xml(path)
    assert f"line {line}" in str(err.value) and words in str(err.value)
    assert main(["check-xml", str(path)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and f"line {line}" in out.err


def test_cli_exit_codes_and_json(tmp_path, capsys):
    assert main(["check-xml", str(MSCCL_XML / "ar_ring4.xml"), "--seeds", "2"]) == 0
    assert "valid allreduce" in capsys.readouterr().out
    assert main(["check-xml", str(MSCCL_XML / "ar_ring4.xml"), "--mode", "outofplace", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is False and data["errors"][0]["mode"] == "outofplace"
    assert main(["check-xml", str(tmp_path / "missing.xml")]) == 2


# ----------------------------------------------------------------------------- nop folding and re fusion

def test_nop_dependencies_fold_into_a_fused_re_chain():
    from autotaccl.formats.msccl.check.replay import fold
    prog = parse_xml(allpairs3())
    (op_copy, op_re) = fold(prog.gpus[0].tbs[4])
    assert op_copy.kind == "cpy"
    assert op_re.kind == "re" and op_re.srcoffs == (0, 1) and sorted(op_re.deps) == [(2, 0), (3, 0)]
    assert op_re.pub == 3 and op_re.s == 3           # publishes as its last step
    assert check_xml(allpairs3(), mode="outofplace", seeds=SEEDS).valid
    report = check_xml(allpairs3(), mode="inplace", seeds=SEEDS)   # o = i: the re overwrites what is sent
    assert not report.valid and "race on i[0]" in report.first.message


def test_fused_re_chain_without_its_nop_races_on_scratch():
    report = check_xml(allpairs3(with_nop=False), mode="outofplace", seeds=SEEDS)
    assert not report.valid and "race on s[" in report.first.message


def test_package_interface_and_runtime_detection_of_our_legacy_files():
    from autotaccl.formats.msccl import CheckReport, LoweringOptions, check_xml as lowering_check, import_xml, lower
    from autotaccl.model.algorithm import Algorithm, Transfer
    from autotaccl.model.collectives import Collective
    rs = Algorithm("rs", Collective("reducescatter", 2), (Transfer((1,), 0, 1, 0, "reduce"),
                                                          Transfer((0,), 1, 0, 0, "reduce")))
    text = lower(rs, LoweringOptions(runtime="msccl"))
    report = lowering_check(text, seeds=1)       # the portable header, but coll="reduce_scatter"
    assert isinstance(report, CheckReport) and report.runtime == "msccl" and report.valid
    assert callable(import_xml)


def test_negative_dependency_other_than_minus_one_is_rejected():
    prog = program("ar_2gpu.xml")
    report = check(edit_step(prog, 0, 0, 0, depid=-3))
    assert not report.valid and "depid=-3" in report.first.message


def test_with_both_modes_a_race_out_of_place_is_found_in_place():
    """Out of place checks values alone where in-place also runs (``races_in``): the missing dependency's
    race on o[0] must still be reported, by the in-place replay, where o[0] is i[0]."""
    from autotaccl.formats.msccl.check.replay import races_in
    assert not races_in("outofplace", ("inplace", "outofplace")) and races_in("outofplace", ("outofplace",))
    racy = edit_step(program("ar_2gpu.xml"), 0, 0, 1, depid=-1, deps=-1)
    assert check(racy, mode="outofplace").first.message.startswith("race on o[0]")
    report = check(racy, mode="both")
    assert not report.valid and report.first.mode == "inplace" and "race on i[0]" in report.first.message
