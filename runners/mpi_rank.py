"""The program every MPI rank runs: ``python -m mpi4py -m runners.mpi_rank JOB.json``.

The job file (JSON, written by :mod:`runners.mpi`) lists tasks: ``algorithm`` (an algorithm's JSON
form, compiled by each rank into its own program), ``mpi`` (MPI's built-in collective of the same
kind, the baseline) or ``pingpong`` (see :mod:`runners.pingpong`). For every size and in-place mode a
task is timed like nccl-tests (warm-up, barrier, ``iters`` back-to-back calls, the slowest rank's
mean) and, with ``check``, run once more on fresh data and compared element by element. Rank 0
writes ``result.json`` next to the job file. Each rank keeps a heartbeat file (:mod:`runners.progress`).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

import numpy as np
from mpi4py import MPI

from autotaccl.model.algorithm import from_json
from autotaccl.model.collectives import Collective
from autotaccl.sizes import format_size

from runners import data
from runners.executor import Executor
from runners.program import compile_rank, placement
from runners.progress import Heartbeat
from runners.results import layout, make_row

MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}


def builtin(comm: MPI.Comm, coll: Collective, arrays: dict, outputs: dict, inplace: bool,
            op: str) -> tuple[Callable[[], None], dict]:
    """MPI's own collective on the same buffers, and where its output lands (MPI's in-place
    Reduce_scatter_block leaves the result at the start of the buffer, not at the rank's block)."""
    out = arrays["out"].reshape(-1)
    src = MPI.IN_PLACE if inplace else arrays["in"].reshape(-1)
    mpi_op = MPI_OPS[op]
    rank = comm.Get_rank()
    if coll.name == "allgather":
        return (lambda: comm.Allgather(src if inplace else [src, MPI.BYTE], [out, MPI.BYTE])), outputs
    if coll.name == "alltoall":
        return (lambda: comm.Alltoall(src if inplace else [src, MPI.BYTE], [out, MPI.BYTE])), outputs
    if coll.name == "allreduce":
        return (lambda: comm.Allreduce(src, out, op=mpi_op)), outputs
    if coll.name == "reducescatter":
        if inplace:
            k = coll.chunkup
            outputs = {c: ("out", i - rank * k) for c, (_, i) in outputs.items()}
            return (lambda: comm.Reduce_scatter_block(MPI.IN_PLACE, out, op=mpi_op)), outputs
        return (lambda: comm.Reduce_scatter_block(src, out, op=mpi_op)), outputs

    def bcast() -> None:
        if not inplace and rank == coll.root:
            out[...] = src
        comm.Bcast([out, MPI.BYTE], root=coll.root)
    return bcast, outputs


def run_task(comm: MPI.Comm, task: dict, job: dict, beat: Heartbeat) -> list[dict]:
    rank = comm.Get_rank()
    dtype, op = job["dtype"], job["op"]
    algorithm = from_json(task["algorithm"], "job") if task["kind"] == "algorithm" else None
    coll = algorithm.collective if algorithm else Collective(**task["collective"])
    label = algorithm.name if algorithm else f"MPI {coll.name}"
    programs = {}
    rows = []
    itemsize = data.numpy_dtype(dtype).itemsize
    for size in job["sizes"]:
        shape = layout(coll, size, itemsize)
        if shape.chunk_elems == 0:
            continue
        for inplace in job["modes"]:
            where = f"{label} {format_size(size)} {'in-place' if inplace else 'out-of-place'}"
            beat.phase = f"{where}: preparing"
            buffers, inputs, outputs = placement(coll, rank, inplace)
            if algorithm:
                if inplace not in programs:
                    programs[inplace] = compile_rank(algorithm, rank, inplace)
                program = programs[inplace]
                buffers, outputs = program.buffers, program.outputs
            arrays = data.allocate(buffers, shape.chunk_elems, dtype)
            data.fill(arrays, inputs, rank, dtype, op)
            if algorithm:
                executor = Executor(program, comm, arrays, data.UFUNCS[op])
                call = executor.run
                beat.detail = executor.waiting_for
            else:
                call, outputs = builtin(comm, coll, arrays, outputs, inplace, op)
                beat.detail = lambda: f"inside MPI's {coll.name}"
            time_us = timed(comm, call, job["warmup"], job["iters"], beat, where)
            wrong = np.nan
            if job["check"]:
                beat.phase = f"{where}: check"
                data.fill(arrays, inputs, rank, dtype, op)
                comm.Barrier()
                call()
                wrong = comm.allreduce(data.count_wrong(arrays, outputs, coll, dtype, op), op=MPI.SUM)
            rows.append(make_row(coll, shape.size, shape.count, dtype, op, inplace, time_us, wrong))
            beat.detail = None
            del arrays, call
    return rows


def timed(comm: MPI.Comm, call: Callable[[], None], warmup: int, iters: int, beat: Heartbeat, where: str) -> float:
    """Mean µs per call over ``iters`` calls, of the slowest rank."""
    beat.phase = f"{where}: warm-up"
    comm.Barrier()
    for _ in range(warmup):
        call()
    comm.Barrier()
    beat.phase = f"{where}: timed iterations"
    start = MPI.Wtime()
    for _ in range(iters):
        call()
    elapsed = (MPI.Wtime() - start) / max(iters, 1) * 1e6
    return comm.allreduce(elapsed, op=MPI.MAX)


def read_job(comm: MPI.Comm, path: Path) -> dict:
    """Rank 0 reads the job file and broadcasts its JSON bytes, so other nodes need not see the file."""
    raw = np.frombuffer(path.read_bytes(), np.uint8) if comm.Get_rank() == 0 else None
    size = np.array([raw.size if raw is not None else 0], np.int64)
    comm.Bcast(size, root=0)
    if raw is None:
        raw = np.empty(int(size[0]), np.uint8)
    comm.Bcast(raw, root=0)
    return json.loads(raw.tobytes())


def main(argv: list[str]) -> int:
    job_path = Path(argv[1])
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    job = read_job(comm, job_path)
    beat = Heartbeat(job_path.parent, rank).start()
    results = []
    try:
        if comm.Get_size() != job["ranks"]:
            raise RuntimeError(f"the job needs {job['ranks']} ranks but runs on {comm.Get_size()}")
        for task in job["tasks"]:
            if task["kind"] == "pingpong":
                from runners.pingpong import pingpong
                results.append(pingpong(comm, task, beat))
            else:
                results.append(run_task(comm, task, job, beat))
    except BaseException as err:
        beat.fail(f"{type(err).__name__}: {err}")
        raise
    beat.stop()
    if rank == 0:
        out = job_path.with_name("result.json")
        tmp = out.with_name(".result.json.tmp")
        tmp.write_text(json.dumps({"tasks": results}))
        tmp.replace(out)
    comm.Barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
