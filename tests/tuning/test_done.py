"""When a sweep is done: per-size best against the attainable bound, ``--until`` and ``--patience``."""
from __future__ import annotations

import pytest

from autotaccl.cli import main
from autotaccl.tuning.done import best_so_far, stop_reason
from autotaccl.tuning.sweep import TuneRequest
from autotaccl.errors import ParameterError
from support import fresh_store, runs, study_trials, write_space


def result(size: int, time_us: float, bound_us: float) -> dict:
    return {"size": size, "time_us": time_us, "bound_pct": 100 * bound_us / time_us}


def test_best_so_far_is_per_size_and_failed_trials_keep_it():
    runs_ = [(0, [result(1, 10, 5), result(2, 40, 20)]), (1, None), (2, [result(1, 20, 5), result(2, 25, 20)])]
    steps = best_so_far(runs_)
    assert [[(b.time_us, b.trial) for b in s] for s in steps] == [[(10, 0), (40, 0)], [(10, 0), (40, 0)],
                                                                  [(10, 0), (25, 2)]]
    assert steps[-1][1].share == pytest.approx(0.8)


def test_until_needs_every_size_within_the_share_of_its_bound():
    near = [(0, [result(1, 10, 9.9), result(2, 40, 30)])]
    assert stop_reason(near, [1, 2], 0.98, None) is None                  # size 2 is at 75%
    near.append((1, [result(1, 11, 9.9), result(2, 30.3, 30)]))
    reason = stop_reason(near, [1, 2], 0.98, None)
    assert reason and "98%" in reason and "99.0%" in reason
    assert stop_reason(near, [1, 2, 3], 0.98, None) is None              # a size without any result yet


def test_patience_counts_trials_since_any_size_improved():
    runs_ = [(0, [result(1, 10, 1), result(2, 40, 1)]), (1, [result(1, 12, 1), result(2, 39, 1)]),
             (2, None), (3, [result(1, 11, 1), result(2, 39, 1)])]
    assert stop_reason(runs_, [1, 2], None, 3) is None                   # trial 1 improved size 2
    runs_.append((4, [result(1, 10.5, 1), result(2, 45, 1)]))
    assert "for 3 trials" in stop_reason(runs_, [1, 2], None, 3)
    assert stop_reason(runs_, [1, 2], None, None) is None


def test_until_and_patience_are_checked():
    with pytest.raises(ParameterError, match="until"):
        TuneRequest(space="demo", until=1.5)
    with pytest.raises(ParameterError, match="patience"):
        TuneRequest(space="demo", patience=0)


@pytest.mark.slow
def test_tune_stops_early_with_patience_and_says_so(tmp_path, capsys):
    space = write_space(tmp_path)
    out = tmp_path / "runs"
    fresh_store(out)
    assert main(["tune", "--space", str(space), "--trials", "9", "--out", str(out), "--sampler", "random",
                 "--seed", "3", "--patience", "2", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    trials = study_trials(out)
    assert len(trials) < 9, "patience 2 on a 9-configuration space stops before every configuration ran"
    assert "stopped early: no trial improved any size's best for 2 trials" in printed
    assert "farthest from its attainable bound" in printed
    parent = runs(out).query("`tags.autotaccl.kind` == 'sweep'").iloc[0]
    assert parent["tags.stopped_early"].startswith("no trial improved")
    assert all(f"metrics.best_bound_pct.{s}" in parent for s in (1024, 65536, 4194304))
