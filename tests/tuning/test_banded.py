"""The banded sampler: each trial aims at one band of sizes, so the winners of different sizes are all found."""
from __future__ import annotations

import optuna
import pytest

from autotaccl.tuning.banded import BandedSampler, band_score, bands
from autotaccl.tuning.samplers import make_sampler


def test_bands_cut_sizes_in_order_and_scores_need_every_size():
    assert bands([1, 2, 3, 4, 5, 6, 7], 3) == [(1, 2), (3, 4, 5), (6, 7)]
    assert bands([1, 2], 3) == [(1,), (2,)]
    results = [{"size": 1, "relative": 4.0}, {"size": 2, "relative": 1.0}]
    assert band_score(results, (1, 2)) == pytest.approx(2.0)
    assert band_score(results, (1, 3)) is None


def _sweep(sampler, trials: int = 30) -> list[int]:
    """A two-size toy where size 1 wants x = 0 and size 2 wants x = 9; the geomean is flat in x."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=sampler)
    xs = []
    for _ in range(trials):
        trial = study.ask()
        x, y = trial.suggest_int("x", 0, 9), trial.suggest_int("y", 0, 9)
        small, large = 1 + x + 0.1 * y, 1 + (9 - x) + 0.1 * y
        trial.set_user_attr("results", [{"size": 1, "relative": small}, {"size": 2, "relative": large}])
        study.tell(trial, (small * large) ** 0.5)
        xs.append(x)
    return xs


def test_banded_sampler_finds_each_bands_own_winner():
    xs = _sweep(BandedSampler([1, 2], count=2, seed=0))[10:]
    assert xs.count(0) >= 4 and xs.count(9) >= 4, xs         # both ends, each band's optimum, again and again


def test_make_sampler_builds_banded_from_the_sizes():
    sampler = make_sampler("banded", 3, [1024, 2048, 4096])
    assert isinstance(sampler, BandedSampler) and len(sampler._bands) == 3


@pytest.mark.slow
def test_tune_runs_banded_in_worker_processes(tmp_path):
    from autotaccl.cli import main
    from support import fresh_store, study_trials, write_space

    space = write_space(tmp_path)
    out = tmp_path / "runs"
    fresh_store(out)
    assert main(["tune", "--space", str(space), "--trials", "7", "--out", str(out), "--sampler", "banded",
                 "--seed", "1", "--workers", "2", "--no-progress"]) == 0
    trials = study_trials(out)
    assert len(trials) == 7 and all(t.state.name == "COMPLETE" for t in trials)
    assert len({tuple(sorted(t.params.items())) for t in trials}) >= 5     # it explores past the start-up trials
