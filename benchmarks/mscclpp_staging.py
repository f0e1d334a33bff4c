"""What placement ``anywhere`` costs: MSCCL++ plans whose port-channel puts send from scratch (a local copy
first, so the buffers may sit anywhere in their allocations) against plans that send straight from the
input or output (``start``: the buffers must start their allocations).

    .venv/bin/python benchmarks/mscclpp_staging.py [--topologies ndv2x2,dgx-a100x2] [--sizes 1K,64K,1M,16M,256M]

Per multi-node topology, collective and algorithm (baselines and greedy) it lowers both placements (in
place and out of place, Simple) and prints the staging copies per call, the extra scratch chunks and
operations, and the simulated time of each size with and without staging. The simulator times the IR, so
staging enters it as extra latency on every network edge that carries a staged transfer: the copy's start (``--copy-alpha-us``, default
the profile's smallest link latency inside a node) plus the bytes the put waits for at ``--copy-GBps``
(default the profile's fastest link inside a node: the rate our plans already assume one thread block
drives): one chunk where the lowering copies and puts chunk by chunk, else every staged chunk. The copies
after the first run beside earlier puts, which holds while a copy is faster than the network edge (every
shipped profile); every transfer on such an edge pays the wait, so the figure is an upper bound.
"""
from __future__ import annotations

import argparse

from autotaccl.formats.mscclpp import PlanOptions, lower_plan
from autotaccl.formats.mscclpp.lower.layout import layout, staged
from autotaccl.model.protocols import is_net
from autotaccl.simulate import simulate
from autotaccl.sizes import parse_size

from mscclpp_plans import algorithms, topology

NAMES = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast")


def staged_chunks(algorithm, graph) -> dict[int, int]:
    """Per transfer a staged layout copies into scratch before its port put (in either buffer mode), the
    chunks its put waits to be copied: one when every chunk is staged (the lowering then copies and puts
    chunk by chunk, the next copy beside the last put), else all staged ones."""
    port = tuple(is_net(graph.edges[t.src, t.dst]) for t in algorithm.transfers)
    packets = (False,) * len(algorithm.transfers)
    out: dict[int, int] = {}
    for inplace in (False, True):
        for t, copies in staged(algorithm, layout(algorithm, packets, inplace), port).stage.items():
            n = 1 if len(copies) == len(algorithm.transfers[t].chunks) else len(copies)
            out[t] = max(out.get(t, 0), n)
    return out


def staged_graph(graph, algorithm, which: dict[int, int], size: int, copy_alpha_us: float, copy_GBps: float):
    """``graph`` with each network edge that carries a staged transfer slower to start by its largest
    staging wait (every transfer on that edge pays it: an upper bound)."""
    chunk = algorithm.collective.chunk_bytes(size)
    most: dict[tuple[int, int], int] = {}
    for i, n in which.items():
        t = algorithm.transfers[i]
        most[(t.src, t.dst)] = max(most.get((t.src, t.dst), 0), n)
    out = graph.copy()
    for (u, v), n in most.items():
        edge = out.edges[u, v]
        edge["alpha_us"] = float(edge["alpha_us"]) + copy_alpha_us + n * chunk / (copy_GBps * 1e3)
    return out


def plan_counts(algo, graph, placement: str) -> tuple[int, int, int]:
    """(staging copies, scratch chunks, operations) summed over ranks and both buffer modes."""
    copies = scratch = ops = 0
    for inplace in (False, True):
        plan = lower_plan(algo, graph, PlanOptions(inplace=inplace, placement=placement))
        for g in plan.gpus:
            scratch += g.scratch_chunks
            for tb in g.threadblocks:
                ops += tb.num_operations
                copies += sum(1 for op in tb.ops if op.name == "copy" and op.dst and op.dst[0].type == "s")
    return copies, scratch, ops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", default="ndv2x2,dgx-a100x2")
    parser.add_argument("--sizes", default="1K,64K,1M,16M,256M")
    parser.add_argument("--copy-alpha-us", type=float, help="latency of a staging copy (default: see above)")
    parser.add_argument("--copy-GBps", type=float, help="rate of a staging copy (default: see above)")
    args = parser.parse_args()
    sizes = [parse_size(s, "--sizes") for s in args.sizes.split(",")]
    print(f"{'topology':<11} {'collective':<13} {'algorithm':<12} {'copies':>6} {'+scratch':>8} {'+ops':>6}  "
          + "  ".join(f"{s:>10}" for s in args.sizes.split(",")))
    worst = (1.0, "")
    for spec in args.topologies.split(","):
        graph = topology(spec)
        intra = [d for _, _, d in graph.edges(data=True) if not is_net(d)]
        copy_alpha = args.copy_alpha_us if args.copy_alpha_us is not None else min(d["alpha_us"] for d in intra)
        copy_rate = args.copy_GBps if args.copy_GBps is not None else max(d["bandwidth_GBps"] for d in intra)
        print(f"# {spec}: staging copy {copy_alpha:g} us + bytes at {copy_rate:g} GB/s; per size: simulated time "
              "with staging / without")
        for collective in NAMES:
            for name, algo in algorithms(graph, collective):
                start = plan_counts(algo, graph, "start")
                anywhere = plan_counts(algo, graph, "anywhere")
                which = staged_chunks(algo, graph)
                ratios = []
                for size in sizes:
                    plain = simulate(algo, graph, size).time_us
                    slower = simulate(algo, staged_graph(graph, algo, which, size, copy_alpha, copy_rate),
                                      size).time_us
                    ratios.append(slower / plain)
                    if slower / plain > worst[0]:
                        worst = (slower / plain, f"{spec} {collective} {name} at {size} B")
                print(f"{spec:<11} {collective:<13} {name:<12} {anywhere[0] - start[0]:>6} "
                      f"{anywhere[1] - start[1]:>8} {anywhere[2] - start[2]:>6}  "
                      + "  ".join(f"{r:>9.3f}x" for r in ratios), flush=True)
    print(f"largest cost of staging: {worst[0]:.3f}x ({worst[1] or 'none'})")
    return 0


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
