"""The summary pass over a file read block by block: no (N, K) array is ever held.

:func:`summarize_blocks` takes the (scores, labels) blocks a reader yields in row order (CSV through
numpy's C parser, Parquet row groups, Arrow record batches: :func:`calibrate_cli.data.io.stream_scores`),
cuts them into the very row chunks a single pass over the whole array walks
(:func:`~calibrate_cli.data.predictions.row_chunks`: rows [j·s, (j+1)·s), s = ⌊2²⁰ / K⌋), validates and
summarises each chunk (:func:`~calibrate_cli.engine.summary.summarize`) and merges the chunks' summaries as
shards merge (:func:`~calibrate_cli.engine.shards.merge_summaries`):

- the per-sample columns (labels, confidences, correctness, NLL, Brier, top-5) are computed row by
  row, so their concatenation holds the single pass's very values, and every metric built from them
  (ECE, AdaECE, NLL, Brier, accuracy, …) is bit-identical;
- the classwise statistics of chunk j are the single pass's chunk j statistics, added in chunk order
  from zero as the single pass adds them, so classwise-ECE is bit-identical too.

Memory: one reader block, one chunk and the per-sample columns, instead of the N·K·8 bytes of the
whole array. When N is known in advance (``sums_only``) the columns are written in place into
arrays of N, 10 bytes per sample (labels narrowed, confidence, correctness) with NLL, Brier and
top-5 kept as sums; otherwise they are kept whole (34 bytes per sample for K > 5) and concatenated
one at a time, each chunk's piece released as it is copied.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Iterable, Iterator

import numpy as np

from ..errors import InputError
from .binning import BinStats, class_bin_statistics, uniform_edges
from .devices import NumpyOps
from .kernels import check_engine
from ..data.probabilities import softmax_and_log_normalizer
from .rows import namespace
from ..data import predictions as _predictions
from ..data.predictions import Predictions, as_predictions
from .summary import (IN_PASS_SUMS, ColumnTotals, PredictionSummary, SummaryRequest, check_compat, merge_classwise,
                      summarize)
from ..metrics.registry import DENSE_SUMS

__all__ = ["RowCountMismatch", "chunk_rows", "rechunk", "summarize_blocks"]


def chunk_rows(k: int) -> int:
    """Rows per chunk of a single summary pass over K columns (:func:`~calibrate_cli.data.predictions.row_chunks`)."""
    return max(1, _predictions._CHUNK_ELEMENTS // max(k, 1))


def _columns(scores: np.ndarray) -> int:
    """K after validation: a 1-D vector of binary scores becomes two columns."""
    return 2 if scores.ndim == 1 else int(scores.shape[1])


def rechunk(blocks: Iterable[tuple], rows: int | None = None) -> Iterator[tuple]:
    """The rows of ``blocks`` ((scores, labels) in row order) as pieces of exactly ``rows`` rows (the
    last one shorter); ``rows`` None: :func:`chunk_rows` of the first block's K."""
    pending_s: list[np.ndarray] = []
    pending_y: list[np.ndarray] = []
    held = 0
    for scores, labels in blocks:
        if rows is None:
            rows = chunk_rows(_columns(scores))
        start = 0
        total = scores.shape[0]
        while start < total:
            take = min(rows - held, total - start)
            pending_s.append(scores[start:start + take])
            pending_y.append(labels[start:start + take])
            held += take
            start += take
            if held == rows:
                yield _joined(pending_s), _joined(pending_y)
                pending_s, pending_y, held = [], [], 0
    if held:
        yield _joined(pending_s), _joined(pending_y)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """One C-ordered array (the layout of a whole array's row chunk: reductions along a row depend on it)."""
    return np.ascontiguousarray(parts[0] if len(parts) == 1 else np.concatenate(parts))


class RowCountMismatch(InputError):
    """An exact-N summary pass (``sums_only``) read another number of rows than it was told."""


