"""The ``sim`` runner: the simulator (:func:`autotaccl.simulate.simulate`, with a protocol and instance
count) in the runners' shape.

The simulator does not tell in-place from out-of-place, so both rows carry the same time. It moves no
data; correctness comes from :func:`autotaccl.model.algorithm.verify`: a valid algorithm has ``wrong = 0``,
an invalid one has every output element of every rank counted as wrong and no speed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import networkx as nx
import pandas as pd

from autotaccl.errors import InputError
from autotaccl.model.algorithm import Algorithm, VerificationError, verify
from autotaccl.model.protocols import canonical_protocol
from autotaccl.model.topology import topology_for
from autotaccl.simulate import simulate
from autotaccl.sizes import parse_size

from runners.contract import check
from runners.results import DTYPES, check_dtype, check_op, frame, layout, make_row


@dataclass(frozen=True)
class SimOptions:
    hardware: str | None = None      # profile name or file; required to measure
    nodes: int = 1
    chunk_size: str | None = None    # the chunk size a TACCL topology JSON was profiled for
    dtype: str = "float32"
    op: str = "sum"
    protocol: str = "Simple"         # LL, LL128 or Simple, as the runtime would run it
    instances: int = 1               # copies of the algorithm on separate channels

    def __post_init__(self) -> None:
        check(self.nodes >= 1, "--nodes", self.nodes, "a whole number >= 1")
        object.__setattr__(self, "protocol", canonical_protocol(self.protocol))    # ll128 -> LL128
        check(not isinstance(self.instances, bool) and isinstance(self.instances, int) and self.instances >= 1,
              "--instances", self.instances, "a whole number >= 1")
        if self.chunk_size is not None:
            parse_size(self.chunk_size, "--chunk-size")
        check_dtype(self.dtype), check_op(self.op)


class SimRunner:
    """The simulator on ``hardware`` x ``nodes``: a model, so it leases nothing and runs the IR."""

    name = "sim"
    real_hardware = False
    runtime_file = None
    Options = SimOptions

    def hosts(self, options: SimOptions) -> tuple[str, ...]:
        return ()

    def measure(self, target: Algorithm, sizes: Sequence[int], options: SimOptions) -> pd.DataFrame:
        if options.hardware is None:
            raise InputError("--hardware", "missing", "a hardware profile for --runner sim")
        graph = topology_for(options.hardware, options.nodes, options.chunk_size)
        return measure(target, sizes, graph, options.dtype, options.op, options.protocol, options.instances)


def measure(algorithm: Algorithm, sizes: Sequence[int], graph: nx.DiGraph, dtype: str = "float32",
            op: str = "sum", protocol: str = "Simple", instances: int = 1) -> pd.DataFrame:
    """Simulated rows for ``algorithm`` on ``graph``, out-of-place and in-place, run with ``protocol``
    (LL, LL128, Simple) and ``instances`` copies on separate channels."""
    check_dtype(dtype), check_op(op)
    coll = algorithm.collective
    if graph.number_of_nodes() != coll.ranks:
        raise InputError(graph.graph.get("name", "topology"), "ranks",
                         f"{coll.ranks} ranks, as the algorithm has (the topology has {graph.number_of_nodes()})")
    try:
        verify(algorithm, graph)
        valid = True
    except VerificationError:
        valid = False
    itemsize = DTYPES[dtype][1]().itemsize
    rows = []
    for size in sizes:
        shape = layout(coll, size, itemsize)
        if shape.chunk_elems == 0:
            continue
        outputs = sum(coll.output_chunks(r) for r in range(coll.ranks)) * shape.chunk_elems
        time_us = simulate(algorithm, graph, shape.size, protocol, instances).time_us if valid else math.nan
        for mode in (False, True):
            rows.append(make_row(coll, shape.size, shape.count, dtype, op, mode, time_us, 0 if valid else outputs))
    return frame(rows)
