"""The torch engine of the summary pass: one row chunk on a torch device (CUDA, or the CPU for tests).

:func:`torch_chunk` computes what :func:`~calibrate_cli.engine.kernels.numpy_chunk` computes — the same
formulas (docs in :mod:`calibrate_cli.engine.kernels`), in the same dtype (float64; float32 in the compat
mode, as the reference code), with the device's array namespace (:class:`~calibrate_cli.engine.devices.TorchOps`):

    z_ik = x_ik − max_j x_ij,  p_ik = exp z_ik / Σ_j exp z_ij,  nll_i = −(z_iy − log Σ_j exp z_ij)
    pred_i = argmax_k p_ik (lowest index on ties: torch.argmax returns the first maximal index)
    brier_i = Σ_k (p_ik − [k = y_i])²,  top5_i = [#{s_k > s_y} + #{k < y : s_k = s_y} < 5]
    count_kb, Σp_kb, Σ[y = k]_kb over the bins of :func:`~calibrate_cli.engine.binning.assign_bins`
    (searchsorted on the same edges, in the same dtype)

Only the scores of one chunk are on the device at a time: the chunk is copied host → device in
its stored dtype (float32 stays 4 bytes a value on the wire) and widened there, so an input larger
than the GPU's memory evaluates; the per-sample results come back per chunk.

What is exact and what agrees to rounding: the shifted logits z, the argmax on exact ties, the
top-5 ranks, the bin counts and every quantity of probability inputs (a cast only) are the numpy
engine's bit for bit; ``exp``/``log`` (torch's vectorised ones, not the C library's) and the
order of the row sums may differ in the last bit, so confidences, NLL and Brier agree to a few ulps
and every metric to ~1e-15 (tests: 1e-9). The classwise Σp per cell is summed per bin with torch's
(deterministic) reductions rather than atomics, so a CUDA run repeats bit for bit.

:func:`grid_sums` and :func:`nll_sums` are the per-chunk kernels of temperature fitting on a device
(the grid of T by ECE or NLL, and the Newton passes of the exact NLL fit).
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["TORCH_CHUNK_ELEMENTS", "grid_sums", "nll_sums", "row_quantities", "torch_chunk"]

#: score values per chunk moved to the device at once (float64 temporaries ~0.5-1 GB on the device);
#: a constant, so the results never depend on the device's memory
TORCH_CHUNK_ELEMENTS = 1 << 24


def torch_chunk(ops, scores: np.ndarray, labels: np.ndarray, edges: np.ndarray, *, is_logits: bool, compat,
                top5: bool, classwise: bool, lowest_closed: bool):
    """One chunk's (conf, correct, nll, brier, top5 | None, classwise stats | None) on ``ops``'s device,
    as numpy arrays: the tuple of :func:`~calibrate_cli.engine.kernels.numpy_chunk`."""
    torch = ops.torch
    work = torch.float32 if compat else torch.float64
    with warnings.catch_warnings():  # a read-only (memory-mapped) chunk: torch warns, but x is never written
        warnings.simplefilter("ignore", UserWarning)
        x = ops.asarray(scores)  # host → device in the stored dtype
    y = ops.asarray(labels).to(torch.int64)
    rows, k = x.shape
    p, conf, correct, nll, brier, hit5 = row_quantities(x, y, is_logits=is_logits, work=work, top5=top5)
    del x
    hit5 = None if hit5 is None else ops.to_numpy(hit5)
    stats = None
    if classwise:
        m = edges.shape[0] - 1
        if k * m <= max(rows * k, 1 << 16):
            stats = _class_bins(ops, p, y, edges, lowest_closed)
        else:  # far more cells than values: the numpy engine's sparse cells, from these probabilities
            from .summary import _class_bin_statistics

            stats = _class_bin_statistics(ops.to_numpy(p), labels, edges, lowest_closed)
    return (ops.to_numpy(conf), ops.to_numpy(correct), ops.to_numpy(nll), ops.to_numpy(brier), hit5, stats)


def row_quantities(x, y, *, is_logits: bool, work, top5: bool):
    """Per row of the (rows, K) scores ``x`` (a torch tensor on any device; ``y`` its int64 labels there):
    (p, conf, correct, nll, brier, top5 | None) as tensors on that device, by the formulas of the module
    docstring, computed in the dtype ``work`` (NLL and Brier in float64). Shared by the host-chunk pass
    (:func:`torch_chunk`) and the pass over tensors already on the device
    (:func:`calibrate_cli.engine.device_eval._chunk_sums`). No in-place writes: ``x`` may be the caller's."""
    import torch

    f64 = torch.float64
    y_col = y[:, None]
    if is_logits:
        z = x.to(work)
        z = z - z.amax(dim=1, keepdim=True)
        e = torch.exp(z)
        total = e.sum(dim=1, keepdim=True)
        p = e / total
        logp_y = torch.gather(z, 1, y_col)[:, 0] - torch.log(total[:, 0])
        ranked = x.to(f64)  # the logits themselves: z = x − max rounds, distinct logits may tie there
    else:
        p = x.to(work)
        logp_y = torch.log(torch.gather(p, 1, y_col)[:, 0])  # log 0 = −inf: an infinite NLL, as numpy's
        ranked = p
    pred = torch.argmax(p, dim=1)  # the first maximal index on ties
    conf = torch.gather(p, 1, pred[:, None])[:, 0]
    correct = pred == y
    nll = -logp_y.to(f64)
    classes = torch.arange(x.shape[1], device=x.device)[None, :]
    hit5 = None
    if top5:
        s_y = torch.gather(ranked, 1, y_col)
        rank = (ranked > s_y).sum(dim=1) + ((ranked == s_y) & (classes < y_col)).sum(dim=1)
        hit5 = rank < 5
    residual = p.to(f64) - (classes == y_col).to(f64)  # p_k − [k = y]: p_y − 1 and p_k − 0 = p_k, exactly
    brier = (residual * residual).sum(dim=1)
    return p, conf, correct, nll, brier, hit5


