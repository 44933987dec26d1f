"""Top-k log-probabilities (an LLM's ``top_logprobs``): per prediction the k most probable class ids
and their log-probabilities, the label, and optionally the label's own log-probability
(docs/topk.md).

:func:`topk_predictions` validates arrays (pure); :func:`read_topk` reads them from Parquet (list
columns) or JSON Lines (one object a line) and names the file and the row in every error.

Conventions: the list is the model's ranking of its k most probable classes. The prediction is the
id of the highest log-probability, the lowest id among ties (calib's rule); its confidence is
exp(max log-probability). A label outside the list ranks below all k listed ids.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError

__all__ = ["TopKPredictions", "topk_predictions", "read_topk", "read_sequences", "TOPK_SUFFIXES", "DEFAULT_COLUMNS",
           "SEQUENCE_COLUMNS"]

#: the files :func:`read_topk` reads
TOPK_SUFFIXES = (".parquet", ".jsonl", ".ndjson")
#: (ids, log-probabilities, label, label's log-probability) column names unless renamed
DEFAULT_COLUMNS = ("topk_ids", "topk_logprobs", "label", "label_logprob")
#: log-probabilities may exceed 0 (and their probabilities sum past 1) by this much (rounding of the producer)
LOGPROB_TOLERANCE = 1e-6


@dataclass(frozen=True)
class TopKPredictions:
    """Validated top-k predictions of N samples.

    ids            (N, k) int64 class ids, distinct within a row
    logprobs       (N, k) float64, non-increasing along each row, ≤ 0
    labels         (N,) int64
    label_logprob  (N,) float64: the label's log-probability (from the list, else as given), NaN
                   where unknown
    """

    ids: np.ndarray
    logprobs: np.ndarray
    labels: np.ndarray
    label_logprob: np.ndarray

    @property
    def n(self) -> int:
        return int(self.ids.shape[0])

    @property
    def k(self) -> int:
        return int(self.ids.shape[1])

    def top_label(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(confidence, prediction, correct): conf_i = exp(max_j lp_ij), pred_i the lowest id among
        the ids at that maximum, correct_i = [pred_i = y_i]."""
        top = self.logprobs[:, :1]
        tied = self.logprobs == top
        pred = np.where(tied, self.ids, np.iinfo(np.int64).max).min(axis=1)
        return np.exp(top[:, 0]), pred, pred == self.labels

    def label_rank(self) -> np.ndarray:
        """The label's rank (0 = top) by calib's rule, #{lp > lp_y} + #{id < y : lp = lp_y} over the
        listed ids; k for a label outside the list."""
        listed = self.ids == self.labels[:, None]
        inside = listed.any(axis=1)
        own = np.where(inside, np.max(np.where(listed, self.logprobs, -np.inf), axis=1), np.inf)
        above = (self.logprobs > own[:, None]) | ((self.logprobs == own[:, None]) & (self.ids < self.labels[:, None]))
        return np.where(inside, above.sum(axis=1), self.k)


def _row_of(mask: np.ndarray) -> int:
    """The first row (0-based) where a (N,) or (N, k) boolean ``mask`` holds."""
    return int(np.flatnonzero(mask.reshape(mask.shape[0], -1).any(axis=1))[0])


