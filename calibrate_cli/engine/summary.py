"""One pass over the scores: the per-sample quantities every metric is built from.

:func:`summarize` walks the (N, K) scores in row chunks (bounded memory, memory-mapped inputs are
never loaded whole) and keeps, per sample, the top-label confidence and correctness, the negative
log-likelihood of the true class, the Brier term and the top-5 hit; plus the classwise per-bin
statistics, which are summed over chunks. Everything accumulates in float64. The chunks run in a
thread pool (:func:`~calibrate_cli.engine.parallel.map_chunks`); their statistics are added in chunk order,
so the result does not depend on the number of threads.

``compat="focal-calibration"`` reproduces the reference code of Mukhoti et al. 2020: softmax and
the confidences in float32, bins compared in float32 with every lower edge exclusive. Scores beyond
float32's range (|x| > 3.4e38) would become ±inf there and every metric NaN or wrong, so they are
refused in that mode.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from .binning import (S99_THRESHOLD, BinStats, SparseBinStats, add_bin_sums, bin_statistics, torch_linspace_edges,
                      uniform_edges)
from ..errors import InputError
from .devices import NumpyOps
from . import kernels
from .kernels import check_engine, rows_run, top_label_rows
from .rows import row_stats
from ..data.pages import release_rows
from .parallel import chunk_rows, cpu_threads, map_chunks, together
from ..data import predictions as _predictions
from ..data.predictions import Predictions
from .sorting import PairwisePieces, PairwiseSum, pack_checked

if TYPE_CHECKING:
    from .class_samples import ClassSorted

COMPAT_FOCAL_CALIBRATION = "focal-calibration"
COMPAT_MODES = (COMPAT_FOCAL_CALIBRATION,)


def check_compat(compat: str | None) -> str | None:
    if compat is not None and compat not in COMPAT_MODES:
        raise InputError(f"Expected `compat` to be None or one of {COMPAT_MODES}, but got {compat!r}")
    return compat


@dataclass(frozen=True)
class SampleTotals:
    """The sums of the per-sample NLL, Brier and top-5 columns, when only their sums are kept (a
    :class:`SummaryRequest` without the columns): each equal to ``np.sum`` of the column it replaces.

    nll_sum         Σ −log p_{i,y_i} over the finite terms (np.sum of the column with inf set to 0)
    nll_sum_scaled  Σ (−log p_{i,y_i} / N) over the same terms (used when nll_sum overflows)
    nll_inf         #{i : −log p_{i,y_i} = inf}
    brier_sum       Σ_i brier_i
    top5_count      #{i : top5_i}, None when K ≤ 5
    """

    nll_sum: float
    nll_sum_scaled: float
    nll_inf: int
    brier_sum: float
    top5_count: int | None


@dataclass(frozen=True)
class ChunkColumns:
    """One chunk's NLL, Brier and top-5 columns made ready for :meth:`ColumnTotals.add`."""

    nll: PairwisePieces
    nll_scaled: PairwisePieces
    nll_inf: int
    brier: PairwisePieces
    top5_count: int | None


