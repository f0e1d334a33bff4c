"""MLflow tracking for sweeps: one experiment per target, a parent run per sweep, a child run per trial.

A fresh SQLite store is slow to create and races when several processes create it (ecosystem.md §2), so
the driver creates the store and the experiments once and workers only log into them, by experiment id
(never ``set_experiment``). A child run is written with one ``log_batch``, much faster than per-value
calls (the figure: ``benchmarks/results/cluster_load.md``, carried over). Per-size values are logged twice: one metric key per size
(``busbw_GBps.1048576``), because ``search_runs`` shows only the last step of a key, and one key per
quantity with step = log2(bytes) (``busbw_GBps`` at step 20), which MLflow's charts draw as a curve.
"""
from __future__ import annotations

import functools
import logging
import math
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient as _MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME, MLFLOW_RUN_NOTE

from .. import faults
from ..errors import InputError, ParameterError
from ..interrupts import held_interrupt
from ..safety import anchored, relative_inside

log = logging.getLogger(__name__)

KIND = "autotaccl.kind"          # sweep | trial | baseline | nccl (stock NCCL predicted by nccl-model)
STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}
#: MLflow 3 opens an experiment by its kind: a sweep's is a training-runs one (the runs table and its charts),
#: not the GenAI view (traces, evaluation runs) it may infer for an experiment without the tag
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
PER_SIZE = ("time_us", "algbw_GBps", "busbw_GBps", "relative", "bound_pct")
_QUANTITIES = dict(zip(("time_us", "algbw", "busbw", "relative", "bound_pct"), PER_SIZE))   # row field -> key

# MLflow's SQL store logs every database error with its traceback ("SQLAlchemy database error ...") and then
# raises it; the caller reports the error raised (a full disk: one line), so the log is only noise
logging.getLogger("mlflow.store.db.utils").addFilter(
    lambda record: not str(record.msg).startswith("SQLAlchemy database error"))


class MlflowClient(_MlflowClient):
    """MLflow's client, whose every call into a database this process opens itself (not a tracking server),
    read or write, is whole: a Ctrl-C during one lands after it (:mod:`autotaccl.interrupts` says why)."""

    def __init__(self, tracking_uri: str | None = None, registry_uri: str | None = None) -> None:
        super().__init__(tracking_uri, registry_uri)
        self._own_store = not is_server(self.tracking_uri)


def _whole(name: str) -> Callable[..., Any]:
    call = getattr(_MlflowClient, name)

    @functools.wraps(call)
    def whole(self: MlflowClient, *args: Any, **kwargs: Any) -> Any:
        if not self._own_store:
            return call(self, *args, **kwargs)
        with held_interrupt():
            return call(self, *args, **kwargs)
    return whole


for _call in ("create_experiment", "set_experiment_tag", "create_run", "log_batch", "set_tag", "set_terminated",
              "update_run", "delete_run", "search_runs", "search_experiments", "get_run", "get_experiment_by_name"):
    setattr(MlflowClient, _call, _whole(_call))


def is_server(uri: str) -> bool:
    """Whether ``uri`` names a tracking server (http, https) rather than a database this process opens."""
    return uri.startswith(("http://", "https://"))


def sqlite_uri(path: str | Path) -> str:
    """The SQLAlchemy URL of the SQLite file ``path``, whatever characters it holds.

    ``?`` would start a query, ``#`` a fragment and ``%`` an escape, so those are percent-encoded
    (SQLAlchemy decodes them back). MLflow also reads a ``sqlite:///`` URL as a plain path to create its
    directory (a stray ``run%3Fx=1/`` beside ``run?x=1/``), so an encoded URL names the driver
    (``sqlite+pysqlite:///``), which that step skips; a plain path keeps the familiar form."""
    text = str(Path(path).resolve())
    encoded = text.replace("%", "%25").replace("?", "%3F").replace("#", "%23")
    return ("sqlite:///" if encoded == text else "sqlite+pysqlite:///") + encoded


def sqlite_path(uri: str) -> Path | None:
    """The file an SQLite URI (``sqlite:///``, ``sqlite+pysqlite:///``) names, decoded as SQLAlchemy
    decodes it; None for other URIs."""
    if not uri.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(uri).database
    return Path(database) if database not in (None, "", ":memory:") else None


def default_tracking_uri(out_dir: Path) -> str:
    return sqlite_uri(Path(out_dir) / "mlflow.db")