def topk_predictions(ids, logprobs, labels, label_logprob=None, *, name: str = "input",
                     row_offset: int = 0) -> TopKPredictions:
    """Validate top-k arrays (InputError naming ``name`` and the row, 1-based + ``row_offset``):
    ``ids`` (N, k) whole numbers ≥ 0, distinct in a row; ``logprobs`` (N, k) finite or −inf, ≤ 0,
    non-increasing, exp-sum ≤ 1; ``labels`` (N,) whole numbers ≥ 0; ``label_logprob`` (N,) ≤ 0 or NaN
    (unknown): where the label is listed the listed value is used and a given one must agree (within
    1e-9 relative), where it is not it must not exceed the k-th log-probability."""
    ids, logprobs, labels = np.asarray(ids), np.asarray(logprobs, dtype=np.float64), np.asarray(labels)
    row = lambda mask: _row_of(mask) + 1 + row_offset  # noqa: E731
    if ids.ndim != 2 or logprobs.shape != ids.shape:
        raise InputError(f"{name}: top-k ids {ids.shape} and log-probabilities {logprobs.shape} must be two (N, k) "
                         "arrays of the same shape")
    n, k = ids.shape
    if n == 0 or k == 0:
        raise InputError(f"{name}: no predictions (N = {n}, k = {k})")
    if labels.shape != (n,):
        raise InputError(f"{name}: {labels.shape[0] if labels.ndim else 0} labels for {n} rows of top-k predictions")
    for what, values in (("top-k id", ids), ("label", labels)):
        if values.dtype.kind == "f":
            bad = ~np.isfinite(values) | (values != np.round(values))
            if bad.any():
                raise InputError(f"{name}: row {row(bad)}: a {what} that is not a whole number")
        elif values.dtype.kind not in "iu":
            raise InputError(f"{name}: {what}s must be integers, got {values.dtype}")
        if (values < 0).any():
            raise InputError(f"{name}: row {row(values < 0)}: a negative {what}")
    ids, labels = ids.astype(np.int64), labels.astype(np.int64)
    if k > 1:
        ordered = np.sort(ids, axis=1)
        dup = ordered[:, 1:] == ordered[:, :-1]
        if dup.any():
            raise InputError(f"{name}: row {row(dup)}: an id listed twice in the top k")
    bad = np.isnan(logprobs) | (logprobs == np.inf)
    if bad.any():
        raise InputError(f"{name}: row {row(bad)}: a log-probability that is NaN or +inf")
    if (logprobs > LOGPROB_TOLERANCE).any():
        raise InputError(f"{name}: row {row(logprobs > LOGPROB_TOLERANCE)}: a log-probability above 0 "
                         "(give log-probabilities, not logits)")
    if k > 1 and (np.diff(logprobs, axis=1) > 0).any():
        raise InputError(f"{name}: row {row(np.diff(logprobs, axis=1) > 0)}: log-probabilities not in descending order")
    mass = np.exp(logprobs).sum(axis=1)
    if (mass > 1 + LOGPROB_TOLERANCE).any():
        raise InputError(f"{name}: row {row(mass > 1 + LOGPROB_TOLERANCE)}: the top-k probabilities sum to "
                         f"{mass[mass > 1 + LOGPROB_TOLERANCE][0]:.6g} > 1 (log-probabilities of one distribution?)")
    listed = ids == labels[:, None]
    inside = listed.any(axis=1)
    own = np.max(np.where(listed, logprobs, -np.inf), axis=1)
    given = np.full(n, np.nan) if label_logprob is None else np.asarray(label_logprob, dtype=np.float64)
    if given.shape != (n,):
        raise InputError(f"{name}: {given.shape} label log-probabilities for {n} rows")
    if (given == np.inf).any() or (given > LOGPROB_TOLERANCE).any():
        raise InputError(f"{name}: row {row((given == np.inf) | (given > LOGPROB_TOLERANCE))}: a label "
                         "log-probability above 0")
    disagree = inside & ~np.isnan(given) & ~np.isclose(given, own, rtol=1e-9, atol=0.0) & (given != own)
    if disagree.any():
        raise InputError(f"{name}: row {row(disagree)}: label_logprob differs from the label's log-probability in "
                         "the top k")
    above = ~inside & ~np.isnan(given) & (given > logprobs[:, -1])
    if above.any():
        raise InputError(f"{name}: row {row(above)}: the label is outside the top k but its log-probability "
                         "exceeds the k-th")
    return TopKPredictions(ids, logprobs, labels, np.where(inside, own, given))


def _jsonl_rows(path: Path, columns: tuple[str, str, str, str]) -> tuple[list, list, list, list]:
    ids, logprobs, labels, extra = [], [], [], []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}: line {line_no}: not JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise InputError(f"{path}: line {line_no}: not a JSON object")
            for column in columns[:3]:
                if record.get(column) is None:
                    raise InputError(f"{path}: line {line_no}: no {column!r}", remedy="topk-columns")
            if not isinstance(record[columns[0]], list) or not isinstance(record[columns[1]], list):
                raise InputError(f"{path}: line {line_no}: {columns[0]!r} and {columns[1]!r} must be lists")
            ids.append(record[columns[0]])
            logprobs.append(record[columns[1]])
            labels.append(record[columns[2]])
            value = record.get(columns[3])
            extra.append(np.nan if value is None else value)
    return ids, logprobs, labels, extra


