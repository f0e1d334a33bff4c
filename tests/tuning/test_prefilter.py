"""The simulator as first fidelity: which candidates a real runner measures, and the ranking check.

The studies live in a real Optuna journal file; their trials carry the attributes tune's objective writes.
"""
from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import TrialState

from autotaccl.tuning.prefilter import (decide, measured, misorder, offsets, rank_agreement, shortlist, simulated,
                                        worth_measuring)

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


def test_the_shortlist_takes_first_what_most_raises_the_expected_quality_and_last_what_is_behind_everywhere(tmp_path):
    trials = simulated(_simulated(tmp_path, ROWS))
    order = [t.user_attrs["cache_key"] for t in shortlist(trials, SIZES, 10)]
    assert order[0] == "e"                              # alone, the best geomean: near the best at every size
    assert set(order[1:4]) == {"a", "b", "c"}           # then each size's best
    assert order[-1] == "f" and len(order) == 6         # behind d (its protocol's) at every size: last; each once
    assert [t.user_attrs["cache_key"] for t in shortlist(trials, SIZES, 2)] == order[:2]


def test_a_close_runner_up_comes_before_a_protocols_best_far_behind(tmp_path):
    rows = [("s1", "Simple", [10.0, 100.0, 1000.0]), ("l1", "LL", [30.0, 300.0, 3000.0]),
            ("s2", "Simple", [10.5, 101.0, 1010.0])]
    trials = simulated(_simulated(tmp_path, rows))
    assert [t.user_attrs["cache_key"] for t in shortlist(trials, SIZES, 3)] == ["s1", "s2", "l1"]


def test_the_shortlist_leaves_out_what_is_measured_and_counts_its_times(tmp_path):
    trials = simulated(_simulated(tmp_path, ROWS))
    fast_1k = _study(tmp_path, [("a", [30.0, 100.0, 900.0], "mpi", [5.0, 100.0, 900.0])], "m")   # a, measured
    order = [t.user_attrs["cache_key"] for t in shortlist(trials, SIZES, 10, measured(fast_1k))]
    assert "a" not in order and len(order) == 5
    assert order.index("b") > order.index("c")        # b wins only at 1K, where a measured faster already
    assert [t.user_attrs["cache_key"] for t in shortlist(trials, SIZES, 10)].index("b") < order.index("b")


def _measured_a(tmp_path, factor: float):
    """The study's measured trials: a (Simple), measured at ``factor`` x its simulated times."""
    sim = [30.0, 100.0, 900.0]
    done = measured(_study(tmp_path, [("a", sim, "mpi", [factor * x for x in sim])], f"a{factor}"))
    for t in done:
        t.user_attrs["protocol"] = "Simple"
    return done


def test_a_measurement_moves_what_the_shortlist_expects_of_its_protocol(tmp_path):
    trials = simulated(_simulated(tmp_path, ROWS))
    slow, faithful = _measured_a(tmp_path, 3.0), _measured_a(tmp_path, 1.0)
    mean, sd = offsets(slow, ["LL", "Simple"], 3, (0.1, 0.08))
    assert mean[0] == pytest.approx([0.0] * 3) and sd[0] == pytest.approx([0.1] * 3)          # LL: the prior
    assert mean[1] == pytest.approx([math.log(3) * 0.01 / (0.01 + 0.0064)] * 3)               # Simple: moved
    assert (sd[1] < 0.1).all()
    after_slow = [t.user_attrs["cache_key"] for t in shortlist(trials, SIZES, 10, slow)]
    after_faithful = [t.user_attrs["cache_key"] for t in shortlist(trials, SIZES, 10, faithful)]
    assert after_slow[0] == "e"                  # Simple is slow at 64M: LL128's e, next to it, first
    assert after_faithful.index("e") > 0         # Simple as simulated holds 64M: e is worth less
    assert after_slow[-2:] == after_faithful[-2:] == ["d", "f"]


def test_a_sweep_simulates_first_then_measures_the_shortlist_one_at_a_time_then_what_beats_its_protocol(tmp_path):
    study = _simulated(tmp_path, ROWS)
    attrs = {"cache_key": "g", "protocol": "Simple", "sim_times": [50.0, 500.0, 5000.0]}
    measure, why = decide(study, measured(study), 3, attrs, SIZES, 0.0, explore=6, budget=4)
    assert not measure and "exploring" in why
    assert not study.get_trials(states=(TrialState.WAITING,))
    assert not decide(study, measured(study), 6, attrs, SIZES, 0.0, explore=6, budget=4)[0]       # behind at every size

    def waiting():
        return [t.system_attrs["fixed_params"]["x"] for t in study.get_trials(states=(TrialState.WAITING,))]

    assert waiting() == [shortlist(simulated(study), SIZES, 1)[0].number] == [4]    # e, the first pick
    assert all(t.user_attrs["shortlist"] for t in study.get_trials(states=(TrialState.WAITING,)))
    chained = {**attrs, "shortlist": True}
    assert decide(study, measured(study), 7, chained, SIZES, 0.0, explore=6, budget=4)[0]
    assert waiting() == [4, 0]                          # the next pick, e and g pending: a, the best at 64M
    decide(study, measured(study), 8, attrs, SIZES, 0.0, explore=6, budget=4)
    assert waiting() == [4, 0]                          # one is waiting: not queued again
    decide(study, measured(study), 9, chained, SIZES, 0.0, explore=6, budget=2)
    assert waiting() == [4, 0]                          # no trial left for another
    ll128 = {"cache_key": "h", "protocol": "LL128", "sim_times": [13.0, 94.0, 5000.0]}   # LL128's best at 1M
    measure, why = decide(study, measured(study), 9, ll128, SIZES, 0.0, explore=6, budget=4)
    assert measure and "1M" in why, why
    assert not decide(study, measured(study), 9, {**ll128, "protocol": "LL"}, SIZES, 0.0, explore=6, budget=4)[0]   # behind LL's
