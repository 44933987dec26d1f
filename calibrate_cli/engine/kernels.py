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
- ``"fused"``: one compiled loop reads each row in two or three passes (max; exp and sums; the
  classwise cells), or for logits of fewer than 64 classes 64 rows at once, one per vector lane, and
  keeps at most a few length-K scratch rows; nothing of size chunk × K is allocated. The loop is the C extension's (:mod:`.native`, built by ``pip install`` where a C
  compiler is found: nothing to load at run time): plain C the compiler vectorises, glibc's vector
  ``exp`` where GCC builds on glibc, float64 sums in an order fixed by the row. It agrees with the
  numpy engine within the contract of docs/conventions.md (tests/test_engines.py), and each engine
  gives the same bits for any thread count and chunk size.

:func:`default_engine` is ``"fused"`` when the C extension is built, else ``"numpy"``;
``$CALIB_ENGINE`` (``numpy`` or ``fused``) overrides it.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import InputError

from . import native
from .native import HAVE_CKERNEL

__all__ = ["ENGINES", "ENGINE_ENV", "HAVE_CKERNEL", "check_engine", "default_engine", "chunk_statistics",
           "fused_available", "top_label_chunk", "top_label_runs"]

ENGINES = ("numpy", "fused")
#: environment variable that chooses the engine (``numpy`` or ``fused``)
ENGINE_ENV = "CALIB_ENGINE"


def fused_available() -> bool:
    """Whether the fused engine can run: the C extension is built."""
    return HAVE_CKERNEL


def default_engine(n_values: int | None = None) -> str:
    """``$CALIB_ENGINE`` when set, else ``"fused"`` when the C extension is built, else ``"numpy"``.
    ``n_values`` (the input's score values) is accepted for the callers' sake; the choice depends on
    the installation and the environment only, never on sizes, threads or chunks."""
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


def numpy_chunk(scores, labels, edges, *, is_logits: bool, compat, top5: bool, classwise: bool,
                lowest_closed: bool, work_dtype):
    """The numpy engine: (conf, correct, nll, brier, top5 | None, (count, Σp, Σy) | None) of one chunk,
    by the one definition of the row pass (:func:`~calibrate_cli.engine.rows.row_stats`); ``compat``
    is carried by ``work_dtype`` (float32) and ``lowest_closed``."""
    from .devices import NumpyOps
    from .rows import row_stats

    s = row_stats(NumpyOps(), scores, labels, edges if classwise else None, is_logits=is_logits, top5=top5,
                  lowest_closed=lowest_closed, work_dtype=work_dtype)
    return s.conf, s.correct, s.nll, s.brier, s.top5, s.classwise


def fused_chunk(scores, labels, edges, *, is_logits: bool, top5: bool, classwise: bool, out=None):
    """The fused engine: the same tuple as :func:`numpy_chunk` (float64, equal-width edges b/M with the
    lowest bin closed), from one read of each row (:func:`~calibrate_cli.engine.native.fused_rows`).

    ``out``: (conf, correct, nll, brier, top5) arrays of the chunk's length (float64, bool, float64,
    float64, bool; top5 of length 0 when not wanted) to write into, e.g. the summary's own rows or a
    thread's reused buffers, instead of new arrays (whose first writes fault in fresh pages)."""
    return native.fused_rows(scores, labels, edges, is_logits=is_logits, top5=top5, classwise=classwise, out=out)


def chunk_statistics(scores, labels, edges, *, engine: str, is_logits: bool, compat=None, top5: bool,
                     classwise: bool, lowest_closed: bool = True, work_dtype=np.float64, ops=None, out=None):
    """One chunk's (conf, correct, nll, brier, top5 | None, classwise stats | None) by ``engine``.

    ``out``: arrays for the fused engine to write into (:func:`fused_chunk`); the other engines
    return new arrays whatever it says.

    ``ops``: unused (a torch device's chunk is dispatched by :func:`~calibrate_cli.engine.summary.summarize`).

    The fused engine handles the float64 (non-compat) computation with dense classwise cells; the
    compat mode (float32) and very sparse classwise tables (K·M beyond the chunk's size) take the
    numpy engine, whose results the fused one reproduces."""
    k = scores.shape[1]
    m = edges.shape[0] - 1
    dense = k * m <= max(scores.shape[0] * k, 1 << 16)
    if engine == "fused" and compat is None and (dense or not classwise) and native.rows_run(scores.dtype):
        return fused_chunk(scores, labels, edges, is_logits=is_logits, top5=top5, classwise=classwise, out=out)
    return numpy_chunk(scores, labels, edges, is_logits=is_logits, compat=compat, top5=top5,
                       classwise=classwise, lowest_closed=lowest_closed, work_dtype=work_dtype)


def top_label_runs(dtype) -> bool:
    """Whether :func:`top_label_chunk` runs on scores of ``dtype``: the C extension is built and they
    are float32 or float64."""
    return native.rows_run(dtype)


def top_label_chunk(scores, labels, *, is_logits: bool, out=None):
    """(conf, correct) of one chunk by the C extension (where :func:`top_label_runs`): the confidence
    and correctness :func:`chunk_statistics` gives, without the NLL, Brier, top-5 or classwise work,
    for the metrics that read the top label only (ECE, MCE, RMS-CE, accuracy, ...). ``out``:
    (conf, correct) arrays to write into (float64, bool), as :func:`fused_chunk`'s."""
    return native.top_label_rows(scores, labels, is_logits=is_logits, out=out)
