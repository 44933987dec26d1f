"""Temperature scaling (Guo et al. 2017; SPEC §3): p(T) = softmax(logits / T).

T > 1 softens the probabilities, T < 1 sharpens them; T never changes the argmax, so never the
accuracy. This module applies a temperature and fits one on a validation set:

- ``search="grid"`` (Mukhoti et al. 2020): T ∈ {start, start + step, …, stop} (default
  {0.1, …, 10.0}, 100 values); the T minimising the objective (ECE by default, or NLL, AdaECE) on
  the fitting set wins, ties going to the smallest T. Vectorised over T: the rows are processed in
  chunks, each chunk against every T at once; the binned objectives reuse
  :func:`~calibrate_cli.metrics.equal_width_bins` / :func:`~calibrate_cli.metrics.equal_mass_bins`.
- ``search="nll"`` (Guo et al. 2017): the exact minimiser of the mean NLL over T > 0. With β = 1/T,
  NLL(β) = (1/N) Σ_i [log Σ_k exp(β z_ik) − β z_iy] is convex, with derivative
  NLL'(β) = (1/N) Σ_i [E_{p(β)}[z_i] − z_iy]; its root is found by Newton's method on log β,
  safeguarded by bisection, to |ΔT| < 1e-6 (in practice ~1e-12).
- ``search="platt"`` (Platt 1999, binary only): p(class 1) = σ(a·s + b), s the log-odds, (a, b)
  minimising the NLL (Newton's method, trust region, analytic gradient and Hessian).
- ``search="vector"`` (Guo et al. 2017): z'_k = w_k z_k + b_k per class, NLL by L-BFGS-B with the
  analytic gradient. Unlike a temperature, Platt and vector scaling can change predictions.

Probabilities are fitted through their logarithms: log p is a valid logit vector (softmax(log p) = p)
and a probability of exactly 0 becomes −inf, which stays 0 at every T (0^(1/T) = 0) — never clipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Callable

import numpy as np

from .errors import InputError
from .metrics import DEFAULT_N_BINS, equal_mass_bins, equal_width_bins
from .parallel import map_chunks
from .predictions import InputKind, _check_scores, as_predictions, check_nll_range, check_scaled_range, row_chunks
from .probabilities import softmax
from .summary import check_compat

__all__ = [
    "DEFAULT_GRID",
    "SEARCHES",
    "OBJECTIVES",
    "NLL_TEMPERATURE_BOUNDS",
    "apply_temperature",
    "check_temperature",
    "scale_scores",
    "probabilities_to_logits",
    "parse_grid",
    "temperature_grid",
    "fit_temperature",
    "TemperatureFit",
    "TemperatureScaler",
]

DEFAULT_GRID = (0.1, 10.0, 0.1)
SEARCHES = ("grid", "nll", "platt", "vector")
OBJECTIVES = ("ece", "nll", "adaece")
DEFAULT_OBJECTIVE = {"grid": "ece", "nll": "nll", "platt": "nll", "vector": "nll"}
NLL_TEMPERATURE_BOUNDS = (1e-4, 1e4)
MAX_GRID_SIZE = 100_000
_GRID_CHUNK_ELEMENTS = 1 << 20  # rows × temperatures × K per chunk (8 MB of float64)
_ADAECE_GRID_VALUES = 1 << 25  # confidences an AdaECE grid keeps at once (T × N; 256 MB of float64)

Progress = Callable[[int, "int | None"], None]


def check_temperature(temperature: float) -> float:
    """Return ``temperature`` as a float, or raise InputError unless it is finite and > 0."""
    try:
        t = float(temperature)
    except (TypeError, ValueError):
        raise InputError(f"temperature must be a number, got {temperature!r}") from None
    if not math.isfinite(t) or t <= 0:
        raise InputError(f"temperature must be finite and > 0, got {temperature!r}")
    return t


def apply_temperature(logits: np.ndarray, temperature: float, *, scores_name: str = "logits") -> np.ndarray:
    """Scaled logits ``logits / T`` in float64 (softmax of them is p(T)); a T so small that they
    overflow is refused (:func:`~calibrate_cli.predictions.check_scaled_range`)."""
    t = check_temperature(temperature)
    check_scaled_range(logits, t, scores_name=scores_name)
    return np.asarray(logits, dtype=np.float64) / t


def probabilities_to_logits(probs: np.ndarray) -> np.ndarray:
    """log p in float64: logits whose softmax is ``probs`` (rows renormalised).

    A probability of exactly 0 becomes −inf, which softmax maps back to exactly 0 at every
    temperature; nothing is clipped. A 1-D vector p(class 1) becomes the two columns log(1 − p), log p.
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim == 1:
        p = np.stack([1.0 - p, p], axis=1)
    with np.errstate(divide="ignore"):
        return np.log(p)


