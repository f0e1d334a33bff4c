"""Ctrl-C held over a stretch: real SIGINTs sent to this process."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from autotaccl.interrupts import HeldInterrupt, held_interrupt


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_a_ctrl_c_in_the_stretch_is_raised_at_its_end_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGINT)
    ran = []
    with pytest.raises(KeyboardInterrupt):
        with held_interrupt():
            _ctrl_c()
            ran.append("after the Ctrl-C")
    assert ran == ["after the Ctrl-C"]
    assert signal.getsignal(signal.SIGINT) is before


def test_a_stretch_without_ctrl_c_ends_quietly():
    with held_interrupt():
        pass
    with pytest.raises(KeyboardInterrupt):       # and Ctrl-C is Ctrl-C again afterwards
        _ctrl_c()


def test_a_hold_inside_another_raises_at_the_outer_end():
    ran = []
    with pytest.raises(KeyboardInterrupt):
        with held_interrupt():
            with held_interrupt():
                _ctrl_c()
            ran.append("after the inner hold")
    assert ran == ["after the inner hold"]


def test_outside_the_main_thread_a_hold_changes_nothing():
    before = signal.getsignal(signal.SIGINT)
    seen = []

    def body() -> None:
        hold = HeldInterrupt()
        hold.begin()
        seen.append(signal.getsignal(signal.SIGINT))
        hold.end()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]


def test_where_ctrl_c_is_ignored_a_hold_leaves_it_ignored():
    """A sweep started as a shell's background job ignores SIGINT: a hold must not turn one into a stop."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with held_interrupt():
            _ctrl_c()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
