"""Top-label metrics of predictions that already live on a torch device (a GPU), without copying them.

:func:`device_metrics` is :func:`calibrate_cli.evaluate`'s top-label half for torch tensors: every
reduction runs where the tensors are, in float64, and only the sufficient sums (docs/conventions.md)
come back to the host as a :class:`~calibrate_cli.metrics.registry.MetricSums`, turned into metrics
by the registry as for numpy. One pass per row chunk (:func:`_chunk_sums`, compiled by
``torch.compile`` on CUDA where inductor's code generator is installed; eager elsewhere or with
``CALIB_TORCH_COMPILE=0``) runs the one row pass (:func:`~calibrate_cli.engine.rows.row_stats`) and
the one bin rule (:func:`~calibrate_cli.engine.binning.assign_bins`); AdaECE's edges are selected
on the device (:func:`~calibrate_cli.engine.sorting.order_statistics`), never sorted. Sums are
reductions in a fixed order (no float atomics): a run repeats bit for bit, and agrees with
:func:`calibrate_cli.evaluate` within the numeric contract (torch's exp/log may differ in the last bit).
"""

from __future__ import annotations

import math
import os
from dataclasses import fields

import numpy as np

from .binning import (S99_THRESHOLD, assign_bins, equal_mass_edges_of, torch_bin_sums, torch_class_bin_sums,
                      uniform_edges)
from .devices import TorchOps
from .rows import row_stats
from .sorting import order_statistics, tie_tolerant
from ..errors import InputError
from ..metrics.registry import BinSums, MetricSums, WeightedSamples, metric_values, sums_needed, METRICS
from ..metrics.functional import DEFAULT_N_BINS
from ..data.predictions import probs_sum_tolerance, resolve_input_kind

__all__ = [
    "DEVICE_EXTRAS", "DEVICE_METRICS", "compile_failure", "device_batch", "device_metrics", "host_metric_sums",
]

#: the sums the device pass produces; a metric is available on the device when it needs no other
DEVICE_SUMS = frozenset(f.name for f in fields(MetricSums)) - {
    "n", "nll_scale", "classwise_gap", "classwise_classes", "samples", "class_samples"
}
#: the metrics :func:`device_metrics` computes (the top-label ones of the registry, in report order)
DEVICE_METRICS = tuple(spec.name for spec in METRICS if spec.by_default and spec.needs <= DEVICE_SUMS)
#: the default metrics the pass makes when asked, besides: classwise-ECE from per-class cells on the
#: device, KS-CE and SmoothECE from the confidences sorted there (read by the registry on the host)
DEVICE_EXTRAS = tuple(spec.name for spec in METRICS
                      if spec.by_default and spec.needs <= DEVICE_SUMS | {"classwise_gap", "samples"}
                      and spec.name not in DEVICE_METRICS)

#: values per row chunk: compiled (CUDA), where nothing of (rows × K) is materialised, and eager, where
#: each float64 temporary is 8 bytes a value. Constants: results never depend on the device's memory.
COMPILED_CHUNK_VALUES = 1 << 28
EAGER_CHUNK_VALUES = 1 << 22
#: CALIB_TORCH_COMPILE=0 runs the eager pass on CUDA too (no torch.compile)
COMPILE_ENV = "CALIB_TORCH_COMPILE"
#: threads copying a block of a host array into a page-locked buffer (the file's pages are read there)
HOST_COPY_THREADS = 4


