"""A sweep worker process: ``python -m autotaccl.tuning.worker SWEEP.json --n-trials N``.

The driver (``autotaccl tune --workers K``) prepared storage, tracking, reference and seeds; a worker
only loads the study and runs trials on the shared storage.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import optuna
from mlflow.tracking import MlflowClient

from ..tracking import outbox

from .objective import SweepConfig
from .sweep import make_sampler, open_storage, optimize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autotaccl-worker")
    parser.add_argument("config")
    parser.add_argument("--n-trials", type=int, required=True)
    parser.add_argument("--index", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format=f"worker {args.index}: %(levelname)s %(name)s: %(message)s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    config = SweepConfig.load(Path(args.config))
    seed = None if config.seed is None else config.seed + 1000 * (args.index + 1)
    study = optuna.load_study(study_name=config.study_name, storage=open_storage(config.storage, config.heartbeat),
                              sampler=make_sampler(config.sampler, seed))
    outbox.limit_client_retries()
    optimize(config, study, args.n_trials)
    outbox.replay(config.out_dir, MlflowClient(tracking_uri=config.tracking_uri))
    return 0


if __name__ == "__main__":
    sys.exit(main())
