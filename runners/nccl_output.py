"""Read measured tables: nccl-tests' text output of every version, its ``-J`` JSON, and ``autotaccl bench``.

Text (``runtimes.md`` §4, ``msccl-xml-and-nccl-tests.md`` §5): a ``#`` header line names the columns
(``size count type [redop] [root] time algbw busbw #wrong|error [i_min i_max i_p99 i_cv%] [%base]``,
then the same for in-place); without one, the field count says which version wrote the rows (13: with
``root``; 12: old, no ``root``, an ``error`` column; 11: old AllGather/AllToAll without ``redop``; 21:
``-I 1`` per-iteration columns). The old ``error`` column is the largest deviation, not a count: a row
fails when it exceeds the type's tolerance. Lines that are neither comments nor rows (NCCL INFO, ``NCCL
version ...``) are skipped; a launcher's ``[1,0]<stdout>:`` or ``srun -l`` ``0:`` tag is stripped. Only the
first table counts: ``autotaccl bench --baseline mpi`` prints MPI's own table after it.

JSON: nccl-tests' writer (``src/util.cu``, ``JSON_FILE_VERSION`` 3): ``results`` of ``{size, count, type,
redop, root, out_of_place: {time|cpu_time, alg_bw, bus_bw, nwrong}, in_place: {...}}``; the collective
comes from the binary in ``args[0]``; of ``env`` (the writer's whole process environment, ``K=V``
strings) only the ``NCCL_*`` and ``MSCCL*`` variables are kept (:func:`nccl_environment`), and
``NCCL_ALGO``/``NCCL_PROTO`` among them restrict NCCL's choice. ``autotaccl bench --json`` output (``rows``
of result records) is read too.

Anything malformed is one :class:`~autotaccl.errors.InputError` naming the file and the line or field.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from autotaccl.errors import InputError
from autotaccl.model.collectives import canonical_name

from runners.results import frame

PERF = {"all_reduce_perf": "allreduce", "all_gather_perf": "allgather", "reduce_scatter_perf": "reducescatter",
        "alltoall_perf": "alltoall", "broadcast_perf": "broadcast"}
#: largest deviation the oldest nccl-tests still accepted, per type (its "error" column)
TOLERANCE = {"float": 1e-5, "half": 1e-2, "double": 1e-12, "int32": 0.0, "bfloat16": 5e-2}
_TAG = re.compile(r"^(\[\d+,\d+\]<std(?:out|err)>:|\d+:\s)")
_PERF_TOKEN = re.compile(r"\b([a-z_]+_perf)\b")
_BENCH_TITLE = re.compile(r"autotaccl bench .*, (\w+) on (\d+) ranks")
_LAYOUTS = {13: ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                 "time", "algbw", "busbw", "#wrong"],
            12: ["size", "count", "type", "redop", "time", "algbw", "busbw", "error", "time", "algbw", "busbw", "error"],
            11: ["size", "count", "type", "time", "algbw", "busbw", "error", "time", "algbw", "busbw", "error"],
            21: ["size", "count", "type", "redop", "root"] + 2 * ["time", "algbw", "busbw", "#wrong", "i_min", "i_max",
                                                                  "i_p99", "i_cv%"]}
_KNOWN = {"size", "count", "type", "redop", "root", "time", "cputime", "algbw", "busbw", "#wrong", "error",
          "i_min", "i_max", "i_p99", "i_cv%", "%base", "timestamp"}


@dataclass(frozen=True)
class MeasuredTable:
    """One measured table: its rows in the runners' result shape (:data:`runners.results.COLUMNS`)."""

    source: str
    rows: pd.DataFrame
    collective: str | None = None         # as the file says (None: it does not)
    nccl_version: str | None = None
    restrictions: Mapping[str, str] = field(default_factory=dict)   # NCCL_ALGO / NCCL_PROTO, if recorded
    environment: Mapping[str, str] = field(default_factory=dict)    # the NCCL_* / MSCCL* variables, if recorded

    def times(self) -> dict[int, float]:
        """Per size, the fastest valid time (µs) over in-place, out-of-place and repeated rows: the
        simulator models neither mode, and one-off slowdowns are not what a model should reproduce."""
        ok = self.rows[self.rows["time_us"].notna() & (self.rows["time_us"] > 0)]
        return {int(s): float(t) for s, t in ok.groupby("size")["time_us"].min().items()}

    def ranks(self, collective: str) -> int | None:
        """The rank count the table's busbw / algbw ratio says (None for Broadcast or too few digits)."""
        ok = self.rows[self.rows["algbw"].notna() & (self.rows["algbw"] >= 1.0)]
        if ok.empty or collective == "broadcast":
            return None
        r = float((ok["busbw"] / ok["algbw"]).median())
        gap = 2 - r if collective == "allreduce" else 1 - r
        if gap <= 0.005:
            return None
        return round((2 if collective == "allreduce" else 1) / gap)


