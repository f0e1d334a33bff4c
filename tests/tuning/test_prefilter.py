"""The simulator as first fidelity: which candidates a real runner measures, and the ranking check.

The studies live in a real Optuna journal file; their trials carry the attributes tune's objective writes.
"""
from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import TrialState

from autotaccl.tuning.prefilter import decide, measured, misorder, rank_agreement, shortlist, simulated, worth_measuring

SIZES = [1024, 1 << 20, 1 << 26]


def _study(tmp_path, trials: list[tuple], name: str = "s") -> optuna.Study:
    """A journal-backed study holding (cache key, simulated µs per size, fidelity[, measured µs per size]) trials."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log")))
    study = optuna.create_study(storage=storage, study_name=name)
    for n, (key, sim, fidelity, *times) in enumerate(trials):
        state = TrialState.COMPLETE if fidelity != "pruned" else TrialState.PRUNED
        results = [{"size": size, "time_us": t} for size, t in zip(SIZES, times[0])] if times else []
        study.add_trial(optuna.trial.create_trial(
            params={"x": n}, distributions={"x": IntDistribution(0, 99)}, state=state,
            value=1.0 if state == TrialState.COMPLETE else None,
            user_attrs={"cache_key": key, "sim_times": sim, "fidelity": "sim" if fidelity == "pruned" else fidelity,
                        "results": results}))
    return optuna.load_study(study_name=name, storage=storage)


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


def test_the_margin_widens_where_the_simulator_misorders_near_candidates(tmp_path):
    sim = [[10.0, 100.0, 1000.0], [10.2, 102.0, 1020.0], [10.4, 104.0, 1040.0]]     # near one another
    faithful = _study(tmp_path, [(k, s, "mpi", [2 * x for x in s]) for k, s in zip("abc", sim)], "faithful")
    erring = _study(tmp_path, [(k, s, "mpi", [x * f for x in s]) for k, s, f in zip("abc", sim, (1.0, 0.8, 1.25))],
                    "erring")
    assert misorder(measured(faithful), 0) == pytest.approx(0.0)
    assert misorder(measured(erring), 0) == pytest.approx(0.25)        # median of 0.2, 0.25, 0.5625 (the three pairs)
    assert misorder(measured(erring)[:2], 0) == 0.0                    # one pair is not enough to judge
    behind = [11.0, 110.0, 1100.0]                                     # 10% behind at every size
    assert not worth_measuring(measured(faithful), behind, "d", SIZES, 0.0)[0]
    measure, why = worth_measuring(measured(erring), behind, "d", SIZES, 0.0)
    assert measure and "margin 25.0%" in why, why


def _simulated(tmp_path, rows: list[tuple[str, str, list[float]]]) -> optuna.Study:
    """A journal-backed study of pruned (simulated only) trials: (cache key, protocol, simulated µs per size)."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "p.log")))
    study = optuna.create_study(storage=storage, study_name="p")
    for n, (key, protocol, sim) in enumerate(rows):
        study.add_trial(optuna.trial.create_trial(
            params={"x": n}, distributions={"x": IntDistribution(0, 99)}, state=TrialState.PRUNED,
            user_attrs={"cache_key": key, "sim_times": sim, "protocol": protocol, "fidelity": "sim"}))
    return study


ROWS = [("a", "Simple", [30.0, 100.0, 900.0]),     # the best at 64M
        ("b", "LL", [10.0, 300.0, 5000.0]),        # the best at 1K
        ("c", "LL", [11.0, 90.0, 3000.0]),         # the best at 1M
        ("d", "Simple", [29.0, 110.0, 950.0]),     # Simple's best at 1K, second at 64M
        ("e", "LL128", [12.0, 95.0, 1200.0]),      # LL128's best everywhere, nowhere the best
        ("f", "Simple", [40.0, 400.0, 990.0])]


def test_the_shortlist_takes_each_sizes_best_then_each_protocols_then_the_runners_up(tmp_path):
    trials = simulated(_simulated(tmp_path, ROWS))
    order = [t.user_attrs["cache_key"] for t in shortlist(trials, SIZES, 10)]
    assert order[:3] == ["b", "c", "a"]                 # each size's best of any protocol
    assert set(order[3:5]) == {"d", "e"}                # then each protocol's best per size
    assert order[-1] == "f" and len(order) == 6         # then the runners-up, each algorithm once
    assert [t.user_attrs["cache_key"] for t in shortlist(trials, SIZES, 2)] == ["b", "c"]


def test_a_sweep_simulates_first_then_measures_the_shortlist_then_what_beats_its_protocol(tmp_path):
    study = _simulated(tmp_path, ROWS)
    attrs = {"cache_key": "g", "protocol": "Simple", "sim_times": [50.0, 500.0, 5000.0]}
    measure, why = decide(study, measured(study), 3, attrs, SIZES, 0.0, explore=6, budget=4)
    assert not measure and "exploring" in why
    assert not decide(study, measured(study), 6, attrs, SIZES, 0.0, explore=6, budget=4)[0]       # behind at every size
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert [t.system_attrs["fixed_params"]["x"] for t in waiting] == [1, 2, 0, 4]       # b, c, a, then e (LL128's)
    assert all(t.user_attrs["shortlist"] for t in waiting)
    assert decide(study, measured(study), 7, {**attrs, "shortlist": True}, SIZES, 0.0, explore=6, budget=4)[0]
    decide(study, measured(study), 8, attrs, SIZES, 0.0, explore=6, budget=4)
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 4               # not queued again
    ll128 = {"cache_key": "h", "protocol": "LL128", "sim_times": [13.0, 94.0, 5000.0]}   # LL128's best at 1M
    measure, why = decide(study, measured(study), 9, ll128, SIZES, 0.0, explore=6, budget=4)
    assert measure and "1M" in why, why
    assert not decide(study, measured(study), 9, {**ll128, "protocol": "LL"}, SIZES, 0.0, explore=6, budget=4)[0]   # behind LL's
