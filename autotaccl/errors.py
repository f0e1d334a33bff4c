"""The one error type for bad user input: it names the file, the field and what was expected."""
from __future__ import annotations


class InputError(ValueError):
    """A file or argument a user gave us is malformed.

    The CLI prints ``str(error)`` as one line and exits with status 2.
    """

    def __init__(self, source: str, field: str, expected: str) -> None:
        self.source = str(source)
        self.field = field
        self.expected = expected
        super().__init__(f"{self.source}: {field}: {expected}")


class InfeasibleError(ValueError):
    """A sketch or configuration admits no algorithm; the message says why."""
