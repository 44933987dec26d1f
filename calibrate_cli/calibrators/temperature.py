"""Temperature scaling (Guo et al. 2017; docs/temperature.md): p(T) = softmax(logits / T).

T > 1 softens the probabilities, T < 1 sharpens them; T never changes the argmax, so never the
accuracy. Two ways to fit T on a validation set (``TemperatureScaling(search=...)``):

- ``search="grid"`` (Mukhoti et al. 2020): T ∈ {start, start + step, …, stop} (default
  {0.1, …, 10.0}, 100 values); the T minimising the objective (ECE by default, or NLL, AdaECE) on
  the fitting set wins, ties going to the smallest T. Vectorised over T: the rows are processed in
  chunks, each chunk against every T at once; the binned objectives reuse
  :func:`~calibrate_cli.metrics.functional.equal_width_bins` / :func:`~calibrate_cli.metrics.functional.equal_mass_bins`.
- ``search="nll"`` (Guo et al. 2017): the exact minimiser of the mean NLL over T > 0. With β = 1/T,
  NLL(β) = (1/N) Σ_i [log Σ_k exp(β z_ik) − β z_iy] is convex, with derivative
  NLL'(β) = (1/N) Σ_i [E_{p(β)}[z_i] − z_iy]; its root is found by Newton's method on log β,
  safeguarded by bisection, to |ΔT| < 1e-6 (in practice ~1e-12).

Probabilities are fitted through their logarithms: log p is a valid logit vector (softmax(log p) = p)
and a probability of exactly 0 becomes −inf, which stays 0 at every T (0^(1/T) = 0) — never clipped.

>>> import numpy as np
>>> TemperatureScaling(2.0).transform(np.array([[4.0, 0.0]]))
array([[2., 0.]])
>>> TemperatureScaling(2.0).to_dict()
{'method': 'temperature', 'k': None, 'temperature': 2.0}
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

import numpy as np

from ..engine.binning import BinStats, assign_bins, uniform_edges
from ..errors import Advice, InputError
from ..engine import kernels
from ..engine.kernels import default_engine  # numpy, or the C extension (the NLL pass, the grid's confidences)
from ..metrics.functional import DEFAULT_N_BINS, equal_mass_bins, equal_width_bins
from ..engine.devices import NumpyOps
from ..engine.parallel import map_chunks
from ..engine.rows import grid_rows, nll_newton_sums
from ..data.predictions import InputKind, Predictions, check_nll_range, check_scaled_range, row_chunks
from ..engine.summary import check_compat, device_ops, widened_rows
from ..data.number_text import is_plain_float
from .base import OBJECTIVES, Calibrator, FitData, FitInfo, Progress, Search, json_number

__all__ = [
    "DEFAULT_GRID",
    "NLL_TEMPERATURE_BOUNDS",
    "TemperatureScaling",
    "apply_temperature",
    "check_temperature",
    "parse_grid",
    "scale_scores",
    "temperature_grid",
]

DEFAULT_GRID = (0.1, 10.0, 0.1)
NLL_TEMPERATURE_BOUNDS = (1e-4, 1e4)
MAX_GRID_SIZE = 100_000
_GRID_CHUNK_ELEMENTS = 1 << 20  # rows × temperatures × K per chunk (8 MB of float64)
_ADAECE_GRID_VALUES = 1 << 25  # confidences an AdaECE grid keeps at once (T × N; 256 MB of float64)


def check_temperature(temperature: float) -> float:
    """Return ``temperature`` as a float, or raise InputError unless it is finite and > 0."""
    if isinstance(temperature, bool):
        raise InputError(f"temperature must be a number, got {temperature!r}")
    try:
        t = float(temperature)
    except (TypeError, ValueError):
        raise InputError(f"temperature must be a number, got {temperature!r}") from None
    if not math.isfinite(t) or t <= 0:
        raise InputError(f"temperature must be finite and > 0, got {temperature!r}")
    return t


def apply_temperature(logits: np.ndarray, temperature: float, *, scores_name: str = "logits") -> np.ndarray:
    """Scaled logits ``logits / T`` in float64 (softmax of them is p(T)); a T so small that they
    overflow is refused (:func:`~calibrate_cli.data.predictions.check_scaled_range`)."""
    t = check_temperature(temperature)
    check_scaled_range(logits, t, scores_name=scores_name)
    logits = np.asarray(logits)
    # one float64 array, written once (widening and dividing in one pass: no float64 copy divided again)
    return np.divide(logits, t, out=np.empty(logits.shape, dtype=np.float64), dtype=np.float64)


def scale_scores(
    scores: np.ndarray, temperature: float, input_kind: InputKind = "logits", *, scores_name: str = "scores"
) -> np.ndarray:
    """``scores`` at temperature T, of the same kind: logits / T, or probabilities p^(1/T) / Σ p^(1/T).

    Probabilities are scaled as softmax(log p / T) (a zero stays exactly 0). T = 1 returns the
    scores unchanged. The scores are checked first (the same errors as ``evaluate``).
    """
    return TemperatureScaling(temperature).apply(scores, input_kind, scores_name=scores_name)


# ---------------------------------------------------------------------------------------------
# The grid


def _decimal(value, what: str) -> Decimal:
    if isinstance(value, str) and not is_plain_float(value):  # Decimal("1_5") is 15
        raise InputError(f"grid {what} must be a number, got {value!r}")
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
    try:
        count = int((d_stop - d_start) // d_step) + 1
    except InvalidOperation:  # the quotient has more digits than decimal's precision: far too many
        raise InputError(f"grid {start}:{stop}:{step} has more than {MAX_GRID_SIZE} values (the most allowed)") from None
    if count > MAX_GRID_SIZE:
        raise InputError(f"grid {start}:{stop}:{step} has {count} values; at most {MAX_GRID_SIZE} are allowed")
    return np.array([float(d_start + i * d_step) for i in range(count)], dtype=np.float64)


def parse_grid(text: str) -> tuple[str, str, str]:
    """``"0.05:5:0.05"`` → ("0.05", "5", "0.05"), checked by :func:`temperature_grid`."""
    parts = str(text).split(":")
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise InputError(f"a temperature grid is START:STOP:STEP, got {text!r}", remedy="grid-format")
    start, stop, step = (p.strip() for p in parts)
    try:
        temperature_grid(start, stop, step)
    except InputError as exc:
        raise InputError(f"temperature grid {text}: {exc}", remedy="grid-format") from None
    return start, stop, step



# ---------------------------------------------------------------------------------------------
# Passes over the data


def _grid_chunk(z: np.ndarray, y: np.ndarray, temps: np.ndarray, objective: str, compat: str | None):
    """Every temperature on one chunk of rows: (confidences, correct) or per-sample NLL, each (rows, T),
    by the one definition of the grid pass (:func:`~calibrate_cli.engine.rows.grid_rows`); the
    confidences by the C extension's top-label pass on z / T where the fused engine runs. Where rows
    × T × K exceeds ``_GRID_CHUNK_ELEMENTS`` (a large K), the temperatures go in groups: each (row, T)
    is computed alone, so the values are the same and the temporaries stay within a chunk."""
    nll, work = objective == "nll", np.float32 if compat else np.float64
    if not nll and compat is None and default_engine() == "fused":  # the C top-label pass on z / T, T by T
        conf, correct = np.empty((z.shape[0], temps.shape[0])), np.empty((z.shape[0], temps.shape[0]), dtype=bool)
        z64, scaled = np.asarray(z, dtype=np.float64), np.empty(z.shape)
        column = np.empty(z.shape[0]), np.empty(z.shape[0], dtype=bool)
        for j, t in enumerate(temps):
            kernels.top_label_rows(np.divide(z64, t, out=scaled), y, is_logits=True, out=column)
            conf[:, j], correct[:, j] = column
        return conf, correct
    group = max(1, _GRID_CHUNK_ELEMENTS // max(1, z.shape[0] * z.shape[1]))
    if group >= temps.shape[0]:
        return grid_rows(NumpyOps(), z, y, temps, nll=nll, work_dtype=work)
    parts = [grid_rows(NumpyOps(), z, y, temps[a : a + group], nll=nll, work_dtype=work)
             for a in range(0, temps.shape[0], group)]
    if nll:
        return np.concatenate(parts, axis=1)
    return np.concatenate([p[0] for p in parts], axis=1), np.concatenate([p[1] for p in parts], axis=1)


def _grid_objectives(data, temps, objective, n_bins, compat, progress, ops=None) -> np.ndarray:
    """The objective at each temperature of ``temps`` on the fitting data.

    NLL: per-chunk sums; ECE: per-chunk equal-width statistics of every T at once (stacked
    :func:`~calibrate_cli.metrics.functional.equal_width_bins`), merged over chunks — memory bounded by a chunk.
    AdaECE needs every confidence at a T (its equal-mass edges come from their sorted order), so the
    temperatures go in groups of at most ``_ADAECE_GRID_VALUES // N``, one pass over the data each.
    """
    if data.weights is not None:
        return _weighted_grid(data, temps, objective, n_bins, progress)
    n_t = temps.shape[0]
    group = n_t if objective != "adaece" else max(1, min(n_t, _ADAECE_GRID_VALUES // data.n))
    starts = range(0, n_t, group)
    values = []
    for g, start in enumerate(starts):
        def report(done: int, g=g) -> None:
            if progress is not None:
                progress(g * data.n + done, len(starts) * data.n)

        values.append(_grid_pass(data, temps[start : start + group], objective, n_bins, compat, report, ops))
    return np.concatenate(values)


def _weighted_grid(data, temps, objective, n_bins, progress) -> np.ndarray:
    """:func:`_grid_objectives` with sample weights w (numpy, float64): at each T the weighted NLL
    (1/W) Σ w_i NLL_i, ECE (1/W) Σ_b |Σ_{B_b} w_i (correct_i − conf_i)|, or AdaECE over the equal-mass
    edges of the weighted samples (:func:`~calibrate_cli.metrics.weighted.weighted_ece`)."""
    from ..metrics.weighted import weighted_ece

    w, total, n_t, m = data.weights, data.total_weight, temps.shape[0], n_bins
    if objective == "adaece":
        values = np.empty(n_t)
        group = max(1, min(n_t, _ADAECE_GRID_VALUES // data.n))
        for start in range(0, n_t, group):
            part = temps[start : start + group]
            conf, correct = np.empty((part.shape[0], data.n)), np.empty((part.shape[0], data.n))
            for rows in row_chunks(data.n, part.shape[0] * data.k, _GRID_CHUNK_ELEMENTS):
                out = _grid_chunk(data.rows(rows), data.labels[rows], part, objective, None)
                conf[:, rows], correct[:, rows] = out[0].T, out[1].T
            values[start : start + part.shape[0]] = [weighted_ece(conf[j], correct[j], w, m, equal_mass=True)
                                                     for j in range(part.shape[0])]
            if progress is not None:
                progress(min(n_t, start + group) * data.n, n_t * data.n)
        return values
    sums = np.zeros(n_t if objective == "nll" else n_t * m)
    for rows in row_chunks(data.n, n_t * data.k, _GRID_CHUNK_ELEMENTS):
        out = _grid_chunk(data.rows(rows), data.labels[rows], temps, objective, None)
        wr = w[rows][:, None]
        if objective == "nll":
            sums += np.where(wr > 0, wr * out, 0.0).sum(axis=0)
        else:
            conf, correct = out
            keys = assign_bins(conf, uniform_edges(m)) + (np.arange(n_t) * m)[None, :]
            sums += np.bincount(keys.ravel(), weights=(wr * (correct - conf)).ravel(), minlength=n_t * m)
        if progress is not None:
            progress(rows.stop, data.n)
    if objective == "nll":
        return sums / total
    return np.abs(sums.reshape(n_t, m)).sum(axis=1) / total


def _weighted_nll_pass(data: FitData, beta: float) -> tuple[float, float, float]:
    """:func:`_nll_pass` with sample weights: (1/W) Σ_i w_i [log Σ_k e^{β d_ik} − β d_iy], and the
    same weighted means of E_p[d_i] − d_iy and Var_p[d_i] (numpy, float64, rows of weight 0 left out)."""
    w, total_w = data.weights, data.total_weight
    total = grad = var = 0.0
    for rows in row_chunks(data.n, data.k):
        z, wr = data.rows(rows), w[rows]
        r = np.arange(z.shape[0])
        d = z - z.max(axis=1, keepdims=True)
        d_y = d[r, data.labels[rows]]
        e = np.exp(d * beta)
        s = e.sum(axis=1)
        if data.has_zeros:
            d = np.where(np.isneginf(d), 0.0, d)
        ed = e * d
        m1 = ed.sum(axis=1) / s
        m2 = np.einsum("ij,ij->i", ed, d) / s
        keep = wr > 0
        total += float(np.sum(np.where(keep, wr * (np.log(s) - beta * d_y), 0.0)))
        grad += float(np.sum(np.where(keep, wr * (m1 - d_y), 0.0)))
        var += float(np.sum(np.where(keep, wr * (m2 - m1 * m1).clip(min=0.0), 0.0)))
    return total / total_w, grad / total_w, var / total_w


def _kernel_rows(logits, rows: slice) -> np.ndarray:
    """Rows ``rows`` of the logits as the compiled NLL pass takes them: C-contiguous float32 or float64.
    float16 and bfloat16 (a row reader) are widened exactly to float32 in this thread's reused buffer
    (:func:`~calibrate_cli.engine.summary.widened_rows`; the pass computes in float64 from either);
    other dtypes (integers) to float64, as the numpy path widens them."""
    if hasattr(logits, "read_into") or logits.dtype == np.float16:
        return widened_rows(logits, rows)
    chunk = logits[rows]
    if chunk.dtype in kernels.ROW_DTYPES:
        return np.ascontiguousarray(chunk)
    return np.ascontiguousarray(chunk, dtype=np.float64)


def _torch_grid_pass(data, temps, objective, n_bins, report, ops) -> np.ndarray:
    """The grid on a torch device (:func:`~calibrate_cli.engine.torch_pass.grid_sums`): row chunks of at most
    :data:`~calibrate_cli.engine.torch_pass.TORCH_CHUNK_ELEMENTS` rows × T × K values, one at a time."""
    from ..engine import torch_pass as torch_engine

    n_t = temps.shape[0]
    want_bins = objective == "ece"
    total = None  # (count, Σconf, Σcorrect) or Σ NLL, added in chunk order
    for rows in row_chunks(data.n, n_t * data.k, torch_engine.TORCH_CHUNK_ELEMENTS):
        part = torch_engine.grid_sums(ops, data.logits[rows], data.labels[rows], temps, want_bins, n_bins)
        if total is None:
            total = part
        else:
            total = tuple(a + b for a, b in zip(total, part)) if want_bins else total + part
        report(rows.stop)
    if not want_bins:
        return total / data.n
    stats = BinStats(edges=uniform_edges(n_bins), count=total[0], sum_conf=total[1], sum_correct=total[2], n=data.n)
    return np.asarray(stats.calibration_error(), dtype=np.float64)


def _grid_pass(data, temps, objective, n_bins, compat, report, ops=None) -> np.ndarray:
    """One pass over the data for the temperatures ``temps``; ``report(rows_done)`` after each chunk.
    ``ops``: a torch device's namespace (the ECE and NLL objectives in float64 run there)."""
    n_t = temps.shape[0]
    if ops is not None and not compat and objective != "adaece":
        return _torch_grid_pass(data, temps, objective, n_bins, report, ops)
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


