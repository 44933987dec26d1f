"""The torch (GPU) side of the bootstrap: the per-batch math of ``_Resampler.metrics`` on a torch device.

Only :mod:`calibrate_cli.bootstrap` imports this module, and only when a torch device is asked for,
so ``import calibrate_cli`` never imports torch. The set-up (summarize pass, sort, bin ranges) is
done once in numpy by ``_Resampler`` and its arrays are converted to tensors here; the random draws,
the multiplicity counts and the classwise side sums (a sparse product per row) stay in numpy, in
the drawing threads, so a torch device sees exactly the multiplicity rows that the numpy path sees.
The dense products, prefix sums, searches and interpolations then run in float64 on the device; the
results equal the numpy path's up to float64 summation order (≈1e-15 relative, tested to 1e-10).
"""
from __future__ import annotations

import numpy as np
import torch


class TorchResampler:
    """``_Resampler.metrics`` on ``device``: same inputs (multiplicity rows), same outputs (numpy)."""

    def __init__(self, engine, device: torch.device):
        e = self.e = engine
        self.device = device
        self.n, self.k, self.m = e.n, e.k, e.m
        self.n_padded, self.n_blocks, self.block, self.n_side = e.n_padded, e.n_blocks, e.block, e.n_side
        self.rank, self.order = e.rank, e.order  # used by the draws in `_run`
        t = lambda a: torch.as_tensor(np.ascontiguousarray(a), device=device)  # noqa: E731
        self.x_blocks = t(e.x_blocks)
        self.x3_blocks = t(e.x3_blocks)
        self.width_starts = t(e.width_starts)
        self.conf_sorted = t(e.conf_sorted)  # float32 in compat mode, as in numpy
        self.conf64 = self.conf_sorted.to(torch.float64)
        self.labels_sorted = t(e.labels_sorted)
        self.arange_block = torch.arange(self.block, device=device)

    # -- prefix sums --------------------------------------------------------------------------------

    def _prefix(self, wb, block_prefix, positions):
        b = wb.shape[0]
        g = torch.clamp(torch.div(positions, self.block, rounding_mode="floor"), max=self.n_blocks - 1)
        offset = positions - g * self.block
        r = torch.arange(b, device=self.device)[:, None]
        part_w = wb[r, g] * (self.arange_block < offset[..., None])  # (b, T, G)
        partial = torch.einsum("rtg,rtgc->rtc", part_w, self.x3_blocks[g])
        return block_prefix[r, g] + partial

    def _positions_of_ranks(self, wb, count_prefix, targets):
        b = wb.shape[0]
        tt = targets[None, :].expand(b, -1).contiguous().to(count_prefix.dtype)
        g = torch.searchsorted(count_prefix[:, 1:].contiguous(), tt, right=True)
        g = torch.clamp(g, max=self.n_blocks - 1)
        r = torch.arange(b, device=self.device)[:, None]
        inside = count_prefix[r, g][..., None] + torch.cumsum(wb[r, g], dim=-1)
        return g * self.block + (inside <= tt[..., None]).sum(dim=-1)

    # -- metrics -------------------------------------------------------------------------------------

    def count(self, drawn: np.ndarray, w_row: np.ndarray, side_row: np.ndarray) -> None:
        """Counting (and the classwise side sums) stays in numpy, in the drawing threads."""
        self.e.count(drawn, w_row, side_row)

    def metrics(self, w_np: np.ndarray, side: np.ndarray) -> dict[str, np.ndarray]:
        e, m = self.e, self.m
        w = torch.as_tensor(w_np, device=self.device)
        b = w.shape[0]
        wb = w.reshape(b, self.n_blocks, self.block)
        sums = torch.matmul(wb.transpose(0, 1), self.x_blocks)  # (blocks, b, columns)
        block_prefix = torch.zeros((b, self.n_blocks + 1, 3), dtype=torch.float64, device=self.device)
        block_prefix[:, 1:, :] = torch.cumsum(sums[:, :, :3].transpose(0, 1), dim=1)
        totals = sums.sum(dim=0)

        def bin_sums(starts):
            d = torch.diff(self._prefix(wb, block_prefix, starts), dim=1)
            return tuple(x.cpu().numpy() for x in (torch.round(d[..., 0]), d[..., 1], d[..., 2]))

        width = bin_sums(self.width_starts.expand(b, m + 1))
        mass = None
        if e.need_adaece:
            mass = bin_sums(self._equal_mass_starts(self._equal_mass_edges(wb, block_prefix[:, :, 0])))
        # the dense sums ran on the device; the small per-resample sums go through the numpy engine's
        # reduce, i.e. the metric registry's sums → metric functions (the point estimate's own code)
        return e.reduce(width, mass, totals.cpu().numpy(), side)

    def _equal_mass_starts(self, edges):
        if self.e.compat:
            edges = edges.to(torch.float32)
        starts = torch.searchsorted(self.conf_sorted, edges.contiguous(), right=True)
        if self.e.lowest_closed:
            starts[:, 0] = 0
        starts[:, self.m] = self.n
        return starts

    def _equal_mass_edges(self, wb, count_prefix):
        """``np.interp``'s arithmetic, as in ``_Resampler.equal_mass_edges``."""
        n, m = self.n, self.m
        x_np = np.linspace(0, n, m + 1)
        j0_np = np.minimum(np.floor(x_np), n - 1).astype(np.int64)
        j1_np = np.minimum(j0_np + 1, n - 1)
        targets = torch.as_tensor(np.concatenate([j0_np, j1_np, [n - 1]]), device=self.device)
        pos = self._positions_of_ranks(wb, count_prefix, targets)
        fp = self.conf64[torch.clamp(pos, max=n - 1)]
        f0, f1, last = fp[:, : m + 1], fp[:, m + 1 : 2 * m + 2], fp[:, 2 * m + 2 :]
        x = torch.as_tensor(x_np, device=self.device)
        j0 = torch.as_tensor(j0_np, device=self.device)
        res = (f1 - f0) / 1.0 * (x - j0) + f0
        res = torch.where(x == j0, f0, res)
        return torch.where(x >= n - 1, last, res)
