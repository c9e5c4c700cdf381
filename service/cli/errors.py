"""How ``compcap`` reports a failure: a user's mistake is one line ``compcap COMMAND: what is wrong`` and
exit 2; anything else one short line pointing at ``--debug`` and exit 1. Commands raise ``UsageError``
for a mistake they find themselves; the common ordinary exceptions (a missing or unreadable path, a bad
value) are read as mistakes too. Standard library only: ``service.cli`` imports it before any command."""

from __future__ import annotations

import errno

USAGE = 2  # a mistake of the user's (argparse's own code for a usage error)
FAILURE = 1  # anything else
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)

_PATH_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError, FileExistsError)


class UsageError(Exception):
    """A mistake of the user's (a bad or missing argument, a path that is not there): printed as
    ``compcap COMMAND: <message>`` without a traceback, exit 2. The message names the argument."""


def one_line(text: str) -> str:
    """``text`` on one line: its non-empty lines joined by "; "."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _path_message(exc: OSError) -> str:
    if exc.filename is None:  # raised with a message of its own
        return str(exc)
    reason = (exc.strerror or errno.errorcode.get(exc.errno or 0, "error")).lower()
    return f"{exc.filename}: {reason}"


def describe(exc: BaseException, debug: bool = False) -> tuple[int, str]:
    """(exit code, one-line message) for an exception a command let through (``debug``: its traceback
    is printed too, so the message does not point at ``--debug``)."""
    if isinstance(exc, UsageError):
        return USAGE, one_line(str(exc))
    if isinstance(exc, _PATH_ERRORS):
        return USAGE, one_line(_path_message(exc))
    if isinstance(exc, ValueError) and str(exc):  # a value the command refused, named in its message
        return USAGE, one_line(str(exc))
    detail = one_line(str(exc))
    message = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return FAILURE, message if debug else f"{message} (run with --debug for the traceback)"


__all__ = ["FAILURE", "INTERRUPTED", "USAGE", "UsageError", "describe", "one_line"]
