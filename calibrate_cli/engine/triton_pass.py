"""The device pass of :mod:`calibrate_cli.engine.device_eval` as two Triton kernels (CUDA only; needs triton).

``_rows_kernel``: each program streams ``ITERS`` blocks of ``BLOCK`` rows, one row per thread, so that
every reduction over the K classes stays inside a thread (a (rows × K) tile reduced across threads cost
~470 instructions a value, mostly layout shuffles, and ran at 1/30 of the read speed). A thread reads
its row three times (the maximum; Σ exp(z) and z_y; then p = exp(z)/Σ, the first argmax, Brier and the
rank of the true class: the second and third reads hit the L1 cache), in float64 with libdevice's
``exp``/``log``: the formulas of :func:`calibrate_cli.engine.device_eval._chunk_sums`. It writes each row's
confidence and correctness, and keeps its sums per row slot (no reduction across threads inside the
loop); at the end they become the program's partials, (programs, 11) float64 (counts are exact in
float64 below 2^53).

``_bins_kernel``: count, Σconf, Σcorrect per bin of any M + 1 edges (the equal-width bins, and
AdaECE's equal-mass bins) from the kept confidences, the same way: per row slot and bin, then one
reduction per program.

The host side adds the partials with one torch reduction (a fixed order: a run repeats bit for bit).
"""

from __future__ import annotations

import triton
import triton.language as tl

try:  # triton ≥ 3.0
    from triton.language.extra import libdevice
except ImportError:  # pragma: no cover - older layout
    from triton.language.extra.cuda import libdevice

#: the columns of a program's partials
SCALARS = ("correct", "top5", "nll_inf", "s99", "s99_correct", "non_finite", "bad_probs", "conf_sum", "nll_sum",
           "nll_scaled", "brier_sum")