def device_metrics(scores, labels, *, input_kind: str | None = None, n_bins: int = DEFAULT_N_BINS,
                   metrics=None) -> dict[str, float | None]:
    """The top-label metrics (:data:`DEVICE_METRICS`: ECE, AdaECE, MCE, RMS-CE, debiased L2-CE, NLL,
    Brier, accuracy, error, top-5 accuracy, mean confidence, s99) of torch tensors on any device, as
    ``{name: value}`` (None where undefined), equal to :func:`calibrate_cli.evaluate`'s to ~1e-15.

    ``scores``: (N, K) logits or probabilities (``input_kind``), or (N,) binary log-odds / p(class 1),
    any float dtype; ``labels``: (N,) integer class indices on the same device. ``metrics``: a subset
    of :data:`DEVICE_METRICS` and :data:`DEVICE_EXTRAS` (default: all of DEVICE_METRICS); the sums the
    others need are not computed.

    >>> logits = model(x).detach()                                # doctest: +SKIP
    >>> calib.device_metrics(logits, y, metrics=["ece", "nll"])   # doctest: +SKIP
    {'ece': 0.0123..., 'nll': 0.351...}
    """
    names = list(DEVICE_METRICS if metrics is None else metrics)
    unknown = [name for name in names if name not in DEVICE_METRICS + DEVICE_EXTRAS]
    if unknown:
        raise InputError(
            f"device_metrics computes {', '.join(DEVICE_METRICS + DEVICE_EXTRAS)}; not {', '.join(map(str, unknown))} "
            "(the opt-in classwise metrics: calibrate_cli.evaluate on numpy arrays)"
        )
    sums = device_batch(scores, labels, input_kind=input_kind, n_bins=n_bins, names=names)[0]
    values = metric_values(sums, names)
    return {name: None if math.isnan(float(v[0])) else float(v[0]) for name, v in values.items()}


def device_batch(scores, labels, *, input_kind: str | None = None, n_bins: int = DEFAULT_N_BINS, names=None,
                 rows: bool = False, cells: bool = False):
    """(the :class:`~calibrate_cli.metrics.registry.MetricSums` (batch of 1) of torch tensors, computed
    on their device (``names``: the metrics whose sums are wanted; default all of :data:`DEVICE_METRICS`;
    bad input raises :class:`InputError`), the rows' (confidence float64, correctness) on the device when
    ``rows``, the classwise cells (count, Σp, Σ[y = k]) as (K, M) numpy arrays when ``cells``), all from
    one pass over the tensors: what a meter adding batches keeps."""
    import torch

    x, y, is_logits = _checked(torch, scores, labels, input_kind)
    n, k = x.shape
    step = _rows_per_chunk(x.device, k)
    blocks = ((start, x[start:start + step], y[start:start + step]) for start in range(0, n, step))
    bad_rows = lambda: ((~torch.isfinite(x)).any(dim=1).cpu().numpy(), bool(torch.isnan(x).any()))  # noqa: E731
    sums, _, columns, class_cells = _pass_sums(torch, blocks, x.device, n, k, probs_sum_tolerance(x), is_logits,
                                               n_bins, names, bad_rows, rows=rows, cells=cells)
    return sums, columns, class_cells


def host_metric_sums(scores: np.ndarray, labels: np.ndarray, *, device: str = "cuda", is_logits: bool = True,
                     n_bins: int = DEFAULT_N_BINS, names=None) -> tuple[MetricSums, np.ndarray | None]:
    """(:func:`device_batch`'s sums, AdaECE's edges | None) of host arrays (a memory-mapped file's too) on the torch ``device``:
    the rows move there a block at a time through two page-locked buffers, the copy of one block
    overlapping the pass over the one before, and only the sufficient sums come back. ``scores``:
    validated (N, K) floats; ``labels``: (N,) class indices in [0, K). ``names`` may also ask for
    classwise-ECE (per-class cells on the device) and the sorted-sample metrics (KS-CE, SmoothECE: the
    confidences sorted on the device, then read by the registry on the host)."""
    import torch

    dev = torch.device(device)
    n, k = scores.shape
    blocks = _host_blocks(torch, scores, labels, dev, _rows_per_chunk(dev, k))
    bad_rows = lambda: (~np.isfinite(scores).all(axis=1), bool(np.isnan(scores).any()))  # noqa: E731
    return _pass_sums(torch, blocks, dev, n, k, probs_sum_tolerance(scores), is_logits, n_bins, names, bad_rows)[:2]


