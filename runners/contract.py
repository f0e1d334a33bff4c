"""What a runner is, and how its options are built: the one contract ``bench``, ``tune`` and the leases use.

A runner is a class (constructed without arguments) with

* ``name``: what ``--runner`` calls it (its entry point's name, :mod:`runners.registry`);
* ``real_hardware``: whether it measures on machines. Only such a runner leases its hosts and is the
  second fidelity of a sweep; the others model the hardware, as the simulator of every trial does;
* ``runtime_file``: the lowered file it runs (a :class:`RuntimeFile`), or ``None`` for the algorithm IR;
* ``Options``: its frozen options dataclass, whose ``__post_init__`` checks every field and names the
  command-line flag in its :class:`~autotaccl.errors.InputError`;
* ``hosts(options)``: the hosts a measurement occupies (empty for a model);
* ``measure(target, sizes, options)``: a DataFrame with :data:`runners.results.COLUMNS`, one row per
  (size, in-place mode); ``target`` is an Algorithm, or a ``runtime_file`` path. A failed or hung job
  raises :class:`~runners.launch.JobError`, bad options :class:`~autotaccl.errors.InputError`.

A runner that can also time its runtime's own implementation of the collective in the same job (MPI's
``MPI_Allgather`` for the mpi runner) is a :class:`BaselineRunner`.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence, runtime_checkable

from autotaccl.errors import InputError
from autotaccl.safety import output_dir

from runners.results import check_dtype, check_op

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class RuntimeFile:
    """A lowered file a runner runs instead of the algorithm IR."""

    format: str      # what the tuning layer lowers a trial's algorithm to
    suffix: str      # how ``bench`` tells such a file from an algorithm JSON


MSCCL_XML = RuntimeFile("msccl-xml", ".xml")
MSCCLPP_PLAN = RuntimeFile("mscclpp-plan", ".plan.json")


@runtime_checkable
class Runner(Protocol):
    name: str
    real_hardware: bool
    runtime_file: RuntimeFile | None
    Options: type

    def hosts(self, options: Any) -> tuple[str, ...]:
        """The hosts a measurement with ``options`` occupies: the leases it takes (empty: none)."""

    def measure(self, target: Any, sizes: Sequence[int], options: Any) -> "pd.DataFrame":
        """Rows (size, count, type, redop, inplace, time_us, algbw, busbw, wrong) for ``target``."""


@runtime_checkable
class BaselineRunner(Runner, Protocol):
    baselines: Mapping[str, str]     # what ``bench --baseline`` may name -> what it is ("MPI's own")

    def measure_with_baseline(self, target: Any, sizes: Sequence[int], options: Any,
                              baseline: str) -> tuple["pd.DataFrame", "pd.DataFrame"]:
        """``target``'s rows and ``baseline``'s, measured in the same job."""


def check(ok: bool, flag: str, value: Any, expected: str) -> None:
    """An options dataclass's field check: ``flag: value: expected`` unless ``ok``."""
    if not ok:
        raise InputError(flag, str(value), expected)


def check_ranks(options: Any, runner: str) -> None:
    """``--np``, unless ``--launcher`` is a whole launcher line (and no hostfile is left to place ranks)."""
    check(options.np is not None or (options.launcher is not None and options.hostfile is None), "--np", "(missing)",
          f"the number of ranks to launch (or a whole --launcher line) for --runner {runner}")


def check_launched(options: Any) -> None:
    """The checks every runner that launches ranks makes of its options (``np``, ``iters``, ``warmup``,
    ``timeout``, ``workdir``, ``dtype``, ``op``), each naming its flag."""
    check(options.np is None or options.np >= 1, "--np", options.np, "a whole number >= 1")
    check(options.iters >= 1, "--iters", options.iters, "a whole number >= 1")
    check(options.warmup >= 0, "--warmup", options.warmup, "a whole number >= 0")
    check(options.timeout > 0, "--timeout", options.timeout, "a positive number of seconds")
    if options.workdir is not None:
        output_dir(options.workdir, "--workdir")
    check_dtype(options.dtype), check_op(options.op)


def flag_of(key: str, flags: Mapping[str, str] | None = None) -> str:
    """The command-line flag of option ``key``: ``--key-name`` unless the command calls it otherwise."""
    return (flags or {}).get(key, "--" + key.replace("_", "-"))


def build_options(runner: Runner, values: Mapping[str, Any], flags: Mapping[str, str] | None = None) -> Any:
    """``runner.Options`` from ``values`` (option -> value; text is converted to the field's type).

    A key the dataclass does not have is an error naming its flag (``flags`` maps an option to the flag
    a command gives it, e.g. ``timeout`` -> ``--timeout-per-run``), and so is a field's own check.
    """
    if isinstance(values, runner.Options):
        return values
    fields = {f.name: f for f in dataclasses.fields(runner.Options)}
    unknown = [key for key in values if key not in fields]
    if unknown:
        raise InputError(flag_of(unknown[0], flags), repr(values[unknown[0]]),
                         f"not an option of the {runner.name} runner (its options: {', '.join(fields)})")
    needed = [f.name for f in fields.values() if f.default is dataclasses.MISSING
              and f.default_factory is dataclasses.MISSING and f.name not in values]
    if needed:
        raise InputError(flag_of(needed[0], flags), "(missing)", f"an option the {runner.name} runner needs")
    hints = typing.get_type_hints(runner.Options)
    typed = {key: _typed(value, hints[key], flag_of(key, flags)) for key, value in values.items()}
    try:
        return runner.Options(**typed)
    except InputError as err:     # the dataclass names the default flag; the command may call it otherwise
        key = err.source.removeprefix("--").replace("-", "_")
        if flags and key in flags:
            raise InputError(flags[key], err.field, err.expected) from None
        raise


def options_dict(options: Any) -> dict[str, Any]:
    """``options`` as plain JSON values; :func:`build_options` turns them back into the dataclass."""
    return dataclasses.asdict(options)


_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def _typed(value: Any, hint: Any, flag: str) -> Any:
    """``value`` as the field's type when it is text (``--runner-option np=4``); anything else as it is."""
    kinds = [k for k in typing.get_args(hint) if k is not type(None)] or [hint]
    if not isinstance(value, str) or str in kinds:
        return value
    kind = kinds[0]
    if kind is bool:
        if value.lower() in _TRUE + _FALSE:
            return value.lower() in _TRUE
        raise InputError(flag, repr(value), "true or false")
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise InputError(flag, repr(value), f"a value of type {getattr(kind, '__name__', kind)}") from None
