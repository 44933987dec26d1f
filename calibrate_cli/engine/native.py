"""The compiled CPU engine ("fused"): the one module that imports the C extension
``calibrate_cli.engine._ckernel`` (calibrate_cli/engine/_ckernel.c, built by ``pip install`` where a C
compiler is found; optional). Each function here takes numpy arrays, makes them what the C loops
read (C-contiguous, the expected dtypes) and calls them; callers check :data:`HAVE_CKERNEL` (or
:func:`rows_run`) first and otherwise run their numpy code, which defines the results.

The loops are plain C that the compiler vectorises (``#pragma omp simd``; glibc's vector ``exp`` where
GCC builds on glibc, else the C library's), with float64 sums whose order is fixed by the row alone:
they agree with the numpy definitions within tests/libm.py's contract, and give the same bits for
any split of the rows into chunks.
"""

from __future__ import annotations

import os

import numpy as np

try:  # optional: absent where no C compiler was found at install time
    from . import _ckernel
except ImportError:  # pragma: no cover - depends on the build
    _ckernel = None

#: the loops this module calls; a build from older sources that lacks one is not used at all
_FUNCTIONS = ("fused_rows", "nll_rows", "bin_sums_1d", "spread_unit", "ks_sorted", "bucket_counts", "bucket_gather",
              "half_to_float")
if _ckernel is not None and not all(hasattr(_ckernel, name) for name in _FUNCTIONS):  # pragma: no cover
    _ckernel = None

#: the C extension is built (the fused engine is there, and costs nothing to load)
HAVE_CKERNEL = _ckernel is not None

#: the score dtypes the row loops read (others are widened by the caller or run in numpy)
ROW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

__all__ = ["HAVE_CKERNEL", "ROW_DTYPES", "use", "rows_run", "fused_rows", "top_label_rows", "nll_sums", "bin_sums",
           "spread_unit", "ks_sorted", "bucket_counts", "bucket_gather", "half_to_float"]


def use() -> bool:
    """Whether the passes over samples (bins, order statistics) run here: the extension is built and
    ``$CALIB_ENGINE`` is not ``numpy`` (the row passes take their engine from
    :func:`~calibrate_cli.engine.kernels.check_engine`)."""
    return HAVE_CKERNEL and os.environ.get("CALIB_ENGINE", "").strip().lower() != "numpy"


def rows_run(dtype) -> bool:
    """Whether the row loops run on scores of ``dtype``: the extension is built, float32 or float64."""
    return HAVE_CKERNEL and np.dtype(dtype) in ROW_DTYPES


def _labels(labels) -> np.ndarray:
    return np.ascontiguousarray(labels, dtype=np.int64)


def fused_rows(scores, labels, edges, *, is_logits: bool, top5: bool, classwise: bool, out=None):
    """One chunk's (conf, correct, nll, brier, top5 | None, (count, Σp, Σy) | None), each row read
    once (float64 results; classwise cells (K, M) over the equal-width ``edges`` b/M, bin 0 closed).
    ``out``: (conf, correct, nll, brier, top5) arrays of the chunk's length to write into (top5 of
    length 0 when not wanted)."""
    scores = np.ascontiguousarray(scores)
    rows, k = scores.shape
    m = edges.shape[0] - 1
    if out is None:
        out = (np.empty(rows), np.empty(rows, dtype=bool), np.empty(rows), np.empty(rows),
               np.empty(rows if top5 else 0, dtype=bool))
    conf, correct, nll, brier, hit5 = out
    shape = (k, m) if classwise else (0, m)
    count, sum_p, sum_y = np.zeros(shape, dtype=np.int64), np.zeros(shape), np.zeros(shape)
    _ckernel.fused_rows(scores, _labels(labels), is_logits, m, np.ascontiguousarray(edges, dtype=np.float64), top5,
                        classwise, False, conf, correct, nll, brier, hit5, count, sum_p, sum_y)
    return conf, correct, nll, brier, (hit5 if top5 else None), ((count, sum_p, sum_y) if classwise else None)


_NONE, _NO_FLAGS = np.empty(0), np.empty(0, dtype=bool)
_NO_CELLS = np.zeros((0, 1), dtype=np.int64), np.zeros((0, 1))


