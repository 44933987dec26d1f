"""Ensemble temperature scaling (Zhang, Kailkhura & Han 2020, "Mix-n-Match", ICML, §3.2).

q = w₁ · softmax(z / T) + w₂ · softmax(z) + w₃ · 1/K, the weights on the simplex (w ≥ 0, Σ w = 1).

T is the exact NLL-optimal temperature (as ``calib temperature --search nll``); the weights then
minimise the mean NLL of q on the fitting set under the simplex constraint (SLSQP, as the authors'
code; float64), on the (N, 3) components at the true class, read from the scores by row chunks
(the scores are never held whole). Each term keeps the order of the logits, so q keeps the argmax whenever w₁ + w₂ > 0
(w₃ = 1 alone would make every class equally likely). The output is probabilities. Saved as
``{"method": "ensemble_ts", "k": K, "ensemble_ts": {"temperature": T, "weights": [w₁, w₂, w₃]}}``.

>>> import numpy as np
>>> EnsembleTemperatureScaling(2.0, [0.5, 0.5, 0.0]).predict_proba(np.array([[0.0, 0.0]])).tolist()
[[0.5, 0.5]]
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from .base import (FitData, FitInfo, ProbabilityCalibrator, Progress, json_number, json_numbers, nll_by_rows,
                   probabilities_of)
from .temperature import fit_nll

__all__ = ["EnsembleTemperatureScaling"]


def _softmax_at(z: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(z / T) where z / T overflows: softmax((z − max z) / T), the same map, whose exponents
    are ≤ 0 (−inf where the quotient overflows: a probability of 0), so no inf − inf makes a NaN."""
    z = np.asarray(z, dtype=np.float64)
    zz = np.stack([np.zeros_like(z), z], axis=1) if z.ndim == 1 else z
    with np.errstate(over="ignore"):
        shifted = zz - zz.max(axis=1, keepdims=True)
        return probabilities_of(shifted / temperature)


class EnsembleTemperatureScaling(ProbabilityCalibrator):
    """w₁ softmax(z/T) + w₂ softmax(z) + w₃/K (see the module docstring)."""

    name = "ensemble_ts"
    shift_invariant = True  # softmax(z / T) and softmax(z): the same for logits and log-probabilities
    clips_zeros = True  # probabilities of exactly 0 (or 1) become ε (1 − ε): log p must be finite
    takes_weights = True  # the weighted NLL of the temperature and of the mixture

    def __init__(self, temperature: float | None = None, weights=None):
        if (temperature is None) != (weights is None):
            raise InputError("ensemble temperature scaling needs both a temperature and weights (or neither)")
        self.temperature_ = None if temperature is None else json_number(temperature, "ensemble_ts temperature", positive=True)
        self.weights_ = None if weights is None else np.asarray(weights, dtype=np.float64)
        if self.weights_ is not None:
            w = self.weights_
            if w.shape != (3,) or np.any(w < 0) or np.any(w > 1) or abs(float(w.sum()) - 1.0) > 1e-9:
                raise InputError(f"ensemble_ts weights must be 3 numbers ≥ 0 summing to 1, got {w.tolist()}")

    def _mix(self, z: np.ndarray, temperature: float, w: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            scaled = z / temperature
        if not np.isfinite(scaled).all():  # a tiny T (a saved file's 1e-308) or huge logits: z / T overflows
            p_t = _softmax_at(z, temperature)
        else:
            p_t = probabilities_of(scaled)
        p_1 = probabilities_of(z)
        return w[0] * p_t + w[1] * p_1 + w[2] / p_t.shape[1]

    def _fit(self, data: FitData, progress: Progress | None) -> FitInfo:
        from scipy.optimize import minimize

        data.require_finite("ensemble temperature scaling")
        t, solver, warnings, *_ = fit_nll(data, progress)
        # the three components at the true class, (N, 3), read by row chunks: the NLL of q is −mean log(c @ w)
        c = np.full((data.n, 3), 1.0 / data.k)
        for rows in data.row_chunks():
            z, at = data.rows(rows), (np.arange(rows.stop - rows.start), data.labels[rows])
            c[rows, 0], c[rows, 1] = probabilities_of(z / t)[at], probabilities_of(z)[at]

        def fun(w):
            m = c @ w
            return -float(data.mean(np.log(m))), -data.mean(c / m[:, None], axis=0)  # weighted with sample weights

        w0 = np.array([1.0, 0.0, 0.0])  # plain temperature scaling
        result = minimize(fun, np.full(3, 1.0 / 3.0), jac=True, method="SLSQP", bounds=[(0.0, 1.0)] * 3,
                          constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones(3)}],
                          options={"maxiter": 1000, "ftol": 1e-15})
        w = np.clip(result.x, 0.0, 1.0)
        w /= w.sum()
        warnings = list(warnings)
        if not result.success:
            warnings.append(f"ensemble temperature scaling: the weights did not converge ({result.message})")
        if fun(w)[0] > fun(w0)[0]:  # never worse than the temperature alone
            w = w0
        self.temperature_, self.weights_, self.k = float(t), w, data.k
        return FitInfo(self.objectives[0], nll_by_rows(data, self._proba), nll_by_rows(data),
                       data.n, data.k, {**solver, "weight_iterations": int(result.nit)}, warnings=tuple(warnings))

    @property
    def label(self) -> str:
        w = self.weights_
        return f"ensemble TS (T = {self.temperature_:.4g}, w = {w[0]:.3g}/{w[1]:.3g}/{w[2]:.3g})"

    def _proba(self, z: np.ndarray) -> np.ndarray:
        return self._mix(z, self.temperature_, self.weights_)

    def get_params(self):
        if self.weights_ is None:
            return None
        return {"temperature": self.temperature_, "weights": self.weights_.tolist()}

    @classmethod
    def _from_params(cls, params, k):
        if not isinstance(params, dict):
            raise InputError('"ensemble_ts" must be an object {"temperature": T, "weights": [w1, w2, w3]}')
        out = cls(json_number(params.get("temperature"), "ensemble_ts temperature", positive=True),
                  json_numbers(params.get("weights"), "ensemble_ts weights"))
        out.k = k
        return out

    @classmethod
    def identity(cls, k=None):
        out = cls(1.0, [0.0, 1.0, 0.0])
        out.k = k
        return out
