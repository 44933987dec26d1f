"""Bayesian binning into quantiles, BBQ (Naeini, Cooper & Hauskrecht 2015, AAAI), one-vs-rest.

For a binary score s (here p_ik = softmax(z_i)_k against [y_i = k], for each class k), BBQ averages
equal-frequency histogram binnings with B = B_min … B_max bins, B_min = max(1, ⌊N^{1/3}/C⌋),
B_max = min(N, ⌈C·N^{1/3}⌉), C = 10 (the paper's range), each weighted by its Bayesian score:

- binning M_B: interior edges e_1 … e_{B−1} at the quantiles of the fitting scores,
  ``np.interp(j·N/B, arange(N), sort(s))`` (as calib's equal-mass bins), outer edges e_0 = 0, e_B = 1;
  a score falls in bin b when e_{b−1} ≤ s < e_b (``searchsorted(…, side="right")``);
- bin b has prior mean p_b = (e_{b−1} + e_b)/2 and a Beta(α_b, β_b) prior on its positive rate,
  α_b = N'/B · p_b, β_b = N'/B · (1 − p_b), with the equivalent sample size N' = 2;
- score: log P(D | M_B) = Σ_b [ln Γ(N'/B) − ln Γ(n_b + N'/B) + ln Γ(m_b + α_b) − ln Γ(α_b)
  + ln Γ(n_b − m_b + β_b) − ln Γ(β_b)] (n_b scores in the bin, m_b of them positives), the models
  equally likely a priori; weights w_B = P(D | M_B) / Σ_B' P(D | M_B');
- prediction: q(s) = Σ_B w_B (m_b + α_b)/(n_b + α_b + β_b), b the bin of s in M_B.

The average of piecewise-constant maps is piecewise constant: per class calib keeps the union of the
models' interior edges t (strictly increasing) and the value on each piece (``len(t) + 1`` values:
below t_1, between t_1 and t_2, …); q(s) = values[searchsorted(t, s, side="right")], then the K values
of a row are renormalised (a row of zeros becomes uniform). The fit sorts each class's N scores, so it
holds the (N, K) float64 probabilities (made by row chunks; refused beyond N·K =
:data:`~.base.CLASS_COLUMNS_MAX_VALUES`); the map is applied a row chunk at a time. Saved as ``{"method": "bbq", "k": K,
"bbq": {"edges": [[…] × K], "values": [[…] × K]}}``.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import FitError, InputError
from .base import (FitData, FitInfo, ProbabilityCalibrator, class_probabilities, json_numbers, nll_by_rows,
                   probabilities_of, renormalise)

__all__ = ["BBQCalibration", "bbq_fit", "BBQ_C", "BBQ_PRIOR_SIZE"]

BBQ_C = 10  # the range of the number of bins: N^{1/3}/C … C·N^{1/3}
BBQ_PRIOR_SIZE = 2.0  # N', the equivalent sample size of the Beta priors


def bbq_bin_counts(n: int) -> range:
    """The numbers of bins B that BBQ averages over for N fitting scores."""
    root = n ** (1.0 / 3.0)
    low = max(1, math.floor(root / BBQ_C))
    high = max(low, min(n, math.ceil(BBQ_C * root)))
    return range(low, high + 1)


def _log_rising(count: np.ndarray, a: np.ndarray) -> np.ndarray:
    """ln Γ(c + a) − ln Γ(a) = ln of a·(a + 1)···(a + c − 1), for counts c ≥ 0 and prior parameters
    a ≥ 0, with its limits at a = 0 taken exactly: 0 when c = 0 (nothing observed: an empty bin, or
    no negatives in it), −∞ when c > 0 and a = 0 (a prior mean of exactly 0 or 1 rules the outcome
    out). ``gammaln(c + a) − gammaln(a)`` alone gives ∞ − ∞ = NaN there."""
    from scipy.special import gammaln

    out = np.zeros(a.shape[0])
    seen = count > 0
    possible = seen & (a > 0)
    out[possible] = gammaln(count[possible] + a[possible]) - gammaln(a[possible])
    out[seen & ~possible] = -np.inf
    return out


def bbq_fit(scores: np.ndarray, positive: np.ndarray,
            weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """BBQ on binary scores in [0, 1] and 0/1 outcomes: (t, values, details) with the map
    q(s) = values[searchsorted(t, s, side="right")] (see the module docstring).

    Scores of exactly 0 or 1 (a random forest's, or softmax of logits beyond ±37) make bins of width
    0 at the ends, whose prior mean is exactly 0 or 1: their terms are taken at their limits
    (:func:`_log_rising`), so an empty bin counts for nothing and a bin of scores of exactly 1 with a
    negative outcome makes that binning impossible (weight 0). A :class:`~calibrate_cli.errors.FitError`
    when every binning is impossible. ``weights``: sample weights: counts n_b, m_b become Σw, the
    quantiles those of the repeated rows, N becomes Σw (rounded for the range of B)."""
    from scipy.special import gammaln

    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(positive, dtype=np.float64)
    n = s.shape[0]
    order = np.argsort(s, kind="stable")
    sorted_s = s[order]
    total = n if weights is None else float(np.sum(weights))
    models, logs = [], []
    b_counts = bbq_bin_counts(n if weights is None else max(1, round(total)))
    for b_count in b_counts:
        # j·N/B as j·N then one division: exactly the integer when it is one (j · (N/B) may miss it by
        # an ulp, and then put an edge just above a run of tied scores, e.g. a forest's 0.5, instead of on it)
        if weights is None:
            interior = np.interp(np.arange(1, b_count) * n / b_count, np.arange(n), sorted_s)
        else:
            from ..metrics.weighted import rank_interp

            interior = rank_interp(np.arange(1, b_count) * total / b_count, sorted_s, weights[order], total)
        edges = np.concatenate([[0.0], interior, [1.0]])
        bins = np.searchsorted(interior, s, side="right")
        if weights is None:
            counts = np.bincount(bins, minlength=b_count).astype(np.float64)
            positives = np.bincount(bins, weights=y, minlength=b_count)
        else:
            counts = np.bincount(bins, weights=weights, minlength=b_count)
            positives = np.bincount(bins, weights=weights * y, minlength=b_count)
        prior = (edges[:-1] + edges[1:]) / 2.0
        size = BBQ_PRIOR_SIZE / b_count
        alpha, beta = size * prior, size * (1.0 - prior)
        log_score = float(np.sum(
            gammaln(size) - gammaln(counts + size)
            + _log_rising(positives, alpha) + _log_rising(counts - positives, beta)
        ))
        models.append((interior, (positives + alpha) / (counts + alpha + beta)))
        logs.append(log_score)
    logs = np.asarray(logs)
    if (logs == -np.inf).all():
        raise FitError(
            "every binning gives the outcomes probability 0: a bin of scores of exactly 1 (or 0) holds "
            "a negative (or positive) outcome, which a prior mean of exactly 1 (or 0) rules out"
        )
    weights = np.exp(logs - logs.max())
    weights /= weights.sum()
    t = np.unique(np.concatenate([m[0] for m in models]))
    points = np.concatenate([[-np.inf], t])  # a point of each piece: its left end (pieces are [t_j, t_j+1))
    values = np.zeros(points.shape[0])
    for weight, (interior, theta) in zip(weights, models):
        if weight != 0:  # (a NaN weight is kept: it shows in the values, which the fit's check refuses)
            values += weight * theta[np.searchsorted(interior, points, side="right")]
    best = int(np.argmax(weights))
    return t, values, {"models": len(models), "most_likely_bins": int(b_counts[best]),
                       "weight_of_most_likely": float(weights[best])}


class BBQCalibration(ProbabilityCalibrator):
    """One-vs-rest Bayesian binning into quantiles (see the module docstring)."""

    name = "bbq"
    shift_invariant = True  # one-vs-rest on softmax(z): the same for logits and log-probabilities
    takes_weights = True  # weighted counts and quantiles (the Bayesian scores of the repeated rows)

    def __init__(self, edges=None, values=None):
        if (edges is None) != (values is None):
            raise InputError("BBQ needs both edges and values (or neither, to fit them)")
        self.edges_ = None if edges is None else [np.asarray(row, dtype=np.float64) for row in edges]
        self.values_ = None if values is None else [np.asarray(row, dtype=np.float64) for row in values]
        if self.edges_ is not None:
            self.k = len(self.edges_)

    def _fit(self, data: FitData, progress) -> FitInfo:
        p = class_probabilities(data, "BBQ")  # each class's N values, made by row chunks
        edges, values, details = [], [], []
        for k in range(data.k):
            try:
                t, v, d = bbq_fit(p[:, k], data.labels == k, data.weights)
            except FitError as exc:
                raise FitError(f"{data.scores_name}: BBQ cannot be fitted for class {k}: {exc}") from None
            edges.append(t)
            values.append(v)
            details.append(d)
            if progress is not None:
                progress(k + 1, data.k)
        self.edges_, self.values_, self.k = edges, values, data.k
        return FitInfo(self.objectives[0], nll_by_rows(data, self._proba), nll_by_rows(data), data.n, data.k,
                       {"models": details[0]["models"], "most_likely_bins": [d["most_likely_bins"] for d in details]})

    @property
    def label(self) -> str:
        return "BBQ"

    def _proba(self, z: np.ndarray) -> np.ndarray:
        p = probabilities_of(z)
        q = np.stack([self.values_[k][np.searchsorted(self.edges_[k], p[:, k], side="right")]
                      for k in range(p.shape[1])], axis=1)
        return renormalise(q)

    def get_params(self):
        if self.edges_ is None:
            return None
        return {"edges": [t.tolist() for t in self.edges_], "values": [v.tolist() for v in self.values_]}

    @classmethod
    def _from_params(cls, params, k):
        if not isinstance(params, dict) or not isinstance(params.get("edges"), list) or not isinstance(params.get("values"), list):
            raise InputError('"bbq" must be an object {"edges": [[…] × K], "values": [[…] × K]}')
        edges = [[] if row == [] else json_numbers(row, f"bbq edges[{i}]") for i, row in enumerate(params["edges"])]
        values = [json_numbers(row, f"bbq values[{i}]") for i, row in enumerate(params["values"])]
        if len(edges) != len(values) or len(edges) < 2 or any(len(v) != len(t) + 1 for t, v in zip(edges, values)):
            raise InputError("bbq: edges and values must be K ≥ 2 rows, each row of values one longer than its edges")
        if any(np.any(np.diff(t) <= 0) for t in edges):
            raise InputError("bbq: each row of edges must increase")
        if any(not 0 <= v <= 1 for row in values for v in row):
            raise InputError("bbq: values must be probabilities in [0, 1]")
        if k is not None and k != len(edges):
            raise InputError(f"bbq has {len(edges)} rows but \"k\" is {k}")
        return cls(edges, values)
