"""How fast ``simulate`` runs on the largest baseline cases: seconds per call and instances per second.

    .venv/bin/python benchmarks/simulator_speed.py [--size 1G] [--repeat 3]

An *instance* is one transfer in one pipelined round, so a call schedules ``transfers x rounds`` of
them; ``inst/s`` is that count over the seconds per call (best of ``--repeat``), which makes cases of
different sizes comparable. The default cases are the ones that used to dominate tuning time: the
``direct`` AllGather/AllToAll on torus2d x4, where 3,584 transfers x 16 rounds share 8 NICs.
Before the group/bundle event loop (commit a794d8b) these two took 21-25 s of CPU per call at 1 GiB
on the team machine; the exclusive-path loop then took 0.7-0.9 s, and the fluid (link-sharing)
loop of issue 11, which updates shared rates once per batch of simultaneous events, 0.5-0.6 s. ``plan s``
is the size-independent preparation (dependencies, connections, arcs) that ``simulate_sizes`` shares
between sizes.
"""
from __future__ import annotations

import argparse
import time

from autotaccl.baselines import baseline
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.simulate import _plan, rounds, simulate
from autotaccl.sizes import format_size, parse_size

CASES = [("torus2d", 4, "alltoall", "direct"), ("torus2d", 4, "allgather", "direct"),
         ("dgx2", 4, "allreduce", "hierarchical"), ("dgx-h100", 8, "allreduce", "ring"),
         ("dgx2", 2, "allreduce", "tree"), ("torus2d", 2, "allgather", "direct")]


def best_of(repeat: int, call) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        call()
        times.append(time.process_time() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1G")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    size = parse_size(args.size)
    print(f"{'case':<36} {'size':>6} {'transfers':>9} {'rounds':>6} {'plan s':>7} {'s/call':>7} {'inst/s':>9}")
    for profile, nodes, collective, name in CASES:
        graph = build_topology(load_hardware(profile), nodes)
        algorithm = baseline(graph, collective, name)
        k = rounds(algorithm.collective.chunk_bytes(size))
        plan_s = best_of(args.repeat, lambda: _plan(algorithm, graph))
        call_s = best_of(args.repeat, lambda: simulate(algorithm, graph, size))
        instances = len(algorithm.transfers) * k
        print(f"{f'{profile} x{nodes} {collective} {name}':<36} {format_size(size):>6} {len(algorithm.transfers):>9} "
              f"{k:>6} {plan_s:>7.3f} {call_s:>7.3f} {instances / call_s:>9.0f}")


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