@triton.jit
def _rows_kernel(x_ptr, y_ptr, conf_ptr, correct_ptr, part_ptr, n_rows, stride_x, inv_n, tolerance, s99_threshold,
                 K: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr,
                 IS_LOGITS: tl.constexpr, TOP5: tl.constexpr, NPART: tl.constexpr):
    pid = tl.program_id(0)
    # per row slot: nothing is reduced across threads until the program's last block
    a_correct = tl.zeros((BLOCK,), dtype=tl.float32)  # at most ITERS per slot: exact
    a_top5 = tl.zeros((BLOCK,), dtype=tl.float32)
    a_inf = tl.zeros((BLOCK,), dtype=tl.float32)
    a_s99 = tl.zeros((BLOCK,), dtype=tl.float32)
    a_s99_correct = tl.zeros((BLOCK,), dtype=tl.float32)
    a_non_finite = tl.zeros((BLOCK,), dtype=tl.float32)
    a_bad_probs = tl.zeros((BLOCK,), dtype=tl.float32)
    a_conf = tl.zeros((BLOCK,), dtype=tl.float64)
    a_nll = tl.zeros((BLOCK,), dtype=tl.float64)
    a_nll_scaled = tl.zeros((BLOCK,), dtype=tl.float64)
    a_brier = tl.zeros((BLOCK,), dtype=tl.float64)
    for it in range(ITERS):
        rows = (pid * ITERS + it) * BLOCK + tl.arange(0, BLOCK)
        row_ok = rows < n_rows
        row = x_ptr + rows.to(tl.int64) * stride_x  # one row per thread: every reduction stays in the thread
        y = tl.load(y_ptr + rows, mask=row_ok, other=0).to(tl.int32)
        # first read: the row's maximum (logits) or its sum, range and p_y (probabilities); non-finite values
        non_finite = rows < 0  # all False
        top = tl.full((BLOCK,), float("-inf"), dtype=tl.float64)
        row_sum = tl.zeros((BLOCK,), dtype=tl.float64)
        outside = rows < 0
        s_y = tl.zeros((BLOCK,), dtype=tl.float64)
        for j in range(K):
            v = tl.load(row + j, mask=row_ok, other=0.0).to(tl.float64)
            non_finite = non_finite | (v != v) | (v == float("inf")) | (v == float("-inf"))
            if IS_LOGITS:
                top = tl.maximum(top, v)
            else:
                row_sum += v
                outside = outside | (v < 0.0) | (v > 1.0 + tolerance)
                s_y = tl.where(y == j, v, s_y)
        if IS_LOGITS:
            # second read: Σ exp(x_j − max) and z_y
            total = tl.zeros((BLOCK,), dtype=tl.float64)
            for j in range(K):
                z = tl.load(row + j, mask=row_ok, other=0.0).to(tl.float64) - top
                total += libdevice.exp(z)
                s_y = tl.where(y == j, z, s_y)
            nll = libdevice.log(total) - s_y
            bad_probs = rows < 0
        else:
            total = tl.full((BLOCK,), 1.0, dtype=tl.float64)
            nll = -libdevice.log(s_y)
            bad_probs = outside | (tl.abs(row_sum - 1.0) > tolerance)
        # last read: p, the first argmax, Brier and the rank of the true class
        best = tl.full((BLOCK,), -1.0, dtype=tl.float64)
        pred = tl.zeros((BLOCK,), dtype=tl.int32)
        brier = tl.zeros((BLOCK,), dtype=tl.float64)
        rank = tl.zeros((BLOCK,), dtype=tl.int32)
        for j in range(K):
            v = tl.load(row + j, mask=row_ok, other=0.0).to(tl.float64)
            if IS_LOGITS:
                ranked = v - top
                p = libdevice.exp(ranked) / total
            else:
                ranked = v
                p = v
            better = p > best
            best = tl.where(better, p, best)
            pred = tl.where(better, j, pred)
            d = p - tl.where(y == j, 1.0, 0.0)
            brier += d * d
            if TOP5:
                rank += ((ranked > s_y) | ((ranked == s_y) & (j < y))).to(tl.int32)
        conf = best
        correct = (pred == y) & row_ok
        if TOP5:
            a_top5 += ((rank < 5) & row_ok).to(tl.float32)
        infinite = row_ok & ((nll == float("inf")) | (nll == float("-inf")))
        finite_nll = tl.where(infinite | ~row_ok, 0.0, nll)
        confident = row_ok & (conf >= s99_threshold)
        a_correct += correct.to(tl.float32)
        a_inf += infinite.to(tl.float32)
        a_s99 += confident.to(tl.float32)
        a_s99_correct += (confident & correct).to(tl.float32)
        a_non_finite += (non_finite & row_ok).to(tl.float32)
        a_bad_probs += (bad_probs & row_ok).to(tl.float32)
        a_conf += tl.where(row_ok, conf, 0.0)
        a_nll += finite_nll
        a_nll_scaled += finite_nll * inv_n
        a_brier += tl.where(row_ok, brier, 0.0)
        tl.store(conf_ptr + rows, conf, mask=row_ok)
        tl.store(correct_ptr + rows, correct.to(tl.int8), mask=row_ok)
    scalars = part_ptr + pid * NPART
    tl.store(scalars + 0, tl.sum(a_correct.to(tl.float64), axis=0))
    tl.store(scalars + 1, tl.sum(a_top5.to(tl.float64), axis=0))
    tl.store(scalars + 2, tl.sum(a_inf.to(tl.float64), axis=0))
    tl.store(scalars + 3, tl.sum(a_s99.to(tl.float64), axis=0))
    tl.store(scalars + 4, tl.sum(a_s99_correct.to(tl.float64), axis=0))
    tl.store(scalars + 5, tl.sum(a_non_finite.to(tl.float64), axis=0))
    tl.store(scalars + 6, tl.sum(a_bad_probs.to(tl.float64), axis=0))
    tl.store(scalars + 7, tl.sum(a_conf, axis=0))
    tl.store(scalars + 8, tl.sum(a_nll, axis=0))
    tl.store(scalars + 9, tl.sum(a_nll_scaled, axis=0))
    tl.store(scalars + 10, tl.sum(a_brier, axis=0))


