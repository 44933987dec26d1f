"""Parquet, Arrow IPC and Feather tables (pyarrow, extra ``[arrow]``): columns chosen by name.

The scores are either several numeric columns (one per class, chosen by names, 0-based indices or
glob patterns such as ``logit_*``, comma-separated; in that order) or one list / fixed-size-list
column holding the K scores of each row. The labels are a numeric column of class indices, or a
text (or dictionary/categorical) column of class names, mapped to the score columns' names as in CSV
(:func:`calibrate_cli.data.columns.class_names_of`). The table is read by Parquet row group / Arrow record
batch, and only the chosen columns, into the result arrays: it is never decoded whole (memory: the
result plus one row group of the chosen columns). Legacy Feather v1 files (no record batches) are
read whole.

Refused with one line naming the file: a column that is missing, not numbers (text among the scores,
binary data such as a pickled object, structs, maps, nested lists), a null value, list rows of
different lengths (ragged), and files pyarrow cannot read (truncated, not a table).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..errors import InputError
from .columns import IndexWatch, class_indices, column_index, score_columns
from .formats import ScoreBlocks, ScoresFile, one_line, require

__all__ = ["read_table", "iter_table", "load_table_array", "read_columns", "iter_blocks", "read_labels", "TABLE_SUFFIXES"]

TABLE_SUFFIXES = (".parquet", ".arrow", ".feather")
_KINDS = {".parquet": "Parquet", ".arrow": "Arrow IPC", ".feather": "Feather"}


class _Table:
    """A table file opened lazily: column names and types, the number of rows (when the file says),
    and batches of chosen columns."""

    def __init__(self, path: Path, label: str):
        self.pa = require("pyarrow", label, f"{path.suffix.lower()} files", "arrow")
        self.path, self.label = path, label
        self.kind = _KINDS.get(path.suffix.lower(), "Arrow")
        try:
            if path.suffix.lower() == ".parquet":
                import pyarrow.parquet as pq

                self._parquet = pq.ParquetFile(os.fspath(path), memory_map=False, pre_buffer=False)
                self.schema = self._parquet.schema_arrow
                self.n_rows = self._parquet.metadata.num_rows
            elif _is_feather_v1(path):
                self._parquet = self._reader = None
                self._v1 = _read_feather_v1(path)
                self.schema, self.n_rows = self._v1.schema, self._v1.num_rows
            else:
                self._parquet = None
                # read (not memory-mapped: mapped pages would stay in the process's memory) batch by batch
                source = self.pa.OSFile(os.fspath(path), "r")
                try:
                    self._reader = self.pa.ipc.open_file(source)
                    self._stream = False
                    self.n_rows = self._reader.count_rows() if hasattr(self._reader, "count_rows") else None
                except self.pa.ArrowInvalid:
                    source.seek(0)
                    self._reader = self.pa.ipc.open_stream(source)  # the IPC stream format
                    self._stream = True
                    self.n_rows = None
                self.schema = self._reader.schema
        except InputError:
            raise
        except MemoryError:
            raise
        except Exception as exc:
            raise InputError(f"{label}: not a readable {self.kind} file ({one_line(exc)})") from None
        self.names = list(self.schema.names)
        if len(set(self.names)) != len(self.names):
            dup = next(n for n in self.names if self.names.count(n) > 1)
            raise InputError(f"{label}: two columns are named {dup!r}")

    def batches(self, columns: list[str]) -> Iterator:
        """Record batches of ``columns`` (pyarrow RecordBatch), in row order."""
        try:
            if self._parquet is not None:
                # one row group at a time (iter_batches reads ahead: ~1.5× the memory here)
                for i in range(self._parquet.num_row_groups):
                    part = self._parquet.read_row_group(i, columns=columns, use_threads=False)
                    yield from part.combine_chunks().to_batches()
                    del part
            elif self._reader is None:  # Feather v1: read whole at open
                yield from self._v1.select(columns).combine_chunks().to_batches()
            elif self._stream:
                for batch in self._reader:
                    yield batch.select(columns)
            else:
                for i in range(self._reader.num_record_batches):
                    yield self._reader.get_batch(i).select(columns)
        except InputError:
            raise
        except MemoryError:
            raise
        except Exception as exc:
            raise InputError(f"{self.label}: truncated or corrupt {self.kind} file ({one_line(exc)})") from None


def _is_feather_v1(path: Path) -> bool:
    """Feather v1 (pandas' ``to_feather`` before pyarrow 0.17): the magic ``FEA1`` at both ends."""
    with open(path, "rb") as f:
        if f.read(4) != b"FEA1":
            return False
        f.seek(-4, os.SEEK_END)
        return f.read(4) == b"FEA1"


def _read_feather_v1(path: Path):
    """A legacy Feather v1 file, whole (the format has no record batches to read one by one;
    pyarrow has deprecated writing it, not reading it)."""
    import warnings

    import pyarrow.feather as feather

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return feather.read_table(os.fspath(path), memory_map=False)


def _describe(t) -> str:
    return str(t)


def _check_scalar_number(pa, t, label: str, column: str) -> None:
    if pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t):
        return
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        raise InputError(
            f"{label}: column {column!r} holds bytes ({t}, e.g. pickled objects), which calib never loads; "
            "scores must be numbers"
        )
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t):
        raise InputError(f"{label}: column {column!r} holds text ({t}), not numbers")
    raise InputError(f"{label}: column {column!r} has type {t}, not numbers")


