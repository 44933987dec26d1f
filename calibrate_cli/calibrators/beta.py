"""Beta calibration (Kull, Silva Filho & Flach 2017, AISTATS), binary problems only.

With p = p(class 1) = σ(s), s the log-odds z₁ − z₀, the calibrated probability is

    q = σ(a · ln p − b · ln(1 − p) + c),   a, b ≥ 0,

the family of the beta distributions' likelihood ratios: it contains the identity (a = b = 1,
c = 0), Platt scaling of s when a = b, and maps that are not sigmoids of s. (a, b, c) minimise the
mean NLL by L-BFGS-B with a, b ≥ 0 (the paper's monotone "abm" version: q never decreases in p),
float64, analytic gradient; ln p = −log(1 + e^{−s}) and ln(1 − p) = −log(1 + e^{s}) exactly, so
p = 0 or 1 in floating point is never a problem. K > 2 is refused (one-vs-rest would not be the
method of the paper). Saved as ``{"method": "beta", "k": 2, "beta": {"a": a, "b": b, "c": c}}``.

>>> import numpy as np
>>> BetaCalibration(1.0, 1.0, 0.0).transform(np.array([0.3, -2.0]))   # the identity on log-odds
array([ 0.3, -2. ])
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from .base import Calibrator, FitData, FitInfo, Progress, json_number

__all__ = ["BetaCalibration"]


def _features(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ln p and −ln(1 − p) of p = σ(s), exactly."""
    return -np.logaddexp(0.0, -s), np.logaddexp(0.0, s)


class BetaCalibration(Calibrator):
    """σ(a ln p − b ln(1 − p) + c) on p(class 1) (binary only; see the module docstring)."""

    name = "beta"
    shift_invariant = True  # s = z₁ − z₀: the same for logits and log-probabilities
    clips_zeros = True  # probabilities of exactly 0 (or 1) become ε (1 − ε): log p must be finite
    takes_weights = True  # the weighted mean NLL
    searches = {}  # fitted by `calib fit --method beta`

    def __init__(self, a: float | None = None, b: float | None = None, c: float | None = None):
        given = [v is None for v in (a, b, c)]
        if any(given) and not all(given):
            raise InputError("beta calibration needs a, b and c (or none, to fit them)")
        self.a_ = None if a is None else json_number(a, "beta a")
        self.b_ = None if b is None else json_number(b, "beta b")
        self.c_ = None if c is None else json_number(c, "beta c")
        if self.a_ is not None:
            if self.a_ < 0 or self.b_ < 0:
                raise InputError(f"beta calibration needs a, b ≥ 0, got a = {self.a_}, b = {self.b_}")
            self.k = 2

    def _fit(self, data: FitData, progress: Progress | None) -> FitInfo:
        from scipy.optimize import minimize

        if data.k != 2:
            raise InputError(
                f"{data.scores_name}: beta calibration is for binary problems (K = 2 or 1-D scores), got K = {data.k}"
            )
        data.require_finite("beta calibration")
        lp, lq = _features(data.log_odds())  # s read by row chunks: (N,) values held, not the scores
        y = data.labels.astype(np.float64)
        sign = 2.0 * y - 1.0
        x = np.stack([lp, lq, np.ones_like(lp)], axis=1)  # m = a lp + b lq + c, lq = −ln(1 − p)
        calls = [0]

        def fun(theta):
            calls[0] += 1
            if progress is not None:
                progress(calls[0], None)
            m = x @ theta
            value = float(data.mean(np.logaddexp(0.0, -sign * m)))  # np.mean, or weighted by the samples
            r = 0.5 * (1.0 + np.tanh(0.5 * m)) - y  # σ(m) − y
            if data.weights is not None:
                return value, x.T @ (data.weights * r) / data.total_weight
            return value, x.T @ r / data.n

        theta0 = np.array([1.0, 1.0, 0.0])
        at_identity = fun(theta0)[0]
        result = minimize(fun, theta0, jac=True, method="L-BFGS-B", bounds=[(0.0, None), (0.0, None), (None, None)],
                          options={"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-10})
        warnings = []
        projected = result.jac * ((result.x > 0) | (result.jac < 0) | (np.arange(3) == 2))
        if not result.success and float(np.max(np.abs(projected))) > 1e-6:
            warnings.append(f"beta calibration did not converge ({result.message})")
        self.a_, self.b_, self.c_ = (float(v) for v in result.x)
        self.k = 2
        return FitInfo(self.objectives[0], float(result.fun), at_identity, data.n, data.k,
                       {"iterations": int(result.nit)}, warnings=tuple(warnings))

    @property
    def label(self) -> str:
        return f"beta (a = {self.a_:.4g}, b = {self.b_:.4g}, c = {self.c_:.4g})"

    def _transform(self, z: np.ndarray) -> np.ndarray:
        s = z if z.ndim == 1 else z[:, 1] - z[:, 0]
        lp, lq = _features(s)
        m = self.a_ * lp + self.b_ * lq + self.c_
        return m if z.ndim == 1 else np.stack([np.zeros_like(m), m], axis=1)

    def get_params(self):
        return None if self.a_ is None else {"a": self.a_, "b": self.b_, "c": self.c_}

    @classmethod
    def _from_params(cls, params, k):
        if not isinstance(params, dict):
            raise InputError('"beta" must be an object {"a": a, "b": b, "c": c}')
        if k not in (None, 2):
            raise InputError(f"beta calibration is for binary problems, but \"k\" is {k}")
        return cls(json_number(params.get("a"), "beta a"), json_number(params.get("b"), "beta b"),
                   json_number(params.get("c"), "beta c"))

    @classmethod
    def identity(cls, k=None):
        return cls(1.0, 1.0, 0.0)