@triton.jit
def _bins_kernel(conf_ptr, correct_ptr, edges_ptr, part_ptr, n, M: tl.constexpr, MP: tl.constexpr,
                 EP: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    """Per program: count, Σconf, Σcorrect per bin (e_b, e_b+1] of arbitrary ``edges`` (M + 1; bin 0 also
    takes values ≤ e_0, bin M − 1 values > e_M): b = #{j ≤ M : e_j < v} − 1 clamped to [0, M), which is
    searchsorted(edges, v, left) − 1 as :func:`calibrate_cli.engine.binning.assign_bins`."""
    pid = tl.program_id(0)
    bins = tl.arange(0, MP)
    j = tl.arange(0, EP)
    edges = tl.load(edges_ptr + j, mask=j <= M, other=float("inf"))
    acc_count = tl.zeros((BLOCK, MP), dtype=tl.float32)
    acc_conf = tl.zeros((BLOCK, MP), dtype=tl.float64)
    acc_correct = tl.zeros((BLOCK, MP), dtype=tl.float32)
    for it in range(ITERS):
        rows = (pid * ITERS + it) * BLOCK + tl.arange(0, BLOCK)
        row_ok = rows < n
        v = tl.load(conf_ptr + rows, mask=row_ok, other=0.0)
        correct = tl.load(correct_ptr + rows, mask=row_ok, other=0) != 0
        below = tl.sum((edges[None, :] < v[:, None]).to(tl.int32), axis=1)
        b = tl.minimum(tl.maximum(below - 1, 0), M - 1)
        in_bin = (b[:, None] == bins[None, :]) & row_ok[:, None]
        acc_count += in_bin.to(tl.float32)
        acc_conf += tl.where(in_bin, v[:, None], 0.0)
        acc_correct += (in_bin & correct[:, None]).to(tl.float32)
    base = part_ptr + pid * 3 * MP
    tl.store(base + bins, tl.sum(acc_count.to(tl.float64), axis=0))
    tl.store(base + MP + bins, tl.sum(acc_conf, axis=0))
    tl.store(base + 2 * MP + bins, tl.sum(acc_correct.to(tl.float64), axis=0))

#: rows per block (one per thread) and blocks one program streams (partials stay small at 10^8 rows)
BLOCK = 128
ITERS = 32
#: warps per program
NUM_WARPS = 4
#: the widest K the kernel takes (its column loops read each row three times; beyond, torch.compile)
MAX_K = 1024


def run_pass(x, y, edges, *, is_logits: bool, top5: bool, keep: bool, tolerance: float, s99_threshold: float,
             block: int | None = None, iters: int | None = None, num_warps: int | None = None):
    """(conf, correct, totals) of the whole (N, K) tensor ``x`` on its CUDA device: conf (N,) float64 and
    correct (N,) bool when ``keep`` (else None), and the summed partials as {name: value} plus the
    equal-width (``edges``) bins' ``count``, ``sum_conf``, ``sum_correct`` (numpy, length M)."""
    import torch

    n, k = x.shape
    block = BLOCK if block is None else block
    iters = ITERS if iters is None else iters
    programs = triton.cdiv(n, block * iters)
    npart = len(SCALARS)
    part = torch.empty((programs, npart), dtype=torch.float64, device=x.device)
    conf = torch.empty(n, dtype=torch.float64, device=x.device)
    correct = torch.empty(n, dtype=torch.bool, device=x.device)
    _rows_kernel[(programs,)](
        x, y, conf, correct.view(torch.int8), part, n, x.stride(0), 1.0 / n, tolerance, s99_threshold,
        K=k, BLOCK=block, ITERS=iters, IS_LOGITS=is_logits, TOP5=top5, NPART=npart,
        num_warps=NUM_WARPS if num_warps is None else num_warps,
    )
    sums = part.sum(dim=0).cpu().numpy()
    totals = {name: sums[i] for i, name in enumerate(SCALARS)}
    count, sum_conf, sum_correct = bin_sums(conf, correct, edges)
    totals.update(count=count.cpu().numpy(), sum_conf=sum_conf.cpu().numpy(),
                  sum_correct=sum_correct.cpu().numpy())
    return (conf, correct, totals) if keep else (None, None, totals)


#: rows per block and blocks per program of the bin pass
BIN_BLOCK = 128
BIN_ITERS = 64


def bin_sums(conf, correct, edges):
    """(count, Σconf, Σcorrect) per bin of ``edges`` (a float64 device tensor of M + 1 edges) of the
    confidences and correctness that :func:`run_pass` kept, as device tensors (count int64)."""
    import torch

    n = conf.shape[0]
    m = edges.shape[0] - 1
    mp = triton.next_power_of_2(m)
    programs = triton.cdiv(n, BIN_BLOCK * BIN_ITERS)
    part = torch.empty((programs, 3 * mp), dtype=torch.float64, device=conf.device)
    _bins_kernel[(programs,)](conf, correct.view(torch.int8), edges, part, n, M=m, MP=mp,
                              EP=triton.next_power_of_2(m + 1), BLOCK=BIN_BLOCK, ITERS=BIN_ITERS,
                              num_warps=NUM_WARPS)
    sums = part.sum(dim=0)
    return sums[:m].to(torch.int64), sums[mp:mp + m], sums[2 * mp:2 * mp + m]
