"""The one result shape every runner returns, with nccl-tests' sizes, counts and formulas.

A measurement is a long-form :class:`pandas.DataFrame`, one row per (size, in-place mode), with the
columns of nccl-tests' table (``msccl-xml-and-nccl-tests.md`` §5.2-§5.4): ``size`` (bytes), ``count``
(elements passed to the collective), ``type``, ``redop``, ``inplace``, ``time_us``, ``algbw`` and
``busbw`` (GB/s, 1e9 B/s) and ``wrong`` (mismatching elements over all ranks; NaN when not checked).
A row with ``wrong > 0`` carries no speed: its time and bandwidths are NaN.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from autotaccl.errors import InputError
from autotaccl.model.collectives import Collective

COLUMNS = ("size", "count", "type", "redop", "inplace", "time_us", "algbw", "busbw", "wrong")

#: our dtype name -> (nccl-tests type name, numpy dtype)
DTYPES = {"float32": ("float", np.float32), "float16": ("half", np.float16), "int32": ("int32", np.int32),
          "float64": ("double", np.float64)}
OPS = ("sum", "prod", "max", "min")


def check_dtype(name: str, source: str = "--dtype") -> str:
    if name not in DTYPES:
        raise InputError(source, repr(name), f"one of: {', '.join(DTYPES)}")
    return name


def check_op(name: str, source: str = "--op") -> str:
    if name not in OPS:
        raise InputError(source, repr(name), f"one of: {', '.join(OPS)}")
    return name


@dataclass(frozen=True)
class Layout:
    """How an nccl-tests size maps onto an algorithm's chunks (sizes are rounded down to whole elements)."""

    chunk_elems: int   # elements per chunk
    size: int          # the size actually moved (the "size" column)
    count: int         # the "count" column


def layout(collective: Collective, size: int, itemsize: int) -> Layout:
    """Chunk size, actual size and nccl-tests count for a requested ``size`` in bytes."""
    per_size = round(size / collective.chunk_bytes(size))  # chunks in the nccl-tests size
    chunk_elems = size // itemsize // per_size
    per_call = collective.chunkup * (collective.ranks if collective.name == "allreduce" else 1)
    return Layout(chunk_elems, chunk_elems * per_size * itemsize, chunk_elems * per_call)


def redop_name(collective: Collective, op: str) -> str:
    return op if collective.is_reduction else "none"


def make_row(collective: Collective, size: int, count: int, dtype: str, op: str, inplace: bool,
             time_us: float, wrong: float) -> dict:
    """One result row; algbw = size / time (GB/s) and busbw = algbw x the collective's factor."""
    failed = not math.isnan(wrong) and wrong > 0
    speed = not failed and time_us > 0 and math.isfinite(time_us)
    algbw = size / time_us / 1e3 if speed else math.nan
    return {"size": int(size), "count": int(count), "type": DTYPES[dtype][0] if dtype in DTYPES else dtype,
            "redop": redop_name(collective, op), "inplace": bool(inplace),
            "time_us": float(time_us) if speed else math.nan, "algbw": algbw,
            "busbw": algbw * collective.busbw_factor, "wrong": float(wrong)}


def frame(rows: list[dict]) -> pd.DataFrame:
    """Rows in the contract's column order (an empty frame still has the columns)."""
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    return df.astype({"size": "int64", "count": "int64", "inplace": "bool", "time_us": "float64",
                      "algbw": "float64", "busbw": "float64", "wrong": "float64"})
