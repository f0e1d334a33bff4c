"""How close the mpi runner's executor gets to MPICH's own collectives, and how good profile's fit is.

1. 4 ranks on this machine: ring AllGather and direct AllToAll (from autotaccl.baselines, run by the
   mpi runner's per-rank executor) vs MPI_Allgather / MPI_Alltoall at 1 KiB .. 64 MiB, out-of-place.
   One job per size in which ours and MPICH alternate ``--blocks`` times (``--iters`` timed calls each,
   nccl-tests' mean of the slowest rank); each side keeps its fastest block. All repeated ``--repeats``
   times; prints the median busbw over the runs and the spread (min..max),
   the busbw ratio (target >= 0.9 from 1 MiB) and the 1 KiB latency ratio.
2. Profiling: the latency and bandwidth of the alpha-beta line ``autotaccl profile`` fits to a
   2-rank ping-pong sweep (8 B..256 MiB) vs direct ping-pongs in the same job: latency = one-way time
   of the smallest size (8 B), bandwidth = the largest size (256 MiB) / its one-way time; target: both
   ratios within 10%.

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
from autotaccl.model.hardware import profile_from_dict  # noqa: E402
from autotaccl.sizes import format_size, parse_size_range  # noqa: E402
from autotaccl.model.topology import build_topology  # noqa: E402
from runners.linkfit import analyse  # noqa: E402
from runners.mpi import JobOptions, MpiOptions, measure_many, run_job  # noqa: E402

FC4 = {"name": "fc4", "gpus_per_node": 4, "link_classes": {"l": {"alpha_us": 1.0, "bandwidth_GBps": 10.0}},
       "links": {"class": "l", "pattern": "fully-connected"}}


def collectives(repeats: int, iters: int, blocks: int, sizes: list[int]) -> None:
    graph = build_topology(profile_from_dict(FC4, "benchmark"))
    ours = {"allgather": baseline(graph, "allgather", "ring"), "alltoall": baseline(graph, "alltoall", "direct")}
    names = ("ours-allgather", "mpi-allgather", "ours-alltoall", "mpi-alltoall")
    items: list = [ours["allgather"], ours["allgather"].collective, ours["alltoall"], ours["alltoall"].collective]
    runs: dict[str, list[dict]] = {name: [{} for _ in range(repeats)] for name in names}
    for rep in range(repeats):
        start, wrong = time.monotonic(), 0
        # one job per size in which ours and MPICH alternate ``blocks`` times (the order swapped in every
        # block), so a burst of load from other processes, or a slow placement of the job's ranks, hits
        # both sides of a ratio alike; each side keeps its fastest block (load only ever adds time)
        for size in sizes:
            order = [k for b in range(blocks) for k in ([0, 1, 2, 3] if b % 2 == 0 else [1, 0, 3, 2])]
            frames = measure_many([items[k] for k in order], [size],
                                  MpiOptions(iters=iters, warmup=3, check=(rep == 0), timeout=900), inplace=(False,))
            for k, df in zip(order, frames):
                row = df.iloc[0]
                best = runs[names[k]][rep].get(size)
                if best is None or row["time_us"] < best["time_us"]:
                    runs[names[k]][rep][size] = row
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


def profiling(iters: int, repeats: int, sweep_spec: str) -> None:
    """Fitted (profile's analysis of a ping-pong sweep) vs direct (ping-pongs of the sweep's smallest
    and largest size, run just before and just after the sweep in the same job; their mean counts):
    latency = one-way time at the smallest size (for the fit: its prediction there), bandwidth = largest
    size / its one-way time (for the fit: the fitted bandwidth). Each one-way time is the fastest of at
    least ``iters`` round trips. Compared job by job: this VM's shared-memory speed changes from job to
    job (up to 4x at 128 KiB..2 MiB), so mixing jobs would compare different machines; how far the two
    direct measurements of one job differ is printed as the direct measurement's own repeatability."""
    sweep = parse_size_range(sweep_spec)
    ends = [sweep[0], sweep[-1]]
    direct = {"kind": "pingpong", "sizes": ends, "iters": iters, "warmup": 5, "pairs": [[0, 1]]}
    tasks = [direct, {**direct, "sizes": sweep}, direct]
    rows = []
    for _ in range(repeats):
        before, fitted, after = (r["pairs"][0]["times_us"] for r in run_job(tasks, JobOptions(2, timeout=900)))
        fit = analyse({"hosts": ["localhost"] * 2, "pairs": [{"a": 0, "b": 1, "sizes": sweep, "times_us": fitted}]},
                      min_r2=float("-inf")).classes[0].fit
        latency = [before[0], after[0]]
        bandwidth = [ends[1] / before[1] / 1e3, ends[1] / after[1] / 1e3]
        rows.append((fit, latency, bandwidth))
    print(f"\n## profile's fit ({format_size(sweep[0])}..{format_size(sweep[-1])}) vs direct ping-pong, ranks 0-1 "
          f"(2 ranks), fastest of >= {iters} round trips, {repeats} jobs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"# latency = one-way us at {format_size(ends[0])}, bandwidth = GB/s at {format_size(ends[1])}; "
          f"direct = before / after the sweep")
    print(f"{'job':>4s}  {'latency fit':>11s}  {'direct':>13s}  {'ratio':>5s}  {'bw fit':>7s}  {'direct':>13s}  "
          f"{'ratio':>5s}  {'R²':>6s}  {'worst residual ends / between':>29s}")
    lat_ratios, bw_ratios, repeat = [], [], []
    for k, (fit, latency, bandwidth) in enumerate(rows, 1):
        lat_ratios.append(fit.predict(ends[0]) / statistics.mean(latency))
        bw_ratios.append(fit.bandwidth_GBps / statistics.mean(bandwidth))
        repeat += [max(latency) / min(latency), max(bandwidth) / min(bandwidth)]
        print(f"{k:4d}  {fit.predict(ends[0]):11.3f}  {latency[0]:6.3f}/{latency[1]:6.3f}  {lat_ratios[-1]:5.2f}  "
              f"{fit.bandwidth_GBps:7.3f}  {bandwidth[0]:6.2f}/{bandwidth[1]:6.2f}  {bw_ratios[-1]:5.2f}  {fit.r2:6.4f}  "
              f"{100 * fit.worst_residual():+13.1f}% / {100 * fit.worst_residual(False):+.1f}%")
    for label, ratios in (("latency", lat_ratios), ("bandwidth", bw_ratios)):
        print(f"# {label} fitted/direct: median {statistics.median(ratios):.2f} ({min(ratios):.2f}..{max(ratios):.2f}); "
              f"target within 0.9..1.1: {'met' if 0.9 <= statistics.median(ratios) <= 1.1 else 'NOT met'} for the median, "
              f"in {sum(0.9 <= r <= 1.1 for r in ratios)} of {len(ratios)} jobs")
    print(f"# the direct measurement's own repeatability, after vs before the sweep: median {statistics.median(repeat):.2f}x, "
          f"worst {max(repeat):.2f}x")
    fit = rows[-1][0]
    print("# last job's sweep (alpha from the two smallest sizes, bandwidth from the two largest; the rest is not fitted):")
    print("#       size  one-way_us  fitted_us  residual  bandwidth_GBps")
    for size, t, used in zip(fit.sizes, fit.times_us, fit.fitted):
        print(f"  {size:10d}  {t:10.2f}  {fit.predict(size):9.2f}  {100 * (t - fit.predict(size)) / t:+7.1f}%  "
              f"{size / t / 1e3:8.3f}{'' if used else '  between'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=5, help="alternating blocks of ours and MPICH per job")
    parser.add_argument("--sizes", default="1K:64M:x4")
    parser.add_argument("--profile-sizes", default="8:256M:x2",
                        help="the ping-pong sweep profile fits (to 256 MiB: on this VM the copy bandwidth keeps "
                        "falling until the buffers are far larger than the caches)")
    parser.add_argument("--only", choices=("collectives", "profile"), help="run one part only")
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} on {os.cpu_count()} cores, load average {os.getloadavg()}")
    if args.only != "profile":
        collectives(args.repeats, args.iters, args.blocks, parse_size_range(args.sizes))
    if args.only != "collectives":
        profiling(max(args.iters, 50), args.repeats, args.profile_sizes)


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
