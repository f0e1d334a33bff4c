"""Our MSCCL++ plan reader and checker on plan files written elsewhere, and our plans' JSON keys beside theirs.

    .venv/bin/python benchmarks/mscclpp_conformance.py PLAN.json [PLAN.json ...]

Give it plans from the MSCCL++ repository (``test/executor-tests/execution-plans/*.json``,
``test/execution-files/*.json``, or ones its DSL printed). For each file it prints whether the strict
reader takes it (it follows the executor's parser), the checker's verdict for the buffer mode the plan
is for, the verdict with the buffers inside bigger allocations (``--offsets``), and how many port puts
send straight from the input or output (the rule that makes a plan depend on where its buffers sit). Then it lists, per JSON level (top, GPU, channel, remote buffer, thread block, its channel and
buffer refs, each operation name, buffer references), the keys our lowered plans write that none of the
given files has, and the keys the files have that ours never write (ours include a switch schedule's plan).
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from autotaccl.baselines import baseline
from autotaccl.errors import InputError
from autotaccl.formats.mscclpp import PlanOptions, check_plan, lower_plan, read_plan, to_json
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.sketch import default_sketch, logical_topology
from autotaccl.synth.greedy.switch import switch_schedule


def keys(doc: dict, out: dict[str, set]) -> None:
    """Every key per level of one plan document."""
    out["top"] |= set(doc)
    for g in doc.get("gpus", []):
        out["gpu"] |= set(g)
        for ch in g.get("channels", []):
            out[f"channel:{ch.get('channel_type')}"] |= set(ch)
        for rb in g.get("remote_buffers", []):
            out["remote_buffer"] |= set(rb)
        for sem in g.get("semaphores", []):
            out["semaphore"] |= set(sem)
        for tb in g.get("threadblocks", []):
            out["threadblock"] |= set(tb)
            for ch in tb.get("channels", []):
                out["threadblock.channel"] |= set(ch)
            for ref in tb.get("remote_buffer_refs", []):
                out["threadblock.remote_buffer_ref"] |= set(ref)
            for op in tb.get("ops", []):
                out[f"op:{op.get('name')}"] |= set(op)
                for side in ("src_buff", "dst_buff"):
                    for ref in op.get(side, []):
                        kind = "local" if "type" in ref else "switch" if "switch_channel_id" in ref else "peer"
                        out[f"buffer_ref:{kind}"] |= set(ref)


def port_puts_from_buffers(plan) -> int:
    """Port-channel puts whose source is the input or output: the executor reads them from the registered
    memory at the plan's index, right only where that buffer starts its allocation."""
    return sum(1 for g in plan.gpus for tb in g.threadblocks for op in tb.ops
               if op.channel_type == "port" and op.name in ("put", "pws", "pwsf")
               for ref in op.src if ref.type in ("i", "o"))


def ours() -> dict[str, set]:
    out: dict[str, set] = defaultdict(set)
    for hw, nodes, coll, algo in (("ndv2", 2, "allreduce", "ring"), ("ndv2", 2, "alltoall", "direct"),
                                  ("ndv2", 1, "broadcast", "tree")):
        graph = build_topology(load_hardware(hw), nodes)
        for proto in ("Simple", "LL"):
            keys(to_json(lower_plan(baseline(graph, coll, algo), graph, PlanOptions(proto=proto))), out)
    graph = build_topology(load_hardware("dgx-h100"), 2)         # switch channels, glres and gstore
    lt = logical_topology(graph, "allreduce", default_sketch(graph, "allreduce"), 1 << 30)
    keys(to_json(lower_plan(switch_schedule(lt, (1,)), graph, PlanOptions())), out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plans", nargs="+", type=Path)
    args = parser.parse_args()
    theirs: dict[str, set] = defaultdict(set)
    for path in args.plans:
        try:
            plan, source = read_plan(path)
        except InputError as err:
            print(f"{path.name}: the reader refuses it: {err}")
            continue
        keys(json.loads(path.read_text()), theirs)
        report = check_plan(plan, source, "plan")
        print(f"{path.name}: {'valid' if report.valid else 'INVALID'} ({report.modes[0]}, {report.calls} calls)"
              + ("" if report.valid else f": {report.first}"))
        if report.valid:
            shifted = check_plan(plan, source, "plan", offsets=True)
            print(f"  buffers inside bigger allocations (--offsets): {'valid' if shifted.valid else 'INVALID'}"
                  + ("" if shifted.valid else f": {shifted.first}"))
        direct = port_puts_from_buffers(plan)
        print(f"  port puts straight from the input or output (the port-put rule): {direct or 'none'}")
    mine = ours()
    print("\nkeys per level: ours only / theirs only")
    for level in sorted(set(mine) | set(theirs)):
        absent = level not in theirs
        only_ours, only_theirs = sorted(mine[level] - theirs[level]), sorted(theirs[level] - mine[level])
        if absent:
            only_ours = ["(level absent from the given files)"]
        if only_ours or only_theirs:
            print(f"  {level:<32} {', '.join(only_ours) or '-':<40} {', '.join(only_theirs) or '-'}")


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
