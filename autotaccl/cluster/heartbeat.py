"""Heartbeats, and the reaper that fails and retries the trials of workers that died.

RDB storages use Optuna's own heartbeats; ``JournalStorage`` has none (ecosystem.md §1.3), so a journal
sweep's running trials touch a file each interval and one older than the grace period (3 intervals,
judged against a file the reaper touches, so host clocks do not matter) is stale. Before each admission
the reaper fails stale trials and queues a retry of every interrupted one, up to ``MAX_RETRY`` kills per
configuration. Details: ``docs/internals.md``."""
from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import optuna
from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import FrozenTrial, TrialState

from ..errors import InputError
from ..safety import file_stem
from .internals import stale_trial_ids, storage, trial_id

log = logging.getLogger(__name__)

MAX_RETRY = 2
INTERVAL = 60.0            # seconds between heartbeats, unless the sweep says otherwise


def beat_seconds(interval: float) -> int:
    """The interval as the whole seconds Optuna's RDB heartbeat takes (at least 1)."""
    return max(1, int(interval))


def grace(interval: float) -> int:
    """Seconds of silence after which a trial's worker is taken for dead: 3 beats."""
    return 3 * beat_seconds(interval)


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class RetryStale(RetryHeartbeatStaleTrialCallback):
    """Optuna's retry, but the clone starts clean: it inherits params, not the dead trial's user attrs."""

    def __init__(self, max_retry: int = MAX_RETRY) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            super().__init__(max_retry=max_retry)

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        history = [*trial.system_attrs.get("retry_history", []), trial.number]
        trials = study.get_trials(deepcopy=False)
        killed = [n for n in history if trials[n].user_attrs.get("interrupted") in (True, "killed")]
        if len(killed) > MAX_RETRY:
            log.info("trial %d: its workers were killed %d times; not retried again", trial.number, len(killed))
            return
        system_attrs = {**trial.system_attrs, "failed_trial": trial.system_attrs.get("failed_trial", trial.number),
                        "retry_history": history}
        study.add_trial(optuna.create_trial(state=TrialState.WAITING, params=trial.params,
                                            distributions=trial.distributions, system_attrs=system_attrs,
                                            user_attrs={"retry_of": trial.number}))


def open_storage(spec: str, interval: float = INTERVAL):
    """A URL -> ``RDBStorage`` beating every ``interval`` seconds; a path -> ``JournalStorage`` on that file."""
    if "://" in spec:
        kwargs = {} if spec.startswith("sqlite") else {"pool_pre_ping": True}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(spec, engine_kwargs=kwargs, heartbeat_interval=beat_seconds(interval),
                              grace_period=grace(interval),
                              heartbeat_stale_trial_callback=RetryStale(max_retry=MAX_RETRY))
    Path(spec).parent.mkdir(parents=True, exist_ok=True)
    check_journal(Path(spec))
    try:
        return JournalStorage(JournalFileBackend(spec))
    except Exception as err:           # operations that do not replay (lines lost from the middle)
        raise InputError(spec, "document", f"an Optuna journal whose operations replay ({type(err).__name__}: "
                         f"{str(err)[:200]}): it is damaged; restore it from a backup, or start afresh with a "
                         f"new --storage or --out") from None


def check_journal(path: Path) -> None:
    """A journal file Optuna can read, or one InputError naming the damaged line.

    A last line without its newline is a write cut short (a full disk, a killed process): Optuna skips it,
    but its next append would glue a new line to it and make the journal unreadable from there, so it is
    cut off (under Optuna's journal lock, with a warning). A line that is not JSON before the end means
    the file itself was damaged; it is refused, never read past."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        data = path.read_bytes()
        lines = data.split(b"\n")
        tail = lines.pop()
        for number, line in enumerate(lines, 1):
            try:
                json.loads(line)
            except ValueError:
                raise InputError(str(path), f"line {number}", "an Optuna journal operation (JSON): the journal is "
                                 "damaged; restore it from a backup, or start afresh with a new --storage or --out") \
                    from None
        if tail:
            log.warning("%s: its last operation was cut short (%d bytes, a full disk or a killed process): removed",
                        path, len(tail))
            with open(path, "r+b") as fh:
                fh.truncate(len(data) - len(tail))
    finally:
        lock.release()


def beat_dir(spec: str) -> Path | None:
    """The heartbeat files of a journal storage (None for RDB storages, which beat in the database)."""
    return None if "://" in spec else Path(spec).with_name(Path(spec).name + ".heartbeats")


def beat_file(folder: Path, study: str, number: int) -> Path:
    """Trial ``number`` of ``study``'s heartbeat file (a journal may hold several studies)."""
    return folder / f"{file_stem(study)}.{number}"


