"""MILP synthesis targets: wall time, model sizes, and simulated bandwidth as a share of the bound.

Runs the milp engine (HiGHS, 2 threads) on TACCL's shipped sketches and prints one line per case:
stage sizes (variables/constraints), seconds, and the simulated algbw at 1 GiB next to the bound
from autotaccl.bounds, with the target ratio and whether it was met.

    .venv/bin/python benchmarks/synth_stages.py [--only ndv2x2-ag] [--time-limit 60]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from autotaccl.bounds import bound_algbw, bounds
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.simulate import simulate
from autotaccl.sketch import load_sketch
from autotaccl.synth import SynthOptions, synthesize

SKETCHES = Path(__file__).resolve().parents[2] / "shared" / "data" / "taccl-examples" / "sketch"
MiB, GiB = 1 << 20, 1 << 30

# name, hardware, nodes, collective, sketch, synthesis size (bytes), target ratio at 1 GiB, max seconds
CASES = [
    ("ndv2x2-ag-1MiBchunks", "ndv2", 2, "allgather", "sk1-ndv2-n2", 16 * MiB, 0.98, 60),
    ("ndv2x2-ag-tuned1GiB", "ndv2", 2, "allgather", "sk1-ndv2-n2", GiB, 0.98, 60),
    ("ndv2x2-a2a-1MiBchunks", "ndv2", 2, "alltoall", "sk1-ndv2-n2", 16 * MiB, 0.98, None),
    ("ndv2x2-ar-1MiBchunks", "ndv2", 2, "allreduce", "sk1-ndv2-n2", 16 * MiB, 0.90, None),
    ("ndv2x2-ar-tuned1GiB", "ndv2", 2, "allreduce", "sk1-ndv2-n2", GiB, 0.90, None),
    ("dgx2x2-ag-sk1-tuned1GiB", "dgx2", 2, "allgather", "sk1-dgx2-n2", GiB, 0.95, 600),
    ("dgx2x2-ag-sk2-tuned1GiB", "dgx2", 2, "allgather", "sk2-dgx2-n2", GiB, 0.95, 600),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run cases whose name contains this")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per MILP stage")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(f"{'case':26} {'secs':>7} {'status':10} {'algbw@1GiB':>10} {'bound':>8} {'ratio':>7} {'target':>6}  met  stages (vars/cons)")
    for name, hw, nodes, coll, sk, size, target, max_s in CASES:
        if args.only not in name:
            continue
        graph = build_topology(load_hardware(hw), nodes)
        sketch = load_sketch(SKETCHES / f"{sk}.json")
        began = time.perf_counter()
        result = synthesize(graph, coll, sketch, SynthOptions(engine="milp", solver="highs", threads=args.threads,
                                                              time_limit=args.time_limit, size=size))
        seconds = time.perf_counter() - began
        sim = simulate(result.algorithm, graph, GiB)
        ceiling = bound_algbw(bounds(graph, coll), GiB)
        ratio = sim.algbw_GBps / ceiling
        met = ratio >= target and (max_s is None or seconds <= max_s)
        sizes = " ".join(f"{k}={v.variables}/{v.constraints}" for k, v in result.stages.items() if v.variables)
        print(f"{name:26} {seconds:7.1f} {result.status:10} {sim.algbw_GBps:10.3f} {ceiling:8.3f} {ratio:7.2%} "
              f"{target:6.0%}  {'yes' if met else 'NO ':3}  {sizes}", flush=True)


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
