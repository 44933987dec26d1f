"""The per-chunk computation of the summary pass, behind one interface, with two engines.

:func:`chunk_statistics` turns one row chunk of scores (and its labels) into the per-sample
quantities of :class:`~calibrate_cli.summary.PredictionSummary` and the chunk's classwise
per-(class, bin) sums:

    z_ik = x_ik − max_j x_ij                       (float64; logits only)
    p_ik = exp z_ik / Σ_j exp z_ij                 (softmax; the given probabilities otherwise)
    conf_i = max_k p_ik, pred_i = argmax_k p_ik    (lowest index on ties)
    nll_i = −(z_iy − log Σ_j exp z_ij)             (−log p_iy for probabilities)
    brier_i = Σ_k (p_ik − [k = y_i])²
    top5_i = [#{s_k > s_y} + #{k < y : s_k = s_y} < 5]   (s = z for logits, p for probabilities)
    count_kb, Σp_kb, Σ[y = k]_kb over the equal-width bins (b/M, (b+1)/M] (bin 0 closed)

Engines:

- ``"numpy"``: array expressions over the chunk (several (chunk × K) float64 temporaries).
- ``"fused"``: one compiled loop (numba, the optional extra ``calibrate-cli[fast]``) reads each row
  once and keeps only two length-K float64 rows; nothing of size chunk × K is allocated. Every
  quantity is computed with the same float64 operations in the same order as the numpy engine
  (numpy's pairwise sum for Σ_j exp z_ij, a sequential Σ for Brier as numpy's ``einsum`` does for
  one row, the same ⌈p·M⌉ bin candidate and edge corrections as
  :func:`~calibrate_cli.binning.assign_bins`, cells accumulated in row-major order as ``bincount``),
  so both engines agree bit for bit wherever ``exp`` and ``log`` do: numba calls the C library's
  ``exp``/``log``, numpy calls the same functions unless it was built with its own AVX-512 versions
  (which may differ in the last bit; then results agree to a few ulps). See docs/performance.md.

:func:`default_engine` is ``"fused"`` when numba imports, else ``"numpy"``; ``$CALIB_ENGINE``
(``numpy`` or ``fused``) overrides it.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import numpy as np

from .errors import InputError
from .probabilities import softmax_and_log_normalizer

__all__ = ["ENGINES", "ENGINE_ENV", "HAVE_NUMBA", "default_engine", "chunk_statistics"]

ENGINES = ("numpy", "fused")
#: environment variable that chooses the engine (``numpy`` or ``fused``)
ENGINE_ENV = "CALIB_ENGINE"

#: numba is optional (extra "fast"); it is imported, and the kernel compiled, on the first fused chunk
HAVE_NUMBA = importlib.util.find_spec("numba") is not None


#: below this many score values the numpy engine is used by default: importing numba and loading the
#: cached kernel (~1 s) costs more than the fused pass saves (~0.1 s per 10^6 values on two cores)
FUSED_MIN_VALUES = 1 << 24


def default_engine(n_values: int | None = None) -> str:
    """``$CALIB_ENGINE`` when set, else ``"fused"`` when numba is installed and the input holds at
    least :data:`FUSED_MIN_VALUES` score values (None: any size), else ``"numpy"``. The choice
    depends on the input's size only, never on threads or chunks."""
    value = os.environ.get(ENGINE_ENV, "").strip().lower()
    if value:
        if value not in ENGINES:
            raise InputError(f"{ENGINE_ENV}={value!r}: expected one of {', '.join(ENGINES)}")
        return check_engine(value)
    large = n_values is None or n_values >= FUSED_MIN_VALUES
    return "fused" if HAVE_NUMBA and large else "numpy"


def check_engine(engine: str | None, n_values: int | None = None) -> str:
    """The engine to use for ``engine`` (None: :func:`default_engine` for ``n_values`` score values);
    "fused" needs numba."""
    if engine is None:
        return default_engine(n_values)
    if engine not in ENGINES:
        raise InputError(f"Expected `engine` to be one of {ENGINES}, but got {engine!r}")
    if engine == "fused" and not HAVE_NUMBA:
        raise InputError("the fused engine needs numba, which is not installed (pip install numba)")
    return engine


