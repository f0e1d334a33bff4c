"""MLflow records of sweeps: the store and its runs (``store``), logging that outlives an unreachable
server (``outbox``), and the figures logged with runs (``plots``)."""
from .store import (EXPERIMENT_KIND, KIND, PER_SIZE, STATUS, MlflowClient, all_runs, autotaccl_experiments,
                    default_tracking_uri, ensure_experiment, existing_store, init_store, local_path, log_run,
                    logged_sizes, own_artifacts, relative_path, runs_url, set_aside, size_curves, size_metrics,
                    size_step, sqlite_path, sqlite_uri, start_sweep_run, store_damage, trial_run_name, usable_store)

__all__ = ["EXPERIMENT_KIND", "KIND", "PER_SIZE", "STATUS", "MlflowClient", "all_runs", "autotaccl_experiments",
           "default_tracking_uri", "ensure_experiment", "existing_store", "init_store", "local_path", "log_run",
           "logged_sizes", "own_artifacts", "relative_path", "runs_url", "set_aside", "size_curves", "size_metrics",
           "size_step", "sqlite_path", "sqlite_uri", "start_sweep_run", "store_damage", "trial_run_name",
           "usable_store"]