def init_store(uri: str) -> MlflowClient:
    """Create (migrate) the store once, from the driver, before any worker touches it."""
    client = MlflowClient(tracking_uri=uri)
    client.search_experiments(max_results=1)
    return client


def existing_store(uri: str) -> str:
    """``uri`` if it names an existing store: MLflow would silently create a new SQLite file otherwise. A
    damaged SQLite file is one line naming it, before MLflow reads it (its traceback comes mid-query)."""
    if uri.startswith("sqlite"):
        path = sqlite_path(uri)
        if path is None or not path.is_file():
            raise ParameterError("tracking_uri", uri, "an existing MLflow store, e.g. sqlite:///autotaccl-runs/mlflow.db")
        # (in an emptied file MLflow would create its tables, then find no runs)
        problem = "it is empty" if path.stat().st_size == 0 else (said := store_damage(path)) and f"SQLite says: {said}"
        if problem:
            raise InputError(str(path), "MLflow store", f"a whole SQLite database ({problem}); rebuild it from its "
                             "Optuna study with the sweep's own `autotaccl tune` and --repair")
    elif "://" not in uri:
        raise ParameterError("tracking_uri", uri,
                             "a tracking URI such as sqlite:///autotaccl-runs/mlflow.db or http://host:5000")
    return uri