def scale_scores(
    scores: np.ndarray, temperature: float, input_kind: InputKind = "logits", *, scores_name: str = "scores"
) -> np.ndarray:
    """``scores`` at temperature T, of the same kind: logits / T, or probabilities p^(1/T) / Σ p^(1/T).

    Probabilities are scaled as softmax(log p / T) (a zero stays exactly 0). T = 1 returns the
    scores unchanged. The scores are checked first (the same errors as ``evaluate``).
    """
    t = check_temperature(temperature)
    scores = scores if isinstance(scores, np.ndarray) else np.asarray(scores)
    _check_scores(scores, scores_name, input_kind)
    if t == 1.0:
        return scores
    if input_kind == "probs":
        return softmax(apply_temperature(probabilities_to_logits(scores), t, scores_name=scores_name))
    return apply_temperature(scores, t, scores_name=scores_name)


# ---------------------------------------------------------------------------------------------
# The grid


def _decimal(value, what: str) -> Decimal:
    try:
        d = Decimal(value if isinstance(value, str) else repr(float(value)))
    except (InvalidOperation, TypeError, ValueError):
        raise InputError(f"grid {what} must be a number, got {value!r}") from None
    if not d.is_finite() or not math.isfinite(float(d)):
        raise InputError(f"grid {what} must be finite (a float: |x| < 1.8e308), got {value}")
    return d


