"""``autotaccl tune``: search sketches for a target with Optuna, track every trial in MLflow."""
from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace

from ..errors import InputError
from ..sizes import format_size
from ..tuning.samplers import SAMPLERS
from .common import RUN_DIR, RUNNER_HELP, add_runner_option_arg, runner_options_from_args


def register(subparsers) -> None:
    p = subparsers.add_parser("tune", help="search communication sketches for the fastest algorithms (Optuna + MLflow)")
    p.add_argument("--space", required=True, help="search space YAML (see search_spaces/README.md) or a shipped name")
    p.add_argument("--collective", action="append", help="only this collective of the space (repeatable)")
    p.add_argument("--trials", type=int, default=20, help="trials per study, counting earlier runs (default 20)")
    p.add_argument("--timeout", type=float, help="stop starting trials after this many seconds")
    add_runner_args(p)
    p.add_argument("--margin", type=float, default=0.0,
                   help="with a real runner, measure only candidates whose simulated time at some size is below the "
                        "best measured one's there plus this fraction, widened where the simulator misorders near "
                        "candidates (default %(default)g)")
    p.add_argument("--explore", type=float, default=0.5,
                   help="with a real runner, the share of --trials simulated only before any is measured; then the "
                        "explored algorithms are measured one at a time, each the one that most raises the expected per-size "
                        "quality given the measurements so far (default %(default)g)")
    p.add_argument("--synth-time-limit", type=float, default=60.0, help="solver seconds per MILP stage (default 60)")
    p.add_argument("--storage", help="Optuna storage URL (postgresql://, sqlite:///...) or a journal file path "
                                     "(default OUT/optuna.journal)")
    p.add_argument("--study", help="study name (default <hardware>x<nodes>-<collective>)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default sqlite:///OUT/mlflow.db)")
    p.add_argument("--workers", type=int, default=1, help="worker processes sharing the storage (default 1)")
    p.add_argument("--resume", action="store_true",
                   help="join or continue an existing study (error if there is none) and replay MLflow runs "
                        "recorded while the tracking server was unreachable")
    p.add_argument("--extend", action="store_true",
                   help="the space grew since the study was made (added choices, wider ranges, added sizes): "
                        "rebuild the study for it, keeping its trials")
    p.add_argument("--repair", action="store_true",
                   help="rebuild a damaged or missing OUT/mlflow.db (set aside as mlflow.db.damaged) and damaged "
                        "sweep records from the Optuna study")
    p.add_argument("--adopt", action="store_true",
                   help="log into an MLflow experiment of the same name that another tool created")
    p.add_argument("--heartbeat", type=float, default=60.0,
                   help="seconds between a running trial's heartbeats; a trial silent for 3 of them is failed "
                        "and retried by another worker (default 60)")
    p.add_argument("--until", type=float, metavar="SHARE",
                   help="stop early once every size's best trial reaches this share of its attainable bound "
                        "(e.g. 0.98; default: run all --trials)")
    p.add_argument("--patience", type=int, metavar="N",
                   help="stop early once N finished trials in a row improved no size's best (default: off)")
    p.add_argument("--sampler", default="random", choices=SAMPLERS,
                   help="Optuna sampler (default random: with a real runner the simulator's shortlist is drawn from what "
                        "it explored, and random explores widest; lean: multivariate TPE aimed at one size per trial, knobs the "
                        "trial's engine ignores left at their first choice)")
    p.add_argument("--seed", type=int, help="sampler seed")
    p.add_argument("--out", default=RUN_DIR, help=f"run directory (default ./{RUN_DIR})")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summaries as one JSON object")
    p.set_defaults(func=run)


#: the runner options tune sets, by its flags (every other option is the runner's default)
FLAGS = {"np": "--np", "hostfile": "--hostfile", "launcher": "--launcher", "binary": "--binary",
         "timeout": "--timeout-per-run"}


def add_runner_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runner", default="sim", help=f"final-fidelity runner: {RUNNER_HELP}; default: sim")
    p.add_argument("--np", type=int, help="ranks to launch (mpi / nccl-tests runners)")
    p.add_argument("--hostfile", help="MPI hostfile (mpi / nccl-tests runners)")
    p.add_argument("--timeout-per-run", type=float, help="seconds before a runner launch is killed")
    p.add_argument("--launcher", help="mpiexec (default), srun, or a launcher with arguments (mpi / nccl-tests)")
    p.add_argument("--binary", help="nccl-tests binary or build directory (--runner nccl-tests)")
    add_runner_option_arg(p)


