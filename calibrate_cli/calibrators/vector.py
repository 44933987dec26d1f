"""Vector scaling (Guo et al. 2017): z'_k = w_k z_k + b_k, one scale and one bias per class.

(w, b) minimise the mean NLL on the fitting set by Newton's method (scipy's trust-exact) with the
analytic gradient and Hessian (2K × 2K, accumulated over row chunks: for the parameters θ = (w, b),
features f_i = (z_i, 1) and classes c = (1..K, 1..K), H = (1/N) Σ_i [δ_{c c'} q_{i c} − q_{i c} q_{i c'}] f_i f_iᵀ),
or by L-BFGS-B above the size budget of :data:`~._solve.NEWTON_BUDGET`; the biases are defined up to a
constant and are centred. Unlike a temperature, vector scaling can change
predictions. Saved as ``{"method": "vector", "k": K, "vector": {"w": [K], "b": [K]}}``.

>>> import numpy as np
>>> VectorScaling(w=[1.0, 2.0], b=[0.5, -0.5]).transform(np.array([[1.0, 1.0]]))
array([[1.5, 1.5]])
"""

from __future__ import annotations

import numpy as np

from ..data.probabilities import softmax, softmax_and_log_normalizer
from ..errors import InputError
from ..data.predictions import row_chunks
from ._solve import newton_affordable, one_blas_thread
from .base import Calibrator, FitData, FitInfo, Progress, Search, json_numbers

__all__ = ["VectorScaling"]


def _vector_pass(data: FitData, w: np.ndarray, b: np.ndarray, with_grad: bool = True):
    total = 0.0
    gw = np.zeros(data.k)
    gb = np.zeros(data.k)
    for rows in row_chunks(data.n, data.k):
        z = data.rows(rows)
        r = np.arange(z.shape[0])
        y = data.labels[rows]
        p, x, log_norm = softmax_and_log_normalizer(z * w + b)
        if data.weights is not None:  # sample weights: each row's terms times w_i, means over W = Σw
            wr = data.weights[rows]
            total += float(np.sum(wr * (log_norm - x[r, y])))
            if with_grad:
                p[r, y] -= 1.0
                p *= wr[:, None]
                gw += np.einsum("ij,ij->j", p, z)
                gb += p.sum(axis=0)
            continue
        total += float(np.sum(log_norm - x[r, y]))
        if with_grad:
            p[r, y] -= 1.0  # p − onehot(y)
            gw += np.einsum("ij,ij->j", p, z)
            gb += p.sum(axis=0)
    if data.weights is not None:
        n = data.total_weight
        return total / n, gw / n, gb / n
    return total / data.n, gw / data.n, gb / data.n


