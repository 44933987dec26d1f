"""Bootstrap intervals from the point estimate and the B bootstrap values (basic, percentile, BCa), with
their warnings: outside the metric's range, excluding the estimate, too few resamples (docs/bootstrap.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import InputError
from ..metrics.registry import METRICS

DEFAULT_N_RESAMPLES = 1000
DEFAULT_CI_LEVEL = 0.90
#: "auto": each metric's method from the registry (``MetricSpec.ci_method``): basic for the calibration
#: errors (the paper's, Kumar et al. 2019), percentile for the means (docs/bootstrap.md)
DEFAULT_CI_METHOD = "auto"
CI_METHODS = ("auto", "basic", "percentile", "bca")

Method = Literal["auto", "basic", "percentile", "bca"]

#: the method "auto" gives a metric outside the registry (your own metric function, the AUROC of ``calib ood``)
AUTO_OTHER = "basic"


def method_for(metric: str | None, method: str) -> str:
    """The interval method of ``metric`` under ``method``: ``method`` itself, or for ``"auto"`` the metric
    registry's ``ci_method`` (basic for the calibration errors, percentile for the means), and
    :data:`AUTO_OTHER` for a metric that is not in the registry (or None).

    >>> method_for("ece", "auto"), method_for("nll", "auto"), method_for("nll", "basic"), method_for(None, "auto")
    ('basic', 'percentile', 'basic', 'basic')
    """
    if method != "auto":
        return method
    spec = _SPECS.get(metric)
    return AUTO_OTHER if spec is None else spec.ci_method


def method_label(method: str) -> str:
    """The method as titles name it: ``basic``; ``auto`` reads ``basic/percentile`` (the notes under
    the table say which metric got which)."""
    return "basic/percentile" if method == "auto" else method


@dataclass(frozen=True)
class ConfidenceInterval:
    """A bootstrap interval [low, high] around the point estimate ``point`` (docs/bootstrap.md).

    ``n_resamples`` counts the resamples on which the metric was defined (e.g. S99 accuracy is
    undefined on a resample without a confidence ≥ 0.99); usually all of them. ``bias`` is the
    bootstrap estimate of the estimator's bias, mean(bootstrap values) − point. ``warnings`` says,
    in words, what makes the interval suspect: it excludes ``point``, it reaches outside the
    metric's range, too few resamples, or a bias correction at its limit (empty: nothing to say).

    ``low`` and ``high`` are the method's ends as computed (raw: a basic interval may reach below 0
    or above 1). ``bounds`` is the metric's range (None: unbounded); tables and reports show the
    interval clipped to it, ``[clipped_low, clipped_high]``, marked :data:`CLIPPED_MARK` when
    ``clipped`` (docs/bootstrap.md).
    """

    point: float
    low: float
    high: float
    level: float
    method: str
    n_resamples: int
    bias: float | None = None
    warnings: tuple[str, ...] = ()
    bounds: tuple[float, float] | None = None

    def excludes(self, value: float = 0.0) -> bool:
        """True when ``value`` lies outside [low, high]."""
        return bool(value < self.low or value > self.high)

    @property
    def clipped_low(self) -> float:
        """The lower end clipped to the metric's range (what tables show)."""
        return clip_to_range(self.low, self.high, self.bounds)[0]

    @property
    def clipped_high(self) -> float:
        """The upper end clipped to the metric's range (what tables show)."""
        return clip_to_range(self.low, self.high, self.bounds)[1]

    @property
    def clipped(self) -> bool:
        """Whether an end lies outside the metric's range (so that the shown interval is clipped)."""
        return (self.clipped_low, self.clipped_high) != (self.low, self.high)

    @property
    def marks(self) -> str:
        """The marks of the interval in a table: :data:`EXCLUDES_MARK` when it excludes its estimate,
        :data:`CLIPPED_MARK` when it is shown clipped to the metric's range ("" for neither)."""
        return interval_marks(self.to_dict())

    @property
    def contains_point(self) -> bool:
        """Whether the point estimate lies in [low, high] (up to float64 rounding)."""
        tol = 1e-12 * max(1.0, abs(self.point))
        return bool(self.low - tol <= self.point <= self.high + tol)

    def to_dict(self) -> dict:
        return {
            "point": self.point,
            "low": self.low,
            "high": self.high,
            "level": self.level,
            "method": self.method,
            "n_resamples": self.n_resamples,
            "bias": self.bias,
            "contains_point": self.contains_point,
            "clipped": self.clipped,
            "clipped_low": self.clipped_low,
            "clipped_high": self.clipped_high,
            "warnings": list(self.warnings),
        }


