"""The per-chunk computation of the summary pass, behind one interface, with two engines.

:func:`chunk_statistics` turns one row chunk of scores (and its labels) into the per-sample
quantities of :class:`~calibrate_cli.engine.summary.PredictionSummary` and the chunk's classwise
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
- ``"fused"``: one compiled loop reads each row once and keeps only two length-K float64 rows;
  nothing of size chunk × K is allocated. The loop is the C extension ``calibrate_cli.engine._ckernel``
  (built by ``pip install`` where a C compiler is found: no import or JIT cost), else numba's
  (the optional extra ``calibrate-cli[fast]``), the same operations in both. Every
  quantity is computed with the same float64 operations in the same order as the numpy engine
  (numpy's pairwise sum for Σ_j exp z_ij, a sequential Σ for Brier as numpy's ``einsum`` does for
  one row, the same ⌈p·M⌉ bin candidate and edge corrections as
  :func:`~calibrate_cli.engine.binning.assign_bins`, cells accumulated in row-major order as ``bincount``),
  so both engines agree bit for bit wherever ``exp`` and ``log`` do: the C extension and numba call
  the C library's ``exp``/``log``, numpy calls the same functions unless it was built with its own
  AVX-512 versions (which may differ in the last bit; then results agree to a few ulps). See
  docs/performance.md.

:func:`default_engine` is ``"fused"`` when the C extension or numba is there (from an input size that
depends on which: :func:`fused_min_values`), else ``"numpy"``; ``$CALIB_ENGINE`` (``numpy`` or
``fused``) overrides it.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import numpy as np

from ..errors import InputError
from ..data.probabilities import softmax_and_log_normalizer

__all__ = ["ENGINES", "ENGINE_ENV", "HAVE_CKERNEL", "HAVE_NUMBA", "default_engine", "numba_engine", "chunk_statistics",
           "fused_available", "top_label_chunk", "top_label_runs"]

ENGINES = ("numpy", "fused")
#: environment variable that chooses the engine (``numpy`` or ``fused``)
ENGINE_ENV = "CALIB_ENGINE"

try:  # the C extension (setup.py; optional: absent where no C compiler was found at install time)
    from . import _ckernel
except ImportError:  # pragma: no cover - depends on the build
    _ckernel = None

#: the loops the C extension must hold; a build from older sources (an in-place .so left behind by an
#: upgrade) that lacks one is not used at all, rather than used in part
CKERNEL_FUNCTIONS = ("fused_rows", "bin_sums_1d", "spread_unit", "nll_rows", "top_label_rows", "bucket_counts",
                     "bucket_gather", "ks_sorted", "pack_keys", "unpack_keys", "all_finite",
                     "probs_plausible")
if _ckernel is not None and not all(hasattr(_ckernel, name) for name in CKERNEL_FUNCTIONS):  # pragma: no cover
    _ckernel = None

#: the C loops are built (calibrate_cli/engine/_ckernel.c): the fused engine costs nothing to load
HAVE_CKERNEL = _ckernel is not None

#: numba is optional (extra "fast"); it is imported, and the kernel compiled, on the first fused chunk
#: that the C extension does not run
def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # an import hook refuses it, or sys.modules[name] is None
        return False


HAVE_NUMBA = _installed("numba")


#: with numba only, below this many score values the numpy engine is used by default: importing numba
#: and loading the cached kernel (~1 s) costs more than the fused pass saves (~0.1 s per 10^6 values
#: on two cores)
FUSED_MIN_VALUES = 1 << 24

#: with the C extension, the fused engine is the default from this many score values on: every size,
#: as it loads with the package and is faster than the numpy engine from the smallest chunk on
#: (10 × 10 logits: 6 µs vs 0.2 ms; 10^4 × 10: 3.4 ms vs 9.9 ms; docs/performance.md)
CKERNEL_MIN_VALUES = 1


def fused_available() -> bool:
    """Whether the fused engine can run: the C extension is built or numba is installed."""
    return HAVE_CKERNEL or HAVE_NUMBA


def fused_min_values() -> int:
    """The input size (score values) from which the fused engine is the default: small with the C
    extension (:data:`CKERNEL_MIN_VALUES`), large with numba only (:data:`FUSED_MIN_VALUES`)."""
    return CKERNEL_MIN_VALUES if HAVE_CKERNEL else FUSED_MIN_VALUES


def default_engine(n_values: int | None = None, *, numba_only: bool = False) -> str:
    """``$CALIB_ENGINE`` when set, else ``"fused"`` when the C extension or numba is there and the
    input holds at least :func:`fused_min_values` score values (None: any size), else ``"numpy"``.
    The choice depends on the input's size (and the installation) only, never on threads or chunks.

    ``numba_only``: for a kernel that exists in numba only (the temperature grid and NLL passes,
    :mod:`calibrate_cli.engine.numba_grid`): "fused" needs numba, from :data:`FUSED_MIN_VALUES` on."""
    value = os.environ.get(ENGINE_ENV, "").strip().lower()
    if value:
        if value not in ENGINES:
            raise InputError(f"{ENGINE_ENV}={value!r}: expected one of {', '.join(ENGINES)}")
        return check_engine(value, numba_only=numba_only)
    if numba_only:
        available, threshold = HAVE_NUMBA, FUSED_MIN_VALUES
    else:
        available, threshold = fused_available(), fused_min_values()
    large = n_values is None or n_values >= threshold
    return "fused" if available and large else "numpy"


def numba_engine(n_values: int | None = None) -> str:
    """:func:`default_engine` for a kernel that numba alone compiles (the temperature grid and NLL
    passes of :mod:`calibrate_cli.engine.numba_grid`): "fused" needs numba, from :data:`FUSED_MIN_VALUES` on."""
    return default_engine(n_values, numba_only=True)


def check_engine(engine: str | None, n_values: int | None = None, *, numba_only: bool = False) -> str:
    """The engine to use for ``engine`` (None: :func:`default_engine` for ``n_values`` score values);
    "fused" needs the C extension or numba (numba itself when ``numba_only``)."""
    if engine is None:
        return default_engine(n_values, numba_only=numba_only)
    if engine not in ENGINES:
        raise InputError(f"Expected `engine` to be one of {ENGINES}, but got {engine!r}")
    if engine == "fused" and not (HAVE_NUMBA if numba_only else fused_available()):
        if numba_only:
            raise InputError("the fused engine of this computation needs numba, which is not installed "
                             "(pip install numba)")
        raise InputError("the fused engine needs the C extension calibrate_cli.engine._ckernel (built by pip install "
                         "with a C compiler) or numba, and neither is there (pip install numba)")
    return engine


def numpy_chunk(scores, labels, edges, *, is_logits: bool, compat, top5: bool, classwise: bool,
                lowest_closed: bool, work_dtype):
    """The numpy engine: (conf, correct, nll, brier, top5 | None, (count, Σp, Σy) | None) of one chunk.

    The classwise tuple is what :func:`~calibrate_cli.engine.summary._class_bin_statistics` returns."""
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
        # rank on the logits themselves when given (softmax is monotone, and tiny probabilities that
        # underflow to equal values would create ties that temperature could change; z = x − max
        # rounds, so distinct logits beside a dwarfing one would tie there)
        ranked = np.asarray(scores, dtype=np.float64) if is_logits else p
        s_y = ranked[r, y][:, None]
        cols = np.arange(k)[None, :]
        rank = (ranked > s_y).sum(axis=1) + ((ranked == s_y) & (cols < y[:, None])).sum(axis=1)
        hit5 = rank < 5
    residual = p.astype(np.float64, copy=True)
    residual[r, y] -= 1.0
    brier = np.einsum("ij,ij->i", residual, residual)
    stats = _class_bin_statistics(p, y, edges, lowest_closed) if classwise else None
    return conf, correct, nll, brier, hit5, stats


def _compiled():
    """The compiled row loop: the C extension's ``fused_rows`` when built, else numba's ``_fused_rows``
    (numba imported and the function compiled, or loaded from its cache, once). Same arguments."""
    return _ckernel.fused_rows if HAVE_CKERNEL else _numba_rows()


@functools.lru_cache(maxsize=None)
def _numba_rows():  # pragma: no cover - needs numba
    """numba's row loop (imported, and compiled or loaded from numba's cache, on the first call)."""
    from .numba_rows import _fused_rows

    return _fused_rows


def fused_chunk(scores, labels, edges, *, is_logits: bool, top5: bool, classwise: bool, out=None):
    """The fused engine (C extension or numba): the same tuple as :func:`numpy_chunk` (float64,
    equal-width edges b/M with the lowest bin closed), from one read of each row.

    ``out``: (conf, correct, nll, brier, top5) arrays of the chunk's length (float64, bool, float64,
    float64, bool; top5 of length 0 when not wanted) to write into, e.g. the summary's own rows or a
    thread's reused buffers, instead of new arrays (whose first writes fault in fresh pages)."""
    rows, k = scores.shape
    m = edges.shape[0] - 1
    if out is None:
        conf, correct, nll, brier = np.empty(rows), np.empty(rows, dtype=np.bool_), np.empty(rows), np.empty(rows)
        hit5 = np.empty(rows if top5 else 0, dtype=np.bool_)
    else:
        conf, correct, nll, brier, hit5 = out
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
                     classwise: bool, lowest_closed: bool = True, work_dtype=np.float64, ops=None, out=None):
    """One chunk's (conf, correct, nll, brier, top5 | None, classwise stats | None) by ``engine``.

    ``out``: arrays for the fused engine to write into (:func:`fused_chunk`); the other engines
    return new arrays whatever it says.

    ``ops``: a torch device's namespace (:func:`~calibrate_cli.engine.devices.array_ops` of "cuda" or
    "torch-cpu"): the chunk runs there (:mod:`calibrate_cli.engine.torch_pass`), whatever ``engine``.

    The fused engine handles the float64 (non-compat) computation with dense classwise cells; the
    compat mode (float32) and very sparse classwise tables (K·M beyond the chunk's size) take the
    numpy engine, whose results the fused one reproduces."""
    if ops is not None and ops.name != "cpu":
        from .torch_pass import torch_chunk

        return torch_chunk(ops, scores, labels, edges, is_logits=is_logits, compat=compat, top5=top5,
                           classwise=classwise, lowest_closed=lowest_closed)
    k = scores.shape[1]
    m = edges.shape[0] - 1
    dense = k * m <= max(scores.shape[0] * k, 1 << 16)
    if engine == "fused" and compat is None and (dense or not classwise) and scores.dtype in _FUSED_DTYPES:
        return fused_chunk(scores, labels, edges, is_logits=is_logits, top5=top5, classwise=classwise, out=out)
    return numpy_chunk(scores, labels, edges, is_logits=is_logits, compat=compat, top5=top5,
                       classwise=classwise, lowest_closed=lowest_closed, work_dtype=work_dtype)


