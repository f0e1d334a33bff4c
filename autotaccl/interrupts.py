"""Ctrl-C held over a stretch that must not be cut short, and raised once the stretch is over; and
Ctrl-C that lands where Python cannot raise it, raised again (:func:`raise_lost_interrupts`).

Two stretches use it: a trial between its creation by Optuna and its parameters being stored
(``cluster.loop``), and each call into a store this process opens itself (``tracking.MlflowClient``).
A KeyboardInterrupt inside an SQLite call can leave the database locked: a read cut after its statement
ran keeps the shared lock, so no writer can commit; a write cut short is lost and at times keeps the
write lock. Every other writer then waits out its busy time-out and fails ("database is locked").
"""
from __future__ import annotations

import _thread
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

LOST_INTERRUPT_DELAY = 0.05   # seconds: enough for the main thread to leave the callback


class _Catch:
    """The SIGINT handler while held: it notes the signal."""

    def __init__(self) -> None:
        self.caught = False

    def __call__(self, sig: int, frame: Any) -> None:
        self.caught = True


class HeldInterrupt:
    """Ctrl-C between :meth:`begin` and :meth:`end` is raised at :meth:`end`. Only Python's own Ctrl-C (a
    KeyboardInterrupt) is held, so a hold changes nothing outside the main thread (no signal arrives
    there), inside another hold (which raises at its own end), or where SIGINT is ignored or handled."""

    def __init__(self) -> None:
        self._catch: _Catch | None = None       # None: not holding

    def begin(self) -> None:
        if (threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
            return
        self._catch = _Catch()
        signal.signal(signal.SIGINT, self._catch)

    def end(self) -> None:
        catch, self._catch = self._catch, None
        if catch is None:
            return
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if catch.caught:
            raise KeyboardInterrupt


@contextmanager
def held_interrupt() -> Iterator[None]:
    """The ``with`` block as one :class:`HeldInterrupt` stretch."""
    hold = HeldInterrupt()
    hold.begin()
    try:
        yield
    finally:
        hold.end()


def raise_lost_interrupts() -> None:
    """Make a Ctrl-C that lands in code Python cannot raise from (a weakref callback, a ``__del__``, a
    garbage collection) raise in the main thread a moment later, instead of being printed as "Exception
    ignored in ..." and lost. It is raised again from a helper thread, once the main thread is back in
    ordinary code (raised at once, it would land in the same place). Other such exceptions go to the hook
    that was there before. Installing it again changes nothing."""
    global _previous_hook
    if sys.unraisablehook is not _reraise_interrupt:
        _previous_hook, sys.unraisablehook = sys.unraisablehook, _reraise_interrupt


_previous_hook: Callable[[Any], None] = sys.__unraisablehook__


def _reraise_interrupt(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        timer = threading.Timer(LOST_INTERRUPT_DELAY, _thread.interrupt_main)
        timer.daemon = True
        timer.start()
    else:
        _previous_hook(unraisable)
