"""Sample weights: every metric of the registry on weighted samples (docs/weights.md).

A sample of weight w_i ≥ 0 counts w_i times in every sum: a bin's count is Σ_{i ∈ B} w_i, its
Σconf is Σ_{i ∈ B} w_i conf_i, and N becomes W = Σ_i w_i, so for example

    ECE_w = (1/W) Σ_b |Σ_{i ∈ B_b} w_i (correct_i − conf_i)|,   NLL_w = (1/W) Σ_i w_i (−log p_{i,y_i}).

Whole-number weights give exactly the metric of the data with row i repeated w_i times (within the
numeric contract: the sums run in another order); a weight of 0 removes the row. The equal-mass edges
of AdaECE are those of the repeated rows: the value at rank t is the first confidence (ascending)
whose cumulative weight exceeds t, interpolated as ``np.interp`` over ranks 0..⌈W⌉ − 1. ACE's edges
are ranks of the repeated rows too, so it takes whole-number weights only.

:class:`WeightedColumns` holds the per-sample quantities sorted by confidence once; its
:meth:`~WeightedColumns.sums` turns one row of weights into the registry's
:class:`~calibrate_cli.metrics.registry.MetricSums` (n = W), for the point estimate and for each
bootstrap resample (weights × multiplicities). The summary pass gives the per-sample columns (as
for the bootstrap); the weighted sums over them are plain numpy, on the CPU.
"""

from __future__ import annotations

import math

import numpy as np

from ..engine.binning import S99_THRESHOLD, BinStats, assign_bins, uniform_edges
from ..engine.sorting import tie_tolerant
from ..engine.class_samples import ClassSamples, ClassSorted
from ..errors import InputError
from .registry import DENSE_SUMS, BinSums, MetricSums, WeightedSamples, metric_spec, metric_values

__all__ = ["WEIGHTED_COLUMN_SUMS", "WeightedColumns", "check_names", "check_weights", "mass_edges", "rank_interp",
           "weighted_columns", "weighted_ece", "whole_numbers"]

#: the summary pass's request for the per-sample columns the weighted sums are made from
WEIGHTED_COLUMN_SUMS = DENSE_SUMS | {"width", "correct", "conf"}


def check_weights(weights, n: int, *, name: str = "weights") -> np.ndarray:
    """``weights`` as (N,) float64, checked: numbers, one per sample, finite, ≥ 0, not all 0.
    An (N, 1) column is accepted. Raises :class:`~calibrate_cli.errors.InputError` naming ``name``."""
    w = np.asarray(weights)
    if w.dtype.kind not in "biuf":
        raise InputError(f"{name}: weights must be numbers, got dtype {w.dtype}")
    if w.ndim == 2 and w.shape[1] == 1:
        w = w[:, 0]
    if w.ndim != 1:
        raise InputError(f"{name}: expected one weight per sample, shape (N,), got shape {w.shape}")
    if w.shape[0] != n:
        raise InputError(f"{name}: {w.shape[0]} weights for {n} samples")
    w = w.astype(np.float64)
    bad = ~np.isfinite(w)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(f"{name}: weight {w[row]} at row {row}: weights must be finite")
    if (w < 0).any():
        row = int(np.flatnonzero(w < 0)[0])
        raise InputError(f"{name}: weight {w[row]:g} at row {row}: weights must be ≥ 0")
    total = float(np.sum(w))
    if not total > 0:
        raise InputError(f"{name}: every weight is 0: nothing to measure")
    if not math.isfinite(total):
        raise InputError(f"{name}: the weights sum to more than float64 holds")
    return w


def whole_numbers(w: np.ndarray) -> bool:
    """Whether every weight is a whole number (the weights of repeated rows)."""
    return bool(np.all(w == np.round(w)))


def mass_edges(conf_sorted: np.ndarray, w: np.ndarray, total: float, n_bins: int) -> np.ndarray:
    """The equal-mass edges of the repeated rows: ``np.interp(linspace(0, W, M+1), ranks, values)``,
    the value at rank t the first confidence (ascending ``conf_sorted``, weights ``w`` in that order)
    whose cumulative weight exceeds t, ranks 0..⌈W⌉ − 1 (for whole numbers: the repeated rows' sort)."""
    return rank_interp(np.linspace(0, total, n_bins + 1), conf_sorted, w, total)


