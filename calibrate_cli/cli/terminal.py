"""The Rich pieces of the CLI's terminal output: imported on first use by :mod:`.render` (a table,
a console, a progress bar), so that JSON and CSV reports start without Rich."""

from __future__ import annotations

import copy
import errno
import os

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

#: below this many characters, a definition says too little to be worth a column: the column is dropped
MIN_DEFINITION_WIDTH = 24
#: the width of reports on a stdout that is not a terminal (a pipe, a file, a CI log) and no COLUMNS:
#: no limit in practice, so that tables come out whole (Rich would assume 80 columns and cut them)
UNLIMITED_WIDTH = 10_000


class CalibConsole(Console):
    """Rich's console, except that a closed pipe raises BrokenPipeError (Rich's own answer is
    ``SystemExit(1)``, which reads as a failed gate): the CLI ends quietly with exit code 141.

    On a stdout that is not a terminal, without COLUMNS in the environment, reports are as wide as
    they need (:data:`UNLIMITED_WIDTH`): a pipe or a CI log gets every definition whole, where Rich
    would cut tables at 80 columns; COLUMNS, when set, is honoured as on a terminal."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if (self._width is None and not self.stderr and kwargs.get("file") is None and not self.is_terminal
                and not os.environ.get("COLUMNS")):
            self._width = UNLIMITED_WIDTH

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


class FittedTable(Table):
    """A Rich table with one optional column (the definitions) that gives way on narrow consoles.

    When the console is too narrow for every cell on one line, the optional column is cut to the
    room left (one line per row, ending in "…"), or dropped when less than ``MIN_DEFINITION_WIDTH``
    characters are left; the other columns never wrap.
    """

    optional_column: str | None = None

    def __rich_console__(self, console, options):
        yield from Table.__rich_console__(self._fitted(console, options), console, options)

    def _fitted(self, console, options) -> Table:
        names = [c.header for c in self.columns]
        if self.optional_column not in names:
            return self
        wide = options.update(width=10_000)
        full = Measurement.get(console, wide, _plain(self)).maximum
        if full <= options.max_width:
            return self
        index = names.index(self.optional_column)
        table = _plain(self)
        table.columns = [copy.copy(c) for c in self.columns]
        optional = table.columns[index]
        cells = [console.render_str(c) if isinstance(c, str) else c for c in (optional.header, *optional.cells)]
        content = max(Measurement.get(console, wide, c).maximum for c in cells)
        room = options.max_width - (full - content)
        if room < MIN_DEFINITION_WIDTH:
            del table.columns[index]
        else:
            optional.no_wrap, optional.overflow, optional.max_width = True, "ellipsis", room
        return table


def _plain(table: Table) -> Table:
    """A shallow copy of ``table`` as a plain Rich table."""
    out = copy.copy(table)
    out.__class__ = Table
    return out
