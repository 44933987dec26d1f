"""Score decompositions: how much of the Brier or log score is miscalibration, and how much is skill.

CORP (Dimitriadis, Gneiting & Jordan 2021, PNAS 118(8) e2016191118). For binary forecasts x_i ∈ [0, 1]
of outcomes y_i ∈ {0, 1} and a proper score S, let x̂ be the PAV (isotonic) recalibration of x —
identical forecasts pooled first, so they get one recalibrated value — and r = ȳ the climatology:

    S̄ = mean S(x_i, y_i)      MCB = S̄ − mean S(x̂_i, y_i)      DSC = mean S(r, y_i) − mean S(x̂_i, y_i)
    UNC = mean S(r, y_i)       S̄ = MCB − DSC + UNC  (an identity: exact up to float rounding)

MCB ≥ 0 and DSC ≥ 0 (PAV is optimal for every proper score). Brier: S(x, y) = (x − y)²; log score:
S(x, y) = −y log x − (1 − y) log(1 − x) with 0·log 0 = 0 (a PAV value of 0 or 1 costs nothing; a
forecast of 0 or 1 that misses makes S̄ and MCB infinite: reported as ``inf`` with a
:class:`~calibrate_cli.errors.CalibWarning`).

Top-label: x = conf_i = max_k p_ik, y = correct_i (docs/metrics.md). Per class (one-vs-rest): x = p_ik,
y = [y_i = k]; the mean over the K classes is reported too (K × the classwise Brier mean is the
multiclass Brier score).

Murphy (1973), with the two within-bin terms of Stephenson, Coelho & Jolliffe (2008) that make it
exact on calib's equal-width bins B_b = (b/M, (b+1)/M] (f̄_b, ō_b the bin means, ō the overall mean):

    BS = REL − RES + UNC + WBV − WBC
    REL = Σ_b n_b/N (f̄_b − ō_b)²          RES = Σ_b n_b/N (ō_b − ō)²         UNC = ō (1 − ō)
    WBV = (1/N) Σ_b Σ_{i∈B_b} (f_i − f̄_b)²   WBC = (2/N) Σ_b Σ_{i∈B_b} (f_i − f̄_b)(o_i − ō_b)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import CalibWarning, InputError

__all__ = [
    "SCORES",
    "ScoreDecomposition",
    "ClasswiseDecomposition",
    "MurphyDecomposition",
    "Decompositions",
    "check_binary",
    "pav_recalibrate",
    "corp_decomposition",
    "classwise_corp_decomposition",
    "murphy_decomposition",
    "top_label",
    "decompose",
]

SCORES = ("brier", "log")


def _json_float(x: float) -> float | str:
    """A float for JSON (``inf`` as the string "inf", as calib writes an infinite NLL's warning)."""
    return x if math.isfinite(x) else ("inf" if x > 0 else ("-inf" if x < 0 else "nan"))


@dataclass(frozen=True)
class ScoreDecomposition:
    """CORP decomposition of a mean score: ``score = miscalibration − discrimination + uncertainty``.

    score            S̄, the mean score of the forecasts
    miscalibration   MCB = S̄ − S̄ of the PAV-recalibrated forecasts (≥ 0)
    discrimination   DSC = S̄ of the climatology ȳ − S̄ of the recalibrated forecasts (≥ 0)
    uncertainty      UNC = S̄ of the climatology ȳ
    """

    score_name: str
    score: float
    miscalibration: float
    discrimination: float
    uncertainty: float
    n: int

    def to_dict(self) -> dict:
        return {
            "score_name": self.score_name,
            "score": self.score,
            "miscalibration": self.miscalibration,
            "discrimination": self.discrimination,
            "uncertainty": self.uncertainty,
            "n": self.n,
        }


@dataclass(frozen=True)
class ClasswiseDecomposition:
    """One-vs-rest CORP decompositions of each class (``per_class[k]``) and their mean over the K classes."""

    score_name: str
    per_class: tuple[ScoreDecomposition, ...]
    mean: ScoreDecomposition

    def to_dict(self) -> dict:
        return {"score_name": self.score_name, "mean": self.mean.to_dict(),
                "per_class": [d.to_dict() for d in self.per_class]}


@dataclass(frozen=True)
class MurphyDecomposition:
    """Murphy's binned Brier decomposition with the within-bin terms (Stephenson et al. 2008):
    ``brier = reliability − resolution + uncertainty + within_bin_variance − within_bin_covariance``."""

    brier: float
    reliability: float
    resolution: float
    uncertainty: float
    within_bin_variance: float
    within_bin_covariance: float
    n_bins: int
    n: int

    def to_dict(self) -> dict:
        return {
            "brier": self.brier,
            "reliability": self.reliability,
            "resolution": self.resolution,
            "uncertainty": self.uncertainty,
            "within_bin_variance": self.within_bin_variance,
            "within_bin_covariance": self.within_bin_covariance,
            "n_bins": self.n_bins,
            "n": self.n,
        }


def check_binary(forecasts, outcomes, forecasts_name: str = "confidences",
                 outcomes_name: str = "correct") -> tuple[np.ndarray, np.ndarray]:
    """float64 copies of 1-D ``forecasts`` in [0, 1] and 0/1 ``outcomes`` (booleans or numbers) of the
    same length N ≥ 1; anything else is an :class:`~calibrate_cli.errors.InputError` naming the input."""
    x = np.asarray(forecasts)
    y = np.asarray(outcomes)
    if x.ndim != 1 or y.ndim != 1:
        raise InputError(f"{forecasts_name} and {outcomes_name} must be 1-D, got shapes {x.shape} and {y.shape}")
    if x.shape[0] != y.shape[0]:
        raise InputError(f"{outcomes_name}: {y.shape[0]} values but {forecasts_name} has {x.shape[0]}")
    if x.shape[0] == 0:
        raise InputError(f"{forecasts_name}: no samples (N = 0)")
    if x.dtype.kind not in "iufb" or y.dtype.kind not in "iufb":
        raise InputError(f"{forecasts_name} and {outcomes_name} must be numbers")
    x = x.astype(np.float64)
    y = y.astype(np.float64)
    if not np.isfinite(x).all() or x.min() < 0.0 or x.max() > 1.0:
        raise InputError(f"{forecasts_name}: expected probabilities in [0, 1]")
    if not np.isin(y, (0.0, 1.0)).all():
        raise InputError(f"{outcomes_name}: expected outcomes 0 or 1 (booleans)")
    return x, y


def pav_recalibrate(forecasts, outcomes) -> np.ndarray:
    """PAV recalibration x̂ of binary ``forecasts`` (float64, one value per sample): the non-decreasing
    least-squares fit of ``outcomes`` on ``forecasts``, identical forecasts pooled first (one value each),
    as CORP (Dimitriadis et al. 2021). Uses calib's isotonic fit
    (:func:`~calibrate_cli.calibrators.isotonic.isotonic_fit`, ``scipy.optimize.isotonic_regression``)."""
    x, y = check_binary(forecasts, outcomes, "forecasts", "outcomes")
    return _recalibrated(x, y)


def _scores(x: np.ndarray, y: np.ndarray, score: str) -> np.ndarray:
    """Per-sample S(x, y): Brier (x − y)², or the log score with 0·log 0 = 0 (scipy.special.xlogy)."""
    if score == "brier":
        return (x - y) ** 2
    from scipy.special import xlogy

    with np.errstate(divide="ignore"):
        return -(xlogy(y, x) + xlogy(1.0 - y, 1.0 - x))


def _check_score(score: str) -> str:
    if score not in SCORES:
        raise InputError(f"Expected `score` to be one of {SCORES}, but got {score!r}")
    return score


def _recalibrated(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from ..calibrators.isotonic import isotonic_fit

    xs, ys = isotonic_fit(x, y)
    # np.interp between the two ends of a constant piece returns that constant exactly
    return np.interp(x, xs, ys) if xs.shape[0] > 1 else np.full_like(x, ys[0])


def _corp(x: np.ndarray, y: np.ndarray, scores=SCORES) -> dict[str, ScoreDecomposition]:
    """CORP decompositions of ``x`` (forecasts) and ``y`` (0/1), one per score of ``scores`` (one PAV fit)."""
    recal = _recalibrated(x, y)
    climate = np.full_like(x, np.mean(y, dtype=np.float64))
    out = {}
    for score in scores:
        s_x = float(np.mean(_scores(x, y, score)))
        s_c = float(np.mean(_scores(recal, y, score)))
        s_r = float(np.mean(_scores(climate, y, score)))
        out[score] = ScoreDecomposition(score, s_x, s_x - s_c, s_r - s_c, s_r, int(x.shape[0]))
    return out


def _warn_infinite(d: ScoreDecomposition, what: str) -> None:
    if not math.isfinite(d.score):
        warnings.warn(CalibWarning(
            f"{what}: a forecast of exactly 0 or 1 misses, so the mean log score and its miscalibration "
            "are infinite (never clipped)"), stacklevel=3)


def corp_decomposition(confidences, correct, score: str = "brier") -> ScoreDecomposition:
    """CORP decomposition (Dimitriadis, Gneiting & Jordan 2021) of the mean Brier or log score of binary
    forecasts ``confidences`` (in [0, 1]) of outcomes ``correct`` (0/1):
    S̄ = MCB − DSC + UNC, with MCB and DSC from the PAV recalibration (ties pooled).

    >>> d = corp_decomposition([0.9, 0.8, 0.8, 0.6], [1, 1, 0, 1])
    >>> round(d.score, 4), round(d.miscalibration, 4), round(d.discrimination, 4), round(d.uncertainty, 4)
    (0.2125, 0.0458, 0.0208, 0.1875)
    """
    score = _check_score(score)
    x, y = check_binary(confidences, correct)
    d = _corp(x, y, (score,))[score]
    _warn_infinite(d, "top-label log score")
    return d


def top_label(scores, labels, *, input_kind=None, scores_name: str = "scores",
              labels_name: str = "labels") -> tuple[np.ndarray, np.ndarray]:
    """(conf_i, correct_i) of ``scores`` (logits or probabilities, (N, K) or 1-D binary) and ``labels``,
    validated and computed as calib does everywhere (:func:`~calibrate_cli.engine.summary.summarize`).
    ``scores`` may be validated :class:`~calibrate_cli.data.predictions.Predictions` (``labels`` None)."""
    from ..data.predictions import as_predictions
    from ..engine.summary import SummaryRequest, summarize

    predictions = as_predictions(scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name)
    # the top label's columns alone (the samples' sums: no NLL, Brier, top-5 or classwise work)
    summary = summarize(predictions, request=SummaryRequest(sums=frozenset({"samples"})), scores_name=scores_name)
    return (np.asarray(summary.confidences, dtype=np.float64),
            np.asarray(summary.correct, dtype=bool))


def _probabilities(scores, labels, input_kind, scores_name, labels_name):
    from ..data.predictions import as_predictions
    from ..data.probabilities import to_probabilities

    predictions = as_predictions(scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name)
    probs = to_probabilities(np.asarray(predictions.scores), predictions.input_kind)
    # probabilities given may exceed 1 by the row-sum tolerance: the decomposition needs [0, 1]
    return np.clip(probs, 0.0, 1.0), predictions.labels


def classwise_corp_decomposition(scores, labels, *, input_kind=None, score: str = "brier",
                                 scores_name: str = "scores", labels_name: str = "labels") -> ClasswiseDecomposition:
    """One-vs-rest CORP decompositions: for each class k, forecasts p_ik of the outcomes [y_i = k]
    (p the softmax of logits, or the given probabilities; 1-D binary scores are two classes), and
    the mean of each term over the K classes (the identity holds for the means too)."""
    score = _check_score(score)
    probs, y = _probabilities(scores, labels, input_kind, scores_name, labels_name)
    d = _classwise(probs, y, (score,))[score]
    _warn_infinite(d.mean, f"{scores_name}: classwise log score")
    return d


def _classwise(probs: np.ndarray, y: np.ndarray, scores=SCORES) -> dict[str, ClasswiseDecomposition]:
    fits = [_corp(probs[:, k], (y == k).astype(np.float64), scores) for k in range(probs.shape[1])]
    out = {}
    for score in scores:
        per_class = tuple(f[score] for f in fits)
        k = len(per_class)
        mean = ScoreDecomposition(
            score,
            math.fsum(d.score for d in per_class) / k,
            math.fsum(d.miscalibration for d in per_class) / k,
            math.fsum(d.discrimination for d in per_class) / k,
            math.fsum(d.uncertainty for d in per_class) / k,
            per_class[0].n,
        )
        out[score] = ClasswiseDecomposition(score, per_class, mean)
    return out


def murphy_decomposition(confidences, correct, n_bins: int = 15) -> MurphyDecomposition:
    """Murphy's Brier decomposition on calib's M equal-width bins (b/M, (b+1)/M] (the ECE's, lowest bin
    closed), made exact by the within-bin variance and covariance (Stephenson, Coelho & Jolliffe 2008):
    BS = REL − RES + UNC + WBV − WBC, with BS = (1/N) Σ (f_i − o_i)² the binary Brier score of the
    forecasts f = ``confidences`` and outcomes o = ``correct``.
    """
    from ..engine.binning import assign_bins, uniform_edges

    f, o = check_binary(confidences, correct)
    edges = uniform_edges(n_bins)
    m = edges.shape[0] - 1
    n = f.shape[0]
    idx = assign_bins(f, edges)
    count = np.bincount(idx, minlength=m).astype(np.float64)
    safe = np.maximum(count, 1.0)
    f_bar = np.bincount(idx, weights=f, minlength=m) / safe
    o_bar = np.bincount(idx, weights=o, minlength=m) / safe
    o_mean = float(np.mean(o))
    df = f - f_bar[idx]
    do = o - o_bar[idx]
    return MurphyDecomposition(
        brier=float(np.mean((f - o) ** 2)),
        reliability=float(np.sum(count * (f_bar - o_bar) ** 2) / n),
        resolution=float(np.sum(count * (o_bar - o_mean) ** 2) / n),
        uncertainty=o_mean * (1.0 - o_mean),
        within_bin_variance=float(np.sum(df * df) / n),
        within_bin_covariance=float(2.0 * np.sum(df * do) / n),
        n_bins=m,
        n=n,
    )


@dataclass(frozen=True)
class Decompositions:
    """What ``calib eval --decompose`` reports: the CORP decompositions of the top-label Brier and log
    scores, of the classwise (one-vs-rest) ones, and Murphy's binned Brier decomposition (top label)."""

    top_label: dict[str, ScoreDecomposition]
    classwise: dict[str, ClasswiseDecomposition]
    murphy: MurphyDecomposition

    def to_dict(self) -> dict:
        return {
            "top_label": {name: d.to_dict() for name, d in self.top_label.items()},
            "classwise": {name: d.to_dict() for name, d in self.classwise.items()},
            "murphy": self.murphy.to_dict(),
        }

    def rows(self) -> list[dict]:
        """One row per CORP decomposition (top-label and classwise mean; Brier and log score)."""
        out = []
        means = {name: d.mean for name, d in self.classwise.items()}
        for problem, items in (("top-label", self.top_label), ("classwise mean", means)):
            for name, d in items.items():
                out.append({"problem": problem, "score": name, "value": d.score, "miscalibration": d.miscalibration,
                            "discrimination": d.discrimination, "uncertainty": d.uncertainty})
        return out


def decompose(scores, labels, *, input_kind=None, n_bins: int = 15, scores_name: str = "scores",
              labels_name: str = "labels") -> Decompositions:
    """Every decomposition of :class:`Decompositions` for ``scores`` (logits or probabilities) and ``labels``."""
    from ..data.predictions import as_predictions

    predictions = as_predictions(scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name)
    conf, correct = top_label(predictions, None, scores_name=scores_name)  # validated once
    x, y = check_binary(conf, correct)
    top = _corp(x, y)
    probs, labels_ = _probabilities(predictions, None, None, scores_name, labels_name)
    classwise = _classwise(probs, labels_)
    _warn_infinite(top["log"], f"{scores_name}: top-label log score")
    _warn_infinite(classwise["log"].mean, f"{scores_name}: classwise log score")
    return Decompositions(top, classwise, murphy_decomposition(conf, correct, n_bins))
