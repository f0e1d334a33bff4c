"""The simulator as first fidelity: which candidates a real runner measures, and the ranking check.

The studies live in a real Optuna journal file; their trials carry the attributes tune's objective writes.
"""
from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import TrialState

from autotaccl.tuning.prefilter import measured, rank_agreement, simulated, worth_measuring

SIZES = [1024, 1 << 20, 1 << 26]


def _study(tmp_path, trials: list[tuple[str, list[float], str]]) -> optuna.Study:
    """A journal-backed study holding (cache key, simulated µs per size, fidelity) trials."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log")))
    study = optuna.create_study(storage=storage, study_name="s")
    for n, (key, sim, fidelity) in enumerate(trials):
        state = TrialState.COMPLETE if fidelity != "pruned" else TrialState.PRUNED
        study.add_trial(optuna.trial.create_trial(
            params={"x": n}, distributions={"x": IntDistribution(0, 99)}, state=state,
            value=1.0 if state == TrialState.COMPLETE else None,
            user_attrs={"cache_key": key, "sim_times": sim, "fidelity": "sim" if fidelity == "pruned" else fidelity}))
    return optuna.load_study(study_name="s", storage=storage)


def test_a_candidate_that_wins_one_size_but_loses_the_geomean_is_measured(tmp_path):
    study = _study(tmp_path, [("a", [10.0, 100.0, 1000.0], "mpi")])
    candidate = [9.0, 200.0, 2000.0]                     # faster at 1 KiB only
    geomean_gap = math.prod(c / b for c, b in zip(candidate, [10.0, 100.0, 1000.0])) ** (1 / 3) - 1
    assert geomean_gap > 0.10                            # the geomean rule (margin 0.1) would not measure it
    measure, why = worth_measuring(measured(study), candidate, "b", SIZES, 0.10)
    assert measure and "1K" in why and "-10.0%" in why, why


def test_a_candidate_behind_at_every_size_is_not_measured_and_the_reason_names_the_closest(tmp_path):
    study = _study(tmp_path, [("a", [10.0, 100.0, 1000.0], "mpi"), ("c", [20.0, 50.0, 3000.0], "mpi")])
    measure, why = worth_measuring(measured(study), [11.0, 80.0, 1050.0], "b", SIZES, 0.02)
    assert not measure and "1M" not in why and "64M, +5.0%" in why, why
    assert worth_measuring(measured(study), [11.0, 80.0, 1050.0], "b", SIZES, 0.10)[0]       # a wider margin


def test_an_algorithm_measured_already_is_not_measured_again(tmp_path):
    study = _study(tmp_path, [("a", [10.0, 100.0, 1000.0], "mpi")])
    measure, why = worth_measuring(measured(study), [1.0, 1.0, 1.0], "a", SIZES, 0.10)
    assert not measure and "trial 0" in why and "measured already" in why


def test_only_measured_trials_set_the_bar_unless_the_simulated_ones_are_asked_for(tmp_path):
    study = _study(tmp_path, [("a", [10.0, 100.0, 1000.0], "mpi"), ("p", [5.0, 50.0, 500.0], "pruned")])
    assert [t.user_attrs["cache_key"] for t in measured(study)] == ["a"]
    assert [t.user_attrs["cache_key"] for t in simulated(study)] == ["a", "p"]
    assert worth_measuring(measured(study), [8.0, 100.0, 1000.0], "b", SIZES, 0.0)[0]
    assert not worth_measuring(measured(study), [8.0, 100.0, 1000.0], "b", SIZES, 0.0, simulated(study))[0]
    assert worth_measuring([], [8.0, 100.0, 1000.0], "b", SIZES, 0.0) == (True, "the first candidate")


def test_rank_agreement_counts_pairs_per_size():
    sims = [[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]]
    assert rank_agreement([(s, s) for s in sims]) == 1.0
    assert rank_agreement([(s, [-x for x in s]) for s in sims]) == 0.0
    assert rank_agreement([(sims[0], [1.0, 5.0]), (sims[1], [1.0, 6.0])]) == pytest.approx(0.75)   # a tie: half
    assert rank_agreement([(sims[0], sims[0])]) is None
