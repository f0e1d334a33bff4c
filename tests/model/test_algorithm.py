"""The algorithm IR: JSON round trip, field-naming validation, and verify() catching each kind of fault."""
from __future__ import annotations

import copy
import json

import pytest

from autotaccl.errors import InputError
from autotaccl.model.algorithm import (Algorithm, Transfer, VerificationError, from_json, load_algorithm,
                                       renumber_steps, save_algorithm, to_json, verify)
from autotaccl.model.collectives import Collective


def ring_allgather(n: int = 4) -> Algorithm:
    """Rank r forwards chunk (r - s) mod n to r+1 at step s."""
    transfers = tuple(Transfer(((r - s) % n,), r, (r + 1) % n, s) for s in range(n - 1) for r in range(n))
    return Algorithm("ring-ag", Collective("allgather", n), transfers, "ring4", {"origin": "test"})


def ring_allreduce(n: int = 4) -> list[Transfer]:
    rs = [Transfer(((r - s - 1) % n,), r, (r + 1) % n, s, "reduce") for s in range(n - 1) for r in range(n)]
    ag = [Transfer(((r - s) % n,), r, (r + 1) % n, n - 1 + s) for s in range(n - 1) for r in range(n)]
    return rs + ag


# --------------------------------------------------------------------------- JSON


def test_json_round_trip(tmp_path):
    algo = Algorithm("a2a", Collective("alltoall", 2, 2), (
        Transfer((2, 3), 0, 1, 0, link=1, start_us=1.5),
        Transfer((4, 5), 1, 0, 0)), "x", {"sketch": {"k": [1, 2]}})
    assert from_json(json.loads(json.dumps(to_json(algo)))) == algo
    path = tmp_path / "a.json"
    save_algorithm(algo, path)
    assert load_algorithm(path) == algo
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"], "the temporary file is renamed, not left behind"
    data = json.loads(path.read_text())
    assert data["format"] == "autotaccl-algorithm" and data["version"] == 1
    assert data["transfers"][0] == {"chunks": [2, 3], "src": 0, "dst": 1, "step": 0, "op": "copy", "link": 1,
                                    "start_us": 1.5}
    assert "link" not in data["transfers"][1] and "start_us" not in data["transfers"][1]


def test_round_trip_keeps_the_collectives_root():
    algo = Algorithm("b", Collective("broadcast", 3, 1, root=2), (Transfer((0,), 2, 0, 0), Transfer((0,), 2, 1, 0)))
    back = from_json(to_json(algo))
    assert back.collective.root == 2
    verify(back)


def _valid() -> dict:
    return to_json(ring_allgather())


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(format="msccl"), "format"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.update(collective="allgather"), "collective"),
    (lambda d: d["collective"].update(name="gather"), "collective.name"),
    (lambda d: d["collective"].update(ranks=1), "collective.ranks"),
    (lambda d: d["collective"].update(ranks="4"), "collective.ranks"),
    (lambda d: d["collective"].update(chunkup=0), "collective.chunkup"),
    (lambda d: d["collective"].update(root=4), "collective.root"),
    (lambda d: d.update(transfers={}), "transfers"),
    (lambda d: d["transfers"].__setitem__(2, [0, 1]), "transfers[2]"),
    (lambda d: d["transfers"][1].update(chunks=[]), "transfers[1].chunks"),
    (lambda d: d["transfers"][1].update(chunks=[4]), "transfers[1].chunks"),
    (lambda d: d["transfers"][1].update(chunks=[1, 1]), "transfers[1].chunks"),
    (lambda d: d["transfers"][1].update(chunks=[True]), "transfers[1].chunks"),
    (lambda d: d["transfers"][3].update(src=4), "transfers[3].src"),
    (lambda d: d["transfers"][3].update(dst=-1), "transfers[3].dst"),
    (lambda d: d["transfers"][3].update(dst=d["transfers"][3]["src"]), "transfers[3].dst"),
    (lambda d: d["transfers"][5].update(step=0), "transfers[5].step"),
    (lambda d: d["transfers"][5].update(step=1.5), "transfers[5].step"),
    (lambda d: d["transfers"][0].update(op="sum"), "transfers[0].op"),
    (lambda d: d["transfers"][0].update(link=-1), "transfers[0].link"),
    (lambda d: d["transfers"][0].update(start_us=-2), "transfers[0].start_us"),
    (lambda d: d["transfers"][0].update(lane=1), "transfers[0].lane"),
    (lambda d: d["transfers"][0].update(channel=-1), "transfers[0].channel"),
    (lambda d: d.update(name=7), "name"),
    (lambda d: d.update(metadata=[]), "metadata"),
])
def test_from_json_names_the_bad_field(mutate, field):
    data = _valid()
    mutate(data)
    with pytest.raises(InputError) as err:
        from_json(data, "algo.json")
    assert err.value.source == "algo.json" and err.value.field == field


def test_from_json_rejects_a_non_object():
    with pytest.raises(InputError) as err:
        from_json([_valid()], "algo.json")
    assert err.value.field == "document"


