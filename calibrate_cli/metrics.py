"""Calibration and accuracy metrics (SPEC §2): arrays in, floats out.

Notation: p_i = softmax(logits_i) (or the given probabilities), conf_i = max_k p_ik,
pred_i = argmax_k p_ik (lowest index on ties), correct_i = [pred_i = y_i], M bins (default 15).

Each public function validates its input (:func:`~calibrate_cli.predictions.as_predictions`),
makes one pass over the scores (:func:`~calibrate_cli.summary.summarize`) and reduces it. To get
every metric at once, use :func:`calibrate_cli.evaluate`, which shares that pass.

>>> import numpy as np
>>> probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
>>> round(ece(probs, [0, 1, 1], input_kind="probs", n_bins=10), 10)  # bins (0.6,0.7],(0.7,0.8],(0.8,0.9]
0.4
"""

from __future__ import annotations

import math

import numpy as np

from .binning import BinStats, bin_statistics, equal_mass_edges, torch_linspace_edges, uniform_edges
from .predictions import InputKind, as_predictions
from .summary import PredictionSummary, check_compat, summarize

__all__ = [
    "DEFAULT_N_BINS",
    "S99_THRESHOLD",
    "METRIC_NAMES",
    "METRIC_DEFINITIONS",
    "ece",
    "adaece",
    "classwise_ece",
    "mce",
    "nll",
    "brier",
    "accuracy",
    "error",
    "top5_accuracy",
    "mean_confidence",
    "s99",
    "equal_width_bins",
    "equal_mass_bins",
    "metrics_from_summary",
]

DEFAULT_N_BINS = 15
S99_THRESHOLD = 0.99

METRIC_DEFINITIONS: dict[str, str] = {
    "accuracy": "share of samples whose top-1 prediction is the label",
    "error": "1 − accuracy (top-1 error)",
    "ece": "Σ_b |B_b|/N·|acc−conf| over M equal-width bins (b/M, (b+1)/M]",
    "adaece": "ECE over M equal-mass bins (each holds ~N/M samples)",
    "classwise_ece": "mean over classes k of the ECE of p_k against [y = k]",
    "mce": "max over non-empty equal-width bins of |acc − conf|",
    "nll": "mean −log p(true class) (natural log)",
    "brier": "mean Σ_k (p_k − [y = k])², in [0, 2]",
    "top5_accuracy": "share of samples whose label is among the 5 most probable classes",
    "mean_confidence": "mean of the top-1 probability",
    "s99_share": "share of samples predicted with confidence ≥ 0.99",
    "s99_accuracy": "accuracy on the samples with confidence ≥ 0.99",
}
METRIC_NAMES: tuple[str, ...] = tuple(METRIC_DEFINITIONS)


def equal_width_bins(
    confidences: np.ndarray, correct: np.ndarray, n_bins: int = DEFAULT_N_BINS, *, compat: str | None = None
) -> BinStats:
    """Per-bin statistics of top-label confidences over M equal-width bins (b/M, (b+1)/M]."""
    if check_compat(compat):
        conf32 = np.asarray(confidences, dtype=np.float32)
        return bin_statistics(conf32, correct, torch_linspace_edges(n_bins), lowest_closed=False)
    return bin_statistics(confidences, correct, uniform_edges(n_bins))


def equal_mass_bins(
    confidences: np.ndarray, correct: np.ndarray, n_bins: int = DEFAULT_N_BINS, *, compat: str | None = None
) -> BinStats:
    """Per-bin statistics over M equal-mass bins; bin 0 is [e_0, e_1], bin b > 0 is (e_b, e_{b+1}].

    Edges as the reference code (``np.interp`` over the sorted confidences). With
    ``compat="focal-calibration"`` the comparisons are float32 and bin 0 is open below, so the
    minimum-confidence sample(s) fall in no bin (the reference code's bug) while N stays the same.
    """
    if check_compat(compat):
        conf32 = np.asarray(confidences, dtype=np.float32)
        edges = equal_mass_edges(conf32, n_bins).astype(np.float32)
        return bin_statistics(conf32, correct, edges, lowest_closed=False)
    conf64 = np.asarray(confidences, dtype=np.float64)
    return bin_statistics(conf64, correct, equal_mass_edges(conf64, n_bins))


def _mean(x: np.ndarray) -> float:
    with np.errstate(over="ignore"):
        mean = float(np.mean(x, dtype=np.float64))
    if math.isinf(mean) and np.isfinite(x).all():  # the sum overflowed (values near 1e308): mean of x / N
        mean = float(np.sum(np.asarray(x, dtype=np.float64) / x.shape[0]))
    return mean


def _s99(summary: PredictionSummary) -> tuple[float, float]:
    confident = summary.confidences >= S99_THRESHOLD
    share = _mean(confident)
    acc = _mean(summary.correct[confident]) if confident.any() else math.nan
    return share, acc


def _classwise(summary: PredictionSummary) -> float:
    per_class = summary.classwise.calibration_error()
    if summary.compat:  # the reference code averages over classes 0..max(label)
        per_class = per_class[: int(summary.labels.max()) + 1]
    return float(np.mean(per_class))


