"""The C-speed path of the CSV reader: numpy's C parser (``np.loadtxt``) on blocks of lines.

:func:`read_numeric_csv` reads the header row with Python's csv module (the same header rules as
the full reader), then parses the rest in blocks of about :data:`TEXT_BLOCK` characters straight
into preallocated float64 arrays of only the wanted columns (memory: the result plus one block).
It handles the common, well-formed file only: any file it is not sure to read exactly as the full
reader (:func:`calibrate_cli.io._read_csv_table`) would — quotes, NUL bytes, a cell that is not a
number (an id column, class-name labels, a damaged cell), rows of other widths, a pandas
``0,1,…,W−1`` first row — makes it return None, and the caller runs the full reader, which gives
every check and error message. Both parse numbers with correct rounding (``float()`` and numpy's
parser), so the values are bit-identical.
"""

from __future__ import annotations

import csv
import io as _io
import os
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

#: characters of text parsed per np.loadtxt call (~100k rows of 10 scores)
TEXT_BLOCK = 8 << 20


class _Fallback(Exception):
    """The fast path cannot be sure: the full reader must run."""


def _count_lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(16 << 20)
            if not block:
                break
            n += block.count(b"\n")
    return n + 1


def _parse(text: str, width: int) -> np.ndarray:
    if '"' in text or "\x00" in text or "#" in text:
        raise _Fallback
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data" on a block of blank lines
            values = np.loadtxt(
                _io.StringIO(text), delimiter=",", comments=None, dtype=np.float64, ndmin=2, quotechar=None
            )
    except (ValueError, TypeError):
        raise _Fallback from None
    if values.shape[0] and values.shape[1] != width:
        raise _Fallback
    return values


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


def _read(path, label, header, decide_header, choose):
    from ..errors import InputError

    with open(path, encoding="utf-8-sig", newline=None) as f:
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
        n_max = _count_lines(path)
        scores = np.empty((n_max, len(columns)), dtype=np.float64)
        labels = np.empty(n_max, dtype=np.float64) if label_index is not None else None
        n = 0
        pending = "" if is_header else first_line
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
                values = _parse(block, width)
                rows = values.shape[0]
                if n + rows > n_max:
                    raise _Fallback
                scores[n:n + rows] = values[:, columns]
                if labels is not None:
                    labels[n:n + rows] = values[:, label_index]
                n += rows
            if not text:
                break
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
