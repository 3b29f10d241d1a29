"""The two kinds of failure tag reports (DESIGN.md § Errors).

`InputError` is bad input from the user: the CLI prints its one-line message on stderr and exits 2.
Anything else escaping a verb is an internal failure: exit 1, traceback only under ``--debug``.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad user input: names the file, where in it, what was expected and what was found.

    >>> str(InputError("t.json", "machines[1].devices[0].count", "a positive integer", "-2"))
    't.json: machines[1].devices[0].count: expected a positive integer, found -2'
    """

    def __init__(self, file: str, where: str, expected: str, found: str | None = None):
        self.file = str(file)
        self.where = where
        self.expected = expected
        self.found = found
        msg = f"{self.file}: {where}: expected {expected}"
        if found is not None:
            msg += f", found {found}"
        super().__init__(msg.replace("\n", " "))


def short_repr(value: object, limit: int = 60) -> str:
    """A short, one-line representation of a found value for error messages."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
