"""CSV files: the registry's loader and column capabilities (:class:`~calibrate_cli.data.formats.InputFormat`).

Each read first tries the C-speed path (:mod:`.csvfast`); any doubt, and every error, goes to the full
reader here (Python's csv module), which gives every check and message. Both apply the column rules
of :mod:`.columns` and parse numbers with correct rounding, so the values are bit-identical.
``file.csv:COLS`` chooses the score columns (or, as labels, the labels column), as for tables.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import InputError
from . import csvfast
from .columns import (
    CsvCellError,
    IndexWatch,
    cell_float,
    check_index_values,
    column_index,
    column_name,
    first_row_is_header,
    is_number,
    labels_from_cells,
    not_plain,
    score_columns,
)
from .formats import NotStreamed, ScoreBlocks, ScoresFile, one_line
from .number_text import lenient_only

__all__ = ["load_csv", "read_columns", "iter_blocks", "read_labels"]


@dataclass(frozen=True)
class _CsvTable:
    """A CSV file as text: the header's names (None without a header), the data rows, and the
    line number of each data row in the file (1-based; blank lines are skipped but counted)."""

    names: list[str] | None
    rows: list[list[str]]
    lines: list[int]

    @property
    def width(self) -> int:
        return len(self.names) if self.names is not None else len(self.rows[0]) if self.rows else 0

    def column_name(self, index: int) -> str:
        return column_name(self.names, index)


def _fast_csv(
    path: Path, label: str, header=None, expected_rows=None, label_col=None, score_cols=None, check_index=False
):
    """(names, chosen columns, scores, labels) through the C-speed reader, or None when the full reader
    must run (:mod:`calibrate_cli.data.csvfast`: any doubt, and every error, goes to the full reader).
    ``check_index``: the columns are scores, refused when one looks like a row index (:class:`IndexWatch`)."""
    chosen: list = []

    def decide(cells: list[str], line: int, n_rows: int) -> bool:
        return first_row_is_header(cells, label, line, n_rows, expected_rows)

    def choose(names, width):
        col = None if label_col is None else column_index(names, label_col, width, label)
        chosen[:] = score_columns(names, width, score_cols, col, label, check_index=check_index)
        return list(chosen), col

    found = csvfast.read_numeric_csv(path, label, header, decide, choose)
    if found is None:
        return None
    names, scores, labels = found
    return names, list(chosen), scores, labels


def _read_csv_table(
    path: Path, label: str, header: bool | None = None, expected_rows: int | None = None
) -> _CsvTable:
    """Rows of text; ``header`` True/False says whether the first row is a header, None detects it."""
    rows, lines = [], []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            for row in reader:
                if row and any(c.strip() for c in row):
                    rows.append(row)
                    lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise InputError(f"{label}: not a text CSV file") from None
    except (OSError, csv.Error) as exc:
        raise InputError(f"{label}: cannot read CSV ({one_line(exc)})") from None
    if not rows:
        raise InputError(f"{label}: empty CSV file (N = 0)")
    first = [c.strip() for c in rows[0]]
    if header is None:
        header = first_row_is_header(first, label, lines[0], len(rows), expected_rows)
    names = None
    if header:
        names, rows, lines = first, rows[1:], lines[1:]
        if not rows:
            raise InputError(f"{label}: a header row but no data (N = 0)")
    width = len(names) if names is not None else len(rows[0])
    for row, line in zip(rows, lines):
        if len(row) != width:
            raise InputError(f"{label}: line {line} has {len(row)} columns, expected {width}")
    return _CsvTable(names, rows, lines)


def _numeric(table: _CsvTable, columns: list[int], label: str) -> np.ndarray:
    values = np.empty((len(table.rows), len(columns)), dtype=np.float64)
    for i, row in enumerate(table.rows):
        try:
            values[i] = [cell_float(row[c]) for c in columns]
        except ValueError:
            c = next(c for c in columns if not is_number(row[c]))
            where = f"{label}: line {table.lines[i]}, column {table.column_name(c)}: {row[c].strip()!r} is not a number"
            if lenient_only(row[c]):  # 1_5, ١٢: float() reads them, calib does not
                raise InputError(where + not_plain(row[c])) from None
            raise CsvCellError(where, named=table.names is not None) from None
    return values


def _key_columns(key: str | None, score_cols: str | None, label: str) -> str | None:
    """The score columns of ``file.csv:COLS`` (the key) or ``--scores`` (not both), as for tables."""
    if key is None:
        return score_cols
    if score_cols is not None:
        raise InputError(f"{label}: columns given twice (after ':' and as score columns); give one")
    if not key.strip():
        raise InputError(f"{label}: no columns after ':'; name them, e.g. {label}p_* or {label}label")
    return key


def load_csv(path: Path, key: str | None, label: str) -> np.ndarray:
    """The registry's loader: every column (or those ``file.csv:COLS`` names) as one array."""
    if key is not None:  # file.csv:COLS, as for tables
        return read_columns(path, key, label).scores
    fast = _fast_csv(path, label)
    if fast is not None:
        values = fast[2]
        return values[:, 0] if values.shape[1] == 1 else values
    table = _read_csv_table(path, label)
    values = _numeric(table, list(range(table.width)), label)
    return values[:, 0] if values.shape[1] == 1 else values


