"""Today's fabrics side by side: the bound, the best baseline and what each costs to compute.

    .venv/bin/python benchmarks/fabrics.py [--topologies dgx-h100-railx2,gb200-nvl72x1] [--size 1G]
        [--collectives allgather,reducescatter,allreduce,alltoall] [--no-baselines] [--oversubscription R]

Per topology it prints the wall and CPU seconds of ``build_topology``; per collective the algbw ceiling
at ``--size`` (``bound_algbw``), the seconds ``bounds`` took, the fastest baseline in the simulator
(``best_baseline``: every applicable baseline, rings with 1, 2 and up to 16 channels), its algbw, the
ratio baseline / bound and the seconds that search took. ``--no-baselines`` times only graph and bounds
(the 144-576-rank scale check); ``--oversubscription`` replaces the ratio of every rail profile.
"""
from __future__ import annotations

import argparse
import dataclasses
import resource
import time

from autotaccl.baselines import best_baseline
from autotaccl.bounds import bound_algbw, bounds
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.sizes import parse_size

DEFAULT = ",".join(f"{p}x{n}" for p in ("dgx-h100-rail", "dgx-b200", "gb200-nvl72") for n in (1, 2, 4))


def timed(fn, *args):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", default=DEFAULT)
    parser.add_argument("--collectives", default="allgather,reducescatter,allreduce,alltoall")
    parser.add_argument("--size", default="1G")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--oversubscription", type=float)
    args = parser.parse_args()
    size = parse_size(args.size)
    print(f"{'topology':<17} {'ranks':>5} {'collective':<13} {'bound GB/s':>10} {'bounds s':>8} "
          f"{'best baseline':<16} {'GB/s':>8} {'ratio':>6} {'search s':>8}")
    for spec in args.topologies.split(","):
        name, _, nodes = spec.rpartition("x")
        profile = load_hardware(name)
        if args.oversubscription and profile.network:
            profile = dataclasses.replace(profile, network=dataclasses.replace(
                profile.network, oversubscription=args.oversubscription))
        graph, wall, cpu = timed(build_topology, profile, int(nodes))
        ranks = graph.number_of_nodes()
        print(f"{spec:<17} {ranks:>5} {'(graph)':<13} {graph.number_of_edges():>10} edges, "
              f"build {wall:.2f} s wall / {cpu:.2f} s CPU")
        for collective in args.collectives.split(","):
            limit, bwall, _ = timed(bounds, graph, collective)
            ceiling = bound_algbw(limit, size)
            row = f"{spec:<17} {ranks:>5} {collective:<13} {ceiling:>10.2f} {bwall:>8.2f}"
            if not args.no_baselines:
                (algo, algorithm, result), swall, _ = timed(best_baseline, graph, collective, size)
                label = f"{algo}x{algorithm.metadata['channels']}" if "channels" in algorithm.metadata else algo
                row += f" {label:<16} {result.algbw_GBps:>8.2f} {result.algbw_GBps / ceiling:>6.3f} {swall:>8.2f}"
            print(row, flush=True)
    print(f"peak memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
