"""Deliberately naive float64 loops for the metrics of issue 16 (RMS-CE, debiased ℓ2-CE, KS-CE,
SmoothECE), written from the papers / relplot's documented algorithm with plain Python loops, to
check the vectorised registry entries independently. Top-label: conf = max_k p_k, correct = argmax
(lowest index on ties) equals the label (``naive_reference._conf_correct``).
"""

from __future__ import annotations

import math

import numpy as np

from naive_reference import TIE_SLACK, _conf_correct, equal_width_bin


def _bins(confs, correct, n_bins):
    count, s_conf, s_corr = [0] * n_bins, [0.0] * n_bins, [0.0] * n_bins
    for c, ok in zip(confs, correct):
        b = equal_width_bin(c, n_bins)
        count[b] += 1
        s_conf[b] += c
        s_corr[b] += ok
    return count, s_conf, s_corr


def rms_ce(probs, labels, n_bins=15):
    """√(Σ_b |B_b|/N (acc_b − conf_b)²) over equal-width bins (b/M, (b+1)/M]."""
    confs, correct = _conf_correct(probs, labels)
    count, s_conf, s_corr = _bins(confs, correct, n_bins)
    total = 0.0
    for b in range(n_bins):
        if count[b]:
            total += count[b] / len(confs) * (s_corr[b] / count[b] - s_conf[b] / count[b]) ** 2
    return math.sqrt(total)


def debiased_l2_ce(probs, labels, n_bins=15):
    """Kumar et al. 2019, eq. of the debiased estimator: per bin with n_b ≥ 2,
    (mean conf − mean acc)² − acc(1 − acc)/(n_b − 1), weighted by n_b/N; √ of max(·, 0)."""
    confs, correct = _conf_correct(probs, labels)
    count, s_conf, s_corr = _bins(confs, correct, n_bins)
    total = 0.0
    for b in range(n_bins):
        n_b = count[b]
        if n_b < 2:
            continue
        acc, conf = s_corr[b] / n_b, s_conf[b] / n_b
        total += n_b / len(confs) * ((conf - acc) ** 2 - acc * (1 - acc) / (n_b - 1))
    return math.sqrt(max(total, 0.0))


def ks_ce(probs, labels):
    """max over thresholds t of |(1/N) Σ_{conf_i ≤ t} (conf_i − correct_i)|, t at the last value of each
    run of ties (a value whose next larger one lies more than 2^-40 of it above: docs/metrics.md)."""
    confs, correct = _conf_correct(probs, labels)
    n = len(confs)
    best = 0.0
    values = sorted(set(confs))
    ends = [t for t, after in zip(values, values[1:] + [math.inf]) if after > t + abs(t) * TIE_SLACK]
    for t in ends:
        s = 0.0
        for c, ok in zip(confs, correct):
            if c <= t:
                s += c - ok
        best = max(best, abs(s / n))
    return best


# --------------------------------------------------------------------------- SmoothECE (relplot 1.0.3)


def _smooth_ece_sigma(f, y, sigma):
    """relplot's smooth_ece(f, y, σ) with its ReflectedGaussianKernel, in loops (np.convolve for the
    convolution, as relplot)."""
    g = max(2000, round(20 / sigma)) // 2 + 1

    def spread(values):
        grid = [0.0] * g
        for fi, v in zip(f, values):
            j = min(max(int(fi * (g - 1)), 0), g - 2)
            a = fi * (g - 1) - j
            grid[j] += (1 - a) * v
            grid[j + 1] += a * v
        return grid

    kernel = [math.exp(-((j / (g - 1)) - 0.5) ** 2 / (2 * sigma**2)) / (math.sqrt(2 * math.pi) * sigma) for j in range(g)]

    def smooth(values):
        grid = spread(values)
        ext = grid[::-1][:-1] + grid + grid[::-1][1:]
        full = np.convolve(np.array(ext), np.array(kernel), "valid")
        return full[g // 2 : g // 2 + g].tolist()

    def interp(t, yv):
        j = min(max(int(t * (g - 1)), 0), g - 2)
        rest = (t - j / (g - 1)) * (g - 1)
        return yv[j] * (1 - rest) + yv[j + 1] * rest

    r_grid = smooth([fi - yi for fi, yi in zip(f, y)])
    d_grid = smooth([1.0] * len(f))
    points = max(round(10 / sigma), 200)
    num = den = 0.0
    for i in range(points):
        t = i / (points - 1)
        d = interp(t, d_grid) + 1e-4
        num += abs(interp(t, r_grid) / d) * d
        den += d
    return num / den


def smooth_ece(f, y, eps=0.001):
    """relplot.smECE: σ from search_param(σ < eps or σ < smECE_σ, start=1, refine=10)."""
    if 1 < _smooth_ece_sigma(f, y, 1.0):
        return _smooth_ece_sigma(f, y, 1.0)
    start, end = 1.0, 0.0
    for _ in range(10):
        mid = (start + end) / 2
        if mid < eps or mid < _smooth_ece_sigma(f, y, mid):
            end = mid
        else:
            start = mid
    return _smooth_ece_sigma(f, y, start)


def smooth_ece_top_label(probs, labels):
    confs, correct = _conf_correct(probs, labels)
    return smooth_ece(confs, correct)
