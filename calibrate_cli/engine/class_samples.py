"""Each class's probabilities sorted: the sums of the classwise metrics that the one-pass summary cannot give.

For class k the N values p_ik are sorted once (with [y_i = k] alongside); b rows of multiplicities
(ones for the data, a resample's counts in the bootstrap) then give every metric below by prefix
sums over the sorted values, O(N·K) per row, the same code for the point estimate and each resample:

- **ACE** (Nixon et al. 2019, "Measuring Calibration in Deep Learning", CVPR Workshops):
  (1/K) Σ_k Σ_r (1/N) |Σ_{i ∈ B_kr} ([y_i = k] − p_ik)| over R equal-mass bins of each p_k. The bins
  are those of the authors' code, ``uncertainty_metrics.numpy.ace`` (``gce(binning_scheme="adaptive",
  class_conditional=True, max_prob=False, norm="l1")``): upper edges are the sorted p_k at ranks
  ``round(linspace(0, N, R, endpoint=False))[1:]`` (numpy's round, half to even; ranks capped at
  N − 1), and a value equal to an edge goes to the bin above it (``np.digitize``), so a run of ties
  never straddles two bins and a bin may be empty. (netcal's ``ACE`` is another metric: Neumann et
  al. 2018's *average* calibration error over top-label bins.)
- **Classwise RMS-CE** (the marginal ℓ2 calibration error of Kumar, Liang & Ma 2019, "Verified
  Uncertainty Calibration", NeurIPS, as their ``get_binning_ce(mode="marginal", p=2, debias=False)``):
  √((1/K) Σ_k Σ_b |B_kb|/N · (acc_kb − conf_kb)²) over the equal-width bins of classwise-ECE,
  (b/M, (b+1)/M] with 0 in the first bin.
- **Classwise KS-CE** (Gupta et al. 2021 per class): (1/K) Σ_k max_t |(1/N) Σ_{i: p_ik ≤ t} (p_ik −
  [y_i = k])|, the maximum taken at the end of each run of equal values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data.predictions import row_chunks
from ..data.probabilities import to_probabilities
from ..errors import InputError
from .binning import uniform_edges
from .sorting import run_ends

__all__ = [
    "CLASS_SORTED_MAX_VALUES", "ClassSorted", "ClassSamples", "edge_ranks", "ace_gaps", "check_class_sorted_size",
    "classwise_width_sums", "classwise_ks", "probabilities_by_rows", "sort_classes", "sort_classes_of",
]

#: the most probabilities (N × K) whose classes are sorted: 20 bytes each (the sample order, p and
#: [y = k]; 5.4 GB at the limit). These metrics need every p_ik at once, so beyond it they are refused.
CLASS_SORTED_MAX_VALUES = 1 << 28


def edge_ranks(n: int, n_bins: int) -> np.ndarray:
    """The 0-based ranks of ACE's R − 1 upper bin edges among n sorted values (Nixon et al.'s code)."""
    ranks = np.round(np.linspace(0, n, n_bins, endpoint=False)).astype(np.int64)
    return np.minimum(ranks, n - 1)[1:]


@dataclass(frozen=True)
class ClassSorted:
    """Each class's probabilities sorted (ascending), the sample order that sorts them, and the labels.

    order  (K, N) the sample indices that sort p_k (int32 when N < 2^31)
    p      (K, N) float64 p_k in that order
    hit    (K, N) float64 [y = k] in that order
    """

    order: np.ndarray
    p: np.ndarray
    hit: np.ndarray


def check_class_sorted_size(n: int, k: int) -> None:
    """Refuse, before any work, N × K probabilities beyond :data:`CLASS_SORTED_MAX_VALUES` (one line,
    not an out-of-memory)."""
    if n * k > CLASS_SORTED_MAX_VALUES:
        raise InputError(
            f"ACE and the classwise RMS-CE and KS-CE sort every class's probabilities: N × K = {n:,} × {k:,} "
            f"would take {20 * n * k / 1e9:.1f} GB, beyond calib's limit of {CLASS_SORTED_MAX_VALUES:,} values; "
            "compute them on fewer samples"
        )


def probabilities_by_rows(scores, input_kind: str, *, dtype=np.float64) -> np.ndarray:
    """The (N, K) probabilities of ``scores`` (an array or a row reader: bfloat16, scaled logits) in
    ``dtype``, made a row chunk at a time (:func:`~calibrate_cli.data.probabilities.to_probabilities`
    per chunk: the same values, with no widened copy of the scores and no whole-array temporaries)."""
    n, k = scores.shape
    out = np.empty((n, k), dtype=dtype)
    for rows in row_chunks(n, k):
        out[rows] = to_probabilities(scores[rows], input_kind, dtype=dtype)
    return out


def _sorted(p: np.ndarray, labels) -> ClassSorted:
    """:class:`ClassSorted` of the (K, N) float64 probabilities ``p``, sorted in place class by class."""
    k, n = p.shape
    order = np.empty((k, n), dtype=np.int32 if n < 2**31 else np.int64)
    hit = np.empty((k, n), dtype=np.float64)
    labels = np.asarray(labels)
    for c in range(k):
        order[c] = np.argsort(p[c], kind="stable")
        p[c], hit[c] = p[c][order[c]], labels[order[c]] == c
    return ClassSorted(order, p, hit)


def sort_classes(probs: np.ndarray, labels: np.ndarray) -> ClassSorted:
    """:class:`ClassSorted` of ``probs`` (N, K) and ``labels`` (N,): one stable sort per class."""
    n, k = probs.shape
    check_class_sorted_size(n, k)
    p = np.empty((k, n), dtype=np.float64)
    for rows in row_chunks(n, k):
        p[:, rows] = np.asarray(probs[rows], dtype=np.float64).T
    return _sorted(p, labels)


def sort_classes_of(scores, labels: np.ndarray, input_kind: str) -> ClassSorted:
    """:func:`sort_classes` of the float64 probabilities of ``scores`` (logits: their softmax), each
    row chunk's written straight into the classes' rows: no (N, K) probability array beside them."""
    n, k = scores.shape
    check_class_sorted_size(n, k)
    p = np.empty((k, n), dtype=np.float64)
    for rows in row_chunks(n, k):
        p[:, rows] = to_probabilities(scores[rows], input_kind).T
    return _sorted(p, labels)


@dataclass(frozen=True)
class ClassSamples:
    """The sorted classes with b rows of multiplicities ``weights`` (b, N), indexed by sample."""

    sorted: ClassSorted
    weights: np.ndarray

    def class_weights(self, c: int) -> np.ndarray:
        """The rows' multiplicities in class ``c``'s sorted order, (b, N) float64."""
        return np.asarray(self.weights, dtype=np.float64)[:, self.sorted.order[c]]


def _prefix(values: np.ndarray) -> np.ndarray:
    """Row-wise prefix sums with a leading 0: (b, N) → (b, N + 1)."""
    out = np.zeros((values.shape[0], values.shape[1] + 1))
    np.cumsum(values, axis=1, out=out[:, 1:])
    return out


def _bin_sums(prefix: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Σ over each bin [starts_j, starts_{j+1}) (b rows; starts (b, R − 1) inner cuts) → (b, R)."""
    b, n = prefix.shape[0], prefix.shape[1] - 1
    cuts = np.concatenate([np.zeros((b, 1), dtype=np.int64), starts, np.full((b, 1), n)], axis=1)
    return np.diff(np.take_along_axis(prefix, cuts, axis=1), axis=1)