class ColumnTotals:
    """The :class:`SampleTotals` of N samples from their chunks' columns: each chunk made ready on
    any thread (:meth:`chunk`: the infinite NLL terms counted and set to 0, the terms divided by N,
    numpy's pairwise blocks summed, :meth:`~calibrate_cli.engine.sorting.PairwiseSum.pieces`), then added
    in sample order (:meth:`add`: a few floats), so each total is ``np.sum`` of its whole column."""

    def __init__(self, n: int, top5: bool) -> None:
        self.n = n
        self.nll, self.nll_scaled, self.brier = PairwiseSum(n), PairwiseSum(n), PairwiseSum(n)
        self.nll_inf, self.top5_count = 0, 0 if top5 else None

    def chunk(self, start: int, nll: np.ndarray, brier: np.ndarray, top5: np.ndarray | None) -> ChunkColumns:
        """The columns of the samples [start, start + len) made ready (reads only its arguments)."""
        scaled, infinite = _thread_buffers(nll.shape[0])[3:]  # this thread's reused buffers
        np.isinf(nll, out=infinite)
        inf = int(np.count_nonzero(infinite))
        if inf:
            nll = np.where(infinite, 0.0, nll)
        np.divide(nll, float(self.n), out=scaled)
        return ChunkColumns(self.nll.pieces(nll, start), self.nll_scaled.pieces(scaled, start), inf,
                            self.brier.pieces(brier, start), None if top5 is None else int(np.count_nonzero(top5)))

    def add(self, columns: ChunkColumns) -> None:
        """Add the next chunk's columns (in sample order)."""
        self.nll.add_pieces(columns.nll)
        self.nll_scaled.add_pieces(columns.nll_scaled)
        self.brier.add_pieces(columns.brier)
        self.nll_inf += columns.nll_inf
        if self.top5_count is not None:
            self.top5_count += columns.top5_count

    def totals(self) -> SampleTotals:
        return SampleTotals(self.nll.total(), self.nll_scaled.total(), self.nll_inf, self.brier.total(),
                            self.top5_count)


@dataclass(frozen=True)
class PredictionSummary:
    """Per-sample quantities of a validated set of predictions.

    confidences  conf_i = max_k p_ik (float64; float32 in compat mode)
    correct      [argmax_k p_ik = y_i], lowest index on ties
    nll          −log p_{i, y_i} (from log-softmax for logits; ``inf`` where a given probability is 0)
    brier        Σ_k (p_ik − [y_i = k])²
    top5         true class ranked < 5 (rank = #{s_k > s_y} + #{k < y : s_k = s_y}, s the logits or the
                 given probabilities); None when K ≤ 5
    classwise    per-class equal-width bin statistics of p_ik, shape (K, M) (a SparseBinStats when K·M
                 is far larger than the input, see :func:`summarize`); None when not requested
    class_sorted each class's p_ik sorted (:class:`~calibrate_cli.engine.class_samples.ClassSorted`), for the
                 opt-in classwise metrics (ACE, classwise RMS/KS); None unless one was asked for
    totals       without the columns (:class:`SummaryRequest`): the sums of nll, brier and top5
                 (:class:`SampleTotals`), whose per-sample arrays are then None
    sort_keys    the (conf, correct) keys of the one sort, packed by the pass's threads
                 (:func:`~calibrate_cli.engine.sorting.pack_keys`; int64, (N,)) when asked for; for the
                 caller to sort (in place: :func:`~calibrate_cli.engine.sorting.sort_packed`); else None

    width        the equal-width bins (:class:`BinStats`) when the request asked for them (made during
                 the pass where it can, else from the columns: :func:`with_pass_sums`); else None
    in_order     the sums in sample order (``metrics.order_sums``' dict) likewise; else None

    A request of the top label's sums alone (:class:`SummaryRequest`) gives, on the CPU without the
    compat mode, the confidences and correctness only: nll, brier, top5, classwise and totals are None;
    of the equal-width bins and in-order sums alone, without the columns, ``width`` and ``in_order``
    only (confidences and correctness None too, no (N,) array made).
    """

    n: int
    k: int
    labels: np.ndarray
    confidences: np.ndarray | None
    correct: np.ndarray | None
    nll: np.ndarray | None
    brier: np.ndarray | None
    top5: np.ndarray | None
    classwise: BinStats | SparseBinStats | None
    compat: str | None = None
    class_sorted: ClassSorted | None = None
    totals: SampleTotals | None = None
    sort_keys: np.ndarray | None = None
    width: BinStats | None = None
    in_order: dict | None = None


def order_counts(conf: np.ndarray, correct: np.ndarray) -> tuple[int, int, int]:
    """(the number correct, the number at confidence ≥ S99_THRESHOLD, the correct ones among them)
    of some samples: counts, so pieces of a column add up to the whole column's."""
    confident = conf >= S99_THRESHOLD
    return (int(np.count_nonzero(correct)), int(np.count_nonzero(confident)),
            int(np.count_nonzero(confident & correct)))