def read_columns(
    path: Path,
    key: str | None,
    label: str,
    *,
    score_cols: str | None = None,
    label_col: str | None = None,
    header: bool | None = None,
    expected_rows: int | None = None,
) -> ScoresFile:
    """The score columns (``file.csv:COLS`` or ``score_cols``; by default every column but the labels,
    none of which may be a row index) and, with ``label_col``, the labels column."""
    score_cols = _key_columns(key, score_cols, label)
    by_default = score_cols is None  # every column but the labels: none may be a row index
    fast = _fast_csv(path, label, header, expected_rows, label_col, score_cols, check_index=by_default)
    if fast is not None:
        names, columns, scores, labels = fast
    else:
        table = _read_csv_table(path, label, header, expected_rows)
        names = table.names
        col = None if label_col is None else column_index(table.names, label_col, table.width, label)
        columns = score_columns(table.names, table.width, score_cols, col, label, check_index=by_default)
        scores = _numeric(table, columns, label)
    if by_default:
        check_index_values(label, names, columns, scores)
    classes = tuple(names[c] for c in columns) if names is not None else None
    if fast is None:
        labels = None
        if col is not None:
            labels = labels_from_cells(
                [row[col].strip() for row in table.rows], table.lines, label, table.column_name(col), classes
            )
    shown = classes if classes is not None else tuple(columns)
    return ScoresFile(scores[:, 0] if scores.shape[1] == 1 else scores, labels, classes, shown)


def iter_blocks(
    path: Path,
    key: str | None,
    label: str,
    *,
    score_cols: str | None = None,
    label_col: str,
    header: bool | None = None,
):
    """(N as counted from the lines, False: a guess, blocks), or None when only the full reader handles
    the file. Iterating the blocks raises :class:`NotStreamed` where the full reader must run instead."""
    score_cols = _key_columns(key, score_cols, label)

    def decide(cells: list[str], line: int, n_rows: int) -> bool:
        return first_row_is_header(cells, label, line, n_rows, None)

    chosen: list = []

    def choose(names, width):
        col = column_index(names, label_col, width, label)
        chosen[:] = score_columns(names, width, score_cols, col, label, check_index=score_cols is None)
        return list(chosen), col

    found = csvfast.iter_numeric_csv(path, label, header, decide, choose)
    if found is None:
        return None
    names = found[0]
    watch = IndexWatch(label, names, chosen) if score_cols is None else None

    def blocks():
        try:
            for scores, labels in found[1]:
                if watch is not None:
                    watch.block(scores)
                yield (scores[:, 0] if scores.shape[1] == 1 else scores), labels
        except csvfast.Fallback:
            raise NotStreamed(label) from None
        if watch is not None:
            watch.finish()

    shown = tuple(names[c] for c in chosen) if names is not None else tuple(chosen)
    # N as a guess (the lines, less empty ones and the header): the summary pass checks it
    return csvfast.count_data_rows(path, names is not None), False, ScoreBlocks(blocks(), shown)


def read_labels(
    path: Path,
    key: str | None,
    label: str,
    *,
    header: bool | None = None,
    classes: Sequence[str] | None = None,
    expected_rows: int | None = None,
) -> np.ndarray:
    """Labels: the column ``file.csv:COLUMN`` names, or the file's columns (one column may hold class
    names, mapped to ``classes``; several are one-hot rows)."""
    if key is not None:  # file.csv:COLUMN: that column holds the labels (numbers or class names)
        if not key.strip():
            raise InputError(f"{label}: no column after ':'; name the labels column, e.g. {label}label")
        table = _read_csv_table(path, label, header, expected_rows)
        col = column_index(table.names, key, table.width, label)
        cells = [row[col].strip() for row in table.rows]
        return labels_from_cells(cells, table.lines, label, table.column_name(col), classes)
    fast = _fast_csv(path, label, header, expected_rows)
    if fast is not None:
        values = fast[2]
        return values[:, 0] if values.shape[1] == 1 else values
    table = _read_csv_table(path, label, header, expected_rows)
    if table.width == 1:
        cells = [row[0].strip() for row in table.rows]
        return labels_from_cells(cells, table.lines, label, table.column_name(0), classes)
    return _numeric(table, list(range(table.width)), label)
