"""Softmax and log-softmax, numerically stable, in float64 unless asked otherwise.

    softmax(x)_k     = exp(x_k − max x) / Σ_j exp(x_j − max x)
    log_softmax(x)_k = (x_k − max x) − log Σ_j exp(x_j − max x)

Subtracting the row maximum makes every exponent ≤ 0, so nothing overflows and the largest term
is exactly 1 (the sum is ≥ 1 and its log is safe): NLL from logits needs no clipping.
"""

from __future__ import annotations

import numpy as np

__all__ = ["softmax", "log_softmax", "softmax_and_log_normalizer", "to_probabilities"]


def _shifted(logits: np.ndarray, dtype) -> np.ndarray:
    x = np.asarray(logits, dtype=dtype)
    with np.errstate(over="ignore"):  # x − max x below −max(dtype) (logits near ±1e308): −inf, whose exp is 0
        return x - x.max(axis=-1, keepdims=True)


def softmax(logits: np.ndarray, *, dtype=np.float64) -> np.ndarray:
    """Row-wise softmax of ``logits`` (…, K), computed in ``dtype`` (float64 by default)."""
    e = np.exp(_shifted(logits, dtype))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def log_softmax(logits: np.ndarray, *, dtype=np.float64) -> np.ndarray:
    """Row-wise log-softmax of ``logits`` (…, K), computed in ``dtype`` (float64 by default)."""
    z = _shifted(logits, dtype)
    z -= np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return z


def softmax_and_log_normalizer(logits: np.ndarray, *, dtype=np.float64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(softmax, shifted logits z = x − max x, log Σ exp z) with one exp pass.

    log_softmax(x)_k = z_k − log Σ exp z, so callers that need both pay for exp once.
    """
    z = _shifted(logits, dtype)
    p = np.exp(z)
    total = p.sum(axis=-1, keepdims=True)
    p /= total
    return p, z, np.log(total)[..., 0]


def to_probabilities(scores: np.ndarray, input_kind: str, *, dtype=np.float64) -> np.ndarray:
    """Probabilities from ``scores`` of kind ``"logits"`` (softmax) or ``"probs"`` (cast only)."""
    if input_kind == "probs":
        return np.asarray(scores, dtype=dtype)
    return softmax(scores, dtype=dtype)