def in_order_sums(correct: int, conf_sum: float, s99: int, s99_correct: int) -> dict[str, np.ndarray]:
    """:func:`~calibrate_cli.metrics.functional.order_sums`' dict (each a batch of one) from its four sums."""
    one = lambda x: np.array([x], dtype=np.float64)  # noqa: E731
    return dict(correct=one(correct), conf=one(conf_sum), s99=one(s99), s99_correct=one(s99_correct))


class _InOrderSums:
    """:func:`~calibrate_cli.metrics.functional.order_sums` and the equal-width bins of N samples that arrive in
    consecutive pieces (:meth:`add`, in sample order): the same bits as over the whole arrays. The
    bins' sums are sequential in sample order (:func:`~calibrate_cli.engine.binning.add_bin_sums`), Σ conf
    is ``np.sum``'s pairwise sum (:class:`~calibrate_cli.engine.sorting.PairwiseSum`), the rest are counts."""

    def __init__(self, n: int, edges: np.ndarray) -> None:
        m = edges.shape[0] - 1
        self.n, self.edges = n, edges
        self.count, self.sum_conf, self.sum_correct = np.zeros(m, dtype=np.int64), np.zeros(m), np.zeros(m)
        self.conf = PairwiseSum(n)
        self.counts = (0, 0, 0)

    def add(self, conf: np.ndarray, correct: np.ndarray) -> None:
        add_bin_sums(conf, correct, self.edges, self.count, self.sum_conf, self.sum_correct)
        self.conf.add(conf)
        self.counts = tuple(a + b for a, b in zip(self.counts, order_counts(conf, correct)))

    def width(self) -> BinStats:
        return BinStats(edges=self.edges, count=self.count, sum_conf=self.sum_conf, sum_correct=self.sum_correct,
                        n=self.n)

    def in_order(self) -> dict[str, np.ndarray]:
        correct, s99, s99_correct = self.counts
        return in_order_sums(correct, self.conf.total(), s99, s99_correct)


#: K·M up to this many cells are kept dense (whatever N); beyond, only when K·M ≤ N·K (the input's size)
DENSE_CELLS = 1 << 20


class _ClassTotals:
    """The chunks' classwise statistics added in chunk order: dense (K, M) arrays when that is not
    much more than the input (K·M ≤ max(N·K, 2²⁰)), else sorted non-empty cells (memory ∝ input)."""

    def __init__(self, n: int, k: int, m: int) -> None:
        self.k, self.m = k, m
        self.dense = k * m <= max(n * k, DENSE_CELLS)
        if self.dense:
            self.count = np.zeros((k, m), dtype=np.int64)
            self.sum_p = np.zeros((k, m))
            self.sum_y = np.zeros((k, m))
        else:
            self.cells = np.empty(0, dtype=np.int64)
            self.count = np.empty(0, dtype=np.int64)
            self.sum_p = np.empty(0)
            self.sum_y = np.empty(0)

    def add(self, stats: tuple) -> None:
        if stats[0] is not None and not isinstance(stats[0], str):  # a dense chunk (implies dense totals)
            self.count += stats[0]
            self.sum_p += stats[1]
            self.sum_y += stats[2]
            return
        _, cells, count, sum_p, sum_y = stats
        if self.dense:  # total + chunk at the chunk's cells (+ 0 elsewhere, exactly as a dense add)
            self.count.ravel()[cells] += count
            self.sum_p.ravel()[cells] += sum_p
            self.sum_y.ravel()[cells] += sum_y
            return
        merged, where = np.unique(np.concatenate([self.cells, cells]), return_inverse=True)
        old, new = where[: self.cells.shape[0]], where[self.cells.shape[0] :]
        for name, chunk_values, dtype in (("count", count, np.int64), ("sum_p", sum_p, None), ("sum_y", sum_y, None)):
            total = np.zeros(merged.shape[0], dtype=dtype or np.float64)
            total[old] += getattr(self, name)
            total[new] += chunk_values
            setattr(self, name, total)
        self.cells = merged

    def stats(self, edges: np.ndarray, n: int) -> BinStats | SparseBinStats:
        if self.dense:
            return BinStats(edges=edges, count=self.count, sum_conf=self.sum_p, sum_correct=self.sum_y, n=n)
        return SparseBinStats(
            edges=edges, n=n, n_classes=self.k, keys=self.cells, counts=self.count, sums_conf=self.sum_p,
            sums_correct=self.sum_y,
        )


