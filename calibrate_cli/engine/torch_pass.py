"""The torch engine of the summary pass: one row chunk on a torch device (CUDA, or the CPU for tests).

:func:`torch_chunk` runs the one definition of the row pass (:func:`~calibrate_cli.engine.rows.row_stats`)
with the device's array namespace (:class:`~calibrate_cli.engine.devices.TorchOps`), in float64
(float32 in the compat mode, as the reference code). Only the scores of one chunk are on the device
at a time: the chunk is copied host → device in its stored dtype (float32 stays 4 bytes a value on
the wire) and widened there, so an input larger than the GPU's memory evaluates; the per-sample
results come back per chunk.

Agreement with numpy (docs/conventions.md): the shifted logits, the argmax on exact ties, the top-5
ranks, the bin counts and every quantity of probability inputs (a cast only) are numpy's; torch's
``exp``/``log`` and row-sum orders may differ in the last bit, so every metric agrees to ~1e-15. The
classwise Σp per cell is a masked column sum (no float atomics), so a CUDA run repeats bit for bit.

:func:`grid_sums` and :func:`nll_sums` are the per-chunk temperature-fitting passes on a device
(:func:`~calibrate_cli.engine.rows.grid_rows`, :func:`~calibrate_cli.engine.rows.nll_newton_sums`).
"""

from __future__ import annotations

import warnings

import numpy as np

from .binning import assign_bins, torch_bin_sums, uniform_edges
from .rows import grid_rows, nll_newton_sums, row_stats

__all__ = ["TORCH_CHUNK_ELEMENTS", "grid_sums", "nll_sums", "torch_chunk"]

#: score values per chunk moved to the device at once (float64 temporaries ~0.5-1 GB on the device);
#: a constant, so the results never depend on the device's memory
TORCH_CHUNK_ELEMENTS = 1 << 24


def _on_device(ops, array: np.ndarray):
    """``array`` copied to ``ops``' device in its stored dtype (a read-only, memory-mapped chunk too:
    torch warns about those, but the tensor is never written)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return ops.asarray(array)


def torch_chunk(ops, scores: np.ndarray, labels: np.ndarray, edges: np.ndarray, *, is_logits: bool, compat,
                top5: bool, classwise: bool, lowest_closed: bool):
    """One chunk's (conf, correct, nll, brier, top5 | None, classwise stats | None) on ``ops``'s device,
    as numpy arrays: the tuple of :func:`~calibrate_cli.engine.summary.chunk_statistics`."""
    x = _on_device(ops, scores)
    y = ops.asarray(labels).to(ops.torch.int64)
    s = row_stats(ops, x, y, edges if classwise else None, is_logits=is_logits, top5=top5,
                  lowest_closed=lowest_closed, work_dtype=np.float32 if compat else np.float64)
    hit5 = None if s.top5 is None else ops.to_numpy(s.top5)
    return (ops.to_numpy(s.conf), ops.to_numpy(s.correct), ops.to_numpy(s.nll), ops.to_numpy(s.brier), hit5,
            s.classwise)


# ------------------------------------------------------------------------------ temperature fitting


def grid_sums(ops, z: np.ndarray, labels: np.ndarray, temps: np.ndarray, want_bins: bool, n_bins: int):
    """One chunk of the temperature grid on the device, every T at once (:func:`~calibrate_cli.engine.rows.grid_rows`):
    with ``want_bins`` (the ECE objective) the (T, M) count, Σconf and Σcorrect over the bins
    (b/M, (b+1)/M] (bin 0 closed; :func:`~calibrate_cli.engine.binning.torch_bin_sums`); else (the NLL) the (T,) sums
    of −log p_iy(T). Where rows × T × K exceeds :data:`TORCH_CHUNK_ELEMENTS` (a large K), the temperatures
    go in groups: each (row, T) is computed alone, so the sums are the same."""
    torch = ops.torch
    x = _on_device(ops, z)
    y = ops.asarray(labels).to(torch.int64)
    group = max(1, TORCH_CHUNK_ELEMENTS // max(1, x.shape[0] * x.shape[1]))
    parts = []
    for start in range(0, temps.shape[0], group):
        part = temps[start : start + group]
        if not want_bins:
            parts.append(ops.to_numpy(grid_rows(ops, x, y, part, nll=True).sum(dim=0)))
            continue
        conf, correct = grid_rows(ops, x, y, part, nll=False)  # (rows, T)
        count, sum_conf, sum_corr = torch_bin_sums(assign_bins(conf, uniform_edges(n_bins)), conf, correct, n_bins)
        parts.append((ops.to_numpy(count).astype(np.int64), ops.to_numpy(sum_conf), ops.to_numpy(sum_corr)))
    if not want_bins:
        return np.concatenate(parts)
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


def nll_sums(ops, z: np.ndarray, labels: np.ndarray, beta: float) -> tuple[float, float, float]:
    """One chunk's Σ NLL, Σ (E_p[d] − d_y), Σ Var_p[d] at β on the device
    (:func:`~calibrate_cli.engine.rows.nll_newton_sums`)."""
    return nll_newton_sums(ops, _on_device(ops, z), ops.asarray(labels).to(ops.torch.int64), beta)
