"""Inputs shared by the tests of the row pass (tests/ is on sys.path: tests/conftest.py)."""

import numpy as np


def logits_with_ties(n, k, seed):
    """(N, K) float32 logits and labels: a third of the rows rounded (exact ties, also of the maximum),
    two rows with every class equal (p = 1/K, argmax 0)."""
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, k)) * 3).astype(np.float32)
    x[: n // 3] = np.round(x[: n // 3])
    x[n // 3: n // 3 + 2] = 0.0
    return x, rng.integers(0, k, n)