def run(args) -> int:
    import optuna

    from runners import get_runner

    from ..tuning.sweep import TuneRequest, tune

    runner = get_runner(args.runner)
    options = runner_options_from_args(args, runner, FLAGS)   # the runner's options: before anything is created
    if not args.verbose:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    request = TuneRequest(space=args.space, trials=args.trials, timeout=args.timeout, runner=runner.name,
                          runner_options=options, storage=args.storage, study=args.study,
                          tracking_uri=args.tracking_uri, workers=args.workers, sampler=args.sampler, seed=args.seed,
                          out=args.out, resume=args.resume, extend=args.extend, adopt=args.adopt, repair=args.repair,
                          margin=args.margin, explore=args.explore, synth_time_limit=args.synth_time_limit, heartbeat=args.heartbeat,
                          until=args.until, patience=args.patience)
    from ..model.collectives import canonical_name

    collectives = [canonical_name(c) for c in args.collective] if args.collective else None
    if args.no_progress or args.json:
        summaries = tune(request, collectives)
    else:
        with ProgressBar() as bar:
            summaries = tune(replace(request, progress=bar.update), collectives)
    if args.json:
        from .common import print_json

        print_json([{"study": s.study, "collective": s.collective, "experiment_id": s.experiment_id,
                     "parent_run_id": s.parent_run_id, "counts": s.counts, "best_value": s.best_value,
                     "best_trial": s.best_trial,
                     "per_size": [{"size": w.size, "winner": w.winner, "time_us": w.time_us,
                                   "baseline": w.baseline, "baseline_time_us": w.baseline_time_us,
                                   "speedup": w.speedup, "busbw": w.busbw, "bound_pct": w.bound_pct,
                                   "nccl_time_us": w.nccl_time_us, "speedup_vs_nccl": w.speedup_vs_nccl}
                                  for w in s.per_size],
                     "winners": s.winners, "stopped_early": s.stopped} for s in summaries])
        return 0
    for s in summaries:
        print(summary_table(s))
    print(next_steps(args, summaries))
    return 0


def next_steps(args, summaries) -> str:
    """Where the sweep stored its study, runs and cache, and the commands that export, report and browse it."""
    from pathlib import Path
    from shlex import quote

    from .. import tracking
    from ..tuning.space import load_space
    from ..tuning.sweep import storage_spec

    out = Path(args.out).resolve()
    uri = args.tracking_uri or tracking.default_tracking_uri(out)
    space = load_space(args.space)          # the experiments' names, without asking a server that may be down
    experiments = " ".join(f"--experiment {quote(space.experiment_name(s.collective))}" for s in summaries)
    source = f"--tracking-uri {quote(uri)}"
    ui = source if args.tracking_uri else f"--out {quote(str(out))}"
    return "\n".join([
        "",
        f"Optuna study     {storage_spec(args.storage, out)}",
        f"MLflow runs      {uri}",
        f"synthesis cache  {out / 'cache'}",
        f"export:  autotaccl export {source} {experiments} -o autotaccl-export",
        f"report:  autotaccl report {source} {experiments} -o autotaccl-report",
        f"browse:  autotaccl ui {ui}"])


class ProgressBar:
    """A tqdm bar on stderr: trials done / requested and the best objective so far (one bar per study)."""

    def __init__(self) -> None:
        self.bar = None

    def update(self, done: int, total: int, best: float | None) -> None:
        from tqdm import tqdm

        if self.bar is None or self.bar.total != total or done < self.bar.n:     # a new study
            self.close()
            self.bar = tqdm(total=total, desc="trials", unit="trial", file=sys.stderr, dynamic_ncols=True)
        self.bar.n = done
        self.bar.set_postfix_str("best -" if best is None else f"best {best:.4f}", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def summary_table(s) -> str:
    counts = ", ".join(f"{n} {state.lower()}" for state, n in s.counts.items() if n)
    best = "none" if s.best_value is None else f"{s.best_value:.4f} (trial {s.best_trial})"
    lines = [f"study {s.study}: {counts}; best objective {best} (geomean time / best baseline, lower is better)",
             f"{'size':>6}  {'winner':<22} {'time_us':>11} {'baseline':<13} {'speed-up':>8} {'busbw':>8} {'% bound':>7} "
             f"{'vs NCCL':>8}"]
    for w in s.per_size:
        vs = "-" if w.speedup_vs_nccl is None else f"{w.speedup_vs_nccl:.2f}x"
        lines.append(f"{format_size(w.size):>6}  {w.winner:<22} {w.time_us:>11.2f} {w.baseline:<13} "
                     f"{w.speedup:>7.2f}x {w.busbw:>8.2f} {w.bound_pct:>6.1f}% {vs:>8}")
    if s.per_size:
        worst = min(s.per_size, key=lambda w: w.bound_pct)
        lines.append(f"farthest from its attainable bound: {format_size(worst.size)} at {worst.bound_pct:.1f}%")
    if s.stopped:
        lines.append(f"stopped early: {s.stopped}")
    return "\n".join(lines)
