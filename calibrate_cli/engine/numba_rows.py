"""The fused kernel of :mod:`calibrate_cli.engine.kernels` (imported only when numba is installed and the
fused engine runs: compiling, or loading numba's on-disk cache, happens on that import)."""

import numpy as np
from numba import njit as _plain_njit


def njit(*args, cache=True, **kw):
    """numba's njit with on-disk caching (compiling costs ~1 s per process without it): numba
    writes next to this module, or in the user's cache directory when site-packages is read-only
    (``$NUMBA_CACHE_DIR`` overrides); when no location is writable, compile without a cache."""
    def decorate(fn):
        try:
            return _plain_njit(*args, cache=cache, **kw)(fn)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return _plain_njit(*args, cache=False, **kw)(fn)
    return decorate


@njit(nogil=True)
def _block_sum(a, start, n):
    """numpy's pairwise summation for n ≤ 128 (``pairwise_sum`` in numpy/_core/src/umath/loops_utils.h.src)."""
    if n < 8:
        res = 0.0
        for i in range(start, start + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[start], a[start + 1], a[start + 2], a[start + 3]
    r4, r5, r6, r7 = a[start + 4], a[start + 5], a[start + 6], a[start + 7]
    i = 8
    stop = n - (n % 8)
    while i < stop:
        r0 += a[start + i]
        r1 += a[start + i + 1]
        r2 += a[start + i + 2]
        r3 += a[start + i + 3]
        r4 += a[start + i + 4]
        r5 += a[start + i + 5]
        r6 += a[start + i + 6]
        r7 += a[start + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[start + i]
        i += 1
    return res


@njit(nogil=True)
def _pairwise_sum(a, n, stack_start, stack_n, stack_stage, stack_part):
    """numpy's pairwise sum of a[:n]: blocks of ≤ 128 summed by :func:`_block_sum`, larger ranges
    split at n2 = ⌊n/2⌋ − (⌊n/2⌋ mod 8) and the halves added (numpy's recursion, here with an
    explicit stack: numba's cache cannot hold recursive functions)."""
    if n <= 128:
        return _block_sum(a, 0, n)
    top = 0
    stack_start[0], stack_n[0], stack_stage[0] = 0, n, 0
    ret = 0.0
    while top >= 0:
        s, m, stage = stack_start[top], stack_n[top], stack_stage[top]
        if m <= 128:
            ret = _block_sum(a, s, m)
            top -= 1
            continue
        n2 = m // 2
        n2 -= n2 % 8
        if stage == 0:
            stack_stage[top] = 1
            top += 1
            stack_start[top], stack_n[top], stack_stage[top] = s, n2, 0
        elif stage == 1:
            stack_part[top] = ret
            stack_stage[top] = 2
            top += 1
            stack_start[top], stack_n[top], stack_stage[top] = s + n2, m - n2, 0
        else:
            ret = stack_part[top] + ret
            top -= 1
    return ret


@njit(nogil=True, inline="always")
def uniform_bin_candidate(v, m, edges):  # pragma: no cover - compiled
    """The bin of v among the edges b/M before :func:`~calibrate_cli.engine.binning.assign_bins`' final clamps
    (in [−1, M]): ``binning._assign_uniform``'s candidate ⌈v·M⌉ − 1 and its two corrections against the
    float64 edges. Shared by every compiled binning loop (summary, temperature grid, 1-D bins)."""
    b = np.int64(np.ceil(v * m)) - 1
    b = min(max(b, 0), m - 1)
    if v <= edges[b]:
        b -= 1
    b = min(max(b, -1), m - 1)
    if v > edges[min(b + 1, m)]:
        b += 1
    return b


@njit(nogil=True)
def _fused_rows(scores, labels, is_logits, m, edges, want_top5, classwise,
                conf, correct, nll, brier, top5, count, sum_p, sum_y):  # pragma: no cover - compiled
    rows, k = scores.shape
    p = np.empty(k)
    z = np.empty(k)
    stack_start = np.empty(128, dtype=np.int64)
    stack_n = np.empty(128, dtype=np.int64)
    stack_stage = np.empty(128, dtype=np.int64)
    stack_part = np.empty(128)
    for i in range(rows):
        y = labels[i]
        if is_logits:
            mx = np.float64(scores[i, 0])
            for j in range(1, k):
                v = np.float64(scores[i, j])
                if v > mx:
                    mx = v
            for j in range(k):
                z[j] = np.float64(scores[i, j]) - mx
                p[j] = np.exp(z[j])
            total = _pairwise_sum(p, k, stack_start, stack_n, stack_stage, stack_part)
            for j in range(k):
                p[j] = p[j] / total
            logp_y = z[y] - np.log(total)
        else:
            for j in range(k):
                p[j] = np.float64(scores[i, j])
            logp_y = np.log(p[y]) if p[y] > 0.0 else -np.inf
        best = 0
        for j in range(1, k):
            if p[j] > p[best]:
                best = j
        conf[i] = p[best]
        correct[i] = best == y
        nll[i] = -logp_y
        acc = 0.0
        for j in range(k):
            d = p[j] - 1.0 if j == y else p[j]
            acc += d * d
        brier[i] = acc
        if want_top5:  # on the logits themselves (z = x − max rounds: distinct logits may tie there), or p
            s_y = np.float64(scores[i, y]) if is_logits else p[y]
            rank = 0
            for j in range(k):
                v = np.float64(scores[i, j]) if is_logits else p[j]
                if v > s_y or (v == s_y and j < y):
                    rank += 1
            top5[i] = rank < 5
        if classwise:
            for j in range(k):
                v = p[j]
                b = max(min(uniform_bin_candidate(v, m, edges), m - 1), 0)  # then assign_bins' clamps
                count[j, b] += 1
                sum_p[j, b] += v
                if j == y:
                    sum_y[j, b] += 1.0