def numpy_chunk(scores, labels, edges, *, is_logits: bool, compat, top5: bool, classwise: bool,
                lowest_closed: bool, work_dtype):
    """The numpy engine: (conf, correct, nll, brier, top5 | None, (count, Σp, Σy) | None) of one chunk.

    The classwise tuple is what :func:`~calibrate_cli.summary._class_bin_statistics` returns."""
    from .summary import _class_bin_statistics

    y = labels
    r = np.arange(y.shape[0])
    k = scores.shape[1]
    if is_logits:
        p, z, log_norm = softmax_and_log_normalizer(scores, dtype=work_dtype)
        logp_y = z[r, y] - log_norm
    else:
        p = np.asarray(scores, dtype=work_dtype)
        with np.errstate(divide="ignore"):
            logp_y = np.log(p[r, y])
    pred = p.argmax(axis=1)
    conf = p[r, pred]
    correct = pred == y
    nll = -logp_y.astype(np.float64)
    hit5 = None
    if top5:
        # rank on the logits when given (softmax is monotone, and tiny probabilities that
        # underflow to equal values would create ties that temperature could change)
        ranked = z if is_logits else p
        s_y = ranked[r, y][:, None]
        cols = np.arange(k)[None, :]
        rank = (ranked > s_y).sum(axis=1) + ((ranked == s_y) & (cols < y[:, None])).sum(axis=1)
        hit5 = rank < 5
    residual = p.astype(np.float64, copy=True)
    residual[r, y] -= 1.0
    brier = np.einsum("ij,ij->i", residual, residual)
    stats = _class_bin_statistics(p, y, edges, lowest_closed) if classwise else None
    return conf, correct, nll, brier, hit5, stats


@functools.lru_cache(maxsize=None)
def _compiled():  # pragma: no cover - needs numba
    """The compiled kernel (numba imported and the functions compiled, or loaded from its cache, once)."""
    from ._fused_kernel import _fused_rows

    return _fused_rows


def fused_chunk(scores, labels, edges, *, is_logits: bool, top5: bool, classwise: bool):
    """The fused engine (numba): the same tuple as :func:`numpy_chunk` (float64, equal-width edges
    b/M with the lowest bin closed), from one read of each row."""
    rows, k = scores.shape
    m = edges.shape[0] - 1
    conf = np.empty(rows)
    correct = np.empty(rows, dtype=np.bool_)
    nll = np.empty(rows)
    brier = np.empty(rows)
    hit5 = np.empty(rows if top5 else 0, dtype=np.bool_)
    shape = (k, m) if classwise else (0, m)
    count = np.zeros(shape, dtype=np.int64)
    sum_p = np.zeros(shape)
    sum_y = np.zeros(shape)
    scores = np.ascontiguousarray(scores)  # a plain ndarray (no copy when already one, C-ordered)
    _compiled()(scores, np.ascontiguousarray(labels, dtype=np.int64), is_logits, m, edges, top5, classwise,
                conf, correct, nll, brier, hit5, count, sum_p, sum_y)
    return conf, correct, nll, brier, (hit5 if top5 else None), ((count, sum_p, sum_y) if classwise else None)


_FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def chunk_statistics(scores, labels, edges, *, engine: str, is_logits: bool, compat=None, top5: bool,
                     classwise: bool, lowest_closed: bool = True, work_dtype=np.float64, ops=None):
    """One chunk's (conf, correct, nll, brier, top5 | None, classwise stats | None) by ``engine``.

    ``ops``: a torch device's namespace (:func:`~calibrate_cli.devices.array_ops` of "cuda" or
    "torch-cpu"): the chunk runs there (:mod:`calibrate_cli.torch_engine`), whatever ``engine``.

    The fused engine handles the float64 (non-compat) computation with dense classwise cells; the
    compat mode (float32) and very sparse classwise tables (K·M beyond the chunk's size) take the
    numpy engine, whose results the fused one reproduces."""
    if ops is not None and ops.name != "cpu":
        from .torch_engine import torch_chunk

        return torch_chunk(ops, scores, labels, edges, is_logits=is_logits, compat=compat, top5=top5,
                           classwise=classwise, lowest_closed=lowest_closed)
    k = scores.shape[1]
    m = edges.shape[0] - 1
    dense = k * m <= max(scores.shape[0] * k, 1 << 16)
    if engine == "fused" and compat is None and (dense or not classwise) and scores.dtype in _FUSED_DTYPES:
        return fused_chunk(scores, labels, edges, is_logits=is_logits, top5=top5, classwise=classwise)
    return numpy_chunk(scores, labels, edges, is_logits=is_logits, compat=compat, top5=top5,
                       classwise=classwise, lowest_closed=lowest_closed, work_dtype=work_dtype)