def merge_classwise(parts, n: int, k: int) -> BinStats | SparseBinStats:
    """The classwise statistics of the union of disjoint sets of samples (chunks, shards: ``parts``,
    dense or sparse, in order), N = ``n`` in all: counts and Σ[y = k] add exactly, Σp adds in the
    order of ``parts``; dense (K, M) when a single pass over the N samples keeps them dense
    (:class:`_ClassTotals`), else the sorted non-empty cells."""
    edges = parts[0].edges
    totals = _ClassTotals(n, k, int(np.asarray(edges).shape[0] - 1))
    for stats in parts:
        if isinstance(stats, SparseBinStats):
            totals.add(("sparse", stats.keys, stats.counts, stats.sums_conf, stats.sums_correct))
        else:
            totals.add((stats.count, stats.sum_conf, stats.sum_correct))
    return totals.stats(edges, n)


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _check_float32_range(scores: np.ndarray, first_row: int, compat: str, scores_name: str) -> None:
    """Compat mode casts to float32: refuse scores that the cast would turn into ±inf."""
    with np.errstate(invalid="ignore"):
        beyond = np.abs(scores) > FLOAT32_MAX
    if beyond.any():
        rows = beyond if beyond.ndim == 1 else beyond.any(axis=1)
        row = int(np.flatnonzero(rows)[0])
        value = float(np.asarray(scores, dtype=np.float64)[row][beyond[row]].flat[0])
        raise InputError(
            f"{scores_name}: score {value:.3g} at row {first_row + row} is beyond the float32 range (±3.4e38) "
            f"in which compat mode {compat} computes, as the reference code does; compute without the compat "
            "mode (float64)"
        )


def device_ops(device: str | None):
    """The torch namespace of ``device``, or None where it resolves to numpy ("cpu", "auto" without a GPU)."""
    if device is None or device == "cpu":
        return None
    from .devices import array_ops

    ops = array_ops(device)
    return None if ops.name == "cpu" else ops


_chunk_buffers = threading.local()


def _thread_buffers(rows: int) -> tuple[np.ndarray, ...]:
    """This thread's buffers of ``rows`` samples, kept from chunk to chunk: (nll, brier, top5) for the
    kernels, (NLL / N, NLL infinite) for :meth:`ColumnTotals.chunk`. A chunk's columns become sums
    at once (a request without the columns), and fresh arrays would fault in new pages each time."""
    buffers = getattr(_chunk_buffers, "arrays", None)
    if buffers is None or buffers[0].shape[0] < rows:
        nll, brier, scaled = np.empty(rows), np.empty(rows), np.empty(rows)
        top5, infinite = np.empty(rows, dtype=bool), np.empty(rows, dtype=bool)
        buffers = (nll, brier, top5, scaled, infinite)
        _chunk_buffers.arrays = buffers
    return tuple(b[:rows] for b in buffers)


#: score dtypes read by widening each row chunk into a reused float32 buffer (exactly: every float16
#: is a float32), so that the C extension's float32 loops run on them and no widened copy of the
#: whole array is made
HALF_DTYPES = (np.dtype(np.float16),)
#: (a bfloat16 row reader, ``read_into``, is widened so too: :func:`widened_rows`)