def top_label_rows(scores, labels, *, is_logits: bool, out=None):
    """(conf, correct) of one chunk: the top label's probability and [argmax = y] alone (what ECE,
    MCE, accuracy read), as :func:`fused_rows` computes them. ``out``: (conf, correct) to write into."""
    scores = np.ascontiguousarray(scores)
    if out is None:
        out = np.empty(scores.shape[0]), np.empty(scores.shape[0], dtype=bool)
    conf, correct = out
    _ckernel.fused_rows(scores, _labels(labels), is_logits, 1, np.array([0.0, 1.0]), False, False, True, conf,
                        correct, _NONE, _NONE, _NO_FLAGS, _NO_CELLS[0], _NO_CELLS[1], _NO_CELLS[1])
    return conf, correct


def nll_sums(scores, labels, beta: float) -> tuple[float, float, float]:
    """Σ_i (log Σ_k e^{β d_ik} − β d_iy, E_p[d_i] − d_iy, Var_p[d_i]) over a chunk of logits
    (d = x − max_k x, p = softmax(β d); a d of −inf, from a log-probability 0, adds nothing)."""
    out = np.zeros(3)
    _ckernel.nll_rows(np.ascontiguousarray(scores), _labels(labels), float(beta), out)
    return float(out[0]), float(out[1]), float(out[2])


def bin_sums(values, targets, edges, *, uniform: bool, lowest_closed: bool, count, sum_conf, sum_correct) -> None:
    """Add each bin's count, Σvalue and Σtarget of the 1-D samples into the (M,) outputs, in sample
    order. values: float32/float64, edges of the same dtype (``uniform``: they are b/M), targets bool
    or float64; a value at or below the lowest edge counts in bin 0 when ``lowest_closed``, else not."""
    _ckernel.bin_sums_1d(np.ascontiguousarray(values), np.ascontiguousarray(targets), np.ascontiguousarray(edges),
                         uniform, lowest_closed, count, sum_conf, sum_correct)


def spread_unit(conf, correct, g: int, out) -> None:
    """out[:g] += the residuals conf − correct, out[g:] += ones, each spread linearly onto the grid
    j/(g − 1) (node ⌊x⌋ clipped to [0, g − 2] gets 1 − frac, the next frac; x = conf·(g − 1)), added in
    sample order. conf float64, correct bool or float64, g ≥ 2."""
    correct = np.asarray(correct)
    correct = np.ascontiguousarray(correct, dtype=bool if correct.dtype == np.bool_ else np.float64)
    _ckernel.spread_unit(np.ascontiguousarray(conf, dtype=np.float64), correct, g, out)


def ks_sorted(conf, correct) -> float:
    """max |Σ_{j ≤ i} (conf_j − correct_j)| over the ends i of runs of equal confidences (samples sorted
    by confidence; the sum sequential, in sample order)."""
    return _ckernel.ks_sorted(np.ascontiguousarray(conf, dtype=np.float64), np.ascontiguousarray(correct, dtype=bool))


def bucket_counts(values, lo: float, hi: float, scale: float, counts) -> None:
    """counts[b] += #{v ∈ [lo, hi] : min(⌊(v − lo)·scale⌋, B − 1) = b} (values float64, C-contiguous)."""
    _ckernel.bucket_counts(values, lo, hi, scale, counts)


def bucket_gather(values, lo: float, hi: float, scale: float, gather, span, members, low, high) -> int:
    """One pass over the values in [lo, hi] (buckets as :func:`bucket_counts`): a value of a bucket with
    ``gather`` goes to ``members`` (in order); else, with ``span``, ``low``/``high`` keep the bucket's
    smallest and largest value. Returns the number of members."""
    return _ckernel.bucket_gather(values, lo, hi, scale, gather, span, members, low, high)


def half_to_float(halves, out) -> None:
    """``out`` (float32, C-contiguous, the same shape) = the float16 array ``halves`` as float32, exactly
    (``np.copyto(out, halves)``'s values, NaN payloads included)."""
    flat = np.ascontiguousarray(halves).reshape(-1).view(np.uint16)
    _ckernel.half_to_float(flat, out.reshape(-1))
