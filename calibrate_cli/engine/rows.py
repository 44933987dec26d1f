"""The row pass, written once for numpy and torch: what every metric reads from one row of scores.

For a chunk of (rows, K) scores x and labels y, in the array namespace ``ops``
(:class:`~calibrate_cli.engine.devices.NumpyOps`, or :class:`~calibrate_cli.engine.devices.TorchOps`
for a torch device):

    z_ik = x_ik − max_j x_ij,  p_ik = exp z_ik / Σ_j exp z_ij      (logits; given probabilities: p = x)
    conf_i = max_k p_ik,  pred_i = argmax_k p_ik (lowest index on ties),  correct_i = [pred_i = y_i]
    nll_i = log Σ_j exp z_ij − z_iy                                (−log p_iy for probabilities)
    brier_i = Σ_k (p_ik − [k = y_i])²
    top5_i = [#{s_k > s_y} + #{k < y : s_k = s_y} < 5]             (s = x for logits, p for probabilities)
    count_kb, Σp_kb, Σ[y = k]_kb over the bins of :func:`~calibrate_cli.engine.binning.assign_bins`

computed in ``work_dtype`` (float64; float32 in the reference code's compat mode), NLL and Brier in
float64. Only what is asked is computed. The temperature fit's two passes are here too:
:func:`grid_rows` (softmax(z / T) for every T of a grid at once) and :func:`nll_newton_sums` (the NLL
at β = 1/T with its first two derivatives). Compiled accelerators (kernels.py) and torch devices
are tested against these definitions (docs/conventions.md: 1e-12 relative, 1e-15 absolute).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from ..data.probabilities import softmax_and_log_normalizer as softmax_rows
from .binning import class_bin_statistics

__all__ = ["RowStats", "grid_rows", "namespace", "nll_newton_sums", "row_stats"]


def namespace(ops):
    """The array module behind ``ops``: numpy, or torch for a torch device's namespace."""
    return getattr(ops, "torch", np)


def _cast(xp, x, dtype, copy: bool = False):
    """``x`` in ``dtype`` (a copy when ``copy``, else only when the dtype changes)."""
    if xp is np:
        return np.asarray(x).astype(dtype, copy=copy)
    return x.to(dtype, copy=copy)


def _quiet(xp, **errors):
    """numpy's ``errstate(**errors)``; nothing for torch (which never warns, and whose compiler
    traces this code)."""
    return np.errstate(**errors) if xp is np else contextlib.nullcontext()


@dataclass(frozen=True)
class RowStats:
    """One chunk's per-row quantities (arrays of ``ops``' namespace; None where not asked) and, when
    asked, its classwise per-(class, bin) sums (:func:`~calibrate_cli.engine.binning.class_bin_statistics`:
    numpy arrays, dense or sparse)."""

    p: object
    conf: object
    correct: object
    nll: object
    brier: object
    top5: object
    classwise: tuple | None


def row_stats(ops, scores, labels, edges=None, *, is_logits: bool, nll: bool = True, brier: bool = True,
              top5: bool = False, lowest_closed: bool = True, work_dtype=np.float64) -> RowStats:
    """The quantities of the module docstring for the (rows, K) ``scores`` and int64 ``labels`` (arrays
    of ``ops``' namespace). ``edges`` (None: no classwise sums): the classwise bin edges; ``nll``,
    ``brier``, ``top5``: whether to compute those columns. ``scores`` is never written."""
    xp = namespace(ops)
    y = labels
    r = ops.arange(y.shape[0])
    f64 = xp.float64
    if is_logits:
        p, z, log_norm = softmax_rows(scores, dtype=work_dtype, xp=xp)
        logp_y = (z[r, y] - log_norm) if nll else None
        del z
    else:
        p = _cast(xp, scores, getattr(xp, np.dtype(work_dtype).name))
        if nll:
            with _quiet(xp, divide="ignore"):  # log 0 = −inf: an infinite NLL
                logp_y = xp.log(p[r, y])
    pred = xp.argmax(p, axis=1)  # the first maximal index on ties (numpy and torch)
    conf = p[r, pred]
    correct = pred == y
    nll_col = -_cast(xp, logp_y, f64) if nll else None
    hit5 = None
    if top5:
        # ranked on the logits themselves (z = x − max rounds: distinct logits beside a dwarfing one
        # would tie there, and tiny probabilities underflow to equal values)
        ranked = _cast(xp, scores, f64) if is_logits else p
        s_y = ranked[r, y][:, None]
        cols = ops.arange(p.shape[1])[None, :]
        rank = (ranked > s_y).sum(axis=1) + ((ranked == s_y) & (cols < y[:, None])).sum(axis=1)
        hit5 = rank < 5
    brier_col = None
    if brier:
        residual = _cast(xp, p, f64, copy=True)
        residual[r, y] -= 1.0
        brier_col = xp.einsum("ij,ij->i", residual, residual)
        del residual
    stats = None if edges is None else class_bin_statistics(p, y, edges, lowest_closed=lowest_closed, ops=ops)
    return RowStats(p, conf, correct, nll_col, brier_col, hit5, stats)


def grid_rows(ops, z, labels, temps, *, nll: bool, work_dtype=np.float64):
    """Every temperature of ``temps`` at once on one chunk of logits ``z`` (rows, K), as
    :func:`row_stats` computes on z / T: the per-row NLL (rows, T) when ``nll``, else (conf, correct),
    each (rows, T). z / T is formed in float64, then cast to ``work_dtype`` (float32: compat mode)."""
    xp = namespace(ops)
    temps = ops.asarray(np.asarray(temps, dtype=np.float64))
    x = _cast(xp, z, xp.float64)[:, None, :] / temps[None, :, None]  # (rows, T, K), = apply_temperature per T
    if np.dtype(work_dtype) != np.float64:
        x = _cast(xp, x, getattr(xp, np.dtype(work_dtype).name))
    x = x - xp.amax(x, axis=-1, keepdims=True)
    r = ops.arange(x.shape[0])[:, None]
    if nll:
        x_y = x[r, ops.arange(x.shape[1])[None, :], labels[:, None]]
        return -_cast(xp, x_y - xp.log(xp.exp(x).sum(axis=-1)), xp.float64)
    x = xp.exp(x)
    x /= x.sum(axis=-1, keepdims=True)
    pred = xp.argmax(x, axis=-1)
    conf = xp.amax(x, axis=-1)  # = x at the first argmax
    return conf, pred == labels[:, None]


def nll_newton_sums(ops, z, labels, beta: float, *, has_zeros: bool = True) -> tuple[float, float, float]:
    """One chunk's Σ_i NLL_i(β), Σ_i (E_p[d_i] − d_iy), Σ_i Var_p[d_i] with d = z − max z and
    p = softmax(β d): the sums of the NLL at β = 1/T and of its first two derivatives in β.
    ``has_zeros``: ``z`` may hold −inf (log-probabilities of 0), whose 0 · (−inf) terms count as 0."""
    xp = namespace(ops)
    z = _cast(xp, z, xp.float64)
    r = ops.arange(z.shape[0])
    d = z - xp.amax(z, axis=1, keepdims=True)
    d_y = d[r, labels]
    e = xp.exp(d * beta)
    s = e.sum(axis=1)
    if has_zeros:
        d = xp.where(xp.isneginf(d), xp.zeros_like(d), d)
    ed = e * d
    m1 = ed.sum(axis=1) / s
    m2 = xp.einsum("ij,ij->i", ed, d) / s
    var = (m2 - m1 * m1).clip(min=0.0)
    return float((xp.log(s) - beta * d_y).sum()), float((m1 - d_y).sum()), float(var.sum())
