"""Every baseline's simulated algbw beside the theoretical ceiling, and how long simulation took.

    .venv/bin/python benchmarks/baselines.py [--topologies ndv2x2,dgx2x2,dgx-a100x1] [--sizes 1K,1M,1G]

For each topology, collective, applicable baseline and size it prints the simulated algbw with one
channel and the Simple protocol, the bound (``bound_algbw``, a line-rate ceiling) and their ratio (<= 1
by construction; 1 means the baseline meets the ceiling), the wall time of that ``simulate``, and the
baseline at its best (``best_runs``: NCCL's channel count as distinct channels x instances, the fastest
protocol) with its ratio and how it ran.
"""
from __future__ import annotations

import argparse
import time

from autotaccl.baselines import applicable_baselines, baseline, best_runs
from autotaccl.bounds import bound_algbw, bounds
from autotaccl.model.collectives import NAMES
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.simulate import simulate
from autotaccl.sizes import format_size, parse_size


def topology(spec: str):
    profile, _, nodes = spec.rpartition("x")
    return build_topology(load_hardware(profile), int(nodes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", default="ndv2x2,dgx2x2,dgx-a100x1")
    parser.add_argument("--sizes", default="1K,1M,1G")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    print(f"{'topology':<11} {'collective':<13} {'baseline':<12} {'size':>6} {'transfers':>9} {'sim GB/s':>10} "
          f"{'bound GB/s':>10} {'ratio':>6} {'sim s':>6} {'best GB/s':>10} {'ratio':>6}  how")
    slowest = (0.0, "")
    for spec in args.topologies.split(","):
        graph = topology(spec)
        for name in NAMES:
            t0 = time.perf_counter()
            b = bounds(graph, name)
            bound_seconds = time.perf_counter() - t0
            print(f"{spec:<11} {name:<13} {'(bound)':<12} {'':>6} {'':>9} {'':>10} {b.algbw_GBps:>10.2f} "
                  f"{'':>6} {bound_seconds:>6.2f}   latency {b.latency_us:.2f} us")
            for algo_name in applicable_baselines(graph, name):
                algo = baseline(graph, name, algo_name)
                runs = best_runs(graph, name, algo_name, sizes)
                for size, run in zip(sizes, runs):
                    t0 = time.perf_counter()
                    result = simulate(algo, graph, size)
                    seconds = time.perf_counter() - t0
                    slowest = max(slowest, (seconds, f"{spec} {name} {algo_name} {format_size(size)}"))
                    ceiling = bound_algbw(b, size)
                    best = size / run.time_us / 1e3
                    print(f"{spec:<11} {name:<13} {algo_name:<12} {format_size(size):>6} {len(algo.transfers):>9} "
                          f"{result.algbw_GBps:>10.2f} {ceiling:>10.2f} {result.algbw_GBps / ceiling:>6.3f} "
                          f"{seconds:>6.3f} {best:>10.2f} {best / ceiling:>6.3f}  {run.protocol} "
                          f"{run.channels}x{run.instances}")
    print(f"slowest simulation: {slowest[0]:.3f} s ({slowest[1]})")


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
