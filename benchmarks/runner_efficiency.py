"""How close the mpi runner's executor gets to MPICH's own collectives, and how good profile's fit is.

1. 4 ranks on this machine: ring AllGather and direct AllToAll (from autotaccl.baselines, run by the
   mpi runner's per-rank executor) vs MPI_Allgather / MPI_Alltoall at 1 KiB .. 64 MiB, out-of-place.
   Repeated ``--repeats`` times (one job each); prints the median busbw and the spread (min..max),
   the busbw ratio (target >= 0.9 from 1 MiB) and the 1 KiB latency ratio.
2. Profiling: the alpha and bandwidth fitted by ``autotaccl profile``'s analysis from a 2-rank
   ping-pong sweep vs a direct measurement (one-way time of an 8-byte message; bandwidth of a 64 MiB
   message; the fit spans 1 KiB..64 MiB), target within 10%.

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
    runs: dict[str, list] = {name: [] for name in ("ours-allgather", "mpi-allgather", "ours-alltoall", "mpi-alltoall")}
    for rep in range(repeats):
        items: list = [ours["allgather"], ours["allgather"].collective, ours["alltoall"], ours["alltoall"].collective]
        start = time.monotonic()
        frames = measure_many(items, sizes, iters=iters, warmup=3, check=(rep == 0), inplace=(False,), timeout=1800)
        print(f"# run {rep + 1}/{repeats}: {time.monotonic() - start:.1f} s, load average {os.getloadavg()[0]:.2f}"
              f"{', every element checked: ' + str(int(sum(f['wrong'].sum() for f in frames))) + ' wrong' if rep == 0 else ''}")
        for name, df in zip(runs, frames):
            runs[name].append(df.set_index("size"))
    for coll, label in (("allgather", "ring AllGather"), ("alltoall", "direct AllToAll")):
        print(f"\n## {label} (autotaccl IR on the mpi runner) vs MPI_{coll.capitalize()}, 4 ranks, busbw GB/s "
              f"median (min..max) of {repeats} runs")
        print(f"{'size':>8s}  {'ours':>27s}  {'MPICH':>27s}  {'ratio ours/MPICH':>27s}")
        ratios_big = []
        for size in runs[f"ours-{coll}"][0].index:
            o = [df.loc[size, "busbw"] for df in runs[f"ours-{coll}"]]
            m = [df.loc[size, "busbw"] for df in runs[f"mpi-{coll}"]]
            r = [a / b for a, b in zip(o, m)]
            if size >= 1 << 20:
                ratios_big.append(statistics.median(r))

            def cell(v: list[float]) -> str:
                return f"{statistics.median(v):8.4f} ({min(v):.4f}..{max(v):.4f})"
            print(f"{format_size(int(size)):>8s}  {cell(o):>27s}  {cell(m):>27s}  {cell(r):>27s}")
        small = min(runs[f"ours-{coll}"][0].index)
        lat = [a.loc[small, "time_us"] / b.loc[small, "time_us"] for a, b in zip(runs[f"ours-{coll}"], runs[f"mpi-{coll}"])]
        if ratios_big:
            print(f"# busbw ratio from 1 MiB: median per size min {min(ratios_big):.2f}, max {max(ratios_big):.2f} "
                  f"(target >= 0.9: {'met' if min(ratios_big) >= 0.9 else 'NOT met'})")
        print(f"# {format_size(int(small))} latency ratio ours/MPICH: median {statistics.median(lat):.2f} "
              f"({min(lat):.2f}..{max(lat):.2f}); ours {statistics.median([a.loc[small, 'time_us'] for a in runs[f'ours-{coll}']]):.1f} us")


def profiling(iters: int) -> None:
    sweep = parse_size_range("1K:64M:x4")
    tasks = [{"kind": "pingpong", "sizes": sweep, "iters": iters, "warmup": 5, "pairs": [[0, 1]]},
             {"kind": "pingpong", "sizes": [8, 64 << 20], "iters": iters, "warmup": 5, "pairs": [[0, 1]]}]
    fitted, direct = run_job(tasks, JobOptions(2, timeout=1800))
    fit = analyse(fitted, min_r2=float("-inf")).classes[0].fit
    t_small, t_big = direct["pairs"][0]["times_us"]
    bw_direct = (64 << 20) / t_big / 1e3
    print("\n## profile's fit vs direct ping-pong, ranks 0-1 (2 ranks)")
    print(f"{'':>12s}  {'fitted':>10s}  {'direct':>10s}  {'ratio':>6s}")
    print(f"{'alpha us':>12s}  {fit.alpha_us:10.3f}  {t_small:10.3f}  {fit.alpha_us / t_small:6.2f}   (direct = one-way 8 B)")
    print(f"{'bw GB/s':>12s}  {fit.bandwidth_GBps:10.3f}  {bw_direct:10.3f}  {fit.bandwidth_GBps / bw_direct:6.2f}   "
          f"(direct = 64 MiB / one-way time)")
    print(f"# fit R² {fit.r2:.4f}; target: both ratios within 0.9..1.1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--sizes", default="1K:64M:x4")
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} on {os.cpu_count()} cores, load average {os.getloadavg()}")
    collectives(args.repeats, args.iters, parse_size_range(args.sizes))
    profiling(max(args.iters, 50))


if __name__ == "__main__":
    main()