def _rows_per_chunk(device, k: int) -> int:
    compiled = _compiled_pass(device) is not None
    return max(1, (COMPILED_CHUNK_VALUES if compiled else EAGER_CHUNK_VALUES) // k)


def _pass_sums(torch, blocks, device, n: int, k: int, tolerance: float, is_logits: bool, n_bins: int, names,
               bad_rows, *, rows: bool = False, cells: bool = False):
    """(MetricSums, AdaECE's edges | None, (conf, correct) | None, classwise cells | None) of the row
    blocks ``blocks`` ((start, scores, labels) on ``device``, in order): the chunk pass, AdaECE's edges
    selected on the device, the classwise cells and the sorted samples when ``names`` asks for them;
    the rows' confidences and correctness when ``rows``, the cells when ``cells``. ``tolerance``: how
    far from 1 a probability row may sum (that of the scores' stored dtype); ``bad_rows()``: (mask of
    non-finite rows, any NaN), for the error."""
    m = int(n_bins)
    needed = sums_needed(DEVICE_METRICS if names is None else names)
    width_edges = uniform_edges(m)  # also checks n_bins
    d_edges = torch.as_tensor(width_edges, dtype=torch.float64, device=device)
    keep = rows or bool(needed & {"mass", "samples"})
    compiled = _compiled_pass(device)
    bin_sums = compiled[1] if compiled else _bin_sums
    conf, correct, totals, class_cells = _chunked_pass(torch, blocks, n, k, device, d_edges, compiled, is_logits,
                                                       keep, tolerance, classwise=cells or "classwise_gap" in needed)
    _raise_for_bad_rows(totals, bad_rows, is_logits, tolerance)

    mass = samples = gap = edges = None
    if "mass" in needed:
        edges = equal_mass_edges_of(n, m, lambda ranks: order_statistics(conf, ranks))
        count, sum_conf, sum_correct = bin_sums(conf, correct, torch.as_tensor(tie_tolerant(edges), device=device))
        mass = BinSums(count.cpu().numpy()[None], sum_conf.cpu().numpy()[None], sum_correct.cpu().numpy()[None])
    if "samples" in needed:  # ascending confidence; the order within ties is free (unit weights)
        sorted_conf, order = torch.sort(conf)
        samples = WeightedSamples(sorted_conf.cpu().numpy(), correct[order].cpu().numpy(), None)
        del sorted_conf, order
    if class_cells is not None and "classwise_gap" in needed:
        gap = (class_cells[2] - class_cells[1])[None]  # Σ([y = k] − p_k) per (class, bin)
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
        classwise_gap=gap,
        samples=samples,
    ), edges, (conf, correct) if rows else None, class_cells if cells else None


# ------------------------------------------------------------------------------------------ the pass


def _chunked_pass(torch, blocks, n: int, k: int, device, edges, compiled, is_logits: bool, keep: bool,
                  tolerance: float, classwise: bool = False):
    """(conf, correct, totals, classwise cells | None) from :func:`_chunk_sums` over the row blocks
    (compiled on CUDA, else eager); the cells (count, Σp, Σy), each (K, M) numpy, when ``classwise``."""
    m = edges.shape[0] - 1
    chunk_sums = compiled[0] if compiled else _chunk_sums
    ops = TorchOps(device)
    conf = torch.empty(n, dtype=torch.float64, device=device) if keep else None
    correct = torch.empty(n, dtype=torch.bool, device=device) if keep else None
    ints, floats, class_cells = [], [], []
    for start, x, y in blocks:
        stop = start + x.shape[0]
        options = dict(is_logits=is_logits, top5=k > 5, n=n, tolerance=tolerance, classwise=classwise)
        c_conf, c_correct, c_ints, c_floats, c_cells = _run_chunk(chunk_sums, ops, x, y, edges, options)
        if keep:
            conf[start:stop] = c_conf
            correct[start:stop] = c_correct
        ints.append(c_ints)
        floats.append(c_floats)
        if classwise:
            class_cells.append(torch.stack([c.to(torch.float64) for c in c_cells]))
    int_sums = torch.stack(ints).sum(dim=0).cpu().numpy()  # chunk totals added in chunk order
    float_sums = torch.stack(floats).sum(dim=0).cpu().numpy()
    cells = None
    if classwise:
        count, sum_p, sum_y = torch.stack(class_cells).sum(dim=0).cpu().numpy()
        cells = (count.astype(np.int64), sum_p, sum_y)
    return conf, correct, _unpack(int_sums, float_sums, m), cells


