"""Every baseline and greedy-synthesized algorithm lowered to MSCCL++ plans: how many pass check-plan, and
their thread-block and operation counts (no benchmark runs: the figure is about the plans themselves).

    .venv/bin/python benchmarks/mscclpp_plans.py [--topologies ndv2x1,ndv2x2,...] [--protos Simple,LL]

Per topology, collective and algorithm it lowers out-of-place and in-place for each protocol (4 plans by
default), each proven by the replaying checker inside ``lower_plan``; it prints how many passed, the most
thread blocks on one rank and operations in one block (the executor allows 64), the operations of the
out-of-place Simple plan, and the seconds lowering and checking took. Where the switch reduces (NVLS),
the row ``switch`` is greedy's switch schedule in 4 pieces per cell (switch channels, Simple only).
"""
from __future__ import annotations

import argparse
import time

from autotaccl.baselines import applicable_baselines, baseline
from autotaccl.errors import InputError
from autotaccl.formats.mscclpp import PlanOptions, lower_plan, plan_stats
from autotaccl.model.collectives import NAMES
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.sketch import default_sketch, logical_topology
from autotaccl.synth import SynthOptions, synthesize
from autotaccl.synth.greedy.strategy import NotApplicable
from autotaccl.synth.greedy.switch import switch_schedule, switch_schedules

TOPOLOGIES = "ndv2x1,ndv2x2,dgx2x1,dgx2x2,dgx-a100x1,dgx-a100x2,dgx-h100x1,dgx-h100x2"


def topology(spec: str):
    profile, _, nodes = spec.rpartition("x")
    return build_topology(load_hardware(profile), int(nodes))


def algorithms(graph, collective: str, protos: list[str]):
    """(name, algorithm, the protocols it is lowered in)."""
    for name in applicable_baselines(graph, collective):
        yield name, baseline(graph, collective, name), protos
    yield "greedy", synthesize(graph, collective, None, SynthOptions(engine="greedy")).algorithm, protos
    lt = logical_topology(graph, collective, default_sketch(graph, collective), 1 << 30)
    try:
        yield "switch", switch_schedule_checked(lt), [p for p in protos if p == "Simple"]
    except NotApplicable:
        pass


def switch_schedule_checked(lt):
    """Greedy's switch schedule in 4 pieces per cell (NotApplicable where the switch cannot run it)."""
    next(switch_schedules(lt))            # raises NotApplicable where the switch cannot run it
    return switch_schedule(lt, (1,) * 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", default=TOPOLOGIES)
    parser.add_argument("--protos", default="Simple,LL")
    args = parser.parse_args()
    protos = args.protos.split(",")
    print(f"{'topology':<11} {'collective':<13} {'algorithm':<12} {'ranks':>5} {'pass':>5} {'tb/rank':>7} "
          f"{'ops/tb':>6} {'ops':>6} {'seconds':>7}")
    passed = total = 0
    failures = []
    for spec in args.topologies.split(","):
        graph = topology(spec)
        for collective in NAMES:
            for name, algo, lowered_in in algorithms(graph, collective, protos):
                ok, tbs, per_tb, ops = 0, 0, 0, None
                t0 = time.perf_counter()
                for proto in lowered_in:
                    for inplace in (False, True):
                        total += 1
                        try:
                            stats = plan_stats(lower_plan(algo, graph, PlanOptions(inplace=inplace, proto=proto)))
                        except InputError as err:
                            failures.append(f"{spec} {collective} {name} {proto} "
                                            f"{'inplace' if inplace else 'outofplace'}: {err}")
                            continue
                        ok += 1
                        tbs = max(tbs, stats["max_threadblocks_per_rank"])
                        per_tb = max(per_tb, stats["max_operations_per_threadblock"])
                        if ops is None:
                            ops = stats["operations"]
                passed += ok
                seconds = time.perf_counter() - t0
                print(f"{spec:<11} {collective:<13} {name:<12} {algo.ranks:>5} {ok:>2}/{2 * len(lowered_in):<2} "
                      f"{tbs:>7} {per_tb:>6} {ops if ops is not None else '-':>6} {seconds:>7.1f}", flush=True)
    print(f"{passed}/{total} plans pass check-plan")
    for line in failures:
        print(f"  FAILED {line}")


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
