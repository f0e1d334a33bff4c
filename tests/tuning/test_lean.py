"""The lean sampler: knobs the trial's engine ignores are never sampled, the rest are."""
from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotaccl.tuning.banded import BandedSampler
from autotaccl.tuning.lean import LeanSampler
from autotaccl.tuning.lean import ENGINE_IGNORES
from autotaccl.tuning.samplers import make_sampler
from autotaccl.tuning.space import load_space, sample

SPACES = "search_spaces"


def _sweep(sampler, space, trials: int) -> list[dict]:
    """``trials`` trials on the shipped ``space``, scored by a made-up function of the sampled knobs
    (the sampler's behaviour, not the synthesis, is under test: no algorithm is needed)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=sampler)
    drawn = []
    for _ in range(trials):
        trial = study.ask()
        params = sample(trial, space)
        relative = 1.0 + params["chunkup"] + 0.5 * params["instances"]
        trial.set_user_attr("results", [{"size": s, "relative": relative} for s in space.sizes])
        study.tell(trial, relative)
        drawn.append(params)
    return drawn


@pytest.mark.parametrize("inner", ["random", "tpe-mv"])
def test_greedy_trials_never_sample_an_ignored_knob_but_milp_trials_do(inner):
    space = load_space(f"{SPACES}/dgx2x2.yaml")          # engine sampled: greedy and milp trials both occur
    base = optuna.samplers.RandomSampler(seed=4) if inner == "random" else make_sampler("tpe-mv", 4)
    drawn = _sweep(LeanSampler(base, space.fixed), space, 80)
    greedy = [p for p in drawn if p["engine"] == "greedy"]
    milp = [p for p in drawn if p["engine"] == "milp"]
    assert len(greedy) >= 10 and len(milp) >= 10
    assert {p["symmetry"] for p in greedy} == {"2/16;16/32"}              # the first choice, always
    assert {p["enforce_ordering"] for p in greedy if "enforce_ordering" in p} == {True}
    assert len({p["symmetry"] for p in milp}) >= 2                         # the MILP reads it: still sampled
    assert len({(p["chunkup"], p["instances"], p["protocol"]) for p in greedy}) >= 8   # the rest still varies


def test_an_engine_fixed_by_the_space_is_known_to_the_sampler():
    from autotaccl.documents import read_document
    from autotaccl.tuning.space.schema import space_from_dict

    data = read_document(Path(SPACES) / "dgx-a100x2.yaml", "yaml")             # its greedy part, engine fixed
    for knob in ("engine", "ordering", "contiguity"):
        data["parameters"].pop(knob)
    data["fixed"]["engine"] = "greedy"
    data["seeds"] = []
    space = space_from_dict(data, "greedy.yaml", default_name="greedy")
    assert space.fixed["engine"] == "greedy"
    drawn = _sweep(make_sampler("lean", 2, space.sizes, space.fixed), space, 40)
    assert {p["symmetry"] for p in drawn} == {"1/8;8/16"}
    assert {p["enforce_ordering"] for p in drawn if "enforce_ordering" in p} == {False}
    unaware = _sweep(make_sampler("lean", 2, space.sizes), space, 40)      # not told the engine: samples all
    assert len({p["symmetry"] for p in unaware}) >= 2


def test_lean_is_banded_underneath_and_reseeds_through_it():
    from autotaccl.cluster.internals import reseed

    sampler = make_sampler("lean", 1, [1024, 4096, 16384], {"engine": "greedy"})
    assert isinstance(sampler, LeanSampler) and isinstance(sampler.inner, BandedSampler)
    assert len(sampler.inner._bands) == 3                     # one size per band: each trial aims at one size
    assert set(ENGINE_IGNORES["greedy"]) == {"symmetry", "enforce_ordering"}
    reseed(sampler, 7)
    a = sampler._rng.rng.random()
    reseed(sampler, 7)
    assert sampler._rng.rng.random() == a


def test_lean_is_selectable_and_random_is_the_default():
    from autotaccl.cli import build_parser
    from autotaccl.tuning.sweep import TuneRequest

    # lean lost on 2 of 3 tables in simulated trials; with a real runner random explores widest for the shortlist
    assert build_parser().parse_args(["tune", "--space", "demo"]).sampler == "random"
    assert TuneRequest(space="demo").sampler == "random"
    assert build_parser().parse_args(["tune", "--space", "demo", "--sampler", "lean"]).sampler == "lean"