#: the mark of an interval shown clipped to its metric's range (its raw ends lie outside)
CLIPPED_MARK = "‡"
#: the mark of an interval that excludes its own point estimate (a biased estimator, docs/bootstrap.md)
EXCLUDES_MARK = "†"
#: what each mark means, for the notes under a table (the CLI) and the report's lead (HTML)
MARK_NOTES = {
    EXCLUDES_MARK: "the interval excludes its estimate: the bootstrap's sign of a biased metric (docs/bootstrap.md)",
    CLIPPED_MARK: "the interval reached outside the metric's range and is shown clipped to it "
    '(the JSON keeps the raw ends as low/high, with "clipped": true)',
}


def interval_marks(interval: dict) -> str:
    """The marks of an interval given as :meth:`ConfidenceInterval.to_dict` (see :attr:`ConfidenceInterval.marks`)."""
    return ((EXCLUDES_MARK if interval.get("contains_point") is False else "")
            + (CLIPPED_MARK if interval.get("clipped") else ""))


def interval_notes(*interval_sets) -> list[str]:
    """The notes under a table of intervals: what each mark that appears means, then, when the metrics'
    methods differ (``method="auto"``), which method each metric got.

    Each of ``interval_sets`` is ``{metric: ConfidenceInterval, its to_dict(), or None}`` (several for a
    table of several sets, e.g. before and after a temperature).
    """
    marks = "".join(interval_marks(d) for d in _dicts(interval_sets).values() for d in d)
    notes = [f"{mark} {text}" for mark, text in MARK_NOTES.items() if mark in marks]
    methods = methods_note(*interval_sets)
    return notes + ([methods] if methods else [])


def methods_note(*interval_sets) -> str | None:
    """``intervals: percentile for Accuracy, NLL, …; basic for ECE, …`` when the intervals of
    ``interval_sets`` (as in :func:`interval_notes`) do not all use one method; None when they do."""
    by_method: dict[str, list[str]] = {}
    for name, dicts in _dicts(interval_sets).items():
        for d in dicts:
            names = by_method.setdefault(d["method"], [])
            shown = _SPECS[name].display_name if name in _SPECS else name
            if shown not in names:
                names.append(shown)
    if len(by_method) < 2:
        return None
    return ("intervals: " + "; ".join(f"{m} for {', '.join(names)}" for m, names in by_method.items())
            + " (docs/bootstrap.md: which method for which metric)")


def _dicts(interval_sets) -> dict[str, list[dict]]:
    """{metric: [the to_dict() of each of its intervals]} over the sets, in order (None left out)."""
    out: dict[str, list[dict]] = {}
    for intervals in interval_sets:
        for name, ci in intervals.items():
            if ci:
                out.setdefault(name, []).append(ci if isinstance(ci, dict) else ci.to_dict())
    return out


def clip_to_range(low: float, high: float, bounds: tuple[float, float] | None) -> tuple[float, float]:
    """[low, high] clipped to ``bounds`` = (lo, hi): (min(max(low, lo), hi), min(max(high, lo), hi)).

    An interval wholly outside the range becomes a single point at the nearest end (e.g. a basic
    interval [−0.03, −0.01] of an ECE is shown as [0, 0]). ``bounds`` None: unchanged.

    >>> clip_to_range(0.951, 1.023, (0.0, 1.0))
    (0.951, 1.0)
    >>> clip_to_range(-1.12, 3.69, (0.0, float("inf")))
    (0.0, 3.69)
    """
    if bounds is None:
        return low, high
    lo, hi = bounds
    return min(max(low, lo), hi), min(max(high, lo), hi)


#: The range of each metric's possible values (from the metric registry): an interval reaching outside is flagged.
METRIC_RANGES: dict[str, tuple[float, float]] = {spec.name: spec.value_range for spec in METRICS}
_SPECS = {spec.name: spec for spec in METRICS}

#: an interval end may move by at most this share of the interval's half-width from seed to seed
#: before a warning says there are too few resamples (see :func:`end_noise`)
MAX_END_NOISE = 0.10


def difference_range(bounds: tuple[float, float] | None) -> tuple[float, float] | None:
    """The range of B − A when A and B lie in ``bounds``: [lo − hi, hi − lo]."""
    if bounds is None:
        return None
    lo, hi = bounds
    return (lo - hi, hi - lo)


