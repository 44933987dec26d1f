"""Compiled (numba) kernels of temperature fitting: the grid of T and the Newton passes of the exact
NLL fit (:mod:`calibrate_cli.calibrators.temperature`). Imported only when numba is installed and
the fused engine runs.

The grid evaluates softmax(z / T) for every T of the grid from one read of each row: for each class
j the exponentials of all T are computed together (a loop over T that the compiler vectorises,
with an exp written out below so that it can be), so one row costs K·|T| vectorised exponentials
instead of K·|T| calls of the C library's exp. That exp is within a few ulps of the C library's;
wherever a few ulps could matter — a confidence within 1e-9 of a bin edge b/M, or a row whose
largest logit is nearly tied with an earlier one (the argmax) — the (row, T) is recomputed exactly
as numpy computes it (C library exp, numpy's pairwise sum, p = e/Σe, first argmax), so every
bin count and correctness equals the numpy path's and the objective agrees to ~1e-16.
"""

import numpy as np

from .numba_rows import _pairwise_sum, njit, uniform_bin_candidate

LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01  # fdlibm's split of ln 2: k·LN2_HI is exact for |k| < 2^20
LN2_LO = 1.90821492927058770002e-10
SHIFT = 6755399441055744.0  # 1.5·2^52: x + SHIFT rounds x to an integer held in the low bits
SHIFT_BITS = 0x4338000000000000
ONE_HALF_ULP = 0.999 * 2.0**-53  # below half an ulp of 1.0, with a margin for the exp's few ulps
# 1/n! for the Taylor polynomial of e^r on |r| ≤ ln2/2 (degree 13: truncation < 5e-18)
C2, C3, C4, C5 = 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120
C6, C7, C8, C9 = 1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880
C10, C11, C12, C13 = 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800


@njit(nogil=True, error_model="numpy", fastmath={"contract"})  # fused multiply-adds: 1.8× faster here
def _exp_into(zj, inv, mx, out, kbuf, kbits, poly, sbuf, sbits, accumulate):  # pragma: no cover - compiled
    """out[i] (+)= exp(zj·inv[i] − mx[i]) for every i, in three loops the compiler vectorises.

    exp(x) = 2^k · e^r with k = round(x / ln 2) (x clamped at −708: e^−708 ≈ 3e−308 is nothing next
    to the row's largest term, 1), r = x − k·ln 2 in two parts (|r| ≤ ln2/2), e^r by its Taylor
    polynomial of degree 13 (truncation < 5e−18), 2^k from the bits of k + 1.5·2^52 shifted into
    the exponent field. Within 2 ulps of the correctly rounded value (tests: 1e−15 relative)."""
    n = inv.shape[0]
    for i in range(n):
        x = zj * inv[i] - mx[i]
        x = x if x > -708.0 else -708.0  # also a log-probability of 0 (x = −inf): e^x ≈ 0
        kf = x * LOG2E + SHIFT
        kbuf[i] = kf
        k = kf - SHIFT
        r = (x - k * LN2_HI) - k * LN2_LO
        p = C13
        p = p * r + C12
        p = p * r + C11
        p = p * r + C10
        p = p * r + C9
        p = p * r + C8
        p = p * r + C7
        p = p * r + C6
        p = p * r + C5
        p = p * r + C4
        p = p * r + C3
        p = p * r + C2
        p = p * r + 1.0
        poly[i] = p * r + 1.0
    for i in range(n):
        sbits[i] = (kbits[i] - SHIFT_BITS + 1023) << 52
    if accumulate:
        for i in range(n):
            out[i] += poly[i] * sbuf[i]
    else:
        for i in range(n):
            out[i] = poly[i] * sbuf[i]


@njit(nogil=True)
def _bin(v, m, edges):  # pragma: no cover - compiled
    """assign_bins' bin of v for the edges b/M (lowest bin closed), as the fused summary kernel."""
    return max(min(uniform_bin_candidate(v, m, edges), m - 1), 0)


@njit(nogil=True)
def _exact_at(z, k, t, zmax, e, stack_start, stack_n, stack_stage, stack_part):  # pragma: no cover
    """numpy's softmax(z / t) of one row: (confidence, argmax, log Σ e) exactly as the numpy grid."""
    mx = zmax / t
    for j in range(k):
        e[j] = np.exp(z[j] / t - mx)
    total = _pairwise_sum(e, k, stack_start, stack_n, stack_stage, stack_part)
    best = 0
    best_p = e[0] / total
    for j in range(1, k):
        pj = e[j] / total
        if pj > best_p:
            best, best_p = j, pj
    return best_p, best, np.log(total)