def _is_list(pa, t) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _score_layout(pa, schema, columns: list[str], label: str) -> tuple[str, np.dtype, int | None]:
    """("list", dtype, K or None) for one list column, ("columns", dtype, W) for scalar columns."""
    types = [schema.field(c).type for c in columns]
    lists = [c for c, t in zip(columns, types) if _is_list(pa, t)]
    if lists:
        if len(columns) > 1:
            raise InputError(
                f"{label}: column {lists[0]!r} holds a list of scores per row; choose it alone (it holds all K scores)"
            )
        t = types[0]
        inner = t.value_type
        if _is_list(pa, inner) or pa.types.is_struct(inner):
            raise InputError(f"{label}: column {columns[0]!r} holds nested lists ({t}); expected one list of K numbers per row")
        _check_scalar_number(pa, inner, label, columns[0])
        k = t.list_size if pa.types.is_fixed_size_list(t) else None
        return "list", np.dtype(inner.to_pandas_dtype()), k
    for c, t in zip(columns, types):
        _check_scalar_number(pa, t, label, c)
    dtype = np.result_type(*[np.dtype(t.to_pandas_dtype()) for t in types])
    return "columns", dtype, len(columns)


def _first_null(array) -> int:
    mask = array.is_null().to_numpy(zero_copy_only=False)
    return int(np.flatnonzero(mask)[0])


def _column_values(pa, array, label: str, column: str, row0: int) -> np.ndarray:
    if array.null_count:
        raise InputError(f"{label}: column {column!r}, row {row0 + _first_null(array)}: missing value (null)")
    return array.to_numpy(zero_copy_only=False)


def _list_values(pa, array, label: str, column: str, row0: int, k: int | None) -> tuple[np.ndarray, int]:
    """(rows, K) values of a list column chunk; ragged rows and nulls are refused."""
    if array.null_count:
        raise InputError(f"{label}: column {column!r}, row {row0 + _first_null(array)}: missing list (null)")
    if not pa.types.is_fixed_size_list(array.type):
        import pyarrow.compute as pc

        lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False)
        if len(array) and k is None:
            k = int(lengths[0])
        bad = np.flatnonzero(lengths != k)
        if bad.size:
            i = int(bad[0])
            raise InputError(
                f"{label}: column {column!r}, row {row0 + i}: a list of {int(lengths[i])} scores, but the rows "
                f"before hold {k} (ragged lists); every row must hold the K scores"
            )
    else:
        k = array.type.list_size
    values = array.flatten()
    if values.null_count:
        pos = _first_null(values)
        raise InputError(f"{label}: column {column!r}, row {row0 + pos // max(k, 1)}: missing score (null) in the list")
    return values.to_numpy(zero_copy_only=False).reshape(len(array), k), k


def _label_kind(pa, t, label: str, column: str) -> str:
    if pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
        return "text"
    _check_scalar_number(pa, t, label, column)  # raises with the type's own words
    return "number"  # pragma: no cover


def _text_labels(cells: Sequence[str], label: str, column: str, classes: Sequence[str] | None, row0: int) -> np.ndarray:
    if classes is None:
        raise InputError(
            f"{label}: column {column!r} holds class names, but the scores have no column names to match them to; "
            "give class indices 0..K−1, or one score column per class named after it (p_<class> or <class>)"
        )
    return class_indices(cells, classes, label, lambda i: f"column {column!r}, row {row0 + i}")


def _column_spec(table: _Table, key: str | None, score_cols: str | None, label: str) -> str | None:
    """The score columns asked for, after ':' or as score columns (not both); one line when the table
    has no columns or the spec is empty."""
    if key is not None and score_cols is not None:
        raise InputError(f"{label}: columns given twice (after ':' and as score columns); give one")
    spec = score_cols if score_cols is not None else key
    if spec is not None and not spec.strip():
        raise InputError(f"{label}: no columns after ':' (columns: {', '.join(table.names) or 'none'})")
    if not table.names:
        raise InputError(f"{label}: holds no columns")
    return spec


