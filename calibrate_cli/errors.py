"""Exceptions raised by calib's core.

Every error a user can cause derives from :class:`CalibError`; the CLI turns it into a one-line
``Error: ...`` on stderr with exit code 2 (see ``calibrate_cli.cli``). The core never exits or prints.
"""


class CalibError(Exception):
    """Base class of every error calib reports to a user."""


class InputError(CalibError, ValueError):
    """Bad input data: unreadable file, wrong shape, NaN scores, labels out of range, ..."""


class OutputError(CalibError, OSError):
    """An output file cannot be written (exists without ``force``, unwritable folder, ...)."""
