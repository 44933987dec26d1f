"""The column rules shared by CSV and table files: is the first row a header, which columns hold the
scores and the labels, what the classes are called, and which column is a row index, not scores.

CSV (:mod:`.csvfile`, :mod:`.csvfast`) and Parquet / Arrow / Feather (:mod:`.tables`) apply the same
rules, so ``--scores``/``--labels``/``file:COLS`` mean the same thing in every format. Every problem is
an :class:`~calibrate_cli.errors.InputError` whose one line starts with the file's name.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Sequence

import numpy as np

from ..errors import InputError
from .formats import names_text
from .number_text import PLAIN_NUMBERS, is_plain_float, lenient_only, parse_int

__all__ = [
    "AmbiguousHeaderError",
    "CsvCellError",
    "IndexColumnError",
    "IndexWatch",
    "is_number",
    "cell_float",
    "not_plain",
    "first_row_is_header",
    "column_name",
    "column_index",
    "score_columns",
    "class_indices",
    "class_names_of",
    "class_lookup",
    "labels_from_cells",
    "index_name",
    "index_column_error",
    "check_index_values",
]


class AmbiguousHeaderError(InputError):
    """The first row of a CSV file could be a header or a row of data; the caller must say which."""


class CsvCellError(InputError):
    """A CSV cell that must be a number is not (e.g. an id column among the score columns);
    ``named`` tells whether the file has a header (so that columns can be picked by name)."""

    def __init__(self, message: str, *, named: bool = False) -> None:
        super().__init__(message)
        self.named = named


def is_number(cell: str) -> bool:
    """A number as calib reads it: ASCII decimal or scientific notation (or nan/inf), never
    ``float()``'s ``1_5`` or non-ASCII digits (:mod:`calibrate_cli.data.number_text`)."""
    return is_plain_float(cell)


def cell_float(cell: str) -> float:
    """``float(cell)`` of a plain number; ValueError for anything else (``1_5``, ``١٢`` included)."""
    value = float(cell)
    if ("_" in cell or not cell.isascii()) and not is_plain_float(cell):
        raise ValueError(cell)
    return value


def not_plain(cell: str) -> str:
    """Why a cell that ``float()`` would read is refused (empty when ``float()`` refuses it too)."""
    return f" calib reads ({PLAIN_NUMBERS})" if lenient_only(cell) else ""


def first_row_is_header(cells: list[str], label: str, line: int, n_rows: int, expected_rows: int | None) -> bool:
    """Header detection: names only → header; numbers only → data; anything else is ambiguous.

    A row of the integers 0, 1, …, W−1 is also ambiguous: it is how pandas writes the header of
    unnamed columns (``DataFrame(array).to_csv(index=False)``), and a plausible row of data. It is
    settled only when ``expected_rows`` (the other input's N) fits one reading and not the other.
    """
    for i, c in enumerate(cells):
        if lenient_only(c):
            raise InputError(f"{label}: line {line}, column {i}: {c!r} is not a number{not_plain(c)}")
    kinds = ["empty" if not c else "number" if is_number(c) else "name" for c in cells]
    if all(k == "name" for k in kinds):
        return True
    shown = ",".join(cells)
    shown = shown if len(shown) <= 60 else shown[:57] + "…"
    if all(k == "number" for k in kinds):
        if cells != [str(i) for i in range(len(cells))] or n_rows == 1:
            return False
        if expected_rows is not None and expected_rows != n_rows and expected_rows == n_rows - 1:
            return True
        if expected_rows is not None and expected_rows == n_rows:
            return False
        raise AmbiguousHeaderError(
            f"{label}: line {line}: cannot tell whether the first row {shown!r} is a header (as pandas writes "
            f"column names) or data ({n_rows - 1} or {n_rows} samples)"
        )
    why = "has an empty cell" if "empty" in kinds else "mixes names and numbers"
    raise AmbiguousHeaderError(
        f"{label}: line {line}: cannot tell whether the first row {shown!r} is a header or data (it {why})"
    )


def column_name(names: Sequence[str] | None, index: int) -> str:
    """How a message names column ``index``: its quoted name, or its 0-based index without a header."""
    return repr(names[index]) if names is not None else str(index)


def column_index(names: Sequence[str] | None, column: str, width: int, label: str) -> int:
    """The 0-based index of ``column``: a name of the header, else an index (negative counts from the end)."""
    if names is not None and column in names:
        return list(names).index(column)
    try:
        index = parse_int(column)
    except ValueError:
        shown = ", ".join(names) if names else "no header row"
        raise InputError(f"{label}: no column named {column!r} ({shown})") from None
    if not -width <= index < width:
        raise InputError(f"{label}: column {index} is out of range ({width} columns)")
    return index % width


