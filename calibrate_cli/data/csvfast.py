"""The C-speed path of the CSV reader: numpy's C parser (``np.loadtxt``) on blocks of lines.

:func:`read_numeric_csv` reads the header row with Python's csv module (the same header rules as
the full reader), then parses the rest in blocks of about :data:`TEXT_BLOCK` characters straight
into preallocated float64 arrays of only the wanted columns (memory: the result plus one block).
Text columns are read as text when the first data row shows them: ignored columns (ids) and a labels
column of class names (mapped to the score columns' names as the full reader maps them). It handles
well-formed files only: any file it is not sure to read exactly as the full reader
(:mod:`calibrate_cli.data.csvfile`) would — quotes, NUL bytes, a score cell that is not a
number, a label that is not a class, rows of other widths, blank-only rows, an ambiguous first row —
makes it return None, and the caller runs the full reader, which gives every check and error message. Both parse numbers with correct rounding (``float()`` and numpy's
parser), so the values are bit-identical.
"""

from __future__ import annotations

import csv
import io as _io
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

from .columns import class_names_of, is_number

#: characters of text parsed per np.loadtxt call (~22k rows of 10 scores; the text and its parse are
#: held at once: 2 MB keeps them small next to the summary's own chunk, at loadtxt's speed)
TEXT_BLOCK = 2 << 20


class _Fallback(Exception):
    """The fast path cannot be sure: the full reader must run."""


def count_data_rows(path: Path, header: bool) -> int:
    """The rows of data a well-formed CSV file most likely holds: its lines (a last one without a
    newline counted), less the empty lines before the first row and after the last, and less the
    header. One ``bytes.count`` pass in 1 MiB reads. A guess for an exact-N
    summary pass, which checks it against the rows read: empty lines between rows, a lone-``\\r``
    file make it miss, and the pass then finds the difference."""
    lines = 0
    with open(path, "rb") as f:
        head = f.read(1 << 12)
        while True:
            block = f.read(1 << 20)  # small reads: the count adds no memory to speak of
            if not block:
                break
            lines += block.count(b"\n")
        lines += head.count(b"\n")
        size = f.tell()
        f.seek(max(0, size - (1 << 12)))
        tail = f.read()
    if not size:
        return 0
    leading = head[: len(head) - len(head.lstrip(b"\r\n"))].count(b"\n")
    body = tail.rstrip(b"\r\n")
    if tail.endswith(b"\n"):
        trailing = tail[len(body):].count(b"\n") - 1  # the first newline ends the last row
    else:
        trailing, lines = 0, lines + 1
    return max(0, lines - leading - trailing - int(header))


#: characters kept of a class-name label (a longer one goes to the full reader) and of an ignored text cell
LABEL_CHARS, IGNORED_CHARS = 64, 16


def _parse(text: str, width: int, dtype=None) -> np.ndarray:
    """(rows, width) float64, or with a structured ``dtype`` (text columns) a (rows,) record array."""
    if '"' in text or "\x00" in text or "#" in text:
        raise _Fallback
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data" on a block of blank lines
            values = np.loadtxt(
                _io.StringIO(text), delimiter=",", comments=None, dtype=np.float64 if dtype is None else dtype,
                ndmin=2 if dtype is None else 1, quotechar=None,
            )
    except (ValueError, TypeError):
        raise _Fallback from None
    if dtype is None and values.shape[0] and values.shape[1] != width:
        raise _Fallback
    return values


def _plan(block: str, width: int, columns: list[int], label_index, names):
    """From the block's first row: None (every column parsed as float64), or (record dtype, whether the
    labels are class names) when ignored columns or the labels hold text (ids, class names)."""
    line = next((ln for ln in block.splitlines() if ln.strip()), "")
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != width:
        raise _Fallback
    ignored = [i for i in range(width) if i not in columns and i != label_index]
    label_names = label_index is not None and not is_number(cells[label_index])
    if label_names and (names is None or not cells[label_index]):
        raise _Fallback  # names without named score columns, or an empty label: the full reader says so
    if not label_names and all(is_number(cells[i]) for i in ignored):
        return None
    kinds = []
    for i in range(width):
        if i in ignored:
            kinds.append((f"c{i}", f"U{IGNORED_CHARS}"))  # never read: truncation is harmless
        elif i == label_index and label_names:
            kinds.append((f"c{i}", f"U{LABEL_CHARS}"))
        else:
            kinds.append((f"c{i}", np.float64))
    return np.dtype(kinds), label_names


def _class_lookup(classes: list[str]) -> dict:
    """Class name (full column name or its short form) → class index, as the full reader maps them."""
    lookup: dict[str, int] = {}
    for i, pair in enumerate(zip(classes, class_names_of(classes))):
        for text in pair:
            if lookup.setdefault(text, i) != i:
                raise _Fallback  # a name for two classes: the full reader's error
    return lookup


def _class_indices(raw: np.ndarray, lookup: dict) -> np.ndarray:
    if raw.size and (np.char.str_len(raw) >= LABEL_CHARS).any():
        raise _Fallback  # possibly cut: the full reader
    uniq, inverse = np.unique(np.char.strip(raw), return_inverse=True)
    mapped = np.array([lookup.get(str(u), -1) for u in uniq], dtype=np.int64)
    if (mapped < 0).any():
        raise _Fallback  # not a class (or a number among names): the full reader's error
    return mapped[inverse.ravel()]


