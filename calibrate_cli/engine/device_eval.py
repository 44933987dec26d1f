"""Top-label metrics of predictions that already live on a torch device (a GPU), without copying them.

:func:`device_metrics` is :func:`calibrate_cli.evaluate`'s top-label half for torch tensors: the
logits (or probabilities) and labels stay where the model wrote them, every reduction runs there in
float64, and only the sufficient statistics (docs/conventions.md) come back to the host — per equal-width bin
(count, Σconf, Σcorrect), per equal-mass bin (the same, over AdaECE's edges), Σ NLL, Σ Brier, #correct,
#top-5, Σconf and the s99 counts. They become a
:class:`~calibrate_cli.metrics.registry.MetricSums` and every number is computed by the metric registry,
as for the numpy engine.

One pass per row chunk (:func:`_chunk_sums`) computes conf, correct, NLL, Brier and top-5 of each row
and its equal-width bin (bins (e_b, e_b+1], bin 0 closed), and reduces them at once; the confidences and correctness are kept (8 + 1 bytes a row) for AdaECE.
The row quantities are the one definition of the row pass (:func:`~calibrate_cli.engine.rows.row_stats`)
and the bins the one bin rule (:func:`~calibrate_cli.engine.binning.assign_bins`); on CUDA
:func:`_chunk_sums` is compiled by ``torch.compile`` (where inductor's code generator is installed);
elsewhere (CPU tensors, ``CALIB_TORCH_COMPILE=0``) it runs eagerly.

AdaECE's edges (:func:`~calibrate_cli.engine.binning.equal_mass_edges_of`, the reference code's
``histedges_equalN``) need about 2(M + 1) order statistics of the N confidences:
:func:`order_statistics_on_device` selects them exactly without sorting the N values (brackets from
a strided sample verified by one counting pass; else a histogram of the float64 bit patterns, which
order non-negative doubles as integers, refining only the buckets that hold a wanted rank).

Agreement with the numpy engine: torch's ``exp``/``log`` and its summation orders may differ from
the C library's and numpy's in the last bit, so every metric agrees with
:func:`calibrate_cli.evaluate` to ~1e-15 (tested to 1e-9); bin counts can differ only where a
confidence lies within an ulp of an edge. Sums are reductions in a fixed order (no float atomics):
a run repeats bit for bit.
"""

from __future__ import annotations

import math
import os
from dataclasses import fields

import numpy as np

from .binning import S99_THRESHOLD, assign_bins, equal_mass_edges_of, torch_bin_sums, uniform_edges
from .devices import TorchOps
from .rows import row_stats
from ..errors import InputError
from ..metrics.registry import BinSums, MetricSums, metric_values, sums_needed, METRICS
from ..metrics.functional import DEFAULT_N_BINS
from ..data.predictions import PROBS_SUM_TOLERANCE, probs_sum_tolerance

__all__ = ["DEVICE_METRICS", "device_metric_sums", "device_metrics", "order_statistics_on_device"]

#: the sums the device pass produces; a metric is available on the device when it needs no other
DEVICE_SUMS = frozenset(f.name for f in fields(MetricSums)) - {
    "n", "nll_scale", "classwise_gap", "classwise_classes", "samples", "class_samples"
}
#: the metrics :func:`device_metrics` computes (the top-label ones of the registry, in report order)
DEVICE_METRICS = tuple(spec.name for spec in METRICS if spec.by_default and spec.needs <= DEVICE_SUMS)

#: values per row chunk: compiled (CUDA), where nothing of (rows × K) is materialised, and eager, where
#: each float64 temporary is 8 bytes a value. Constants: results never depend on the device's memory.
COMPILED_CHUNK_VALUES = 1 << 28
EAGER_CHUNK_VALUES = 1 << 22
#: order statistics: histogram buckets per refinement (bits of the bucket index), and the size under
#: which a set of values is simply sorted
SELECT_BUCKET_BITS = 16
SELECT_SORT_LIMIT = 1 << 20
#: above this many values the wanted ranks are first bracketed from a strided sample of about
#: SELECT_SAMPLE values, SELECT_MARGIN sample positions either side (≈ 6σ of a random sample's rank)
SELECT_BRACKET_MIN = 1 << 24
SELECT_SAMPLE = 1 << 22
SELECT_MARGIN = 6144
#: CALIB_TORCH_COMPILE=0 runs the eager pass on CUDA too (no torch.compile)
COMPILE_ENV = "CALIB_TORCH_COMPILE"


