"""The winner rule's tie-break for a trial redone after an interruption (the rest: tests/tuning/test_export.py)."""
from __future__ import annotations

from autotaccl.tuning.winners import Entry, pick


def test_a_redone_trial_keeps_the_place_and_the_fresh_synthesis_of_the_trial_it_redoes():
    base = [Entry("ring", 20.0)]
    redo = Entry(5, 10.0, cache_hit=True, rank=0)       # trial 0 interrupted, redone as trial 5 from the cache
    other = Entry(3, 10.0)                              # the same time, synthesized afresh
    assert pick([other, redo], base)[0] is redo         # as trial 0 would have won in an uninterrupted sweep
    assert pick([other, Entry(5, 10.0, cache_hit=True)], base)[0] is other    # a plain cache hit still loses
    assert pick([Entry(7, 10.0, rank=7), Entry(2, 10.0)], base)[0].trial == 2  # a trial of its own place: by number
