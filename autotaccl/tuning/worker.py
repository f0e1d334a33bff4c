"""A sweep worker process: ``python -m autotaccl.tuning.worker SWEEP.json --n-trials N``.

The driver (``autotaccl tune --workers K``) prepared storage, tracking, reference and seeds; a worker
only loads the study and runs trials on the shared storage. Ctrl-C reaches every worker of the terminal:
each marks its trial interrupted and exits with status 130, quietly (the driver says it once); a full
disk is one line and status 1. A worker whose driver is gone (``--parent``: SIGKILLed, it could stop no
one) interrupts itself the same way, so no worker outlives its ``tune`` and the next start redoes its trial.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..interrupts import raise_lost_interrupts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autotaccl-worker")
    parser.add_argument("config")
    parser.add_argument("--n-trials", type=int, required=True)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--parent", type=int, help="the driver's pid: stop once it is gone")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format=f"worker {args.index}: %(levelname)s %(name)s: %(message)s")
    raise_lost_interrupts()
    if args.parent is not None:
        _watch(args.parent)
    try:
        return _run(Path(args.config), args.n_trials)
    except (KeyboardInterrupt, Exception) as err:
        from ..errors import stop_status

        stop = stop_status(err)
        if stop is None:
            raise
        if stop[0] != 130:                  # Ctrl-C: the driver says it, once
            logging.getLogger(__name__).error("%s", stop[1])
        return stop[0]


def _watch(parent: int, every: float = 1.0) -> None:
    """Send this process SIGINT (a Ctrl-C: the running trial is marked interrupted) once ``parent`` is no
    longer its parent (it died and the worker was re-parented): at once where Linux's ``PR_SET_PDEATHSIG``
    is there, so an orphan never starts another trial, and by a poll every ``every`` seconds anyway."""
    import os
    import signal
    import threading
    import time

    stopped = threading.Event()

    def stop() -> None:
        if stopped.is_set():                         # the kernel's signal and the poll: one Ctrl-C
            return
        stopped.set()
        logging.getLogger(__name__).warning("the tune that started this worker (pid %d) is gone: stopping", parent)
        os.kill(os.getpid(), signal.SIGINT)

    if sys.platform.startswith("linux"):            # the kernel's word, the moment the parent dies
        import ctypes

        signal.signal(signal.SIGUSR1, lambda *_: stop())
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGUSR1))     # 1: PR_SET_PDEATHSIG

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        stop()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _run(config_path: Path, n_trials: int) -> int:
    import optuna

    from ..tracking import MlflowClient, outbox
    from .objective import SweepConfig
    from .reference import load_reference
    from .space import load_space
    from .sweep import make_sampler, open_storage, optimize

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    config = SweepConfig.load(config_path)
    # every trial's sampling draws from its own seeded stream (cluster/loop.py), whichever worker runs it
    study = optuna.load_study(study_name=config.study_name, storage=open_storage(config.storage, config.heartbeat),
                              sampler=make_sampler(config.sampler, config.seed,
                                                   load_reference(Path(config.reference)).sizes,
                                                   load_space(config.space).fixed))
    outbox.limit_client_retries()
    optimize(config, study, n_trials)
    outbox.replay(config.out_dir, MlflowClient(tracking_uri=config.tracking_uri))
    return 0


if __name__ == "__main__":
    sys.exit(main())