def device_metrics(scores, labels, *, input_kind: str | None = None, n_bins: int = DEFAULT_N_BINS,
                   metrics=None) -> dict[str, float | None]:
    """The top-label metrics (:data:`DEVICE_METRICS`: ECE, AdaECE, MCE, RMS-CE, debiased L2-CE, NLL,
    Brier, accuracy, error, top-5 accuracy, mean confidence, s99) of torch tensors on any device, as
    ``{name: value}`` (None where undefined), equal to :func:`calibrate_cli.evaluate`'s to ~1e-15.

    ``scores``: (N, K) logits or probabilities (``input_kind``), or (N,) binary log-odds / p(class 1),
    any float dtype; ``labels``: (N,) integer class indices on the same device. ``metrics``: a subset
    of :data:`DEVICE_METRICS` (default: all of them); the sums the others need are not computed.

    >>> logits = model(x).detach()                                # doctest: +SKIP
    >>> calib.device_metrics(logits, y, metrics=["ece", "nll"])   # doctest: +SKIP
    {'ece': 0.0123..., 'nll': 0.351...}
    """
    names = list(DEVICE_METRICS if metrics is None else metrics)
    unknown = [name for name in names if name not in DEVICE_METRICS]
    if unknown:
        raise InputError(
            f"device_metrics computes {', '.join(DEVICE_METRICS)}; not {', '.join(map(str, unknown))} "
            "(classwise and sorted-sample metrics: calibrate_cli.evaluate on numpy arrays)"
        )
    sums = device_metric_sums(scores, labels, input_kind=input_kind, n_bins=n_bins, names=names)
    values = metric_values(sums, names)
    return {name: None if math.isnan(float(v[0])) else float(v[0]) for name, v in values.items()}


def device_metric_sums(scores, labels, *, input_kind: str | None = None, n_bins: int = DEFAULT_N_BINS,
                       names=None) -> MetricSums:
    """The :class:`~calibrate_cli.metrics.registry.MetricSums` (batch of 1) of torch tensors, computed on
    their device: what :func:`device_metrics` turns into metrics (``names``: the metrics whose sums are
    wanted; default all of :data:`DEVICE_METRICS`). Bad input raises :class:`InputError`."""
    import torch

    x, y, is_logits = _checked(torch, scores, labels, input_kind)
    n, k = x.shape
    m = int(n_bins)
    needed = sums_needed(DEVICE_METRICS if names is None else names)
    width_edges = uniform_edges(m)  # also checks n_bins
    d_edges = torch.as_tensor(width_edges, dtype=torch.float64, device=x.device)
    keep = "mass" in needed
    tolerance = float(probs_sum_tolerance(np.empty(0, dtype=_numpy_dtype(x.dtype))))
    compiled = _compiled_pass(x.device)
    bin_sums = compiled[1] if compiled else _bin_sums
    conf, correct, totals = _chunked_pass(torch, x, y, d_edges, compiled, is_logits, keep, tolerance)
    _raise_for_bad_rows(torch, x, totals, is_logits, tolerance)

    mass = None
    if keep:
        edges = equal_mass_edges_of(n, m, lambda ranks: order_statistics_on_device(conf, ranks))
        count, sum_conf, sum_correct = bin_sums(conf, correct, torch.as_tensor(edges, device=x.device))
        mass = BinSums(count.cpu().numpy()[None], sum_conf.cpu().numpy()[None], sum_correct.cpu().numpy()[None])
    one = lambda v: np.array([v], dtype=np.float64)  # noqa: E731
    nll_sum, nll_scale = totals["nll_sum"], 1.0
    if math.isinf(nll_sum):  # finite terms whose sum overflows: their sum divided by N
        nll_sum, nll_scale = totals["nll_scaled"], float(n)
    return MetricSums(
        n=n,
        width=BinSums(totals["count"][None], totals["sum_conf"][None], totals["sum_correct"][None]),
        correct=one(totals["correct"]),
        conf=one(totals["conf_sum"]),
        mass=mass,
        nll=one(nll_sum),
        nll_scale=nll_scale,
        nll_inf=one(totals["nll_inf"]),
        brier=one(totals["brier_sum"]),
        top5=one(totals["top5"]) if k > 5 else None,
        s99=one(totals["s99"]),
        s99_correct=one(totals["s99_correct"]),
    )