def _nll_pass(data: FitData, beta: float, engine: str = "numpy") -> tuple[float, float, float]:
    """One pass at β = 1/T: the mean NLL of softmax(β z), its derivative in β and the mean variance.
    ``engine="fused"``: the same sums by the C extension (:func:`~calibrate_cli.engine.kernels.nll_sums`,
    within the contract of docs/conventions.md);
    a torch device's namespace (:func:`~calibrate_cli.engine.devices.array_ops`): by
    :func:`~calibrate_cli.engine.torch_pass.nll_sums` there.

    With d = z − max_k z (a row shift changes nothing), p = softmax(β d):
    NLL = (1/N) Σ_i [log Σ_k e^{β d_ik} − β d_iy],  NLL'(β) = (1/N) Σ_i (E_p[d_i] − d_iy),
    NLL''(β) = (1/N) Σ_i Var_p[d_i] ≥ 0 (so NLL is convex in β). With sample weights:
    :func:`_weighted_nll_pass`.
    """
    if data.weights is not None:
        return _weighted_nll_pass(data, beta)

    def one_chunk(rows: slice) -> tuple[float, float, float]:  # the one definition (engine/rows.py)
        return nll_newton_sums(NumpyOps(), data.rows(rows), data.labels[rows], beta, has_zeros=data.has_zeros)

    if not isinstance(engine, str):  # a torch device's namespace
        from ..engine.torch_pass import TORCH_CHUNK_ELEMENTS, nll_sums

        total = grad = var = 0.0
        for rows in row_chunks(data.n, data.k, TORCH_CHUNK_ELEMENTS):
            chunk_total, chunk_grad, chunk_var = nll_sums(engine, data.logits[rows], data.labels[rows], beta)
            total, grad, var = total + chunk_total, grad + chunk_grad, var + chunk_var
        return total / data.n, grad / data.n, var / data.n
    if engine == "fused":
        def one_chunk(rows: slice) -> tuple[float, float, float]:  # noqa: F811 - the compiled pass
            return kernels.nll_sums(_kernel_rows(data.logits, rows), data.labels[rows], beta)

    total = grad = var = 0.0
    for chunk_total, chunk_grad, chunk_var in map_chunks(one_chunk, row_chunks(data.n, data.k)):  # in chunk order
        total += chunk_total
        grad += chunk_grad
        var += chunk_var
    return total / data.n, grad / data.n, var / data.n