def test_load_algorithm_bad_files(tmp_path):
    with pytest.raises(InputError) as err:
        load_algorithm(tmp_path / "missing.json")
    assert err.value.field == "file"
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "autotaccl-algorithm",\n "version": ')
    with pytest.raises(InputError) as err:
        load_algorithm(broken)
    assert err.value.source == str(broken) and err.value.field.startswith("line ")


# --------------------------------------------------------------------------- verify


def test_valid_algorithms_verify():
    verify(ring_allgather())
    verify(Algorithm("ar", Collective("allreduce", 4), tuple(ring_allreduce())))


def test_verify_on_a_graph(topo):
    graph = topo("ring", 1)   # 8 GPUs in a ring
    algo = Algorithm("ag8", Collective("allgather", 8),
                     tuple(Transfer(((r - s) % 8,), r, (r + 1) % 8, s) for s in range(7) for r in range(8)))
    verify(algo, graph)
    with pytest.raises(VerificationError, match="4 ranks but the topology has 8"):
        verify(ring_allgather(4), graph)


def _fault(algo: Algorithm, index: int, match: str, graph=None) -> None:
    with pytest.raises(VerificationError, match=match) as err:
        verify(algo, graph)
    assert err.value.index == index
    if index is not None:
        assert str(err.value).startswith(f"transfer {index}: ")


def test_chunk_sent_before_it_arrived():
    t = list(ring_allgather().transfers)
    t[5] = Transfer((2,), 1, 2, 1)   # rank 1 gets chunk 0 at step 0, not chunk 2 (that reaches it at step 2)
    _fault(Algorithm("x", Collective("allgather", 4), tuple(t)), 5, "chunk 2 sent from rank 1 before it arrived")


def test_link_that_does_not_exist(topo):
    graph = topo("ring", 1)
    transfers = [Transfer(((r - s) % 8,), r, (r + 1) % 8, s) for s in range(7) for r in range(8)]
    transfers[9] = Transfer(transfers[9].chunks, 1, 5, 1)   # 1 -> 5 has no NVLink in a ring
    _fault(Algorithm("x", Collective("allgather", 8), tuple(transfers)), 9, "no link from rank 1 to rank 5", graph)
    transfers[9] = Transfer(transfers[9].chunks, 1, 2, 1, link=1)   # the ring has one link per pair
    _fault(Algorithm("x", Collective("allgather", 8), tuple(transfers)), 9, "link index 1", graph)


def test_missing_contribution():
    t = ring_allreduce()
    del t[0]   # rank 0 never adds its part of slot 3
    _fault(Algorithm("x", Collective("allreduce", 4), tuple(t)), None, r"missing contributions from rank\(s\) \[0\]")


def test_double_counted_contribution():
    t = ring_allreduce()
    t.insert(4, Transfer((3,), 0, 1, 1, "reduce"))   # slot 3 of rank 0 already went to rank 1 at step 0
    _fault(Algorithm("x", Collective("allreduce", 4), tuple(t)), 4, r"counts rank\(s\) \[0\] twice")


def test_a_rank_that_never_gets_a_chunk():
    t = [x for x in ring_allgather().transfers if not (x.dst == 2 and x.chunks == (3,))]
    with pytest.raises(VerificationError, match="rank 2 never gets chunk 3") as err:
        verify(Algorithm("x", Collective("allgather", 4), tuple(t)))
    assert err.value.index is None


def test_reduce_in_a_non_reducing_collective():
    t = list(ring_allgather().transfers)
    t[6] = Transfer(t[6].chunks, t[6].src, t[6].dst, t[6].step, "reduce")
    _fault(Algorithm("x", Collective("allgather", 4), tuple(t)), 6, "combines nothing")


def test_reduce_into_a_rank_without_a_value():
    algo = Algorithm("x", Collective("reducescatter", 2), (Transfer((1,), 0, 1, 0, "reduce"), Transfer((0,), 1, 0, 0, "reduce")))
    verify(algo)
    bad = Algorithm("x", Collective("allreduce", 2), (Transfer((0,), 0, 1, 0), Transfer((0,), 1, 0, 1, "reduce")))
    _fault(bad, 1, r"counts rank\(s\) \[0\] twice")


def test_alltoall_postcondition_is_per_destination():
    coll = Collective("alltoall", 2)
    ok = Algorithm("x", coll, (Transfer((1,), 0, 1, 0), Transfer((2,), 1, 0, 0)))
    verify(ok)
    _fault(Algorithm("x", coll, ok.transfers[:1]), None, "rank 0 never gets chunk 2")


def test_renumber_steps_sorts_stably_and_closes_gaps():
    out = renumber_steps([Transfer((0,), 0, 1, 7), Transfer((1,), 1, 0, 3), Transfer((2,), 2, 0, 7)])
    assert [(t.chunks, t.step) for t in out] == [((1,), 0), ((0,), 1), ((2,), 1)]


def test_verify_does_not_change_the_algorithm():
    algo = ring_allgather()
    before = copy.deepcopy(to_json(algo))
    verify(algo)
    assert to_json(algo) == before