# ------------------------------------------------------------------------------------------ the pass


def _chunked_pass(torch, x, y, edges, compiled, is_logits: bool, keep: bool, tolerance: float):
    """(conf, correct, totals) from :func:`_chunk_sums` over row chunks (compiled on CUDA, else eager)."""
    n, k = x.shape
    m = edges.shape[0] - 1
    chunk_sums = compiled[0] if compiled else _chunk_sums
    rows_per_chunk = max(1, (COMPILED_CHUNK_VALUES if compiled else EAGER_CHUNK_VALUES) // k)
    ops = TorchOps(x.device)
    conf = torch.empty(n, dtype=torch.float64, device=x.device) if keep else None
    correct = torch.empty(n, dtype=torch.bool, device=x.device) if keep else None
    ints, floats = [], []
    for start in range(0, n, rows_per_chunk):
        stop = min(n, start + rows_per_chunk)
        c_conf, c_correct, c_ints, c_floats = chunk_sums(
            ops, x[start:stop], y[start:stop], edges, is_logits=is_logits, top5=k > 5, n=n, tolerance=tolerance,
        )
        if keep:
            conf[start:stop] = c_conf
            correct[start:stop] = c_correct
        ints.append(c_ints)
        floats.append(c_floats)
    int_sums = torch.stack(ints).sum(dim=0).cpu().numpy()  # chunk totals added in chunk order
    float_sums = torch.stack(floats).sum(dim=0).cpu().numpy()
    return conf, correct, _unpack(int_sums, float_sums, m)


def _bin_sums(conf, correct, edges):
    """(count, Σconf, Σcorrect) per bin (e_b, e_b+1] of ``edges`` (M + 1 of them; bin 0 also takes
    values ≤ e_0, bin M − 1 values > e_M): :func:`~calibrate_cli.engine.binning.assign_bins` and
    :func:`~calibrate_cli.engine.binning.torch_bin_sums` (masked column sums: a fixed reduction order)."""
    count, sum_conf, sum_correct = torch_bin_sums(assign_bins(conf, edges)[:, None], conf[:, None],
                                                  correct[:, None], edges.shape[0] - 1)
    return count[0], sum_conf[0], sum_correct[0]


def _chunk_sums(ops, x, y, edges, *, is_logits: bool, top5: bool, n: int, tolerance: float):
    """One row chunk: (conf, correct, int sums, float sums), the per-row quantities from
    :func:`~calibrate_cli.engine.rows.row_stats` (``ops``: the tensors' namespace). The int sums:
    width-bin counts (M), bin #correct (M), #correct, #top-5, #infinite NLL, #s99, #s99 correct, #rows
    with a non-finite score, #rows of probabilities outside [0, 1] or whose sum is off by more than
    ``tolerance``. The float sums: width-bin Σconf (M), Σconf, Σ finite NLL, Σ finite NLL / n, Σ Brier."""
    import torch

    f64 = torch.float64
    rows = row_stats(ops, x, y, is_logits=is_logits, top5=top5)
    p, conf, correct, nll, brier, hit5 = rows.p, rows.conf, rows.correct, rows.nll, rows.brier, rows.top5
    if is_logits:
        bad_probs = torch.zeros_like(y, dtype=torch.bool)
    else:
        bad_probs = ((p < 0) | (p > 1 + tolerance)).any(dim=1) | (torch.abs(p.sum(dim=1) - 1.0) > tolerance)
    count, sum_conf, sum_correct = _bin_sums(conf, correct, edges)
    infinite = torch.isinf(nll)
    finite_nll = torch.where(infinite, torch.zeros((), dtype=f64, device=x.device), nll)
    confident = conf >= S99_THRESHOLD
    non_finite = (~torch.isfinite(x)).any(dim=1)
    hits = hit5.sum() if hit5 is not None else torch.zeros((), dtype=torch.int64, device=x.device)
    int64 = torch.int64
    ints = torch.cat([
        count.to(int64), sum_correct.to(int64),
        torch.stack([
            correct.sum(), hits, infinite.sum(), confident.sum(), (confident & correct).sum(), non_finite.sum(),
            bad_probs.sum(),
        ]).to(int64),
    ])
    floats = torch.cat([sum_conf, torch.stack([conf.sum(), finite_nll.sum(), (finite_nll / n).sum(), brier.sum()])])
    return conf, correct, ints, floats


def _unpack(ints: np.ndarray, floats: np.ndarray, m: int) -> dict:
    """Name the summed vectors of :func:`_chunk_sums`."""
    names = ("correct", "top5", "nll_inf", "s99", "s99_correct", "non_finite", "bad_probs")
    out = {"count": ints[:m].astype(np.int64), "sum_correct": ints[m:2 * m].astype(np.float64)}
    out.update({name: int(v) for name, v in zip(names, ints[2 * m:2 * m + len(names)])})
    out["sum_conf"] = floats[:m].astype(np.float64)
    out.update({name: float(v) for name, v in zip(("conf_sum", "nll_sum", "nll_scaled", "brier_sum"), floats[m:])})
    return out


def _raise_for_bad_rows(torch, x, totals: dict, is_logits: bool, tolerance: float) -> None:
    """One-line errors for what the pass counted: non-finite scores, probabilities that are not."""
    if totals["non_finite"]:
        bad = (~torch.isfinite(x)).any(dim=1)
        row = int(torch.argmax(bad.to(torch.int8)))
        what = "NaN" if bool(torch.isnan(x).any()) else "Inf"
        raise InputError(f"scores contain {what} (first at row {row})")
    if not is_logits and totals["bad_probs"]:
        raise InputError(
            f"probability rows must lie in [0, 1] and sum to 1 (±{tolerance:.3g}): {int(totals['bad_probs'])} rows do "
            "not; if these are logits, use input_kind='logits'"
        )


def _checked(torch, scores, labels, input_kind: str):
    """(scores as (N, K) floats, labels as int64, is_logits), checked; one-line InputErrors."""
    if input_kind not in ("logits", "probs", None):
        raise InputError(f"Expected `input_kind` to be 'logits' or 'probs', but got {input_kind!r}")
    unstated, input_kind = input_kind is None, input_kind or "logits"
    if not isinstance(scores, torch.Tensor) or not isinstance(labels, torch.Tensor):
        raise InputError("device_metrics takes torch tensors (numpy arrays: calibrate_cli.evaluate)")
    if scores.device != labels.device:
        raise InputError(f"scores are on {scores.device} but labels on {labels.device}: put both on one device")
    if not scores.is_floating_point():
        raise InputError(f"scores must be floating point, got {scores.dtype}")
    if scores.ndim not in (1, 2):
        raise InputError(f"expected scores of shape (N, K) or (N,) for binary scores, got shape {tuple(scores.shape)}")
    if scores.shape[0] == 0:
        raise InputError("no samples (N = 0)")
    if scores.ndim == 2 and scores.shape[1] < 2:
        raise InputError(f"{scores.shape[1]} score column(s); need K ≥ 2 classes (binary scores: a 1-D vector)")
    if labels.ndim != 1 or labels.shape[0] != scores.shape[0]:
        raise InputError(f"labels of shape {tuple(labels.shape)} for {scores.shape[0]} rows of scores: expected ({scores.shape[0]},)")
    if labels.is_floating_point() or labels.is_complex():
        raise InputError(f"labels must be integers, got {labels.dtype}")
    is_logits = input_kind == "logits"
    if unstated and scores.ndim == 2:  # softmax of probabilities would be a silent wrong number
        lo, hi = (float(v) for v in torch.aminmax(scores))
        if lo >= 0 and hi <= 1 + PROBS_SUM_TOLERANCE:
            off = (scores.sum(dim=1, dtype=torch.float64) - 1.0).abs().max()
            if float(off) <= PROBS_SUM_TOLERANCE:
                raise InputError("scores: every row lies in [0, 1] and sums to 1: these look like probabilities, not "
                                 "logits (softmax would be taken of them)", remedy="probs-or-logits")
    if scores.ndim == 1:  # binary: two columns, as calibrate_cli.data.predictions does
        s = scores.to(torch.float64)
        scores = torch.stack([1.0 - s, s] if not is_logits else [torch.zeros_like(s), s], dim=1)
    k = scores.shape[1]
    lo, hi = (int(v) for v in torch.aminmax(labels.to(torch.int64)))
    if lo < 0 or hi >= k:
        raise InputError(f"labels must be class indices in [0, {k}) for K = {k} score columns; found {lo if lo < 0 else hi}")
    return scores.contiguous(), labels.to(torch.int64).contiguous(), is_logits


def _numpy_dtype(dtype):
    import torch

    return {torch.float64: np.float64, torch.float32: np.float32}.get(dtype, np.float32)


_COMPILED: dict = {}


def _compiled_pass(device):
    """(chunk pass, bin sums) compiled by torch.compile for a CUDA device, or None (eager)."""
    if device.type != "cuda" or os.environ.get(COMPILE_ENV, "1") == "0":
        return None
    if "fns" not in _COMPILED:
        import torch

        try:
            import triton  # noqa: F401  (inductor's CUDA code generator)
        except ImportError:
            _COMPILED["fns"] = None
        else:
            _COMPILED["fns"] = (torch.compile(_chunk_sums, dynamic=False), torch.compile(_bin_sums, dynamic=False))
    return _COMPILED["fns"]


# ------------------------------------------------------------------------------- order statistics


def order_statistics_on_device(values, ranks) -> np.ndarray:
    """``sort(values)[ranks]`` of a 1-D float64 tensor of non-negative values, exactly, without sorting
    the N values: as :func:`calibrate_cli.engine.sorting.order_statistics`, for a device.

    Above :data:`SELECT_BRACKET_MIN` values the ranks are first bracketed from a strided sample
    (:func:`_select_bracketed`); where a bracket misses its rank, or for fewer values, the histogram:
    non-negative doubles are ordered as their int64 bit patterns. A set of bit patterns in [lo, hi] is
    counted into 2^:data:`SELECT_BUCKET_BITS` buckets b = (v − lo) >> s (integer counts, exact); the
    members of the buckets that hold a wanted rank are gathered (grouped by bucket) and each group is
    refined the same way, or sorted once it holds at most :data:`SELECT_SORT_LIMIT` values. A group's
    span shrinks by 2^SELECT_BUCKET_BITS a round, so at most ⌈63 / SELECT_BUCKET_BITS⌉ rounds."""
    import torch

    ranks = np.asarray(ranks, dtype=np.int64)
    n = values.shape[0]
    if ranks.size and (ranks.min() < 0 or ranks.max() >= n):
        raise ValueError(f"ranks must lie in [0, {n})")
    values = values.to(torch.float64) + 0.0  # + 0.0: −0.0 becomes +0.0
    wanted = np.unique(ranks)
    found = _select_bracketed(torch, values, wanted) if n > SELECT_BRACKET_MIN else None
    if found is None:  # small, or a bracket missed its rank: the histogram of the bit patterns
        bits = _select_bits(torch, values.view(torch.int64), wanted)
        found = torch.as_tensor(bits, dtype=torch.int64).view(torch.float64).numpy()
    return found[np.searchsorted(wanted, ranks)]


def _select_bracketed(torch, values, wanted: np.ndarray) -> np.ndarray | None:
    """The values of ascending ranks ``wanted`` among ``values``, or None when a bracket missed.

    A strided sample, sorted, brackets each wanted rank r by the sample values SELECT_MARGIN positions
    either side of r·s/N; the brackets, merged into disjoint closed intervals [L_i, H_i], are counted in
    one pass (``bucketize`` on the edges −inf, L_0⁻, H_0, L_1⁻, H_1, …, +inf, L⁻ the double below L, then
    integer ``bincount``): #below_i and #inside_i exactly. Each rank must fall inside its interval's
    counts (else None: the caller selects another way); then only the members of those intervals are
    gathered and sorted, and rank r is member r − #below_i of its interval. Exact whatever the order
    of the values: a biased sample only costs the fallback."""
    n = values.shape[0]
    step = max(1, n // SELECT_SAMPLE)
    sample = torch.sort(values[::step]).values
    s = sample.shape[0]
    centre = wanted.astype(np.float64) * s / n
    lo = np.floor(centre).astype(np.int64) - SELECT_MARGIN
    hi = np.ceil(centre).astype(np.int64) + SELECT_MARGIN
    at = torch.as_tensor(np.concatenate([np.clip(lo, 0, s - 1), np.clip(hi, 0, s - 1)]), device=values.device)
    picked = sample[at].cpu().numpy()
    low = np.where(lo < 0, -np.inf, np.nextafter(picked[: wanted.shape[0]], -np.inf))  # (L⁻, H] = [L, H]
    high = np.where(hi > s - 1, np.inf, picked[wanted.shape[0]:])
    intervals = []  # disjoint (low, high], ascending
    for a, b in sorted(zip(low, high)):
        if intervals and a <= intervals[-1][1]:
            intervals[-1][1] = max(intervals[-1][1], b)
        else:
            intervals.append([a, b])
    edges = np.concatenate([[-np.inf], np.ravel(intervals), [np.inf]])
    edges = np.unique(edges)  # −inf and +inf may already be bracket ends
    d_edges = torch.as_tensor(edges, device=values.device)
    position = torch.bucketize(values, d_edges, right=False)  # #{e_j < v}: v in (e_p−1, e_p]
    counts = torch.bincount(position, minlength=edges.shape[0] + 1).cpu().numpy()
    below = np.concatenate([[0], np.cumsum(counts)])  # below[p]: #values in bins before p
    # the bin of each interval: p with e_p−1 = its low end
    interval_bins = np.searchsorted(edges, [a for a, _ in intervals], side="left") + 1
    first = below[interval_bins]
    last = first + counts[interval_bins]
    owner = np.searchsorted(last, wanted, side="right")
    if (owner >= len(intervals)).any() or (wanted < first[np.minimum(owner, len(intervals) - 1)]).any():
        return None
    needed = np.unique(owner)
    is_needed = torch.zeros(edges.shape[0] + 1, dtype=torch.bool, device=values.device)
    is_needed[torch.as_tensor(interval_bins[needed], device=values.device)] = True
    members = torch.sort(values[is_needed[position]]).values
    sizes = counts[interval_bins[needed]]
    offset = dict(zip(needed.tolist(), np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()))
    at_members = np.array([offset[o] for o in owner.tolist()]) + wanted - first[owner]
    return members[torch.as_tensor(at_members, device=values.device)].cpu().numpy()


def _select_bits(torch, bits, wanted: np.ndarray) -> np.ndarray:
    """The int64 values of ascending ranks ``wanted`` (sorted, unique) among ``bits``."""
    if bits.shape[0] <= SELECT_SORT_LIMIT:
        return torch.sort(bits).values[torch.as_tensor(wanted, device=bits.device)].cpu().numpy()
    lo, hi = (int(v) for v in torch.aminmax(bits))
    if lo == hi:
        return np.full(wanted.shape[0], lo, dtype=np.int64)
    shift = max(0, (hi - lo).bit_length() - SELECT_BUCKET_BITS)
    bucket = (bits - lo) >> shift
    count_d = torch.bincount(bucket, minlength=((hi - lo) >> shift) + 1)
    count = count_d.cpu().numpy()
    ends = np.cumsum(count)
    which = np.searchsorted(ends, wanted, side="right")
    chosen = np.unique(which)
    starts = ends - count
    # the members of the chosen buckets, grouped by bucket (a stable sort on the small bucket index)
    is_chosen = torch.zeros(count.shape[0], dtype=torch.bool, device=bits.device)
    is_chosen[torch.as_tensor(chosen, device=bits.device)] = True
    keep = is_chosen[bucket]
    members = bits[keep]
    order = torch.sort(bucket[keep], stable=True).indices
    members = members[order]
    out = np.empty(wanted.shape[0], dtype=np.int64)
    offset = 0
    for c in chosen:
        size = int(count[c])
        here = which == c
        out[here] = _select_bits(torch, members[offset:offset + size], wanted[here] - starts[c])
        offset += size
    return out
