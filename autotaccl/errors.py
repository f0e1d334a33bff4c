"""The error types for bad user input: they name the file (or the argument), the field and what was expected."""
from __future__ import annotations

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
