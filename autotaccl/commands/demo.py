"""``autotaccl demo``: a short NDv2 x2 AllGather sweep (sim runner, greedy engine), exported and reported."""
from __future__ import annotations

import logging
import time
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="short sweep + export + report on NDv2 x2 AllGather (a few minutes)")
    p.add_argument("--out", default="autotaccl-demo", help="output directory (default ./autotaccl-demo)")
    p.add_argument("--trials", type=int, default=30, help="trials (default 30)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    p.set_defaults(func=run)


def run(args) -> int:
    import optuna

    from ..safety import output_dir

    output_dir(args.out, "--out")

    from dashboards.report import build_report

    from .. import tracking
    from ..tuning.export import export
    from ..tuning.space import shipped_spaces
    from ..tuning.sweep import TuneRequest, tune
    from .tune import summary_table

    if not args.verbose:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    start = time.monotonic()
    out = Path(args.out).resolve()
    space = next(p for p in shipped_spaces() if p.stem == "demo")
    runs = out / "runs"
    print(f"autotaccl demo: tuning {space} ({args.trials} trials, sim runner, greedy engine)", flush=True)
    summaries = tune(TuneRequest(space=str(space), trials=args.trials, out=str(runs), sampler="tpe", seed=args.seed))
    for s in summaries:
        print(summary_table(s))
    uri = tracking.default_tracking_uri(runs)
    ranges = export(uri, [s.study for s in summaries], out / "export")
    page = build_report(uri, [s.study for s in summaries], out / "report")
    files = sorted(f for r in ranges for f in (r.xml, r.legacy_xml, *r.plans) if f)
    tuner = out / "export" / "nccl" / "nccl_tuner.conf"
    print(f"""
done in {time.monotonic() - start:.0f} s
  Optuna study      {runs / 'optuna.journal'} (resume: autotaccl tune --space demo --out {runs} --trials N)
  MLflow store      {uri}
  synthesis cache   {runs / 'cache'}
  export            {out / 'export' / 'table.md'} (+ table.csv, table.json, README.md: how to load each runtime)
                    {len([f for f in files if f.endswith('.xml')])} MSCCL XML file(s), \
{len([f for f in files if f.startswith('mscclpp/')])} MSCCL++ plan(s){', nccl/nccl_tuner.conf' if tuner.is_file() else ''}
  report            {page}
  MLflow UI         autotaccl ui --out {runs}""")
    return 0
