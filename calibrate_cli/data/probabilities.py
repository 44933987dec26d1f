"""Softmax and log-softmax, numerically stable, in float64 unless asked otherwise.

    softmax(x)_k     = exp(x_k − max x) / Σ_j exp(x_j − max x)
    log_softmax(x)_k = (x_k − max x) − log Σ_j exp(x_j − max x)

Subtracting the row maximum makes every exponent ≤ 0, so nothing overflows and the largest term
is exactly 1 (the sum is ≥ 1 and its log is safe): NLL from logits needs no clipping.
"""

from __future__ import annotations

import numpy as np

__all__ = ["softmax", "log_softmax", "softmax_and_log_normalizer", "to_probabilities"]


def softmax_and_log_normalizer(logits, *, dtype=np.float64, xp=np):
    """(p, z, log Σ_j exp z_j) of the rows of ``logits``, the one definition of the softmax: z = x − max x
    (every exponent ≤ 0, the normaliser ≥ 1), p = exp z / Σ exp z, in ``dtype`` (a numpy dtype; its twin in
    ``xp``, numpy or torch, whose arrays ``logits`` then are). log_softmax(x) = z − log Σ exp z, so callers
    that need both pay for exp once."""
    if xp is np:
        z = np.asarray(logits).astype(dtype, copy=False)
        with np.errstate(over="ignore"):  # x − max x below −max(dtype) (logits near ±1e308): −inf, whose exp is 0
            z = z - z.max(axis=-1, keepdims=True)
    else:
        z = logits.to(getattr(xp, np.dtype(dtype).name))
        z = z - xp.amax(z, axis=-1, keepdims=True)
    p = xp.exp(z)
    total = p.sum(axis=-1, keepdims=True)
    p /= total
    return p, z, xp.log(total)[..., 0]


def softmax(logits: np.ndarray, *, dtype=np.float64) -> np.ndarray:
    """Row-wise softmax of ``logits`` (…, K), computed in ``dtype`` (float64 by default)."""
    return softmax_and_log_normalizer(logits, dtype=dtype)[0]


def log_softmax(logits: np.ndarray, *, dtype=np.float64) -> np.ndarray:
    """Row-wise log-softmax of ``logits`` (…, K), computed in ``dtype`` (float64 by default)."""
    _, z, log_norm = softmax_and_log_normalizer(logits, dtype=dtype)
    z -= log_norm[..., None]
    return z


def to_probabilities(scores: np.ndarray, input_kind: str, *, dtype=np.float64) -> np.ndarray:
    """Probabilities from ``scores`` of kind ``"logits"`` (softmax) or ``"probs"`` (cast only)."""
    if input_kind == "probs":
        return np.asarray(scores, dtype=dtype)
    return softmax(scores, dtype=dtype)