def summarize_blocks(
    blocks: Iterable[tuple],
    *,
    input_kind: str | None = None,
    n_bins: int = 15,
    compat: str | None = None,
    scores_name: str = "scores",
    labels_name: str = "labels",
    engine: str | None = None,
    n_hint: int | None = None,
    sums_only: bool = False,
) -> PredictionSummary:
    """The summary of the concatenation of ``blocks`` ((scores, labels) pairs in row order), equal to
    :func:`~calibrate_cli.engine.summary.summarize` of the whole arrays, columns kept (module
    docstring). Each chunk is validated as :func:`~calibrate_cli.data.predictions.as_predictions`
    validates the whole: an error's row numbers count from the chunk's first row, so a caller that
    needs the whole-file message reads the file whole after an :class:`InputError`. ``engine``: as
    :func:`summarize`'s (None: decided for ``n_hint`` rows, the number of rows when known).

    ``sums_only`` (needs ``n_hint`` = N exactly: a Parquet file's metadata, a CSV file's line
    count): keep the NLL, Brier and top-5 columns as their sums, added chunk by chunk exactly as
    :func:`~calibrate_cli.engine.summary.summarize` adds them (:class:`~calibrate_cli.engine.sorting.PairwiseSum`):
    the same :class:`~calibrate_cli.engine.summary.SampleTotals`. The other columns are then written in
    place into arrays of N allocated once (labels in the narrowest integer type that holds K − 1:
    nothing but compat mode's max(label) reads them here), 10 bytes per sample instead of 34 and no
    concatenation. Another number of rows raises :class:`RowCountMismatch` (before any is written
    out of place)."""
    compat = check_compat(compat)
    if sums_only and not n_hint:
        raise InputError("sums_only needs the number of rows")
    columns = _Columns(n_hint, scores_name) if sums_only else _Pieces()
    classwise = []
    first: PredictionSummary | None = None
    for scores, labels in rechunk(blocks):
        if first is None and engine is None:
            engine = check_engine(None, (n_hint or scores.shape[0]) * _columns(scores))
        predictions = as_predictions(scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name)
        if first is not None and predictions.k != first.k:
            raise InputError(f"{scores_name}: rows of {predictions.k} and of {first.k} scores")
        pieces, stats = _chunk_summaries(predictions, n_bins, compat, scores_name, engine)
        classwise.append(stats)
        for piece in pieces:
            first = first or piece
            columns.add(piece)
        del predictions, pieces, piece, scores, labels
    if first is None:
        raise InputError(f"{scores_name}: holds no rows (N = 0)")
    n, merged = columns.result()
    return replace(first, n=n, classwise=merge_classwise(classwise, n, first.k), width=None, in_order=None,
                   sort_keys=None, **merged)


