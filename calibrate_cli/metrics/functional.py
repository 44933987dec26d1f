"""Calibration and accuracy metrics (docs/metrics.md): arrays in, floats out.

Notation: p_i = softmax(logits_i) (or the given probabilities), conf_i = max_k p_ik,
pred_i = argmax_k p_ik (lowest index on ties), correct_i = [pred_i = y_i], M bins (default 15).

Each public function validates its input (:func:`~calibrate_cli.data.predictions.as_predictions`),
makes one pass over the scores (:func:`~calibrate_cli.engine.summary.summarize`) and reduces it. To get
every metric at once, use :func:`calibrate_cli.evaluate`, which shares that pass. Each metric is
defined once, in :mod:`calibrate_cli.metrics.registry`, as a function of the summary's sums
(:func:`summary_sums`); :data:`METRIC_NAMES` and :data:`METRIC_DEFINITIONS` come from there.

>>> import numpy as np
>>> probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
>>> round(ece(probs, [0, 1, 1], input_kind="probs", n_bins=10), 10)  # bins (0.6,0.7],(0.7,0.8],(0.8,0.9]
0.4
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..engine.class_samples import ClassSamples
from ..engine.binning import BinStats, SparseBinStats, bin_statistics, equal_mass_edges, torch_linspace_edges, uniform_edges
from .registry import (
    METRIC_DEFINITIONS,
    METRIC_NAMES,
    METRICS,
    S99_THRESHOLD,
    BinSums,
    MetricSums,
    WeightedSamples,
    metric_values,
    sums_needed,
)
from ..data.predictions import InputKind, as_predictions
from ..engine.sorting import sort_by_confidence, sort_packed, tie_tolerant
from ..engine.summary import (PredictionSummary, SampleTotals, SummaryRequest, check_compat,
                              in_order_sums, order_counts, summarize, with_pass_sums)

__all__ = [
    "DEFAULT_N_BINS",
    "S99_THRESHOLD",
    "METRIC_NAMES",
    "METRIC_DEFINITIONS",
    "ece",
    "adaece",
    "classwise_ece",
    "ace",
    "classwise_rms_ce",
    "classwise_ks_ce",
    "with_class_sorted",
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
    "order_sums",
    "summary_sums",
]

DEFAULT_N_BINS = 15


def equal_width_bins(
    confidences: np.ndarray, correct: np.ndarray, n_bins: int = DEFAULT_N_BINS, *, compat: str | None = None
) -> BinStats:
    """Per-bin statistics of top-label confidences over M equal-width bins (b/M, (b+1)/M]."""
    if check_compat(compat):
        conf32 = np.asarray(confidences, dtype=np.float32)
        return bin_statistics(conf32, correct, torch_linspace_edges(n_bins), lowest_closed=False)
    return bin_statistics(confidences, correct, uniform_edges(n_bins))


def equal_mass_bins(
    confidences: np.ndarray,
    correct: np.ndarray,
    n_bins: int = DEFAULT_N_BINS,
    *,
    compat: str | None = None,
    sorted_confidences: np.ndarray | None = None,
) -> BinStats:
    """Per-bin statistics over M equal-mass bins; bin 0 is [e_0, e_1], bin b > 0 is (e_b, e_{b+1}].

    Edges as the reference code (``np.interp`` over the sorted confidences), each compared as
    :func:`~calibrate_cli.engine.sorting.tie_tolerant` raises it (a tie split by rounding stays in one
    bin); the bins report the edges themselves. With
    ``compat="focal-calibration"`` the comparisons are float32 and bin 0 is open below, so the
    minimum-confidence sample(s) fall in no bin (the reference code's bug) while N stays the same.
    ``sorted_confidences``: the confidences already sorted (any dtype holding them exactly, e.g.
    from :func:`~calibrate_cli.engine.sorting.sort_by_confidence`), to skip the sort; same edges.
    """
    if check_compat(compat):
        conf32 = np.asarray(confidences, dtype=np.float32)
        edges = equal_mass_edges(conf32, n_bins, sorted_values=sorted_confidences).astype(np.float32)
        return bin_statistics(conf32, correct, edges, lowest_closed=False)
    conf64 = np.asarray(confidences, dtype=np.float64)
    edges = equal_mass_edges(conf64, n_bins, sorted_values=sorted_confidences)
    return dataclasses.replace(bin_statistics(conf64, correct, tie_tolerant(edges)), edges=edges)


def _batch_of_one(bins: BinStats) -> BinSums:
    return BinSums(bins.count[None], bins.sum_conf[None], bins.sum_correct[None])


def summary_sums(
    summary: PredictionSummary,
    n_bins: int = DEFAULT_N_BINS,
    names=None,
    *,
    width: BinStats | None = None,
    mass: BinStats | None = None,
    ordered: tuple[np.ndarray, np.ndarray] | None = None,
    consume: bool = False,
    in_order: dict[str, np.ndarray] | None = None,
) -> MetricSums:
    """The sufficient sums (:class:`~calibrate_cli.metrics.registry.MetricSums`, batch of 1) of a summary.

    Only the sums the metrics ``names`` (default: all) need are computed (the equal-mass bins sort
    the confidences). Each total is the float64 sum of the per-sample array (``np.sum``, pairwise,
    in sample order): its mean is then exactly ``np.mean`` of that array (a summary made without the
    columns carries those totals, :class:`~calibrate_cli.engine.summary.SampleTotals`).

    ``ordered``: (confidences ascending, correctness in that order), from
    :func:`~calibrate_cli.engine.sorting.sort_by_confidence`; sorted here (once, for AdaECE's edges, KS-CE
    and SmoothECE) when needed and not given.

    ``consume``: the summary is not used afterwards (the caller made it and drops it): the
    confidences are sorted in their own buffer (no (N,) copy; they are read in sample order first,
    for every sum that depends on that order) and AdaECE's edges are selected, not sorted for.

    ``in_order``: :func:`order_sums` of the summary when already computed (e.g. beside the sort).
    The summary's own equal-width bins and in-order sums (``s.width``, ``s.in_order``:
    :func:`~calibrate_cli.engine.summary.with_pass_sums`) are used when not given.
    """
    needed = sums_needed(names)
    s, one = summary, lambda x: np.array([x], dtype=np.float64)  # noqa: E731
    consume = consume and _sortable_in_place(s.confidences) and s.compat is None
    # the equal-width bins and in-order sums the pass made (else from the columns, before any in-place sort)
    s = with_pass_sums(s, n_bins, width=width is None, order=in_order is None)
    width = s.width if width is None else width
    in_order = s.in_order if in_order is None else in_order
    if ordered is None and not consume and ("samples" in needed or (mass is None and "mass" in needed)):
        ordered = sort_by_confidence(s.confidences, s.correct)
    if mass is None and "mass" in needed:
        sorted_conf = None if ordered is None else ordered[0]
        mass = equal_mass_bins(s.confidences, s.correct, n_bins, compat=s.compat, sorted_confidences=sorted_conf)
    if ordered is None and "samples" in needed:
        ordered = sort_by_confidence(s.confidences, s.correct, in_place=True)
    columns = {}
    if s.totals is not None or s.nll is not None:  # absent from a top-label-only summary
        t = s.totals if s.totals is not None else _column_totals(s)
        nll_sum, nll_scale = t.nll_sum, 1.0
        if math.isinf(nll_sum):  # finite terms whose sum overflows (logits near 1e308): their sum divided by N
            nll_sum, nll_scale = t.nll_sum_scaled, float(s.n)
        columns = dict(nll=one(nll_sum), nll_scale=nll_scale, nll_inf=one(t.nll_inf), brier=one(t.brier_sum),
                       top5=None if t.top5_count is None else one(t.top5_count))
    elif needed & {"nll", "nll_inf", "brier", "top5"}:
        raise ValueError("this summary holds the top label only: no NLL, Brier or top-5 sums")
    return MetricSums(
        n=s.n,
        width=_batch_of_one(width),
        mass=None if mass is None else _batch_of_one(mass),
        **columns,
        **in_order,
        classwise_gap=_classwise_gap(s, needed),
        classwise_classes=None,
        samples=_samples(ordered, needed),
        class_samples=_class_samples(s, needed),
    )


def order_sums(s: PredictionSummary) -> dict[str, np.ndarray]:
    """The sums over the samples in their order (each a batch of one, :class:`MetricSums`' fields):
    the number correct, Σ conf (``np.sum``, pairwise in sample order), and the number (correct) at
    confidence ≥ :data:`~calibrate_cli.metrics.registry.S99_THRESHOLD`."""
    correct, s99, s99_correct = order_counts(s.confidences, s.correct)
    return in_order_sums(correct, float(np.sum(s.confidences, dtype=np.float64)), s99, s99_correct)


def _sortable_in_place(conf) -> bool:
    return isinstance(conf, np.ndarray) and conf.dtype == np.float64 and conf.flags.c_contiguous and conf.flags.writeable


def _column_totals(s: PredictionSummary) -> SampleTotals:
    """The :class:`~calibrate_cli.engine.summary.SampleTotals` of a summary that kept the per-sample columns:
    each total ``np.sum`` of its column (pairwise, in sample order), what a pass without the columns streams."""
    infinite = ~np.isfinite(s.nll)
    finite_nll = np.where(infinite, 0.0, s.nll) if infinite.any() else s.nll
    with np.errstate(over="ignore"):
        nll_sum = float(np.sum(finite_nll, dtype=np.float64))
    scaled = float(np.sum(np.asarray(finite_nll, dtype=np.float64) / s.n)) if math.isinf(nll_sum) else nll_sum / s.n
    top5 = None if s.top5 is None else int(np.count_nonzero(s.top5))
    return SampleTotals(nll_sum, scaled, int(np.count_nonzero(infinite)), float(np.sum(s.brier, dtype=np.float64)), top5)


def _class_samples(s: PredictionSummary, needed) -> ClassSamples | None:
    """Each class's sorted probabilities with unit weights (ACE, classwise RMS/KS), when held and needed."""
    if s.class_sorted is None or "class_samples" not in needed:
        return None
    return ClassSamples(s.class_sorted, np.ones((1, s.n)))


def _samples(ordered, needed) -> WeightedSamples | None:
    """The sorted samples with unit weights (``weights=None``: one row of ones, never built)."""
    if "samples" not in needed:
        return None
    return WeightedSamples(ordered[0], ordered[1], None)


def _classwise_gap(s: PredictionSummary, needed) -> np.ndarray | None:
    """Per class and equal-width bin Σ ([y = k] − p_k), (1, K', M), when held and needed."""
    if s.classwise is None or "classwise_gap" not in needed:
        return None
    if isinstance(s.classwise, SparseBinStats):
        # per class Σ_b |gap| (≥ 0) as one column, which |·| and Σ_b leave unchanged: memory ∝ the
        # non-empty cells, not K × M (equal to the dense sum up to its order)
        gap = (s.classwise.calibration_error() * s.n)[:, None]
    else:
        gap = s.classwise.sum_correct - s.classwise.sum_conf
    if s.compat:  # the reference code averages over classes 0..max(label)
        gap = gap[: int(s.labels.max()) + 1]
    return gap[None]


def _point(summary: PredictionSummary, names, n_bins: int = DEFAULT_N_BINS, **bins) -> dict[str, float]:
    """{name: float} of the metrics ``names`` (NaN where undefined)."""
    values = metric_values(summary_sums(summary, n_bins, names, **bins), names)
    return {name: float(v[0]) for name, v in values.items()}


#: the summary field behind each sum of the opt-in metrics
_OPTIONAL_SOURCES = {"class_samples": "class_sorted"}


def summary_has(summary: PredictionSummary, sum_field: str) -> bool:
    """Whether ``summary`` holds what the sum ``sum_field`` is made from (the defaults always do)."""
    return getattr(summary, _OPTIONAL_SOURCES.get(sum_field, sum_field), None) is not None


def metrics_from_summary(
    summary: PredictionSummary,
    n_bins: int = DEFAULT_N_BINS,
    *,
    width: BinStats | None = None,
    mass: BinStats | None = None,
    ordered: tuple[np.ndarray, np.ndarray] | None = None,
    consume: bool = False,
    names=None,
    in_order: dict[str, np.ndarray] | None = None,
) -> dict[str, float | None]:
    """Every metric of docs/metrics.md as a dict keyed by :data:`METRIC_NAMES` (None where undefined);
    ``names``: only these (e.g. the top-label metrics of a summary of the top label alone).

    ``width``/``mass``: the equal-width / equal-mass bin statistics when already computed (``ordered``:
    the samples sorted by confidence, :func:`~calibrate_cli.engine.sorting.sort_by_confidence`). Each
    metric is its registry entry's function of the summary's sums (:func:`summary_sums`). The opt-in
    classwise metrics (not in :data:`~calibrate_cli.metrics.registry.DEFAULT_METRICS`: ACE, classwise
    RMS/KS) are in the dict only when the summary holds their sorted classes (``summary.class_sorted``).
    ``consume``: as :func:`summary_sums`' (the summary's confidences are then reordered); ``in_order``:
    :func:`order_sums` when already computed.
    """
    if names is None:
        names = [spec.name for spec in METRICS if spec.by_default or all(summary_has(summary, f) for f in spec.needs)]
    point = _point(summary, names, n_bins, width=width, mass=mass, ordered=ordered, consume=consume, in_order=in_order)
    return {name: None if math.isnan(v) else v for name, v in point.items()}


def _metrics(names, scores, labels, input_kind, n_bins=DEFAULT_N_BINS, compat=None) -> dict[str, float]:
    """Metrics from their registry entries (NaN where undefined), from one pass asked for their sums."""
    needed = sums_needed(names)
    predictions = as_predictions(scores, labels, input_kind, check_values=False)  # the pass checks the values
    summary = summarize(predictions, n_bins=n_bins, compat=compat, request=SummaryRequest(sums=needed, columns=False))
    predictions = dataclasses.replace(predictions, pending=None)
    if "class_samples" in needed:
        summary = with_class_sorted(summary, predictions)
    # the summary is dropped after: the keys the pass packed, else its confidences, sorted in place
    ordered = None if summary.sort_keys is None else sort_packed(summary.sort_keys)
    return _point(summary, names, n_bins, consume=True, ordered=ordered)


def _metric(name: str, scores, labels, input_kind, n_bins=DEFAULT_N_BINS, compat=None) -> float:
    """One metric from its registry entry (NaN where undefined)."""
    return _metrics([name], scores, labels, input_kind, n_bins, compat)[name]


def ece(
    scores, labels, *, n_bins: int = DEFAULT_N_BINS, input_kind: InputKind | None = None, compat: str | None = None
) -> float:
    """Expected Calibration Error over equal-width bins.

    .. math:: \\mathrm{ECE} = \\sum_{b=0}^{M-1} \\frac{|B_b|}{N} |\\mathrm{acc}(B_b) - \\mathrm{conf}(B_b)|,
              \\quad B_b = \\{i : b/M < \\mathrm{conf}_i \\le (b+1)/M\\}

    Empty bins contribute 0; a confidence of exactly 1.0 is in the last bin.
    """
    return _metric("ece", scores, labels, input_kind, n_bins, compat)


def adaece(
    scores, labels, *, n_bins: int = DEFAULT_N_BINS, input_kind: InputKind | None = None, compat: str | None = None
) -> float:
    """Adaptive (equal-mass) ECE: the ECE sum over bins that each hold ~N/M samples (see
    :func:`equal_mass_bins` for the exact edges)."""
    return _metric("adaece", scores, labels, input_kind, n_bins, compat)


def classwise_ece(
    scores, labels, *, n_bins: int = DEFAULT_N_BINS, input_kind: InputKind | None = None, compat: str | None = None
) -> float:
    """Classwise ECE: (1/K) Σ_k Σ_b |B_kb|/N · |mean_{B_kb} p_ik − mean_{B_kb} [y_i = k]|.

    For each class k, all N values p_ik are binned over equal-width bins. K is the number of score
    columns (the reference code uses max(label) + 1: ``compat="focal-calibration"``).
    """
    return _metric("classwise_ece", scores, labels, input_kind, n_bins, compat)


def with_class_sorted(summary: PredictionSummary, predictions) -> PredictionSummary:
    """``summary`` with each class's probabilities sorted (:func:`~calibrate_cli.engine.class_samples.sort_classes`):
    the float64 softmax of logits, or the given probabilities, read a row chunk at a time (a size beyond
    :data:`~calibrate_cli.engine.class_samples.CLASS_SORTED_MAX_VALUES` is refused)."""
    from ..engine.class_samples import sort_classes_of

    if summary.class_sorted is not None:
        return summary
    return dataclasses.replace(summary, class_sorted=sort_classes_of(predictions.scores, predictions.labels,
                                                                     predictions.input_kind))


def ace(scores, labels, *, n_bins: int = DEFAULT_N_BINS, input_kind: InputKind | None = None) -> float:
    """ACE (Nixon et al. 2019): (1/K) Σ_k Σ_r (1/N) |Σ_{i ∈ B_kr} ([y_i = k] − p_ik)|, where B_k1..B_kR
    are R = ``n_bins`` equal-mass bins of the N values p_ik (:mod:`~calibrate_cli.engine.class_samples`).

    >>> round(ace([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.2, 0.8]], [0, 1, 1, 1], n_bins=2, input_kind="probs"), 4)
    0.25
    """
    return _metric("ace", scores, labels, input_kind, n_bins)


def classwise_rms_ce(scores, labels, *, n_bins: int = DEFAULT_N_BINS, input_kind: InputKind | None = None) -> float:
    """Classwise (marginal) RMS calibration error, Kumar et al. 2019:
    √((1/K) Σ_k Σ_b |B_kb|/N · (mean_{B_kb} [y = k] − mean_{B_kb} p_k)²), the equal-width bins of classwise-ECE."""
    return _metric("classwise_rms_ce", scores, labels, input_kind, n_bins)


def classwise_ks_ce(scores, labels, *, input_kind: InputKind | None = None) -> float:
    """Classwise KS calibration error: (1/K) Σ_k max_t |(1/N) Σ_{p_ik ≤ t} (p_ik − [y_i = k])| (Gupta et al. 2021)."""
    return _metric("classwise_ks_ce", scores, labels, input_kind)


def mce(
    scores, labels, *, n_bins: int = DEFAULT_N_BINS, input_kind: InputKind | None = None, compat: str | None = None
) -> float:
    """Maximum Calibration Error: max over non-empty equal-width bins of |acc(B_b) − conf(B_b)|."""
    return _metric("mce", scores, labels, input_kind, n_bins, compat)


def nll(scores, labels, *, input_kind: InputKind | None = None, compat: str | None = None) -> float:
    """Negative log-likelihood: (1/N) Σ_i −log p_{i,y_i} (natural log; log-softmax for logits).

    With probabilities, a true-class probability of exactly 0 gives ``inf`` (never clipped).
    """
    return _metric("nll", scores, labels, input_kind, compat=compat)


def brier(scores, labels, *, input_kind: InputKind | None = None) -> float:
    """Brier score: (1/N) Σ_i Σ_k (p_ik − [y_i = k])², in [0, 2]."""
    return _metric("brier", scores, labels, input_kind)


def accuracy(scores, labels, *, input_kind: InputKind | None = None) -> float:
    """Top-1 accuracy: (1/N) Σ_i [argmax_k p_ik = y_i] (lowest index wins ties)."""
    return _metric("accuracy", scores, labels, input_kind)


def error(scores, labels, *, input_kind: InputKind | None = None) -> float:
    """Top-1 error: 1 − accuracy."""
    return _metric("error", scores, labels, input_kind)


def top5_accuracy(scores, labels, *, input_kind: InputKind | None = None) -> float | None:
    """Top-5 accuracy (None when K ≤ 5, where it is trivially 1).

    The true class is in the top 5 when #{k : p_k > p_y} + #{k < y : p_k = p_y} < 5.
    """
    value = _metric("top5_accuracy", scores, labels, input_kind)
    return None if math.isnan(value) else value


def mean_confidence(scores, labels, *, input_kind: InputKind | None = None) -> float:
    """Mean top-1 confidence (1/N) Σ_i max_k p_ik."""
    return _metric("mean_confidence", scores, labels, input_kind)


def s99(scores, labels, *, input_kind: InputKind | None = None) -> tuple[float, float]:
    """(share of samples with conf ≥ 0.99, accuracy on them) — Mukhoti et al. 2020, App. H.

    The accuracy is NaN when no sample reaches 0.99.
    """
    names = ["s99_share", "s99_accuracy"]
    point = _metrics(names, scores, labels, input_kind)
    return point[names[0]], point[names[1]]
