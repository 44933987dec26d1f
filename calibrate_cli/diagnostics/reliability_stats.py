"""How sure a reliability diagram is: per-bin intervals, consistency bands and a test of calibration.

- **Clopper–Pearson** intervals of each bin's accuracy (exact binomial; Clopper & Pearson 1934): with
  x correct of n in the bin and α = 1 − level,
  low = Beta⁻¹(α/2; x, n − x + 1) (0 when x = 0), high = Beta⁻¹(1 − α/2; x + 1, n − x) (1 when x = n).
- **Consistency bands** (Bröcker & Smith 2007, "consistency resampling"): where a calibrated forecaster's
  per-bin observed frequency falls. Each resample draws N forecasts x* from the observed confidences
  with replacement (or keeps them, ``resample_forecasts=False``) and outcomes y* ~ Bernoulli(x*);
  the band of bin b is the [α/2, 1 − α/2] quantiles (numpy's linear interpolation) of the resamples'
  accuracy in bin b, over the resamples where it holds samples.
- **Calibration test**: T = the ECE on M equal-width bins (docs/metrics.md); under the null of
  calibration the outcomes are y*_i ~ Bernoulli(conf_i) (confidences fixed); with B resamples,
  p = (1 + #{T* ≥ T}) / (B + 1) (Davison & Hinkley 1997, eq. 4.11).
- **CORP reliability diagram** (Dimitriadis, Gneiting & Jordan 2021): the PAV recalibration of the
  confidences, a step function with no binning choice.

Random draws go through ``np.random.default_rng(seed)``, chunk of resamples by chunk, each chunk
drawing its indices ``rng.integers(0, N, (b, N))`` (bands only) and then its uniforms ``rng.random((b, N))``;
y* = [u < x*].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .decomposition import check_binary, pav_recalibrate

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_BAND_LEVEL",
    "DEFAULT_RESAMPLES",
    "BinIntervals",
    "ConsistencyBands",
    "CalibrationTest",
    "CorpReliability",
    "clopper_pearson",
    "bin_intervals",
    "reliability_intervals",
    "consistency_bands",
    "calibration_test",
    "corp_reliability",
]

#: level of the per-bin Clopper–Pearson intervals
DEFAULT_LEVEL = 0.95
#: level of the consistency bands (Bröcker & Smith 2007 draw 5–95 %)
DEFAULT_BAND_LEVEL = 0.9
DEFAULT_RESAMPLES = 1000
#: resample values drawn at a time (bounded memory whatever N and B)
_CHUNK = 1 << 22


def _check_level(level: float, name: str = "level") -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) or not 0.0 < level < 1.0:
        raise InputError(f"Expected `{name}` to be a number in (0, 1), e.g. 0.95, but got {level!r}")
    return float(level)


def _check_resamples(n_resamples: int) -> int:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise InputError(f"Expected `n_resamples` to be an integer larger than 0, but got {n_resamples!r}")
    return int(n_resamples)


def clopper_pearson(successes, trials, level: float = DEFAULT_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Clopper–Pearson (exact binomial) interval of a proportion, elementwise: (low, high) as float64
    arrays; low = Beta⁻¹(α/2; x, n − x + 1) or 0 at x = 0, high = Beta⁻¹(1 − α/2; x + 1, n − x) or 1
    at x = n, α = 1 − level; NaN where n = 0.

    >>> [round(float(v), 4) for v in clopper_pearson(3, 10)]
    [0.0667, 0.6525]
    """
    from scipy.stats import beta

    level = _check_level(level)
    x = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(~np.isfinite(x)) or np.any(~np.isfinite(n)) or np.any(x < 0) or np.any(x > n) \
            or np.any(x != np.round(x)) or np.any(n != np.round(n)):
        raise InputError("clopper_pearson: expected whole numbers 0 ≤ successes ≤ trials")
    alpha = 1.0 - level
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(x > 0, beta.ppf(alpha / 2, np.maximum(x, 1), n - x + 1), 0.0)
        high = np.where(x < n, beta.ppf(1 - alpha / 2, x + 1, np.maximum(n - x, 1)), 1.0)
    empty = n == 0
    return np.where(empty, np.nan, low), np.where(empty, np.nan, high)