def _choose(table: _Table, spec: str | None, exclude: int | None, check_index: bool = False) -> list[str]:
    """The names of the score columns (``check_index``: scores, where none may be named as a row index)."""
    chosen = score_columns(table.names, len(table.names), spec, exclude, table.label, check_index=check_index)
    return [table.names[i] for i in chosen]


def _index_watch(table: _Table, spec: str | None, columns: list[str]):
    """An :class:`~calibrate_cli.data.columns.IndexWatch` of score columns chosen by default (None otherwise)."""
    if spec is not None:
        return None
    return IndexWatch(table.label, table.names, [table.names.index(c) for c in columns])


def read_table(
    path: Path, key: str | None, label: str, *, score_cols: str | None = None, label_col: str | None = None,
    classes: Sequence[str] | None = None, labels_only: bool = False,
) -> tuple[np.ndarray | None, np.ndarray | None, tuple[str, ...] | None]:
    """(scores, labels or None, class names or None) of a table file.

    ``score_cols`` (or ``key``, from ``file.parquet:COLS``) chooses the score columns, ``label_col``
    the labels column; without either, every column but the labels. ``labels_only``: the file is a
    labels file (one column, or ``key``), whose class names map to ``classes``."""
    table = _Table(path, label)
    pa = table.pa
    spec = _column_spec(table, key, score_cols, label)
    if labels_only:
        columns = _choose(table, spec, None)
        if len(columns) != 1:
            raise InputError(f"{label}: holds several columns ({', '.join(columns)}); name the labels one as {path}:COLUMN")
        kind = _label_kind(pa, table.schema.field(columns[0]).type, label, columns[0])
        if kind == "number":
            scores, _, _ = _read(table, columns, None)
            return scores, None, None
        return None, _read_text_labels(table, columns[0], classes), None
    col = None if label_col is None else column_index(table.names, label_col, len(table.names), label)
    columns = _choose(table, spec, col, check_index=True)
    label_name = None if col is None else table.names[col]
    scores, labels, names = _read(table, columns, label_name)
    watch = _index_watch(table, spec, columns) if names is not None else None  # a list column: not an index
    if watch is not None:
        watch.block(scores)
        watch.finish()
    return scores, labels, names


def _read_text_labels(table: _Table, column: str, classes) -> np.ndarray:
    parts, row0 = [], 0
    for batch in table.batches([column]):
        array = batch.column(0)
        if array.null_count:
            raise InputError(f"{table.label}: column {column!r}, row {row0 + _first_null(array)}: empty label (null)")
        parts.append(_text_labels(array.to_pylist(), table.label, column, classes, row0))
        row0 += len(array)
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _layout(table: _Table, columns: list[str], label_column: str | None):
    pa, label = table.pa, table.label
    layout, dtype, k = _score_layout(pa, table.schema, columns, label)
    label_kind = None
    if label_column is not None:
        label_kind = _label_kind(pa, table.schema.field(label_column).type, label, label_column)
    return layout, dtype, k, label_kind


def _blocks(table: _Table, columns: list[str], label_column: str | None, layout, dtype, k, label_kind):
    """(scores block, labels block or None, row0) of each record batch, in row order."""
    pa, label = table.pa, table.label
    classes = tuple(columns) if layout == "columns" else None
    wanted = list(columns) + ([label_column] if label_column is not None else [])
    row0 = 0
    for batch in table.batches(wanted):
        rows = batch.num_rows
        if layout == "list":
            block, k = _list_values(pa, batch.column(0), label, columns[0], row0, k)
        else:
            block = np.empty((rows, len(columns)), dtype=dtype)
            for j, c in enumerate(columns):
                block[:, j] = _column_values(pa, batch.column(j), label, c, row0)
        y = None
        if label_column is not None:
            array = batch.column(len(columns))
            if label_kind == "number":
                y = _column_values(pa, array, label, label_column, row0)
            else:
                if array.null_count:
                    raise InputError(f"{label}: column {label_column!r}, row {row0 + _first_null(array)}: empty label (null)")
                y = _text_labels(array.to_pylist(), label, label_column, classes, row0)
        yield block, y, row0
        row0 += rows


