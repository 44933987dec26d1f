"""The metric registry: every metric calib reports, defined once, from sufficient sums.

A metric is one :class:`MetricSpec` in :data:`METRICS`: its name (the JSON key), display name,
one-line definition and reference, whether it is a fraction in [0, 1] (shown as a percentage, gate
thresholds may be written ``2%``), its range, which direction is better, and how it is computed from
the sufficient sums of a set of samples (:class:`MetricSums`). Everything else reads this table:
the point estimate (:func:`calibrate_cli.metrics.functional.metrics_from_summary`, :func:`calibrate_cli.evaluate`),
the bootstrap (numpy and torch engines: each resample's sums go through the same functions), the
tables, CSV and Markdown of the CLI, the gates (names and threshold ranges) and the docs' tests.

Sufficient sums, each with a leading batch axis b (b = 1 for the point estimate, one row per
resample in the bootstrap), over the N samples (weighted by their multiplicity in a resample):

=================  ===========  ==================================================================
field              shape        sum
=================  ===========  ==================================================================
``n``              int          N
``width``          3 × (b, M)   per equal-width bin (b/M, (b+1)/M]: count, Σ conf_i, Σ correct_i
``mass``           3 × (b, M)   the same per equal-mass bin (edges of that set of samples)
``correct``        (b,)         Σ correct_i
``conf``           (b,)         Σ conf_i
``nll``            (b,)         Σ −log p_{i,y_i} over the samples where it is finite
``nll_inf``        (b,)         #{i : −log p_{i,y_i} = inf}
``brier``          (b,)         Σ_i Σ_k (p_ik − [y_i = k])²
``top5``           (b,)         #{i : y_i among the 5 most probable classes} (None when K ≤ 5)
``s99``            (b,)         #{i : conf_i ≥ 0.99}
``s99_correct``    (b,)         #{i : conf_i ≥ 0.99 and correct_i}
``classwise_gap``  (b, K', M)   per (class k, equal-width bin B_kb of p_ik): Σ_{i ∈ B_kb} ([y_i = k] − p_ik)
``class_samples``  (b, N)       each class's p_ik sorted, with each row's multiplicities
                                (:class:`~calibrate_cli.engine.class_samples.ClassSamples`; the opt-in classwise metrics)
``samples``        (b, N)       the samples themselves (:class:`WeightedSamples`): conf_i and
                                correct_i sorted by confidence, with each row's multiplicities
=================  ===========  ==================================================================

``samples`` serves the metrics that are no sums of fixed per-sample terms (KS: a maximum over the
prefix sums; SmoothECE: a kernel smoothing whose bandwidth is searched per row). Its weights are the
multiplicities of each sample in a resample (ones for the point estimate), so such a metric is
computed on every resample without building resampled arrays; it costs O(b·N) per batch.

``classwise_classes`` (b,), or None: the number of leading classes each row averages over when it
differs by row (compat mode in the bootstrap: classes 0..max label drawn); None means all K' rows
of ``classwise_gap``. A field is None when it was not computed (not asked for, or undefined, e.g.
top-5 with K ≤ 5); a metric whose sums are missing is NaN (the point estimate reports None).

Each metric is a vectorised function of these sums, written once: the point estimate and every
bootstrap resample are the same arithmetic on sums of the same shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import partial
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from ..engine.binning import S99_THRESHOLD  # the one definition (the pass counts S99 with it)

from ..engine.parallel import TOGETHER_SAMPLES, run_together

if TYPE_CHECKING:
    from ..engine.class_samples import ClassSamples

__all__ = [
    "S99_THRESHOLD",
    "BinSums",
    "WeightedSamples",
    "MetricSums",
    "MetricSpec",
    "METRICS",
    "METRIC_NAMES",
    "METRIC_DEFINITIONS",
    "DENSE_SUMS",
    "DEFAULT_METRICS",
    "metric_spec",
    "metric_values",
    "sums_needed",
]



@dataclass(frozen=True)
class BinSums:
    """Per-bin count, Σconf and Σcorrect of one binning, each (b, M) (float64; counts may be int)."""

    count: np.ndarray
    sum_conf: np.ndarray
    sum_correct: np.ndarray


@dataclass(frozen=True)
class WeightedSamples:
    """The samples sorted by increasing confidence (stable), with b rows of multiplicities.

    conf     (N,) float64 top-label confidences, ascending
    correct  (N,) 0/1 top-label correctness (float64 or bool), in the same order
    weights  (b, N) float64 multiplicity of each sample in each row, or None: one row of ones (the
             data themselves, never built; the order within runs of equal confidence is then free)
    """

    conf: np.ndarray
    correct: np.ndarray
    weights: np.ndarray | None


@dataclass(frozen=True)
class MetricSums:
    """The sufficient sums of a batch of b sample sets (see the module docstring for each field)."""

    n: int
    width: BinSums
    correct: np.ndarray
    conf: np.ndarray
    mass: BinSums | None = None
    nll: np.ndarray | None = None
    nll_inf: np.ndarray | None = None
    brier: np.ndarray | None = None
    top5: np.ndarray | None = None
    s99: np.ndarray | None = None
    s99_correct: np.ndarray | None = None
    classwise_gap: np.ndarray | None = None
    classwise_classes: np.ndarray | None = None
    samples: WeightedSamples | None = None
    class_samples: ClassSamples | None = None
    #: ``nll`` holds Σ (−log p / nll_scale): 1 normally; N when the plain sum would overflow float64
    #: (logits near 1e308), so the mean stays finite and exact
    nll_scale: float = 1.0

    @property
    def batch(self) -> int:
        return int(np.shape(self.correct)[0])


#: sums of per-sample columns that the bootstrap computes together (all, or none)
DENSE_SUMS = frozenset({"nll", "nll_inf", "brier", "top5", "s99", "s99_correct"})
_SUM_FIELDS = frozenset(f.name for f in fields(MetricSums)) - {"n", "classwise_classes", "nll_scale"}


@dataclass(frozen=True)
class MetricSpec:
    """One metric: what it is, how it reads, and how it is computed from :class:`MetricSums`.

    compute          sums → (b,) float64 array; NaN where undefined for a row
    needs            the :class:`MetricSums` fields ``compute`` reads (besides ``n``)
    percent          a fraction in [0, 1]: shown as a percentage, gate thresholds may be written ``2%``
    value_range      (low, high): every value lies in it (gate thresholds must too)
    lower_is_better  True / False, or None where neither direction is better (e.g. mean confidence)
    shown_when_undefined  a table row even when the value is None (False: the row is left out)
    by_default       computed and reported unless other metrics are asked for (False: an O(N·K log N)
                     metric reported when named, so that the default report stays one cheap pass)
    ci_method        the bootstrap interval's method under ``--ci-method auto`` (the default):
                     ``"basic"`` for the calibration errors, whose binning bias the basic interval
                     reflects (Kumar et al. 2019), ``"percentile"`` for the means (accuracy, NLL, Brier,
                     …), which have no such bias and whose percentile interval never leaves the range
                     (coverage measured: benchmarks/coverage_means.py, docs/bootstrap.md)
    whole_weights    with sample weights, whole numbers only (its bins are ranks of the repeated rows:
                     ACE); :mod:`calibrate_cli.metrics.weighted` refuses other weights for it
    """

    name: str
    display_name: str
    definition: str
    reference: str
    compute: Callable[[MetricSums], np.ndarray]
    needs: frozenset[str]
    percent: bool = True
    value_range: tuple[float, float] = (0.0, 1.0)
    lower_is_better: bool | None = True
    shown_when_undefined: bool = True
    by_default: bool = True
    ci_method: str = "basic"
    whole_weights: bool = False

    def __post_init__(self):
        unknown = set(self.needs) - _SUM_FIELDS
        if unknown:
            raise ValueError(f"metric {self.name!r} needs unknown sums {sorted(unknown)}")
        if self.percent and self.value_range != (0.0, 1.0):
            raise ValueError(f"metric {self.name!r}: a percent metric is a fraction in [0, 1]")
        if self.ci_method not in ("basic", "percentile", "bca"):
            raise ValueError(f"metric {self.name!r}: unknown interval method {self.ci_method!r}")

    def range_text(self) -> str:
        """``[0, 1]``, ``[0, 2]``, ``[0, inf)``."""
        low, high = self.value_range
        num = lambda x: f"{x:g}"  # noqa: E731
        return f"[{num(low)}, {num(high)}]" if math.isfinite(high) else f"[{num(low)}, inf)"

    def values(self, sums: MetricSums) -> np.ndarray:
        """The metric for each row of ``sums`` (NaN for every row when a needed sum is missing)."""
        if any(getattr(sums, f) is None for f in self.needs):
            return np.full(sums.batch, np.nan)
        return self.compute(sums)


# ------------------------------------------------------------------ the metrics, as functions of sums


def _binned_ece(bins: BinSums, n: int) -> np.ndarray:
    """Σ_b |B_b|/N · |acc(B_b) − conf(B_b)| = (1/N) Σ_b |Σcorrect_b − Σconf_b|."""
    return np.abs(bins.sum_correct - bins.sum_conf).sum(axis=-1) / n


def _ece(s: MetricSums) -> np.ndarray:
    return _binned_ece(s.width, s.n)


def _adaece(s: MetricSums) -> np.ndarray:
    return _binned_ece(s.mass, s.n)


def _mce(s: MetricSums) -> np.ndarray:
    """max over non-empty bins of |Σconf_b/|B_b| − Σcorrect_b/|B_b||; 0 when every bin is empty."""
    count = s.width.count
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = np.abs(s.width.sum_conf / np.maximum(count, 1) - s.width.sum_correct / np.maximum(count, 1))
    return np.where(count > 0, gap, -np.inf).max(axis=-1).clip(min=0.0)


def _classwise_ece(s: MetricSums) -> np.ndarray:
    """(1/K) Σ_k (1/N) Σ_b |Σ_{B_kb} ([y = k] − p_k)|, K the classes of the row."""
    per_class = np.abs(s.classwise_gap).sum(axis=-1) / s.n  # (b, K)
    if s.classwise_classes is None:
        return per_class.mean(axis=1)
    mask = np.arange(per_class.shape[1])[None, :] < s.classwise_classes[:, None]
    return (per_class * mask).sum(axis=1) / s.classwise_classes


def _rms_ce(s: MetricSums) -> np.ndarray:
    """√(Σ_b |B_b|/N·(acc_b − conf_b)²) = √((1/N) Σ_b (Σcorrect_b − Σconf_b)²/|B_b|), empty bins 0."""
    count = s.width.count
    gap = s.width.sum_correct - s.width.sum_conf
    with np.errstate(invalid="ignore", divide="ignore"):
        per_bin = np.where(count > 0, gap * gap / np.maximum(count, 1), 0.0)
    return np.sqrt(per_bin.sum(axis=-1) / s.n)


def _debiased_l2_ce(s: MetricSums) -> np.ndarray:
    """Kumar et al. 2019: √max(0, Σ_b |B_b|/N·[(conf_b − acc_b)² − acc_b(1 − acc_b)/(|B_b| − 1)]).

    Bins with fewer than 2 samples add 0 (their ``unbiased_square_ce``); acc_b(1 − acc_b)/(|B_b| − 1)
    is the variance of the bin's mean correctness, whose expectation the plug-in square adds.
    """
    count = s.width.count
    safe = np.maximum(count, 2)
    acc, conf = s.width.sum_correct / safe, s.width.sum_conf / safe
    term = (conf - acc) ** 2 - acc * (1.0 - acc) / (safe - 1)
    square = np.where(count >= 2, count / s.n * term, 0.0).sum(axis=-1)
    return np.sqrt(np.maximum(square, 0.0))


def _ks_ce(s: MetricSums) -> np.ndarray:
    """Gupta et al. 2021: max_t |(1/N) Σ_{i: conf_i ≤ t} (conf_i − correct_i)|, the maximum taken at
    the end of each run of ties (:func:`~calibrate_cli.engine.sorting.run_ends`), so the order of tied
    samples is irrelevant."""
    x = s.samples
    from ..engine.sorting import ks_from_sorted, run_ends

    if x.weights is None:  # the data themselves: one pass in pieces (no (N,) temporaries)
        return np.array([ks_from_sorted(x.conf, x.correct)])
    last = run_ends(x.conf)
    out = np.empty(x.weights.shape[0])
    step = max(1, (1 << 22) // max(x.conf.shape[0], 1))  # rows at a time: bounded (rows × N) memory
    for r in range(0, out.shape[0], step):
        prefix = np.cumsum(x.weights[r : r + step] * (x.conf - x.correct), axis=1)
        out[r : r + step] = np.abs(prefix[:, last]).max(axis=1, initial=0.0)
    return out / s.n


def _n_bins(s: MetricSums) -> int:
    """M, the number of bins (that of the equal-width bins, which every batch has)."""
    return int(np.shape(s.width.count)[-1])


def _ace(s: MetricSums) -> np.ndarray:
    """Nixon et al. 2019: (1/K) Σ_k Σ_r (1/N) |Σ_{B_kr} ([y = k] − p_k)| over equal-mass bins of each p_k."""
    from ..engine.class_samples import ace_gaps

    gaps = ace_gaps(s.class_samples, _n_bins(s))
    return np.abs(gaps).sum(axis=(1, 2)) / (s.n * gaps.shape[1])


def _classwise_rms_ce(s: MetricSums) -> np.ndarray:
    """Kumar et al. 2019's marginal ℓ2 error: √((1/K) Σ_k (1/N) Σ_b gap_kb²/|B_kb|), empty bins 0."""
    from ..engine.class_samples import classwise_width_sums

    count, gap = classwise_width_sums(s.class_samples, _n_bins(s))
    with np.errstate(invalid="ignore", divide="ignore"):
        per_bin = np.where(count > 0, gap * gap / np.maximum(count, 1), 0.0)
    return np.sqrt(per_bin.sum(axis=2).mean(axis=1) / s.n)


