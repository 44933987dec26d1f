"""One pass over the scores: the per-sample quantities every metric is built from.

:func:`summarize` walks the (N, K) scores in row chunks (bounded memory, memory-mapped inputs are
never loaded whole) and keeps, per sample, the top-label confidence and correctness, the negative
log-likelihood of the true class, the Brier term and the top-5 hit; plus the classwise per-bin
statistics, which are summed over chunks. Everything accumulates in float64. The chunks run in a
thread pool (:func:`~calibrate_cli.parallel.map_chunks`); their statistics are added in chunk order,
so the result does not depend on the number of threads.

``compat="focal-calibration"`` reproduces the reference code of Mukhoti et al. 2020: softmax and
the confidences in float32, bins compared in float32 with every lower edge exclusive.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .binning import BinStats, assign_bins, torch_linspace_edges, uniform_edges
from .errors import InputError
from .parallel import map_chunks
from .predictions import Predictions
from .probabilities import softmax_and_log_normalizer

COMPAT_FOCAL_CALIBRATION = "focal-calibration"
COMPAT_MODES = (COMPAT_FOCAL_CALIBRATION,)


def check_compat(compat: str | None) -> str | None:
    if compat is not None and compat not in COMPAT_MODES:
        raise InputError(f"Expected `compat` to be None or one of {COMPAT_MODES}, but got {compat!r}")
    return compat


@dataclass(frozen=True)
class PredictionSummary:
    """Per-sample quantities of a validated set of predictions.

    confidences  conf_i = max_k p_ik (float64; float32 in compat mode)
    correct      [argmax_k p_ik = y_i], lowest index on ties
    nll          −log p_{i, y_i} (from log-softmax for logits; ``inf`` where a given probability is 0)
    brier        Σ_k (p_ik − [y_i = k])²
    top5         true class ranked < 5 (rank = #{s_k > s_y} + #{k < y : s_k = s_y}, s the logits or the
                 given probabilities); None when K ≤ 5
    classwise    per-class equal-width bin statistics of p_ik, shape (K, M); None when not requested
    """

    n: int
    k: int
    labels: np.ndarray
    confidences: np.ndarray
    correct: np.ndarray
    nll: np.ndarray
    brier: np.ndarray
    top5: np.ndarray | None
    classwise: BinStats | None
    compat: str | None = None


def _class_bin_statistics(p: np.ndarray, labels: np.ndarray, edges: np.ndarray, lowest_closed: bool) -> tuple:
    rows, k = p.shape
    m = edges.shape[0] - 1
    idx = assign_bins(p, edges, lowest_closed=lowest_closed)
    keys = idx + (np.arange(k, dtype=np.int64) * m)[None, :]
    inside = idx >= 0
    if inside.all():
        flat_keys, flat_p = keys.ravel(), p.ravel()
    else:
        flat_keys, flat_p = keys[inside], p[inside]
    count = np.bincount(flat_keys, minlength=k * m)
    sum_p = np.bincount(flat_keys, weights=flat_p.astype(np.float64, copy=False), minlength=k * m)
    true_keys = keys[np.arange(rows), labels]
    true_keys = true_keys[inside[np.arange(rows), labels]]
    sum_y = np.bincount(true_keys, minlength=k * m).astype(np.float64)
    return count.reshape(k, m), sum_p.reshape(k, m), sum_y.reshape(k, m)


def summarize(
    predictions: Predictions,
    *,
    n_bins: int = 15,
    compat: str | None = None,
    classwise: bool = True,
) -> PredictionSummary:
    """Compute the per-sample quantities (and classwise bin statistics) of ``predictions``."""
    compat = check_compat(compat)
    n, k = predictions.n, predictions.k
    labels = predictions.labels
    is_logits = predictions.input_kind == "logits"
    work_dtype = np.float32 if compat else np.float64
    edges = torch_linspace_edges(n_bins) if compat else uniform_edges(n_bins)
    lowest_closed = compat is None

    confidences = np.empty(n, dtype=work_dtype)
    correct = np.empty(n, dtype=bool)
    nll = np.empty(n, dtype=np.float64)
    brier = np.empty(n, dtype=np.float64)
    top5 = np.empty(n, dtype=bool) if k > 5 else None
    cw_count = np.zeros((k, n_bins), dtype=np.int64)
    cw_sum_p = np.zeros((k, n_bins))
    cw_sum_y = np.zeros((k, n_bins))

    def one_chunk(rows: slice):
        """Fill the per-sample arrays on ``rows``; return the chunk's classwise statistics."""
        y = labels[rows]
        r = np.arange(y.shape[0])
        scores = predictions.scores[rows]
        if is_logits:
            p, z, log_norm = softmax_and_log_normalizer(scores, dtype=work_dtype)
            logp_y = z[r, y] - log_norm
        else:
            p = np.asarray(scores, dtype=work_dtype)
            with np.errstate(divide="ignore"):
                logp_y = np.log(p[r, y])
        pred = p.argmax(axis=1)
        confidences[rows] = p[r, pred]
        correct[rows] = pred == y
        nll[rows] = -logp_y.astype(np.float64)

        if top5 is not None:
            # rank on the logits when given (softmax is monotone, and tiny probabilities that
            # underflow to equal values would create ties that temperature could change)
            ranked = z if is_logits else p
            s_y = ranked[r, y][:, None]
            cols = np.arange(k)[None, :]
            rank = (ranked > s_y).sum(axis=1) + ((ranked == s_y) & (cols < y[:, None])).sum(axis=1)
            top5[rows] = rank < 5
        residual = p.astype(np.float64, copy=True)
        residual[r, y] -= 1.0
        brier[rows] = np.einsum("ij,ij->i", residual, residual)
        return _class_bin_statistics(p, y, edges, lowest_closed) if classwise else None

    # chunks run in parallel; their classwise sums are added in chunk order (thread-count independent)
    for stats in map_chunks(one_chunk, predictions.row_chunks()):
        if stats is not None:
            cw_count += stats[0]
            cw_sum_p += stats[1]
            cw_sum_y += stats[2]

    classwise_stats = (
        BinStats(edges=edges, count=cw_count, sum_conf=cw_sum_p, sum_correct=cw_sum_y, n=n) if classwise else None
    )
    return PredictionSummary(
        n=n,
        k=k,
        labels=labels,
        confidences=confidences,
        correct=correct,
        nll=nll,
        brier=brier,
        top5=top5,
        classwise=classwise_stats,
        compat=compat,
    )
