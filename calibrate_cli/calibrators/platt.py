"""Platt scaling (Platt 1999), binary problems: p(class 1) = σ(a·s + b), s the log-odds.

(a, b) minimise the mean NLL on the fitting set, by Newton's method with backtracking (the NLL is
convex in (a, b); analytic gradient and Hessian); only s (N,) is held, read from the scores by row
chunks. Unlike a temperature, the bias b can change predictions. Saved as ``{"method": "platt", "k": 2, "platt": {"a": a, "b": b}}``.

>>> import numpy as np
>>> PlattScaling(a=2.0, b=-1.0).transform(np.array([0.5, 1.0]))   # log-odds in, log-odds out
array([0., 1.])
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from .base import Calibrator, FitData, FitInfo, Progress, Search, json_number

__all__ = ["PlattScaling"]


def _log_sigmoid(m: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -m)


def _fit_platt(data: FitData, progress) -> tuple[dict, list[str]]:
    """Newton's method with backtracking on the (convex) mean NLL of σ(a·s + b); stops when the
    Newton step is below 1e-13 (quadratic convergence: the error is far smaller)."""
    if data.k != 2:
        raise InputError(
            f"{data.scores_name}: Platt scaling is for binary problems (K = 2 or 1-D scores), got K = {data.k}",
            remedy="nll-or-vector",
        )
    data.require_finite("Platt scaling")
    s = data.log_odds()  # read by row chunks: only s is held
    y = data.labels.astype(np.float64)
    sign = 2.0 * y - 1.0  # NLL_i = −log σ(sign_i · m_i), m = a s + b

    def nll(theta) -> float:
        return float(data.mean(-_log_sigmoid(sign * (theta[0] * s + theta[1]))))

    theta = np.array([1.0, 0.0])
    value = nll(theta)
    converged = False
    for iteration in range(1, 201):
        if progress is not None:
            progress(iteration, None)
        q = 0.5 * (1.0 + np.tanh(0.5 * (theta[0] * s + theta[1])))  # σ(m), stable
        r, w = q - y, q * (1.0 - q)
        mean = data.mean  # np.mean, or the weighted mean with sample weights
        grad = np.array([mean(r * s), mean(r)])
        hess = np.array([[mean(w * s * s), mean(w * s)], [mean(w * s), mean(w)]])
        try:
            step = np.linalg.solve(hess, -grad)
        except np.linalg.LinAlgError:
            break
        if not np.all(np.isfinite(step)):
            break
        if np.max(np.abs(step)) < 1e-13 * (1.0 + np.max(np.abs(theta))):
            theta = theta + step
            converged = True
            break
        length = 1.0
        while length > 1e-10:
            candidate = theta + length * step
            candidate_value = nll(candidate)
            if candidate_value <= value + 1e-4 * length * float(grad @ step):
                break
            length *= 0.5
        else:  # no decrease possible: at the optimum to machine precision
            converged = True
            break
        theta, value = candidate, candidate_value
    warnings = []
    if not converged:
        warnings.append("Platt scaling did not converge: the classes may be separable by the scores (a → ∞)")
    a, b = (float(v) for v in theta)
    return {"a": a, "b": b, "iterations": iteration}, warnings



def _platt_nll(data: FitData, a: float, b: float, s: np.ndarray) -> float:
    sign = 2.0 * data.labels - 1.0
    return float(data.mean(-_log_sigmoid(sign * (a * s + b))))


class PlattScaling(Calibrator):
    """p(class 1) = σ(a·s + b) with s = z_1 − z_0 the log-odds (binary problems only).

    ``transform`` of a 1-D vector of log-odds gives the calibrated log-odds a·s + b; of (N, 2)
    logits, the logits [0, a·s + b].
    """

    name = "platt"
    shift_invariant = True  # s = z₁ − z₀: the same for logits and log-probabilities
    clips_zeros = True  # probabilities of exactly 0 (or 1) become ε (1 − ε): log p must be finite
    takes_weights = True  # the weighted mean NLL
    searches = {"platt": Search("binary Platt scaling (a·s + b)", "Platt scaling")}

    def __init__(self, a: float | None = None, b: float | None = None):
        if (a is None) != (b is None):
            raise InputError("Platt scaling needs both a and b (or neither, to fit them)")
        self.a_, self.b_ = a, b

    def _fit(self, data: FitData, progress: Progress | None) -> FitInfo:
        parameters, warnings = _fit_platt(data, progress)
        self.a_, self.b_ = parameters["a"], parameters["b"]
        self.k = 2
        s = data.log_odds()
        return FitInfo(
            self.objectives[0],  # the NLL
            _platt_nll(data, self.a_, self.b_, s),
            _platt_nll(data, 1.0, 0.0, s),
            data.n,
            data.k,
            {"iterations": parameters["iterations"]},
            warnings=tuple(warnings),
        )

    @property
    def label(self) -> str:
        return f"Platt (a = {self.a_:.4g}, b = {self.b_:.4g})"

    def _transform(self, z: np.ndarray) -> np.ndarray:
        if z.ndim == 1:
            return self.a_ * z + self.b_
        return np.stack([np.zeros(z.shape[0]), self.a_ * (z[:, 1] - z[:, 0]) + self.b_], axis=1)

    def get_params(self) -> dict | None:
        return None if self.a_ is None else {"a": self.a_, "b": self.b_}

    @classmethod
    def _from_params(cls, params, k):
        if not isinstance(params, dict):
            raise InputError("\"platt\" must be an object {\"a\": a, \"b\": b}")
        if k not in (None, 2):
            raise InputError(f"Platt scaling is for binary problems, but \"k\" is {k}")
        out = cls(json_number(params.get("a"), "platt a"), json_number(params.get("b"), "platt b"))
        out.k = 2
        return out

    @classmethod
    def identity(cls, k=None) -> "PlattScaling":
        out = cls(1.0, 0.0)
        out.k = 2
        return out