def _class_bins(ops, p, y, edges: np.ndarray, lowest_closed: bool) -> tuple:
    """Dense (K, M) count, Σp and Σ[y = k] of the chunk's probabilities ``p`` (rows, K).

    The bin of each value is ``searchsorted(edges, v, left) − 1`` clamped as
    :func:`~calibrate_cli.engine.binning.assign_bins` (the comparison in ``p``'s dtype); counts are integer
    bincounts (exact), each bin's Σp a masked column sum in float64 (a fixed reduction order)."""
    torch = ops.torch
    rows, k = p.shape
    m = edges.shape[0] - 1
    d_edges = ops.asarray(edges).to(p.dtype)
    idx = ops.searchsorted(d_edges, p, right=False) - 1
    idx = torch.clamp(idx, max=m - 1)
    if lowest_closed:
        idx = torch.clamp(idx, min=0)
    inside = idx >= 0
    keys = idx + (ops.arange(k) * m)[None, :]
    count = torch.bincount(keys[inside], minlength=k * m)
    r = ops.arange(rows)
    true_keys = keys[r, y][inside[r, y]]
    sum_y = torch.bincount(true_keys, minlength=k * m).to(torch.float64)
    p64 = p.to(torch.float64)
    zero = torch.zeros((), dtype=torch.float64, device=p.device)
    sum_p = torch.stack([torch.where(idx == b, p64, zero).sum(dim=0) for b in range(m)], dim=1)
    return (ops.to_numpy(count).reshape(k, m).astype(np.int64), ops.to_numpy(sum_p),
            ops.to_numpy(sum_y).reshape(k, m))


# ------------------------------------------------------------------------------ temperature fitting


def grid_sums(ops, z: np.ndarray, labels: np.ndarray, temps: np.ndarray, want_bins: bool, n_bins: int):
    """One chunk of the temperature grid on the device, every T at once, as the numpy grid computes
    it (:func:`~calibrate_cli.calibrators.temperature._grid_chunk`: x = z / T in float64, shifted by its
    maximum, softmax, first argmax): with ``want_bins`` (the ECE objective) the (T, M) count, Σconf and
    Σcorrect over the bins (b/M, (b+1)/M] (bin 0 closed); else (the NLL) the (T,) sums of −log p_iy(T)."""
    torch = ops.torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        x = ops.asarray(z).to(torch.float64)
    y = ops.asarray(labels).to(torch.int64)
    t = ops.asarray(np.asarray(temps, dtype=np.float64))
    n_t = t.shape[0]
    xs = x[:, None, :] / t[None, :, None]
    xs = xs - xs.max(dim=-1, keepdim=True).values
    if not want_bins:
        x_y = xs.gather(-1, y[:, None, None].expand(-1, n_t, 1))[..., 0]
        return ops.to_numpy((torch.log(torch.exp(xs).sum(dim=-1)) - x_y).sum(dim=0))
    e = torch.exp(xs)
    e /= e.sum(dim=-1, keepdim=True)
    pred = e.argmax(dim=-1)
    conf = e.gather(-1, pred[..., None])[..., 0]  # (rows, T)
    del e, xs
    correct = pred == y[:, None]
    from .binning import uniform_edges

    edges = ops.asarray(uniform_edges(n_bins))
    idx = torch.clamp(ops.searchsorted(edges, conf, right=False) - 1, 0, n_bins - 1)
    keys = idx + (ops.arange(n_t) * n_bins)[None, :]
    count = torch.bincount(keys.reshape(-1), minlength=n_t * n_bins)
    sum_corr = torch.bincount(keys[correct], minlength=n_t * n_bins).to(torch.float64)
    zero = torch.zeros((), dtype=torch.float64, device=conf.device)
    sum_conf = torch.stack([torch.where(idx == b, conf, zero).sum(dim=0) for b in range(n_bins)], dim=1)
    return (ops.to_numpy(count).reshape(n_t, n_bins).astype(np.int64), ops.to_numpy(sum_conf),
            ops.to_numpy(sum_corr).reshape(n_t, n_bins))


def nll_sums(ops, z: np.ndarray, labels: np.ndarray, beta: float) -> tuple[float, float, float]:
    """One chunk's Σ NLL, Σ (E_p[d] − d_y), Σ Var_p[d] at β on the device (d = z − max z, p =
    softmax(β d)): the sums of :func:`~calibrate_cli.calibrators.temperature._nll_pass`."""
    torch = ops.torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        x = ops.asarray(z).to(torch.float64)
    y = ops.asarray(labels).to(torch.int64)
    d = x - x.max(dim=1, keepdim=True).values
    d_y = d.gather(1, y[:, None])[:, 0]
    e = torch.exp(d * beta)
    s = e.sum(dim=1)
    d = torch.where(torch.isneginf(d), torch.zeros((), dtype=d.dtype, device=d.device), d)  # 0 · (−inf) → 0
    ed = e * d
    m1 = ed.sum(dim=1) / s
    m2 = (ed * d).sum(dim=1) / s
    return (float((torch.log(s) - beta * d_y).sum()), float((m1 - d_y).sum()),
            float(torch.clamp(m2 - m1 * m1, min=0.0).sum()))
