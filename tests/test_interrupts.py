"""Ctrl-C held over a stretch: real SIGINTs sent to this process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from autotaccl.interrupts import HeldInterrupt, held_interrupt, raise_lost_interrupts


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


LOST_CTRL_C = """
import os, signal, sys, time, weakref
from autotaccl.interrupts import raise_lost_interrupts
if sys.argv[1] == "hook":
    raise_lost_interrupts()

def callback(ref):                 # a real SIGINT, handled while Python runs a weakref callback
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(100000):
        pass

class Thing:
    pass

thing = Thing()
ref = weakref.ref(thing, callback)
try:
    del thing
    start = time.monotonic()
    while time.monotonic() - start < 2:
        pass
    print("lost")
except KeyboardInterrupt:
    print("raised")
"""


@pytest.mark.parametrize("hook", ["hook", "none"])
def test_a_ctrl_c_inside_a_weakref_callback_is_raised_in_the_main_thread_not_printed_and_lost(hook):
    run = subprocess.run([sys.executable, "-c", LOST_CTRL_C, hook], capture_output=True, text=True, timeout=60)
    if hook == "hook":
        assert (run.stdout.strip(), run.stderr) == ("raised", "")
    else:                          # what Python does without it: one "Exception ignored" and the Ctrl-C gone
        assert run.stdout.strip() == "lost" and "Exception ignored" in run.stderr


def test_installing_the_hook_twice_wraps_nothing_twice(monkeypatch):
    """Another exception Python cannot raise goes once to the hook that was there before (installed
    twice over itself, the hook would call itself for ever)."""
    from types import SimpleNamespace

    from autotaccl import interrupts

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    monkeypatch.setattr(interrupts, "_previous_hook", interrupts._previous_hook)    # restored after
    raise_lost_interrupts()
    raise_lost_interrupts()
    sys.unraisablehook(SimpleNamespace(exc_value=ValueError("in a __del__")))
    assert sys.unraisablehook is not seen.append and len(seen) == 1
