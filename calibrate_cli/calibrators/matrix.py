"""Matrix scaling (Guo et al. 2017) and Dirichlet calibration (Kull et al. 2019), with ODIR.

Both are a multinomial logistic regression on features x of each sample, q = softmax(W x + b) with a
full K × K matrix W and a bias b:

- ``matrix``: x = z, the logits;
- ``dirichlet``: x = log softmax(z), the log-probabilities (the Dirichlet calibration map of
  Kull et al. 2019, "Beyond temperature scaling", NeurIPS; its identity is W = I, b = 0).

(W, b) minimise, on the full batch in float64 with the analytic gradient and Hessian, the mean NLL plus
the ODIR regulariser (Off-Diagonal and Intercept Regularisation, Kull et al. 2019, §3.2)::

    L(W, b) = (1/N) Σ_i −log softmax(W x_i + b)_{y_i} + λ/(K(K−1)) Σ_{j≠l} W_jl² + μ/K Σ_j b_j²

∂L/∂W = (1/N) (Q − Y)ᵀ X + 2λ/(K(K−1)) offdiag(W), ∂L/∂b = (1/N) Σ_i (q_i − e_{y_i}) + 2μ/K b.
The Hessian of the NLL term is (1/N) Σ_i (diag(q_i) − q_i q_iᵀ) ⊗ x̃_i x̃_iᵀ with x̃_i = (x_i, 1); the objective
is convex, and Newton's method (scipy's trust-exact) reaches its minimum in ~20 steps where L-BFGS-B
took ~5000 on the sample model's Dirichlet fit (the overfitted optimum is very flat). Above a size
budget (:data:`~._solve.NEWTON_BUDGET`, N · (K² + K)²) the fit falls back to L-BFGS-B.
The features are computed from the scores a row chunk at a time at every pass (no (N, K) float64
copy is held); K² + K beyond :data:`MAX_MATRIX_PARAMETERS` (K ≥ 2048, e.g. a language model's
vocabulary) is refused before the fit starts. The diagonal is free (a temperature per class costs
nothing); λ and μ pull the rest towards 0 (the paper picks them by cross-validation; here they are
given, default ``DEFAULT_ODIR`` = 1e-2 each).
These maps can change predictions. The fit starts at the identity (W = I, b = 0), and a solver that
stops before converging says so in the fit's warnings. Saved as ``{"method": "matrix", "k": K,
"matrix": {"W": [[K × K]], "b": [K], "lambda": λ, "mu": μ}}`` (``dirichlet`` likewise).
"""

from __future__ import annotations

import numpy as np

from ..data.predictions import RowSlices
from ..data.probabilities import log_softmax
from ..errors import InputError
from ._solve import newton_affordable, one_blas_thread
from .base import Calibrator, FitData, FitInfo, Progress, json_number, json_numbers

__all__ = ["DEFAULT_ODIR", "DirichletCalibration", "FeatureRows", "MAX_MATRIX_PARAMETERS", "MatrixScaling",
           "check_matrix_size", "odir_hessian", "odir_objective", "odir_objective_by_rows"]

DEFAULT_ODIR = 1e-2


#: the most parameters (K² + K) a matrix or Dirichlet fit takes on: W alone is 32 MB of float64 at the
#: limit, and the solver holds a few dozen vectors of that size (K ≤ 2047)
MAX_MATRIX_PARAMETERS = 1 << 22


def check_matrix_size(k: int, title: str, scores_name: str) -> None:
    """Refuse, before the fit starts, a K × K map beyond :data:`MAX_MATRIX_PARAMETERS` (one line, not an
    out-of-memory): a vocabulary of K = 262,144 would have 6.9·10¹⁰ parameters."""
    if k * k + k > MAX_MATRIX_PARAMETERS:
        raise InputError(
            f"{scores_name}: {title} has K² + K = {k * k + k:,} parameters for K = {k:,} classes, beyond calib's "
            f"limit of {MAX_MATRIX_PARAMETERS:,}",
            remedy="nll-or-vector",
        )


def _nll_sums(x: np.ndarray, labels: np.ndarray, w: np.ndarray, b: np.ndarray, weights: np.ndarray | None):
    """Σ_i w_i NLL_i of softmax(x Wᵀ + b) over the rows of ``x`` and its gradient sums (dW, db)
    (w_i = 1 without ``weights``)."""
    logq = log_softmax(x @ w.T + b)
    rows = np.arange(x.shape[0])
    at = logq[rows, labels]
    g = np.exp(logq)
    g[rows, labels] -= 1.0
    if weights is not None:
        at = weights * at
        g *= weights[:, None]
    return -float(np.sum(at)), g.T @ x, g.sum(axis=0)


def _with_odir(total: float, dw: np.ndarray, db: np.ndarray, count: float, w: np.ndarray, b: np.ndarray,
               lam: float, mu: float):
    """The mean NLL (sums over ``count`` samples) plus the ODIR terms, and its gradient."""
    k = w.shape[0]
    off = w - np.diag(np.diag(w))
    pairs = k * (k - 1)
    value = total / count + lam / pairs * float(np.sum(off * off)) + mu / k * float(b @ b)
    return value, dw / count + 2.0 * lam / pairs * off, db / count + 2.0 * mu / k * b


