"""SmoothECE (Błasiok & Nakkiran 2023), computed as relplot computes it, for weighted samples.

relplot (``relplot.smECE(f, y)``, version 1.0.3, default settings) measures the calibration of
predictions f_i ∈ [0, 1] with outcomes y_i ∈ {0, 1} (here f = the top-label confidence, y = its
correctness) as follows. For a bandwidth σ:

1. the residuals r_i = f_i − y_i, and the ones, are spread linearly onto the grid g_j = j/(G−1),
   j = 0..G−1, G = ⌊max(2000, round(20/σ))/2⌋ + 1: sample i adds (1 − a_i)·v_i to node
   ⌊f_i(G−1)⌋ (clipped to G−2) and a_i·v_i to the next, a_i = f_i(G−1) − ⌊f_i(G−1)⌋;
2. each grid is reflected at 0 and 1 and convolved with the Gaussian density φ_σ sampled at
   t_j − 1/2 (``ReflectedGaussianKernel``), giving R(g) = Σ_i r_i K_σ(g, f_i) and
   D(g) = Σ_i K_σ(g, f_i);
3. both are interpolated linearly onto T = max(round(10/σ), 200) evaluation points t ∈ [0, 1], and

       smECE_σ = Σ_t |R(t)| / Σ_t (D(t) + 10⁻⁴)       (relplot: Σ |R/D'|·D' / Σ D', D' = D + 10⁻⁴)

The bandwidth is relplot's ``search_param``: σ = 1 if 1 < smECE_1, else ten bisection steps on
[0, 1] keeping ``start`` (the side where σ ≥ smECE_σ and σ ≥ 0.001); the result is smECE at that σ.

Sample multiplicities w_i (a bootstrap resample) weight each sample's grid contribution, which is
what relplot computes on the resampled arrays (each copy adds the same amount). The convolutions
use numpy FFTs (relplot: ``np.convolve``): the same sums up to float64 rounding. Every batch row follows
its own bisection path; rows that evaluate the same σ share one batched convolution.

Spreading: with unit weights (the data themselves, ``weights=None``) each grid is four weighted
``np.bincount`` passes over the samples in pieces of 2¹⁸ (O(N) time, O(piece) memory, pieces added in
order: deterministic); with
b rows of weights (the bootstrap) a sparse (2G, N) matrix times the (N, b) weights, which shares the
per-sample work among the rows.
"""

from __future__ import annotations

import numpy as np

from ..engine.sorting import distinct

__all__ = ["SMECE_EPS", "smooth_ece", "smooth_ece_at"]

#: relplot's ``eps``: the search stops below this bandwidth
SMECE_EPS = 0.001
_DENSITY_EPS = 1e-4  # relplot's BaseKernelMixin.smooth eps
_MESH_POINTS = 200  # relplot.config.smECE_mesh_pts
_REFINE = 10


def _grid_size(sigma: float) -> int:
    return max(2000, round(20 / sigma)) // 2 + 1


