"""Bootstrap confidence intervals for every metric (SPEC §4), and paired comparisons of two models.

A resample draws N of the N (score, label) pairs with replacement. Its metrics depend on the draw
only through the multiplicities w_i (how often sample i was drawn), so calib never builds resampled
score arrays: one :func:`~calibrate_cli.summary.summarize` pass gives the per-sample quantities
(confidence, correctness, NLL, Brier term, top-5 hit, classwise bin of every p_ik) and each resample
is a weighted sum over them:

- the samples are sorted once by confidence, so every equal-width bin and every equal-mass bin is a
  contiguous range; per-bin count, Σconf and Σcorrect are differences of the weighted cumulative
  sums at the bin boundaries;
- equal-mass edges are recomputed per resample: the resampled sorted confidences are the sorted
  confidences repeated w_i times, so the value at position t is the sample whose cumulative weight
  first exceeds t, and ``np.interp``'s formula is applied to those values (bit-identical to
  :func:`~calibrate_cli.binning.equal_mass_edges` on the explicitly resampled array);
- classwise-ECE sums w_i ([y_i = k] − p_ik) per (class, bin); the most populated bin of each class
  is obtained as the class total minus the other bins, so only the few (i, k) outside it are touched;
- NLL, Brier, accuracy, top-5, mean confidence and S99 are weighted means (matrix products).

Resamples are processed in batches of ``batch_size`` rows of N multiplicities (two buffers of
8 bytes × batch_size × N; the default keeps each near 64 MB); the results do not depend on the
batch size.

Resample r draws from its own stream (:func:`resample_streams`), so the draws and counts of the
next batch run in a thread pool while the metrics of the current batch are computed.

``device`` chooses where the per-batch work runs (:mod:`calibrate_cli.devices`): ``"cpu"``
(default) numpy; ``"cuda"`` torch on the GPU; ``"torch-cpu"`` the same torch code on the CPU (to
test it without a GPU); ``"auto"`` cuda when torch and a GPU are available, else numpy. The
per-batch math is written once against the device's array namespace (``_Resampler.use``). The
draws, multiplicity counts and classwise sparse sums are always made in numpy, and the set-up is
shared, so a torch device computes on the very same multiplicity rows (in float64): results equal
the numpy path's up to float64 summation order.

Intervals (θ̂ the metric on the data, q_a the a-quantile of the B bootstrap values, computed by
``np.percentile`` with its default linear interpolation, α = 1 − level):

- ``basic`` (default; Kumar et al. 2019):  [2θ̂ − q_{1−α/2}, 2θ̂ − q_{α/2}]
- ``percentile``:                          [q_{α/2}, q_{1−α/2}]
- ``bca`` (Efron 1987):                    [q_{a1}, q_{a2}], levels corrected for bias (z0) and
  skewness (the acceleration, from a delete-a-group jackknife: :func:`jackknife_values`)

Intervals are never clipped (a basic interval may reach below 0), but each carries ``warnings`` when
it reaches outside the metric's range (:data:`METRIC_RANGES`), excludes its point estimate (the
mark of a biased estimator: binned calibration errors are biased upward), or rests on too few
resamples. Basic stays the default: on simulated models it covers the true binned ECE far more
often than percentile or BCa (benchmarks/coverage_bootstrap.py, docs/bootstrap.md).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from statistics import NormalDist
from typing import Callable, Literal, Mapping, Sequence

import numpy as np

from .binning import assign_bins, torch_linspace_edges, uniform_edges
from .devices import DEFAULT_DEVICE, DEVICES, NumpyOps, array_ops, check_device, resolve_device
from .errors import InputError
from .metric_registry import DENSE_SUMS, METRICS, BinSums, MetricSums, metric_values, sums_needed
from .metrics import DEFAULT_N_BINS, METRIC_NAMES, S99_THRESHOLD, metrics_from_summary
from .parallel import cpu_threads
from .predictions import InputKind, as_predictions
from .summary import PredictionSummary, check_compat, summarize

__all__ = [
    "DEFAULT_N_RESAMPLES",
    "DEFAULT_CI_LEVEL",
    "DEFAULT_CI_METHOD",
    "CI_METHODS",
    "DEVICES",
    "ConfidenceInterval",
    "Comparison",
    "MetricDifference",
    "bootstrap",
    "bootstrap_values",
    "compare",
    "confidence_interval",
    "difference_range",
    "end_noise",
    "jackknife_acceleration",
    "jackknife_values",
    "min_resamples",
    "METRIC_RANGES",
    "resample_streams",
    "resolve_device",
]

DEFAULT_N_RESAMPLES = 1000
DEFAULT_CI_LEVEL = 0.90
DEFAULT_CI_METHOD = "basic"
CI_METHODS = ("basic", "percentile", "bca")
#: groups of the delete-a-group jackknife that estimates the BCa acceleration (see jackknife_values)
DEFAULT_JACKKNIFE_GROUPS = 100
DEFAULT_SEED = 0
#: default batch: about this many multiplicities (batch_size × N) at a time
BATCH_ENTRIES = 1 << 23

Method = Literal["basic", "percentile", "bca"]
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ConfidenceInterval:
    """A bootstrap interval [low, high] around the point estimate ``point`` (SPEC §4, §6).

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
    nd = NormalDist()
    z = nd.inv_cdf(1.0 - p)
    return math.sqrt(p * (1.0 - p) / n_resamples) / (nd.pdf(z) * z)


