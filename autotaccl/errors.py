"""The error types for bad user input: they name the file (or the argument), the field and what was expected."""
from __future__ import annotations

import errno
import os
from typing import Mapping


class InputError(ValueError):
    """A file or argument a user gave us is malformed.

    The CLI prints ``str(error)`` as one line and exits with status 2.
    """

    def __init__(self, source: str, field: str, expected: str) -> None:
        self.source = str(source)
        self.field = field
        self.expected = expected
        super().__init__(f"{self.source}: {field}: {expected}")


class ParameterError(InputError):
    """A bad argument to a library call: ``parameter`` names it as the library knows it (``nodes``,
    ``TuneRequest.trials``), ``value`` is what was given.

    The CLI shows the flag that set the parameter instead (:meth:`for_flags`), so a library check and
    the command line say the same thing in their own terms.
    """

    def __init__(self, parameter: str, value: str, expected: str) -> None:
        super().__init__(parameter, value, expected)

    @property
    def parameter(self) -> str:
        return self.source

    def for_flags(self, flags: Mapping[str, str]) -> InputError:
        """The same error naming a command-line flag: ``flags`` maps parameter names (the last dotted part)
        to flags; a parameter without a flag keeps its name."""
        name = self.parameter.rpartition(".")[2]
        return InputError(flags.get(name, self.parameter), self.field, self.expected)


class InfeasibleError(ValueError):
    """A sketch or configuration admits no algorithm; the message says why."""


class EnvironmentFailure(RuntimeError):
    """The machine failed, not the input or the configuration: a full disk, an I/O error, a read-only
    file system. A sweep stops with this (one line, exit status 1); the trial it cut short is not
    counted and runs again when the sweep is started again."""


#: errno values that mean "the environment failed" (full disk or quota, I/O error, read-only, file too large)
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG})
#: how SQLite (through SQLAlchemy and MLflow, which keep only the text) reports the same failures
_ENVIRONMENT_TEXTS = ("database or disk is full", "disk i/o error", "no space left on device", "disk quota exceeded",
                      "read-only file system", "file too large")


def _chain(err: BaseException | None):
    """``err`` and the errors it was raised from or while handling, each once."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def interrupted(err: BaseException) -> bool:
    """Whether ``err`` is Ctrl-C, or an error raised while Ctrl-C was being handled (a library's
    clean-up code can fail half-way, e.g. Optuna's ``tell`` cut short inside its journal write)."""
    return any(isinstance(e, KeyboardInterrupt) for e in _chain(err))


def environment_problem(err: BaseException) -> str | None:
    """What failed in the environment, if ``err`` (or an error it was raised from) is such a failure."""
    for e in _chain(err):
        if isinstance(e, EnvironmentFailure):
            return str(e)
        if isinstance(e, OSError) and e.errno in ENVIRONMENT_ERRNOS:
            return f"{e.strerror or os.strerror(e.errno)}" + (f": {e.filename}" if e.filename else "")
        if any(t in str(e).lower() for t in _ENVIRONMENT_TEXTS):
            return str(e).splitlines()[0][:300]
    return None


def stop_status(err: BaseException) -> tuple[int, str] | None:
    """How a run that ``err`` stopped ends when ``err`` is no bug: Ctrl-C is (130, "interrupted"), an
    environment failure (1, what failed); anything else is None (a bug: its traceback is shown)."""
    if interrupted(err):
        return 130, "interrupted"
    problem = environment_problem(err)
    return None if problem is None else (1, problem)