@contextmanager
def beating(spec: str, study: str, number: int, interval: float = INTERVAL) -> Iterator[None]:
    """Touch the trial's heartbeat file every ``interval`` seconds while the block runs (journal storages only)."""
    folder = beat_dir(spec)
    if folder is None:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    path = beat_file(folder, study, number)
    path.write_text(worker_id())
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(beat_seconds(interval)):
            try:
                os.utime(path)
            except OSError as err:          # a flaky shared file system: try again next beat
                log.warning("heartbeat %s: %s", path, err)

    thread = threading.Thread(target=run, name=f"heartbeat-{number}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        path.unlink(missing_ok=True)


def _fs_now(folder: Path) -> float:
    """'Now' by the shared file system's clock: the mtime of a file touched just now."""
    probe = folder / f".now-{socket.gethostname()}-{os.getpid()}"
    probe.touch()
    now = probe.stat().st_mtime
    probe.unlink(missing_ok=True)
    return now


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _orphaned(trial: FrozenTrial) -> bool:
    """Its worker ran on this host and its process is gone (no need to wait for the grace period)."""
    host, _, pid = str(trial.user_attrs.get("worker", "")).rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not _alive(int(pid))


def stale_trials(study: optuna.Study, spec: str, interval: float = INTERVAL) -> list[tuple[FrozenTrial, str]]:
    """RUNNING trials whose worker is dead, with the reason (``interval``: the sweep's heartbeat, as the
    storage was opened with)."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if not running:
        return []
    silent = f"stopped heartbeating for more than {grace(interval)} s (killed or cut off)"
    out = [(t, "process is gone") for t in running if _orphaned(t)]
    folder = beat_dir(spec)
    if folder is None:
        ids = stale_trial_ids(study)
        return out + [(t, silent) for t in running if trial_id(t) in ids and not _orphaned(t)]
    folder.mkdir(parents=True, exist_ok=True)
    now, wall = _fs_now(folder), time.time()
    for t in running:
        if _orphaned(t):
            continue
        path = beat_file(folder, study.study_name, t.number)
        try:
            age = now - path.stat().st_mtime
        except FileNotFoundError:      # not started beating (or an old sweep): judge by its start time
            start = t.datetime_start or datetime.datetime.now()
            age = wall - start.timestamp()
        if age > grace(interval):
            out.append((t, silent))
    return out


def reap(study: optuna.Study, spec: str, on_failed: Callable[[FrozenTrial, str], None] | None = None,
         complete: Callable[[FrozenTrial], None] | None = None, interval: float = INTERVAL) -> list[int]:
    """Fail the stale trials of dead workers, then queue a retry of every interrupted trial that has none;
    returns the failed trial numbers. ``complete(trial)`` may first fill parameters the dead worker had
    not sampled yet."""
    failed = []
    callback = RetryStale(max_retry=MAX_RETRY)
    backend = storage(study)
    for t, why in stale_trials(study, spec, interval):
        reason = f"worker {t.user_attrs.get('worker', '?')} {why}; the trial is retried"
        try:
            if complete is not None:
                complete(t)
            backend.set_trial_user_attr(trial_id(t), "failure_reason", reason)
            backend.set_trial_user_attr(trial_id(t), "interrupted", "killed")
            if not backend.set_trial_state_values(trial_id(t), TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:    # it finished (or another reaper won) meanwhile
            continue
        log.warning("trial %d: %s", t.number, reason)
        failed.append(t.number)
        if on_failed is not None:
            on_failed(backend.get_trial(trial_id(t)), reason)
    trials = study.get_trials(deepcopy=False)
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
    for t in trials:
        if t.state == TrialState.FAIL and t.user_attrs.get("interrupted") and t.number not in retried:
            callback(study, t)
    return failed