def usable_store(uri: str, flag: str = "tracking_uri") -> str:
    """``uri`` if runs can be logged into it, checked before anything is created: an http(s) server must
    answer (else MLflow retries for minutes, then fails with a traceback), an SQLite file (or the directory
    of a new one) must take writes."""
    import os
    import urllib.error
    import urllib.request

    if is_server(uri):
        try:
            with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=10):
                return uri
        except urllib.error.HTTPError:       # it answers (a proxy in front, or a server without /health)
            return uri
        except (OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise ParameterError(flag, uri, f"a tracking server that answers (none did: {reason})") from None
    path = sqlite_path(uri)
    if path is None:
        return uri
    try:
        if path.exists():
            os.close(os.open(path, os.O_RDWR))
        with tempfile.TemporaryFile(dir=path.parent):     # SQLite writes its journal beside the file
            pass
    except OSError as err:
        raise ParameterError(flag, uri, f"an SQLite store that can be written ({err.strerror}: "
                                        f"{err.filename or path})") from None
    return uri


def autotaccl_experiments(tracking_uri: str, names: Iterable[str] | None) -> tuple[MlflowClient, list]:
    """The store's autotaccl experiments (all, or those ``names``, in name order), with a client on it."""
    import mlflow

    mlflow.set_tracking_uri(existing_store(tracking_uri))
    client = MlflowClient(tracking_uri=tracking_uri)
    found = [e for e in client.search_experiments(max_results=10_000) if "autotaccl.target" in e.tags]
    if names:
        by_name = {e.name: e for e in found}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise ParameterError("experiments", missing[0],
                             f"an autotaccl experiment in {tracking_uri} ({', '.join(sorted(by_name)) or 'none'})")
        found = [by_name[n] for n in names]
    if not found:
        raise ParameterError("tracking_uri", tracking_uri, "a store with at least one autotaccl tune experiment")
    return client, sorted(found, key=lambda e: e.name)


def logged_sizes(frame) -> list[int]:
    """The buffer sizes a ``search_runs`` frame has per-size metrics for."""
    return sorted(int(c.rsplit(".", 1)[1]) for c in frame.columns if c.startswith("metrics.time_us."))


def ensure_experiment(client: MlflowClient, name: str, artifact_root: Path | None,
                      tags: Mapping[str, str], adopt: bool = False, description: str = "") -> str:
    """The id of experiment ``name``, created with ``tags`` and ``description`` (shown above its runs) if the
    store has none of that name.

    An experiment of that name that autotaccl did not create (no ``autotaccl.target`` tag) is refused
    unless ``adopt`` (then it gets the tags), and so is a deleted one: runs logged into either would be
    invisible to ``export`` or lost."""
    existing = client.get_experiment_by_name(name)
    if existing is not None and existing.lifecycle_stage != "active":
        raise ParameterError("tracking_uri", client.tracking_uri,
                             f"a store whose experiment {name!r} is not deleted (restore it with `mlflow experiments "
                             f"restore --experiment-id {existing.experiment_id}`, or remove it for good with "
                             f"`mlflow gc`)")
    if existing is not None:
        if "autotaccl.target" not in existing.tags:
            if not adopt:
                raise ParameterError("tracking_uri", client.tracking_uri,
                                     f"a store whose experiment {name!r} autotaccl created (this one was made by "
                                     f"another tool; pass --adopt to log into it)")
            for key, value in tags.items():
                client.set_experiment_tag(existing.experiment_id, key, value)
        for key, value in EXPERIMENT_KIND.items():          # a store made before sweeps set their kind
            if existing.tags.get(key) != value:
                client.set_experiment_tag(existing.experiment_id, key, value)
        return existing.experiment_id
    location = (Path(artifact_root).resolve() / name).as_uri() if artifact_root else None
    tags = {**tags, **EXPERIMENT_KIND, **({MLFLOW_RUN_NOTE: description} if description else {})}   # its note too
    return client.create_experiment(name, artifact_location=location, tags=tags)


def size_metrics(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """One metric key per quantity and size: ``busbw_GBps.1048576``."""
    return {f"{key}.{int(row['size'])}": float(row[field])
            for row in rows for field, key in _QUANTITIES.items() if row.get(field) is not None}


def size_step(size: int) -> int:
    """A size's step on the curves: log2 of its bytes, rounded (1K -> 10, 1M -> 20)."""
    return round(math.log2(size))


def size_curves(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Per quantity, its (step, value) points: one key each (``busbw_GBps``), step = :func:`size_step`."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for field, key in _QUANTITIES.items():
            if row.get(field) is not None:
                curves.setdefault(key, []).append((size_step(int(row["size"])), float(row[field])))
    return curves


#: how trial run names abbreviate a knob with a number (others show their value)
_SHORT = {"chunkup": "cu", "instances": "x"}


def trial_run_name(number: int, params: Mapping[str, Any]) -> str:
    """What the trial was, in the space's order: ``t12 greedy relay 0:1 cu2 LL128`` (a true flag by its
    name, a false one left out)."""
    words = [f"t{number}"]
    for name, value in params.items():
        if isinstance(value, bool):
            words += [name] if value else []
        elif isinstance(value, (int, float)):
            words.append(f"{_SHORT.get(name, name)}{value:g}")
        else:
            words.append(str(value))
    return " ".join(words)


def log_run(client: MlflowClient, experiment_id: str, run_name: str, *, parent_run_id: str | None = None,
            params: Mapping[str, Any] = {}, metrics: Mapping[str, float] = {}, tags: Mapping[str, str] = {},
            artifacts: Mapping[str, str | bytes] = {}, state: str = "COMPLETE",
            curves: Mapping[str, list[tuple[int, float]]] = {}) -> str:
    """One run: create, a single log_batch, artifacts (name -> text or bytes), terminate.

    ``curves`` maps a key to (step, value) points (:func:`size_curves`).
    """
    run_tags = {MLFLOW_RUN_NAME: run_name, **{k: str(v) for k, v in tags.items()}}
    if parent_run_id:
        run_tags[MLFLOW_PARENT_RUN_ID] = parent_run_id
    run = client.create_run(experiment_id, run_name=run_name, tags=run_tags)
    run_id = run.info.run_id
    faults.point(f"mlflow.{tags.get(KIND)}.created")
    ts = run.info.start_time
    points = [Metric(k, float(v), ts, 0) for k, v in metrics.items()]
    points += [Metric(k, float(v), ts, step) for k, curve in curves.items() for step, v in curve]
    client.log_batch(run_id, metrics=points,
                     params=[Param(k, str(v)[:6000]) for k, v in params.items()], tags=[])
    if artifacts:
        with tempfile.TemporaryDirectory(prefix="autotaccl-artifacts-") as tmp:
            for name, content in artifacts.items():
                path = Path(tmp) / name
                path.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, bytes):
                    path.write_bytes(content)
                else:
                    path.write_text(content)
            client.log_artifacts(run_id, tmp)
    client.set_terminated(run_id, STATUS.get(state, "FINISHED"))
    faults.point(f"mlflow.{tags.get(KIND)}.logged")
    return run_id


def all_runs(client: MlflowClient, experiment_id: str, filter_string: str) -> list:
    """Every active run of the experiment matching ``filter_string``, page after page."""
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=filter_string, max_results=5000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def start_sweep_run(client: MlflowClient, experiment_id: str, name: str, params: Mapping[str, Any],
                    tags: Mapping[str, str]) -> str:
    run = client.create_run(experiment_id, run_name=name,
                            tags={MLFLOW_RUN_NAME: name, KIND: "sweep", **{k: str(v) for k, v in tags.items()}})
    client.log_batch(run.info.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
    return run.info.run_id


#: the runs page's state in its URL: MLflow 3 opens an experiment in its GenAI view (whatever its kind) unless
#: ``workflowType`` says otherwise; without the sweep's parent run the trials and baselines are rows of their own
#: (under it they are folded); a curve key's latest value is its largest step, so the first row is the best busbw
#: at the largest size; the chart view draws every per-size key, one chart each, a line per run
_COMPARISON = urllib.parse.urlencode({
    "workflowType": "machine_learning", "searchFilter": f"tags.`{KIND}` != 'sweep'",
    "orderByKey": "metrics.`busbw_GBps`", "orderByAsc": "false", "compareRunsMode": "CHART"},
    quote_via=urllib.parse.quote)


def runs_url(base: str, experiment_id: str) -> str:
    """The experiment's comparison page: its trials and baselines side by side in MLflow's training-runs view."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{_COMPARISON}"


def store_damage(path: Path) -> str | None:
    """What SQLite finds wrong with the store file ``path`` (``PRAGMA integrity_check``), None if it reads
    whole. A file cut short or overwritten in places fails this before MLflow is handed it (MLflow would
    fail later, mid-sweep, with a traceback)."""
    import sqlite3

    try:
        con = sqlite3.connect(str(path), timeout=60)
        try:
            rows = con.execute("PRAGMA integrity_check").fetchall()
        finally:
            con.close()
    except sqlite3.Error as err:
        return str(err)
    return None if rows == [("ok",)] else str(rows[0][0])


def set_aside(path: Path) -> Path:
    """Move a damaged store file (and SQLite's journals beside it) out of the way, kept for inspection:
    ``mlflow.db`` -> ``mlflow.db.damaged`` (``.damaged-2``... if one is there already)."""
    target, n = path.with_name(path.name + ".damaged"), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged-{n}")
    for suffix in ("-journal", "-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.replace(target.with_name(target.name + suffix))
    path.replace(target)
    return target


def own_artifacts(uri: str, artifact_root: Path) -> list[str]:
    """Point the experiments of the local store ``uri`` whose artifacts lie in another run directory's
    ``mlartifacts/`` (the directory was copied or moved: MLflow records absolute locations) at
    ``artifact_root``, the same experiment's folder in this one; their names. MLflow has no call that
    moves an experiment, so its two columns (``experiments.artifact_location``, ``runs.artifact_uri``)
    are rewritten in one transaction."""
    import sqlite3
    from urllib.parse import unquote, urlparse

    path = sqlite_path(uri)
    if path is None or not path.is_file():
        return []
    root = Path(artifact_root).resolve()
    moved = []
    with held_interrupt(), sqlite3.connect(str(path), timeout=60) as con:
        for exp_id, name, location in con.execute("SELECT experiment_id, name, artifact_location FROM experiments"):
            if not str(location).startswith("file://"):
                continue
            old = Path(unquote(urlparse(location).path))
            new = root / old.name
            if old.parent.name != root.name or old.parent == root or not new.is_dir():
                continue
            old_uri, new_uri = old.as_uri(), new.as_uri()
            con.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?", (new_uri, exp_id))
            con.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE experiment_id = ? "
                        "AND artifact_uri LIKE ? || '/%'", (new_uri, len(old_uri) + 1, exp_id, old_uri))
            moved.append(name)
    return moved


def local_path(tracking_uri: str, reference: str) -> str:
    """A path a run records (``optuna.storage``), made absolute: a relative one is relative to the
    directory of the local store ``tracking_uri`` (:func:`relative_path` wrote it)."""
    if "://" in reference or Path(reference).is_absolute():
        return reference
    store = sqlite_path(tracking_uri)
    if store is None:
        raise ParameterError("tracking_uri", tracking_uri, f"the local store of the run directory its runs name "
                                                           f"{reference!r} in (a relative path)")
    return anchored(reference, store.parent)


def relative_path(tracking_uri: str, path: str) -> str:
    """``path`` as runs of the local store ``tracking_uri`` record it: relative to the store's directory
    if it lies in it (:func:`local_path` reads it back), else as it is."""
    store = sqlite_path(tracking_uri)
    return path if store is None else relative_inside(path, store.parent)
    try:
        return str(Path(path).resolve().relative_to(store.resolve().parent))
    except ValueError:
        return path