def _check_settings(n_resamples, level, method) -> None:
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
    _check_settings(1, level, method)
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


# --------------------------------------------------------------------------- jackknife (BCa acceleration)


def _jackknife_groups(n: int, n_groups: int) -> list[np.ndarray]:
    """G = min(n, n_groups) groups of samples, a fixed random partition (seeded by n) of [0, n)."""
    g = min(n, n_groups)
    perm = np.random.default_rng(n).permutation(n)
    return [np.sort(perm[i::g]) for i in range(g)]


def jackknife_values(
    scores,
    labels,
    *,
    input_kind: InputKind = "logits",
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    metrics: Metrics = None,
    n_groups: int = None,
) -> dict[str, np.ndarray]:
    """Delete-a-group jackknife: {metric: (G,) values, each on the data without one group}.

    The N samples are split into G = min(N, ``n_groups``) groups (a fixed random partition); value
    g is the metric recomputed from scratch, exactly as :func:`~calibrate_cli.evaluate.evaluate`
    computes it, on the N − N/G samples outside group g. G = N is the ordinary jackknife. It serves
    the BCa acceleration (:func:`jackknife_acceleration`): for a statistic with influence values U_i,
    the group values differ by the group sums of U_i, whose skewness is that of U_i divided by √(N/G),
    so Σ u_g³ / (Σ u_g²)^{3/2} estimates the same a as the full jackknife with G passes instead of N
    (its sampling sd ≈ 0.41/G: ±0.004 at G = 100, which moves a 90 % interval's levels by < 0.3 %).
    """
    n_groups = DEFAULT_JACKKNIFE_GROUPS if n_groups is None else n_groups
    if isinstance(n_groups, bool) or not isinstance(n_groups, (int, np.integer)) or n_groups < 2:
        raise InputError(f"Expected `n_groups` to be an integer larger than 1, but got {n_groups!r}")
    builtin, custom = _metric_spec(metrics)
    compat = check_compat(compat)
    predictions = as_predictions(scores, labels, input_kind)
    n = len(predictions.labels)
    names = list(METRIC_NAMES if builtin is None else builtin)
    out = {name: np.full(min(n, n_groups), np.nan) for name in names + list(custom)}
    if n < 2:
        return {name: v[:0] for name, v in out.items()}
    score_array, label_array = np.asarray(predictions.scores), np.asarray(predictions.labels)
    raw = (np.asarray(scores), np.asarray(labels)) if custom else None
    for g, group in enumerate(_jackknife_groups(n, n_groups)):
        keep = np.ones(n, dtype=bool)
        keep[group] = False
        sub = as_predictions(score_array[keep], label_array[keep], predictions.input_kind)
        values = metrics_from_summary(summarize(sub, n_bins=n_bins, compat=compat, classwise=True), n_bins)
        for name in names:
            if values[name] is not None:
                out[name][g] = values[name]
        for name, fn in custom.items():
            out[name][g] = _custom_value(name, fn, raw[0][keep], raw[1][keep])
    return out


def jackknife_acceleration(jackknife: np.ndarray) -> float:
    """The BCa acceleration a = Σ u³ / (6 (Σ u²)^{3/2}), u_g = mean(θ_(·)) − θ_(g) (Efron 1987, eq. 6.6).

    ``jackknife``: the delete-one (or delete-a-group) values of :func:`jackknife_values`; undefined
    and infinite values are left out; 0 when fewer than 3 remain or they are all equal.
    """
    jack = np.asarray(jackknife, dtype=np.float64)
    jack = jack[np.isfinite(jack)]
    if jack.size < 3:
        return 0.0
    u = jack.mean() - jack
    s2 = float(np.sum(u * u))
    if s2 <= 0.0 or not math.isfinite(s2):
        return 0.0
    return float(np.sum(u**3) / (6.0 * s2**1.5))


# --------------------------------------------------------------------------- the resampling engine


