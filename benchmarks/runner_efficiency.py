"""How close the mpi runner's executor gets to MPICH's own collectives, and how good profile's fit is.

1. 4 ranks on this machine: ring AllGather and direct AllToAll (from autotaccl.baselines, run by the
   mpi runner's per-rank executor) vs MPI_Allgather / MPI_Alltoall at 1 KiB .. 64 MiB, out-of-place.
   One job per size with ours and MPICH back to back, all repeated ``--repeats`` times; prints the
   median busbw and the spread (min..max),
   the busbw ratio (target >= 0.9 from 1 MiB) and the 1 KiB latency ratio.
2. Profiling: the alpha and bandwidth fitted by ``autotaccl profile``'s analysis from a 2-rank
   ping-pong sweep (1 KiB..64 MiB) vs a direct measurement in a separate ping-pong: alpha = half the
   round trip of the smallest size (1 KiB), bandwidth = the largest size (64 MiB) / its one-way time;
   target: both ratios within 10%.

Usage: ``.venv/bin/python benchmarks/runner_efficiency.py [--repeats 3] [--iters 20]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotaccl.baselines import baseline  # noqa: E402
from autotaccl.hardware import profile_from_dict  # noqa: E402
from autotaccl.sizes import format_size, parse_size_range  # noqa: E402
from autotaccl.topology import build_topology  # noqa: E402
from runners.linkfit import analyse  # noqa: E402
from runners.mpi import JobOptions, measure_many, run_job  # noqa: E402

FC4 = {"name": "fc4", "gpus_per_node": 4, "link_classes": {"l": {"alpha_us": 1.0, "bandwidth_GBps": 10.0}},
       "links": {"class": "l", "pattern": "fully-connected"}}


def collectives(repeats: int, iters: int, sizes: list[int]) -> None:
    graph = build_topology(profile_from_dict(FC4, "benchmark"))
    ours = {"allgather": baseline(graph, "allgather", "ring"), "alltoall": baseline(graph, "alltoall", "direct")}
    names = ("ours-allgather", "mpi-allgather", "ours-alltoall", "mpi-alltoall")
    items: list = [ours["allgather"], ours["allgather"].collective, ours["alltoall"], ours["alltoall"].collective]
    runs: dict[str, list[dict]] = {name: [{} for _ in range(repeats)] for name in names}
    for rep in range(repeats):
        start, wrong = time.monotonic(), 0
        # one job per size, ours and MPICH back to back (order swapped every run), so a burst of load
        # from other processes hits both sides of a ratio alike
        order = [0, 1, 2, 3] if rep % 2 == 0 else [1, 0, 3, 2]
        for size in sizes:
            frames = measure_many([items[k] for k in order], [size], iters=iters, warmup=3, check=(rep == 0),
                                  inplace=(False,), timeout=900)
            for k, df in zip(order, frames):
                runs[names[k]][rep][size] = df.iloc[0]
                wrong += int(df["wrong"].sum()) if rep == 0 else 0
        print(f"# run {rep + 1}/{repeats}: {time.monotonic() - start:.1f} s, load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
              f"{f', every element checked: {wrong} wrong' if rep == 0 else ''}")
    for coll, label in (("allgather", "ring AllGather"), ("alltoall", "direct AllToAll")):
        print(f"\n## {label} (autotaccl IR on the mpi runner) vs MPI_{coll.capitalize()}, 4 ranks, busbw GB/s "
              f"median (min..max) of {repeats} runs")
        print(f"{'size':>8s}  {'ours':>27s}  {'MPICH':>27s}  {'ratio ours/MPICH':>27s}")
        ratios_big = []
        mine, theirs = runs[f"ours-{coll}"], runs[f"mpi-{coll}"]
        for size in sizes:
            o = [run[size]["busbw"] for run in mine]
            m = [run[size]["busbw"] for run in theirs]
            r = [a / b for a, b in zip(o, m)]
            if size >= 1 << 20:
                ratios_big.append(statistics.median(r))

            def cell(v: list[float]) -> str:
                return f"{statistics.median(v):8.4f} ({min(v):.4f}..{max(v):.4f})"
            print(f"{format_size(int(size)):>8s}  {cell(o):>27s}  {cell(m):>27s}  {cell(r):>27s}")
        small = sizes[0]
        lat = [a[small]["time_us"] / b[small]["time_us"] for a, b in zip(mine, theirs)]
        if ratios_big:
            print(f"# busbw ratio from 1 MiB: median per size min {min(ratios_big):.2f}, max {max(ratios_big):.2f} "
                  f"(target >= 0.9: {'met' if min(ratios_big) >= 0.9 else 'NOT met'})")
        print(f"# {format_size(int(small))} latency ratio ours/MPICH: median {statistics.median(lat):.2f} "
              f"({min(lat):.2f}..{max(lat):.2f}); ours {statistics.median([a[small]['time_us'] for a in mine]):.1f} us, "
              f"MPICH {statistics.median([b[small]['time_us'] for b in theirs]):.1f} us")


def profiling(iters: int, repeats: int, sweep_spec: str = "1K:64M:x4") -> None:
    """Fitted (profile's analysis of a ping-pong sweep) vs direct (a separate ping-pong of the sweep's
    smallest and largest size): alpha = half the round trip at the smallest size, bandwidth = largest
    size / its one-way time. Each one-way time is the fastest of ``iters`` round trips; over the
    ``repeats`` jobs the fastest per size counts (load from other processes only ever adds time)."""
    sweep = parse_size_range(sweep_spec)
    ends = [sweep[0], sweep[-1]]
    tasks = [{"kind": "pingpong", "sizes": sweep, "iters": iters, "warmup": 5, "pairs": [[0, 1]]},
             {"kind": "pingpong", "sizes": ends, "iters": iters, "warmup": 5, "pairs": [[0, 1]]}]
    fitted_runs, direct_runs = [], []
    for _ in range(repeats):
        fitted, direct = run_job(tasks, JobOptions(2, timeout=900))
        fitted_runs.append(fitted["pairs"][0]["times_us"])
        direct_runs.append(direct["pairs"][0]["times_us"])
    best = [min(ts) for ts in zip(*fitted_runs)]
    result = {"hosts": fitted["hosts"], "pairs": [{"a": 0, "b": 1, "sizes": sweep, "times_us": best}]}
    fit = analyse(result, min_r2=float("-inf")).classes[0].fit
    alpha_direct = min(r[0] for r in direct_runs)
    bw_direct = ends[1] / min(r[1] for r in direct_runs) / 1e3
    print(f"\n## profile's fit ({format_size(sweep[0])}..{format_size(sweep[-1])}) vs direct ping-pong, ranks 0-1 "
          f"(2 ranks), fastest of {iters} round trips x {repeats} jobs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'':>12s}  {'fitted':>10s}  {'direct':>10s}  {'ratio':>6s}")
    print(f"{'alpha us':>12s}  {fit.alpha_us:10.3f}  {alpha_direct:10.3f}  {fit.alpha_us / alpha_direct:6.2f}   "
          f"(direct = half the round trip of {format_size(ends[0])})")
    print(f"{'bw GB/s':>12s}  {fit.bandwidth_GBps:10.3f}  {bw_direct:10.3f}  {fit.bandwidth_GBps / bw_direct:6.2f}   "
          f"(direct = {format_size(ends[1])} / its one-way time)")
    print(f"# fit R² {fit.r2:.4f} on relative residuals, {fit.rejected} outlier point(s) ignored; "
          f"target: both ratios within 0.9..1.1")
    print("#       size  one-way_us  fitted_us  residual  bandwidth_GBps")
    for size, t in zip(sweep, best):
        print(f"  {size:10d}  {t:10.2f}  {fit.predict(size):9.2f}  {100 * (t - fit.predict(size)) / t:+7.1f}%  "
              f"{size / t / 1e3:8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--sizes", default="1K:64M:x4")
    parser.add_argument("--only", choices=("collectives", "profile"), help="run one part only")
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} on {os.cpu_count()} cores, load average {os.getloadavg()}")
    if args.only != "profile":
        collectives(args.repeats, args.iters, parse_size_range(args.sizes))
    if args.only != "collectives":
        profiling(max(args.iters, 50), args.repeats)


if __name__ == "__main__":
    main()
