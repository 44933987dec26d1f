"""The calibration of top-k log-probabilities (docs/topk.md): the top-label metrics are exact from the
top k alone, NLL when every label's log-probability is known; what needs the full distribution
(classwise-ECE, Brier) is reported as not available, with the reason.

The top-label metrics go through calib's one top-label path: a summary holding the confidences and
correctness (:class:`~calibrate_cli.engine.summary.PredictionSummary`) reduced by
:func:`~calibrate_cli.metrics.functional.metrics_from_summary` with the registry's definitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..data.topk import TopKPredictions
from ..engine.binning import BinStats
from ..engine.summary import PredictionSummary
from ..engine.summary import TOP_LABEL_SUMS
from .functional import DEFAULT_N_BINS, equal_mass_bins, equal_width_bins, metrics_from_summary
from .registry import DEFAULT_METRICS, metric_spec

__all__ = ["TopKReport", "evaluate_topk", "top_label_metrics", "TOPK_METRICS", "UNAVAILABLE"]

#: the default metrics computed from the confidences and correctness alone
TOPK_METRICS: tuple[str, ...] = tuple(n for n in DEFAULT_METRICS if metric_spec(n).needs <= TOP_LABEL_SUMS)
#: why a default metric is not available from the top k
UNAVAILABLE = {
    "classwise_ece": "needs every class's probability for every sample; the top k lists k of them",
    "brier": "needs every class's probability (Σ_k (p_k − [y = k])²); the top k bound it only from below",
}
_NLL_UNKNOWN = "needs the label's log-probability: {m} of {n} labels are outside the top k and have no label_logprob"


@dataclass(frozen=True)
class TopKReport:
    """The result of :func:`evaluate_topk`.

    metrics        name → value as :class:`~calibrate_cli.evaluate.EvalReport`'s (None where undefined
                   or not available from the top k, see ``unavailable``)
    topk_accuracy  j → share of samples whose label ranks among the top j, j = 1..k
    unavailable    metric → why it cannot be computed from these data
    bins, adaptive_bins  the equal-width / equal-mass bins of the top-label confidence
    """

    n: int
    k: int
    n_bins: int
    metrics: dict[str, float | None]
    topk_accuracy: dict[int, float]
    unavailable: dict[str, str]
    bins: BinStats
    adaptive_bins: BinStats
    labels_outside: int
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "k": self.k,
            "n_bins": self.n_bins,
            "input_kind": "topk_logprobs",
            "metrics": dict(self.metrics),
            "topk_accuracy": {str(j): v for j, v in self.topk_accuracy.items()},
            "not_available": dict(self.unavailable),
            "labels_outside_topk": self.labels_outside,
            "bins": {"ece": self.bins.to_rows(), "adaece": self.adaptive_bins.to_rows()},
            "warnings": list(self.warnings),
        }


def top_label_metrics(confidences: np.ndarray, correct: np.ndarray, n_bins: int = DEFAULT_N_BINS, *,
                      labels: np.ndarray | None = None) -> tuple[dict[str, float | None], BinStats, BinStats]:
    """(:data:`TOPK_METRICS` by name, equal-width bins, equal-mass bins) of top-label confidences in
    [0, 1] and their 0/1 correctness, by the registry's definitions (``evaluate``'s numbers)."""
    confidences = np.asarray(confidences, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    n = int(confidences.shape[0])
    labels = np.zeros(n, dtype=np.int64) if labels is None else labels
    summary = PredictionSummary(n=n, k=2, labels=labels, confidences=confidences, correct=correct, nll=None,
                                brier=None, top5=None, classwise=None)
    width = equal_width_bins(confidences, correct, n_bins)
    mass = equal_mass_bins(confidences, correct, n_bins)
    return metrics_from_summary(summary, n_bins, width=width, mass=mass, names=list(TOPK_METRICS)), width, mass


def evaluate_topk(predictions: TopKPredictions, *, n_bins: int = DEFAULT_N_BINS, name: str = "input") -> TopKReport:
    """Every metric that the top-k log-probabilities determine: conf_i = exp(max_j lp_ij),
    pred_i = the lowest id at that maximum, correct_i = [pred_i = y_i] give the top-label metrics
    (ECE, AdaECE, MCE, RMS-CE, KS-CE, SmoothECE, accuracy, S99…) exactly as ``evaluate`` computes them
    from the dense scores; NLL = mean −lp_{i,y_i} when every label's log-probability is known;
    top-j accuracy for j = 1..k (a label outside the list ranks below it); top5_accuracy = top-5
    when k ≥ 5. Classwise-ECE and Brier are None, and ``unavailable`` says why."""
    conf, _, correct = predictions.top_label()
    n, k = predictions.n, predictions.k
    top, width, mass = top_label_metrics(conf, correct, n_bins, labels=predictions.labels)
    unavailable = dict(UNAVAILABLE)
    warnings = []
    lp = predictions.label_logprob
    unknown = int(np.count_nonzero(np.isnan(lp)))
    nll = None
    if unknown:
        unavailable["nll"] = _NLL_UNKNOWN.format(m=unknown, n=n)
    else:
        with np.errstate(over="ignore"):
            nll = float(np.mean(-lp, dtype=np.float64))
        infinite = int(np.count_nonzero(np.isinf(lp)))
        if infinite:
            warnings.append(f"{name}: {infinite} label(s) have log-probability -inf: NLL is inf (not clipped)")
    rank = predictions.label_rank()
    topk_accuracy = {j: float(np.count_nonzero(rank < j)) / n for j in range(1, k + 1)}
    metrics = {}
    for spec_name in DEFAULT_METRICS:  # the report order of evaluate()
        if spec_name in top:
            metrics[spec_name] = top[spec_name]
        elif spec_name == "nll":
            metrics[spec_name] = nll
        elif spec_name == "top5_accuracy":
            metrics[spec_name] = topk_accuracy[5] if k >= 5 else None
            if k < 5:
                unavailable[spec_name] = f"needs the top 5; the input lists {k}"
        else:
            metrics[spec_name] = None
            unavailable.setdefault(spec_name, "needs the full distribution")
    return TopKReport(n=n, k=k, n_bins=n_bins, metrics=metrics, topk_accuracy=topk_accuracy, unavailable=unavailable,
                      bins=width, adaptive_bins=mass, labels_outside=int(np.count_nonzero(rank >= k)),
                      warnings=tuple(warnings))
