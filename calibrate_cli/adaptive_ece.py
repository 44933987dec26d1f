"""ACE, the adaptive calibration error of Nixon et al. (2019): classwise, equal-mass bins.

    ACE = (1/K) Σ_k Σ_r (1/N) |Σ_{i ∈ B_kr} ([y_i = k] − p_ik)|

For each class k, all N values p_ik are split into R equal-mass bins B_k1..B_kR (R = the number of bins,
``--n-bins``), and each bin's gap between the share of samples of class k and their mean p_k is
weighted by the bin's share of the samples (as in the reference code; with equal-mass bins the
weights are nearly equal, 1/R). The bins follow Nixon et al.'s reference implementation,
``uncertainty_metrics.numpy.ace`` (= ``gce(binning_scheme="adaptive", class_conditional=True,
max_prob=False, norm="l1")``), exactly:

- upper edges: the sorted p_k at ranks ``round(linspace(0, N, R, endpoint=False))[1:]`` (numpy's
  round, half to even; ranks capped at N − 1);
- a value equal to an edge goes to the bin above it (``np.digitize``, right-open bins), so a run of
  tied values never straddles two bins, and a bin may be empty.

Nixon, Dusenberry, Zhang, Jerfel & Tran, "Measuring Calibration in Deep Learning", CVPR Workshops 2019.
(netcal's ``ACE`` is another metric of the same initials: Neumann et al. 2018's *average* calibration
error over top-label bins; see docs/metrics.md.)

The sufficient statistic is the (K, R) matrix of per-(class, bin) sums Σ([y = k] − p_k): the metric
is ``abs(gaps).sum() / (N·K)``. :func:`ace_gap_sums` computes it for the data (O(N·K) with a
partial sort per class: only the R − 1 edge ranks are selected); :func:`weighted_ace_gaps` for b
weighted resamples at once (the bootstrap: each row a sample's multiplicities).
"""

from __future__ import annotations

import numpy as np

__all__ = ["edge_ranks", "ace_gap_sums", "prediction_ace_gaps", "ClassSorted", "weighted_ace_gaps"]


def edge_ranks(n: int, n_bins: int) -> np.ndarray:
    """The 0-based ranks of the R − 1 upper bin edges among n sorted values (Nixon et al.'s code)."""
    ranks = np.round(np.linspace(0, n, n_bins, endpoint=False)).astype(np.int64)
    return np.minimum(ranks, n - 1)[1:]


def ace_gap_sums(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> np.ndarray:
    """Per (class k, equal-mass bin r of p_k): Σ_{i ∈ B_kr} ([y_i = k] − p_ik), shape (K, R), float64.

    ``probs`` (N, K) probabilities, ``labels`` (N,) integers in [0, K). ACE is
    ``np.abs(gaps).sum() / (N * K)``.

    >>> p = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.2, 0.8]])
    >>> ace_gap_sums(p, np.array([0, 1, 1, 1]), 2)  # class 0: bins {0.2, 0.3} and {0.6, 0.9}
    array([[-0.5, -0.5],
           [ 0.5,  0.5]])
    """
    n, k = probs.shape
    ranks = edge_ranks(n, n_bins)
    gaps = np.empty((k, n_bins), dtype=np.float64)
    for c in range(k):
        p = np.ascontiguousarray(probs[:, c], dtype=np.float64)
        edges = np.partition(p, ranks)[ranks] if ranks.size else ranks.astype(np.float64)
        bins = np.searchsorted(edges, p, side="right")  # = np.digitize(p, edges): ties go up
        gaps[c] = np.bincount(bins, weights=(labels == c) - p, minlength=n_bins)
    return gaps


def prediction_ace_gaps(predictions, n_bins: int) -> np.ndarray:
    """:func:`ace_gap_sums` of validated :class:`~calibrate_cli.predictions.Predictions` (float64
    softmax of logits, or the given probabilities; an (N, K) float64 array is made)."""
    from .probabilities import to_probabilities

    probs = to_probabilities(np.asarray(predictions.scores), predictions.input_kind)
    return ace_gap_sums(probs, np.asarray(predictions.labels), n_bins)


class ClassSorted:
    """Each class's probabilities sorted, for the ACE of weighted resamples.

    order  (K, N) the sample order that sorts p_k (int32 when N < 2^31)
    p      (K, N) p_k in that order (float64)
    hit    (K, N) [y = k] in that order (float64)
    """

    def __init__(self, probs: np.ndarray, labels: np.ndarray):
        n, k = probs.shape
        index = np.int32 if n < 2**31 else np.int64
        self.order = np.empty((k, n), dtype=index)
        self.p = np.empty((k, n), dtype=np.float64)
        self.hit = np.empty((k, n), dtype=np.float64)
        for c in range(k):
            column = np.asarray(probs[:, c], dtype=np.float64)
            order = np.argsort(column, kind="stable")
            self.order[c], self.p[c], self.hit[c] = order, column[order], labels[order] == c


def weighted_ace_gaps(sorted_classes: ClassSorted, weights: np.ndarray, n_bins: int) -> np.ndarray:
    """The (b, K, R) gap sums of b resamples, row j drawing sample i ``weights[j, i]`` times.

    A resample's sorted p_k is the sorted p_k with each value repeated by its multiplicity, so its
    value at rank t is the first sorted value whose cumulative multiplicity exceeds t; the bins are
    then cut where the sorted values reach each edge (ties go up, as :func:`ace_gap_sums`), and each
    bin's Σ w·([y = k] − p_k) is a difference of prefix sums. Rows must have equal totals N.
    """
    b, n = weights.shape
    k = sorted_classes.p.shape[0]
    total = int(round(float(weights[0].sum()))) if b else n
    ranks = edge_ranks(total, n_bins).astype(np.float64)
    out = np.empty((b, k, n_bins), dtype=np.float64)
    offsets = np.arange(b, dtype=np.float64)[:, None] * (total + 1)  # makes the rows one increasing array
    for c in range(k):
        w = weights[:, sorted_classes.order[c]]
        cum = np.cumsum(w, axis=1)
        flat = (cum + offsets).ravel()
        positions = np.searchsorted(flat, (ranks[None, :] + offsets).ravel(), side="right").reshape(b, -1)
        positions -= np.arange(b)[:, None] * n  # the sorted position of each rank's value, per row
        p = sorted_classes.p[c]
        edges = p[positions]
        starts = np.searchsorted(p, edges.ravel(), side="left").reshape(b, -1)  # first value ≥ each edge
        prefix = np.zeros((b, n + 1))
        np.cumsum(w * (sorted_classes.hit[c] - p), axis=1, out=prefix[:, 1:])
        cuts = np.concatenate([np.zeros((b, 1), dtype=np.int64), starts, np.full((b, 1), n)], axis=1)
        bounds = np.take_along_axis(prefix, cuts, axis=1)
        out[:, c] = np.diff(bounds, axis=1)
    return out