def score_columns(
    names: Sequence[str] | None, width: int, spec: str | None, exclude: int | None, label: str,
    *, check_index: bool = False,
) -> list[int]:
    """The score columns of a file with ``width`` columns named ``names`` (None without a header): all
    but ``exclude`` (the labels), or those ``spec`` names.

    ``spec`` is a comma-separated list of column names, 0-based indices or glob patterns
    (``p_*``; matched against the header, in file order). ``check_index``: without ``spec``, a
    column named as a row index (:func:`index_name`) is refused (:class:`IndexColumnError`)."""
    if spec is None:
        columns = [i for i in range(width) if i != exclude]
        if check_index and names is not None:
            named = [c for c in columns if index_name(names[c])]
            if named:
                raise index_column_error(label, names, columns, named[0], "by its name")
        return columns
    chosen: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if any(ch in part for ch in "*?["):
            if names is None:
                raise InputError(f"{label}: column pattern {part!r} needs a header row with column names")
            hits = [i for i, name in enumerate(names) if fnmatch.fnmatchcase(name, part)]
            if not hits:
                raise InputError(f"{label}: no column matches {part!r} (columns: {names_text(names)})")
        else:
            hits = [column_index(names, part, width, label)]
        chosen += [i for i in hits if i not in chosen]
    if not chosen:
        raise InputError(f"{label}: no score columns chosen by {spec!r}")
    if exclude is not None and exclude in chosen:
        raise InputError(f"{label}: column {column_name(names, exclude)} is both the labels and a score column")
    return chosen


def class_names_of(columns: Sequence[str]) -> list[str]:
    """The class of each score column: its name without the prefix that every score column
    shares up to an underscore (``p_cat, p_dog`` → ``cat, dog``; ``cat, dog`` stay)."""
    columns = list(columns)
    cut = os.path.commonprefix(columns).rfind("_") + 1 if len(columns) > 1 else 0
    if cut and all(len(c) > cut for c in columns):
        return [c[cut:] for c in columns]
    return columns


def class_lookup(classes: Sequence[str], label: str) -> tuple[list[str], dict[str, int]]:
    """(the short class names, {full or short name: class index}) of score columns named after classes;
    a name that would point at two columns is a one-line error."""
    short = class_names_of(classes)
    lookup: dict[str, int] = {}
    for i, names in enumerate(zip(classes, short)):
        for text in names:
            if lookup.setdefault(text, i) != i:
                raise InputError(f"{label}: class name {text!r} names two score columns")
    return short, lookup


def labels_from_cells(cells: list[str], lines: list[int], label: str, column: str, classes: Sequence[str] | None):
    """Labels from text: numbers as they are (checked later), or class names mapped to class indices."""
    for cell, line in zip(cells, lines):
        if not cell:
            raise InputError(f"{label}: line {line}: empty label in column {column}")
    try:
        return np.array([cell_float(c) for c in cells], dtype=np.float64)
    except ValueError:
        pass
    line, name = next((ln, c) for c, ln in zip(cells, lines) if not is_number(c))
    if lenient_only(name) and (classes is None or name not in class_lookup(classes, label)[1]):
        raise InputError(f"{label}: line {line}: label {name!r} is not a number{not_plain(name)}")
    if classes is None:
        raise InputError(
            f"{label}: line {line}: label {name!r} is a name, but the score columns have no names to match it to; "
            "give class indices 0..K−1, or name the score columns after the classes (p_<class> or <class>)"
        )
    return class_indices(cells, classes, label, lambda i: f"line {lines[i]}")


def class_indices(cells: Sequence, classes: Sequence[str], label: str, where) -> np.ndarray:
    """The class index of each class name in ``cells`` (stripped), by the score columns' names
    ``classes`` (:func:`class_lookup`); ``where(i)``: cell i's place in a message ("line 4")."""
    short, lookup = class_lookup(classes, label)
    out = np.empty(len(cells), dtype=np.int64)
    for i, cell in enumerate(cells):
        index = lookup.get(cell.strip()) if isinstance(cell, str) else None
        if index is None:
            raise InputError(
                f"{label}: {where(i)}: label {cell!r} is not a class (classes: {names_text(short)}, "
                "from the score columns' names, in their order)"
            )
        out[i] = index
    return out


# ------------------------------------------------------------------------------- index columns
#: column names that say "row number", not "score" (compared stripped, in lower case); pandas' index
#: column written without a name ("") and read back ("Unnamed: 0") too
INDEX_NAMES = frozenset({"id", "idx", "index", "row", ""})
_UNNAMED = re.compile(r"unnamed: ?\d+")
#: a column holding the integers 0..N−1 (or 1..N) in order is a row index from this many rows on
#: (below, a genuine score column can read 0, 1 or 1, 2: the probabilities of two one-hot rows)
MIN_INDEX_ROWS = 3


