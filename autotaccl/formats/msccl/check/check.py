"""``check_xml``: static rules for one runtime, then a symbolic replay in each buffer mode."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal, get_args

from ....errors import ParameterError
from ..program import COLL_ACCEPTED, HEADER_REQUIRED, RUNTIMES, Program
from .parse import read_xml
from .replay import MAX_RACE_TBS, Replay, races_in
from .report import CheckReport, Problem
from .static import collective_of, static_problems

log = logging.getLogger(__name__)
Mode = Literal["inplace", "outofplace", "both", "header"]
MODES: tuple[Mode, ...] = get_args(Mode)
MAX_SEEDS = 1000


def detect_runtime(program: Program) -> str:
    """msccl-executor if the header has every attribute it requires and a ``coll`` it accepts, else the
    legacy msccl runtime."""
    if all(k in program.header for k in HEADER_REQUIRED["msccl-executor"]) and \
            program.header.get("coll") in COLL_ACCEPTED["msccl-executor"]:
        return "msccl-executor"
    return "msccl"


def header_modes(program: Program, runtime: str) -> tuple[str, ...]:
    """The buffer modes the header claims for ``runtime`` (§1.2, §2)."""
    inplace = program.header.get("inplace") == "1"
    if runtime == "msccl":  # the legacy runtime matches inPlace exactly
        return ("inplace",) if inplace else ("outofplace",)
    out = program.header.get("outofplace") == "1"
    return tuple(m for m, on in (("inplace", inplace), ("outofplace", out)) if on)


def check_xml(path_or_text: str | Path, runtime: str = "auto", mode: Mode = "header", seeds: int = 8,
              seed: int = 0) -> CheckReport:
    """Check an MSCCL XML file (or text) for ``runtime`` (``auto``: from the header).

    ``mode``: ``inplace``, ``outofplace``, ``both``, or ``header`` (the modes the header enables). Raises
    InputError if the file cannot be parsed; every rule the algorithm breaks is in the report.
    """
    program, source = read_xml(path_or_text)
    return check_program(program, source, runtime, mode, seeds, seed)


def check_program(program: Program, source: str = "<program>", runtime: str = "auto", mode: Mode = "header",
                  seeds: int = 8, seed: int = 0) -> CheckReport:
    if runtime == "auto":
        runtime = detect_runtime(program)
    if runtime not in RUNTIMES:
        raise ParameterError("runtime", repr(runtime), f"one of: auto, {', '.join(RUNTIMES)}")
    if mode not in MODES:
        raise ParameterError("mode", repr(mode), f"one of: {', '.join(MODES)}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 0 <= seeds <= MAX_SEEDS:
        raise ParameterError("seeds", str(seeds), f"a whole number in 0..{MAX_SEEDS}")
    modes = {"both": ("inplace", "outofplace"), "header": None}.get(mode, (mode,))
    if modes is None:
        modes = header_modes(program, runtime)
    errors, warnings = static_problems(program, runtime)
    coll = collective_of(program, runtime) or program.coll
    report = dict(source=source, runtime=runtime, modes=tuple(modes), coll=coll,
                  ngpus=len(program.gpus), seeds=seeds)
    stats = {"steps": sum(len(tb.steps) for g in program.gpus for tb in g.tbs),
             "tbs": sum(len(g.tbs) for g in program.gpus)}
    if not modes:
        errors.append(Problem("the header enables neither in-place nor out-of-place calls", line=program.line))
    if errors:
        return CheckReport(errors=tuple(errors), warnings=tuple(warnings), stats=stats, **report)
    if stats["tbs"] > MAX_RACE_TBS:
        warnings.append(Problem(f"{stats['tbs']} thread blocks: race detection skipped (above {MAX_RACE_TBS}); "
                                f"values are checked over {seeds + 1} interleavings"))
    for m in modes:
        replay = Replay(program, coll, m)
        problem = replay.run(None, races=races_in(m, modes))
        for k in range(seeds):
            if problem is not None:
                break
            problem = replay.run(seed * 1_000_003 + k, races=False)
        if problem is not None:
            errors.append(problem)
            break
    log.info("%s: %s in %s", source, "valid" if not errors else errors[0], ", ".join(modes))
    return CheckReport(errors=tuple(errors), warnings=tuple(warnings), stats=stats, **report)
