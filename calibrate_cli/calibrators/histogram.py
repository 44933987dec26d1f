"""Histogram binning (Zadrozny & Elkan 2001), one-vs-rest for K classes (Guo et al. 2017, §4.1).

For each class k, p_k = softmax(z)_k is put in one of M bins B_k1 … B_kM and replaced by
θ_kb = (1/|B_kb|) Σ_{i ∈ B_kb} [y_i = k], the share of class k among the fitting samples in that bin;
the K values of a row are then renormalised to sum to 1 (a row of zeros becomes uniform).

- ``histogram``: equal-width bins (b/M, (b+1)/M] (the first also holds 0), as ECE's bins;
- ``histogram_mass``: equal-mass bins per class, edges at the M-quantiles of the fitting set's p_k
  (``numpy.quantile``, linear), bins (e_b, e_{b+1}] with the outer ones open-ended.

Equal-width bins are counted a row chunk at a time (the scores are never held whole); equal-mass
edges need each class's N probabilities, so ``histogram_mass`` holds the (N, K) float64 probabilities
(made by row chunks; refused beyond N·K = :data:`~.base.CLASS_COLUMNS_MAX_VALUES`).

A bin with no fitting sample keeps its centre. Fewer than ``MIN_SAMPLES_PER_BIN`` fitting samples
per bin on average (N < 5·M) is refused: the shares would be mostly noise. Saved as
``{"method": "histogram", "k": K, "histogram": {"edges": [[M − 1 inner edges] × K],
"values": [[M values] × K]}}`` (the same for ``histogram_mass``).

>>> import numpy as np
>>> z = np.log(np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6]] * 3))
>>> cal = HistogramBinning(n_bins=2).fit(z, [0, 1, 1, 1] * 3)
>>> cal.values_.tolist()      # class 0: p_0 ≤ 0.5 never class 0, p_0 > 0.5 class 0 half the time
[[0.0, 0.5], [0.5, 1.0]]
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..metrics.functional import DEFAULT_N_BINS
from .base import (FitData, FitInfo, ProbabilityCalibrator, class_probabilities, json_numbers, nll_by_rows,
                   probabilities_of, renormalise)

__all__ = ["EqualMassHistogramBinning", "HistogramBinning", "MIN_SAMPLES_PER_BIN", "weighted_quantiles"]

#: fewest fitting samples per bin, on average, that histogram binning accepts
MIN_SAMPLES_PER_BIN = 5


class HistogramBinning(ProbabilityCalibrator):
    """One-vs-rest histogram binning on M equal-width bins (see the module docstring)."""

    name = "histogram"
    shift_invariant = True  # bins of softmax(z): the same for logits and log-probabilities
    takes_weights = True  # weighted bin counts (and weighted quantiles for the equal-mass edges)
    binning = "width"

    def __init__(self, edges=None, values=None, *, n_bins: int = DEFAULT_N_BINS):
        if (edges is None) != (values is None):
            raise InputError("histogram binning needs both edges and values (or neither, to fit them)")
        self.edges_ = None if edges is None else np.asarray(edges, dtype=np.float64)  # (K, M − 1)
        self.values_ = None if values is None else np.asarray(values, dtype=np.float64)  # (K, M)
        if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
            raise InputError(f"Expected `n_bins` to be an integer larger than 0, but got {n_bins!r}")
        self.n_bins = int(n_bins) if values is None else self.values_.shape[1]
        if self.values_ is not None:
            self.k = int(self.values_.shape[0])

    def _edges(self, p: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """The M − 1 inner edges of each class (K, M − 1)."""
        inner = np.arange(1, self.n_bins, dtype=np.float64) / self.n_bins
        return np.tile(inner, (p.shape[1], 1))

    def _fit(self, data: FitData, progress) -> FitInfo:
        # with sample weights: the rows of weight > 0 count (the weights' scale is free)
        n = data.n if data.weights is None else int(np.count_nonzero(data.weights))
        if n < MIN_SAMPLES_PER_BIN * self.n_bins:
            raise InputError(
                f"{data.scores_name}: histogram binning with {self.n_bins} bins needs at least "
                f"{MIN_SAMPLES_PER_BIN * self.n_bins} fitting samples ({MIN_SAMPLES_PER_BIN} per bin on average), got {n}; use fewer bins"
            )
        count, hits, edges = self._bin_sums(data, progress)
        lo = np.concatenate([np.zeros((data.k, 1)), edges], axis=1)
        hi = np.concatenate([edges, np.ones((data.k, 1))], axis=1)
        values = np.where(count > 0, hits / np.maximum(count, 1), 0.5 * (lo + hi))
        self.edges_, self.values_, self.k = edges, values, data.k
        return FitInfo(self.objectives[0], nll_by_rows(data, self._proba), nll_by_rows(data),
                       data.n, data.k, {"bins": self.n_bins, "binning": self.binning})

    def _bin_sums(self, data: FitData, progress) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(count, hits, edges): per class k and bin b, the (weighted) count of fitting samples with
        p_ik in bin b and of those with y_i = k, (K, M) each, and the inner edges (K, M − 1).
        Equal-width bins are the same for every class: the sums are made a row chunk at a time."""
        m, k = self.n_bins, data.k
        edges = self._edges(np.empty((0, k)))
        count, hits = np.zeros(k * m), np.zeros(k * m)
        offsets = np.arange(k) * m
        for rows in data.row_chunks():
            p, y = probabilities_of(data.rows(rows)), data.labels[rows]
            bins = np.searchsorted(edges[0], p, side="left")  # (e_b, e_{b+1}], the same edges for every class
            cells = (bins + offsets).ravel()
            at_label = y * m + bins[np.arange(y.shape[0]), y]  # the cell of (class y_i, the bin of p_{i,y_i})
            w = None if data.weights is None else data.weights[rows]
            count += np.bincount(cells, weights=None if w is None else np.repeat(w, k), minlength=k * m)
            hits += np.bincount(at_label, weights=w, minlength=k * m)
            if progress is not None:
                progress(rows.stop, data.n)
        return count.reshape(k, m), hits.reshape(k, m), edges

    @property
    def label(self) -> str:
        return f"histogram binning ({self.n_bins} equal-{'width' if self.binning == 'width' else 'mass'} bins)"

    def _proba(self, z: np.ndarray) -> np.ndarray:
        p = probabilities_of(z)
        if (self.edges_ == self.edges_[0]).all():  # the same edges for every class (equal-width): one search
            return renormalise(self.values_[np.arange(p.shape[1]), np.searchsorted(self.edges_[0], p, side="left")])
        q = np.empty_like(p)
        for k in range(p.shape[1]):
            q[:, k] = self.values_[k, np.searchsorted(self.edges_[k], p[:, k], side="left")]
        return renormalise(q)

    def get_params(self):
        if self.values_ is None:
            return None
        return {"edges": self.edges_.tolist(), "values": self.values_.tolist()}

    @classmethod
    def _from_params(cls, params, k):
        if not isinstance(params, dict):
            raise InputError(f'"{cls.name}" must be an object {{"edges": [[K × (M − 1)]], "values": [[K × M]]}}')
        values = params.get("values")
        edges = params.get("edges")
        if not isinstance(values, list) or not values or not isinstance(edges, list) or len(edges) != len(values):
            raise InputError(f'"{cls.name}" needs "values" (K rows of M numbers) and "edges" (K rows of M − 1)')
        v = [json_numbers(row, f"{cls.name} values[{i}]") for i, row in enumerate(values)]
        e = [json_numbers(row, f"{cls.name} edges[{i}]") if row != [] else [] for i, row in enumerate(edges)]
        m = len(v[0])
        if any(len(row) != m for row in v) or any(len(row) != m - 1 for row in e) or len(v) < 2:
            raise InputError(f"{cls.name}: values must be K ≥ 2 rows of M numbers and edges K rows of M − 1")
        if any(not 0 <= x <= 1 for row in v for x in row):
            raise InputError(f"{cls.name}: values must be probabilities in [0, 1]")
        if any(np.any(np.diff(row) < 0) for row in e):
            raise InputError(f"{cls.name}: each row of edges must be non-decreasing")
        if k is not None and k != len(v):
            raise InputError(f"{cls.name} has {len(v)} rows of values but \"k\" is {k}")
        return cls(e, v)