def fit_nll(data: FitData, progress, engine: str = "numpy") -> tuple[float, dict, list[str], float, float]:
    """Root of NLL'(β) in u = log β by Newton's method safeguarded by bisection (rtsafe).

    NLL' is increasing in u; every pass shrinks the bracket [lo, hi] that holds the root, a Newton
    step (dNLL'/du = β·NLL''(β)) that leaves the bracket is replaced by bisection, and the loop stops
    when the step is below 1e-12 in u (|ΔT| = T·|Δu|: far below 1e-6). Converges in ~5 passes; after
    20 passes the bounds are checked (separable data: the NLL falls all the way to T → 0).

    Returns (T, solver details, warnings, NLL at T, NLL at T = 1): both NLLs come from the Newton
    passes themselves (the first pass is at T = 1; the last within 1e-12 in log T of the result,
    where NLL' ≈ 0, so the NLL there equals the NLL at T to far below 1e-12), not from extra passes.
    ``engine``: "numpy" or "fused" (:func:`_nll_pass`).
    """
    data.require_finite_true_class("an NLL fit")
    t_min, t_max = NLL_TEMPERATURE_BOUNDS
    lo, hi = math.log(1.0 / t_max), math.log(1.0 / t_min)
    u = 0.0  # T = 1
    passes = 0
    converged = False
    while passes < 200:
        if passes == 20:  # slow progress: is the optimum beyond a bound (separable or chance-level data)?
            passes += 2
            if _nll_pass(data, math.exp(hi), engine)[1] <= 0:
                u = hi
                break
            if _nll_pass(data, math.exp(lo), engine)[1] >= 0:
                u = lo
                break
        beta = math.exp(u)
        nll, g, var = _nll_pass(data, beta, engine)
        if passes == 0:
            at_one = nll  # u = 0: T = 1
        last_u, last_nll = u, nll
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
    # the NLL at T: the last pass's when T moved by at most 1e-12 in log T since (NLL' ≈ 0 there), else a pass
    value = last_nll if abs(u - last_u) <= 1e-12 else _nll_pass(data, 1.0 / t, engine)[0]
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
    if t != 1.0 / math.exp(u):  # clamped to a bound
        value = _nll_pass(data, 1.0 / t, engine)[0]
    return t, {"passes": passes}, warnings, value, at_one




