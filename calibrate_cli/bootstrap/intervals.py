"""Bootstrap intervals from the point estimate and the B bootstrap values (basic, percentile, BCa), with
their warnings: outside the metric's range, excluding the estimate, too few resamples (docs/bootstrap.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import InputError
from ..metric_registry import METRICS

DEFAULT_N_RESAMPLES = 1000
DEFAULT_CI_LEVEL = 0.90
DEFAULT_CI_METHOD = "basic"
CI_METHODS = ("basic", "percentile", "bca")

Method = Literal["basic", "percentile", "bca"]


@dataclass(frozen=True)
class ConfidenceInterval:
    """A bootstrap interval [low, high] around the point estimate ``point`` (docs/bootstrap.md).

    ``n_resamples`` counts the resamples on which the metric was defined (e.g. S99 accuracy is
    undefined on a resample without a confidence ≥ 0.99); usually all of them. ``bias`` is the
    bootstrap estimate of the estimator's bias, mean(bootstrap values) − point. ``warnings`` says,
    in words, what makes the interval suspect: it excludes ``point``, it reaches outside the
    metric's range, too few resamples, or a bias correction at its limit (empty: nothing to say).
    """

    point: float
    low: float
    high: float
    level: float
    method: str
    n_resamples: int
    bias: float | None = None
    warnings: tuple[str, ...] = ()

    def excludes(self, value: float = 0.0) -> bool:
        """True when ``value`` lies outside [low, high]."""
        return bool(value < self.low or value > self.high)

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
            "warnings": list(self.warnings),
        }


#: The range of each metric's possible values (from the metric registry): an interval reaching outside is flagged.
METRIC_RANGES: dict[str, tuple[float, float]] = {spec.name: spec.value_range for spec in METRICS}

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
    from statistics import NormalDist  # here: statistics costs ~6 ms of every command's start

    nd = NormalDist()
    z = nd.inv_cdf(1.0 - p)
    return math.sqrt(p * (1.0 - p) / n_resamples) / (nd.pdf(z) * z)


def check_settings(n_resamples, level, method) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise InputError(f"Expected `n_resamples` to be an integer larger than 0, but got {n_resamples!r}")
    if not (isinstance(level, (int, float)) and 0.0 < level < 1.0):
        raise InputError(f"Expected `level` to be a number in (0, 1), but got {level!r}")
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
) -> ConfidenceInterval | None:
    """The ``method`` interval at ``level`` from the point estimate and the bootstrap values.

    θ̂ = ``point``, q_a the a-quantile of the bootstrap values (``np.percentile``, linear), α = 1 − level:

    - ``basic`` (Kumar et al. 2019): [2θ̂ − q_{1−α/2}, 2θ̂ − q_{α/2}];
    - ``percentile``: [q_{α/2}, q_{1−α/2}];
    - ``bca`` (bias-corrected and accelerated, Efron 1987): [q_{a1}, q_{a2}] with the levels of
      :func:`_bca_levels`; ``acceleration`` a (e.g. :func:`jackknife_acceleration`); a = 0 gives
      the bias-corrected percentile interval.

    Ends are never clipped: ``bounds`` (the metric's range, e.g. (0, 1)) only adds a warning when an
    end lies outside it. The interval's ``warnings`` also say when it excludes ``point`` (and the
    bias that makes it do so) or rests on too few resamples (:func:`min_resamples`, :func:`end_noise`).
    Resamples where the metric is undefined (NaN) are left out; None when the point estimate or all
    the bootstrap values are undefined or infinite (an infinite NLL has no meaningful interval).
    """
    check_settings(1, level, method)
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
    ci = ConfidenceInterval(float(point), float(low), float(high), float(level), method, int(values.size), bias)
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
            out.append(f"the interval reaches below {lo:g}, the smallest possible value: read its lower end as {lo:g}")
        if ci.high > hi:
            out.append(f"the interval reaches above {hi:g}, the largest possible value: read its upper end as {hi:g}")
    return out