def _parquet_rows(path: Path, columns: tuple[str, str, str, str]) -> tuple[list, list, list, list | None]:
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(os.fspath(path))
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors are many; one line for the user
        raise InputError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {str(exc).splitlines()[0]})")
    missing = [c for c in columns[:3] if c not in schema.names]
    if missing:
        raise InputError(f"{path}: no column {missing[0]!r} (has {', '.join(schema.names[:8])})",
                         remedy="topk-columns")
    wanted = [c for c in columns if c in schema.names]
    table = pq.read_table(os.fspath(path), columns=wanted)
    out = []
    for column in columns:
        if column not in schema.names:
            out.append(None)
            continue
        array = table.column(column)
        if array.null_count and column != columns[3]:
            first = int(np.flatnonzero(np.asarray(array.is_null()))[0])
            raise InputError(f"{path}: row {first + 1}: {column!r} is null")
        out.append(_arrow_matrix(array, path, column) if column in columns[:2] else array.to_pylist())
    return out[0], out[1], out[2], out[3]


def _arrow_matrix(array, path: Path, column: str) -> np.ndarray:
    """(N, k) float64 of a Parquet list column whose every row holds k values (no per-value Python objects)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = array.combine_chunks() if hasattr(array, "combine_chunks") else array
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)
            or pa.types.is_fixed_size_list(array.type)):
        raise InputError(f"{path}: {column!r} is not a list column ({array.type})")
    lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False).astype(np.int64)
    n = lengths.shape[0]
    if n == 0:
        raise InputError(f"{path}: no rows")
    if (lengths != lengths[0]).any():
        bad = int(np.flatnonzero(lengths != lengths[0])[0])
        raise InputError(f"{path}: row {bad + 1}: {column!r} holds {lengths[bad]} values, row 1 holds {lengths[0]} "
                         "(every row needs the same k)")
    values = array.flatten()
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise InputError(f"{path}: {column!r} holds {values.type} values, not numbers")
    if values.null_count:
        first = int(np.flatnonzero(np.asarray(values.is_null()))[0])
        raise InputError(f"{path}: row {first // int(lengths[0]) + 1}: a null value in {column!r}")
    return values.to_numpy(zero_copy_only=False).astype(np.float64).reshape(n, int(lengths[0]))


def _rectangular(rows: list, path: Path, column: str) -> np.ndarray:
    """(N, k) from N lists of k values (InputError naming the first row of another length)."""
    if isinstance(rows, np.ndarray):  # read as a matrix already (Parquet)
        return rows
    if not rows:
        raise InputError(f"{path}: no rows")
    lengths = np.fromiter((len(r) if isinstance(r, list) else -1 for r in rows), dtype=np.int64, count=len(rows))
    if (lengths < 0).any():
        raise InputError(f"{path}: row {int(np.flatnonzero(lengths < 0)[0]) + 1}: {column!r} is not a list")
    if (lengths != lengths[0]).any():
        bad = int(np.flatnonzero(lengths != lengths[0])[0])
        raise InputError(f"{path}: row {bad + 1}: {column!r} holds {lengths[bad]} values, row 1 holds {lengths[0]} "
                         "(every row needs the same k)")
    try:
        return np.array([[np.nan if v is None else v for v in r] for r in rows], dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{path}: {column!r} holds values that are not numbers") from None


def read_topk(path, *, ids: str | None = None, logprobs: str | None = None, labels: str | None = None,
              label_logprob: str | None = None) -> TopKPredictions:
    """Read and validate top-k predictions from ``path`` (.parquet: list columns; .jsonl/.ndjson: one
    JSON object a line). Column names default to :data:`DEFAULT_COLUMNS`; ``label_logprob`` is optional
    (absent or null: unknown)."""
    path = Path(path)
    columns = tuple(given or default for given, default in zip((ids, logprobs, labels, label_logprob),
                                                               DEFAULT_COLUMNS))
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in TOPK_SUFFIXES:
        raise InputError(f"{path}: top-k input is read from {', '.join(TOPK_SUFFIXES)} files, not {suffix or 'this'}")
    if suffix == ".parquet":
        id_rows, lp_rows, label_rows, extra = _parquet_rows(path, columns)
    else:
        id_rows, lp_rows, label_rows, extra = _jsonl_rows(path, columns)
    id_array = _rectangular(id_rows, path, columns[0])
    lp_array = _rectangular(lp_rows, path, columns[1])
    if id_array.shape != lp_array.shape:
        raise InputError(f"{path}: {columns[0]!r} holds {id_array.shape[1]} ids a row, {columns[1]!r} "
                         f"{lp_array.shape[1]} log-probabilities")
    if np.isnan(id_array).any():
        raise InputError(f"{path}: row {_row_of(np.isnan(id_array)) + 1}: a null id in {columns[0]!r}")
    try:
        label_array = np.array(label_rows, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{path}: {columns[2]!r} holds labels that are not numbers") from None
    extra_array = None if extra is None else np.array([np.nan if v is None else v for v in extra], dtype=np.float64)
    return topk_predictions(id_array, lp_array, label_array, extra_array, name=os.fspath(path))


#: (sequence id, token log-probability, correctness) column names unless renamed
SEQUENCE_COLUMNS = ("sequence_id", "token_logprob", "correct")


def read_sequences(path, *, sequence_id: str | None = None, token_logprobs: str | None = None,
                   correct: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token log-probabilities, sequence ids, correctness) of generated answers, one entry a token,
    from ``path`` (.parquet or .jsonl/.ndjson). Rows are tokens (a number in the token column, the
    sequence id in its column), or answers (a list in the token column; the sequence id column
    optional: the row number otherwise), each with its 0/1 correctness."""
    path = Path(path)
    columns = tuple(given or default for given, default in zip((sequence_id, token_logprobs, correct),
                                                               SEQUENCE_COLUMNS))
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in TOPK_SUFFIXES:
        raise InputError(f"{path}: answers are read from {', '.join(TOPK_SUFFIXES)} files, not {suffix or 'this'}")
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(os.fspath(path))
        except Exception as exc:  # noqa: BLE001
            raise InputError(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None
        rows = {c: table.column(c).to_pylist() for c in columns if c in table.column_names}
        names = table.column_names
    else:
        records = []
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise InputError(f"{path}: line {line_no}: not JSON ({exc.msg})") from None
        names = sorted({key for r in records if isinstance(r, dict) for key in r})
        rows = {c: [r.get(c) if isinstance(r, dict) else None for r in records] for c in columns if c in names}
    for c in columns[1:]:
        if c not in rows:
            raise InputError(f"{path}: no column {c!r} (has {', '.join(names[:8])})", remedy="sequence-columns")
    lp_rows, ok_rows = rows[columns[1]], rows[columns[2]]
    if not lp_rows:
        raise InputError(f"{path}: no rows")
    for i, (lp, ok) in enumerate(zip(lp_rows, ok_rows)):
        if lp is None or ok is None or (isinstance(lp, list) and any(v is None for v in lp)):
            raise InputError(f"{path}: row {i + 1}: a null token log-probability or correctness")
    as_lists = isinstance(lp_rows[0], list)
    if as_lists:
        ids_of_rows = rows.get(columns[0]) or list(range(len(lp_rows)))
        lengths = [len(v) if isinstance(v, list) else -1 for v in lp_rows]
        if min(lengths) <= 0:
            raise InputError(f"{path}: row {lengths.index(min(lengths)) + 1}: {columns[1]!r} is not a list of tokens")
        flat = [v for lp in lp_rows for v in lp]
        ids = np.repeat(np.asarray(ids_of_rows), lengths)
        ok = np.repeat(np.asarray(ok_rows), lengths)
    else:
        if columns[0] not in rows:
            raise InputError(f"{path}: no column {columns[0]!r}: token rows need their sequence id",
                             remedy="sequence-id")
        flat, ids, ok = lp_rows, np.asarray(rows[columns[0]]), np.asarray(ok_rows)
    try:
        lp = np.asarray(flat, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{path}: {columns[1]!r} holds values that are not numbers") from None
    return lp, ids, ok