def temperature_grid(start=DEFAULT_GRID[0], stop=DEFAULT_GRID[1], step=DEFAULT_GRID[2]) -> np.ndarray:
    """The temperatures start + i·step ≤ stop (i = 0, 1, …), each the float nearest the decimal value.

    Computed in decimal arithmetic, so there is no drift: the default grid is exactly
    {0.1, 0.2, …, 10.0} (100 values; 0.3 is the float 0.3, not 0.30000000000000004).
    """
    d_start, d_stop, d_step = _decimal(start, "start"), _decimal(stop, "stop"), _decimal(step, "step")
    if d_start <= 0:
        raise InputError(f"grid start must be > 0 (T = 0 is not a temperature), got {start}")
    if d_step <= 0:
        raise InputError(f"grid step must be > 0, got {step}")
    if d_stop < d_start:
        raise InputError(f"grid stop ({stop}) must be ≥ start ({start})")
    count = int((d_stop - d_start) // d_step) + 1
    if count > MAX_GRID_SIZE:
        raise InputError(f"grid {start}:{stop}:{step} has {count} values; at most {MAX_GRID_SIZE} are allowed")
    return np.array([float(d_start + i * d_step) for i in range(count)], dtype=np.float64)


def parse_grid(text: str) -> tuple[str, str, str]:
    """``"0.05:5:0.05"`` → ("0.05", "5", "0.05"), checked by :func:`temperature_grid`."""
    parts = str(text).split(":")
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise InputError(f"--grid must be START:STOP:STEP (e.g. 0.1:10:0.1), got {text!r}")
    start, stop, step = (p.strip() for p in parts)
    try:
        temperature_grid(start, stop, step)
    except InputError as exc:
        raise InputError(f"--grid {text}: {exc}") from None
    return start, stop, step


# ---------------------------------------------------------------------------------------------
# Passes over the data


@dataclass(frozen=True)
class _Data:
    """Validated fitting data: (N, K) logits (any float dtype; −inf allowed for log-probabilities)."""

    logits: np.ndarray
    labels: np.ndarray
    scores_name: str
    has_zeros: bool = False  # −inf entries: log-probabilities of exactly 0

    @property
    def n(self) -> int:
        return int(self.logits.shape[0])

    @property
    def k(self) -> int:
        return int(self.logits.shape[1])

    def rows(self, rows: slice) -> np.ndarray:
        return np.asarray(self.logits[rows], dtype=np.float64)


def _prepare(scores, labels, input_kind, scores_name, labels_name) -> _Data:
    predictions = as_predictions(scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name)
    logits = predictions.scores
    if input_kind == "probs":
        logits = probabilities_to_logits(logits)
        return _Data(logits, predictions.labels, scores_name, has_zeros=bool(np.isneginf(logits).any()))
    return _Data(logits=logits, labels=predictions.labels, scores_name=scores_name)


def _require_finite_true_class(data: _Data, what: str) -> None:
    if not np.isneginf(data.logits).any():
        return
    for rows in row_chunks(data.n, data.k):
        z_y = data.rows(rows)[np.arange(rows.stop - rows.start), data.labels[rows]]
        bad = np.isneginf(z_y)
        if bad.any():
            row = rows.start + int(np.flatnonzero(bad)[0])
            raise InputError(
                f"{data.scores_name}: the true class has probability 0 at row {row}, so the NLL is infinite "
                f"at every temperature; {what} is impossible (use --search grid --objective ece)"
            )


def _require_finite(data: _Data, what: str) -> None:
    if np.isneginf(data.logits).any():
        row = int(np.flatnonzero(np.isneginf(data.logits).any(axis=1))[0])
        raise InputError(
            f"{data.scores_name}: {what} needs finite logits, but row {row} has a probability of exactly 0"
        )


def _grid_chunk(z: np.ndarray, y: np.ndarray, temps: np.ndarray, objective: str, compat: str | None):
    """Every temperature at once on one chunk of rows: (confidences, correct) or per-sample NLL,
    computed exactly as :func:`~calibrate_cli.summary.summarize` does on ``logits / T``."""
    x = z[:, None, :] / temps[None, :, None]  # (r, nT, K) float64, = apply_temperature per T
    if compat:
        x = x.astype(np.float32)  # the reference code's float32 softmax
    x -= x.max(axis=-1, keepdims=True)
    if objective == "nll":
        x_y = np.take_along_axis(x, y[:, None, None].repeat(x.shape[1], axis=1), axis=-1)[..., 0]
        np.exp(x, out=x)
        log_s = np.log(x.sum(axis=-1))
        return -(x_y - log_s).astype(np.float64)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    pred = x.argmax(axis=-1)
    conf = np.take_along_axis(x, pred[..., None], axis=-1)[..., 0]
    return conf, pred == y[:, None]


def _grid_objectives(data, temps, objective, n_bins, compat, progress) -> np.ndarray:
    """The objective at each temperature of ``temps`` on the fitting data.

    NLL: per-chunk sums; ECE: per-chunk equal-width statistics of every T at once (stacked
    :func:`~calibrate_cli.metrics.equal_width_bins`), merged over chunks — memory bounded by a chunk.
    AdaECE needs every confidence at a T (its equal-mass edges come from their sorted order), so the
    temperatures go in groups of at most ``_ADAECE_GRID_VALUES // N``, one pass over the data each.
    """
    n_t = temps.shape[0]
    group = n_t if objective != "adaece" else max(1, min(n_t, _ADAECE_GRID_VALUES // data.n))
    starts = range(0, n_t, group)
    values = []
    for g, start in enumerate(starts):
        def report(done: int, g=g) -> None:
            if progress is not None:
                progress(g * data.n + done, len(starts) * data.n)

        values.append(_grid_pass(data, temps[start : start + group], objective, n_bins, compat, report))
    return np.concatenate(values)


def _grid_pass(data, temps, objective, n_bins, compat, report) -> np.ndarray:
    """One pass over the data for the temperatures ``temps``; ``report(rows_done)`` after each chunk."""
    n_t = temps.shape[0]
    if objective == "adaece":
        conf = np.empty((n_t, data.n), dtype=np.float32 if compat else np.float64)
        correct = np.empty((n_t, data.n), dtype=bool)

    def one_chunk(rows: slice):
        out = _grid_chunk(data.rows(rows), data.labels[rows], temps, objective, compat)
        if objective == "nll":
            return rows, out.sum(axis=0)
        if objective == "ece":
            return rows, equal_width_bins(out[0], out[1], n_bins, compat=compat)  # (T, M) statistics
        conf[:, rows] = out[0].T
        correct[:, rows] = out[1].T
        return rows, None

    total = None  # chunk results are combined in chunk order (thread-count independent)
    for rows, part in map_chunks(one_chunk, row_chunks(data.n, n_t * data.k, _GRID_CHUNK_ELEMENTS)):
        if part is not None:
            total = part if total is None else (total + part if objective == "nll" else total.merge(part))
        report(rows.stop)
    if objective == "nll":
        return total / data.n
    if objective == "ece":
        return np.asarray(total.calibration_error(), dtype=np.float64)
    return np.array([float(equal_mass_bins(conf[j], correct[j], n_bins, compat=compat).calibration_error()) for j in range(n_t)])


def _nll_pass(data: _Data, beta: float) -> tuple[float, float, float]:
    """One pass at β = 1/T: the mean NLL of softmax(β z), its derivative in β and the mean variance.

    With d = z − max_k z (a row shift changes nothing), p = softmax(β d):
    NLL = (1/N) Σ_i [log Σ_k e^{β d_ik} − β d_iy],  NLL'(β) = (1/N) Σ_i (E_p[d_i] − d_iy),
    NLL''(β) = (1/N) Σ_i Var_p[d_i] ≥ 0 (so NLL is convex in β).
    """

    def one_chunk(rows: slice) -> tuple[float, float, float]:
        z = data.rows(rows)
        r = np.arange(z.shape[0])
        d = z - z.max(axis=1, keepdims=True)
        d_y = d[r, data.labels[rows]]
        e = np.exp(d * beta)
        s = e.sum(axis=1)
        if data.has_zeros:  # log-probabilities of 0: e = 0 there, and 0 · (−inf) must count as 0
            d[np.isneginf(d)] = 0.0
        ed = e * d
        m1 = ed.sum(axis=1) / s
        m2 = np.einsum("ij,ij->i", ed, d) / s
        return (
            float(np.sum(np.log(s) - beta * d_y)),
            float(np.sum(m1 - d_y)),
            float(np.sum(np.maximum(m2 - m1 * m1, 0.0))),
        )

    total = grad = var = 0.0
    for chunk_total, chunk_grad, chunk_var in map_chunks(one_chunk, row_chunks(data.n, data.k)):  # in chunk order
        total += chunk_total
        grad += chunk_grad
        var += chunk_var
    return total / data.n, grad / data.n, var / data.n


def _nll_at(data: _Data, temperature: float) -> float:
    return _nll_pass(data, 1.0 / temperature)[0]


def _fit_nll(data: _Data, progress) -> tuple[float, dict, list[str]]:
    """Root of NLL'(β) in u = log β by Newton's method safeguarded by bisection (rtsafe).

    NLL' is increasing in u; every pass shrinks the bracket [lo, hi] that holds the root, a Newton
    step (dNLL'/du = β·NLL''(β)) that leaves the bracket is replaced by bisection, and the loop stops
    when the step is below 1e-12 in u (|ΔT| = T·|Δu|: far below 1e-6). Converges in ~5 passes; after
    20 passes the bounds are checked (separable data: the NLL falls all the way to T → 0).
    """
    _require_finite_true_class(data, "an NLL fit")
    t_min, t_max = NLL_TEMPERATURE_BOUNDS
    lo, hi = math.log(1.0 / t_max), math.log(1.0 / t_min)
    u = 0.0  # T = 1
    passes = 0
    converged = False
    while passes < 200:
        if passes == 20:  # slow progress: is the optimum beyond a bound (separable or chance-level data)?
            passes += 2
            if _nll_pass(data, math.exp(hi))[1] <= 0:
                u = hi
                break
            if _nll_pass(data, math.exp(lo))[1] >= 0:
                u = lo
                break
        beta = math.exp(u)
        _, g, var = _nll_pass(data, beta)
        passes += 1
        if progress is not None:
            progress(passes, None)
        if g == 0.0:
            converged = True
            break
        if g < 0:
            lo = u
        else:
            hi = u
        slope = beta * var
        step = -g / slope if slope > 0 else math.copysign(math.inf, -g)
        step = max(-2.0, min(2.0, step))  # at most a factor e² in T per pass
        if abs(step) < 1e-12:  # Newton's step: quadratic convergence, the error is far smaller still
            u += step
            converged = True
            break
        new = u + step
        if not lo < new < hi:  # outside the bracket: bisect
            new = 0.5 * (lo + hi)
        if hi - lo < 1e-12:
            u = new
            converged = True
            break
        u = new
    t = 1.0 / math.exp(u)
    warnings = []
    if t >= t_max * (1 - 1e-9):
        t = t_max
        warnings.append(
            f"the NLL keeps decreasing as T grows: the optimum is at or beyond T = {t_max:g} (the labels are "
            "no better than chance under these logits)"
        )
    elif t <= t_min * (1 + 1e-9):
        t = t_min
        warnings.append(
            f"the NLL keeps decreasing as T shrinks: the optimum is at or below T = {t_min:g} (every sample's "
            "label has the largest logit: the data are separable)"
        )
    elif not converged:
        warnings.append("the NLL fit did not converge in 200 passes")
    return t, {"passes": passes}, warnings


# ---------------------------------------------------------------------------------------------
# Platt and vector scaling


def _log_sigmoid(m: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -m)


def _fit_platt(data: _Data, progress) -> tuple[dict, list[str]]:
    """Newton's method with backtracking on the (convex) mean NLL of σ(a·s + b); stops when the
    Newton step is below 1e-13 (quadratic convergence: the error is far smaller)."""
    if data.k != 2:
        raise InputError(
            f"{data.scores_name}: Platt scaling is for binary problems (K = 2 or 1-D scores), got K = {data.k}; "
            "use --search nll or --search vector"
        )
    _require_finite(data, "Platt scaling")
    z = np.asarray(data.logits, dtype=np.float64)
    s = z[:, 1] - z[:, 0]
    y = data.labels.astype(np.float64)
    sign = 2.0 * y - 1.0  # NLL_i = −log σ(sign_i · m_i), m = a s + b

    def nll(theta) -> float:
        return float(np.mean(-_log_sigmoid(sign * (theta[0] * s + theta[1]))))

    theta = np.array([1.0, 0.0])
    value = nll(theta)
    converged = False
    for iteration in range(1, 201):
        if progress is not None:
            progress(iteration, None)
        q = 0.5 * (1.0 + np.tanh(0.5 * (theta[0] * s + theta[1])))  # σ(m), stable
        r, w = q - y, q * (1.0 - q)
        grad = np.array([np.mean(r * s), np.mean(r)])
        hess = np.array([[np.mean(w * s * s), np.mean(w * s)], [np.mean(w * s), np.mean(w)]])
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


def _vector_pass(data: _Data, w: np.ndarray, b: np.ndarray, with_grad: bool = True):
    total = 0.0
    gw = np.zeros(data.k)
    gb = np.zeros(data.k)
    for rows in row_chunks(data.n, data.k):
        z = data.rows(rows)
        r = np.arange(z.shape[0])
        y = data.labels[rows]
        x = z * w + b
        x -= x.max(axis=1, keepdims=True)
        e = np.exp(x)
        s = e.sum(axis=1)
        total += float(np.sum(np.log(s) - x[r, y]))
        if with_grad:
            p = e / s[:, None]
            p[r, y] -= 1.0  # p − onehot(y)
            gw += np.einsum("ij,ij->j", p, z)
            gb += p.sum(axis=0)
    return total / data.n, gw / data.n, gb / data.n


def _fit_vector(data: _Data, progress) -> tuple[dict, list[str]]:
    from scipy.optimize import minimize

    _require_finite(data, "vector scaling")
    k = data.k
    calls = [0]

    def fun(theta):
        calls[0] += 1
        if progress is not None:
            progress(calls[0], None)
        value, gw, gb = _vector_pass(data, theta[:k], theta[k:])
        return value, np.concatenate([gw, gb])

    theta0 = np.concatenate([np.ones(k), np.zeros(k)])
    result = minimize(fun, theta0, jac=True, method="L-BFGS-B",
                      options={"maxiter": 5000, "maxfun": 20000, "ftol": 1e-15, "gtol": 1e-9})
    warnings = []
    if not result.success and "ABNORMAL" not in str(result.message).upper():
        warnings.append(f"vector scaling did not converge ({result.message})")
    w = result.x[:k]
    b = result.x[k:] - result.x[k:].mean()  # the biases are defined up to a constant; centre them
    return {"w": [float(v) for v in w], "b": [float(v) for v in b], "iterations": int(result.nit)}, warnings


# ---------------------------------------------------------------------------------------------
# The result and the public API


@dataclass(frozen=True)
class TemperatureFit:
    """The result of :func:`fit_temperature`.

    temperature      the fitted T (None for Platt and vector scaling, which are not one temperature)
    search           "grid", "nll", "platt" or "vector"
    objective        what was minimised: "ece", "adaece" or "nll" (always "nll" unless grid)
    objective_value  the objective on the fitting set at the fitted parameters
    objective_at_one the objective on the fitting set at T = 1 (the uncalibrated model)
    grid             (start, stop, step) of a grid search, else None
    curve            ((T, objective), …) over the grid, else None
    parameters       platt: {"a", "b"} (p = σ(a·s + b)); vector: {"w": [K], "b": [K]}; nll: solver calls
    warnings         e.g. the optimum on the grid's boundary
    """

    temperature: float | None
    search: str
    objective: str
    objective_value: float
    objective_at_one: float
    n: int
    k: int
    n_bins: int
    compat: str | None
    grid: tuple[float, float, float] | None = None
    curve: tuple[tuple[float, float], ...] | None = None
    parameters: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """Short name of the calibration map, e.g. ``T = 0.8689`` or ``Platt (a = 1.2, b = 0.1)``."""
        if self.search == "platt":
            return f"Platt (a = {self.parameters['a']:.4g}, b = {self.parameters['b']:.4g})"
        if self.search == "vector":
            return "vector scaling"
        return f"T = {self.temperature:.6g}"

    def transform(self, logits: np.ndarray, *, scores_name: str = "logits") -> np.ndarray:
        """Calibrated logits (float64): ``logits / T``; Platt: log-odds a·s + b; vector: w ⊙ z + b.

        A 1-D vector of log-odds gives a 1-D result; (N, K) gives (N, K). K must be the fitted K.
        """
        z = np.asarray(logits, dtype=np.float64)
        k = 2 if z.ndim == 1 else (z.shape[1] if z.ndim == 2 else -1)
        if k != self.k:
            raise InputError(
                f"{scores_name}: {k if k > 0 else 'unknown'} classes (shape {z.shape}) but the calibration "
                f"was fitted on K = {self.k}"
            )
        if self.search == "platt":
            a, b = self.parameters["a"], self.parameters["b"]
            if z.ndim == 1:
                return a * z + b
            return np.stack([np.zeros(z.shape[0]), a * (z[:, 1] - z[:, 0]) + b], axis=1)
        if self.search == "vector":
            zz = np.stack([np.zeros_like(z), z], axis=1) if z.ndim == 1 else z
            return zz * np.asarray(self.parameters["w"]) + np.asarray(self.parameters["b"])
        return apply_temperature(z, self.temperature, scores_name=scores_name)

    def apply(self, scores: np.ndarray, input_kind: InputKind = "logits", *, scores_name: str = "scores") -> np.ndarray:
        """``scores`` after calibration, of the same kind: logits in, logits out; probabilities in,
        probabilities out (through log p, zeros staying exactly 0)."""
        if input_kind == "probs":
            return softmax(self.transform(probabilities_to_logits(scores), scores_name=scores_name))
        return self.transform(scores, scores_name=scores_name)

    def to_dict(self) -> dict:
        out = {
            "temperature": self.temperature,
            "search": self.search,
            "objective": self.objective,
            "objective_value": self.objective_value,
            "objective_at_one": self.objective_at_one,
            "n": self.n,
            "k": self.k,
            "n_bins": self.n_bins,
            "compat": self.compat,
            "warnings": list(self.warnings),
        }
        if self.grid is not None:
            out["grid"] = {"start": self.grid[0], "stop": self.grid[1], "step": self.grid[2]}
            out["curve"] = [{"temperature": t, "objective": v} for t, v in self.curve]
        if self.parameters:
            out[self.search if self.search in ("platt", "vector") else "solver"] = dict(self.parameters)
        return out


def _resolve(search: str, objective: str | None) -> str:
    if search not in SEARCHES:
        raise InputError(f"Expected `search` to be one of {SEARCHES}, but got {search!r}")
    if objective is None:
        return DEFAULT_OBJECTIVE[search]
    if objective not in OBJECTIVES:
        raise InputError(f"Expected `objective` to be one of {OBJECTIVES}, but got {objective!r}")
    if search != "grid" and objective != "nll":
        raise InputError(
            f"--search {search} minimises the NLL; --objective {objective} works with --search grid only"
        )
    return objective


def fit_temperature(
    logits,
    labels,
    search: str = "grid",
    objective: str | None = None,
    grid=DEFAULT_GRID,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    progress: Progress | None = None,
    *,
    input_kind: InputKind = "logits",
    scores_name: str = "logits",
    labels_name: str = "labels",
) -> TemperatureFit:
    """Fit a temperature (or Platt / vector scaling) on a validation set (SPEC §3).

    ``search``: "grid" (the paper: T on ``grid`` = (start, stop, step), default 0.1..10.0 by 0.1,
    minimising ``objective`` = "ece" (default), "adaece" or "nll"; ties → smallest T), "nll" (the
    exact NLL-optimal T, |ΔT| < 1e-6), "platt" (binary) or "vector". ``objective`` defaults to
    "ece" for the grid and is "nll" otherwise. ``n_bins``/``compat`` as :func:`~calibrate_cli.evaluate`:
    the objective at T equals what ``evaluate(logits / T, labels, n_bins=, compat=)`` reports.
    ``input_kind="probs"`` fits on log-probabilities. ``progress(done, total)`` is called after each
    chunk of rows (grid) or solver evaluation (total None).

    >>> import numpy as np
    >>> fit = fit_temperature(np.array([[4.0, 0.0], [0.0, 4.0], [4.0, 0.0]]), [0, 1, 1], search="nll")
    >>> round(fit.temperature, 5), fit.objective  # 4 / ln 2: σ(4/T) = 2/3
    (5.77078, 'nll')
    """
    objective = _resolve(search, objective)
    compat = check_compat(compat)
    if search != "grid" and compat:
        raise InputError("--compat applies to the grid search's ECE objective only; drop --compat")
    temps = temperature_grid(*grid) if search == "grid" else None
    data = _prepare(logits, labels, input_kind, scores_name, labels_name)
    warnings: list[str] = []
    parameters: dict = {}
    curve = None
    temperature = None

    if objective == "nll" and search in ("grid", "nll"):
        t_min = float(temps.min()) if search == "grid" else NLL_TEMPERATURE_BOUNDS[0]
        check_nll_range(data.logits, t_min, scores_name=scores_name)
    if search == "grid":
        if objective == "nll":
            _require_finite_true_class(data, "an NLL objective")
        check_scaled_range(
            data.logits, float(temps.min()), scores_name=scores_name, dtype=np.float32 if compat else np.float64,
            why=f" (compat mode {compat} computes in float32)" if compat else "",
        )
        values = _grid_objectives(data, temps, objective, n_bins, compat, progress)
        best = int(np.argmin(values))  # first minimum: ties go to the smallest T
        temperature = float(temps[best])
        value = float(values[best])
        ones = np.flatnonzero(temps == 1.0)
        at_one = (
            float(values[ones[0]]) if ones.size else float(_grid_objectives(data, np.ones(1), objective, n_bins, compat, None)[0])
        )
        curve = tuple((float(t), float(v)) for t, v in zip(temps, values))
        if temps.shape[0] > 1 and best in (0, temps.shape[0] - 1):
            side = "lower" if best == 0 else "upper"
            warnings.append(
                f"the best T = {temperature:g} is on the grid's {side} boundary ({temps[0]:g}..{temps[-1]:g}); "
                "the optimum may lie outside it: widen --grid START:STOP:STEP"
            )
        grid_tuple = tuple(float(_decimal(g, "value")) for g in grid)
    else:
        grid_tuple = None
        if search == "nll":
            temperature, parameters, warnings = _fit_nll(data, progress)
            value, at_one = _nll_at(data, temperature), _nll_at(data, 1.0)
        elif search == "platt":
            parameters, warnings = _fit_platt(data, progress)
            theta = (parameters["a"], parameters["b"])
            z = np.asarray(data.logits, dtype=np.float64)
            s, sign = z[:, 1] - z[:, 0], 2.0 * data.labels - 1.0
            value = float(np.mean(-_log_sigmoid(sign * (theta[0] * s + theta[1]))))
            at_one = float(np.mean(-_log_sigmoid(sign * s)))
        else:
            parameters, warnings = _fit_vector(data, progress)
            value = _vector_pass(data, np.asarray(parameters["w"]), np.asarray(parameters["b"]), False)[0]
            at_one = _vector_pass(data, np.ones(data.k), np.zeros(data.k), False)[0]

    return TemperatureFit(
        temperature=temperature,
        search=search,
        objective=objective,
        objective_value=float(value),
        objective_at_one=float(at_one),
        n=data.n,
        k=data.k,
        n_bins=n_bins,
        compat=compat,
        grid=grid_tuple,
        curve=curve,
        parameters=parameters,
        warnings=tuple(warnings),
    )


class TemperatureScaler:
    """Fit / transform wrapper of :func:`fit_temperature` (scikit-learn style).

    >>> import numpy as np
    >>> scaler = TemperatureScaler(search="grid").fit(np.array([[3.0, 0.0], [0.0, 1.0]]), [0, 1])
    >>> scaler.temperature_ > 0
    True
    """

    def __init__(
        self,
        search: str = "grid",
        objective: str | None = None,
        grid=DEFAULT_GRID,
        n_bins: int = DEFAULT_N_BINS,
        compat: str | None = None,
    ):
        self.search = search
        self.objective = objective
        self.grid = grid
        self.n_bins = n_bins
        self.compat = compat

    def fit(self, logits, labels, progress: Progress | None = None) -> "TemperatureScaler":
        """Fit on validation ``logits``/``labels``; sets ``fit_`` and ``temperature_``; returns self."""
        self.fit_ = fit_temperature(
            logits, labels, search=self.search, objective=self.objective, grid=self.grid,
            n_bins=self.n_bins, compat=self.compat, progress=progress,
        )
        self.temperature_ = self.fit_.temperature
        return self

    def transform(self, logits) -> np.ndarray:
        """Calibrated logits (see :meth:`TemperatureFit.transform`)."""
        if not hasattr(self, "fit_"):
            raise InputError("this TemperatureScaler is not fitted yet; call fit(logits, labels) first")
        return self.fit_.transform(logits)

    def fit_transform(self, logits, labels) -> np.ndarray:
        return self.fit(logits, labels).transform(logits)