def ace_gaps(samples: ClassSamples, n_bins: int) -> np.ndarray:
    """Per row, class and equal-mass bin: Σ w·([y = k] − p_k), shape (b, K, R); ACE = Σ|·|/(N·K).

    A resample's sorted p_k is the sorted p_k with each value repeated by its multiplicity, so its
    value at rank t is the first sorted value whose cumulative multiplicity exceeds t; its bins are
    cut where the sorted values reach each edge (ties go up). Rows must have equal totals N.
    """
    cs, w_all = samples.sorted, samples.weights
    b, n = w_all.shape
    k = cs.p.shape[0]
    total = int(round(float(np.sum(w_all[0])))) if b else n
    ranks = edge_ranks(total, n_bins).astype(np.float64)
    out = np.empty((b, k, n_bins))
    offsets = np.arange(b, dtype=np.float64)[:, None] * (total + 1)  # the rows as one increasing array
    for c in range(k):
        w = samples.class_weights(c)
        flat = (np.cumsum(w, axis=1) + offsets).ravel()
        positions = np.searchsorted(flat, (ranks[None, :] + offsets).ravel(), side="right").reshape(b, -1)
        positions -= np.arange(b)[:, None] * n  # each edge rank's sorted position, per row
        p = cs.p[c]
        starts = np.searchsorted(p, p[positions].ravel(), side="left").reshape(b, -1)  # first value ≥ edge
        out[:, c] = _bin_sums(_prefix(w * (cs.hit[c] - p)), starts)
    return out


def classwise_width_sums(samples: ClassSamples, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, class and equal-width bin (b/M, (b+1)/M] (0 in the first): the count Σw and the gap
    Σ w·([y = k] − p_k), each (b, K, M)."""
    cs, w_all = samples.sorted, samples.weights
    b, k = w_all.shape[0], cs.p.shape[0]
    inner = uniform_edges(n_bins)[1:-1]
    count, gap = np.empty((b, k, n_bins)), np.empty((b, k, n_bins))
    for c in range(k):
        w = samples.class_weights(c)
        starts = np.broadcast_to(np.searchsorted(cs.p[c], inner, side="right"), (b, n_bins - 1))  # v ≤ edge: below
        count[:, c] = _bin_sums(_prefix(w), starts)
        gap[:, c] = _bin_sums(_prefix(w * (cs.hit[c] - cs.p[c])), starts)
    return count, gap


def classwise_ks(samples: ClassSamples) -> np.ndarray:
    """Per row and class: max_t |Σ_{p_k ≤ t} w·(p_k − [y = k])| (not yet divided by N), (b, K)."""
    cs = samples.sorted
    b, k = samples.weights.shape[0], cs.p.shape[0]
    out = np.empty((b, k))
    for c in range(k):
        p = cs.p[c]
        last = run_ends(p)
        prefix = np.cumsum(samples.class_weights(c) * (p - cs.hit[c]), axis=1)
        out[:, c] = np.abs(prefix[:, last]).max(axis=1, initial=0.0)
    return out
