"""A run directory's stores checked before a sweep starts: a damaged or missing local MLflow store and
damaged sweep records are one line naming the file (exit 2), never a traceback mid-sweep.

With ``repair`` (``autotaccl tune --repair``) a damaged file is set aside (``<name>.damaged``, kept for
inspection) and the sweep's start rebuilds it from the Optuna study, which holds every trial's parameters,
state, value and results: the MLflow runs by ``records.reconcile``, the sweep record and reference by
``sweep.prepare``. A study the journal lost cannot be rebuilt from; that stays ``study.open_study``'s to
refuse.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from .. import tracking
from ..errors import InputError
from .objective import SweepConfig

log = logging.getLogger(__name__)

REPAIR = "run the same `autotaccl tune` with --repair to rebuild it from the Optuna study"


def check_run_dir(out: Path, uri: str, studies: Sequence[str], repair: bool) -> None:
    """Refuse (or with ``repair``, set aside for rebuilding) the damaged sweep records of ``studies`` in
    ``out/sweeps`` and a damaged or missing local store ``uri``. Call under the prepare lock."""
    records = []
    for name in studies:
        for path, load in ((out / "sweeps" / f"{name}.json", SweepConfig.load),
                           (out / "sweeps" / f"{name}.reference.json", _reference)):
            if not path.is_file():
                continue
            try:
                loaded = load(path)
            except InputError as err:
                if not repair:
                    raise InputError(str(path), err.field, f"{err.expected.split(';')[0]}; {REPAIR}") from None
                log.warning("%s is damaged (%s); set aside as %s, rebuilt from the Optuna study", path,
                            err.expected.split(";")[0], tracking.set_aside(path).name)
                continue
            if isinstance(loaded, SweepConfig):
                records.append(loaded)
    db = tracking.sqlite_path(uri)
    if db is None:
        return                                  # a tracking server: its operator's to keep whole
    if db.is_file() and db.stat().st_size:      # an emptied file (`> mlflow.db`, a full disk) is a lost store
        problem = tracking.store_damage(db)
        if problem is None:
            return
        if not repair:
            raise InputError(str(db), "MLflow store", f"a whole SQLite database (SQLite says: {problem}); {REPAIR} "
                             f"(the damaged file is kept as {db.name}.damaged)")
        log.warning("%s is damaged (%s); set aside as %s, its runs rebuilt from the Optuna study", db, problem,
                    tracking.set_aside(db).name)
        return
    logged = [r for r in records if tracking.sqlite_path(r.tracking_uri) == db.resolve()]
    lost = "it is empty" if db.is_file() else "it is gone"
    if logged and not repair:
        raise InputError(str(db), "MLflow store", f"the store the sweep {logged[0].study_name} logged into "
                         f"(sweeps/{logged[0].study_name}.json); {lost}: {REPAIR}")
    if logged:
        log.warning("%s: %s; its runs are rebuilt from the Optuna study", db, lost)


def _reference(path: Path) -> None:
    from .reference import load_reference

    try:
        load_reference(path)
    except (ValueError, KeyError, TypeError, AttributeError) as err:     # JSONDecodeError is a ValueError
        raise InputError(str(path), "sweep reference", f"the JSON file `autotaccl tune` writes ({err!r})") from None