# ---------------------------------------------------------------------------------------------
# The calibrator


class TemperatureScaling(Calibrator):
    """p(T) = softmax(z / T): one temperature T > 0 for every class (Guo et al. 2017).

    ``TemperatureScaling(1.5)`` is a given T; ``TemperatureScaling(search="nll").fit(logits, labels)``
    fits one: ``search="grid"`` minimises ``objective`` ("ece" by default, "adaece" or "nll") over
    ``grid`` = (start, stop, step) with ``n_bins`` bins and ``compat`` exactly as ``evaluate``
    reports them (ties → smallest T); ``search="nll"`` is the exact NLL optimum (|ΔT| < 1e-6).
    Saved as ``{"method": "temperature", "k": K, "temperature": T}``.
    """

    name = "temperature"
    searches = {
        "grid": Search("the paper's grid of T", "temperature scaling (grid search)"),
        "nll": Search("the exact NLL-optimal T", "temperature scaling (NLL optimum)"),
    }
    objectives = OBJECTIVES  # the grid's; the exact search minimises the NLL only
    shift_invariant = True  # softmax((z + c) / T) = softmax(z / T)
    takes_weights = True  # weighted NLL / ECE / AdaECE (numpy, on the CPU, without the compat mode)

    def __init__(
        self,
        temperature: float | None = None,
        *,
        search: str = "grid",
        objective: str | None = None,
        grid=DEFAULT_GRID,
        n_bins: int = DEFAULT_N_BINS,
        compat: str | None = None,
        device: str | None = None,
    ):
        if search not in self.searches:
            raise InputError(f"Expected `search` to be one of {tuple(self.searches)}, but got {search!r}")
        self.search = search
        self.objective = self.check_objective(search, objective, OBJECTIVES if search == "grid" else ("nll",))
        self.compat = check_compat(compat)
        if search != "grid" and self.compat:
            raise InputError("a compat mode applies to the grid search's ECE objective only", remedy="no-compat")
        self.grid = grid
        self.n_bins = n_bins
        self._temps = temperature_grid(*grid) if search == "grid" else None
        self.temperature_ = None if temperature is None else check_temperature(temperature)
        self.device = device  # where the fit's passes run (None/"cpu": numpy or the compiled kernel)

    @classmethod
    def for_search(cls, search, *, objective=None, compat=None, grid=DEFAULT_GRID, n_bins=DEFAULT_N_BINS,
                   device=None, **_):
        return cls(search=search, objective=objective, grid=grid, n_bins=n_bins, compat=compat, device=device)

    # -- fitting --------------------------------------------------------------------------------------
    def _fit(self, data: FitData, progress: Progress | None) -> FitInfo:
        if data.weights is not None and self.compat:
            raise InputError("sample weights: the compat mode reproduces the reference code, which has no weights",
                             remedy="no-compat")
        if data.weights is not None and self.device not in (None, "cpu", "auto"):
            raise InputError(f"sample weights: the temperature fit runs with numpy on the CPU, not on {self.device}",
                             remedy="cpu-device")
        # logits so large that a temperature overflows the sums or the dtype: refused, not NaN objectives
        t_min = NLL_TEMPERATURE_BOUNDS[0] if self.search == "nll" else float(self._temps.min())
        scores = data.range_scores()  # log-probabilities computed by row chunks are not read whole
        if self.objective == "nll":
            check_nll_range(scores, t_min, scores_name=data.scores_name)
        if self.search == "grid":
            check_scaled_range(
                scores, t_min, scores_name=data.scores_name, dtype=np.float32 if self.compat else np.float64,
                why=f" (compat mode {self.compat} computes in float32)" if self.compat else "",
            )
        if self.search == "nll":
            ops = device_ops(self.device)
            engine = ops if ops is not None else default_engine(data.n * data.k * 8)
            t, solver, warnings, value, at_one = fit_nll(data, progress, engine)
            self.temperature_ = t
            return FitInfo("nll", value, at_one, data.n, data.k, solver, warnings=tuple(warnings))
        temps, objective = self._temps, self.objective
        if objective == "nll":
            data.require_finite_true_class("an NLL objective")
        values = _grid_objectives(data, temps, objective, self.n_bins, self.compat, progress, device_ops(self.device))
        best = int(np.argmin(values))  # first minimum: ties go to the smallest T
        t = float(temps[best])
        ones = np.flatnonzero(temps == 1.0)
        at_one = (
            float(values[ones[0]]) if ones.size
            else float(_grid_objectives(data, np.ones(1), objective, self.n_bins, self.compat, None)[0])
        )
        warnings = []
        if temps.shape[0] > 1 and best in (0, temps.shape[0] - 1):
            side = "lower" if best == 0 else "upper"
            warnings.append(Advice(
                f"the best T = {t:g} is on the grid's {side} boundary ({temps[0]:g}..{temps[-1]:g}); "
                "the optimum may lie outside it",
                "widen-grid",
            ))
        self.temperature_ = t
        return FitInfo(
            objective,
            float(values[best]),
            at_one,
            data.n,
            data.k,
            {},
            grid=tuple(float(_decimal(g, "value")) for g in self.grid),
            curve=tuple((float(t), float(v)) for t, v in zip(temps, values)),
            warnings=tuple(warnings),
        )

    # -- applying -------------------------------------------------------------------------------------
    @property
    def temperature(self) -> float | None:
        return self.temperature_

    @property
    def is_identity(self) -> bool:
        return self.temperature_ == 1.0

    @property
    def label(self) -> str:
        return f"T = {self.temperature_:.6g}"

    def _transform(self, z: np.ndarray) -> np.ndarray:
        return apply_temperature(z, self.temperature_)

    def _transform_logits(self, z, scores_name: str) -> np.ndarray:
        """``z / T`` (float64); a T at which they overflow is refused, naming ``scores_name``."""
        # float32 logits are widened and divided in one pass (apply_temperature), not copied first
        logits = self._checked(z, scores_name, widen=False)
        return apply_temperature(logits, self.temperature_, scores_name=scores_name)

    def check_fitted_map(self, data: FitData) -> None:
        """Nothing to check beyond a finite T > 0 (:meth:`check_fit`): z / T keeps the order of every
        row, so it can neither collapse nor make a NaN of finite logits."""

    def apply_as_read(self, predictions: Predictions, *, scores_name: str = "scores") -> Predictions | None:
        """Logits / T divided as each chunk is read (:meth:`Predictions.divided
        <calibrate_cli.data.predictions.Predictions.divided>`: the same float64 division per value as
        :func:`apply_temperature`), after the same overflow check; None for probabilities or another K
        than the fitted one (:meth:`apply` then converts, or says what is wrong)."""
        if predictions.input_kind != "logits" or not self.is_fitted or self.k not in (None, predictions.k):
            return None
        check_scaled_range(predictions.scores, self.temperature_, scores_name=scores_name)
        return predictions.divided(self.temperature_)

    # -- saving ---------------------------------------------------------------------------------------
    def get_params(self) -> float | None:
        return self.temperature_

    @classmethod
    def _from_params(cls, params, k):
        out = cls(json_number(params, "temperature", positive=True))
        out.k = k
        return out

    @classmethod
    def identity(cls, k=None) -> "TemperatureScaling":
        out = cls(1.0)
        out.k = k
        return out
