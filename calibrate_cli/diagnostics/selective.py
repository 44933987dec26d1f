"""Selective prediction: accept the confident predictions, abstain on the rest (docs/selective.md).

Rank the N samples by a confidence c_i (the top-label probability max_k p_ik by default) and accept
those with c_i ≥ τ. Samples with equal confidence are accepted together, so the risk–coverage curve
has one operating point per distinct confidence value τ_1 > τ_2 > … > τ_G; at τ_j

    coverage_j          = #{c_i ≥ τ_j} / N
    selective risk_j    = #{c_i ≥ τ_j, wrong} / #{c_i ≥ τ_j}          (Geifman & El-Yaniv 2017)
    generalized risk_j  = #{c_i ≥ τ_j, wrong} / N                      (Traub et al. 2024)

Areas follow the reference code of Traub et al. 2024 (fd-shifts ``RiskCoverageStats``): trapezoids
between the operating points, and from coverage 0 to the first point the selective risk is held
flat while the generalized risk starts at 0 (accepting nothing makes no error).

- ``aurc``: area under (coverage, selective risk) (Geifman et al. 2019);
- ``e_aurc``: AURC minus the AURC, by the same estimator, of a perfect ranking of the same
  predictions (every correct one above every wrong one, all confidences distinct). Exact at finite N,
  so a perfect ranking without ties scores 0; fd-shifts uses the large-N limit r + (1 − r) ln(1 − r)
  instead, which differs by O(1/N). Ties may make it slightly negative (interpolating across a
  plateau lies below the optimal curve): never clipped;
- ``augrc``: area under (coverage, generalized risk): the mean, over random tie orders, of the
  share of samples that are accepted and wrong, averaged over coverages (Traub et al. 2024).

The areas are sums of float64 terms; the counts are exact integers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.sorting import tie_tolerant
from ..errors import InputError

__all__ = [
    "DEFAULT_COVERAGES",
    "DEFAULT_RISKS",
    "RiskCoverageCurve",
    "SelectiveReport",
    "WorkingPoint",
    "aurc",
    "augrc",
    "confidence_and_correct",
    "coverage_at_risk",
    "e_aurc",
    "risk_at_coverage",
    "risk_coverage",
    "selective_report",
]

#: the coverages and target risks ``selective_report`` (and `calib eval --selective`) reports by default
DEFAULT_COVERAGES = (0.5, 0.8, 0.9, 0.95)
DEFAULT_RISKS = (0.01, 0.02, 0.05)


@dataclass(frozen=True)
class RiskCoverageCurve:
    """The operating points, one per distinct confidence, by increasing coverage (decreasing threshold).

    threshold         τ_j: accept the samples with confidence ≥ τ_j
    coverage          share of the N samples accepted
    risk              selective risk: share of the accepted samples that are wrong
    generalized_risk  share of all N samples that are accepted and wrong
    accepted, errors  the counts behind them (int64)
    """

    threshold: np.ndarray
    coverage: np.ndarray
    risk: np.ndarray
    generalized_risk: np.ndarray
    accepted: np.ndarray
    errors: np.ndarray

    @property
    def n(self) -> int:
        return int(self.accepted[-1])

    def to_dict(self) -> dict:
        return {name: getattr(self, name).tolist() for name in
                ("threshold", "coverage", "risk", "generalized_risk", "accepted", "errors")}


@dataclass(frozen=True)
class WorkingPoint:
    """One operating point: accept confidence ≥ ``threshold`` (None: accept nothing)."""

    threshold: float | None
    coverage: float
    risk: float | None
    accepted: int

    def to_dict(self) -> dict:
        return {"threshold": self.threshold, "coverage": self.coverage, "risk": self.risk, "accepted": self.accepted}


def _checked(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(confidence)
    ok = np.asarray(correct)
    if c.ndim != 1 or ok.ndim != 1:
        raise InputError(f"Expected 1-D `confidence` and `correct`, but got shapes {c.shape} and {ok.shape}")
    if c.size == 0:
        raise InputError("Expected at least one sample, but got N = 0")
    if c.size != ok.size:
        raise InputError(f"Expected `correct` of length {c.size} (as `confidence`), but got {ok.size}")
    if c.dtype.kind not in "iufb" or not np.isfinite(c).all():
        raise InputError("Expected finite numeric `confidence`, but it holds NaN, Inf or non-numbers")
    if ok.dtype.kind == "b":
        ok_bool = ok
    else:
        if ok.dtype.kind not in "iuf" or not np.isin(ok, (0, 1)).all():
            raise InputError("Expected `correct` to hold booleans or 0/1, but got other values")
        ok_bool = ok.astype(bool)
    return c.astype(np.float64, copy=False), ok_bool


def risk_coverage(confidence, correct) -> RiskCoverageCurve:
    """The risk–coverage curve of ``confidence`` (N,) and ``correct`` (N,) booleans (see the module).

    >>> c = risk_coverage([0.9, 0.8, 0.8, 0.6], [True, True, False, False])
    >>> c.coverage.tolist(), c.risk.tolist(), c.generalized_risk.tolist()
    ([0.25, 0.75, 1.0], [0.0, 0.3333333333333333, 0.5], [0.0, 0.25, 0.5])
    """
    c, ok = _checked(confidence, correct)
    n = c.size
    order = np.argsort(-c, kind="stable")
    c_sorted = c[order]
    wrong = (~ok[order]).astype(np.int64)
    # the last sample of each tie group (a tie split by rounding is one group: engine.sorting.tie_tolerant)
    last = np.flatnonzero(np.r_[c_sorted[:-1] > tie_tolerant(c_sorted[1:]), True])
    accepted = last + 1
    errors = np.cumsum(wrong)[last]
    return RiskCoverageCurve(
        threshold=c_sorted[last],
        coverage=accepted / n,
        risk=errors / accepted,
        generalized_risk=errors / n,
        accepted=accepted.astype(np.int64),
        errors=errors.astype(np.int64),
    )


def _curve(confidence, correct) -> RiskCoverageCurve:
    return confidence if isinstance(confidence, RiskCoverageCurve) and correct is None else \
        risk_coverage(confidence, correct)


def _area(coverage: np.ndarray, values: np.ndarray, start: float) -> float:
    """Trapezoids through (0, start), (coverage_j, values_j)."""
    x = np.r_[0.0, coverage]
    y = np.r_[start, values]
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1])) / 2.0)


def aurc(confidence, correct=None) -> float:
    """Area under the risk–coverage curve: ∫ selective risk d coverage, trapezoids between the
    operating points, the first point's risk held down to coverage 0 (Geifman et al. 2019; the
    estimator of Traub et al. 2024's fd-shifts). Takes (confidence, correct) or a :class:`RiskCoverageCurve`.

    >>> aurc([0.9, 0.8, 0.8, 0.6], [True, True, False, False])  # 0 + (0 + 1/3)/4 + (1/3 + 1/2)/8
    0.1875
    """
    curve = _curve(confidence, correct)
    return _area(curve.coverage, curve.risk, float(curve.risk[0]))


def _optimal_aurc(n: int, n_errors: int) -> float:
    """AURC of N predictions with ``n_errors`` wrong ones, every correct one ranked above every wrong
    one, all confidences distinct: the points (i/N, max(0, i − (N − e)) / i)."""
    i = np.arange(1, n + 1, dtype=np.float64)
    risk = np.maximum(0.0, i - (n - n_errors)) / i
    return _area(i / n, risk, float(risk[0]))


def e_aurc(confidence, correct=None) -> float:
    """Excess AURC: :func:`aurc` minus the AURC of a perfect ranking of the same predictions
    (Geifman et al. 2019), by the same estimator, so a perfect ranking without ties gives 0.

    >>> e_aurc([0.9, 0.8, 0.7], [True, True, False])   # already perfectly ranked
    0.0
    """
    curve = _curve(confidence, correct)
    return aurc(curve) - _optimal_aurc(curve.n, int(curve.errors[-1]))


def augrc(confidence, correct=None) -> float:
    """Area under the generalized risk–coverage curve (Traub et al. 2024): ∫ P(accepted and wrong)
    d coverage, trapezoids from (0, 0) through the operating points. Within a tie group the straight
    line is the mean over random orders of its samples.

    >>> augrc([0.9, 0.8, 0.8, 0.6], [True, True, False, False])  # (0 + 1/4)/4 + (1/4 + 1/2)/8
    0.15625
    """
    curve = _curve(confidence, correct)
    return _area(curve.coverage, curve.generalized_risk, 0.0)


def _check_level(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not 0.0 <= float(value) <= 1.0:
        raise InputError(f"Expected `{name}` to be a number in [0, 1], but got {value!r}")
    return float(value)


def risk_at_coverage(confidence, correct=None, coverage: float = 0.9) -> WorkingPoint:
    """The operating point with the smallest coverage ≥ ``coverage`` (ties are accepted together, so
    the exact coverage may not be reachable: the point says which was), and its selective risk."""
    curve = _curve(confidence, correct)
    target = _check_level(coverage, "coverage")
    # on the rounded ratios: rounding is monotone and accepted/N lies far more than an ulp from any
    # other decimal a user gives unless equal to it, so 0.9 of N = 10 is 9 samples, not 10
    j = min(int(np.searchsorted(curve.coverage, target, side="left")), curve.coverage.size - 1)
    return _point(curve, j)


def coverage_at_risk(confidence, correct=None, risk: float = 0.05) -> WorkingPoint:
    """The operating point with the largest coverage whose selective risk is ≤ ``risk``; none such:
    coverage 0 (accept nothing), threshold and risk None."""
    curve = _curve(confidence, correct)
    target = _check_level(risk, "risk")
    ok = np.flatnonzero(curve.risk <= target)  # rounded ratios, as in risk_at_coverage: 1/20 ≤ 0.05
    if ok.size == 0:
        return WorkingPoint(threshold=None, coverage=0.0, risk=None, accepted=0)
    return _point(curve, int(ok[-1]))


def _point(curve: RiskCoverageCurve, j: int) -> WorkingPoint:
    return WorkingPoint(
        threshold=float(curve.threshold[j]),
        coverage=float(curve.coverage[j]),
        risk=float(curve.risk[j]),
        accepted=int(curve.accepted[j]),
    )


def confidence_and_correct(scores, labels, input_kind=None, *, scores_name: str = "scores",
              labels_name: str = "labels") -> tuple[np.ndarray, np.ndarray]:
    """(confidence, correct) of (N, K) logits or probabilities (or 1-D binary scores) and labels:
    max_k p_ik and [argmax_k p_ik = y_i] (lowest index on ties), validated as every command does."""
    from ..data.predictions import as_predictions
    from ..data.probabilities import to_probabilities

    predictions = as_predictions(scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name)
    p = to_probabilities(predictions.scores, predictions.input_kind)
    return p.max(axis=1), p.argmax(axis=1) == predictions.labels


@dataclass(frozen=True)
class SelectiveReport:
    """AURC, E-AURC, AUGRC, the risk at each of ``coverages`` and the coverage at each of ``risks``,
    with the curve (what `calib eval --selective` reports)."""

    n: int
    error: float
    aurc: float
    e_aurc: float
    augrc: float
    at_coverage: dict
    at_risk: dict
    curve: RiskCoverageCurve

    def to_dict(self, *, curve: bool = False) -> dict:
        out = {
            "n": self.n,
            "confidence": "max_k p_k",
            "error": self.error,
            "aurc": self.aurc,
            "e_aurc": self.e_aurc,
            "augrc": self.augrc,
            "risk_at_coverage": {f"{c:g}": p.to_dict() for c, p in self.at_coverage.items()},
            "coverage_at_risk": {f"{r:g}": p.to_dict() for r, p in self.at_risk.items()},
        }
        if curve:
            out["curve"] = self.curve.to_dict()
        return out


def selective_report(confidence, correct, *, coverages=DEFAULT_COVERAGES, risks=DEFAULT_RISKS) -> SelectiveReport:
    """Every quantity of this module for one model (see :class:`SelectiveReport`)."""
    curve = risk_coverage(confidence, correct)
    return SelectiveReport(
        n=curve.n,
        error=float(curve.risk[-1]),
        aurc=aurc(curve),
        e_aurc=e_aurc(curve),
        augrc=augrc(curve),
        at_coverage={float(c): risk_at_coverage(curve, coverage=c) for c in coverages},
        at_risk={float(r): coverage_at_risk(curve, risk=r) for r in risks},
        curve=curve,
    )
