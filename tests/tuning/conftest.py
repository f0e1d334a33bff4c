"""The uninterrupted sweep that interrupted, restarted and edited ones are compared with."""
from __future__ import annotations

import pytest

from support import exported, run_tune, study_trials, sweep_args


@pytest.fixture(scope="session")
def clean_sweep(tmp_path_factory):
    """(run directory, export, trials) of the NDV2_SPACE sweep run once, uninterrupted."""
    tmp = tmp_path_factory.mktemp("clean")
    args, out = sweep_args(tmp)
    done = run_tune(*args)
    assert done.returncode == 0, done.stderr
    return out, exported(f"sqlite:///{out / 'mlflow.db'}", tmp / "export"), study_trials(out)