def _run_chunk(chunk_sums, ops, x, y, edges, options: dict):
    """``chunk_sums`` on one block. The pass with the classwise cells runs eagerly: inductor's Triton
    code generator refused its float64 split reductions on large blocks (torch 2.11; docs/performance.md).
    Where the compiled pass fails otherwise, the eager :func:`_chunk_sums` from then
    on: the same definition, the same numbers."""
    if chunk_sums is _chunk_sums or options["classwise"] or "failed" in _COMPILED:
        return _chunk_sums(ops, x, y, edges, **options)
    try:
        return chunk_sums(ops, x, y, edges, **options)
    except Exception as exc:  # noqa: BLE001  (only the compiler's own errors fall back)
        if not type(exc).__module__.startswith(("torch._dynamo", "torch._inductor", "triton")):
            raise
        _COMPILED["failed"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return _chunk_sums(ops, x, y, edges, **options)


def _host_blocks(torch, scores: np.ndarray, labels: np.ndarray, device, rows: int):
    """(start, scores, labels) row blocks of host arrays on ``device``. On CUDA each block is copied
    into one of two page-locked buffers (by a few threads: the file's pages are read there) and sent
    by a side stream; the pass over block i runs while block i + 1 is read and sent, and a buffer is
    refilled only after the pass that read it. Elsewhere (a CPU torch device) plain copies."""
    n, k = scores.shape
    if device.type != "cuda":
        for start in range(0, n, rows):
            yield (start, torch.from_numpy(np.array(scores[start:start + rows])).to(device),  # a copy: writeable
                   torch.from_numpy(np.array(labels[start:start + rows], dtype=np.int64)).to(device))
        return
    from concurrent.futures import ThreadPoolExecutor

    rows = min(rows, n)
    dtype = torch.from_numpy(np.empty(0, dtype=scores.dtype)).dtype
    host_x = [torch.empty((rows, k), dtype=dtype, pin_memory=True) for _ in range(2)]
    host_y = [torch.empty(rows, dtype=torch.int64, pin_memory=True) for _ in range(2)]
    dev_x = [torch.empty((rows, k), dtype=dtype, device=device) for _ in range(2)]
    dev_y = [torch.empty(rows, dtype=torch.int64, device=device) for _ in range(2)]
    sent = [None, None]  # a buffer's copy to the device, done
    used = [None, None]  # the pass over a device buffer, done
    side = torch.cuda.Stream(device)
    main = torch.cuda.current_stream(device)
    parts = HOST_COPY_THREADS

    def fill(slot: int, start: int, stop: int) -> None:
        out_x, out_y = host_x[slot].numpy(), host_y[slot].numpy()
        bounds = np.linspace(start, stop, parts + 1).astype(np.int64)
        list(pool.map(lambda i: np.copyto(out_x[bounds[i] - start:bounds[i + 1] - start],
                                          scores[bounds[i]:bounds[i + 1]]), range(parts)))
        out_y[:stop - start] = labels[start:stop]

    with ThreadPoolExecutor(parts) as pool:
        for i, start in enumerate(range(0, n, rows)):
            slot, stop = i % 2, min(n, start + rows)
            if sent[slot] is not None:
                sent[slot].synchronize()  # the page-locked buffer's last copy has left
            fill(slot, start, stop)
            with torch.cuda.stream(side):
                if used[slot] is not None:
                    side.wait_event(used[slot])  # the device buffer's last pass is over
                x = dev_x[slot][:stop - start]
                y = dev_y[slot][:stop - start]
                x.copy_(host_x[slot][:stop - start], non_blocking=True)
                y.copy_(host_y[slot][:stop - start], non_blocking=True)
                sent[slot] = side.record_event()
            main.wait_event(sent[slot])
            yield start, x, y
            used[slot] = main.record_event()
    torch.cuda.current_stream(device).synchronize()


def _bin_sums(conf, correct, edges):
    """(count, Σconf, Σcorrect) per bin (e_b, e_b+1] of ``edges`` (M + 1 of them; bin 0 also takes
    values ≤ e_0, bin M − 1 values > e_M): :func:`~calibrate_cli.engine.binning.assign_bins` and
    :func:`~calibrate_cli.engine.binning.torch_bin_sums` (masked column sums: a fixed reduction order)."""
    count, sum_conf, sum_correct = torch_bin_sums(assign_bins(conf, edges)[:, None], conf[:, None],
                                                  correct[:, None], edges.shape[0] - 1)
    return count[0], sum_conf[0], sum_correct[0]


def _chunk_sums(ops, x, y, edges, *, is_logits: bool, top5: bool, n: int, tolerance: float, classwise: bool = False):
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
    cells = torch_class_bin_sums(p, y, edges) if classwise else None
    return conf, correct, ints, floats, cells


def _unpack(ints: np.ndarray, floats: np.ndarray, m: int) -> dict:
    """Name the summed vectors of :func:`_chunk_sums`."""
    names = ("correct", "top5", "nll_inf", "s99", "s99_correct", "non_finite", "bad_probs")
    out = {"count": ints[:m].astype(np.int64), "sum_correct": ints[m:2 * m].astype(np.float64)}
    out.update({name: int(v) for name, v in zip(names, ints[2 * m:2 * m + len(names)])})
    out["sum_conf"] = floats[:m].astype(np.float64)
    out.update({name: float(v) for name, v in zip(("conf_sum", "nll_sum", "nll_scaled", "brier_sum"), floats[m:])})
    return out


def _raise_for_bad_rows(totals: dict, bad_rows, is_logits: bool, tolerance: float) -> None:
    """One-line errors for what the pass counted: non-finite scores (``bad_rows()``: the (N,) mask of
    rows holding one and whether a NaN is among them, made only here), probabilities that are not."""
    if totals["non_finite"]:
        mask, has_nan = bad_rows()
        raise InputError(f"scores contain {'NaN' if has_nan else 'Inf'} (first at row {int(np.argmax(mask))})")
    if not is_logits and totals["bad_probs"]:
        raise InputError(
            f"probability rows must lie in [0, 1] and sum to 1 (±{tolerance:.3g}): {int(totals['bad_probs'])} rows do "
            "not; if these are logits, use input_kind='logits'"
        )


def _checked(torch, scores, labels, input_kind: str):
    """(scores as (N, K) floats, labels as int64, is_logits), checked; one-line InputErrors."""
    if input_kind not in ("logits", "probs", None):
        raise InputError(f"Expected `input_kind` to be 'logits' or 'probs', but got {input_kind!r}")
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
    is_logits = resolve_input_kind(scores, input_kind) == "logits"
    if scores.ndim == 1:  # binary: two columns, as calibrate_cli.data.predictions does
        s = scores.to(torch.float64)
        scores = torch.stack([1.0 - s, s] if not is_logits else [torch.zeros_like(s), s], dim=1)
    k = scores.shape[1]
    lo, hi = (int(v) for v in torch.aminmax(labels.to(torch.int64)))
    if lo < 0 or hi >= k:
        raise InputError(f"labels must be class indices in [0, {k}) for K = {k} score columns; found {lo if lo < 0 else hi}")
    return scores.contiguous(), labels.to(torch.int64).contiguous(), is_logits


_COMPILED: dict = {}


def compile_failure() -> str | None:
    """The compiler's error that sent the pass back to eager in this process (one line), or None."""
    return _COMPILED.get("failed")


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