def read_numeric_csv(
    path: Path,
    label: str,
    header: bool | None,
    decide_header: Callable[[list[str], int, int], bool],
    choose: Callable[[list[str] | None, int], tuple[list[int], int | None]],
):
    """(names or None, scores (N, len(columns)) float64, labels (N,) float64 or None), or None when
    the full reader must run.

    ``decide_header(cells, line, n_rows)`` applies the header rules to the first row (it may raise the
    ambiguity error); ``choose(names, width)`` gives the score columns and the labels column."""
    try:
        return _read(path, label, header, decide_header, choose)
    except _Fallback:
        return None
    except (OSError, UnicodeDecodeError, csv.Error, MemoryError):
        return None


def iter_numeric_csv(
    path: Path,
    label: str,
    header: bool | None,
    decide_header: Callable[[list[str], int, int], bool],
    choose: Callable[[list[str] | None, int], tuple[list[int], int | None]],
):
    """(names or None, blocks) where ``blocks`` yields (scores (rows, len(columns)) float64, labels
    (rows,) or None) in row order, never the whole file: for a streamed summary pass. None when the
    file is not for this path (as :func:`read_numeric_csv`, and also a header only the number of rows
    can settle). ``blocks`` raises :class:`Fallback` where the full reader must run instead."""
    try:
        f = open(path, encoding="utf-8-sig", newline=None)
    except OSError:
        return None
    try:
        state = _start(f, header, decide_header, choose)
    except (_Fallback, OSError, UnicodeDecodeError, csv.Error):
        f.close()
        return None
    if state["deferred"]:
        f.close()
        return None

    def blocks():
        with f:
            try:
                yield from _blocks(f, state)
            except (OSError, UnicodeDecodeError, csv.Error, MemoryError):
                raise _Fallback from None

    return state["names"], blocks()


#: raised by the blocks of :func:`iter_numeric_csv` when the full reader must run
Fallback = _Fallback


def _start(f, header, decide_header, choose) -> dict:
    """Read the first row and settle the header and the columns (the full reader on any doubt)."""
    from ..errors import InputError

    line_no, first_line = 0, None
    while True:
        line = f.readline()
        if not line:
            raise _Fallback  # empty file: the full reader says so
        line_no += 1
        if '"' in line or "\x00" in line:
            raise _Fallback
        if line.strip(" \t\r\n,"):
            first_line = line
            break
        if line.strip("\r\n"):
            raise _Fallback  # a line of blanks or commas only: the full reader's rules
    cells = [c.strip() for c in next(csv.reader([first_line]))]
    # pandas' 0,1,…,W−1 header or a row of data: settled by the number of rows, once counted
    deferred = header is None and cells == [str(i) for i in range(len(cells))]
    try:
        is_header = header if header is not None else False if deferred else decide_header(cells, line_no, 2)
    except InputError:
        raise _Fallback from None  # the full reader raises it, after its own checks of the whole file
    names = cells if is_header else None
    width = len(cells)
    try:
        columns, label_index = choose(names, width)
    except InputError:
        raise _Fallback from None
    return dict(line_no=line_no, first_line=first_line, cells=cells, deferred=deferred, is_header=is_header,
                names=names, width=width, columns=columns, label_index=label_index)


def _blocks(f, state: dict):
    """(scores, labels or None) of each block of about :data:`TEXT_BLOCK` characters, in row order."""
    width, columns, label_index, names = state["width"], state["columns"], state["label_index"], state["names"]
    plan, lookup, names_mode = False, None, False
    pending = "" if state["is_header"] else state["first_line"]
    while True:
        text = f.read(TEXT_BLOCK)
        if text:
            cut = text.rfind("\n") + 1
            if cut == 0:
                pending += text
                continue
            block, pending = pending + text[:cut], text[cut:]
        else:
            block, pending = pending, ""
        if block.strip():
            if plan is False:  # the first rows decide how columns are parsed
                plan = _plan(block, width, columns, label_index, names)
                names_mode = plan is not None and plan[1]
                if names_mode:
                    lookup = _class_lookup([names[c] for c in columns])
            values = _parse(block, width, None if plan is None else plan[0])
            rows = values.shape[0]
            labels = None
            if plan is None:
                scores = np.ascontiguousarray(values[:, columns])  # C order, as the whole array's rows
                if label_index is not None:
                    labels = values[:, label_index].copy()
            else:
                scores = np.empty((rows, len(columns)), dtype=np.float64)
                for j, c in enumerate(columns):
                    scores[:, j] = values[f"c{c}"]
                if label_index is not None:
                    raw = values[f"c{label_index}"]
                    labels = _class_indices(raw, lookup) if names_mode else np.asarray(raw, dtype=np.float64)
            del values
            yield scores, labels
        if not text:
            break


def _read(path, label, header, decide_header, choose):
    from ..errors import InputError

    with open(path, encoding="utf-8-sig", newline=None) as f:
        state = _start(f, header, decide_header, choose)
        cells, line_no, deferred = state["cells"], state["line_no"], state["deferred"]
        names, width, columns, label_index = state["names"], state["width"], state["columns"], state["label_index"]
        n_max = count_data_rows(path, False)  # every non-empty line: at least the rows of data
        scores = np.empty((n_max, len(columns)), dtype=np.float64)
        labels = None
        n = 0
        for block, y in _blocks(f, state):
            rows = block.shape[0]
            if n + rows > n_max:
                raise _Fallback
            if labels is None and y is not None:
                labels = np.empty(n_max, dtype=y.dtype)
            scores[n:n + rows] = block
            if y is not None:
                labels[n:n + rows] = y
            n += rows
    start = 0
    if deferred:
        try:
            is_header = decide_header(cells, line_no, n)
            if is_header and choose(cells, width) != (columns, label_index):
                raise _Fallback  # columns chosen by these names differ from the same indices
        except InputError:
            raise _Fallback from None
        if is_header:
            names, start = cells, 1
    if n - start <= 0:
        raise _Fallback  # no data rows: the full reader's message
    return names, scores[start:n], None if labels is None else labels[start:n]