def odir_objective(x: np.ndarray, labels: np.ndarray, w: np.ndarray, b: np.ndarray, lam: float, mu: float,
                   weights: np.ndarray | None = None):
    """The ODIR-regularised mean NLL of softmax(x Wᵀ + b) and its gradient (dW, db), float64;
    ``weights``: sample weights (the NLL's mean is then (1/W) Σ_i w_i NLL_i)."""
    count = x.shape[0] if weights is None else float(np.sum(weights))
    return _with_odir(*_nll_sums(x, labels, w, b, weights), count, w, b, lam, mu)


class FeatureRows(RowSlices):
    """The features x = ``features(z)`` of the fitting set's rows, computed from its scores as each
    row chunk is read (the same values per row): no (N, K) float64 copy of the scores is held."""

    dtype = np.dtype(np.float64)

    def __init__(self, data: FitData, features) -> None:
        self.data, self.features = data, features
        self.shape = (data.n, data.k)

    def read(self, rows: slice) -> np.ndarray:
        return self.features(self.data.rows(rows))


def odir_objective_by_rows(x: FeatureRows, labels: np.ndarray, w: np.ndarray, b: np.ndarray, lam: float, mu: float,
                           weights: np.ndarray | None = None):
    """:func:`odir_objective` with the NLL sums made a row chunk at a time (added chunk by chunk)."""
    total, dw, db = 0.0, np.zeros_like(w), np.zeros_like(b)
    for rows in x.data.row_chunks():
        part = _nll_sums(x[rows], labels[rows], w, b, None if weights is None else weights[rows])
        total, dw, db = total + part[0], dw + part[1], db + part[2]
    count = x.shape[0] if weights is None else x.data.total_weight
    return _with_odir(total, dw, db, count, w, b, lam, mu)