def _classwise_ks_ce(s: MetricSums) -> np.ndarray:
    """(1/K) Σ_k max_t |(1/N) Σ_{p_k ≤ t} (p_k − [y = k])| (Gupta et al. 2021, per class)."""
    from ..engine.class_samples import classwise_ks

    return classwise_ks(s.class_samples).mean(axis=1) / s.n


def _smooth_ece(s: MetricSums) -> np.ndarray:
    from .smooth_ece import smooth_ece

    return smooth_ece(s.samples.conf, s.samples.correct, s.samples.weights)


def _accuracy(s: MetricSums) -> np.ndarray:
    return s.correct / s.n


def _error(s: MetricSums) -> np.ndarray:
    return 1.0 - s.correct / s.n


def _nll(s: MetricSums) -> np.ndarray:
    mean = s.nll / s.n if s.nll_scale == 1.0 else s.nll * (s.nll_scale / s.n)
    return np.where(s.nll_inf > 0, np.inf, mean)


def _s99_accuracy(s: MetricSums) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s.s99 > 0, s.s99_correct / np.maximum(s.s99, 1), np.nan)


def _spec(name, display_name, definition, reference, compute, needs, **kw) -> MetricSpec:
    return MetricSpec(name, display_name, definition, reference, compute, frozenset(needs), **kw)