_half_buffers = threading.local()


def widened_rows(scores: np.ndarray, rows: slice | None = None) -> np.ndarray:
    """The (rows, K) float16 chunk ``scores`` as float32 (exact), in this thread's buffer, reused from
    chunk to chunk (grown when a chunk is larger): what ``scores.astype(np.float32)`` holds, without
    a new allocation per chunk. Valid until this thread's next call. With ``rows``: the rows ``rows``
    of ``scores``, which may be a row reader (bfloat16: :class:`~calibrate_cli.data.arrays.BFloat16Rows`,
    widened by its ``read_into`` straight into the buffer)."""
    if rows is not None:
        shape = (len(range(*rows.indices(scores.shape[0]))),) + tuple(scores.shape[1:])
        buffer = getattr(_half_buffers, "array", None)
        size = int(np.prod(shape))
        if hasattr(scores, "read_into"):
            if buffer is None or buffer.shape[0] < size:
                buffer = _half_buffers.array = np.empty(size, dtype=np.float32)
            return scores.read_into(rows, buffer[:size].reshape(shape))
        scores = scores[rows]
    size = scores.size
    buffer = getattr(_half_buffers, "array", None)
    if buffer is None or buffer.shape[0] < size:
        buffer = np.empty(size, dtype=np.float32)
        _half_buffers.array = buffer
    out = buffer[:size].reshape(scores.shape)
    if scores.dtype == np.float16 and kernels.HAVE_CKERNEL:  # the same values, in a vectorised C loop
        kernels.half_to_float(scores, out)
    else:
        np.copyto(out, scores, casting="safe")
    return out


#: the sums (:class:`~calibrate_cli.metrics.registry.MetricSums`' fields) made from the top label alone
TOP_LABEL_SUMS = frozenset({"width", "mass", "correct", "conf", "s99", "s99_correct", "samples"})
#: those the pass makes as the chunks arrive, without an (N,) array: the equal-width bins, the in-order sums
IN_PASS_SUMS = frozenset({"width", "correct", "conf", "s99", "s99_correct"})
#: the in-order sums (:func:`in_order_sums`)
ORDER_SUMS = frozenset({"correct", "conf", "s99", "s99_correct"})


@dataclass(frozen=True)
class SummaryRequest:
    """What one summary pass is asked for; the pass picks its path from it (no mode flags).

    sums     the sufficient sums the wanted metrics read (:class:`~calibrate_cli.metrics.registry.MetricSums`'
             fields, as ``metrics.registry.sums_needed`` gives them); None: every per-sample column and
             the classwise statistics, and nothing made from them
    columns  keep the per-sample columns the sums are made from (all of them: labels, confidences,
             correctness, NLL, Brier, top-5; the top label's where only its sums are asked), for a
             caller that resamples, merges or reads them (the bootstrap, shards, diagnostics); False:
             NLL, Brier and top-5 become their sums (:class:`SampleTotals`)

    A request of :data:`TOP_LABEL_SUMS` alone is computed from the top label alone (no NLL, Brier,
    top-5 or classwise work). With ``sums`` given, the summary holds ``width`` (the equal-width bins)
    when "width" is asked and ``in_order`` when one of :data:`ORDER_SUMS` is: made during the pass
    where it can, else from the columns after it; and the pass packs the sort keys of the one sort
    (``sort_keys``) where the caller drops the columns and a sum needs the sorted samples ("samples":
    KS-CE, SmoothECE). The top-label columns alone: ``SummaryRequest(sums=frozenset({"samples"}))``."""

    sums: frozenset | None = None
    columns: bool = True


