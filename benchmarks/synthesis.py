"""Synthesis speed and quality on TACCL's example configurations (taccl.md §10) plus dgx-a100 x2 and ndv2 x4.

For every configuration and engine: per-stage seconds, model size (variables / constraints summed over
MILP stages), simulated algbw as a share of the bound at the profile's size and at 1 GiB, and the
speed-up over the best baseline (time of baseline / time of ours) at 1K, 1M and 1G; and the speed-up over
the ring at 1K of the algorithm synthesized for 1K (with its step count against the ring's).

TACCL configurations use TACCL's own topology JSON (costs for the profile's chunk size); "the profile's
size" is that chunk size taken as the nccl-tests buffer size. Our own profiles synthesize at 1M.

    .venv/bin/python benchmarks/synthesis.py [--engines greedy,milp] [--time-limit 60] [--only ndv2] [--solver highs]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from autotaccl.baselines import baseline, best_baseline
from autotaccl.bounds import bound_algbw, bounds
from autotaccl.errors import InfeasibleError, InputError
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.simulate import simulate
from autotaccl.sizes import format_size
from autotaccl.sketch import default_sketch, load_sketch
from autotaccl.synth import SynthOptions, synthesize

EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "data" / "taccl-examples"
K, M, G = 1 << 10, 1 << 20, 1 << 30

# (label, collective, hardware, nodes, chunk size of a TACCL profile or None, sketch file or None = default)
CONFIGS = [
    ("ndv2-allgather-sk1-n1", "allgather", "topo-ndv2-1MB", 1, M, "sk1-ndv2-n1"),
    ("ndv2-allgather-cUp6-n1", "allgather", "topo-ndv2-1MB", 1, M, "sk-ndv2-n1-cUp6"),
    ("ndv2-alltoall-sk1-n1", "alltoall", "topo-ndv2-1MB", 1, M, "sk1-ndv2-n1"),
    ("dgx2-allgather-sk1-n1", "allgather", "topo-dgx2-1MB", 1, M, "sk1-dgx2-n1"),
    ("dgx2-allgather-sk-n1", "allgather", "topo-dgx2-1MB", 1, M, "sk-dgx2-n1"),
    ("dgx2-allgather-sk1-n2", "allgather", "topo-dgx2-1MB", 2, M, "sk1-dgx2-n2"),
    ("dgx2-allgather-sk2-n2", "allgather", "topo-dgx2-1KB", 2, K, "sk2-dgx2-n2"),
    ("dgx2-allgather-sk2-n2-1MB", "allgather", "topo-dgx2-1MB", 2, M, "sk2-dgx2-n2"),   # direct-map at 1 MiB costs
    ("ndv2-allgather-sk1-n2", "allgather", "topo-ndv2-1MB", 2, M, "sk1-ndv2-n2"),
    ("ndv2-allgather-sk2-n2", "allgather", "topo-ndv2-1MB", 2, M, "sk2-ndv2-n2"),
    ("ndv2-allgather-sk3-n2", "allgather", "topo-ndv2-1MB", 2, M, "sk3-ndv2-n2"),
    ("dgx2-alltoall-sk1-n2", "alltoall", "topo-dgx2-1MB", 2, M, "sk1-dgx2-n2"),
    ("dgx2-alltoall-sk2-n2", "alltoall", "topo-dgx2-1KB", 2, K, "sk2-dgx2-n2"),
    ("ndv2-alltoall-sk1-n2", "alltoall", "topo-ndv2-1MB", 2, M, "sk1-ndv2-n2"),
    ("ndv2-alltoall-sk2-n2", "alltoall", "topo-ndv2-1KB", 2, K, "sk2-ndv2-n2"),
    ("dgx2-allreduce-sk1-n2", "allreduce", "topo-dgx2-1MB", 2, M, "sk1-dgx2-n2"),
    ("dgx2-allreduce-sk2-n2", "allreduce", "topo-dgx2-1KB", 2, K, "sk2-dgx2-n2"),
    ("ndv2-allreduce-sk1-n2", "allreduce", "topo-ndv2-1MB", 2, M, "sk1-ndv2-n2"),
    ("ndv2-allgather-sk1-n4", "allgather", "topo-ndv2-1MB", 4, M, "sk1-ndv2-n4"),
    ("ndv2-allgather-sk2-n4", "allgather", "topo-ndv2-1MB", 4, M, "sk2-ndv2-n4"),
    ("dgx-a100x2-allgather", "allgather", "dgx-a100", 2, None, None),
    ("dgx-a100x2-reducescatter", "reducescatter", "dgx-a100", 2, None, None),
    ("dgx-a100x2-allreduce", "allreduce", "dgx-a100", 2, None, None),
    ("dgx-a100x2-alltoall", "alltoall", "dgx-a100", 2, None, None),
    ("ndv2x4-allgather", "allgather", "ndv2", 4, None, None),
    ("ndv2x4-allreduce", "allreduce", "ndv2", 4, None, None),
    ("ndv2x4-alltoall", "alltoall", "ndv2", 4, None, None),
]


def row(label, collective, hardware, nodes, chunk, sketch_name, engine, time_limit, solver="highs") -> str:
    if chunk is None:
        profile, size = load_hardware(hardware), M
    else:
        profile, size = load_hardware(EXAMPLES / "topo" / f"{hardware}.json", chunk), chunk
    graph = build_topology(profile, nodes)
    sketch = load_sketch(EXAMPLES / "sketch" / f"{sketch_name}.json") if sketch_name else default_sketch(graph, collective)
    began = time.perf_counter()
    try:
        result = synthesize(graph, collective, sketch, SynthOptions(engine=engine, size=size, time_limit=time_limit,
                                                                        solver=solver))
    except (InfeasibleError, InputError) as err:
        return f"| {label} | {engine} | failed: {err} |" + " |" * 9
    seconds = time.perf_counter() - began
    stages = " ".join(f"{name[:5]} {r.seconds:.1f}" for name, r in result.stages.items())
    variables = sum(r.variables for r in result.stages.values())
    constraints = sum(r.constraints for r in result.stages.values())
    limits = bounds(graph, collective)
    pct = []
    for s in (size, G):
        sim = simulate(result.algorithm, graph, s)
        pct.append(f"{sim.algbw_GBps:.2f} ({100 * sim.algbw_GBps / bound_algbw(limits, s):.0f}%)")
    speedups = []
    try:   # the 1 KiB target: synthesized for 1 KiB, fewer steps than the ring and faster than it
        ring = baseline(graph, collective, "ring")
        small = synthesize(graph, collective, sketch, SynthOptions(engine=engine, size=K, time_limit=time_limit,
                                                                   solver=solver)).algorithm
        speedups.append(f"{simulate(ring, graph, K).time_us / simulate(small, graph, K).time_us:.2f} "
                        f"({small.num_steps} vs {ring.num_steps} steps)")
    except InputError:
        speedups.append("-")
    for s in (K, M, G):
        ours = simulate(result.algorithm, graph, s).time_us
        try:
            name, _, base = best_baseline(graph, collective, s)
            speedups.append(f"{base.time_us / ours:.2f} ({name})")
        except InputError:
            speedups.append("-")
    return (f"| {label} | {engine} | {result.status} | {seconds:.1f} | {stages} | {variables}/{constraints} | "
            f"{format_size(size)}: {pct[0]} | {pct[1]} | {result.algorithm.num_steps} | " + " | ".join(speedups) + " |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="greedy,milp")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per MILP stage")
    parser.add_argument("--only", default="", help="run configurations whose label contains this")
    parser.add_argument("--solver", default="highs", help="auto | highs | gurobi (the targets are for highs)")
    args = parser.parse_args(argv)
    print("| config | engine | status | total s | stage s | vars/cons | algbw GB/s at profile size (% bound) "
          "| algbw at 1G (% bound) | steps | 1K-synth vs ring at 1K | speed-up 1K | speed-up 1M | speed-up 1G |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for config in CONFIGS:
        if args.only and args.only not in config[0]:
            continue
        for engine in args.engines.split(","):
            print(row(*config, engine, args.time_limit, args.solver))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