class _Grids:
    """The samples spread onto relplot's grids, and the spectra of their reflected extensions.

    Every σ ≥ 0.01 uses the same grid (G = 1001): its spectra are computed once for all rows and
    reused by every bisection step; a finer grid (σ < 0.01) is made for the rows that need it.
    """

    def __init__(self, conf: np.ndarray, correct: np.ndarray, weights: np.ndarray | None):
        self.conf, self.correct, self.weights = conf, correct, weights
        self.b = 1 if weights is None else weights.shape[0]
        self._matrices: dict[int, object] = {}
        self._common = None  # spectra (2b, F) of the G = 1001 grid for all rows, made on first use

    @property
    def residual(self) -> np.ndarray:
        return self.conf - np.asarray(self.correct, dtype=np.float64)

    def spread_unit(self, g: int) -> np.ndarray:
        """(1, 2G): the residuals (first G) and ones (last G) spread onto the grid, unit weights.

        Sample i adds (1 − a_i)·r_i to node lo_i and a_i·r_i to lo_i + 1 (and 1 − a_i, a_i to the
        density grid), as the matrix rows do; by ``np.bincount`` over pieces of the samples, added
        into the grid in piece order, or with the C extension in one pass in sample order
        (:func:`~calibrate_cli.engine.kernels.spread_unit`); either the same bits for any thread count."""
        from ..engine import kernels
        from ..engine.sorting import PIECE

        out = np.zeros((1, 2 * g))
        n = self.conf.shape[0]
        if g >= 2 and kernels.use():
            kernels.spread_unit(self.conf, self.correct, g, out[0])
            return out
        for start in range(0, n, PIECE):
            conf = self.conf[start : start + PIECE]
            x = conf * (g - 1)
            lo = x.astype(np.int32).clip(0, g - 2)
            frac = x - lo
            residual = conf - np.asarray(self.correct[start : start + PIECE], dtype=np.float64)
            keep = 1 - frac
            out[0, :g] += np.bincount(lo, weights=keep * residual, minlength=g)
            out[0, :g] += np.bincount(lo + 1, weights=frac * residual, minlength=g)
            out[0, g:] += np.bincount(lo, weights=keep, minlength=g)
            out[0, g:] += np.bincount(lo + 1, weights=frac, minlength=g)
        return out

    def matrix(self, g: int):
        """(2G, N) sparse: rows 0..G−1 spread the residuals, rows G..2G−1 the ones."""
        if g not in self._matrices:
            import scipy.sparse

            # built column by column (CSC: exactly 4 entries per sample, no sort and no COO copies),
            # so its memory is 12 bytes per entry: 48 bytes per sample
            n = self.conf.shape[0]
            x = self.conf * (g - 1)
            lo = x.astype(np.int32).clip(0, g - 2)
            frac = x - lo
            del x
            indices = np.empty((n, 4), dtype=np.int32)
            indices[:, 0], indices[:, 1], indices[:, 2], indices[:, 3] = lo, lo + 1, lo + g, lo + 1 + g
            data = np.empty((n, 4))
            data[:, 0] = 1 - frac
            data[:, 1] = frac
            data[:, 2] = data[:, 0]
            data[:, 3] = frac
            residual = self.residual
            data[:, 0] *= residual
            data[:, 1] *= residual
            del residual
            del lo, frac
            index_type = np.int32 if 4 * n < np.iinfo(np.int32).max else np.int64
            indptr = np.arange(0, 4 * n + 1, 4, dtype=index_type)
            self._matrices[g] = scipy.sparse.csc_matrix((data.ravel(), indices.ravel(), indptr), shape=(2 * g, n))
        return self._matrices[g]

    def spectra(self, g: int, rows: np.ndarray) -> np.ndarray:
        """(2R, F): the FFTs of the reflected residual grids (first R) and density grids of ``rows``."""
        if g == _COMMON_GRID:
            if self._common is None:
                self._common = self._spectra(g, np.arange(self.b))
            b = self.b
            return np.concatenate([self._common[rows], self._common[rows + b]], axis=0)
        return self._spectra(g, rows)

    def _spectra(self, g: int, rows: np.ndarray) -> np.ndarray:
        if self.weights is None:
            spread = self.spread_unit(g)[np.zeros(rows.shape[0], dtype=np.int64)]
        else:
            spread = (self.matrix(g) @ self.weights[rows].T).T  # (R, 2G)
        values = np.concatenate([spread[:, :g], spread[:, g:]], axis=0)
        flipped = values[:, ::-1]
        extended = np.concatenate([flipped[:, :-1], values, flipped[:, 1:]], axis=1)  # L = 3G − 2
        return np.fft.rfft(extended, _fft_size(g), axis=1)


_COMMON_GRID = _grid_size(0.01)


def _fft_size(g: int) -> int:
    length = (3 * g - 2) + g - 1  # the full convolution of the extension with the kernel
    return 1 << (length - 1).bit_length()


