"""The resampling engine: metrics of weighted resamples from one summary pass, without resampled arrays.

A resample's metrics depend on the draw only through the multiplicities w_i, so each resample is a
weighted sum over per-sample quantities sorted once by confidence (see the package docstring). The
per-batch math is written once against a device's array namespace (:mod:`calibrate_cli.engine.devices`).
"""

from __future__ import annotations

import numpy as np

from ..engine.class_samples import ClassSamples, probabilities_by_rows, sort_classes
from ..engine.binning import assign_bins, torch_linspace_edges, uniform_edges
from ..engine.sorting import tie_tolerant
from ..engine.devices import NumpyOps, array_ops
from ..metrics.registry import (
    DENSE_SUMS,
    METRIC_NAMES,
    BinSums,
    MetricSums,
    WeightedSamples,
    metric_values,
    sums_needed,
)
from ..metrics.functional import S99_THRESHOLD
from ..engine.summary import PredictionSummary




class Resampler:
    """Per-sample quantities of one summary, sorted by confidence, and the metrics of weighted resamples.

    Multiplicity rows have ``n_padded`` columns (the sorted samples, then zeros up to a whole number
    of blocks of ``block`` samples). Block sums of w·[1, conf, correct], of w·[dense columns] and of
    w·[class totals] come from one batched matrix product per group (fixed shapes, so a metric's
    value does not depend on the other metrics asked for); prefix sums at any position are the
    block prefix plus a partial block.
    """

    def __init__(self, summary: PredictionSummary, scores_probs: np.ndarray, n_bins: int, wanted=None, class_probs=None):
        s = summary
        needed = sums_needed(wanted)  # the registry's sums behind the wanted metrics (default: all)
        self.wanted = None if wanted is None else list(wanted)
        self.n, self.k, self.m = s.n, s.k, n_bins
        self.compat = s.compat
        self.lowest_closed = s.compat is None
        self.need_adaece = "mass" in needed
        self.need_dense = bool(needed & DENSE_SUMS)
        self.need_samples = "samples" in needed
        self.classwise = "classwise_gap" in needed and s.classwise is not None
        self.need_class_samples = "class_samples" in needed and s.class_sorted is not None
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
        self.correct_sorted = correct
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
        # ACE, classwise RMS/KS: each class's probabilities sorted, indexed like the multiplicity rows
        # (confidence order); float64 probabilities as the point estimate, also in compat mode (``class_probs``)
        class_probs = scores_probs if class_probs is None else class_probs
        self.class_sorted = sort_classes(class_probs[o], self.labels_sorted) if self.need_class_samples else None
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

    def use(self, ops) -> "Resampler":
        """Run the per-batch math with ``ops`` (:func:`~calibrate_cli.engine.devices.array_ops`): the set-up
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
        return self.reduce(width, mass, totals, side, w)

    def reduce(self, width: tuple, mass: tuple | None, totals: np.ndarray, side: np.ndarray | None, w=None) -> dict:
        """Metrics of a batch from its small per-resample sums (shared by the numpy and torch engines).

        width / mass: (count, Σconf, Σcorrect) per resample and bin, each (b, M); totals: the column
        sums (b, columns); side: the side sums of :meth:`count` (b, n_side), or None. They become the
        registry's :class:`~calibrate_cli.metrics.registry.MetricSums`, and every metric is computed by
        the same function as the point estimate (NaN for a metric whose sums were not computed).
        ``w`` (b, N_padded): the rows' multiplicities (numpy), for the metrics of the samples themselves.
        """
        values = metric_values(self.sums(width, mass, totals, side, w), self.wanted)
        if self.wanted is not None:  # the others stay NaN (not computed)
            values = {name: values.get(name, np.full(totals.shape[0], np.nan)) for name in METRIC_NAMES}
        return values

    def sums(self, width: tuple, mass: tuple | None, totals: np.ndarray, side: np.ndarray | None, w=None) -> MetricSums:
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
            samples=self._samples(w),
            class_samples=self._class_samples(w),
            **dense,
        )

    def _class_samples(self, w) -> ClassSamples | None:
        """Each class's sorted probabilities with the rows' multiplicities (ACE, classwise RMS/KS), when wanted."""
        if self.class_sorted is None or w is None:
            return None
        return ClassSamples(self.class_sorted, np.asarray(w, dtype=np.float64)[:, : self.n])

    def _samples(self, w) -> WeightedSamples | None:
        """The sorted samples with the rows' multiplicities (KS, SmoothECE), when wanted."""
        if not self.need_samples or w is None:
            return None
        weights = np.asarray(w, dtype=np.float64)[:, : self.n]
        return WeightedSamples(self.conf_sorted.astype(np.float64), self.correct_sorted, weights)

    def _equal_mass_starts(self, edges):
        """Sorted-order start of each equal-mass bin of each resample, shape (b, M+1) (last = N): the
        edges compared as :func:`~calibrate_cli.engine.sorting.tie_tolerant` raises them (float32 and
        bare in the compat mode)."""
        xp = self.ops
        edges = xp.to_float32(edges) if self.compat else tie_tolerant(edges)
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


def on_device(engines: list, device: str) -> list:
    """The engines, set to run their per-batch math on ``device``."""
    ops = array_ops(device)
    return [e.use(ops) for e in engines]


def _scores_probs(predictions, compat) -> np.ndarray:
    """The (N, K) probabilities the classwise resampling reads (float32 in compat mode), made a row
    chunk at a time from the scores (no widened copy of bfloat16 or float16 scores)."""
    return probabilities_by_rows(predictions.scores, predictions.input_kind,
                                 dtype=np.float32 if compat else np.float64)


def resampler_for(data, n_bins: int, wanted=None) -> Resampler:
    """The engine for :class:`~calibrate_cli.evaluate.SummarizedData` ``data``, computing the metrics
    ``wanted`` (None: all); the classwise probabilities are made only when a wanted metric needs them."""
    need_probs = bool({"classwise_gap", "class_samples"} & sums_needed(wanted))
    compat = data.summary.compat
    probs = _scores_probs(data.predictions, compat) if need_probs else None
    class_probs = _scores_probs(data.predictions, None) if compat and "class_samples" in sums_needed(wanted) else None
    return Resampler(data.summary, probs, n_bins, wanted, class_probs=class_probs)

