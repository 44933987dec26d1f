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
"""

from __future__ import annotations

import numpy as np

__all__ = ["SMECE_EPS", "smooth_ece", "smooth_ece_at"]

#: relplot's ``eps``: the search stops below this bandwidth
SMECE_EPS = 0.001
_DENSITY_EPS = 1e-4  # relplot's BaseKernelMixin.smooth eps
_MESH_POINTS = 200  # relplot.config.smECE_mesh_pts
_REFINE = 10


def _grid_size(sigma: float) -> int:
    return max(2000, round(20 / sigma)) // 2 + 1


class _Grids:
    """Per-sample linear-interpolation weights onto each grid size, made once per size."""

    def __init__(self, conf: np.ndarray, residual: np.ndarray):
        self.conf, self.residual = conf, residual
        self._cache: dict[int, object] = {}

    def matrix(self, g: int):
        """(2G, N) sparse: rows 0..G−1 spread the residuals, rows G..2G−1 the ones."""
        if g not in self._cache:
            import scipy.sparse

            n = self.conf.shape[0]
            x = self.conf * (g - 1)
            lo = x.astype(np.int64).clip(0, g - 2)
            frac = x - lo
            rows = np.concatenate([lo, lo + 1, lo + g, lo + 1 + g])
            cols = np.tile(np.arange(n), 4)
            vals = np.concatenate([(1 - frac) * self.residual, frac * self.residual, 1 - frac, frac])
            self._cache[g] = scipy.sparse.csr_matrix((vals, (rows, cols)), shape=(2 * g, n))
        return self._cache[g]


def _reflected_convolution(values: np.ndarray, sigma: float) -> np.ndarray:
    """relplot's ``ReflectedGaussianKernel.convolve`` on each row of ``values`` (R, G), by FFT."""
    g = values.shape[1]
    t = np.linspace(0, 1, g)
    kernel = np.exp(-(t - 0.5) * (t - 0.5) / (2 * sigma**2)) / (np.sqrt(2 * np.pi) * sigma)
    flipped = values[:, ::-1]
    extended = np.concatenate([flipped[:, :-1], values, flipped[:, 1:]], axis=1)  # length L = 3G − 2
    length = extended.shape[1] + g - 1  # the full convolution
    size = 1 << (length - 1).bit_length()
    full = np.fft.irfft(np.fft.rfft(extended, size, axis=1) * np.fft.rfft(kernel, size)[None, :], size, axis=1)
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


def _at(grids: _Grids, weights: np.ndarray, sigma: float) -> np.ndarray:
    """smECE_σ of each weight row (R, N) at one bandwidth σ."""
    g = _grid_size(sigma)
    spread = (grids.matrix(g) @ weights.T).T  # (R, 2G)
    smoothed = _reflected_convolution(np.concatenate([spread[:, :g], spread[:, g:]], axis=0), sigma)
    t = np.linspace(0, 1, max(round(10 / sigma), _MESH_POINTS))
    at_t = _interpolate(t, smoothed)
    r, d = at_t[: weights.shape[0]], at_t[weights.shape[0] :] + _DENSITY_EPS
    return np.abs(r).sum(axis=1) / d.sum(axis=1)


def _by_sigma(grids: _Grids, weights: np.ndarray, sigmas: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """smECE at each row's own σ (rows sharing a σ go through one batched convolution)."""
    out = np.empty(rows.shape[0])
    for sigma in np.unique(sigmas[rows]):
        pick = sigmas[rows] == sigma
        out[pick] = _at(grids, weights[rows[pick]], float(sigma))
    return out


def smooth_ece_at(conf, correct, sigma: float, weights=None) -> np.ndarray:
    """smECE_σ at a fixed bandwidth (relplot's ``smECE_sigma``), one value per weight row."""
    conf = np.asarray(conf, dtype=np.float64)
    w = np.ones((1, conf.shape[0])) if weights is None else np.asarray(weights, dtype=np.float64)
    return _at(_Grids(conf, conf - np.asarray(correct, dtype=np.float64)), w, float(sigma))


def smooth_ece(conf, correct, weights=None, *, return_sigma: bool = False):
    """SmoothECE with relplot's bandwidth search, one value per row of ``weights`` (b, N).

    ``conf`` (N,) in [0, 1], ``correct`` (N,) 0/1; ``weights`` the multiplicity of each sample per
    row (None: one row of ones). Returns (b,) values (and the (b,) bandwidths σ*).
    """
    conf = np.asarray(conf, dtype=np.float64)
    w = np.ones((1, conf.shape[0])) if weights is None else np.asarray(weights, dtype=np.float64)
    b = w.shape[0]
    grids = _Grids(conf, conf - np.asarray(correct, dtype=np.float64))
    all_rows = np.arange(b)
    # search_param(check, start=1): check(σ) = σ < eps or σ < smECE_σ
    done = 1.0 < _at(grids, w, 1.0)
    start, end = np.ones(b), np.zeros(b)
    for _ in range(_REFINE):
        mid = (start + end) / 2
        ok = mid < SMECE_EPS
        ask = all_rows[~ok & ~done]
        if ask.size:
            ok[ask] = mid[ask] < _by_sigma(grids, w, mid, ask)
        end = np.where(ok, mid, end)
        start = np.where(ok, start, mid)
    sigma = np.where(done, 1.0, start)
    value = _by_sigma(grids, w, sigma, all_rows)
    return (value, sigma) if return_sigma else value