def index_name(name: str) -> bool:
    """Whether a column's name says it holds row numbers: id, idx, index, row (any case), or the
    name pandas gives its unnamed index column ("", "Unnamed: 0")."""
    text = name.strip().lower()
    return text in INDEX_NAMES or _UNNAMED.fullmatch(text) is not None


class IndexColumnError(InputError):
    """The score columns were not chosen, and one of the columns taken for scores looks like a row
    index (by its name, or by holding 0..N−1 or 1..N in order). ``reason`` is the message without the
    remedy, ``spec`` a choice of the other columns that fixes it (None when there is none)."""

    def __init__(self, reason: str, spec: str | None):
        fix = f"score_cols={spec!r}" if spec is not None else "score_cols"
        super().__init__(f"{reason}; choose the score columns ({fix})")
        self.reason, self.spec = reason, spec


def _suggested_spec(names: Sequence[str] | None, rest: list[int]) -> str | None:
    """A ``score_cols`` choosing exactly the columns ``rest`` (in order): a glob of their common
    prefix (``logit_*``) when it matches them and nothing else, else their names (or indices)."""
    if not rest:
        return None
    if names is None:
        return ",".join(str(c) for c in rest)
    chosen = [names[c] for c in rest]
    prefix = os.path.commonprefix(chosen) if len(chosen) > 1 else ""
    # a prefix that ends a word (logit_, p-) or is followed by numbers only (c0, c1, …): not l* of logit_0, label
    word = prefix[-1:] in ("_", "-", ".", " ") or all(name[len(prefix):].isdigit() for name in chosen)
    if prefix and word and not any(ch in prefix for ch in "*?[,"):
        pattern = prefix + "*"
        if [i for i, name in enumerate(names) if fnmatch.fnmatchcase(name, pattern)] == rest:
            return pattern
    return ",".join(chosen)


def index_column_error(
    label: str, names: Sequence[str] | None, columns: list[int], bad: int, why: str
) -> IndexColumnError:
    """The error for score column ``bad`` (a file column index) that looks like a row index."""
    shown = repr(names[bad]) if names is not None else str(bad)
    rest = [c for c in columns if c != bad and not (names is not None and index_name(names[c]))]
    reason = f"{label}: column {shown} looks like a row index ({why}), not scores"
    return IndexColumnError(reason, _suggested_spec(names, rest))


class IndexWatch:
    """Watches score columns chosen by default, block by block, for a row index: a column holding
    the integers 0..N−1 or 1..N in order (N ≥ :data:`MIN_INDEX_ROWS`). :meth:`finish` after the last
    block raises :class:`IndexColumnError` for the first such column. ``columns``: the file columns
    of the scores' columns (in order), ``names`` the file's column names (None without a header)."""

    def __init__(self, label: str, names: Sequence[str] | None, columns: list[int]):
        self.label, self.names, self.columns = label, names, list(columns)
        self.starts: dict[int, int | None] = {j: None for j in range(len(self.columns))}  # candidates
        self.rows = 0

    def block(self, scores: np.ndarray) -> None:
        scores = np.asarray(scores)
        rows = scores.shape[0] if scores.ndim else 0
        if not rows or not self.starts or scores.ndim > 2:
            self.starts = {} if scores.ndim > 2 else self.starts
            self.rows += rows
            return
        for j in list(self.starts):
            column = scores[:, j] if scores.ndim == 2 else scores
            start = self.starts[j]
            if start is None:
                first = column[0]
                if not (first == 0 or first == 1):
                    del self.starts[j]
                    continue
                start = self.starts[j] = int(first)
            if not _counts_up(column, start + self.rows):
                del self.starts[j]
        self.rows += rows

    def finish(self) -> None:
        if self.rows < MIN_INDEX_ROWS or not self.starts:
            return
        bad = self.columns[min(self.starts)]
        start = self.starts[min(self.starts)]
        why = f"it holds {start}, {start + 1}, {start + 2}, …, {start + self.rows - 1} in order"
        raise index_column_error(self.label, self.names, self.columns, bad, why)


def _counts_up(column: np.ndarray, first: int) -> bool:
    """Whether ``column`` is first, first + 1, …, in order (compared in blocks: no (N,) temporary)."""
    n = column.shape[0]
    if column[-1] != first + n - 1:
        return False
    step = 1 << 16
    for a in range(0, n, step):
        part = column[a:a + step]
        if not np.array_equal(part, np.arange(first + a, first + a + part.shape[0])):
            return False
    return True


def check_index_values(label: str, names, columns: list[int], scores: np.ndarray) -> None:
    """Refuse score columns chosen by default when one holds 0..N−1 or 1..N in order (:class:`IndexWatch`)."""
    watch = IndexWatch(label, names, columns)
    watch.block(scores)
    watch.finish()