def min_resamples(level: float) -> int:
    """The fewest resamples that give an interval at ``level``: B·α/2 ≥ 1 (α = 1 − level).

    With fewer, a tail of α/2 holds no resample at all and the interval's ends are the most
    extreme resampled values (B = 1: a single value, an "interval" of width 0). 20 at 90 %.
    """
    return max(2, math.ceil(2.0 / (1.0 - level) - 1e-9))


def end_noise(level: float, n_resamples: int) -> float:
    """Monte-Carlo standard deviation of a percentile end, as a share of the interval's half-width.

    For a normal bootstrap distribution (sd σ) the p-quantile of B values has standard deviation
    ≈ √(p(1 − p)/B) / φ(z_p) · σ (p = α/2), and the half-width is z_{1−p} σ, so the ratio is
    √(p(1 − p)/B) / (φ(z_p) z_{1−p}). At 90 %: 0.041 for B = 1000, 0.10 for B ≈ 165, 0.13 for B = 100.
    """
    p = (1.0 - level) / 2.0
    from statistics import NormalDist  # here: not every command needs statistics

    nd = NormalDist()
    z = nd.inv_cdf(1.0 - p)
    return math.sqrt(p * (1.0 - p) / n_resamples) / (nd.pdf(z) * z)


#: the smallest confidence level: below ~1e-16, 1 − α/2 rounds to 1/2 and both ends are the median
MIN_LEVEL = 1e-15

#: the most resamples a bootstrap takes: its values alone are B floats per metric (10⁶ × 19 metrics:
#: 150 MB), and beyond it the ends move by less than 0.2 % of the half-width from seed to seed (at
#: 90 %, :func:`end_noise`); 10⁹ grew the memory until the machine ran out
MAX_RESAMPLES = 1_000_000


def check_settings(n_resamples, level, method) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise InputError(f"Expected `n_resamples` to be an integer larger than 0, but got {n_resamples!r}")
    if n_resamples > MAX_RESAMPLES:
        raise InputError(f"Expected `n_resamples` to be at most {MAX_RESAMPLES}, but got {n_resamples!r}")
    if not (isinstance(level, (int, float)) and 0.0 < level < 1.0):
        raise InputError(f"Expected `level` to be a number in (0, 1), but got {level!r}")
    if level < MIN_LEVEL:  # below ~1e-16 both ends are the median: an interval of width 0
        raise InputError(f"Expected `level` to be a number in (0, 1) of at least {MIN_LEVEL:g}, but got {level!r}")
    if method not in CI_METHODS:
        raise InputError(f"Expected `method` to be one of {CI_METHODS}, but got {method!r}")


def _bca_levels(values: np.ndarray, point: float, level: float, acceleration: float) -> tuple[float, float, bool]:
    """The percentile levels (a1, a2) of the BCa interval, and whether the bias correction hit its limit.

    z0 = Φ⁻¹(share of bootstrap values below θ̂, ties counted half), clamped to [1/(2B), 1 − 1/(2B)];
    a_j = Φ(z0 + (z0 + z_j) / (1 − a (z0 + z_j))) for z_j = Φ⁻¹(α/2), Φ⁻¹(1 − α/2) (Efron 1987).
    """
    from statistics import NormalDist

    nd = NormalDist()
    b = values.size
    share = (np.count_nonzero(values < point) + 0.5 * np.count_nonzero(values == point)) / b
    limit = not (0.5 / b <= share <= 1.0 - 0.5 / b)
    z0 = nd.inv_cdf(min(max(share, 0.5 / b), 1.0 - 0.5 / b))
    alpha = 1.0 - level
    out = []
    for z in (nd.inv_cdf(alpha / 2), nd.inv_cdf(1.0 - alpha / 2)):
        denominator = 1.0 - acceleration * (z0 + z)
        if denominator <= 0:  # |a| so large that the end runs off the distribution
            out.append(1.0 if z0 + z > 0 else 0.0)
        else:
            out.append(nd.cdf(z0 + (z0 + z) / denominator))
    return out[0], out[1], limit