#: every metric of ``calib eval``, in report order
METRICS: tuple[MetricSpec, ...] = (
    _spec(
        "accuracy", "Accuracy", "share of samples whose top-1 prediction is the label",
        "top-1 accuracy", _accuracy, {"correct"}, lower_is_better=False, ci_method="percentile",
    ),
    _spec("error", "Error", "1 − accuracy (top-1 error)", "top-1 error", _error, {"correct"}, ci_method="percentile"),
    _spec(
        "ece", "ECE", "Σ_b |B_b|/N·|acc−conf| over M equal-width bins (b/M, (b+1)/M]",
        "Naeini et al. 2015; Guo et al. 2017", _ece, {"width"},
    ),
    _spec(
        "adaece", "AdaECE", "ECE over M equal-mass bins (each holds ~N/M samples)",
        "Nguyen & O'Connor 2015; Mukhoti et al. 2020", _adaece, {"mass"},
    ),
    _spec(
        "classwise_ece", "Classwise-ECE", "mean over classes k of the ECE of p_k against [y = k]",
        "Kull et al. 2019; Mukhoti et al. 2020", _classwise_ece, {"classwise_gap"},
    ),
    _spec(
        "ace", "ACE", "mean over classes k of the ECE of p_k against [y = k] over M equal-mass bins of p_k",
        "Nixon et al. 2019 (uncertainty_metrics.ace)", _ace, {"class_samples"}, by_default=False, whole_weights=True,
    ),
    _spec(
        "classwise_rms_ce", "Classwise RMS-CE", "√(mean over classes k of Σ_b |B_kb|/N·(acc−conf)²), the bins of Classwise-ECE",
        "Kumar et al. 2019 (marginal ℓ2-CE)", _classwise_rms_ce, {"class_samples"}, by_default=False,
    ),
    _spec(
        "classwise_ks_ce", "Classwise KS-CE", "mean over classes k of max_t |Σ_{p_k ≤ t} (p_k − [y = k])|/N",
        "Gupta et al. 2021 (per class)", _classwise_ks_ce, {"class_samples"}, by_default=False,
    ),
    _spec(
        "mce", "MCE", "max over non-empty equal-width bins of |acc − conf|",
        "Naeini et al. 2015", _mce, {"width"},
    ),
    _spec(
        "rms_ce", "RMS-CE", "√(Σ_b |B_b|/N·(acc−conf)²) over the M equal-width bins of ECE",
        "Hendrycks et al. 2019; Kumar et al. 2019 (plug-in ℓ2-CE)", _rms_ce, {"width"},
    ),
    _spec(
        "debiased_l2_ce", "Debiased L2-CE", "√max(0, Σ_b |B_b|/N·[(acc−conf)² − acc(1−acc)/(|B_b|−1)]) (bins of ECE)",
        "Kumar et al. 2019", _debiased_l2_ce, {"width"},
    ),
    _spec(
        "ks_ce", "KS-CE", "max_t |Σ_{conf_i ≤ t} (conf_i − correct_i)|/N (top-label)",
        "Gupta et al. 2021", _ks_ce, {"samples"},
    ),
    _spec(
        "smooth_ece", "SmoothECE", "kernel-smoothed ECE at the bandwidth σ* = smECE_σ* (relplot.smECE)",
        "Błasiok & Nakkiran 2023 (relplot)", _smooth_ece, {"samples"},
    ),
    _spec(
        "nll", "NLL", "mean −log p(true class) (natural log)",
        "Guo et al. 2017", _nll, {"nll", "nll_inf"}, percent=False, value_range=(0.0, math.inf),
        ci_method="percentile",
    ),
    _spec(
        "brier", "Brier", "mean Σ_k (p_k − [y = k])², in [0, 2]",
        "Brier 1950", lambda s: s.brier / s.n, {"brier"}, percent=False, value_range=(0.0, 2.0),
        ci_method="percentile",
    ),
    _spec(
        "top5_accuracy", "Top-5 accuracy", "share of samples whose label is among the 5 most probable classes",
        "top-5 accuracy (K > 5 only)", lambda s: s.top5 / s.n, {"top5"},
        lower_is_better=False, shown_when_undefined=False, ci_method="percentile",
    ),
    _spec(
        "mean_confidence", "Mean confidence", "mean of the top-1 probability",
        "Guo et al. 2017", lambda s: s.conf / s.n, {"conf"}, lower_is_better=None, ci_method="percentile",
    ),
    _spec(
        "s99_share", "S99 share", "share of samples predicted with confidence ≥ 0.99",
        "Mukhoti et al. 2020, App. H", lambda s: s.s99 / s.n, {"s99"}, lower_is_better=None,
        ci_method="percentile",
    ),
    _spec(
        "s99_accuracy", "S99 accuracy", "accuracy on the samples with confidence ≥ 0.99",
        "Mukhoti et al. 2020, App. H", _s99_accuracy, {"s99", "s99_correct"}, lower_is_better=False,
        ci_method="percentile",
    ),
)

_BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}
METRIC_NAMES: tuple[str, ...] = tuple(_BY_NAME)
METRIC_DEFINITIONS: dict[str, str] = {spec.name: spec.definition for spec in METRICS}
#: the columns of the paper's results table (Mukhoti et al. 2020, Table 1), and of tables that compare
#: many models or calibrators unless other metrics are asked for
PAPER_COLUMNS: tuple[str, ...] = ("error", "ece", "adaece", "classwise_ece", "nll", "brier")
#: the validation metrics ``calib train`` records after every epoch (history.csv: val_error, val_ece, val_nll)
TRAIN_HISTORY: tuple[str, ...] = ("error", "ece", "nll")
#: the metrics a bootstrap resamples unless others are named: all but those computed from the sorted
#: samples themselves (KS-CE, SmoothECE), whose every resample costs a pass over N samples (at N = 10^5,
#: ~2 s more per 1000 resamples each); name them (``metrics=[...]``, ``--bootstrap-metrics``) to get them
BOOTSTRAP_DEFAULT: tuple[str, ...] = tuple(
    spec.name for spec in METRICS if spec.by_default and "samples" not in spec.needs
)
#: the metrics ``calib eval`` and :func:`calibrate_cli.evaluate` compute unless others are named: all but
#: the classwise ones that sort each class's N probabilities (ACE, classwise RMS/KS: O(N·K log N), an
#: (N, K) float64 copy of the probabilities)
DEFAULT_METRICS: tuple[str, ...] = tuple(spec.name for spec in METRICS if spec.by_default)


