"""The runtimes an export serves and their conventions: how a band is named, which bytes each runtime's
own file selects for it, the NCCL tuner-plugin config, and the command that loads each.

Bands are inclusive ``[min_bytes, max_bytes]`` here (``None``: no limit); each runtime writes them its own
way (msccl's ``maxBytes="0"``, msccl-legacy's exclusive bound capped at :data:`LEGACY_CAP`, mscclpp's and
NCCL's ``2^64-1``). The NCCL example tuner plugin forces 1 channel where no row matches, so the config
has a row for every band and an explicit channel count. Conventions in full: ``docs/internals.md``."""
from __future__ import annotations

from typing import Sequence

from ..formats.msccl.program import LEGACY_NO_LIMIT
from ..safety import file_stem
from ..sizes import format_size

RUNTIMES = ("msccl", "msccl-legacy", "mscclpp", "nccl")
LEGACY_CAP = LEGACY_NO_LIMIT
SIZE_MAX = (1 << 64) - 1
TUNER_FILE = "nccl/nccl_tuner.conf"
#: the runtimes that get files -> the loader (``formats.loading``) whose lowering writes them
LOADERS = {"msccl": "msccl-executor", "msccl-legacy": "msccl", "mscclpp": "mscclpp"}
XML = ("msccl", "msccl-legacy")      # the runtimes of MSCCL XML, which has no switch operations
#: our collective -> the example plugin's name for it (it has no alltoall: an unknown name would silently
#: become an allreduce rule in its parser, so none is written)
TUNER_COLLECTIVES = {"allgather": "allgather", "reducescatter": "reducescatter", "allreduce": "allreduce",
                     "broadcast": "broadcast", "reduce": "reduce"}
#: nccl-model's algorithm names -> the plugin's
TUNER_ALGORITHMS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvls_tree": "nvls_tree", "pat": "pat",
                    "collnet": "collnet_direct"}
TUNER_PROTOCOLS = {"LL": "ll", "LL128": "ll128", "Simple": "simple"}

TUNER_HEADER = """\
# NCCL tuner config written by `autotaccl export` for NVIDIA/nccl plugins/tuner/example (NCCL >= 2.19).
# Load: NCCL_TUNER_PLUGIN=/path/to/libnccl-tuner-example.so NCCL_TUNER_CONFIG_FILE=/path/to/this/file
# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks (both byte bounds inclusive,
# nBytes as NCCL passes it: the whole buffer, for allgather/reducescatter the total across ranks).
# Rows are stock NCCL's own choice as `autotaccl nccl-model` predicts it: the winner where a band's comment says
# so (faster than every exported candidate), else the fallback; the first matching row wins.
"""


def refusal(runtime: str, algorithm, graph, protocol: str = "Simple", instances: int = 1) -> str | None:
    """Why ``runtime`` (of :data:`LOADERS`) cannot run ``algorithm`` run that way, in one line; None: it can.

    The one rule of which runtime runs which candidate, for the sweep and the export: the runtime's own
    lowering decides (``formats.loading.loader``), so a schedule with switch operations runs only where
    the lowering writes them (never MSCCL XML), and no candidate gets past a runtime's limits."""
    from ..formats.loading import loader

    return loader(LOADERS[runtime], graph).problem(algorithm, protocol, instances)


def runs_on(algorithm, graph, protocol: str = "Simple", instances: int = 1) -> tuple[str, ...]:
    """The runtimes of :data:`LOADERS` that run ``algorithm`` (:func:`refusal`)."""
    return tuple(r for r in LOADERS if refusal(r, algorithm, graph, protocol, instances) is None)


def band_name(experiment: str, min_bytes: int, max_bytes: int | None) -> str:
    """A file stem that says the band it serves, half-open: ``ndv2x2-allgather-from512K-below4M``."""
    upper = "up" if max_bytes is None else f"below{format_size(max_bytes + 1)}"
    return f"{file_stem(experiment)}-from{format_size(min_bytes)}-{upper}"


def band_text(min_bytes: int, max_bytes: int | None) -> str:
    """``512K–4194303`` / ``32M–no limit``: the band in bytes, inclusive."""
    return f"{format_size(min_bytes)}–{'no limit' if max_bytes is None else format_size(max_bytes)}"


def selected(runtime: str, min_bytes: int, max_bytes: int | None) -> tuple[int, int]:
    """(min, max) as the runtime's own file writes the band."""
    if runtime == "msccl":
        return min_bytes, 0 if max_bytes is None else max_bytes
    if runtime == "msccl-legacy":
        return min_bytes, LEGACY_CAP if max_bytes is None else max_bytes + 1
    return min_bytes, SIZE_MAX if max_bytes is None else max_bytes


def tuner_row(collective: str, min_bytes: int, max_bytes: int | None, choice: tuple[str, str, int], nodes: int,
              ranks: int) -> str:
    algorithm, protocol, channels = choice
    lo, hi = selected("nccl", min_bytes, max_bytes)
    return (f"{TUNER_COLLECTIVES[collective]},{lo},{hi},{TUNER_ALGORITHMS[algorithm]},{TUNER_PROTOCOLS[protocol]},"
            f"{int(channels)},{nodes},{ranks}")


def tuner_segments(sizes: Sequence[int], choices: Sequence[tuple[str, str, int]], starts: Sequence[int],
                   wins: Sequence[bool] = ()) -> list[tuple[int, int | None, tuple[str, str, int], int]]:
    """Bands (min, max, choice, index of the swept size it starts at) covering the size axis: a new one where
    nccl-model's choice or ``wins`` (stock NCCL is the winner) changes at a swept size or a band of ``starts``
    (the export's bands) begins; the first from 0, the last open."""
    keys = [(tuple(c), bool(wins[i]) if wins else False) for i, c in enumerate(choices)]
    cuts = sorted({0, *starts} | {s for i, s in enumerate(sizes) if i and keys[i] != keys[i - 1]})
    out = []
    for i, lo in enumerate(cuts):
        hi = cuts[i + 1] - 1 if i + 1 < len(cuts) else None
        index = max([j for j, s in enumerate(sizes) if s <= lo] or [0])     # the swept size the band starts at
        out.append((lo, hi, tuple(choices[index]), index))
    return out


def load_commands(export_dir: str = "EXPORT") -> dict[str, str]:
    """Runtime -> how to load the export's files for it (``export_dir``: where the export lives)."""
    d = export_dir
    return {
        "msccl": f"MSCCL_ALGO_DIR={d}/msccl mpirun -np <ranks> <app>   # msccl-executor-nccl, one rank per GPU",
        "msccl-legacy": f"NCCL_ALGO=MSCCL,RING,TREE MSCCL_XML_FILES=$(ls {d}/msccl-legacy/*.xml | paste -sd:) "
                        "mpirun -np <ranks> <app>   # microsoft/msccl only, at most 4 files "
                        "(msccl-executor-nccl refuses these: no outofplace attribute)",
        "mscclpp": f"python: mscclpp.ExecutionPlan(\"{d}/mscclpp/<file>.plan.json\") then Executor.execute(...); "
                   f"or NCCL API: LD_PRELOAD=libmscclpp_nccl.so MSCCLPP_EXECUTION_PLAN_DIR={d}/mscclpp <app>",
        "nccl": f"NCCL_TUNER_PLUGIN=libnccl-tuner-example.so NCCL_TUNER_CONFIG_FILE={d}/{TUNER_FILE} <app>",
    }
