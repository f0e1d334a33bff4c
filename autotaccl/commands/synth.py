"""``autotaccl synth``: synthesize one algorithm from a sketch, report each stage, simulate it, compare."""
from __future__ import annotations

from ..baselines import best_baselines
from ..bounds import bound_algbw, bounds
from ..errors import InputError
from ..formats.loading import RUNTIMES, loader
from ..milp.solution import SOLVERS
from ..model.algorithm import save_algorithm
from ..simulate import simulate
from ..sizes import format_size, parse_size
from ..sketch import ENGINES, default_sketch, load_sketch
from ..sketch.knobs import DEFAULT_ENGINE
from ..synth import SynthOptions, synthesize
from .common import add_hardware_args, add_run_args, collective_arg, print_json, run_from_args, topology_from_args

REFERENCE_SIZE = 1 << 30
ANY_RUNTIME = "any"


def register(subparsers) -> None:
    parser = subparsers.add_parser("synth", help="synthesize an algorithm from a communication sketch")
    add_hardware_args(parser)
    parser.add_argument("--collective", required=True,
                        help="allgather | reducescatter | allreduce | alltoall | broadcast")
    parser.add_argument("--sketch", help="TACCL sketch JSON or YAML (default: the hardware's default sketch)")
    parser.add_argument("--size", default="1M", help="buffer size to synthesize for (nccl-tests convention; default 1M)")
    parser.add_argument("--engine", choices=ENGINES,
                        help="milp (TACCL's stages) or greedy (seconds); default: the sketch's, else greedy")
    parser.add_argument("--solver", choices=SOLVERS, default="auto", help="MILP solver (default auto)")
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds per MILP stage (default 600)")
    parser.add_argument("--threads", type=int, default=1, help="solver threads (default 1)")
    parser.add_argument("--mip-gap", type=float, default=1e-4, help="relative MIP gap (default 1e-4)")
    add_run_args(parser, "to choose the schedule for and simulate it with")
    parser.add_argument("--runtime", choices=RUNTIMES + (ANY_RUNTIME,), default="msccl-executor",
                        help="choose only schedules this runtime loads with --protocol and --instances (their "
                             "lowering fits its limits; default msccl-executor, as `lower` writes; any: no check)")
    parser.add_argument("-o", "--output", help="write the algorithm JSON here")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args) -> int:
    collective = collective_arg(args.collective)      # here, not as argparse's type: one line listing the names
    graph = topology_from_args(args)
    size = parse_size(args.size, "--size")
    protocol, instances = run_from_args(args)
    sketch = load_sketch(args.sketch) if args.sketch else default_sketch(graph, collective)
    engine = args.engine or sketch.engine or DEFAULT_ENGINE
    runtime = None if args.runtime == ANY_RUNTIME else loader(args.runtime, graph)
    options = SynthOptions(engine=engine, solver=args.solver, time_limit=args.time_limit, threads=args.threads,
                           mip_gap=args.mip_gap, size=size, protocol=protocol, instances=instances, runtime=runtime)
    result = synthesize(graph, collective, sketch, options)
    if args.output:
        try:
            save_algorithm(result.algorithm, args.output)
        except OSError as err:
            raise InputError(args.output, "-o", f"a writable path ({err.strerror})") from None

    limits = bounds(graph, collective)
    sizes = sorted({size, REFERENCE_SIZE})
    simulated = []
    for s in sizes:
        sim = simulate(result.algorithm, graph, s, protocol, instances)
        simulated.append({"bytes": s, "time_us": sim.time_us, "algbw": sim.algbw_GBps,
                          "bound_algbw": bound_algbw(limits, s)})
    try:
        baseline = [{"bytes": s, "name": name, "time_us": base.time_us, "algbw": base.algbw_GBps}
                    for s, (name, _, base) in zip(sizes, best_baselines(graph, collective, sizes))]
    except InputError:
        baseline = [{"bytes": s, "name": None, "time_us": None, "algbw": None} for s in sizes]
    stages = {name: {"seconds": r.seconds, "variables": r.variables, "constraints": r.constraints,
                     "status": r.status, "solver": r.solver, "message": r.message}
              for name, r in result.stages.items()}
    if args.json:
        print_json({"status": result.status, "engine": engine, "protocol": protocol, "instances": instances,
                    "runtime": args.runtime, "stages": stages,
                    "synthesis_seconds": result.seconds, "steps": result.algorithm.num_steps,
                    "transfers": len(result.algorithm.transfers), "simulated": simulated, "baseline": baseline,
                    "output": args.output})
        return 0
    loads = "" if runtime is None else f", loads in {runtime.name}"
    print(f"{collective} on {graph.graph['name']} ({engine}, for {protocol} x {instances}{loads}): {result.status}, "
          f"{len(result.algorithm.transfers)} transfers in {result.algorithm.num_steps} steps")
    print(f"{'stage':<11} {'seconds':>8} {'vars':>7} {'cons':>7}  status      solver")
    for name, r in stages.items():
        print(f"{name:<11} {r['seconds']:>8.2f} {r['variables']:>7} {r['constraints']:>7}  {r['status']:<11} {r['solver']}")
    print(f"synthesis: {result.seconds:.2f} s")
    for sim, base in zip(simulated, baseline):
        pct = 100 * sim["algbw"] / sim["bound_algbw"] if sim["bound_algbw"] else float("nan")
        versus = (f"best baseline {base['name']} {base['algbw']:.2f} GB/s ({sim['algbw'] / base['algbw']:.2f}x)"
                  if base["algbw"] else "no baseline applies")
        print(f"{format_size(sim['bytes']):>6}: {sim['time_us']:.1f} us, {sim['algbw']:.2f} GB/s algbw, "
              f"{pct:.0f}% of bound; {versus}")
    if args.output:
        print(f"wrote {args.output}")
    return 0