def _vector_hessian(data: FitData, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The Hessian of the mean NLL of softmax(w ⊙ z + b) in θ = (w, b): see the module docstring."""
    k = data.k
    h = np.zeros((2 * k, 2 * k))
    same = np.tile(np.eye(k), (2, 2)) > 0  # δ_{c c'}
    for rows in row_chunks(data.n, data.k):
        z = data.rows(rows)
        q = softmax(z * w + b)
        f = np.concatenate([z, np.ones_like(z)], axis=1)
        qc = np.concatenate([q, q], axis=1)
        g = f * qc
        if data.weights is not None:  # Σ_i w_i (…): the weighted rows on the left of each product
            gw = g * data.weights[rows][:, None]
            h += np.where(same, gw.T @ f, 0.0) - gw.T @ g
            continue
        h += np.where(same, g.T @ f, 0.0) - g.T @ g
    return h / (data.n if data.weights is None else data.total_weight)


def _fit_vector(data: FitData, progress) -> tuple[dict, list[str]]:
    from scipy.optimize import minimize

    data.require_finite("vector scaling")
    k = data.k
    calls = [0]

    def fun(theta):
        calls[0] += 1
        if progress is not None:
            progress(calls[0], None)
        value, gw, gb = _vector_pass(data, theta[:k], theta[k:])
        return value, np.concatenate([gw, gb])

    theta0 = np.concatenate([np.ones(k), np.zeros(k)])
    newton = newton_affordable(data.n, 2 * k)
    with one_blas_thread():
        if newton:
            result = minimize(fun, theta0, jac=True, hess=lambda t: _vector_hessian(data, t[:k], t[k:]),
                              method="trust-exact", options={"maxiter": 500, "gtol": 1e-10})
        else:
            result = minimize(fun, theta0, jac=True, method="L-BFGS-B",
                              options={"maxiter": 5000, "maxfun": 20000, "ftol": 1e-15, "gtol": 1e-9})
    warnings = []
    gradient = float(np.max(np.abs(result.jac)))
    if not result.success and "ABNORMAL" not in str(result.message).upper() and gradient > 1e-7:
        warnings.append(f"vector scaling did not converge ({result.message}; largest gradient {gradient:.2g})")
    w = result.x[:k]
    b = result.x[k:] - result.x[k:].mean()  # the biases are defined up to a constant; centre them
    return {"w": [float(v) for v in w], "b": [float(v) for v in b], "iterations": int(result.nit)}, warnings



class VectorScaling(Calibrator):
    """softmax(w ⊙ z + b): a scale w_k and a bias b_k per class, fitted by NLL.

    A 1-D vector of binary log-odds s is taken as the logits [0, s].
    """

    name = "vector"
    searches = {"vector": Search("per-class scale and bias", "vector scaling")}
    clips_zeros = True  # probabilities of exactly 0 (or 1) become ε (1 − ε): log p must be finite
    takes_weights = True  # the weighted mean NLL

    def __init__(self, w=None, b=None):
        if (w is None) != (b is None):
            raise InputError("vector scaling needs both w and b (or neither, to fit them)")
        self.w_ = None if w is None else np.asarray(w, dtype=np.float64)
        self.b_ = None if b is None else np.asarray(b, dtype=np.float64)
        if self.w_ is not None:
            if self.w_.ndim != 1 or self.w_.shape != self.b_.shape or self.w_.shape[0] < 2:
                raise InputError(f"vector scaling needs w and b of the same length K ≥ 2, got {self.w_.shape} and {self.b_.shape}")
            self.k = int(self.w_.shape[0])

    def _fit(self, data: FitData, progress: Progress | None) -> FitInfo:
        parameters, warnings = _fit_vector(data, progress)
        self.w_, self.b_ = np.asarray(parameters["w"]), np.asarray(parameters["b"])
        return FitInfo(
            self.objectives[0],  # the NLL
            _vector_pass(data, self.w_, self.b_, False)[0],
            _vector_pass(data, np.ones(data.k), np.zeros(data.k), False)[0],
            data.n,
            data.k,
            {"iterations": parameters["iterations"]},
            warnings=tuple(warnings),
        )

    @property
    def label(self) -> str:
        return "vector scaling"

    def _transform(self, z: np.ndarray) -> np.ndarray:
        zz = np.stack([np.zeros_like(z), z], axis=1) if z.ndim == 1 else z
        return zz * self.w_ + self.b_

    def get_params(self) -> dict | None:
        if self.w_ is None:
            return None
        return {"w": [float(v) for v in self.w_], "b": [float(v) for v in self.b_]}

    @classmethod
    def _from_params(cls, params, k):
        if not isinstance(params, dict):
            raise InputError("\"vector\" must be an object {\"w\": [K numbers], \"b\": [K numbers]}")
        out = cls(json_numbers(params.get("w"), "vector w"), json_numbers(params.get("b"), "vector b"))
        if k is not None and k != out.k:
            raise InputError(f"vector scaling has {out.k} scales but \"k\" is {k}")
        return out

    @classmethod
    def identity(cls, k=None):
        return None if k is None else cls(np.ones(k), np.zeros(k))