def metrics_from_summary(
    summary: PredictionSummary,
    n_bins: int = DEFAULT_N_BINS,
    *,
    width: BinStats | None = None,
    mass: BinStats | None = None,
) -> dict[str, float | None]:
    """Every metric of SPEC §2 as a dict keyed by :data:`METRIC_NAMES` (None where undefined).

    ``width``/``mass``: the equal-width / equal-mass bin statistics when already computed.
    """
    if width is None:
        width = equal_width_bins(summary.confidences, summary.correct, n_bins, compat=summary.compat)
    if mass is None:
        mass = equal_mass_bins(summary.confidences, summary.correct, n_bins, compat=summary.compat)
    acc = _mean(summary.correct)
    share, s99_acc = _s99(summary)
    return {
        "accuracy": acc,
        "error": 1.0 - acc,
        "ece": float(width.calibration_error()),
        "adaece": float(mass.calibration_error()),
        "classwise_ece": _classwise(summary) if summary.classwise is not None else None,
        "mce": width.max_calibration_error(),
        "nll": _mean(summary.nll),
        "brier": _mean(summary.brier),
        "top5_accuracy": _mean(summary.top5) if summary.top5 is not None else None,
        "mean_confidence": _mean(summary.confidences),
        "s99_share": share,
        "s99_accuracy": None if math.isnan(s99_acc) else s99_acc,
    }


def _summary(scores, labels, input_kind, n_bins=DEFAULT_N_BINS, compat=None, classwise=False) -> PredictionSummary:
    predictions = as_predictions(scores, labels, input_kind)
    return summarize(predictions, n_bins=n_bins, compat=compat, classwise=classwise)


def ece(
    scores, labels, *, n_bins: int = DEFAULT_N_BINS, input_kind: InputKind = "logits", compat: str | None = None
) -> float:
    """Expected Calibration Error over equal-width bins.

    .. math:: \\mathrm{ECE} = \\sum_{b=0}^{M-1} \\frac{|B_b|}{N} |\\mathrm{acc}(B_b) - \\mathrm{conf}(B_b)|,
              \\quad B_b = \\{i : b/M < \\mathrm{conf}_i \\le (b+1)/M\\}

    Empty bins contribute 0; a confidence of exactly 1.0 is in the last bin.
    """
    s = _summary(scores, labels, input_kind, n_bins, compat)
    return float(equal_width_bins(s.confidences, s.correct, n_bins, compat=compat).calibration_error())


def adaece(
    scores, labels, *, n_bins: int = DEFAULT_N_BINS, input_kind: InputKind = "logits", compat: str | None = None
) -> float:
    """Adaptive (equal-mass) ECE: the ECE sum over bins that each hold ~N/M samples (see
    :func:`equal_mass_bins` for the exact edges)."""
    s = _summary(scores, labels, input_kind, n_bins, compat)
    return float(equal_mass_bins(s.confidences, s.correct, n_bins, compat=compat).calibration_error())


def classwise_ece(
    scores, labels, *, n_bins: int = DEFAULT_N_BINS, input_kind: InputKind = "logits", compat: str | None = None
) -> float:
    """Classwise ECE: (1/K) Σ_k Σ_b |B_kb|/N · |mean_{B_kb} p_ik − mean_{B_kb} [y_i = k]|.

    For each class k, all N values p_ik are binned over equal-width bins. K is the number of score
    columns (the reference code uses max(label) + 1: ``compat="focal-calibration"``).
    """
    s = _summary(scores, labels, input_kind, n_bins, compat, classwise=True)
    return _classwise(s)


def mce(
    scores, labels, *, n_bins: int = DEFAULT_N_BINS, input_kind: InputKind = "logits", compat: str | None = None
) -> float:
    """Maximum Calibration Error: max over non-empty equal-width bins of |acc(B_b) − conf(B_b)|."""
    s = _summary(scores, labels, input_kind, n_bins, compat)
    return equal_width_bins(s.confidences, s.correct, n_bins, compat=compat).max_calibration_error()


def nll(scores, labels, *, input_kind: InputKind = "logits", compat: str | None = None) -> float:
    """Negative log-likelihood: (1/N) Σ_i −log p_{i,y_i} (natural log; log-softmax for logits).

    With probabilities, a true-class probability of exactly 0 gives ``inf`` (never clipped).
    """
    return _mean(_summary(scores, labels, input_kind, compat=compat).nll)


def brier(scores, labels, *, input_kind: InputKind = "logits") -> float:
    """Brier score: (1/N) Σ_i Σ_k (p_ik − [y_i = k])², in [0, 2]."""
    return _mean(_summary(scores, labels, input_kind).brier)


def accuracy(scores, labels, *, input_kind: InputKind = "logits") -> float:
    """Top-1 accuracy: (1/N) Σ_i [argmax_k p_ik = y_i] (lowest index wins ties)."""
    return _mean(_summary(scores, labels, input_kind).correct)


def error(scores, labels, *, input_kind: InputKind = "logits") -> float:
    """Top-1 error: 1 − accuracy."""
    return 1.0 - accuracy(scores, labels, input_kind=input_kind)


def top5_accuracy(scores, labels, *, input_kind: InputKind = "logits") -> float | None:
    """Top-5 accuracy (None when K ≤ 5, where it is trivially 1).

    The true class is in the top 5 when #{k : p_k > p_y} + #{k < y : p_k = p_y} < 5.
    """
    s = _summary(scores, labels, input_kind)
    return None if s.top5 is None else _mean(s.top5)


def mean_confidence(scores, labels, *, input_kind: InputKind = "logits") -> float:
    """Mean top-1 confidence (1/N) Σ_i max_k p_ik."""
    return _mean(_summary(scores, labels, input_kind).confidences)


def s99(scores, labels, *, input_kind: InputKind = "logits") -> tuple[float, float]:
    """(share of samples with conf ≥ 0.99, accuracy on them) — Mukhoti et al. 2020, App. H.

    The accuracy is NaN when no sample reaches 0.99.
    """
    return _s99(_summary(scores, labels, input_kind))
