"""One rank of the ``mscclpp`` runner (``python -m runners.mscclpp_rank PLAN --sizes ...``, under MPI).

Each rank takes GPU ``rank % ranks_per_node``, loads the plan with ``mscclpp.ExecutionPlan``, and per size
allocates its buffers as the executor's own test does (in place: the input is the rank's block of the
output, or the output its block of the input), ``--offset`` bytes inside a bigger allocation; it runs
``warmup`` calls, times ``iters`` with CUDA events and, with ``--check``, refills the inputs with a
pattern of its rank, calls once more and counts the output elements that differ from the collective's
result. Rank 0 writes the rows (the slowest rank's time, every rank's wrong elements) to ``--out``.
Imports of mscclpp, CuPy and mpi4py happen in :func:`main`, so the module loads anywhere.
"""
from __future__ import annotations

import argparse
import json


def pattern(xp, n: int, rank: int, dtype):
    """Rank ``rank``'s input values: small integers, exact in every dtype even summed over many ranks."""
    return ((xp.arange(n, dtype=xp.int64) * 3 + rank * 11) % 17).astype(dtype)


def expected(xp, collective: str, rank: int, ranks: int, n_in: int, n_out: int, dtype, root: int = 0):
    """The output rank ``rank`` must hold after the call, from :func:`pattern` inputs."""
    inputs = [pattern(xp, n_in, q, dtype) for q in range(ranks)]
    if collective == "allgather":
        return xp.concatenate(inputs)
    if collective == "reducescatter":
        return sum(x[rank * n_out:(rank + 1) * n_out] for x in inputs)
    if collective == "allreduce":
        return sum(inputs)
    if collective == "alltoall":
        blk = n_in // ranks
        return xp.concatenate([inputs[b][rank * blk:(rank + 1) * blk] for b in range(ranks)])
    return inputs[root]


def counts(collective: str, size: int, itemsize: int, ranks: int) -> tuple[int, int]:
    """(input, output) elements per rank for an nccl-tests ``size`` in bytes."""
    n = size // itemsize
    if collective == "allgather":
        return n // ranks, n
    if collective == "reducescatter":
        return n, n // ranks
    return n, n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--op", default="sum")
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    import cupy as cp
    import mscclpp
    from mpi4py import MPI

    doc = json.loads(open(args.plan).read())
    collective, inplace = doc["collective"], bool(doc["inplace"])
    root = (doc.get("autotaccl") or {}).get("root", 0)
    chunks = max(doc["gpus"][0]["input_chunks"], doc["gpus"][0]["output_chunks"])
    group = mscclpp.CommGroup(MPI.COMM_WORLD)
    rank, ranks = group.my_rank, group.nranks
    cp.cuda.Device(rank % group.nranks_per_node).use()
    executor = mscclpp.Executor(group.communicator)
    plan = mscclpp.ExecutionPlan(args.plan, rank)
    dtype = cp.dtype(args.dtype)
    mdtype = getattr(mscclpp.DataType, args.dtype)
    pad = args.offset // dtype.itemsize
    stream = cp.cuda.Stream(non_blocking=True)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        size -= size % (dtype.itemsize * ranks * chunks)
        if size <= 0:
            continue
        n_in, n_out = counts(collective, size, dtype.itemsize, ranks)
        if inplace and collective == "allgather":
            whole = mscclpp.GpuBuffer(pad + n_out, dtype=dtype)
            out = whole[pad:pad + n_out]
            inp = out[rank * n_in:(rank + 1) * n_in]
        elif inplace and collective == "reducescatter":
            whole = mscclpp.GpuBuffer(pad + n_in, dtype=dtype)
            inp = whole[pad:pad + n_in]
            out = inp[rank * n_out:(rank + 1) * n_out]
        elif inplace:
            whole = mscclpp.GpuBuffer(pad + n_in, dtype=dtype)
            inp = out = whole[pad:pad + n_in]
        else:
            a, b = mscclpp.GpuBuffer(pad + n_in, dtype=dtype), mscclpp.GpuBuffer(pad + n_out, dtype=dtype)
            inp, out = a[pad:pad + n_in], b[pad:pad + n_out]

        def call():
            executor.execute(rank, inp.data.ptr, out.data.ptr, inp.nbytes, out.nbytes, mdtype, plan, stream.ptr)

        inp[...] = pattern(cp, n_in, rank, dtype)
        group.barrier()
        for _ in range(args.warmup):
            call()
        stream.synchronize()
        group.barrier()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        for _ in range(args.iters):
            call()
        end.record(stream)
        end.synchronize()
        time_us = cp.cuda.get_elapsed_time(start, end) * 1e3 / args.iters
        wrong = 0
        if args.check:
            inp[...] = pattern(cp, n_in, rank, dtype)
            stream.synchronize()
            group.barrier()
            call()
            stream.synchronize()
            want = expected(cp, collective, rank, ranks, n_in, n_out, dtype, root)
            wrong = int((out != want).sum())
        time_us = MPI.COMM_WORLD.allreduce(time_us, op=MPI.MAX)
        wrong = MPI.COMM_WORLD.allreduce(wrong, op=MPI.SUM)
        rows.append({"size": size, "count": size // dtype.itemsize, "time_us": time_us, "wrong": wrong})
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(rows, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