@njit(nogil=True)
def grid_rows(scores, labels, temps, inv_temps, m, edges, want_bins, want_nll,
              count, sum_conf, sum_corr, nll_sum):  # pragma: no cover - compiled
    """Add one chunk's statistics of every T: per (T, bin) count, Σconf, Σcorrect of the top-label
    confidence (``want_bins``) and Σ_i −log p_iy(T) (``want_nll``)."""
    rows, k = scores.shape
    nt = temps.shape[0]
    z = np.empty(k)
    e = np.empty(k)
    mx = np.empty(nt)
    kbuf = np.empty(nt)
    poly = np.empty(nt)
    sbuf = np.empty(nt)
    s = np.empty(nt)
    kbits = kbuf.view(np.int64)
    sbits = sbuf.view(np.int64)
    stack_start = np.empty(128, dtype=np.int64)
    stack_n = np.empty(128, dtype=np.int64)
    stack_stage = np.empty(128, dtype=np.int64)
    stack_part = np.empty(128)
    t_max = 0.0
    for t in range(nt):
        t_max = max(t_max, temps[t])
    for i in range(rows):
        y = labels[i]
        zmax = np.float64(scores[i, 0])
        amax = 0
        for j in range(k):
            z[j] = np.float64(scores[i, j])
            if z[j] > zmax:
                zmax = z[j]
                amax = j
        gap = np.inf  # how close an earlier class comes to the maximum (an argmax that T could change)
        for j in range(amax):
            gap = min(gap, zmax - z[j])
        near_tie = gap <= 1e-9 * (1.0 + abs(zmax) + t_max)
        for t in range(nt):
            mx[t] = zmax / temps[t]
            s[t] = 0.0
        for j in range(k):  # s = Σ_{j ≠ argmax} e^{x_j}: Σe = 1 + s
            if j == amax:
                continue
            _exp_into(z[j], inv_temps, mx, s, kbuf, kbits, poly, sbuf, sbits, True)
        for t in range(nt):
            pred = amax
            log_s = 0.0
            if s[t] < ONE_HALF_ULP and not near_tie:
                # the others sum below half an ulp of 1: every order of summation gives Σe = 1.0
                # exactly (each partial sum 1 + x with x < 2^-53 rounds to 1), so p_max = 1.0 exactly
                conf = 1.0
            else:
                conf = 1.0 / (1.0 + s[t])
                cm = conf * m
                edge = np.rint(cm)  # the nearest edge edge/M; 0 and M (= 1.0) bound every confidence
                if near_tie or (0.0 < edge < m and abs(cm - edge) <= 1e-9):
                    conf, pred, log_s = _exact_at(z, k, temps[t], zmax, e, stack_start, stack_n, stack_stage,
                                                  stack_part)
                elif want_nll:
                    log_s = np.log1p(s[t])
            if want_bins:
                b = _bin(conf, m, edges)
                count[t, b] += 1
                sum_conf[t, b] += conf
                if pred == y:
                    sum_corr[t, b] += 1.0
            if want_nll:
                nll_sum[t] += log_s - (z[y] / temps[t] - mx[t])


@njit(nogil=True)
def nll_rows(scores, labels, beta, out):  # pragma: no cover - compiled
    """Add one chunk's Σ NLL, Σ (E_p[d] − d_y) and Σ Var_p[d] at β (d = z − max z, p = softmax(β d))
    to out[0..2]: the sums of :func:`~calibrate_cli.calibrators.temperature._nll_pass`."""
    rows, k = scores.shape
    d = np.empty(k)
    e = np.empty(k)
    zeros = np.zeros(k)
    kbuf = np.empty(k)
    poly = np.empty(k)
    sbuf = np.empty(k)
    kbits = kbuf.view(np.int64)
    sbits = sbuf.view(np.int64)
    total = 0.0
    grad = 0.0
    var = 0.0
    for i in range(rows):
        zmax = np.float64(scores[i, 0])
        for j in range(1, k):
            zmax = max(zmax, np.float64(scores[i, j]))
        for j in range(k):
            d[j] = np.float64(scores[i, j]) - zmax
        _exp_into(beta, d, zeros, e, kbuf, kbits, poly, sbuf, sbits, False)  # e_j = exp(β·d_j − 0)
        s = 0.0
        s1 = 0.0
        s2 = 0.0
        for j in range(k):
            if d[j] == -np.inf:  # a log-probability of 0: e = 0, and 0 · (−inf) counts as 0
                continue
            ej = e[j]
            s += ej
            s1 += ej * d[j]
            s2 += ej * d[j] * d[j]
        d_y = d[labels[i]]
        m1 = s1 / s
        total += np.log(s) - beta * d_y
        grad += m1 - d_y
        var += max(s2 / s - m1 * m1, 0.0)
    out[0] += total
    out[1] += grad
    out[2] += var