class EqualMassHistogramBinning(HistogramBinning):
    """One-vs-rest histogram binning on M equal-mass bins per class (edges: quantiles of the
    fitting set's p_k)."""

    name = "histogram_mass"
    binning = "mass"

    def _bin_sums(self, data: FitData, progress) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`HistogramBinning._bin_sums` on each class's own edges: the quantiles of its N
        probabilities, so the (N, K) probabilities are held (made by row chunks)."""
        p = class_probabilities(data, "equal-mass histogram binning")
        edges = self._edges(p, data.weights)
        count, hits = np.empty((data.k, self.n_bins)), np.empty((data.k, self.n_bins))
        w = np.ones(data.n) if data.weights is None else data.weights
        for k in range(data.k):
            bins = np.searchsorted(edges[k], p[:, k], side="left")  # (e_b, e_{b+1}]
            count[k] = np.bincount(bins, weights=None if data.weights is None else w, minlength=self.n_bins)
            hits[k] = np.bincount(bins, weights=w * (data.labels == k), minlength=self.n_bins)
            if progress is not None:
                progress(k + 1, data.k)
        return count, hits, edges

    def _edges(self, p: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        levels = np.arange(1, self.n_bins, dtype=np.float64) / self.n_bins
        if self.n_bins == 1:
            return np.zeros((p.shape[1], 0))
        if weights is not None:
            return np.stack([weighted_quantiles(p[:, k], weights, levels) for k in range(p.shape[1])])
        return np.stack([np.quantile(p[:, k], levels) for k in range(p.shape[1])])


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """``np.quantile(values, levels)`` (method "linear") of the rows repeated by their weights: the
    virtual index (W − 1)·q, W = Σw, between the values at ranks ⌊·⌋ and ⌊·⌋ + 1 of the repeated rows
    (the value at rank t: the first, ascending, whose cumulative weight exceeds t), numpy's ``_lerp``."""
    order = np.argsort(values, kind="stable")
    v, w = np.asarray(values, dtype=np.float64)[order], weights[order]
    cum = np.cumsum(w)
    total = float(cum[-1])
    top = int(np.flatnonzero(w > 0)[-1])

    def at(ranks):
        return v[np.minimum(np.searchsorted(cum, ranks, side="right"), top)]

    index = (total - 1) * levels
    below = np.floor(index)
    gamma = index - below
    a, b = at(below), at(below + 1)
    diff = b - a
    out = a + diff * gamma
    out = np.where(gamma >= 0.5, b - diff * (1 - gamma), out)
    return np.where(index >= total - 1, v[top], out)
