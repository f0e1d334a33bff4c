"""The ``sim`` runner: the simulator (:func:`autotaccl.simulate.simulate`, with a protocol and instance
count) in the runners' shape.

The simulator does not tell in-place from out-of-place, so both rows carry the same time. It moves no
data; correctness comes from :func:`autotaccl.model.algorithm.verify`: a valid algorithm has ``wrong = 0``,
an invalid one has every output element of every rank counted as wrong and no speed.
"""
from __future__ import annotations

import math
from typing import Sequence

import networkx as nx
import pandas as pd

from autotaccl.errors import InputError
from autotaccl.model.algorithm import Algorithm, VerificationError, verify
from autotaccl.model.hardware import load_hardware
from autotaccl.model.topology import build_topology
from autotaccl.simulate import simulate

from runners.results import DTYPES, check_dtype, check_op, frame, layout, make_row


def graph_from_options(graph: nx.DiGraph | None = None, hardware: str | None = None, nodes: int = 1) -> nx.DiGraph:
    if graph is not None:
        return graph
    if hardware is None:
        raise InputError("--hardware", "missing", "a hardware profile for the sim runner (or a graph)")
    profile = load_hardware(hardware)
    try:
        return build_topology(profile, nodes)
    except ValueError as err:
        raise InputError(profile.source, "nics", str(err)) from None


class SimRunner:
    name = "sim"

    def measure(self, algorithm: Algorithm, sizes: Sequence[int], **options) -> pd.DataFrame:
        return measure(algorithm, sizes, **options)


def measure(algorithm: Algorithm, sizes: Sequence[int], *, graph: nx.DiGraph | None = None,
            hardware: str | None = None, nodes: int = 1, dtype: str = "float32", op: str = "sum",
            inplace: Sequence[bool] = (False, True), protocol: str = "Simple", instances: int = 1,
            **_ignored) -> pd.DataFrame:
    """Simulated rows for ``algorithm`` on ``graph`` (or on ``hardware`` x ``nodes``), run with ``protocol``
    (LL, LL128, Simple) and ``instances`` copies on separate channels."""
    from autotaccl.model.protocols import canonical_protocol

    protocol = canonical_protocol(protocol)
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise InputError("--instances", repr(instances), "a whole number >= 1")
    graph = graph_from_options(graph, hardware, nodes)
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
        for mode in inplace:
            rows.append(make_row(coll, shape.size, shape.count, dtype, op, mode, time_us, 0 if valid else outputs))
    return frame(rows)
