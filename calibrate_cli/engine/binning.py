"""Bin edges and per-bin sufficient statistics: the one binning implementation of calib.

Every binned metric (ECE, AdaECE, classwise-ECE, MCE), the reliability diagram and the bootstrap
reduce the data to three numbers per bin (docs/conventions.md):

    count_b        = |B_b|
    sum_conf_b     = Σ_{i ∈ B_b} conf_i
    sum_correct_b  = Σ_{i ∈ B_b} correct_i

These add exactly across chunks and machines (:meth:`BinStats.merge`), and

    ECE = Σ_b |B_b|/N · |acc(B_b) − conf(B_b)| = (1/N) Σ_b |sum_correct_b − sum_conf_b|.

Bin convention (docs/metrics.md, as the reference code of Mukhoti et al. 2020): bin b is the half-open
interval (e_b, e_{b+1}]; the lowest bin is closed, [e_0, e_1], unless ``lowest_closed=False``
(the reference code's behaviour, used by ``compat="focal-calibration"``), in which case values
≤ e_0 fall in no bin but still count in N. Values above the last edge go to the last bin.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .sorting import distinct, order_statistics

__all__ = [
    "BinStats",
    "SparseBinStats",
    "MAX_N_BINS",
    "S99_THRESHOLD",
    "uniform_edges",
    "torch_linspace_edges",
    "equal_mass_edges",
    "assign_bins",
    "bin_statistics",
    "add_bin_sums",
    "class_bin_statistics",
    "torch_bin_sums",
    "torch_class_bin_sums",
]


#: the confidence from which a sample counts as "99 % sure" (the s99 share and accuracy; the pass
#: counts them as it goes: :func:`~calibrate_cli.engine.summary.order_counts`)
S99_THRESHOLD = 0.99


#: the most bins calib computes. Papers use 10–20; with M bins and N samples at least M − N bins
#: are empty and the per-bin accuracies are mostly 0 or 1, so far fewer are meaningful. The bound
#: keeps memory and time (and the per-bin table) proportional to the input.
MAX_N_BINS = 1000


def _check_n_bins(n_bins: int) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise InputError(f"Expected `n_bins` to be an integer larger than 0, but got {n_bins!r}")
    if n_bins > MAX_N_BINS:
        raise InputError(
            f"{n_bins} bins is more than calib computes (at most {MAX_N_BINS}); ECE is usually measured with 10–20"
        )
    return int(n_bins)


def uniform_edges(n_bins: int) -> np.ndarray:
    """Equal-width edges ``e_b = b / M`` for b = 0..M, each the float64 nearest to b/M.

    (``np.linspace(0, 1, M + 1)`` differs from b/M in the last bit for some M, e.g. M = 10, which
    moves a confidence of exactly 0.3 into the wrong bin; ``arange / M`` is correctly rounded.)
    """
    m = _check_n_bins(n_bins)
    return np.arange(m + 1, dtype=np.float64) / m


def torch_linspace_edges(n_bins: int) -> np.ndarray:
    """The float32 edges of ``torch.linspace(0, 1, M + 1)``, reproduced without torch.

    torch computes ``start + i·step`` for the first half and ``end − (M − i)·step`` for the second,
    with ``step = float32(1 / M)`` and a fused multiply-add (one rounding to float32), which float64
    arithmetic followed by a single rounding reproduces exactly. Used only by
    ``compat="focal-calibration"``.
    """
    m = _check_n_bins(n_bins)
    step = np.float64(np.float32(1.0) / np.float32(m))
    i = np.arange(m + 1, dtype=np.float64)
    first = i * step
    second = 1.0 - (m - i) * step
    return np.where(i < (m + 1) // 2, first, second).astype(np.float32)


def equal_mass_edges(values: np.ndarray, n_bins: int, *, sorted_values: np.ndarray | None = None) -> np.ndarray:
    """Equal-mass (adaptive) edges of the reference code (Mukhoti et al. 2020, ``histedges_equalN``).

    ``e = np.interp(np.linspace(0, N, M + 1), np.arange(N), np.sort(values))``: e_0 is the smallest
    value, e_M the largest, and the inner edges interpolate the sorted values. Only the 2(M + 1)
    order statistics around the x's are read: float64 values are selected in O(N)
    (:func:`~calibrate_cli.engine.sorting.order_statistics`), never sorted. ``sorted_values``:
    ``np.sort(values)`` when already at hand (in a dtype that holds the values exactly).
    """
    values = np.asarray(values)
    if sorted_values is not None:
        select = sorted_values.__getitem__
    elif values.dtype == np.float64:  # selected, not sorted: no (N,) copy (calibrate_cli.engine.sorting)
        select = functools.partial(order_statistics, values)
    else:
        select = np.sort(values).__getitem__
    return equal_mass_edges_of(values.shape[0], n_bins, select)


def equal_mass_edges_of(n: int, n_bins: int, select) -> np.ndarray:
    """:func:`equal_mass_edges` of N values from ``select(ranks)``: the values of ascending rank
    ``ranks`` (an int64 array), wherever the values are (numpy, or a torch device).

    np.interp over xp = 0..N−1 reads only the two order statistics around each x: interpolating on
    those points alone is the same arithmetic (same interval, slope and offset), without the (N,)
    float64 copy of arange(N) that np.interp would make."""
    m = _check_n_bins(n_bins)
    if n == 0:
        raise InputError("cannot compute equal-mass bin edges of 0 values")
    x = np.linspace(0, n, m + 1)
    below = np.clip(np.floor(x).astype(np.int64), 0, n - 1)
    points = distinct(np.concatenate([below, np.minimum(below + 1, n - 1)]))
    at_points = np.asarray(select(points), dtype=np.float64)
    return np.interp(x, points.astype(np.float64), at_points)


def assign_bins(values: np.ndarray, edges: np.ndarray, *, lowest_closed: bool = True) -> np.ndarray:
    """Index of the bin (e_b, e_{b+1}] that holds each value, as int64 in [0, M).

    With ``lowest_closed`` (the default), values ≤ e_0 go to bin 0; otherwise they get index −1
    (in no bin). Values > e_M go to bin M − 1. The comparison is done in the common dtype of
    ``values`` and ``edges`` (pass float32 for both to compare in float32). With repeated edges
    (ties in equal-mass binning), the in-between bins stay empty: the result depends only on the
    value, never on the order of the samples.
    """
    if not isinstance(values, np.ndarray) and hasattr(values, "device"):  # a torch tensor: the same rule
        return _assign_bins_torch(values, edges, lowest_closed)
    edges = np.asarray(edges)
    m = edges.shape[0] - 1
    values = np.asarray(values)
    if edges.dtype == np.float64 and values.dtype == np.float64 and m > 1 and np.array_equal(edges, uniform_edges(m)):
        idx = _assign_uniform(values, edges)
    else:
        idx = np.searchsorted(edges, values, side="left").astype(np.int64) - 1
    np.minimum(idx, m - 1, out=idx)
    if lowest_closed:
        np.maximum(idx, 0, out=idx)
    return idx


def _assign_bins_torch(values, edges, lowest_closed: bool):
    """:func:`assign_bins` of a torch tensor, on its device: ``searchsorted(edges, v, left) − 1``
    (what :func:`_assign_uniform` computes too), compared in ``values``' dtype."""
    import torch

    m = edges.shape[0] - 1
    d_edges = torch.as_tensor(edges, device=values.device)  # numpy edges, or a tensor already there
    common = torch.promote_types(values.dtype, d_edges.dtype)
    idx = torch.searchsorted(d_edges.to(common), values.to(common).contiguous(), right=False) - 1
    return torch.clamp(idx, min=0 if lowest_closed else -1, max=m - 1)


