"""import_xml: MSCCL XML (tools-made, hand-written, ours) as IR algorithms that verify and re-lower."""
from __future__ import annotations

from pathlib import Path

import pytest

from autotaccl.errors import InputError
from autotaccl.formats.msccl import LoweringOptions, lower, check_xml
from autotaccl.formats.msccl.check.importer import import_xml
from autotaccl.model.algorithm import verify
from support import MSCCL_XML


EXPECTED = {  # file -> (collective, ranks, chunk-up)
    "a2a_allpairs4.xml": ("alltoall", 4, 1), "a2a_two_step_2x4.xml": ("alltoall", 8, 1),
    "ag8x.xml": ("allgather", 8, 1), "ag_ring4.xml": ("allgather", 4, 1), "ag_ring4_tools.xml": ("allgather", 4, 1),
    "ag_ring4_tools_oop.xml": ("allgather", 4, 1), "ag_ring8_inplace.xml": ("allgather", 8, 1),
    "ar_2gpu.xml": ("allreduce", 2, 1), "ar_a100_ring8.xml": ("allreduce", 8, 2), "ar_ring4.xml": ("allreduce", 4, 1),
    "hier_ar_4x2.xml": ("allreduce", 8, 1),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_imports_verifies_and_lowers_again(name):
    a = import_xml(MSCCL_XML / name, seeds=1)
    verify(a)
    c = a.collective
    assert (c.name, c.ranks, c.chunkup) == EXPECTED[name]
    assert a.metadata["source"] == "msccl-xml"
    report = check_xml(lower(a), mode="both", seeds=1)
    assert report.valid, str(report)


def test_ring_allgather_is_three_forwarding_steps():
    a = import_xml(MSCCL_XML / "ag_ring4.xml", seeds=1)
    assert len(a.transfers) == 12 and a.num_steps == 3
    assert all(t.dst == (t.src + 1) % 4 and t.op == "copy" for t in a.transfers)


def test_ring_allreduce_reduces_then_copies():
    a = import_xml(MSCCL_XML / "ar_ring4.xml", seeds=1)
    ops = [t.op for t in a.transfers]
    assert ops.count("reduce") == 12 and ops.count("copy") == 12
    assert ops.index("copy") > max(i for i, op in enumerate(ops) if op == "reduce") - 4


def test_two_step_alltoall_relays_become_multi_hop_transfers():
    a = import_xml(MSCCL_XML / "a2a_two_step_2x4.xml", seeds=1)
    R = 8
    relayed = [t for t in a.transfers if any(c // R != t.src for c in t.chunks)]   # chunk c starts on c // R
    assert relayed, "the cross-node sends forward chunks gathered from other GPUs"
    assert any(len(t.chunks) == 4 for t in relayed)                               # the aggregated cnt=4 send
    for t in relayed:
        for c in (c for c in t.chunks if c // R != t.src):     # gathered first: the earlier hop
            assert any(u.dst == t.src and c in u.chunks for u in a.transfers[:a.transfers.index(t)])


def test_import_rejects_what_the_ir_cannot_hold(tmp_path):
    text = (MSCCL_XML / "ag_ring4.xml").read_text().replace('coll="allgather"', 'coll="gather"')
    path = tmp_path / "gather.xml"
    path.write_text(text)
    with pytest.raises(InputError, match="coll"):
        import_xml(path)
    broken = (MSCCL_XML / "ar_ring4.xml").read_text().replace('inplace="1"', 'inplace="0"')
    path = tmp_path / "oop.xml"
    path.write_text(broken)          # valid only in-place, but now it claims out-of-place
    with pytest.raises(InputError, match="valid MSCCL algorithm"):
        import_xml(path, seeds=1)


def test_instances_import_as_a_finer_chunking(tmp_path):
    a = import_xml(MSCCL_XML / "ag_ring4.xml", seeds=1)
    path = tmp_path / "x3.xml"
    path.write_text(lower(a, LoweringOptions(instances=3)))
    b = import_xml(path, seeds=1)
    verify(b)
    assert b.collective.chunkup == 3 and len(b.transfers) == 3 * len(a.transfers)


def allpairs_allreduce3() -> str:
    """The all-pairs AllReduce on 3 ranks, one chunk each: rank b gets chunk b from both peers into
    scratch, adds them with a fused ``re`` chain (a nop carries its second dependency), then sends the
    sum to both peers."""
    def step(s, kind, sb, so, db, do, depid=-1, deps=-1, hasdep=0):
        return (f'      <step s="{s}" type="{kind}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" '
                f'cnt="{0 if kind == "nop" else 1}" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>')

    lines = ['<algo name="ap3" proto="LL" nchannels="1" nchunksperloop="3" ngpus="3" coll="allreduce" '
             'inplace="0" outofplace="1" minBytes="0" maxBytes="0">']
    for r in range(3):
        peers = [p for p in range(3) if p != r]
        lines.append(f'  <gpu id="{r}" i_chunks="3" o_chunks="3" s_chunks="2">')
        for t, p in enumerate(peers):
            lines += [f'    <tb id="{t}" send="{p}" recv="{p}" chan="0">',
                      step(0, "s", "i", p, "s", 0), step(1, "r", "i", 0, "s", t, hasdep=1),
                      step(2, "s", "o", r, "o", r, 2, 3), step(3, "r", "o", p, "o", p), "    </tb>"]
        lines += ['    <tb id="2" send="-1" recv="-1" chan="0">', step(0, "cpy", "i", r, "o", r),
                  step(1, "nop", "i", -1, "o", -1, 1, 1), step(2, "re", "s", 0, "o", r, 0, 1),
                  step(3, "re", "s", 1, "o", r, hasdep=1), "    </tb>", "  </gpu>"]
    return "\n".join(lines + ["</algo>"]) + "\n"


def test_scratch_copies_summed_by_local_re_import_as_reduces(tmp_path):
    path = tmp_path / "ap3.xml"
    path.write_text(allpairs_allreduce3())
    assert check_xml(path, seeds=4).valid
    a = import_xml(path, seeds=1)
    verify(a)
    reduces = [t for t in a.transfers if t.op == "reduce"]
    assert sorted((t.src, t.dst, t.chunks) for t in reduces) == sorted(
        (q, b, (b,)) for b in range(3) for q in range(3) if q != b)
    assert len(a.transfers) == 12


def test_values_the_ir_cannot_hold_are_refused(tmp_path):
    from support import allpairs3      # every rank sums every chunk from scratch copies
    path = tmp_path / "ap3all.xml"
    path.write_text(allpairs3(k=3))
    assert check_xml(path, seeds=2).valid      # a valid MSCCL program ...
    with pytest.raises(InputError, match="IR can express"):
        import_xml(path, seeds=1)              # ... but the IR keeps one value per rank and chunk