@dataclass(frozen=True)
class BinIntervals:
    """Per equal-width bin: count, mean confidence, accuracy and its Clopper–Pearson interval
    (``low``, ``high``; NaN for an empty bin) at ``level``."""

    edges: np.ndarray
    count: np.ndarray
    mean_confidence: np.ndarray
    accuracy: np.ndarray
    low: np.ndarray
    high: np.ndarray
    level: float

    def to_rows(self) -> list[dict]:
        """One dict per bin: lower, upper, count, mean_confidence, accuracy, accuracy_low, accuracy_high
        (None where the bin is empty)."""
        def opt(v) -> float | None:
            return None if np.isnan(v) else float(v)

        return [
            {"lower": float(self.edges[b]), "upper": float(self.edges[b + 1]), "count": int(self.count[b]),
             "mean_confidence": opt(self.mean_confidence[b]), "accuracy": opt(self.accuracy[b]),
             "accuracy_low": opt(self.low[b]), "accuracy_high": opt(self.high[b])}
            for b in range(self.count.shape[0])
        ]

    def to_dict(self) -> dict:
        return {"level": self.level, "method": "clopper-pearson", "bins": self.to_rows()}


def bin_intervals(bins, level: float = DEFAULT_LEVEL) -> BinIntervals:
    """The Clopper–Pearson intervals of the accuracy of each bin of ``bins``
    (:class:`~calibrate_cli.binning.BinStats` of top-label confidences and correctness)."""
    count = np.asarray(bins.count)
    correct = np.round(np.asarray(bins.sum_correct, dtype=np.float64))  # sums of 0/1: whole numbers
    low, high = clopper_pearson(correct, count, level)
    return BinIntervals(np.asarray(bins.edges, dtype=np.float64), count, bins.mean_confidence, bins.accuracy,
                        low, high, float(level))


def reliability_intervals(confidences, correct, n_bins: int = 15, level: float = DEFAULT_LEVEL) -> BinIntervals:
    """Clopper–Pearson intervals of the accuracy in each of M equal-width bins (b/M, (b+1)/M] of the
    top-label ``confidences`` (the ECE's bins; lowest bin closed)."""
    from ..engine.binning import bin_statistics, uniform_edges

    x, y = check_binary(confidences, correct)
    return bin_intervals(bin_statistics(x, y, uniform_edges(n_bins)), level)


def _row_bin_sums(idx: np.ndarray, values: np.ndarray, m: int) -> np.ndarray:
    """Σ values per (row, bin) of (R, N) bin indices ``idx``: an (R, M) float64 array."""
    rows = idx.shape[0]
    keys = (idx + (np.arange(rows, dtype=np.int64) * m)[:, None]).ravel()
    return np.bincount(keys, weights=values.ravel().astype(np.float64), minlength=rows * m).reshape(rows, m)


