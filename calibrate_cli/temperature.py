"""Temperature scaling (Guo et al. 2017; SPEC §3): p(T) = softmax(logits / T).

T > 1 softens the probabilities, T < 1 sharpens them; T never changes the argmax, so never the
accuracy.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import InputError

__all__ = ["apply_temperature", "check_temperature"]


def check_temperature(temperature: float) -> float:
    """Return ``temperature`` as a float, or raise InputError unless it is finite and > 0."""
    try:
        t = float(temperature)
    except (TypeError, ValueError):
        raise InputError(f"temperature must be a number, got {temperature!r}") from None
    if not math.isfinite(t) or t <= 0:
        raise InputError(f"temperature must be finite and > 0, got {temperature!r}")
    return t


def apply_temperature(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Scaled logits ``logits / T`` in float64 (softmax of them is p(T))."""
    return np.asarray(logits, dtype=np.float64) / check_temperature(temperature)