def iter_table(
    path: Path, key: str | None, label: str, *, score_cols: str | None = None, label_col: str | None = None,
):
    """(class names or None, number of rows or None, blocks): :func:`read_table`'s scores and labels as
    (scores, labels or None) blocks of one record batch each, never the whole table (a streamed
    summary pass). The same checks and errors as :func:`read_table`, each raised when reached."""
    table = _Table(path, label)
    spec = _column_spec(table, key, score_cols, label)
    col = None if label_col is None else column_index(table.names, label_col, len(table.names), label)
    columns = _choose(table, spec, col, check_index=True)
    label_name = None if col is None else table.names[col]
    layout, dtype, k, label_kind = _layout(table, columns, label_name)
    n = table.n_rows
    watch = _index_watch(table, spec, columns) if layout == "columns" else None

    def blocks():
        row0 = 0
        for block, y, row0 in _blocks(table, columns, label_name, layout, dtype, k, label_kind):
            if n is not None and row0 + block.shape[0] > n:
                raise InputError(f"{label}: holds more rows than its metadata says ({n}): corrupt file")
            if watch is not None:
                watch.block(block)
            yield (block[:, 0] if layout == "columns" and block.shape[1] == 1 else block), y
            row0 += block.shape[0]
        if row0 == 0:
            raise InputError(f"{label}: holds no rows (N = 0)")
        if n is not None and row0 != n:
            raise InputError(f"{label}: holds {row0} rows, but its metadata says {n}: truncated or corrupt file")
        if watch is not None:
            watch.finish()

    return (tuple(columns) if layout == "columns" else None), n, blocks()


def _read(table: _Table, columns: list[str], label_column: str | None):
    """Fill the scores (and labels) arrays batch by batch."""
    label = table.label
    layout, dtype, k, label_kind = _layout(table, columns, label_column)
    classes = tuple(columns) if layout == "columns" else None
    n = table.n_rows
    scores = labels = None
    score_parts, label_parts = [], []
    row0 = 0
    for block, y, row0 in _blocks(table, columns, label_column, layout, dtype, k, label_kind):
        rows = block.shape[0]
        if layout == "list":
            k = block.shape[1]
        if n is not None:
            if scores is None:
                scores = np.empty((n, block.shape[1]), dtype=block.dtype)
                if y is not None:
                    labels = np.empty(n, dtype=y.dtype)
            if row0 + rows > n:
                raise InputError(f"{label}: holds more rows than its metadata says ({n}): corrupt file")
            scores[row0:row0 + rows] = block
            if y is not None:
                labels[row0:row0 + rows] = y
        else:
            score_parts.append(np.array(block, copy=True))
            if y is not None:
                label_parts.append(np.array(y, copy=True))
        row0 += rows
    if n is None:
        width = k if layout == "list" else len(columns)
        scores = np.concatenate(score_parts) if score_parts else np.empty((0, width or 0), dtype=dtype)
        if label_column is not None:
            labels = np.concatenate(label_parts) if label_parts else np.empty(0, dtype=np.int64)
    elif scores is None:  # no batches: an empty table
        scores = np.empty((0, k or len(columns)), dtype=dtype)
        labels = np.empty(0, dtype=np.int64) if label_column is not None else None
    elif row0 != n:
        raise InputError(f"{label}: holds {row0} rows, but its metadata says {n}: truncated or corrupt file")
    if scores.shape[0] == 0:
        raise InputError(f"{label}: holds no rows (N = 0)")
    if layout == "columns" and scores.shape[1] == 1:
        scores = scores[:, 0]
    return scores, labels, classes


def load_table_array(path: Path, key: str | None, label: str) -> np.ndarray:
    """The registry's loader: the columns ``key`` names (all when None) as one array."""
    scores, _, _ = read_table(path, key, label)
    return scores


# ------------------------------------------------------------- the registry's column capabilities
def read_columns(
    path: Path, key: str | None, label: str, *, score_cols: str | None = None, label_col: str | None = None,
    header: bool | None = None, expected_rows: int | None = None,
) -> ScoresFile:
    """:func:`read_table` as a :class:`~calibrate_cli.data.formats.ScoresFile` (a table has its header:
    ``header`` and ``expected_rows`` do not apply)."""
    scores, labels, classes = read_table(path, key, label, score_cols=score_cols, label_col=label_col)
    return ScoresFile(scores, labels, classes, classes)


def iter_blocks(
    path: Path, key: str | None, label: str, *, score_cols: str | None = None, label_col: str | None = None,
    header: bool | None = None,
):
    """(N from the metadata or None, whether it is known, blocks): :func:`iter_table` (the rows read are
    checked against the metadata's count)."""
    classes, n, blocks = iter_table(path, key, label, score_cols=score_cols, label_col=label_col)
    return n, n is not None, ScoreBlocks(blocks, classes)


def read_labels(
    path: Path, key: str | None, label: str, *, header: bool | None = None,
    classes: Sequence[str] | None = None, expected_rows: int | None = None,
) -> np.ndarray:
    """The labels column (the only column, or ``file.parquet:COLUMN``): numbers, or class names mapped
    to ``classes``."""
    numbers, names, _ = read_table(path, key, label, classes=classes, labels_only=True)
    return numbers if numbers is not None else names