def read_table(path: str | Path) -> MeasuredTable:
    """The first table of an nccl-tests text or JSON file, or of ``autotaccl bench`` output."""
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "file", "an existing nccl-tests output file (text or -J JSON)")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise InputError(str(path), "file", "a UTF-8 text file (nccl-tests output)") from None
    stripped = text.lstrip()
    if stripped.startswith("{") or path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(str(path), f"line {err.lineno}", f"valid JSON ({err.msg})") from None
        except RecursionError:
            raise InputError(str(path), "document", "JSON nested less deeply") from None
        return parse_json(data, str(path))
    return parse_text(text, str(path))


# --------------------------------------------------------------------------- text


def _number(text: str, source: str, where: str, what: str) -> float:
    if text == "N/A":
        return math.nan
    try:
        value = float(text)
    except ValueError:
        raise InputError(source, where, f"a number for {what} (got {text!r})") from None
    if not math.isfinite(value) and not math.isnan(value):
        raise InputError(source, where, f"a finite number for {what} (got {text!r})")
    return value


def _layout(names: list[str], source: str, where: str) -> dict[str, Any]:
    """Where each value sits in a row of a table with columns ``names``."""
    unknown = [n for n in names if n not in _KNOWN]
    if unknown:
        raise InputError(source, where, f"nccl-tests column names (unknown: {unknown[0]!r})")
    times = [i for i, n in enumerate(names) if n in ("time", "cputime")]
    if len(times) != 2 or names[:3] != ["size", "count", "type"]:
        raise InputError(source, where, "a header 'size count type ... time algbw busbw ... time algbw busbw ...'")
    groups = []
    for start in times:
        if names[start + 1:start + 4][:2] != ["algbw", "busbw"] or len(names) < start + 4 or \
                names[start + 3] not in ("#wrong", "error"):
            raise InputError(source, where, "each group of columns as 'time algbw busbw #wrong' (or 'error')")
        groups.append(start)
    width = len(names) - (1 if names[-1] == "timestamp" else 0)
    return {"redop": names.index("redop") if "redop" in names else None, "groups": groups, "width": width,
            "error": names[groups[0] + 3] == "error", "timestamp": names[-1] == "timestamp"}


def parse_text(text: str, source: str) -> MeasuredTable:
    """The first table of nccl-tests (or ``autotaccl bench``) text output; see the module docstring."""
    rows: list[dict] = []
    layout: dict[str, Any] | None = None
    collective: str | None = None
    version: str | None = None
    perf: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"line {number}"
        line = _TAG.sub("", raw.strip()).strip()
        if not line:
            continue
        if line.startswith("#"):
            body = line.lstrip("#").strip()
            names = body.split()
            if names[:2] == ["size", "count"]:
                if rows:
                    break                                   # a second table (autotaccl bench's baseline)
                layout = _layout(names, source, where)
            elif body.startswith("Collective test starting:"):
                found = PERF.get(body.split(":", 1)[1].strip().split()[0] if body.split(":", 1)[1].split() else "")
                collective = collective or found
            elif body.startswith("nccl-tests version") or body.startswith("NCCL version"):
                version = version or body
            elif (m := _BENCH_TITLE.search(body)) is not None:
                collective = collective or _known_collective(m.group(1))
            perf.update(t for t in _PERF_TOKEN.findall(body) if t in PERF)
            continue
        if line.startswith("NCCL version"):
            version = version or line
            continue
        if not line[0].isdigit():
            continue                                        # NCCL INFO and other log lines
        fields = line.split()
        current = layout
        if current is None:
            if len(fields) not in _LAYOUTS:
                raise InputError(source, where, f"an nccl-tests result row of 11, 12, 13 or 21 fields (got {len(fields)})")
            current = _layout(_LAYOUTS[len(fields)], source, where)
        width = current["width"]
        if len(fields) != width and not (current["timestamp"] and len(fields) > width):
            raise InputError(source, where, f"a result row of {width} fields as its header says (got {len(fields)})")
        rows += _row(fields, current, source, where)
    if not rows:
        raise InputError(source, "rows", "nccl-tests result rows ('size count type ... time algbw busbw ...')")
    if collective is None and len({PERF[p] for p in perf}) == 1:
        collective = PERF[perf.pop()]
    return MeasuredTable(source, frame(rows), collective, version)


def _known_collective(name: str) -> str | None:
    try:
        return canonical_name(name)
    except InputError:
        return None