class _Resampler:
    """Per-sample quantities of one summary, sorted by confidence, and the metrics of weighted resamples.

    Multiplicity rows have ``n_padded`` columns (the sorted samples, then zeros up to a whole number
    of blocks of ``block`` samples). Block sums of w·[1, conf, correct], of w·[dense columns] and of
    w·[class totals] come from one batched matrix product per group (fixed shapes, so a metric's
    value does not depend on the other metrics asked for); prefix sums at any position are the
    block prefix plus a partial block.
    """

    def __init__(self, summary: PredictionSummary, scores_probs: np.ndarray, n_bins: int, wanted=None):
        s = summary
        needed = sums_needed(wanted)  # the registry's sums behind the wanted metrics (default: all)
        self.n, self.k, self.m = s.n, s.k, n_bins
        self.compat = s.compat
        self.lowest_closed = s.compat is None
        self.need_adaece = "mass" in needed
        self.need_dense = bool(needed & DENSE_SUMS)
        self.classwise = "classwise_gap" in needed and s.classwise is not None
        n = self.n
        self.block = 256 if n <= (1 << 17) else 1024
        self.n_blocks = -(-n // self.block)
        self.n_padded = self.n_blocks * self.block
        conf = s.confidences
        self.order = np.argsort(conf, kind="stable")
        self.rank = np.empty(n, dtype=np.int64)
        self.rank[self.order] = np.arange(n)
        o = self.order
        self.conf_sorted = conf[o]  # float64 (float32 in compat mode)
        conf64 = self.conf_sorted.astype(np.float64)
        correct = s.correct[o].astype(np.float64)
        self.labels_sorted = s.labels[o]
        # equal-width bins: contiguous ranges [starts[b], starts[b+1]) of the sorted order
        width_edges = torch_linspace_edges(n_bins) if s.compat else uniform_edges(n_bins)
        width_idx = assign_bins(self.conf_sorted, width_edges, lowest_closed=self.lowest_closed)
        self.width_starts = np.searchsorted(width_idx, np.arange(0, n_bins + 1), side="left")
        columns = [np.ones(n), conf64, correct]
        self.has_top5 = s.top5 is not None
        if self.need_dense:
            # nll (finite part), #inf nll, brier, top5, s99, s99·correct
            nll = s.nll[o]
            inf = ~np.isfinite(nll)
            s99 = (self.conf_sorted >= S99_THRESHOLD).astype(np.float64)
            top5 = s.top5[o].astype(np.float64) if self.has_top5 else np.zeros(n)
            columns += [np.where(inf, 0.0, nll), inf.astype(np.float64), s.brier[o], top5, s99, s99 * correct]
        self.classwise_col = len(columns)
        class_totals = None
        if self.classwise:
            class_totals = self._init_classwise(scores_probs, s.labels, s.classwise.count)
        # per-resample side sums made where the row is counted (see `count`): classwise sums per
        # (class, slot) outside the base slots, then (compat) the largest label drawn
        self.n_side = (self.k * (self.m + 1) + (1 if self.compat else 0)) if self.classwise else 0
        # Column groups, each multiplied by the multiplicities in its own product: a metric's value
        # then comes from a product whose shape does not depend on which other metrics are wanted
        # (BLAS picks its kernel, and so its summation order, by shape: one product over all the
        # wanted columns gave intervals that changed in the last bits with the metric subset).
        groups = [columns[:3]] + ([columns[3:]] if self.need_dense else [])
        if class_totals is not None:  # Σ w ([y = k] − p_k) per class, in sorted order
            groups.append(class_totals)
        self.x_groups = [self._padded_blocks(g) for g in groups]
        self.use(NumpyOps())

    def _padded_blocks(self, columns) -> np.ndarray:
        """Columns (a list of N-vectors, or an (N, c) array) as zero-padded blocks (n_blocks, block, c)."""
        width = len(columns) if isinstance(columns, list) else columns.shape[1]
        x = np.zeros((self.n_padded, width))
        if isinstance(columns, list):
            np.stack(columns, axis=1, out=x[: self.n])
        else:
            x[: self.n] = columns
        return x.reshape(self.n_blocks, self.block, width)

    def _init_classwise(self, p: np.ndarray, labels: np.ndarray, class_counts: np.ndarray) -> np.ndarray:
        """Per (sample, class): the slot (bin, or M for none) of p_ik and v_ik = [y_i = k] − p_ik.

        ``p``/``labels`` in the original sample order; ``class_counts`` (K, M) the summary's classwise
        bin counts. Each class's most populated slot is its base slot; only the (i, k) outside it go
        into the sparse matrix, whose columns are the sorted sample positions. Returns v in sorted
        order (N, K): its weighted column sums are the class totals.
        """
        import scipy.sparse

        n, k, m = self.n, self.k, self.m
        edges = torch_linspace_edges(m) if self.compat else uniform_edges(m)
        counts = np.zeros((k, m + 1), dtype=np.int64)
        counts[:, :m] = class_counts
        counts[:, m] = n - class_counts.sum(axis=1)  # in no bin (compat mode: p ≤ e_0)
        self.base_slot = counts.argmax(axis=1)
        # the base slot's interval (lo, hi], open at the ends where the binning is
        lo = np.concatenate([[-np.inf] if self.lowest_closed else edges[:1], edges[1:m], [-np.inf]])
        hi = np.concatenate([edges[1:m], [np.inf], edges[:1]])
        lo, hi = lo[self.base_slot].astype(p.dtype), hi[self.base_slot].astype(p.dtype)
        off = (p <= lo[None, :]) | (p > hi[None, :])  # outside the base slot, compared in p's dtype
        v = -p.astype(np.float64)
        v[np.arange(n), labels] += 1.0
        rows, cols = np.nonzero(off[self.order])  # rows in sorted order, so the CSR needs no sort
        orig = self.order[rows]
        p_off = p[orig, cols]
        slot = assign_bins(p_off, edges, lowest_closed=self.lowest_closed)
        if not self.lowest_closed:
            slot[slot < 0] = m  # slot M: in no bin (compat mode only)
        keys = cols * (m + 1) + slot
        indptr = np.zeros(self.n_padded + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.n_padded), out=indptr[1:])
        # (K·(M+1), N_padded) CSR: this @ w = per-(class, slot) sums outside the base slots
        by_sample = scipy.sparse.csr_matrix((v[orig, cols], keys, indptr), shape=(self.n_padded, k * (m + 1)))
        self.cw_t = by_sample.T.tocsr()
        self.cw_t.sort_indices()
        return v[self.order]

    # -- the per-batch math, written once for every device (``self.ops``: numpy or torch) -------------

    def use(self, ops) -> "_Resampler":
        """Run the per-batch math with ``ops`` (:func:`~calibrate_cli.devices.array_ops`): the set-up
        arrays it reads are copied to that device once. Draws, counts and side sums stay in numpy."""
        self.ops = ops
        self.d_groups = [ops.asarray(x) for x in self.x_groups]
        self.d_x3 = self.d_groups[0]
        self.d_width_starts = ops.asarray(self.width_starts)
        self.d_conf = ops.asarray(self.conf_sorted)  # float32 in compat mode
        self.d_conf64 = ops.to_float64(self.d_conf)
        self.d_arange_block = ops.arange(self.block)
        return self

    def _prefix(self, wb, block_prefix, positions):
        """Σ_{i < P} w_i·[1, conf, correct]_i for each row's positions P (b, T) → (b, T, 3)."""
        xp = self.ops
        b = wb.shape[0]
        g = xp.minimum(positions // self.block, self.n_blocks - 1)
        offset = positions - g * self.block  # in [0, block]
        r = xp.arange(b)[:, None]
        part_w = wb[r, g] * (self.d_arange_block < offset[..., None])  # (b, T, G)
        partial = xp.einsum("rtg,rtgc->rtc", part_w, self.d_x3[g])
        return block_prefix[r, g] + partial

    def _positions_of_ranks(self, wb, count_prefix, targets):
        """Sorted-sample index holding position t of each resample's sorted sequence, (b, T)."""
        xp = self.ops
        b = wb.shape[0]
        g = xp.minimum(xp.searchsorted_rows(count_prefix[:, 1:], targets, right=True), self.n_blocks - 1)
        r = xp.arange(b)[:, None]
        inside = count_prefix[r, g][..., None] + xp.cumsum(wb[r, g], axis=-1)  # (b, T, G)
        return g * self.block + (inside <= targets[None, :, None]).sum(-1)

    # -- metrics of a batch of multiplicity rows (in sorted order) -----------------------------------

    def count(self, drawn: np.ndarray, w_row: np.ndarray, side_row: np.ndarray) -> None:
        """Count one resample: ``w_row`` ← multiplicity of each sorted position in ``drawn``, and
        ``side_row`` ← its per-row sparse sums (classwise). Runs in the drawing threads: the row is
        still in cache, and scipy's sparse product releases the GIL."""
        w_row[:] = np.bincount(drawn, minlength=self.n_padded)
        if self.classwise:
            kk = self.k * (self.m + 1)
            side_row[:kk] = self.cw_t @ w_row
            if self.compat:  # the reference averages over classes 0..max(label drawn)
                side_row[kk] = np.max(self.labels_sorted, where=w_row[: self.n] > 0, initial=-1)

    def metrics(self, w: np.ndarray, side: np.ndarray) -> dict[str, np.ndarray]:
        """Every wanted metric for each row of ``w`` (b, N_padded): multiplicities of the sorted samples.

        ``side`` (b, n_side): the rows' side sums from :meth:`count`. The sums run on ``self.ops``'s
        device; the small (b, M)-sized reduction is :meth:`reduce`, in numpy."""
        xp = self.ops
        b = w.shape[0]
        wb = xp.asarray(w).reshape(b, self.n_blocks, self.block)
        wt = xp.swap01(wb)
        sums = xp.concat([xp.matmul(wt, x) for x in self.d_groups], axis=2)  # (blocks, b, columns)
        block_prefix = xp.zeros((b, self.n_blocks + 1, 3))
        block_prefix[:, 1:, :] = xp.cumsum(xp.swap01(sums[:, :, :3]), axis=1)
        totals = xp.to_numpy(sums.sum(0))  # (b, columns)

        def bin_sums(starts):  # starts (b, M+1) → per-bin count, Σconf, Σcorrect (numpy)
            d = xp.diff(self._prefix(wb, block_prefix, starts), axis=1)
            return tuple(xp.to_numpy(v) for v in (xp.rint(d[..., 0]), d[..., 1], d[..., 2]))

        width = bin_sums(xp.broadcast_to(self.d_width_starts, (b, self.m + 1)))
        mass = None
        if self.need_adaece:
            mass = bin_sums(self._equal_mass_starts(self.equal_mass_edges(wb, block_prefix[:, :, 0])))
        return self.reduce(width, mass, totals, side)

    def reduce(self, width: tuple, mass: tuple | None, totals: np.ndarray, side: np.ndarray | None) -> dict:
        """Metrics of a batch from its small per-resample sums (shared by the numpy and torch engines).

        width / mass: (count, Σconf, Σcorrect) per resample and bin, each (b, M); totals: the column
        sums (b, columns); side: the side sums of :meth:`count` (b, n_side), or None. They become the
        registry's :class:`~calibrate_cli.metric_registry.MetricSums`, and every metric is computed by
        the same function as the point estimate (NaN for a metric whose sums were not computed).
        """
        return metric_values(self.sums(width, mass, totals, side))

    def sums(self, width: tuple, mass: tuple | None, totals: np.ndarray, side: np.ndarray | None) -> MetricSums:
        """The registry's sufficient sums of a batch of resamples (leading axis: the resample)."""
        dense = dict.fromkeys(DENSE_SUMS)
        if self.need_dense:  # the columns nll (finite part), #inf nll, brier, top5, s99, s99·correct
            d = totals[:, 3:9]
            dense = dict(nll=d[:, 0], nll_inf=d[:, 1], brier=d[:, 2], top5=d[:, 3], s99=d[:, 4], s99_correct=d[:, 5])
            if not self.has_top5:
                dense["top5"] = None
        gap = classes = None
        if self.classwise:
            gap, classes = self._classwise(totals[:, self.classwise_col :], side)
        return MetricSums(
            n=self.n,
            width=BinSums(*width),
            mass=None if mass is None else BinSums(*mass),
            correct=totals[:, 2],
            conf=totals[:, 1],
            classwise_gap=gap,
            classwise_classes=classes,
            **dense,
        )

    def _equal_mass_starts(self, edges):
        """Sorted-order start of each equal-mass bin of each resample, shape (b, M+1) (last = N)."""
        xp = self.ops
        if self.compat:
            edges = xp.to_float32(edges)
        starts = xp.searchsorted(self.d_conf, edges, right=True)  # (b, M+1): #conf ≤ e_j
        if self.lowest_closed:
            starts[:, 0] = 0
        starts[:, self.m] = self.n
        return starts

    def equal_mass_edges_of(self, w: np.ndarray) -> np.ndarray:
        """The equal-mass edges (b, M+1) of each multiplicity row of ``w`` (b, N_padded)."""
        xp = self.ops
        wb = xp.asarray(w).reshape(w.shape[0], self.n_blocks, self.block)
        count_prefix = xp.zeros((w.shape[0], self.n_blocks + 1))
        count_prefix[:, 1:] = xp.cumsum(wb.sum(2), axis=1)
        return xp.to_numpy(self.equal_mass_edges(wb, count_prefix))

    def equal_mass_edges(self, wb, count_prefix):
        """``np.interp(np.linspace(0, N, M+1), np.arange(N), sort(resampled conf))`` per row.

        The value at position t of the resampled sorted confidences is the sample whose cumulative
        weight first exceeds t; the interpolation repeats ``np.interp``'s arithmetic exactly.
        """
        xp = self.ops
        n, m = self.n, self.m
        x = np.linspace(0, n, m + 1)
        j0 = np.minimum(np.floor(x), n - 1).astype(np.int64)
        j1 = np.minimum(j0 + 1, n - 1)
        pos = self._positions_of_ranks(wb, count_prefix, xp.asarray(np.concatenate([j0, j1, [n - 1]])))
        fp = self.d_conf64[xp.minimum(pos, n - 1)]
        f0, f1, last = fp[:, : m + 1], fp[:, m + 1 : 2 * m + 2], fp[:, 2 * m + 2 :]
        x, j0 = xp.asarray(x), xp.asarray(j0)
        slope = (f1 - f0) / 1.0  # np.interp: (fp[j+1] − fp[j]) / (xp[j+1] − xp[j])
        res = slope * (x - j0) + f0
        res = xp.where(x == j0, f0, res)
        return xp.where(x >= n - 1, last, res)

    def _classwise(self, class_totals: np.ndarray, side: np.ndarray) -> tuple:
        """Per resample, Σ w_i([y_i = k] − p_ik) per (class, bin) (b, K, M) and the number of classes
        averaged (None: all K; compat: 0..max label drawn), from the class totals (b, K) and the side sums."""
        b, k, m = side.shape[0], self.k, self.m
        sums = side[:, : k * (m + 1)].reshape(b, k, m + 1).copy()  # outside the base slots
        base = class_totals - sums.sum(axis=2)  # base slot = class total − the other slots
        sums[:, np.arange(k), self.base_slot] = base
        # compat: the reference code averages over classes 0..max(label present)
        classes = side[:, k * (m + 1)] + 1 if self.compat else None
        return sums[:, :, :m], classes

    def weights(self, positions: np.ndarray) -> np.ndarray:
        """Multiplicity rows (b, N_padded) float64 from rows of drawn sorted positions."""
        out = np.empty((positions.shape[0], self.n_padded))
        for r, row in enumerate(positions):
            out[r] = np.bincount(row, minlength=self.n_padded)
        return out


def _on_device(engines: list, device: str) -> list:
    """The engines, set to run their per-batch math on ``device``."""
    ops = array_ops(device)
    return [e.use(ops) for e in engines]


def _scores_probs(predictions, compat) -> np.ndarray:
    from .probabilities import softmax

    dtype = np.float32 if compat else np.float64
    if predictions.input_kind == "logits":
        return softmax(np.asarray(predictions.scores), dtype=dtype)
    return np.asarray(predictions.scores, dtype=dtype)


def _prepare(scores, labels, input_kind, n_bins, compat, scores_name="scores", labels_name="labels", wanted=None):
    compat = check_compat(compat)
    predictions = as_predictions(scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name)
    summary = summarize(predictions, n_bins=n_bins, compat=compat, classwise=True)
    point = metrics_from_summary(summary, n_bins)
    need_probs = "classwise_gap" in sums_needed(wanted)
    engine = _Resampler(summary, _scores_probs(predictions, compat) if need_probs else None, n_bins, wanted)
    return predictions, summary, point, engine


def _batch_size(n: int, n_resamples: int, batch_size) -> int:
    if batch_size is None:
        return max(1, min(n_resamples, BATCH_ENTRIES // max(n, 1)))
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise InputError(f"Expected `batch_size` to be an integer larger than 0, but got {batch_size!r}")
    return int(batch_size)


def _check_indices(indices, n: int) -> np.ndarray:
    indices = np.asarray(indices)
    if indices.ndim != 2 or indices.shape[1] != n or not np.issubdtype(indices.dtype, np.integer):
        raise InputError(f"Expected `indices` to be an integer array of shape (B, {n}), but got {indices.shape}")
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        raise InputError(f"`indices` must lie in [0, {n})")
    return indices


MetricFn = Callable[[np.ndarray, np.ndarray], float]
Metrics = Sequence["str | MetricFn"] | Mapping[str, "str | MetricFn"] | None


def _metric_spec(metrics: Metrics) -> tuple[list[str] | None, dict[str, MetricFn]]:
    """(built-in metric names or None for all, {name: custom metric function}) of ``metrics``.

    Items are names from METRIC_NAMES or callables ``fn(scores, labels) -> float`` (named by their
    ``__name__``); a mapping names its entries itself.
    """
    if metrics is None:
        return None, {}
    if isinstance(metrics, str):
        raise InputError(f"Expected `metrics` to be a list of metric names or functions, but got the string {metrics!r}")
    items = list(metrics.items()) if isinstance(metrics, Mapping) else [(None, m) for m in metrics]
    builtin: list[str] = []
    custom: dict[str, MetricFn] = {}
    for key, item in items:
        if isinstance(item, str):
            if item not in METRIC_NAMES:
                raise InputError(f"unknown metric {item!r}; choose from {', '.join(METRIC_NAMES)} or pass a function")
            builtin.append(item)
        elif callable(item):
            name = key if key is not None else getattr(item, "__name__", None)
            if not isinstance(name, str) or not name or name == "<lambda>":
                raise InputError("a custom metric needs a name: pass {name: function} or a named function")
            if name in METRIC_NAMES or name in custom:
                raise InputError(f"custom metric name {name!r} is already taken; pass {{other_name: function}}")
            custom[name] = item
        else:
            raise InputError(f"Expected a metric name or a function, but got {item!r}")
    return builtin, custom


def _custom_value(name: str, fn: MetricFn, scores, labels) -> float:
    value = fn(scores, labels)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(f"custom metric {name!r} returned {value!r}, not a number") from None


def bootstrap_values(
    scores,
    labels,
    *,
    input_kind: InputKind = "logits",
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed=DEFAULT_SEED,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    indices: np.ndarray | None = None,
    progress: Progress | None = None,
    batch_size: int | None = None,
    metrics: Metrics = None,
    device: str = DEFAULT_DEVICE,
) -> tuple[dict, dict[str, np.ndarray]]:
    """(point metrics, {metric: the B bootstrap values}) — what :func:`bootstrap` summarises.

    ``indices`` (B, N): explicit resamples (row r draws samples ``indices[r]``; B = len(indices),
    ``n_resamples`` is then ignored), e.g. to reproduce another implementation's draws. Otherwise
    row r is ``np.random.default_rng(resample_streams(seed, B)[r]).integers(0, N, N)`` (its own
    stream, so independent of ``batch_size`` and of the drawing threads), read as positions in the
    (stable) order of increasing confidence, which saves a gather. Built-in metrics not in
    ``metrics`` (default: all) may be left NaN; custom metric functions in ``metrics`` (see
    :func:`bootstrap`) get their point value and B values under their names. ``device``: ``"cpu"``
    | ``"cuda"`` | ``"auto"`` | ``"torch-cpu"`` (module docstring); the same draws on every device.
    """
    check_device(device)  # an unavailable device fails before any work
    builtin, custom = _metric_spec(metrics)
    _, summary, point, engine = _prepare(scores, labels, input_kind, n_bins, compat, wanted=builtin)
    data = None
    if custom:
        data = (np.asarray(scores), np.asarray(labels))
        point = dict(point) | {name: _custom_value(name, fn, *data) for name, fn in custom.items()}
    engines = _on_device([engine], device)
    values = _run(engines, summary.n, n_resamples, seed, indices, progress, batch_size, custom, data)[0]
    return point, values


def resample_streams(seed, n_resamples: int) -> list[np.random.SeedSequence]:
    """One independent seed sequence per resample: ``SeedSequence(seed).spawn(n_resamples)``.

    Resample r draws ``np.random.default_rng(streams[r]).integers(0, N, N)``, so each resample is
    fixed by (seed, r) alone: results depend neither on the batch size nor on how many threads draw.
    ``seed``: an int, None (fresh entropy) or a :class:`numpy.random.SeedSequence`.
    """
    if isinstance(seed, np.random.SeedSequence):
        root = seed
    elif seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0):
        root = np.random.SeedSequence(None if seed is None else int(seed))
    else:
        raise InputError(f"Expected `seed` to be a non-negative integer, None or a SeedSequence, but got {seed!r}")
    return root.spawn(n_resamples)


def _run(
    engines, n, n_resamples, seed, indices, progress, batch_size, custom=None, data=None
) -> list[dict[str, np.ndarray]]:
    """Bootstrap values of every engine on the same resamples (the same drawn samples for all).

    Drawing and counting a resample (``integers`` + ``bincount``, ~8 ms at N = 10^6) costs about as
    much as its metrics, so the draws of the next batch run in a thread pool while the metrics of
    the current batch are computed (double buffering; numpy releases the GIL in both). ``custom``
    ({name: fn}, one engine only): functions called in this thread on ``data`` = (scores, labels)
    indexed by each resample's sample indices.
    """
    custom = custom or {}
    if indices is not None:
        indices = _check_indices(indices, n)
        n_resamples = indices.shape[0]
    _check_settings(n_resamples, 0.5, "basic")
    streams = resample_streams(seed, n_resamples) if indices is None else None
    size = _batch_size(n, n_resamples, batch_size)
    results = [{name: np.empty(n_resamples) for name in METRIC_NAMES} for _ in engines]
    results[0].update({name: np.empty(n_resamples) for name in custom})
    alone = indices is None and len(engines) == 1
    # two sets of reused buffers (multiplicities, side sums): one being filled while the other is measured
    buffers = [[(np.empty((size, e.n_padded)), np.empty((size, e.n_side))) for e in engines] for _ in range(2)]
    drawn_samples = [np.empty((size, n), dtype=np.int64) for _ in range(2)] if custom else None

    def draw(r: int, slot: int, row: int) -> None:
        drawn = indices[r] if indices is not None else np.random.default_rng(streams[r]).integers(0, n, n)
        for engine, (w, side) in zip(engines, buffers[slot]):
            # one model alone: the draws are positions in its confidence order; else sample indices
            engine.count(drawn if alone else engine.rank[drawn], w[row], side[row])
        if custom:
            drawn_samples[slot][row] = engines[0].order[drawn] if alone else drawn

    def submit(pool, start: int, slot: int) -> list:
        stop = min(n_resamples, start + size)
        return [pool.submit(draw, r, slot, r - start) for r in range(start, stop)]

    if progress is not None:
        progress(0, n_resamples)
    starts = list(range(0, n_resamples, size))
    with ThreadPoolExecutor(max_workers=cpu_threads(), thread_name_prefix="calib-draw") as pool:
        pending = submit(pool, 0, 0)
        for i, start in enumerate(starts):
            stop = min(n_resamples, start + size)
            for future in pending:
                future.result()  # re-raises a failed draw
            pending = submit(pool, starts[i + 1], (i + 1) % 2) if i + 1 < len(starts) else []
            for engine, (w, side), res in zip(engines, buffers[i % 2], results):
                batch = engine.metrics(w[: stop - start], side[: stop - start])
                for name in METRIC_NAMES:
                    res[name][start:stop] = batch[name]
            for row in range(stop - start):
                sample = drawn_samples[i % 2][row] if custom else None
                for name, fn in custom.items():
                    results[0][name][start + row] = _custom_value(name, fn, data[0][sample], data[1][sample])
            if progress is not None:
                progress(stop, n_resamples)
    return results


def _selected(point: dict, metrics: Metrics) -> list[str]:
    builtin, custom = _metric_spec(metrics)
    if builtin is None:
        return [name for name in METRIC_NAMES if point.get(name) is not None]
    return builtin + list(custom)


def bootstrap(
    scores,
    labels,
    *,
    input_kind: InputKind = "logits",
    n_resamples: int = DEFAULT_N_RESAMPLES,
    level: float = DEFAULT_CI_LEVEL,
    method: Method = DEFAULT_CI_METHOD,
    seed=DEFAULT_SEED,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    metrics: Metrics = None,
    indices: np.ndarray | None = None,
    progress: Progress | None = None,
    batch_size: int | None = None,
    device: str = DEFAULT_DEVICE,
) -> dict[str, ConfidenceInterval]:
    """Bootstrap confidence intervals of every metric of ``calib eval`` (SPEC §4).

    ``metrics``: names from :data:`~calibrate_cli.metrics.METRIC_NAMES` (default: every metric that
    is defined on the data) and/or your own metric functions ``fn(scores, labels) -> float``, as a
    list (a function is named by its ``__name__``) or a ``{name: function}`` mapping. A function is
    called on the arrays you passed, indexed by each resample's sample indices (the same draws as
    the built-in metrics; it runs once per resample, so it sets the speed); NaN marks a resample on
    which it is undefined. A metric whose point value is infinite (NLL with a zero probability)
    gets no interval. ``device``: where the resampling runs (``"cpu"`` numpy, ``"cuda"``,
    ``"auto"``, ``"torch-cpu"``; same draws, same results up to float64 rounding). ``progress(done, total)`` is called after each batch. Same seed (and same
    data), same intervals, whatever ``batch_size``.

    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> logits = rng.normal(size=(500, 3)); labels = rng.integers(0, 3, 500)
    >>> ci = bootstrap(logits, labels, n_resamples=200, metrics=["ece"])["ece"]
    >>> ci.low < ci.point < ci.high
    True
    >>> def top2(scores, labels):
    ...     return float(np.mean((np.argsort(-scores, axis=1)[:, :2] == labels[:, None]).any(axis=1)))
    >>> cis = bootstrap(logits, labels, n_resamples=100, metrics=["ece", top2])
    >>> sorted(cis)
    ['ece', 'top2']
    """
    _check_settings(n_resamples, level, method)
    if metrics is not None:
        _selected({}, metrics)  # unknown names fail before any work
    point, values = bootstrap_values(
        scores,
        labels,
        input_kind=input_kind,
        n_resamples=n_resamples,
        seed=seed,
        n_bins=n_bins,
        compat=compat,
        indices=indices,
        progress=progress,
        batch_size=batch_size,
        metrics=metrics,
        device=device,
    )
    selected = _selected(point, metrics)
    accel = _accelerations(scores, labels, input_kind, n_bins, compat, metrics, method)
    out = {}
    for name in selected:
        ci = confidence_interval(
            point[name], values[name], level=level, method=method,
            acceleration=accel.get(name, 0.0), bounds=METRIC_RANGES.get(name),
        )
        if ci is not None:
            out[name] = ci
    return out


def _accelerations(scores, labels, input_kind, n_bins, compat, metrics, method) -> dict[str, float]:
    """{metric: BCa acceleration} from the delete-a-group jackknife; {} unless ``method`` is bca."""
    if method != "bca":
        return {}
    jack = jackknife_values(scores, labels, input_kind=input_kind, n_bins=n_bins, compat=compat, metrics=metrics)
    return {name: jackknife_acceleration(v) for name, v in jack.items()}


# --------------------------------------------------------------------------- paired comparison


@dataclass(frozen=True)
class MetricDifference:
    """B − A for one metric: the two point values, their difference and its paired interval."""

    metric: str
    a: float | None
    b: float | None
    difference: float | None
    interval: ConfidenceInterval | None

    @property
    def significant(self) -> bool | None:
        """Whether the interval excludes 0 (None without an interval)."""
        return None if self.interval is None else self.interval.excludes(0.0)

    def to_dict(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "difference": self.difference,
            "interval": None if self.interval is None else self.interval.to_dict(),
            "excludes_zero": self.significant,
        }


@dataclass(frozen=True)
class Comparison:
    """Paired comparison of two models on the same samples (same labels)."""

    n: int
    k: int
    n_bins: int
    differences: dict[str, MetricDifference]

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "k": self.k,
            "n_bins": self.n_bins,
            "differences": {name: d.to_dict() for name, d in self.differences.items()},
        }


def compare(
    scores_a,
    labels_a,
    scores_b,
    labels_b,
    *,
    input_kind: InputKind = "logits",
    n_resamples: int = DEFAULT_N_RESAMPLES,
    level: float = DEFAULT_CI_LEVEL,
    method: Method = DEFAULT_CI_METHOD,
    seed=DEFAULT_SEED,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    indices: np.ndarray | None = None,
    progress: Progress | None = None,
    batch_size: int | None = None,
    names: tuple[str, str] = ("A", "B"),
    label_names: tuple[str, str] | None = None,
    device: str = DEFAULT_DEVICE,
) -> Comparison:
    """Difference B − A of every metric, with a paired-bootstrap interval.

    Each resample draws the same sample indices for both models (the pairing removes the variation
    that the two share), and the interval of the difference is computed from the B differences as
    in :func:`bootstrap`. The labels must be identical. ``n_resamples=0`` gives the differences only.
    ``names``/``label_names`` name the inputs in error messages (e.g. file paths). ``device`` as in
    :func:`bootstrap`.
    """
    check_device(device)
    la, lb = label_names or (f"{names[0]} labels", f"{names[1]} labels")
    _, sa, point_a, engine_a = _prepare(scores_a, labels_a, input_kind, n_bins, compat, names[0], la)
    _, sb, point_b, engine_b = _prepare(scores_b, labels_b, input_kind, n_bins, compat, names[1], lb)
    if sa.n != sb.n:
        raise InputError(f"{la} has {sa.n} samples and {lb} has {sb.n}: a paired comparison needs the same samples")
    if not np.array_equal(sa.labels, sb.labels):
        first = int(np.flatnonzero(sa.labels != sb.labels)[0])
        raise InputError(
            f"{la} and {lb} hold different labels (first at sample {first}): a paired comparison needs the same samples"
        )
    if sa.k != sb.k:
        raise InputError(f"{names[0]} has {sa.k} classes and {names[1]} has {sb.k}: they must match")
    values, accel = None, {}
    if n_resamples or indices is not None:
        _check_settings(n_resamples if indices is None else 1, level, method)
        va, vb = _run(_on_device([engine_a, engine_b], device), sa.n, n_resamples, seed, indices, progress, batch_size)
        values = {name: vb[name] - va[name] for name in METRIC_NAMES}
        if method == "bca":  # the jackknife of the difference: both models on the same groups
            ja, jb = (jackknife_values(s, y, input_kind=input_kind, n_bins=n_bins, compat=compat)
                      for s, y in ((scores_a, labels_a), (scores_b, labels_b)))
            accel = {name: jackknife_acceleration(jb[name] - ja[name]) for name in METRIC_NAMES}
    diffs = {}
    for name in METRIC_NAMES:
        a, b = point_a[name], point_b[name]
        if a is None or b is None:
            continue
        diff = b - a if math.isfinite(a) and math.isfinite(b) else None
        ci = None
        if values is not None and diff is not None:
            ci = confidence_interval(
                diff, values[name], level=level, method=method,
                acceleration=accel.get(name, 0.0), bounds=difference_range(METRIC_RANGES.get(name)),
            )
        diffs[name] = MetricDifference(name, a, b, diff, ci)
    return Comparison(sa.n, sa.k, n_bins, diffs)
