"""Fault injection for the recovery tests: :func:`point` names a place a test may interrupt a real process.

Off unless ``AUTOTACCL_TEST_FAULT`` is set (only tests set it): ``NAME:SIGNAL[:N]`` sends this process
``SIGNAL`` (SIGINT, SIGKILL, SIGTERM, SIGSTOP) the ``N``-th time (default 1) it passes point ``NAME``;
several specs are separated by commas. The points are the ``faults.point`` calls (grep for them); the
list with what each means is in ``docs/internals.md``."""
from __future__ import annotations

import os
import signal

ENV = "AUTOTACCL_TEST_FAULT"
_hits: dict[str, int] = {}


def point(name: str) -> None:
    """Interrupt this process here if the test's ``AUTOTACCL_TEST_FAULT`` names this point (else nothing)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    _hits[name] = _hits.get(name, 0) + 1
    for item in spec.split(","):
        where, _, rest = item.strip().partition(":")
        sig, _, nth = rest.partition(":")
        if where == name and _hits[name] == int(nth or 1):
            os.kill(os.getpid(), getattr(signal, sig))