def _reflected_convolution(spectra: np.ndarray, g: int, sigma: float) -> np.ndarray:
    """relplot's ``ReflectedGaussianKernel.convolve`` of the grids whose reflected extensions have
    the FFTs ``spectra`` (rows), by FFT."""
    t = np.linspace(0, 1, g)
    kernel = np.exp(-(t - 0.5) * (t - 0.5) / (2 * sigma**2)) / (np.sqrt(2 * np.pi) * sigma)
    size = _fft_size(g)
    full = np.fft.irfft(spectra * np.fft.rfft(kernel, size)[None, :], size, axis=1)
    # np.convolve(ext, kernel, "valid") is full[G − 1 : L]; relplot keeps [G//2 : G//2 + G] of that
    start = g - 1 + g // 2
    return full[:, start : start + g]


def _interpolate(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """relplot's ``kernels.interpolate`` on each row of ``y`` (R, G), at the points ``t``."""
    g = y.shape[1]
    size = 1 / (g - 1)
    idx = (t * (g - 1)).astype(np.int64).clip(0, g - 2)
    rest = (t - idx * size) / size
    return y[:, idx] * (1 - rest) + y[:, idx + 1] * rest


def _at(grids: _Grids, rows: np.ndarray, sigma: float) -> np.ndarray:
    """smECE_σ of the weight rows ``rows`` at one bandwidth σ."""
    g = _grid_size(sigma)
    smoothed = _reflected_convolution(grids.spectra(g, rows), g, sigma)
    t = np.linspace(0, 1, max(round(10 / sigma), _MESH_POINTS))
    at_t = _interpolate(t, smoothed)
    r, d = at_t[: rows.shape[0]], at_t[rows.shape[0] :] + _DENSITY_EPS
    return np.abs(r).sum(axis=1) / d.sum(axis=1)


def _by_sigma(grids: _Grids, sigmas: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """smECE at each row's own σ (rows sharing a σ go through one batched convolution)."""
    out = np.empty(rows.shape[0])
    for sigma in distinct(sigmas[rows]):
        pick = sigmas[rows] == sigma
        out[pick] = _at(grids, rows[pick], float(sigma))
    return out


def _grids(conf, correct, weights) -> _Grids:
    conf = np.asarray(conf, dtype=np.float64)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    return _Grids(conf, np.asarray(correct), w)


def smooth_ece_at(conf, correct, sigma: float, weights=None) -> np.ndarray:
    """smECE_σ at a fixed bandwidth (relplot's ``smECE_sigma``), one value per weight row."""
    grids = _grids(conf, correct, weights)
    return _at(grids, np.arange(grids.b), float(sigma))


def smooth_ece(conf, correct, weights=None, *, return_sigma: bool = False):
    """SmoothECE with relplot's bandwidth search, one value per row of ``weights`` (b, N).

    ``conf`` (N,) in [0, 1], ``correct`` (N,) 0/1; ``weights`` the multiplicity of each sample per
    row (None: one row of ones). Returns (b,) values (and the (b,) bandwidths σ*).
    """
    grids = _grids(conf, correct, weights)
    b = grids.b
    all_rows = np.arange(b)
    # search_param(check, start=1): check(σ) = σ < eps or σ < smECE_σ
    done = 1.0 < _at(grids, all_rows, 1.0)
    start, end = np.ones(b), np.zeros(b)
    for _ in range(_REFINE):
        mid = (start + end) / 2
        ok = mid < SMECE_EPS
        ask = all_rows[~ok & ~done]
        if ask.size:
            ok[ask] = mid[ask] < _by_sigma(grids, mid, ask)
        end = np.where(ok, mid, end)
        start = np.where(ok, start, mid)
    sigma = np.where(done, 1.0, start)
    value = _by_sigma(grids, sigma, all_rows)
    return (value, sigma) if return_sigma else value
