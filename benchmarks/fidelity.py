"""Does the simulator agree with real machines? Calibrate on one measured table, predict the others.

    .venv/bin/python benchmarks/fidelity.py [--verbose] [--skip-machine] [--np 4]

Part 1, public tables (``shared/data/nccl-tests-public``): for every machine with several tables,
``autotaccl calibrate`` fits the shipped profile to one of them (the one where NCCL chose freely or, for
the Together H100 runs, the widest ring sweep), and ``nccl-model`` predicts every table of that machine
with the calibrated profile and with the shipped one. Per table: the median and worst |error| of
predicted busbw for sizes >= 64 KiB, and the median over all sizes (error = predicted / measured - 1,
measured = the fastest of out-of-place, in-place and repeated rows). The targets (issue 11) are 15% /
30% for >= 64 KiB and 25% over all sizes, on the tables the fit did not see.

What counts as one machine: the same hardware at the same node count under the same NCCL generation.
A fit can only predict what its table constrains: a 1-node table holds no NIC, network latency or
across-node LL term, and NCCL 2.7 is other software (no ``llMaxBws``, other latencies). So the targets
are judged on the unseen tables of the same scale and software; the cross-scale and NCCL-2.7 tables
are predicted too (the second summary line), to show how far a fit carries beyond what it saw.

Part 2, this machine: ``autotaccl profile`` measures the links between ``--np`` MPI ranks, ``autotaccl
bench --baseline mpi`` measures our ring AllGather with real ranks, ``autotaccl calibrate`` fits that
profile to the ring's table, and the sim runner on the calibrated profile predicts ring, direct and
synthesized algorithms that the mpi runner then measures: Spearman's rank correlation of predicted
against measured time over every algorithm x size pair (target 0.8), and within each size.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.nccl_model import nccl_model
from runners.calibrate import Observation, calibrate
from runners.nccl_output import read_table

TABLES = Path(__file__).resolve().parents[2] / "shared" / "data" / "nccl-tests-public"
KiB = 1 << 10
RING = ("ring",)
TARGETS = (0.15, 0.30, 0.25)     # issue 11: median and worst >= 64 KiB, median over all sizes

# (machine, shipped profile or (profile, host CPU vendor where it differs from the profile's: AWS p5 runs AMD
# EPYC, p4d/p4de Intel Xeon), [(table, nodes, NCCL_ALGO restriction, why it may miss)]); the first is fitted
GROUPS = [
    ("H100 SXM, Together AI", "dgx-h100", [
        ("03-h100-sxm-1node-allreduce-ring.txt", 1, RING, ""),
        ("04-h100-sxm-1node-allgather-ring.txt", 1, RING, ""),
        ("06-h100-sxm-1node-allreduce-nvls.txt", 1, None, ""),
        ("07-h100-sxm-1node-allreduce-ring-samenodes-as-06.txt", 1, RING, "")]),
    ("H100, AWS p5.48xlarge", ("dgx-h100", "amd"), [
        ("19-h100-aws-p5-1node-allreduce-8B-16G.txt", 1, None, ""),
        ("09-h100-aws-p5-2node-efa-allreduce.txt", 2, None, "cross-scale: EFA's latency is in no 1-node table")]),
    ("H100 SXM, xxrjun cluster01", "dgx-h100", [
        ("10-h100-sxm-1node-allreduce-nccl2.29-32M-16G.txt", 1, None, ""),
        ("14-h100-10node-allreduce-nccl2.29-32M-16G.txt", 10, None, "cross-scale: 10 nodes' network is in no 1-node table")]),
    ("A100 40G, Microsoft SuperBench", "dgx-a100", [
        ("24-a100-40g-1node-allreduce-superbench.txt", 1, None, ""),
        ("25-a100-40g-1node-allgather-superbench.txt", 1, None, "")]),
    ("A100 40G, OCI BM.GPU4.8", "dgx-a100", [
        ("01-a100-40g-oci-bm-gpu4.8-1node-allreduce.txt", 1, None, ""),
        ("02-a100-40g-oci-2node-roce-allreduce-untuned.txt", 2, None,
         "cross-scale, and an untuned RoCE fabric (INDEX.md: 'sub-optimal RoCE example')")]),
    ("A100, 8x HDR InfiniBand", "dgx-a100", [
        ("20-a100-80g-azure-ndmv4-2node-ib-allreduce.txt", 2, None, ""),
        ("21-a100-dgx-2node-ib-hdr-allreduce-ring.txt", 2, RING, ""),
        ("22-a100-dgx-4node-ib-hdr-allreduce.txt", 4, None, "")]),
    ("A100, AWS p4d/p4de EFA 4x100G", ("dgx-a100", "intel"), [
        ("31-a100-40g-p4d-2node-efa-allreduce-nccl2.9.9-eks.txt", 2, RING, ""),
        ("30-a100-40g-p4d-2node-efa-allreduce-ring-nccl2.7.txt", 2, RING, "older software: NCCL 2.7.8 reaches 28.7 GB/s "
         "where 2.9.9 reaches 43.8 on the same instance type"),
        ("18-a100-80g-aws-p4de-2node-efa-allreduce.txt", 2, None, "")]),
]


def shipped(hw):
    """The shipped profile ``hw``, or ``(name, cpu)``: that profile on another host CPU."""
    if isinstance(hw, str):
        return load_hardware(hw)
    base = load_hardware(hw[0])
    return replace(base, nccl=replace(base.nccl, cpu=hw[1]))


def observation(name: str, algorithms) -> Observation:
    table = read_table(TABLES / name)
    times = table.times()
    return Observation(name, table.collective, tuple(times), tuple(times.values()), algorithms)


def errors(profile, nodes: int, obs: Observation) -> list[tuple[int, float, float, str]]:
    """(size, measured µs, predicted µs, algorithm/protocol) and busbw error per size."""
    rows = nccl_model(build_topology(profile, nodes), obs.collective, obs.sizes, obs.algorithms).rows
    return [(s, m, r.time_us, f"{r.algorithm}/{r.protocol}") for s, m, r in zip(obs.sizes, obs.times_us, rows)]


def summary(errs) -> tuple[float, float, float]:
    rel = [(s, abs(m / t - 1)) for s, m, t, _ in errs]          # predicted busbw / measured - 1
    big = [e for s, e in rel if s >= 64 * KiB]
    return (float(np.median(big)) if big else math.nan, max(big, default=math.nan), float(np.median([e for _, e in rel])))


def public(verbose: bool) -> None:
    print("## Public tables: calibrate on the first table of a machine, predict the others")
    print(f"{'table':<52} {'':>6} {'calibrated: med>=64K worst>=64K med all':>40}   {'shipped profile':>24}")
    unseen, strict = [], []
    for machine, hw, tables in GROUPS:
        base = shipped(hw)
        name, nodes, algos, _ = tables[0]
        cal = calibrate(build_topology(base, nodes), [observation(name, algos)])
        fitted = ", ".join(f"{k} {v[1]:.3g}" for k, v in cal.parameters.items() if abs(v[1] - v[0]) > 1e-3 * max(1, abs(v[0])))
        print(f"# {machine}: fit on {name[:2]} ({'accepted' if cal.accepted else 'REFUSED'}, parameter set {cal.stage}, "
              f"median {100 * cal.median:.1f}%, worst {100 * abs(cal.worst.relative):.1f}%): {fitted}")
        for name, nodes, algos, why in tables:
            obs = observation(name, algos)
            e1, e0 = errors(cal.profile, nodes, obs), errors(base, nodes, obs)
            s1, s0 = summary(e1), summary(e0)
            fit = name == tables[0][0]
            ok = all(v <= t for v, t in zip(s1, TARGETS))
            mark = "(fit)" if fit else ("ok" if ok else "MISS")
            print(f"  {name[:50]:<50} {mark:>6} {100 * s1[0]:>12.1f}% {100 * s1[1]:>9.1f}% {100 * s1[2]:>9.1f}%   "
                  f"{100 * s0[0]:>6.1f}% {100 * s0[1]:>7.1f}% {100 * s0[2]:>6.1f}%" + (f"   {why}" if why and not fit else ""))
            if not fit:
                unseen.append(s1)
                if not why:
                    strict.append(s1)
            if verbose and not fit:
                for s, m, t, how in e1:
                    print(f"      {s:>12} {m:>10.1f} {t:>10.1f} {100 * (m / t - 1):+7.1f}% {how}")
    for label, group in (("unseen, same scale and software (the targets)", strict),
                         ("all unseen, also cross-scale and NCCL 2.7 (beyond what a fit saw)", unseen)):
        a = np.array(group)
        figures = (np.median(a[:, 0]), np.max(a[:, 1]), np.median(a[:, 2]))
        verdict = ", ".join(f"{name} {100 * v:.1f}% ({100 * t:.0f}: {'met' if v <= t else 'NOT met'})" for name, v, t
                            in zip(("median of medians >=64K", "worst >=64K", "median all sizes"), figures, TARGETS))
        print(f"# {label}, {len(group)} tables: {verdict}; tables meeting all three: "
              f"{sum(1 for x in group if all(v <= t for v, t in zip(x, TARGETS)))}")


# --------------------------------------------------------------------------- this machine


def cli(*args: str, cwd: Path) -> str:
    exe = Path(sys.executable).parent / "autotaccl"
    done = subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"autotaccl {' '.join(args)} failed: {done.stderr.strip()[-400:]}")
    return done.stdout


def machine(np_: int, sizes: str, iters: int) -> None:
    print(f"\n## This machine: {np_} MPI ranks (mpi runner) against the sim runner on a profile calibrated here")
    if shutil.which("mpiexec", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")) is None:
        print("# skipped: no mpiexec")
        return
    work = Path(tempfile.mkdtemp(prefix="autotaccl-fidelity-"))
    cli("profile", "--np", str(np_), "--sizes", "8:16M:x4", "--iters", "10", "--min-r2", "0.8", "-o", "here.yaml",
        cwd=work)          # a shared 2-core box is noisy: accept a looser fit of the link classes
    algos = {}
    for collective, name in (("allgather", "ring"), ("allgather", "direct"), ("allreduce", "ring")):
        cli("baseline", "--hardware", "here.yaml", "--collective", collective, "--algorithm", name,
            "-o", f"{name}-{collective}.json", cwd=work)
        algos[f"{name} {collective}"] = f"{name}-{collective}.json"
    cli("synth", "--hardware", "here.yaml", "--collective", "allreduce", "--engine", "greedy", "--size", "1M",
        "-o", "synth-allreduce.json", cwd=work)
    algos["synthesized allreduce"] = "synth-allreduce.json"
    bench = cli("bench", "ring-allgather.json", "--runner", "mpi", "--np", str(np_), "--baseline", "mpi", "--sizes",
                sizes, "--iters", str(iters), cwd=work)
    (work / "bench-ring.txt").write_text(bench)
    try:
        report = json.loads(cli("calibrate", "bench-ring.txt", "--hardware", "here.yaml", "--algorithm", "ring",
                                "--protocol", "Simple", "--max-residual", "0.6", "-o", "calibrated.yaml", "--json",
                                cwd=work))
        profile = "calibrated.yaml"
        print(f"# calibrated on autotaccl bench --baseline mpi of the ring AllGather: parameter set {report['stage']}, "
              f"median |residual| {100 * report['median_residual']:.1f}%, worst {100 * report['worst_residual']:+.1f}%")
    except RuntimeError as err:       # a noisy measurement: calibrate refuses it; predict from the link profile
        profile = "here.yaml"
        print(f"# calibrate refused the ring's table ({str(err).split('error: ')[-1][:160]}...); "
              f"predicting from the measured link profile")
    pairs = []
    for label, path in algos.items():
        measured = json.loads(cli("bench", path, "--runner", "mpi", "--np", str(np_), "--sizes", sizes, "--iters",
                                  str(iters), "--json", cwd=work))["rows"]
        predicted = json.loads(cli("bench", path, "--runner", "sim", "--hardware", profile, "--sizes", sizes,
                                   "--json", cwd=work))["rows"]
        best = {}
        for r in measured:
            if r["time_us"] is not None:
                best[r["size"]] = min(best.get(r["size"], math.inf), r["time_us"])
        sim = {r["size"]: r["time_us"] for r in predicted if not r["inplace"]}
        for size in sorted(best):
            pairs.append((label, size, sim[size], best[size]))
    print(f"{'algorithm':<24} {'size':>10} {'predicted us':>13} {'measured us':>12}")
    for label, size, p, m in pairs:
        print(f"{label:<24} {size:>10} {p:>13.1f} {m:>12.1f}")
    rho = spearmanr([p for *_, p, _ in pairs], [m for *_, m in pairs]).statistic
    within = []
    for size in sorted({s for _, s, _, _ in pairs}):
        at = [(p, m) for _, s, p, m in pairs if s == size]
        within.append(spearmanr(*zip(*at)).statistic)
    print(f"# Spearman rho, predicted vs measured time over {len(pairs)} algorithm x size pairs: {rho:.3f} (target 0.8)")
    print(f"# within one size (4 algorithms each): " + ", ".join(f"{r:+.2f}" for r in within)
          + f"; mean {np.nanmean(within):+.2f}")
    shutil.rmtree(work)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="print every size of every predicted table")
    parser.add_argument("--skip-machine", action="store_true", help="only the public tables")
    parser.add_argument("--np", type=int, default=4, help="MPI ranks on this machine (default 4)")
    parser.add_argument("--sizes", default="64K:64M:x4", help="sizes measured on this machine (default 64K:64M:x4)")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args(argv)
    public(args.verbose)
    if not args.skip_machine:
        machine(args.np, args.sizes, args.iters)
    return 0


if __name__ == "__main__":
    import record      # --write: the output, commit and machine in benchmarks/results/

    record.main(main)