def rank_interp(x: np.ndarray, values_sorted: np.ndarray, w: np.ndarray, total: float) -> np.ndarray:
    """``np.interp(x, arange(W), repeated)`` where ``repeated`` is ``values_sorted`` (ascending) with
    each value repeated by its weight ``w``: the value at rank t is the first whose cumulative weight
    exceeds t (ranks 0..⌈W⌉ − 1, W = ``total``), interpolated with ``np.interp``'s arithmetic."""
    conf_sorted = values_sorted
    cum = np.cumsum(w)
    last_rank = math.ceil(total) - 1
    top = int(np.flatnonzero(w > 0)[-1])

    def at(ranks):
        return conf_sorted[np.minimum(np.searchsorted(cum, ranks, side="right"), top)]

    j0 = np.minimum(np.floor(x), last_rank)
    j1 = np.minimum(j0 + 1, last_rank)
    f0, f1, last = at(j0), at(j1), at(np.array([float(last_rank)]))
    slope = (f1 - f0) / 1.0  # np.interp's arithmetic (its ranks are 1 apart)
    res = slope * (x - j0) + f0
    res = np.where(x == j0, f0, res)
    return np.where(x >= last_rank, last, res)


def weighted_ece(conf, correct, w, n_bins: int, *, equal_mass: bool = False) -> float:
    """(1/W) Σ_b |Σ_{i ∈ B_b} w_i (correct_i − conf_i)| over the equal-width bins, or the equal-mass
    bins of the weighted samples (:func:`mass_edges`): the ECE / AdaECE of weighted top-label samples."""
    conf = np.asarray(conf, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    total = float(np.sum(w))
    if equal_mass:
        order = np.argsort(conf, kind="stable")
        edges = mass_edges(conf[order], w[order], total, n_bins)
    else:
        edges = uniform_edges(n_bins)
    idx = assign_bins(conf, tie_tolerant(edges) if equal_mass else edges)
    gap = np.bincount(idx, weights=w * (np.asarray(correct, dtype=np.float64) - conf), minlength=n_bins)
    return float(np.abs(gap).sum() / total)


class WeightedColumns:
    """The per-sample quantities of a summary (with its columns) sorted by confidence, and the
    registry's sums of any row of weights over them (:meth:`sums`).

    ``summary``: a :class:`~calibrate_cli.engine.summary.PredictionSummary` with its columns (conf,
    correct, NLL, Brier, top-5); ``probs``: the (N, K) float64 probabilities when a classwise metric
    is wanted (else None); ``class_sorted``: each class's sorted probabilities (ACE, classwise RMS/KS)
    or None; ``needed``: the registry's sums wanted (:func:`~calibrate_cli.metrics.registry.sums_needed`).
    """

    def __init__(self, summary, n_bins: int, needed, *, probs=None, class_sorted: ClassSorted | None = None):
        s = summary
        self.n, self.k, self.m = s.n, s.k, n_bins
        self.needed = frozenset(needed)
        conf = np.asarray(s.confidences, dtype=np.float64)
        self.order = np.argsort(conf, kind="stable")
        self.rank = np.empty(self.n, dtype=np.int64)
        self.rank[self.order] = np.arange(self.n)
        o = self.order
        self.conf = conf[o]
        self.correct = np.asarray(s.correct)[o].astype(np.float64)
        self.edges = uniform_edges(n_bins)
        self.width_idx = assign_bins(self.conf, self.edges)
        nll = np.asarray(s.nll, dtype=np.float64)[o]
        self.nll_inf = ~np.isfinite(nll)
        self.nll = np.where(self.nll_inf, 0.0, nll)
        self.brier = np.asarray(s.brier, dtype=np.float64)[o]
        self.top5 = None if s.top5 is None else np.asarray(s.top5)[o].astype(np.float64)
        self.s99 = (self.conf >= S99_THRESHOLD).astype(np.float64)
        self.class_keys = self.class_gap = None
        if "classwise_gap" in self.needed and probs is not None:  # per (i, k): the bin of p_ik, [y_i = k] − p_ik
            p = np.asarray(probs, dtype=np.float64)
            self.class_keys = assign_bins(p, self.edges) + (np.arange(self.k, dtype=np.int64) * n_bins)[None, :]
            gap = -p
            gap[np.arange(self.n), s.labels] += 1.0
            self.class_gap = gap  # sample order (not sorted)
        self.class_sorted = class_sorted if "class_samples" in self.needed else None

    def in_sample_order(self, w_sorted: np.ndarray) -> np.ndarray:
        """A row of weights in confidence order → the same weights in sample order."""
        return w_sorted[self.rank]

    def mass_edges(self, w: np.ndarray, total: float) -> np.ndarray:
        """:func:`mass_edges` of these samples with the weights ``w`` (confidence order)."""
        return mass_edges(self.conf, w, total, self.m)

    def _bins(self, idx: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = self.m
        return (np.bincount(idx, weights=w, minlength=m), np.bincount(idx, weights=w * self.conf, minlength=m),
                np.bincount(idx, weights=w * self.correct, minlength=m))

    def bin_stats(self, w: np.ndarray, edges: np.ndarray | None = None) -> BinStats:
        """The weighted equal-width bins (or the equal-mass bins of ``edges``, compared as
        :func:`~calibrate_cli.engine.sorting.tie_tolerant` raises them) as :class:`BinStats` (counts Σw, n = W)."""
        idx = self.width_idx if edges is None else assign_bins(self.conf, tie_tolerant(edges))
        count, sum_conf, sum_correct = self._bins(idx, w)
        return BinStats(self.edges if edges is None else edges, count, sum_conf, sum_correct, float(np.sum(w)))

    def sums(self, w: np.ndarray) -> MetricSums:
        """The registry's sums (a batch of one, n = W = Σw) of the weights ``w`` (N,), in confidence order."""
        needed = self.needed
        total = float(np.sum(w))
        one = lambda x: np.array([float(x)])  # noqa: E731
        width = BinSums(*(a[None] for a in self._bins(self.width_idx, w)))
        mass = None
        if "mass" in needed:
            mass_idx = assign_bins(self.conf, tie_tolerant(self.mass_edges(w, total)))
            mass = BinSums(*(a[None] for a in self._bins(mass_idx, w)))
        with np.errstate(over="ignore"):
            nll, nll_scale = float(np.sum(w * self.nll)), 1.0
        if math.isinf(nll):  # finite terms whose weighted sum overflows: the sum divided by W
            nll, nll_scale = float(np.sum((w / total) * self.nll)), total
        w_orig = None
        if self.class_gap is not None or self.class_sorted is not None:
            w_orig = self.in_sample_order(w)
        gap = None
        if self.class_gap is not None:
            km = self.k * self.m
            gap = np.bincount(self.class_keys.ravel(), weights=(w_orig[:, None] * self.class_gap).ravel(),
                              minlength=km).reshape(1, self.k, self.m)
        return MetricSums(
            n=total,
            width=width,
            mass=mass,
            correct=one(np.sum(w * self.correct)),
            conf=one(np.sum(w * self.conf)),
            nll=one(nll),
            nll_inf=one(np.sum(w[self.nll_inf])),
            nll_scale=nll_scale,
            brier=one(np.sum(w * self.brier)),
            top5=None if self.top5 is None else one(np.sum(w * self.top5)),
            s99=one(np.sum(w * self.s99)),
            s99_correct=one(np.sum(w * self.s99 * self.correct)),
            classwise_gap=gap,
            samples=WeightedSamples(self.conf, self.correct, w[None]) if "samples" in needed else None,
            class_samples=None if self.class_sorted is None else ClassSamples(self.class_sorted, w_orig[None]),
        )

    def values(self, w: np.ndarray, names) -> dict[str, float]:
        """{name: value} of the metrics ``names`` for the weights ``w`` (confidence order); NaN where
        undefined, and every metric NaN when all of ``w`` is 0 (a resample of zero-weight rows only)."""
        if not np.any(w > 0):
            return {name: math.nan for name in names}
        return {name: float(v[0]) for name, v in metric_values(self.sums(w), names).items()}


def weighted_columns(predictions, n_bins: int, needed, *, scores_name: str = "scores"):
    """(checked predictions, their summary with its columns, :class:`WeightedColumns`) of validated
    ``predictions`` (:func:`~calibrate_cli.data.predictions.as_predictions`, values checked by the pass),
    made for the registry's sums ``needed``: the probabilities only when a classwise metric is among them."""
    import dataclasses

    from ..engine.class_samples import probabilities_by_rows, sort_classes
    from ..engine.summary import SummaryRequest, summarize

    summary = summarize(predictions, n_bins=n_bins, request=SummaryRequest(sums=WEIGHTED_COLUMN_SUMS, columns=True),
                        scores_name=scores_name)
    predictions = dataclasses.replace(predictions, pending=None)
    probs = None
    if needed & {"classwise_gap", "class_samples"}:
        probs = probabilities_by_rows(predictions.scores, predictions.input_kind)  # no widened copy of the scores
    class_sorted = sort_classes(probs, predictions.labels) if "class_samples" in needed else None
    return predictions, summary, WeightedColumns(summary, n_bins, needed, probs=probs, class_sorted=class_sorted)


def check_names(names, w: np.ndarray, name: str) -> None:
    """Refuse the metrics that cannot take these weights: those whose bins are ranks of the repeated
    rows (``MetricSpec.whole_weights``: ACE) need whole numbers."""
    whole = [metric_spec(n).display_name for n in dict.fromkeys(names) if metric_spec(n).whole_weights]
    if whole and not whole_numbers(w):
        raise InputError(f"{name}: {', '.join(whole)} takes whole-number weights only (its equal-mass edges are "
                         "ranks of repeated rows); leave it out or round the weights")
