"""A small sweep from Python: NDv2 x 2 AllGather on the simulator, tracked in MLflow, exported as a table.

    python examples/sweep.py [OUT]        # default ./sweep-example; about a minute on 2 cores

The same steps as ``autotaccl synth``, ``tune`` and ``export``, through ``import autotaccl``.
"""
import sys
from pathlib import Path

import autotaccl

out = Path(sys.argv[1] if len(sys.argv) > 1 else "sweep-example").resolve()

# one algorithm: the hardware's default sketch, the greedy engine, one msccl-executor loads, simulated
# against the bound
graph = autotaccl.build_topology(autotaccl.load_hardware("ndv2"), nodes=2)
options = autotaccl.SynthOptions(engine="greedy", runtime=autotaccl.loader("msccl-executor"))
result = autotaccl.synthesize(graph, "allgather", options=options)
autotaccl.verify(result.algorithm, graph)
time_us = autotaccl.simulate(result.algorithm, graph, 1 << 20).time_us
ceiling = autotaccl.bounds(graph, "allgather").algbw_GBps
print(f"default sketch: {time_us:.1f} us at 1M ({(1 << 20) / time_us / 1e3:.1f} of {ceiling:.1f} GB/s)")

# a sweep over a search space built in Python (the schema of search_spaces/README.md)
space = autotaccl.space_from_dict({
    "name": "example",
    "target": {"hardware": "ndv2", "nodes": 2, "collective": "allgather"},
    "sizes": "1K:16M:x4",
    "fixed": {"engine": "greedy"},
    "parameters": {
        "internode_conn": {"type": "categorical", "choices": ["relay", "direct-map"]},
        "relay_map": {"type": "categorical", "choices": ["0:1", "1:0"], "when": {"internode_conn": "relay"}},
        "chunkup": {"type": "int", "low": 1, "high": 2},
    },
})
request = autotaccl.TuneRequest(space=space, trials=6, out=str(out / "runs"), sampler="random", seed=0)
summaries = autotaccl.tune(request)
for summary in summaries:
    print(f"study {summary.study}: best objective {summary.best_value:.3f} (trial {summary.best_trial})")
    for w in summary.per_size:
        print(f"  {w.size:>9} B  {w.winner:<22} {w.time_us:9.2f} us  {w.speedup:.2f}x the best baseline")

# the per-size winners as a table and checked MSCCL XML files
ranges = autotaccl.export(f"sqlite:///{out / 'runs' / 'mlflow.db'}", None, out / "export")
print(f"exported {len(ranges)} size range(s) to {out / 'export'}")
