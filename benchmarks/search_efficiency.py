"""How many trials does the default sampler (TPE) need to get within 2% of the optimum, vs random sampling?

The space is small enough to enumerate: BruteForceSampler evaluates every configuration once (synthesis +
simulation, exactly as `autotaccl tune` does), which gives the optimum and a lookup table; then each sampler
runs on the table for several seeds until a trial is within TOLERANCE of the optimum.

    .venv/bin/python benchmarks/search_efficiency.py [--space FILE] [--collective allgather] [--seeds 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotaccl.tuning.cache import SynthesisCache  # noqa: E402
from autotaccl.tuning.evaluate import score, simulate_times, size_results, synth_options, synthesize_cached  # noqa: E402
from autotaccl.tuning.reference import compute_reference  # noqa: E402
from autotaccl.tuning.explore import enqueue_unseen, is_repeat, stuck  # noqa: E402
from autotaccl.tuning.sweep import make_sampler  # noqa: E402
from autotaccl.tuning.space import enumerate_space, load_space, params_to_sketch, sample, settings  # noqa: E402

TOLERANCE = 0.02
SPACE = {
    "target": {"hardware": "ndv2", "nodes": 2, "collectives": ["allgather", "alltoall", "allreduce"]},
    "sizes": "1K:64M:x8",
    "fixed": {"engine": "greedy"},
    "parameters": {
        "internode_conn": {"type": "categorical", "choices": ["relay", "direct-map", "fully-connected"]},
        "relay_map": {"type": "categorical", "choices": ["0:1", "1:0", "0:1,1:0", "0:0,1:1"],
                      "when": {"internode_conn": "relay"}},
        "enforce_ordering": {"type": "categorical", "choices": [False, True], "when": {"internode_conn": "relay"}},
        "symmetry": {"type": "categorical", "choices": ["8/16", "none"]},
        "chunkup": {"type": "int", "low": 1, "high": 4},
    },
}


def key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", help="search space YAML without float parameters (default: a built-in NDv2 x2 space)")
    parser.add_argument("--collective", help="collective of the space (default: its first)")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    with tempfile.TemporaryDirectory() as tmp:
        if args.space:
            space = load_space(args.space)
        else:
            import yaml

            path = Path(tmp) / "space.yaml"
            path.write_text(yaml.safe_dump(SPACE, sort_keys=False))
            space = load_space(path)
        collective = args.collective or space.collectives[0]
        graph = space.graph()
        ref = compute_reference(graph, collective, space.sizes, "sim")
        cache = SynthesisCache(Path(tmp) / "cache")
        total = len(enumerate_space(space))
        table: dict[tuple, float] = {}

        def evaluate(params: dict) -> float:
            st = settings(space, params)
            synth = synthesize_cached(graph, collective, params_to_sketch(space, params), synth_options(st), cache)
            results = size_results(simulate_times(synth.algorithm, graph, space.sizes, st.protocol, st.instances),
                                   ref, collective, graph.number_of_nodes(), simulated=True)
            return score(results)

        start = time.perf_counter()
        brute = optuna.create_study(sampler=optuna.samplers.BruteForceSampler(seed=0))

        def exhaustive(trial):
            params = sample(trial, space)
            value = evaluate(params)
            table[key({k: v for k, v in params.items() if k not in space.fixed})] = value
            return value

        brute.optimize(exhaustive, n_trials=10 * total)
        optimum = min(table.values())
        print(f"space: {space.target_name} {collective}, {total} configurations; enumerated {len(table)} in "
              f"{time.perf_counter() - start:.1f} s; optimum {optimum:.4f} (geomean time / best baseline)")
        good = sum(v <= optimum * (1 + TOLERANCE) for v in table.values())
        print(f"{good} configuration(s) within {TOLERANCE:.0%} of the optimum")

        def trials_needed(sampler, explore: bool = True) -> tuple[int, int]:
            """(trials, distinct configurations) until one is within TOLERANCE; repeats hit the synthesis
            cache, so the distinct count is what a sweep pays in synthesis and measurement."""
            study = optuna.create_study(sampler=sampler)
            seen = set()
            for n in range(1, 4 * total + 1):
                trial = study.ask()
                params = sample(trial, space)
                if explore and is_repeat(study, params, space) and stuck(study):   # as the tune objective does
                    enqueue_unseen(study, space, seed=n)
                k = key({k: v for k, v in params.items() if k not in space.fixed})
                seen.add(k)
                study.tell(trial, table[k])
                if table[k] <= optimum * (1 + TOLERANCE):
                    return n, len(seen)
            return 4 * total, len(seen)

        rows = {}
        variants = (("tpe (default)", lambda s: make_sampler("tpe", s), True),   # autotaccl: univariate + repeats
                    ("tpe no-explore", lambda s: make_sampler("tpe", s), False),
                    ("tpe optuna5", lambda s: optuna.samplers.TPESampler(seed=s), False),  # multivariate
                    ("random", lambda s: optuna.samplers.RandomSampler(seed=s), False))
        for name, make, explore in variants:
            rows[name] = [trials_needed(make(seed), explore) for seed in range(args.seeds)]
    print(f"\nto reach optimum+{TOLERANCE:.0%}: trials (distinct configurations evaluated), per seed")
    print(f"{'sampler':<15} {'per seed':<58} {'median trials':>13} {'median distinct':>15} {'% of space':>10}")
    for name, counts in rows.items():
        trials = statistics.median(c[0] for c in counts)
        distinct = statistics.median(c[1] for c in counts)
        cells = " ".join(f"{t}({d})" for t, d in counts)
        print(f"{name:<15} {cells:<58} {trials:>13.1f} {distinct:>15.1f} {100 * distinct / total:>9.1f}%")
    tpe = statistics.median(c[1] for c in rows["tpe (default)"])
    rnd = statistics.median(c[1] for c in rows["random"])
    print(f"\nTPE / random (median distinct evaluations): {tpe / rnd:.2f}; goal TPE <= 25% of the space: "
          f"{'met' if tpe <= 0.25 * total else 'NOT met'} ({tpe:.0f} of {total})")
    return 0


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