def chunk_statistics(scores, labels, edges, *, engine: str, is_logits: bool, compat=None, top5: bool,
                     classwise: bool, lowest_closed: bool = True, work_dtype=np.float64, out=None):
    """One chunk's (conf, correct, nll, brier, top5 | None, classwise | None) by ``engine``. The fused
    engine takes the float64 pass (not the compat mode) with dense classwise cells; the compat mode
    and very sparse classwise tables (K·M beyond the chunk's size) run in numpy. ``out``: arrays for
    the fused engine to write into (:func:`~calibrate_cli.engine.kernels.fused_rows`)."""
    k, m = scores.shape[1], edges.shape[0] - 1
    dense = k * m <= max(scores.shape[0] * k, 1 << 16)
    if engine == "fused" and compat is None and (dense or not classwise) and rows_run(scores.dtype):
        return kernels.fused_rows(scores, labels, edges, is_logits=is_logits, top5=top5, classwise=classwise, out=out)
    s = row_stats(NumpyOps(), scores, labels, edges if classwise else None, is_logits=is_logits, top5=top5,
                  lowest_closed=lowest_closed, work_dtype=work_dtype)
    return s.conf, s.correct, s.nll, s.brier, s.top5, s.classwise


def summarize(
    predictions: Predictions,
    *,
    n_bins: int = 15,
    compat: str | None = None,
    request: SummaryRequest | None = None,
    scores_name: str = "scores",
    engine: str | None = None,
    device: str | None = None,
) -> PredictionSummary:
    """The one pass over ``predictions``: what ``request`` asks (:class:`SummaryRequest`; None: every
    per-sample column and the classwise statistics).

    ``scores_name`` names the scores in errors (compat mode refuses scores beyond float32's range).
    ``engine`` computes each chunk (:mod:`~calibrate_cli.engine.kernels`): ``"numpy"``, or ``"fused"`` (one
    compiled loop per chunk: the C extension, the same definition within the numeric contract); None:
    ``$CALIB_ENGINE``, else fused when the C extension is built. ``device``
    (:data:`~calibrate_cli.engine.devices.DEVICES`; None: "cpu"): "cuda"/"torch-cpu" (and "auto" with a
    GPU) run each chunk with torch there (:mod:`~calibrate_cli.engine.torch_pass`; the same numbers to
    rounding), one chunk at a time.

    A request of the top label's sums alone runs, on the CPU without the compat mode, the C extension's
    ``top_label_rows`` (:func:`~calibrate_cli.engine.kernels.top_label_rows`) or else the row pass asked
    for conf and correct (:func:`~calibrate_cli.engine.rows.row_stats`); of the equal-width bins and
    in-order sums alone, without the columns, each chunk's (conf, correct) go to a few reused buffers and
    are summed in chunk order (:class:`_InOrderSums`, the bits over all N). Unchecked values
    (``predictions.pending``) are checked chunk by chunk; pages of a memory-mapped input are released
    once read (:func:`~calibrate_cli.data.pages.release_rows`)."""
    compat = check_compat(compat)
    ops = device_ops(device)
    n, k = predictions.n, predictions.k
    engine = check_engine(engine, n * k)
    request = request or SummaryRequest()
    sums = None if request.sums is None else frozenset(request.sums)
    classwise = sums is None or "classwise_gap" in sums
    # the top label alone where the request reads nothing else (no NLL, Brier, top-5 or classwise work)
    top_label_only = sums is not None and sums <= TOP_LABEL_SUMS and ops is None and compat is None
    sums_only = not request.columns and not top_label_only
    width_only = top_label_only and not request.columns and sums <= IN_PASS_SUMS  # no (N,) array
    sort_keys = not request.columns and sums is not None and "samples" in sums and together(n)
    # float16 scores: each chunk widened into a reused float32 buffer (exact) for the C extension's loops
    widen = (engine == "fused" and ops is None and compat is None
             and (predictions.scores.dtype in HALF_DTYPES or hasattr(predictions.scores, "read_into"))
             and rows_run(np.float32))
    compiled_top_label = top_label_only and engine == "fused" and (widen or rows_run(predictions.scores.dtype))
    labels, pending = predictions.labels, predictions.pending
    is_logits = predictions.input_kind == "logits"
    work_dtype = np.float32 if compat else np.float64
    edges = torch_linspace_edges(n_bins) if compat else uniform_edges(n_bins)
    lowest_closed = compat is None

    # the pass's threads: one chunk runs here, without a thread pool (a pool per call costs threads and
    # their malloc arenas); with a device, one chunk there at a time (torch threads within it on a CPU)
    threads = cpu_threads() if ops is None else 1  # cpu_threads checks $CALIB_THREADS whatever the size
    # rows per chunk: a function of K and the path (never of the threads); the C loops' chunks hold at
    # least MIN_CHUNK_ROWS rows at vocabulary-scale K (parallel.chunk_rows)
    compiled_rows = ops is None and engine == "fused" and compat is None and (
        widen or rows_run(predictions.scores.dtype))
    step = chunk_rows(k, _predictions._CHUNK_ELEMENTS, compiled=compiled_rows)
    if ops is None and n <= step:
        threads = 1
    if width_only:  # a chunk's (conf, correct) buffers, reused: map_chunks holds at most threads + 1 chunks
        in_order = _InOrderSums(n, edges)
        slots = [(np.empty(min(n, step)), np.empty(min(n, step), dtype=bool)) for _ in range(threads + 1)]
        confidences = correct = None
    else:
        confidences = np.empty(n, dtype=work_dtype)
        correct = np.empty(n, dtype=bool)
    want_top5 = k > 5
    nll = brier = top5 = None
    column_totals = ColumnTotals(n, want_top5) if sums_only else None
    if not (top_label_only or sums_only):
        nll, brier = np.empty(n, dtype=np.float64), np.empty(n, dtype=np.float64)
        top5 = np.empty(n, dtype=bool) if want_top5 else None
    totals = _ClassTotals(n, k, edges.shape[0] - 1) if classwise else None
    keys = np.empty(n, dtype=np.int64) if sort_keys and compat is None else None
    unpackable = []  # a chunk appends when its confidences cannot be packed

    def pack(rows: slice, conf: np.ndarray, corr: np.ndarray) -> None:
        if keys is not None and not unpackable and not pack_checked(conf, corr, keys[rows]):
            unpackable.append(rows.start)

    if ops is not None:  # the torch engine, imported only for a torch device
        from . import torch_pass

    def one_chunk(item: tuple[int, slice]):
        """Fill the per-sample arrays on the rows of chunk ``item`` (its index, its rows); return the
        chunk's classwise statistics, its column sums and, with ``width_only``, its (conf, correct)."""
        index, rows = item
        y = labels[rows]
        if widen:  # exact: the check and the loops see the very values
            scores = widened_rows(predictions.scores, rows)
        else:
            scores = predictions.scores[rows]
        if pending is not None:  # the values' check, on the chunk this pass reads anyway
            pending.rows(scores, rows.start)
        size = rows.stop - rows.start
        if width_only:  # chunk i + threads + 1 starts after chunk i's buffers were taken (map_chunks)
            conf_out, correct_out = (buffer[:size] for buffer in slots[index % len(slots)])
        else:
            conf_out, correct_out = confidences[rows], correct[rows]  # the kernels write here (fused: float64)
        if top_label_only:
            if compiled_top_label:
                top_label_rows(scores, y, is_logits=is_logits, out=(conf_out, correct_out))
            else:
                lean = row_stats(NumpyOps(), scores, y, is_logits=is_logits, nll=False, brier=False)
                conf_out[...], correct_out[...] = lean.conf, lean.correct
                del lean
            release_rows(predictions.scores, rows)
            release_rows(predictions.labels, rows)
            pack(rows, conf_out, correct_out)
            return None, None, (conf_out, correct_out) if width_only else None
        if compat and scores.dtype.itemsize > 4:
            _check_float32_range(scores, rows.start, compat, scores_name)
        if sums_only:  # this thread's buffers, reused from chunk to chunk
            nll_out, brier_out, top5_out = _thread_buffers(size)[:3]
        else:
            nll_out, brier_out, top5_out = nll[rows], brier[rows], top5[rows] if top5 is not None else None
        out = (conf_out, correct_out, nll_out, brier_out, top5_out if want_top5 else np.empty(0, dtype=bool))
        if ops is not None:  # a torch device: the chunk runs there
            conf, corr, nll_c, brier_c, top5_c, stats = torch_pass.torch_chunk(
                ops, scores, y, edges, is_logits=is_logits, compat=compat, top5=want_top5, classwise=classwise,
                lowest_closed=lowest_closed)
        else:
            conf, corr, nll_c, brier_c, top5_c, stats = chunk_statistics(
                scores, y, edges, engine=engine, is_logits=is_logits, compat=compat, top5=want_top5,
                classwise=classwise, lowest_closed=lowest_closed, work_dtype=work_dtype,
                out=out if confidences.dtype == np.float64 else None,
            )
        release_rows(predictions.scores, rows)
        release_rows(predictions.labels, rows)
        if conf is not conf_out:  # an engine that made its own arrays
            conf_out[...] = conf
            correct_out[...] = corr
        pack(rows, conf_out, correct_out)
        if sums_only:
            return stats, column_totals.chunk(rows.start, nll_c, brier_c, top5_c), None
        if nll_c is not nll_out:
            nll_out[...] = nll_c
            brier_out[...] = brier_c
            if top5 is not None:
                top5_out[...] = top5_c
        return stats, None, None

    # chunks run in parallel; their sums are added in chunk order (thread-count independent)
    chunks = (_predictions.row_chunks(n, 1, step) if ops is None  # slices of `step` rows
              else predictions.row_chunks(torch_pass.TORCH_CHUNK_ELEMENTS))
    for stats, columns, piece in map_chunks(one_chunk, enumerate(chunks), threads):
        if stats is not None:
            totals.add(stats)
        if columns is not None:
            column_totals.add(columns)
        if piece is not None:
            in_order.add(*piece)

    summary = PredictionSummary(
        n=n, k=k, labels=labels, confidences=confidences, correct=correct, nll=nll, brier=brier, top5=top5,
        classwise=totals.stats(edges, n) if classwise else None, compat=compat,
        totals=column_totals.totals() if sums_only else None, sort_keys=None if unpackable else keys,
        width=in_order.width() if width_only else None, in_order=in_order.in_order() if width_only else None,
    )
    if sums is not None and sums & IN_PASS_SUMS:  # what was asked, whatever path the pass took
        summary = with_pass_sums(summary, n_bins, width="width" in sums, order=bool(sums & ORDER_SUMS))
    return summary