def metric_spec(name: str) -> MetricSpec:
    """The :class:`MetricSpec` of ``name`` (KeyError for an unknown name)."""
    return _BY_NAME[name]


def sums_needed(names: Iterable[str] | None = None) -> frozenset[str]:
    """The :class:`MetricSums` fields the metrics ``names`` (default: all) are computed from."""
    specs = METRICS if names is None else [_BY_NAME[n] for n in names if n in _BY_NAME]
    return frozenset().union(*(spec.needs for spec in specs))


def metric_values(sums: MetricSums, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """{name: (b,) values} of the metrics ``names`` (default: all, in report order) from ``sums``.

    The metrics that read the samples themselves (a pass over N each) run at once on the CPUs
    (:func:`~calibrate_cli.engine.parallel.run_together`) from
    :data:`~calibrate_cli.engine.parallel.TOGETHER_SAMPLES` samples: each is computed as it would be alone."""
    specs = METRICS if names is None else [_BY_NAME[n] for n in names]
    passes = [spec for spec in specs if "samples" in spec.needs]
    done = {}
    if len(passes) > 1 and sums.samples is not None and sums.samples.conf.shape[0] >= TOGETHER_SAMPLES:
        done = dict(zip((spec.name for spec in passes), run_together(*(partial(spec.values, sums) for spec in passes))))
    return {spec.name: done[spec.name] if spec.name in done else spec.values(sums) for spec in specs}