def _assign_uniform(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``searchsorted(edges, values, "left") − 1`` for the edges b/M, without the binary search.

    The candidate ⌈v·M⌉ − 1 is off by at most one bin near an edge (v·M is rounded once), so one
    exact comparison against each neighbouring edge fixes it; the result equals searchsorted's.
    """
    m = edges.shape[0] - 1
    idx = np.ceil(values * m).astype(np.int64)
    idx -= 1
    np.clip(idx, 0, m - 1, out=idx)
    idx -= values <= edges[idx]  # at or below the lower edge: previous bin (−1 below e_0)
    np.clip(idx, -1, m - 1, out=idx)
    idx += values > edges[np.minimum(idx + 1, m)]  # above the upper edge: next bin
    return idx


@dataclass(frozen=True)
class BinStats:
    """Sufficient statistics of one binning: per bin the count, Σconf and Σcorrect.

    ``n`` is the number of samples the metric is normalised by (it can exceed ``count.sum()`` only
    in the reference code's compatibility mode, where values on the lowest edge fall in no bin).
    ``sum_correct`` holds Σ of the targets: top-label correctness for ECE, [y = k] for classwise.
    """

    edges: np.ndarray
    count: np.ndarray
    sum_conf: np.ndarray
    sum_correct: np.ndarray
    n: int

    @property
    def n_bins(self) -> int:
        return int(self.count.shape[-1])

    @property
    def nonempty(self) -> np.ndarray:
        return self.count > 0

    def _mean(self, sums: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.nonempty, sums / np.maximum(self.count, 1), np.nan)

    @property
    def mean_confidence(self) -> np.ndarray:
        """Mean confidence per bin (NaN for an empty bin)."""
        return self._mean(self.sum_conf)

    @property
    def accuracy(self) -> np.ndarray:
        """Accuracy (mean target) per bin (NaN for an empty bin)."""
        return self._mean(self.sum_correct)

    @property
    def gap(self) -> np.ndarray:
        """mean confidence − accuracy per bin: positive means over-confident (NaN when empty)."""
        return self.mean_confidence - self.accuracy

    def calibration_error(self) -> float | np.ndarray:
        """ECE = (1/N) Σ_b |Σcorrect_b − Σconf_b| (per row for stacked statistics)."""
        return np.abs(self.sum_correct - self.sum_conf).sum(axis=-1) / self.n

    def max_calibration_error(self) -> float:
        """MCE = max over non-empty bins of |acc(B_b) − conf(B_b)|."""
        gaps = np.abs(self.gap[self.nonempty])
        return float(gaps.max()) if gaps.size else 0.0

    def merge(self, other: "BinStats") -> "BinStats":
        """Statistics of the union of two disjoint sets of samples binned with the same edges."""
        if not np.array_equal(self.edges, other.edges):
            raise ValueError("cannot merge bin statistics computed with different edges")
        return BinStats(
            edges=self.edges,
            count=self.count + other.count,
            sum_conf=self.sum_conf + other.sum_conf,
            sum_correct=self.sum_correct + other.sum_correct,
            n=self.n + other.n,
        )

    def to_rows(self) -> list[dict]:
        """One dict per bin: lower, upper, count, mean_confidence, accuracy, gap (None when empty)."""
        def opt(x: float) -> float | None:
            return None if np.isnan(x) else float(x)

        conf, acc, gap = self.mean_confidence, self.accuracy, self.gap
        return [
            {
                "lower": float(self.edges[b]),
                "upper": float(self.edges[b + 1]),
                "count": _count(self.count[b]),
                "mean_confidence": opt(conf[b]),
                "accuracy": opt(acc[b]),
                "gap": opt(gap[b]),
            }
            for b in range(self.n_bins)
        ]


def _count(count) -> int | float:
    """A bin's count as JSON holds it: an int, or the float Σw of weighted samples that is no whole number."""
    return int(count) if float(count).is_integer() else float(count)


@dataclass(frozen=True)
class SparseBinStats:
    """Stacked per-class statistics (K classes × M bins) kept only where a bin holds samples.

    The classwise statistics of K classes × M bins have at most min(K·M, N·K) non-empty cells; when
    K·M is far larger (many classes, few samples, many bins) the dense arrays would dwarf the input.
    ``keys`` are the sorted flat indices k·M + b of the non-empty cells; ``count``/``sum_conf``/
    ``sum_correct`` build the dense (K, M) arrays on demand (as :class:`BinStats` holds them).
    """

    edges: np.ndarray
    n: int
    n_classes: int
    keys: np.ndarray
    counts: np.ndarray
    sums_conf: np.ndarray
    sums_correct: np.ndarray

    @property
    def n_bins(self) -> int:
        return int(np.asarray(self.edges).shape[0] - 1)

    def _dense(self, values: np.ndarray, dtype=np.float64) -> np.ndarray:
        out = np.zeros(self.n_classes * self.n_bins, dtype=dtype)
        out[self.keys] = values
        return out.reshape(self.n_classes, self.n_bins)

    @property
    def count(self) -> np.ndarray:
        return self._dense(self.counts, dtype=np.int64)

    @property
    def sum_conf(self) -> np.ndarray:
        return self._dense(self.sums_conf)

    @property
    def sum_correct(self) -> np.ndarray:
        return self._dense(self.sums_correct)

    def to_dense(self) -> BinStats:
        return BinStats(edges=self.edges, count=self.count, sum_conf=self.sum_conf, sum_correct=self.sum_correct, n=self.n)

    def calibration_error(self) -> np.ndarray:
        """Per-class ECE_k = (1/N) Σ_b |Σcorrect_kb − Σconf_kb| over the non-empty cells, in time and
        memory ∝ their number (equal to :meth:`BinStats.calibration_error` up to the order of the sum)."""
        gaps = np.abs(self.sums_correct - self.sums_conf)
        return np.bincount(self.keys // self.n_bins, weights=gaps, minlength=self.n_classes) / self.n


def class_bin_statistics(p, labels, edges, *, lowest_closed: bool = True, ops=None, into=None) -> tuple:
    """One chunk's per-(class, bin) count, Σp and Σ[y = k] of the (rows, K) probabilities ``p``, each
    p_ik in the bin :func:`assign_bins` gives it: dense (K, M) numpy arrays when K·M is at most the
    chunk's size (or small), else ``("sparse", keys, count, Σp, Σy)`` over the non-empty cells k·M + b
    only. numpy: both sum each cell's values in row-major order (``bincount``), so they agree bit for
    bit. A torch ``p`` (``ops`` its namespace) sums each bin as a masked column sum on its device (a
    fixed reduction order, no float atomics), dense; sparse cells are summed on the host.

    ``into``: flat (K·M,) running (count, Σp, Σy) of the previous rows of the same chunk (numpy,
    dense) to continue, value by value in row-major order (``np.add.at``, unbuffered, in index
    order: the very additions of one ``bincount`` over the whole chunk); returned, reshaped."""
    rows, k = p.shape
    m = np.asarray(edges).shape[0] - 1
    dense = k * m <= max(rows * k, 1 << 16)
    if not isinstance(p, np.ndarray):
        if not dense:
            return class_bin_statistics(ops.to_numpy(p), ops.to_numpy(labels), edges, lowest_closed=lowest_closed)
        return _class_bins_torch(ops, p, labels, edges, lowest_closed)
    idx = assign_bins(p, edges, lowest_closed=lowest_closed)
    keys = idx + (np.arange(k, dtype=np.int64) * m)[None, :]
    inside = idx >= 0
    if inside.all():
        flat_keys, flat_p = keys.ravel(), p.ravel()
    else:
        flat_keys, flat_p = keys[inside], p[inside]
    true_keys = keys[np.arange(rows), labels]
    true_keys = true_keys[inside[np.arange(rows), labels]]
    weights = flat_p.astype(np.float64, copy=False)
    if into is not None:
        count, sum_p, sum_y = into
        count += np.bincount(flat_keys, minlength=k * m)
        np.add.at(sum_p, flat_keys, weights)
        sum_y += np.bincount(true_keys, minlength=k * m)
        return count.reshape(k, m), sum_p.reshape(k, m), sum_y.reshape(k, m)
    if dense:
        count = np.bincount(flat_keys, minlength=k * m)
        sum_p = np.bincount(flat_keys, weights=weights, minlength=k * m)
        sum_y = np.bincount(true_keys, minlength=k * m).astype(np.float64)
        return count.reshape(k, m), sum_p.reshape(k, m), sum_y.reshape(k, m)
    cells, where = np.unique(flat_keys, return_inverse=True)
    count = np.bincount(where, minlength=cells.shape[0])
    sum_p = np.bincount(where, weights=weights, minlength=cells.shape[0])
    sum_y = np.bincount(np.searchsorted(cells, true_keys), minlength=cells.shape[0]).astype(np.float64)
    return "sparse", cells, count, sum_p, sum_y


def _class_bins_torch(ops, p, labels, edges, lowest_closed: bool) -> tuple:
    """The dense (count, Σp, Σy) of :func:`class_bin_statistics` for a torch tensor, as numpy arrays."""
    count, sum_p, sum_y = torch_class_bin_sums(p, labels, edges, lowest_closed=lowest_closed)
    return ops.to_numpy(count).astype(np.int64), ops.to_numpy(sum_p), ops.to_numpy(sum_y)


def torch_class_bin_sums(p, labels, edges, *, lowest_closed: bool = True) -> tuple:
    """The dense (K, M) count, Σp and Σ[y = k] of :func:`class_bin_statistics` for a torch ``p``
    (rows, K) and int64 ``labels``, left on their device (:func:`torch_bin_sums`)."""
    import torch

    idx = assign_bins(p, edges, lowest_closed=lowest_closed)
    is_label = torch.arange(p.shape[1], device=p.device)[None, :] == labels[:, None]
    return torch_bin_sums(idx, p, is_label, len(edges) - 1)


def torch_bin_sums(idx, values, targets, m: int) -> tuple:
    """Per column and bin of the (rows, C) torch tensors: (count, Σvalue, Σtarget), each (C, M) on their
    device (int64, float64, float64); ``idx`` from :func:`assign_bins` (−1: in no bin). Masked column
    sums, one bin at a time: a fixed reduction order and no float atomics, so a GPU run repeats bit
    for bit (what ``bincount`` with weights is on numpy)."""
    import torch

    zero = torch.zeros((), dtype=torch.float64, device=values.device)
    v64, t64 = values.to(torch.float64), targets.to(torch.float64)
    count = torch.stack([(idx == b).sum(dim=0) for b in range(m)], dim=1)
    sum_v = torch.stack([torch.where(idx == b, v64, zero).sum(dim=0) for b in range(m)], dim=1)
    sum_t = torch.stack([torch.where(idx == b, t64, zero).sum(dim=0) for b in range(m)], dim=1)
    return count, sum_v, sum_t


def bin_statistics(
    values: np.ndarray,
    targets: np.ndarray,
    edges: np.ndarray,
    *,
    lowest_closed: bool = True,
    weights: np.ndarray | None = None,
    bin_index: np.ndarray | None = None,
) -> BinStats:
    """Per-bin count, Σvalue and Σtarget of ``values`` binned by ``edges`` (float64 sums).

    ``weights`` (e.g. bootstrap multiplicities) multiply each sample's contribution; ``bin_index``
    reuses an assignment computed earlier by :func:`assign_bins`. Stacked: ``values`` and
    ``targets`` of shape (N, S) give the statistics of each of the S columns, arrays (S, M) with
    ``n`` = N (e.g. one column per temperature of a grid).
    """
    values = np.asarray(values)
    m = np.asarray(edges).shape[0] - 1
    if values.ndim == 1 and weights is None:
        return _bin_statistics_1d(values, targets, edges, lowest_closed, bin_index)
    idx = assign_bins(values, edges, lowest_closed=lowest_closed) if bin_index is None else bin_index
    targets = np.asarray(targets, dtype=np.float64)
    vals64 = values.astype(np.float64, copy=False)
    if values.ndim == 2:
        if weights is not None:
            raise ValueError("weights are not supported for stacked (2-D) values")
        n_rows, n_cols = values.shape
        keep = idx >= 0
        keys = (idx + (np.arange(n_cols, dtype=np.int64) * m)[None, :])[keep]  # row-major: rows in order
        count = np.bincount(keys, minlength=n_cols * m).astype(np.int64).reshape(n_cols, m)
        sum_conf = np.bincount(keys, weights=vals64[keep], minlength=n_cols * m).reshape(n_cols, m)
        sum_correct = np.bincount(keys, weights=targets[keep], minlength=n_cols * m).reshape(n_cols, m)
        return BinStats(edges=np.asarray(edges), count=count, sum_conf=sum_conf, sum_correct=sum_correct, n=n_rows)
    if weights is None:
        n = int(values.shape[0])
        keep = idx >= 0
        if not keep.all():
            idx, vals64, targets = idx[keep], vals64[keep], targets[keep]
        count = np.bincount(idx, minlength=m).astype(np.int64)
        sum_conf = np.bincount(idx, weights=vals64, minlength=m)
        sum_correct = np.bincount(idx, weights=targets, minlength=m)
    else:
        weights = np.asarray(weights)
        n = int(weights.sum())
        keep = idx >= 0
        w = np.where(keep, weights, 0)
        idx = np.where(keep, idx, 0)
        count = np.bincount(idx, weights=w, minlength=m).round().astype(np.int64)
        sum_conf = np.bincount(idx, weights=w * vals64, minlength=m)
        sum_correct = np.bincount(idx, weights=w * targets, minlength=m)
    return BinStats(edges=np.asarray(edges), count=count, sum_conf=sum_conf, sum_correct=sum_correct, n=n)


#: samples per piece of the 1-D binning pass (bounded temporaries: ~50 MB whatever N)
_PIECE = 1 << 20


def _compiled_binning(values, targets, edges) -> bool:
    """Whether the compiled pass applies: the C extension built (and not CALIB_ENGINE=numpy), values
    and edges of one float dtype (comparisons in that dtype, as numpy's), targets bool or float64."""
    from . import kernels

    if not kernels.use():
        return False
    return (values.dtype == edges.dtype and values.dtype in (np.float32, np.float64)
            and targets.dtype in (np.bool_, np.float64) and targets.shape == values.shape)


def _bin_statistics_1d(values, targets, edges, lowest_closed, bin_index) -> BinStats:
    """:func:`bin_statistics` of one column without weights (:func:`add_bin_sums` into zeros)."""
    m = np.asarray(edges).shape[0] - 1
    count = np.zeros(m, dtype=np.int64)
    sum_conf = np.zeros(m)
    sum_correct = np.zeros(m)
    add_bin_sums(values, targets, edges, count, sum_conf, sum_correct, lowest_closed=lowest_closed, bin_index=bin_index)
    return BinStats(edges=np.asarray(edges), count=count, sum_conf=sum_conf, sum_correct=sum_correct,
                    n=int(np.asarray(values).shape[0]))


def add_bin_sums(values, targets, edges, count, sum_conf, sum_correct, *, lowest_closed: bool = True,
                 bin_index=None) -> None:
    """Add the per-bin count, Σvalue and Σtarget of one column of samples (1-D ``values`` and
    ``targets``) into running sums (``count`` int64, ``sum_conf`` and ``sum_correct`` float64, (M,)).

    Each bin's sums are added to in sample order, as ``np.bincount`` adds: pieces of a column added
    one after the other, in order, give the bits of :func:`bin_statistics` of the whole column (a pass
    can bin each chunk as it arrives). numpy adds pieces of :data:`_PIECE` samples with ``np.add.at``
    (unbuffered, in sample order); with the C extension one sequential loop does the same
    (:func:`~calibrate_cli.engine.kernels.bin_sums`; tests/test_engines.py)."""
    values = np.asarray(values)
    m = np.asarray(edges).shape[0] - 1
    n = int(values.shape[0])
    targets = np.asarray(targets)
    edges_arr = np.asarray(edges)
    if bin_index is None and _compiled_binning(values, targets, edges_arr):
        from . import kernels

        uniform = edges_arr.dtype == np.float64 and m > 1 and np.array_equal(edges_arr, uniform_edges(m))
        kernels.bin_sums(values, targets, edges_arr, uniform=bool(uniform), lowest_closed=bool(lowest_closed),
                        count=count, sum_conf=sum_conf, sum_correct=sum_correct)
        return
    for start in range(0, n, _PIECE):
        piece = slice(start, min(n, start + _PIECE))
        v = values[piece]
        if bin_index is None:
            idx = assign_bins(v, edges, lowest_closed=lowest_closed)
        else:
            idx = np.asarray(bin_index[piece])
        vals64 = v.astype(np.float64, copy=False)
        t = targets[piece].astype(np.float64, copy=False)
        keep = idx >= 0
        if not keep.all():
            idx, vals64, t = idx[keep], vals64[keep], t[keep]
        count += np.bincount(idx, minlength=m)
        np.add.at(sum_conf, idx, vals64)
        np.add.at(sum_correct, idx, t)
