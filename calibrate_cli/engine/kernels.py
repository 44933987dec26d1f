"""The summary pass's per-chunk computation, with two engines, and the compiled CPU loops.

:func:`~calibrate_cli.engine.summary.chunk_statistics` turns one row chunk of scores (and its
labels) into (conf, correct, nll, brier, top5 | None, classwise (count, Σp, Σy) | None) by the
definitions of :func:`~calibrate_cli.engine.rows.row_stats` (softmax, the top label with the lowest
index on ties, NLL, Brier, top-5, the equal-width cells (b/M, (b+1)/M] with bin 0 closed), by engine:

- ``"numpy"``: :func:`~calibrate_cli.engine.rows.row_stats` itself, array expressions over the chunk.
- ``"fused"``: the C extension ``_ckernel`` (calibrate_cli/engine/_ckernel.c, built by ``pip install``
  where a C compiler is found; this is the one module that imports it). Each row is read in two or
  three passes (logits of fewer than 64 classes: 64 rows at a time, one per vector lane), with no
  chunk × K temporary; glibc's vector ``exp`` where GCC builds on glibc; float64 sums in an order
  fixed by the row. It agrees with numpy within docs/conventions.md's contract (tests/test_engines.py),
  and each engine gives the same bits for any thread count and chunk size.

:func:`default_engine` is ``"fused"`` when the extension is built, else ``"numpy"``; ``$CALIB_ENGINE``
(``numpy`` or ``fused``) overrides it. The other functions here take numpy arrays, make them what the
C loops read (C-contiguous, the expected dtypes) and call them; callers check :data:`HAVE_CKERNEL`
(or :func:`use`) first and otherwise run their numpy code, which defines the results.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import InputError

try:  # optional: absent where no C compiler was found at install time
    from . import _ckernel
except ImportError:  # pragma: no cover - depends on the build
    _ckernel = None

#: the loops called here; a build from older sources that lacks one is not used at all
_FUNCTIONS = ("fused_rows", "nll_rows", "bin_sums_1d", "spread_unit", "ks_sorted", "half_to_float")
if _ckernel is not None and not all(hasattr(_ckernel, name) for name in _FUNCTIONS):  # pragma: no cover
    _ckernel = None

#: the C extension is built (the fused engine is there, and costs nothing to load)
HAVE_CKERNEL = _ckernel is not None
#: the score dtypes the row loops read (others are widened by the caller or run in numpy)
ROW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
ENGINES = ("numpy", "fused")
#: environment variable that chooses the engine (``numpy`` or ``fused``)
ENGINE_ENV = "CALIB_ENGINE"

__all__ = ["ENGINES", "ENGINE_ENV", "HAVE_CKERNEL", "ROW_DTYPES", "bin_sums", "check_engine", "default_engine",
           "fused_rows", "half_to_float", "ks_sorted", "nll_sums", "rows_run", "spread_unit", "top_label_rows", "use"]


def default_engine(n_values: int | None = None) -> str:
    """``$CALIB_ENGINE`` when set, else ``"fused"`` when the C extension is built, else ``"numpy"``:
    never a function of sizes, threads or chunks (``n_values`` is accepted for the callers' sake)."""
    value = os.environ.get(ENGINE_ENV, "").strip().lower()
    if value:
        if value not in ENGINES:
            raise InputError(f"{ENGINE_ENV}={value!r}: expected one of {', '.join(ENGINES)}")
        return check_engine(value)
    return "fused" if HAVE_CKERNEL else "numpy"


def check_engine(engine: str | None, n_values: int | None = None) -> str:
    """The engine to use for ``engine`` (None: :func:`default_engine`); "fused" needs the C extension."""
    if engine is None:
        return default_engine(n_values)
    if engine not in ENGINES:
        raise InputError(f"Expected `engine` to be one of {ENGINES}, but got {engine!r}")
    if engine == "fused" and not HAVE_CKERNEL:
        raise InputError("the fused engine needs the C extension calibrate_cli.engine._ckernel (built by pip install "
                         "where a C compiler is found), which is not there; use CALIB_ENGINE=numpy")
    return engine


def use() -> bool:
    """Whether the passes over samples (bins, order statistics) run in C: the extension is built and
    ``$CALIB_ENGINE`` is not ``numpy``."""
    return HAVE_CKERNEL and os.environ.get(ENGINE_ENV, "").strip().lower() != "numpy"


def rows_run(dtype) -> bool:
    """Whether the row loops run on scores of ``dtype``: the extension is built, float32 or float64."""
    return HAVE_CKERNEL and np.dtype(dtype) in ROW_DTYPES


def _labels(labels) -> np.ndarray:
    return np.ascontiguousarray(labels, dtype=np.int64)


def fused_rows(scores, labels, edges, *, is_logits: bool, top5: bool, classwise: bool, out=None):
    """:func:`~calibrate_cli.engine.summary.chunk_statistics`' tuple from the C loop, each row read once
    (float64; classwise cells (K, M) over the equal-width ``edges`` b/M, bin 0 closed). ``out``: (conf,
    correct, nll, brier, top5) arrays of the chunk's length to write into (top5 of length 0 when not
    wanted)."""
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


def top_label_rows(scores, labels, *, is_logits: bool, out=None):
    """(conf, correct) of one chunk as :func:`fused_rows` computes them, without the NLL, Brier, top-5
    or classwise work (what ECE, MCE, accuracy read). ``out``: (conf, correct) to write into."""
    scores = np.ascontiguousarray(scores)
    conf, correct = out if out is not None else (np.empty(scores.shape[0]), np.empty(scores.shape[0], dtype=bool))
    none, cells = np.empty(0), np.zeros((0, 1))
    _ckernel.fused_rows(scores, _labels(labels), is_logits, 1, np.array([0.0, 1.0]), False, False, True, conf,
                        correct, none, none, np.empty(0, dtype=bool), cells.astype(np.int64), cells, cells)
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


def ks_sorted(conf, correct, slack: float) -> float:
    """max |Σ_{j ≤ i} (conf_j − correct_j)| over the ends i of runs of ties (samples sorted by confidence;
    a run ends where conf_{i+1} > conf_i + |conf_i|·``slack``; the sum sequential, in sample order)."""
    return _ckernel.ks_sorted(np.ascontiguousarray(conf, dtype=np.float64), np.ascontiguousarray(correct, dtype=bool),
                              float(slack))


def half_to_float(halves, out) -> None:
    """``out`` (float32, C-contiguous, the same shape) = the float16 array ``halves`` as float32, exactly
    (``np.copyto(out, halves)``'s values, NaN payloads included)."""
    flat = np.ascontiguousarray(halves).reshape(-1).view(np.uint16)
    _ckernel.half_to_float(flat, out.reshape(-1))