def odir_hessian(x: np.ndarray, labels: np.ndarray, w: np.ndarray, b: np.ndarray, lam: float, mu: float,
                 weights: np.ndarray | None = None) -> np.ndarray:
    """The Hessian of :func:`odir_objective` in the parameters θ = (W row by row, b), float64,
    (K² + K) × (K² + K); accumulated over row chunks (the labels do not enter it)::

        ∂²L/∂Θ_ja ∂Θ_lc = (1/N) Σ_i (q_ij δ_jl − q_ij q_il) x̃_ia x̃_ic  (+ the ODIR diagonal)

    with Θ = [W | b] (K × (K + 1)) and x̃_i = (x_i, 1); with ``weights``, (1/W) Σ_i w_i (…).
    """
    n, k = x.shape
    a = k + 1
    p = k * a
    h = np.zeros((p, p))
    step = max(1, (1 << 22) // p)
    for start in range(0, n, step):
        xc = np.asarray(x[start:start + step], dtype=np.float64)
        q = np.exp(log_softmax(xc @ w.T + b))
        xt = np.concatenate([xc, np.ones((xc.shape[0], 1))], axis=1)
        g = (q[:, :, None] * xt[:, None, :]).reshape(xc.shape[0], p)
        if weights is not None:  # the rows' weights on the left of each product
            wc = weights[start:start + step][:, None]
            h -= (g * wc).T @ g
            for j in range(k):
                h[j * a:(j + 1) * a, j * a:(j + 1) * a] += (xt * (q[:, j:j + 1] * wc)).T @ xt
            continue
        h -= g.T @ g
        for j in range(k):
            h[j * a:(j + 1) * a, j * a:(j + 1) * a] += (xt * q[:, j:j + 1]).T @ xt
    h /= n if weights is None else float(np.sum(weights))
    order = np.concatenate([(np.arange(k)[:, None] * a + np.arange(k)[None, :]).ravel(), np.arange(k) * a + k])
    h = h[np.ix_(order, order)]
    h[np.diag_indices(p)] += np.concatenate(
        [(2.0 * lam / (k * (k - 1)) * (1.0 - np.eye(k))).ravel(), np.full(k, 2.0 * mu / k)]
    )
    return h


class MatrixScaling(Calibrator):
    """softmax(W z + b), a full matrix on the logits, fitted by the ODIR-regularised NLL."""

    name = "matrix"
    searches = {}  # fitted by `calib fit --method matrix`
    title = "matrix scaling (ODIR)"
    clips_zeros = True  # probabilities of exactly 0 (or 1) become ε (1 − ε): log p must be finite
    takes_weights = True  # the weighted mean NLL (the ODIR penalty unchanged)

    def __init__(self, w=None, b=None, *, odir_lambda: float = DEFAULT_ODIR, odir_mu: float | None = None):
        if (w is None) != (b is None):
            raise InputError(f"{self.name} needs both W and b (or neither, to fit them)")
        self.odir_lambda = json_number(odir_lambda, "ODIR lambda")
        self.odir_mu = self.odir_lambda if odir_mu is None else json_number(odir_mu, "ODIR mu")
        if self.odir_lambda < 0 or self.odir_mu < 0:
            raise InputError(f"the ODIR weights must be ≥ 0, got lambda = {self.odir_lambda}, mu = {self.odir_mu}")
        self.w_ = None if w is None else np.asarray(w, dtype=np.float64)
        self.b_ = None if b is None else np.asarray(b, dtype=np.float64)
        if self.w_ is not None:
            k = self.b_.shape[0] if self.b_.ndim == 1 else -1
            if k < 2 or self.w_.shape != (k, k):
                raise InputError(f"{self.name} needs W of shape (K, K) and b of length K ≥ 2, got {self.w_.shape} and {self.b_.shape}")
            self.k = k

    def features(self, z: np.ndarray) -> np.ndarray:
        """x of each sample: the logits (matrix scaling)."""
        return z

    def _fit(self, data: FitData, progress: Progress | None) -> FitInfo:
        from scipy.optimize import minimize

        check_matrix_size(data.k, self.title, data.scores_name)
        data.require_finite(self.title)
        x = FeatureRows(data, self.features)  # computed from the scores a row chunk at a time, at every pass
        k, labels = data.k, data.labels
        calls = [0]

        def fun(theta):
            calls[0] += 1
            if progress is not None:
                progress(calls[0], None)
            value, dw, db = odir_objective_by_rows(x, labels, theta[: k * k].reshape(k, k), theta[k * k:],
                                                   self.odir_lambda, self.odir_mu, data.weights)
            return value, np.concatenate([dw.ravel(), db])

        theta0 = np.concatenate([np.eye(k).ravel(), np.zeros(k)])
        newton = newton_affordable(data.n, k * k + k)
        with one_blas_thread():
            at_identity = fun(theta0)[0]
            if newton:
                def hess(theta):
                    return odir_hessian(x, labels, theta[: k * k].reshape(k, k), theta[k * k:], self.odir_lambda,
                                        self.odir_mu, data.weights)

                result = minimize(fun, theta0, jac=True, hess=hess, method="trust-exact",
                                  options={"maxiter": 500, "gtol": 1e-9})
            else:
                result = minimize(fun, theta0, jac=True, method="L-BFGS-B",
                                  options={"maxiter": 10000, "maxfun": 50000, "ftol": 1e-13, "gtol": 1e-7})
        warnings = []
        gradient = float(np.max(np.abs(result.jac)))
        if not result.success and gradient > 1e-5:
            warnings.append(f"{self.title} did not converge ({result.message}; largest gradient {gradient:.2g})")
        if not np.all(np.isfinite(result.x)):
            raise InputError(f"{data.scores_name}: the {self.title} fit diverged (non-finite parameters)")
        self.w_, self.b_ = result.x[: k * k].reshape(k, k).copy(), result.x[k * k:].copy()
        return FitInfo(self.objectives[0], float(result.fun), at_identity, data.n, data.k,
                       {"iterations": int(result.nit), "calls": calls[0], "method": "trust-exact" if newton else "L-BFGS-B", "lambda": self.odir_lambda, "mu": self.odir_mu,
                        "regularised": True},
                       warnings=tuple(warnings))

    @property
    def label(self) -> str:
        return self.title

    def _transform(self, z: np.ndarray) -> np.ndarray:
        zz = np.stack([np.zeros_like(z), z], axis=1) if z.ndim == 1 else z
        return self.features(zz) @ self.w_.T + self.b_

    def get_params(self):
        if self.w_ is None:
            return None
        return {"W": self.w_.tolist(), "b": self.b_.tolist(), "lambda": self.odir_lambda, "mu": self.odir_mu}

    @classmethod
    def _from_params(cls, params, k):
        if not isinstance(params, dict) or not isinstance(params.get("W"), list):
            raise InputError(f'"{cls.name}" must be an object {{"W": [[K × K]], "b": [K], "lambda": λ, "mu": μ}}')
        w = [json_numbers(row, f"{cls.name} W[{i}]") for i, row in enumerate(params["W"])]
        b = json_numbers(params.get("b"), f"{cls.name} b")
        if any(len(row) != len(b) for row in w) or len(w) != len(b):
            raise InputError(f"{cls.name}: W must be K rows of K numbers and b K numbers")
        out = cls(w, b, odir_lambda=params.get("lambda", DEFAULT_ODIR), odir_mu=params.get("mu", DEFAULT_ODIR))
        if k is not None and k != out.k:
            raise InputError(f"{cls.name} has K = {out.k} but \"k\" is {k}")
        return out

    @classmethod
    def identity(cls, k=None):
        return None if k is None else cls(np.eye(k), np.zeros(k))


class DirichletCalibration(MatrixScaling):
    """softmax(W log p + b), p = softmax(z): Dirichlet calibration, fitted by the ODIR-regularised NLL."""

    name = "dirichlet"
    shift_invariant = True  # x = log softmax(z): the same for logits and log-probabilities
    title = "Dirichlet calibration (ODIR)"

    def features(self, z: np.ndarray) -> np.ndarray:
        """x of each sample: the log-probabilities log softmax(z)."""
        return log_softmax(z)
