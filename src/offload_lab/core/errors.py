"""Errors that the CLI turns into a clear message and a non-zero exit code.

Each subclass carries its own exit code so that scripts can tell a bad input from a stale data file from a failed
producer without parsing text.
"""

from __future__ import annotations

# An error nobody foresaw: the CLI prints one line pointing to a log holding the traceback and exits with this code
# (EX_SOFTWARE in sysexits.h). Never 1, which already means "does not fit" (audit) or "invalid side" (quality).
INTERNAL = 70


class OffloadLabError(Exception):
    """Base class: the message names the input and says what to do."""

    exit_code = 1


class InputError(OffloadLabError):
    """A file, flag or parameter given by the user is wrong."""

    exit_code = 2


class ServerError(OffloadLabError):
    """The server could not be started, reached, or stopped."""

    exit_code = 3


class ProducerError(OffloadLabError):
    """A notebook or experiment failed while it ran."""

    exit_code = 4


class ClaimError(OffloadLabError):
    """A claim could not be computed: missing file, changed file, or a failing function."""

    exit_code = 5


class AuditError(OffloadLabError):
    """The rendered paper holds a number that no claim produced, or a leftover marker."""

    exit_code = 6