def with_pass_sums(summary: PredictionSummary, n_bins: int, *, width: bool = True,
                   order: bool = True) -> PredictionSummary:
    """``summary`` holding its equal-width bins (``width``: M = ``n_bins`` bins (b/M, (b+1)/M], bin 0
    closed; float32 torch.linspace edges, bin 0 open, in the compat mode) and its in-order sums
    (``in_order``: :func:`in_order_sums`): those the pass made, else made here from the per-sample
    confidences and correctness (a merged or hand-made summary), the same bits."""
    bins, sums = summary.width, summary.in_order
    changes = {}
    if width and (bins is None or bins.n_bins != n_bins):
        conf = summary.confidences
        if summary.compat:
            edges, lowest_closed, conf = torch_linspace_edges(n_bins), False, np.asarray(conf, dtype=np.float32)
        else:
            edges, lowest_closed = uniform_edges(n_bins), True
        changes["width"] = bin_statistics(conf, summary.correct, edges, lowest_closed=lowest_closed)
    if order and sums is None:
        hits, s99, s99_correct = order_counts(summary.confidences, summary.correct)
        changes["in_order"] = in_order_sums(hits, float(np.sum(summary.confidences, dtype=np.float64)), s99,
                                            s99_correct)
    return replace(summary, **changes) if changes else summary