class _Pieces:
    """The per-sample columns of the chunks, concatenated at the end (N not known in advance)."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {}
        self.n = 0

    def add(self, piece: PredictionSummary) -> None:
        self.n += piece.n
        for f in fields(PredictionSummary):
            value = getattr(piece, f.name)
            if isinstance(value, np.ndarray):
                self.parts.setdefault(f.name, []).append(value)

    def result(self) -> tuple[int, dict]:
        merged = {}
        for name in list(self.parts):
            pieces = self.parts.pop(name)
            merged[name] = _joined(pieces) if len(pieces) > 1 else pieces[0]
            pieces.clear()  # each column's pieces go before the next column is joined
        return self.n, merged


#: the per-sample columns a sums-only summary keeps (NLL, Brier and top-5 become sums)
_KEPT = ("labels", "confidences", "correct")


class _Columns:
    """The kept per-sample columns of exactly ``n`` samples, written in place chunk by chunk, and the
    NLL, Brier and top-5 sums (:class:`~calibrate_cli.engine.summary.ColumnTotals`)."""

    def __init__(self, n: int, scores_name: str) -> None:
        self.n, self.scores_name = n, scores_name
        self.sums: ColumnTotals | None = None
        self.arrays: dict[str, np.ndarray] = {}
        self.filled = 0

    def add(self, piece: PredictionSummary) -> None:
        stop = self.filled + piece.n
        if stop > self.n:
            raise RowCountMismatch(f"{self.scores_name}: more than the {self.n} rows announced")
        if not self.arrays:
            label_type = np.min_scalar_type(max(piece.k - 1, 0))
            self.arrays = {name: np.empty(self.n, dtype=label_type if name == "labels" else getattr(piece, name).dtype)
                           for name in _KEPT}
        for name in _KEPT:
            self.arrays[name][self.filled:stop] = getattr(piece, name)
        if self.sums is None:
            self.sums = ColumnTotals(self.n, piece.top5 is not None)
        self.sums.add(self.sums.chunk(self.filled, piece.nll, piece.brier, piece.top5))
        self.filled = stop

    def result(self) -> tuple[int, dict]:
        if self.filled != self.n:
            raise RowCountMismatch(f"{self.scores_name}: {self.filled} rows, but {self.n} were announced")
        sums = self.sums or ColumnTotals(self.n, False)  # no piece: nothing added
        return self.n, dict(self.arrays, nll=None, brier=None, top5=None, totals=sums.totals())


#: score values per sub-chunk where a chunk is computed in parts (:func:`_chunk_summaries`)
SUB_ELEMENTS = 1 << 16
#: a sub-chunk's request: the sums of its NLL, Brier and top-5 columns, so every per-sample column and
#: no classwise cells (made for the whole chunk) nor bins
COLUMNS_ONLY = SummaryRequest(sums=DENSE_SUMS - IN_PASS_SUMS)


def _chunk_summaries(predictions: Predictions, n_bins: int, compat, scores_name: str, engine: str):
    """(summaries of consecutive row ranges, classwise statistics) of one chunk of the single pass.

    The numpy engine holds ~7 temporaries of the chunk's size (softmax, ranks, bins, keys); here a
    chunk of rows·K > :data:`SUB_ELEMENTS` values is computed in sub-chunks of about that many values
    instead. The per-sample columns are row by row, so they do not change; the classwise counts and
    Σ[y = k] are whole numbers (exact in any order); Σ p_ik is added value by value in the chunk's
    row-major order, continuing from the previous sub-chunk's sums (``np.add.at``, unbuffered, in
    index order), which is the very sequence of additions of the chunk's ``np.bincount``: the
    chunk's statistics are bit-identical. Only the numpy engine with dense cells (float64, no
    compat mode); otherwise the chunk is one piece, as in the single pass."""
    k = predictions.k
    edges = uniform_edges(n_bins)
    m = n_bins
    rows = predictions.n
    step = max(1, SUB_ELEMENTS // k)
    split = compat is None and engine == "numpy" and rows > step and k * m <= max(rows * k, 1 << 16)
    if not split:
        piece = summarize(predictions, n_bins=n_bins, compat=compat, scores_name=scores_name, engine=engine)
        return [piece], piece.classwise
    count = np.zeros(k * m, dtype=np.int64)
    sum_p = np.zeros(k * m)
    sum_y = np.zeros(k * m)
    ops = NumpyOps()
    pieces = []
    for start in range(0, rows, step):
        part = Predictions(
            scores=predictions.scores[start:start + step], labels=predictions.labels[start:start + step],
            input_kind=predictions.input_kind,
        )
        pieces.append(summarize(part, n_bins=n_bins, request=COLUMNS_ONLY, scores_name=scores_name, engine=engine))
        # the chunk's classwise statistics, continued from the previous sub-chunk's sums
        if part.input_kind == "logits":
            p = softmax_and_log_normalizer(part.scores, xp=namespace(ops))[0]
        else:
            p = np.asarray(part.scores, dtype=np.float64)
        class_bin_statistics(p, part.labels, edges, into=(count, sum_p, sum_y))
        del p
    stats = BinStats(edges=edges, count=count.reshape(k, m), sum_conf=sum_p.reshape(k, m),
                     sum_correct=sum_y.reshape(k, m), n=rows)
    return pieces, stats