def _chunks(n_resamples: int, n: int):
    step = max(1, _CHUNK // max(n, 1))
    for start in range(0, n_resamples, step):
        yield min(step, n_resamples - start)


@dataclass(frozen=True)
class ConsistencyBands:
    """Per equal-width bin, the [α/2, 1 − α/2] quantiles (``low``, ``high``) of a calibrated forecaster's
    accuracy in that bin (Bröcker & Smith 2007); NaN where no resample put a sample in the bin.
    ``filled``: the number of resamples in which the bin held samples."""

    edges: np.ndarray
    low: np.ndarray
    high: np.ndarray
    filled: np.ndarray
    level: float
    n_resamples: int
    seed: int | None
    resample_forecasts: bool

    def to_dict(self) -> dict:
        def opt(v) -> float | None:
            return None if np.isnan(v) else float(v)

        return {
            "level": self.level, "n_resamples": self.n_resamples, "seed": self.seed,
            "resample_forecasts": self.resample_forecasts,
            "bins": [{"lower": float(self.edges[b]), "upper": float(self.edges[b + 1]), "low": opt(self.low[b]),
                      "high": opt(self.high[b]), "filled": int(self.filled[b])} for b in range(self.low.shape[0])],
        }


def consistency_bands(confidences, n_bins: int = 15, *, n_resamples: int = DEFAULT_RESAMPLES,
                      level: float = DEFAULT_BAND_LEVEL, seed: int | None = 0,
                      resample_forecasts: bool = True) -> ConsistencyBands:
    """Consistency bands of a reliability diagram under the calibrated null (Bröcker & Smith 2007):
    B resamples of (x*, y* ~ Bernoulli(x*)), x* drawn from ``confidences`` with replacement (or the
    confidences themselves with ``resample_forecasts=False``); per bin the quantiles at α/2 and
    1 − α/2 of the resamples' accuracy in it (see the module docstring for the order of the draws)."""
    from ..engine.binning import assign_bins, uniform_edges

    level = _check_level(level)
    n_resamples = _check_resamples(n_resamples)
    x, _ = check_binary(confidences, np.zeros(np.shape(confidences)[:1]))
    edges = uniform_edges(n_bins)
    m = edges.shape[0] - 1
    n = x.shape[0]
    rng = np.random.default_rng(seed)
    base_idx = assign_bins(x, edges)
    freqs = []
    for rows in _chunks(n_resamples, n):
        if resample_forecasts:
            pick = rng.integers(0, n, size=(rows, n))
            xs, idx = x[pick], base_idx[pick]
        else:
            xs, idx = np.broadcast_to(x, (rows, n)), np.broadcast_to(base_idx, (rows, n))
        hits = rng.random((rows, n)) < xs
        counts = _row_bin_sums(idx, np.ones((rows, n)), m)
        sums = _row_bin_sums(idx, hits, m)
        with np.errstate(invalid="ignore", divide="ignore"):
            freqs.append(np.where(counts > 0, sums / counts, np.nan))
    freq = np.concatenate(freqs, axis=0)
    filled = np.sum(~np.isnan(freq), axis=0)
    alpha = 1.0 - level
    low = np.full(m, np.nan)
    high = np.full(m, np.nan)
    for b in np.flatnonzero(filled):
        values = freq[:, b][~np.isnan(freq[:, b])]
        low[b], high[b] = np.quantile(values, [alpha / 2, 1 - alpha / 2])
    return ConsistencyBands(edges, low, high, filled, level, n_resamples, seed, bool(resample_forecasts))


@dataclass(frozen=True)
class CalibrationTest:
    """A resampling test of calibration: ``statistic`` T (the equal-width ECE), ``p_value``
    = (1 + #{T* ≥ T}) / (B + 1) under the null y*_i ~ Bernoulli(conf_i), and ``null_mean`` = mean T*."""

    statistic: float
    p_value: float
    null_mean: float
    n_resamples: int
    n_bins: int
    seed: int | None

    def to_dict(self) -> dict:
        return {"statistic": "ece", "value": self.statistic, "p_value": self.p_value, "null_mean": self.null_mean,
                "n_resamples": self.n_resamples, "n_bins": self.n_bins, "seed": self.seed,
                "null": "outcomes ~ Bernoulli(confidence)"}


def calibration_test(confidences, correct, *, n_bins: int = 15, n_resamples: int = DEFAULT_RESAMPLES,
                     seed: int | None = 0) -> CalibrationTest:
    """Test of calibration: T = ECE = (1/N) Σ_b |Σ_{B_b} correct − Σ_{B_b} conf| on M equal-width bins;
    B resamples of outcomes y*_i ~ Bernoulli(conf_i), y* = [u < conf] with u = rng.random; the p-value
    (1 + #{T* ≥ T}) / (B + 1) is small when the model is miscalibrated (a CI gate: fail when p < 0.05)."""
    from ..engine.binning import assign_bins, uniform_edges

    n_resamples = _check_resamples(n_resamples)
    x, y = check_binary(confidences, correct)
    edges = uniform_edges(n_bins)
    m = edges.shape[0] - 1
    n = x.shape[0]
    idx = assign_bins(x, edges)
    conf_sums = np.bincount(idx, weights=x, minlength=m)

    def ece_rows(outcomes: np.ndarray) -> np.ndarray:  # one code path for T and every T*: ties compare exactly
        rows = outcomes.shape[0]
        sums = _row_bin_sums(np.broadcast_to(idx, (rows, n)), outcomes, m)
        return np.abs(sums - conf_sums).sum(axis=1) / n

    observed = float(ece_rows(y[None, :])[0])
    rng = np.random.default_rng(seed)
    exceed = 0
    total = 0.0
    for rows in _chunks(n_resamples, n):
        t = ece_rows(rng.random((rows, n)) < x)
        exceed += int(np.count_nonzero(t >= observed))
        total += math.fsum(t)
    return CalibrationTest(observed, (1 + exceed) / (n_resamples + 1), total / n_resamples, n_resamples, m, seed)


@dataclass(frozen=True)
class CorpReliability:
    """A CORP reliability diagram (Dimitriadis et al. 2021): the distinct confidences ``x`` (ascending),
    their PAV-recalibrated accuracy ``recalibrated`` and how many samples share each (``count``)."""

    x: np.ndarray
    recalibrated: np.ndarray
    count: np.ndarray

    def to_dict(self) -> dict:
        return {"x": self.x.tolist(), "recalibrated": self.recalibrated.tolist(), "count": self.count.tolist()}


def corp_reliability(confidences, correct) -> CorpReliability:
    """The CORP reliability curve of top-label ``confidences`` and ``correct``: PAV recalibration at
    each distinct confidence (ties pooled), no bins to choose."""
    x, y = check_binary(confidences, correct)
    recal = pav_recalibrate(x, y)
    xs, first, count = np.unique(x, return_index=True, return_counts=True)
    return CorpReliability(xs, recal[first], count)
