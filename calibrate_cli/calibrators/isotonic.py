"""Isotonic regression (Zadrozny & Elkan 2002), one-vs-rest for K classes.

For each class k, the non-decreasing function g_k minimising Σ_i (g_k(p_ik) − [y_i = k])² over the
fitting set (p = softmax(z); tied p_ik pooled first, with their count as weight), found by the
pool-adjacent-violators algorithm (``scipy.optimize.isotonic_regression``). Between the fitting
points g_k is interpolated linearly, outside them held at the end values (as scikit-learn's
``out_of_bounds="clip"``); the K values of a row are renormalised to sum to 1 (a row of zeros becomes
uniform). Unlike scikit-learn's ``CalibratedClassifierCV(method="isotonic")`` the fit needs no
classifier and works for any K.

Only the ends of each constant piece are kept (interpolating between them gives the same map).
The fit sorts each class's N probabilities, so it holds the (N, K) float64 probabilities (made from
the scores by row chunks; refused beyond N·K = :data:`~.base.CLASS_COLUMNS_MAX_VALUES`); the map is
applied a row chunk at a time.
Saved as ``{"method": "isotonic", "k": K, "isotonic": {"x": [[…] × K], "y": [[…] × K]}}``.

>>> import numpy as np
>>> z = np.log(np.array([[0.9, 0.1], [0.7, 0.3], [0.6, 0.4], [0.2, 0.8]]))
>>> IsotonicCalibration().fit(z, [0, 1, 0, 1]).y_[0].tolist()     # class 0 at p_0 = 0.2, 0.6, 0.7, 0.9
[0.0, 0.5, 0.5, 1.0]
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from .base import (FitData, FitInfo, ProbabilityCalibrator, class_probabilities, json_numbers, nll_by_rows,
                   probabilities_of, renormalise)

__all__ = ["IsotonicCalibration", "isotonic_fit"]


def isotonic_fit(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The non-decreasing least-squares fit of ``y`` on ``x`` as breakpoints (xs, ys): xs strictly
    increasing, only the two ends of each constant piece kept. ``weights``: sample weights, minimising
    Σ_i w_i (g(x_i) − y_i)² (rows of weight 0 left out; whole numbers: repeated rows)."""
    from scipy.optimize import isotonic_regression

    if weights is not None:
        keep = weights > 0
        x, y, weights = x[keep], y[keep], weights[keep]
        xs, inverse = np.unique(x, return_inverse=True)
        counts = np.bincount(inverse, weights=weights, minlength=xs.shape[0])
        y = weights * y
    else:
        xs, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    means = np.bincount(inverse, weights=y, minlength=xs.shape[0]) / counts
    fitted = isotonic_regression(means, weights=counts.astype(np.float64), increasing=True).x
    change = np.flatnonzero(np.diff(fitted) != 0)
    keep = np.unique(np.concatenate([[0], change, change + 1, [xs.shape[0] - 1]]))
    return xs[keep], fitted[keep]


class IsotonicCalibration(ProbabilityCalibrator):
    """One-vs-rest isotonic regression of [y = k] on p_k (see the module docstring)."""

    name = "isotonic"
    shift_invariant = True  # a map of softmax(z): the same for logits and log-probabilities
    takes_weights = True  # weighted least squares (weighted PAV)

    def __init__(self, x=None, y=None):
        if (x is None) != (y is None):
            raise InputError("isotonic calibration needs both x and y (or neither, to fit them)")
        self.x_ = None if x is None else [np.asarray(row, dtype=np.float64) for row in x]
        self.y_ = None if y is None else [np.asarray(row, dtype=np.float64) for row in y]
        if self.x_ is not None:
            self.k = len(self.x_)

    def _fit(self, data: FitData, progress) -> FitInfo:
        p = class_probabilities(data, "isotonic regression")  # each class's N values, made by row chunks
        xs, ys = [], []
        for k in range(data.k):
            x, y = isotonic_fit(p[:, k], (data.labels == k).astype(np.float64), data.weights)
            xs.append(x)
            ys.append(y)
            if progress is not None:
                progress(k + 1, data.k)
        self.x_, self.y_, self.k = xs, ys, data.k
        return FitInfo(self.objectives[0], nll_by_rows(data, self._proba), nll_by_rows(data), data.n, data.k,
                       {"breakpoints": [int(x.shape[0]) for x in xs]})

    @property
    def label(self) -> str:
        return "isotonic regression"

    def _proba(self, z: np.ndarray) -> np.ndarray:
        p = probabilities_of(z)
        q = np.stack([np.interp(p[:, k], self.x_[k], self.y_[k]) for k in range(p.shape[1])], axis=1)
        return renormalise(q)

    def get_params(self):
        if self.x_ is None:
            return None
        return {"x": [x.tolist() for x in self.x_], "y": [y.tolist() for y in self.y_]}

    @classmethod
    def _from_params(cls, params, k):
        if not isinstance(params, dict) or not isinstance(params.get("x"), list) or not isinstance(params.get("y"), list):
            raise InputError('"isotonic" must be an object {"x": [[…] × K], "y": [[…] × K]}')
        xs = [json_numbers(row, f"isotonic x[{i}]") for i, row in enumerate(params["x"])]
        ys = [json_numbers(row, f"isotonic y[{i}]") for i, row in enumerate(params["y"])]
        if len(xs) != len(ys) or len(xs) < 2 or any(len(a) != len(b) for a, b in zip(xs, ys)):
            raise InputError("isotonic: x and y must be K ≥ 2 rows of equal lengths")
        if any(np.any(np.diff(x) <= 0) for x in xs) or any(np.any(np.diff(y) < 0) for y in ys):
            raise InputError("isotonic: each row of x must increase and each row of y must not decrease")
        if any(not 0 <= v <= 1 for y in ys for v in y):
            raise InputError("isotonic: y must be probabilities in [0, 1]")
        if k is not None and k != len(xs):
            raise InputError(f"isotonic has {len(xs)} rows but \"k\" is {k}")
        return cls(xs, ys)