def _row(fields: list[str], layout: dict[str, Any], source: str, where: str) -> list[dict]:
    try:
        size, count = int(fields[0]), int(fields[1])
    except ValueError:
        raise InputError(source, where, "whole numbers for size and count") from None
    if size < 0 or count < 0:
        raise InputError(source, where, "sizes and counts >= 0")
    dtype = fields[2]
    redop = fields[layout["redop"]] if layout["redop"] is not None else "none"
    out = []
    for inplace, start in zip((False, True), layout["groups"]):
        t = _number(fields[start], source, where, "the time")
        algbw = _number(fields[start + 1], source, where, "algbw")
        busbw = _number(fields[start + 2], source, where, "busbw")
        wrong = _number(fields[start + 3], source, where, "#wrong")
        if layout["error"] and not math.isnan(wrong):
            wrong = float(wrong > TOLERANCE.get(dtype, 0.0))
        if (not math.isnan(t) and t < 0) or (not math.isnan(wrong) and wrong < 0):
            raise InputError(source, where, "times and #wrong >= 0")
        out.append(_record(size, count, dtype, redop, inplace, t, algbw, busbw, wrong))
    return [] if size == 0 else out


def _record(size: int, count: int, dtype: str, redop: str, inplace: bool, t: float, algbw: float, busbw: float,
            wrong: float) -> dict:
    bad = not math.isnan(wrong) and wrong > 0
    nan = math.nan
    return {"size": size, "count": count, "type": dtype, "redop": redop, "inplace": inplace,
            "time_us": nan if bad else t, "algbw": nan if bad else algbw, "busbw": nan if bad else busbw, "wrong": wrong}


# --------------------------------------------------------------------------- JSON


def parse_json(data: Any, source: str) -> MeasuredTable:
    """nccl-tests ``-J`` output or ``autotaccl bench --json`` output."""
    def fail(where: str, expected: str) -> InputError:
        return InputError(source, where, expected)

    if not isinstance(data, dict):
        raise fail("document", "a JSON object (nccl-tests -J output)")
    if "rows" in data and "results" not in data:
        return _bench_json(data, source)
    results = data.get("results")
    if not isinstance(results, list) or not results:
        raise fail("results", "a non-empty list of nccl-tests results")
    collective = None
    args = data.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        collective = PERF.get(Path(args[0]).name)
    environment = nccl_environment(data.get("env"))
    restrictions = {k: v for k, v in environment.items() if k in ("NCCL_ALGO", "NCCL_PROTO")}
    version = data.get("nccl_version")
    rows = []
    for i, r in enumerate(results):
        where = f"results[{i}]"
        if not isinstance(r, dict):
            raise fail(where, "an object")
        size, count = r.get("size"), r.get("count")
        for key, value in (("size", size), ("count", count)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise fail(f"{where}.{key}", "a whole number >= 0")
        dtype, redop = r.get("type"), r.get("redop")
        if not isinstance(dtype, str) or not isinstance(redop, str):
            raise fail(f"{where}.type", "type and redop as strings")
        for inplace, key in ((False, "out_of_place"), (True, "in_place")):
            cell = r.get(key)
            if cell is None:
                continue
            if not isinstance(cell, dict):
                raise fail(f"{where}.{key}", "an object with time, alg_bw, bus_bw, nwrong")
            values = []
            for name in ("time" if "time" in cell else "cpu_time", "alg_bw", "bus_bw", "nwrong"):
                v = cell.get(name)
                if v is None or v == "nan":
                    values.append(math.nan)
                elif isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                    raise fail(f"{where}.{key}.{name}", "a number >= 0 (or null / \"nan\")")
                else:
                    values.append(float(v))
            if size:
                rows.append(_record(size, count, dtype, redop, inplace, *values))
    if not rows:
        raise fail("results", "results with a size > 0")
    return MeasuredTable(source, frame(rows), collective, None if version is None else str(version), restrictions,
                         environment)


def nccl_environment(env: Any) -> dict[str, str]:
    """The ``NCCL_*`` and ``MSCCL*`` variables of a -J file's ``env`` list: what shaped the measurement.
    The rest is the writer's whole process environment (paths, tokens) and is never kept."""
    if not isinstance(env, list):
        return {}
    pairs = (entry.split("=", 1) for entry in env if isinstance(entry, str) and "=" in entry)
    return {key: value for key, value in pairs if key.startswith(("NCCL_", "MSCCL"))}


def _bench_json(data: Mapping, source: str) -> MeasuredTable:
    rows = data["rows"]
    if not isinstance(rows, list) or not rows:
        raise InputError(source, "rows", "a non-empty list of result rows")
    out = []
    for i, r in enumerate(rows):
        where = f"rows[{i}]"
        if not isinstance(r, dict):
            raise InputError(source, where, "an object")
        try:
            size, count = r["size"], r["count"]
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0 or not isinstance(count, int):
                raise TypeError
            values = [math.nan if r.get(k) is None else float(r[k]) for k in ("time_us", "algbw", "busbw", "wrong")]
            out.append(_record(size, count, str(r.get("type", "float")), str(r.get("redop", "none")),
                               bool(r.get("inplace", False)), *values))
        except (KeyError, TypeError, ValueError):
            raise InputError(source, where, "size, count, time_us, algbw, busbw, wrong as numbers") from None
    return MeasuredTable(source, frame(out))
