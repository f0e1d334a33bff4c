"""Fault injection for the recovery tests: :func:`point` names a place a test may interrupt a real process.

Off unless the environment variable ``AUTOTACCL_TEST_FAULT`` is set, which only a test does (no flag,
no config file, no default sets it): ``NAME:SIGNAL[:N]`` sends this process ``SIGNAL`` (``SIGINT``,
``SIGKILL``, ``SIGTERM`` or ``SIGSTOP``) the ``N``-th time (default 1) it passes the point ``NAME``;
several specs are separated by commas. ``SIGINT`` is Ctrl-C at that point, ``SIGKILL`` a worker killed
there, ``SIGSTOP`` holds the process there until the test continues it (to change the world meanwhile:
stop a server, fill a disk). The points (grep ``faults.point``):

    setup.study            the study exists, its seeds are not enqueued yet
    setup.seed             one seed enqueued (once per seed)
    setup.parent           the sweep's MLflow parent run exists, the study does not know it yet
    trial.created          Optuna created a trial, nothing of it is stored yet
    trial.sampling         a parameter suggested (once per parameter)
    trial.synthesis        the trial's sketch is about to be synthesized
    mlflow.KIND.created    a run of that kind (baseline, trial) is created, its values not yet logged
    mlflow.KIND.logged     that run is complete (for a trial: Optuna does not know the result yet)
    export.written         the export is written to its temporary directory, not yet moved into place
"""
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