def top_label_runs(dtype) -> bool:
    """Whether :func:`top_label_chunk` runs on scores of ``dtype``: the C extension is built and they
    are float32 or float64."""
    return _ckernel is not None and np.dtype(dtype) in _FUSED_DTYPES


def top_label_chunk(scores, labels, *, is_logits: bool, out=None):
    """(conf, correct) of one chunk by the C extension's ``top_label_rows`` (where
    :func:`top_label_runs`): the confidence and correctness :func:`chunk_statistics` gives, bit for
    bit, without the NLL, Brier, top-5 or classwise work, for the metrics that read the top label only
    (ECE, MCE, RMS-CE, accuracy, ...). For logits the exponentials are the C library's, four at a time
    where the CPU has AVX2 and FMA (calibrate_cli/engine/_ckernel.c, ``exact_exp4``: the GNU C library's exp,
    operation for operation, used where the extension's check when it loads finds it equal to this C
    library's exp). ``out``: (conf, correct) arrays to write into (float64, bool), as :func:`fused_chunk`'s."""
    scores = np.ascontiguousarray(scores)
    if out is None:
        conf, correct = np.empty(scores.shape[0], dtype=np.float64), np.empty(scores.shape[0], dtype=bool)
    else:
        conf, correct = out
    _ckernel.top_label_rows(scores, np.ascontiguousarray(labels, dtype=np.int64), is_logits, conf, correct)
    return conf, correct