def confidence_interval(
    point: float,
    values: np.ndarray,
    *,
    level: float = DEFAULT_CI_LEVEL,
    method: Method = DEFAULT_CI_METHOD,
    acceleration: float = 0.0,
    bounds: tuple[float, float] | None = None,
    metric: str | None = None,
) -> ConfidenceInterval | None:
    """The ``method`` interval at ``level`` from the point estimate and the bootstrap values.

    ``method="auto"`` (the default) takes the method of ``metric`` in the metric registry
    (:func:`method_for`: percentile for the means, basic for the calibration errors and for a
    ``metric`` that is not in the registry); the interval's ``method`` says which was used.

    θ̂ = ``point``, q_a the a-quantile of the bootstrap values (``np.percentile``, linear), α = 1 − level:

    - ``basic`` (Kumar et al. 2019): [2θ̂ − q_{1−α/2}, 2θ̂ − q_{α/2}];
    - ``percentile``: [q_{α/2}, q_{1−α/2}];
    - ``bca`` (bias-corrected and accelerated, Efron 1987): [q_{a1}, q_{a2}] with the levels of
      :func:`_bca_levels`; ``acceleration`` a (e.g. :func:`jackknife_acceleration`); a = 0 gives
      the bias-corrected percentile interval.

    The ends are the method's, never clipped: ``bounds`` (the metric's range, e.g. (0, 1)) is kept
    with the interval, which tables show clipped to it (:attr:`ConfidenceInterval.clipped_low`,
    marked :data:`CLIPPED_MARK`), and adds a warning when an end lies outside it. The interval's ``warnings`` also say when it excludes ``point`` (and the
    bias that makes it do so) or rests on too few resamples (:func:`min_resamples`, :func:`end_noise`).
    Resamples where the metric is undefined (NaN) are left out; None when the point estimate or all
    the bootstrap values are undefined or infinite (an infinite NLL has no meaningful interval).
    """
    check_settings(1, level, method)
    method = method_for(metric, method)
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if point is None or not math.isfinite(point) or values.size == 0 or not np.isfinite(values).all():
        return None
    alpha = 1.0 - level
    limit = False
    if method == "bca":
        a1, a2, limit = _bca_levels(values, point, level, float(acceleration))
        low, high = np.percentile(values, [100.0 * a1, 100.0 * a2])
    else:
        q_lo, q_hi = np.percentile(values, [100.0 * alpha / 2, 100.0 * (1.0 - alpha / 2)])
        if method == "basic":
            low, high = 2.0 * point - q_hi, 2.0 * point - q_lo
        else:
            low, high = q_lo, q_hi
    bias = float(np.mean(values) - point)
    bounds = None if bounds is None else (float(bounds[0]), float(bounds[1]))
    ci = ConfidenceInterval(float(point), float(low), float(high), float(level), method, int(values.size), bias,
                            bounds=bounds)
    warnings = _interval_warnings(ci, values, bounds, limit)
    return ci if not warnings else ConfidenceInterval(**{**ci.__dict__, "warnings": tuple(warnings)})


def _interval_warnings(ci: ConfidenceInterval, values: np.ndarray, bounds, limit: bool) -> list[str]:
    """What makes ``ci`` suspect, in words without option names (see :func:`confidence_interval`)."""
    out = []
    b, level = ci.n_resamples, ci.level
    if b < min_resamples(level):
        out.append(
            f"only {b} resample{'s' if b != 1 else ''}: a {100 * level:g}% interval needs at least "
            f"{min_resamples(level)} (fewer leave its ends at the most extreme values); use 1000 or more"
        )
    elif end_noise(level, b) > MAX_END_NOISE:
        out.append(
            f"only {b} resamples: the ends move by {100 * end_noise(level, b):.0f}% of the half-width "
            "from seed to seed; use 1000 or more"
        )
    if not ci.contains_point:
        side = "above" if ci.bias > 0 else "below"
        share = np.count_nonzero(values > ci.point if ci.bias > 0 else values < ci.point) / values.size
        why = {
            "basic": "the basic interval 2θ̂ − q mirrors them to the other side of the estimate",
            "percentile": "the percentile interval follows them",
            "bca": "the bias-corrected interval moves against that bias",
        }[ci.method]
        out.append(
            f"the interval excludes the point estimate {ci.point:.4g}: {100 * share:.0f}% of the resampled values "
            f"lie {side} it (bootstrap bias {ci.bias:+.2g}), the mark of an estimator biased "
            f"{'upward' if ci.bias > 0 else 'downward'} (binned calibration errors are), and {why}"
        )
    if limit:
        out.append(
            f"all resampled values lie {'above' if ci.bias > 0 else 'below'} the point estimate: the bias "
            "correction is at its limit and the interval ends at the most extreme values"
        )
    if bounds is not None:
        lo, hi = bounds
        if ci.low < lo:
            out.append(f"the interval reaches below {lo:g}, the smallest possible value (lower end {ci.low:.4g}): "
                       f"shown clipped to {lo:g}, marked {CLIPPED_MARK}")
        if ci.high > hi:
            out.append(f"the interval reaches above {hi:g}, the largest possible value (upper end {ci.high:.4g}): "
                       f"shown clipped to {hi:g}, marked {CLIPPED_MARK}")
    return out


