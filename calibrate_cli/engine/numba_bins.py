"""numba loop for the 1-D binning pass of :func:`calibrate_cli.engine.binning.bin_statistics` (imported only
when numba is installed and the input is large): one sequential pass over the samples that finds
each value's bin as ``searchsorted(edges, v, "left") − 1`` (binary search, comparisons in the
values' dtype; for the edges b/M, ``assign_bins``' own ⌈v·M⌉ formula, which equals it), applies
:func:`~calibrate_cli.engine.binning.assign_bins`' clamps and adds the value and target to the bin's running sums in sample order, exactly as ``np.bincount`` does: bit-identical
sums, no (N,) temporaries."""

import numpy as np

from .numba_rows import njit, uniform_bin_candidate


@njit(nogil=True)
def bin_sums_1d(values, targets, edges, uniform, lowest_closed, count, sum_conf, sum_correct):  # pragma: no cover
    m = edges.shape[0] - 1
    for i in range(values.shape[0]):
        v = values[i]
        if uniform:  # edges b/M: binning._assign_uniform's candidate ⌈v·M⌉ − 1 and its two corrections
            b = uniform_bin_candidate(v, m, edges)
        else:
            lo, hi = 0, m + 1  # first j with edges[j] >= v (numpy's side="left")
            while lo < hi:
                mid = (lo + hi) >> 1
                if edges[mid] < v:
                    lo = mid + 1
                else:
                    hi = mid
            b = lo - 1
        if b > m - 1:
            b = m - 1
        if b < 0:
            if not lowest_closed:
                continue
            b = 0
        count[b] += 1
        sum_conf[b] += np.float64(v)
        sum_correct[b] += np.float64(targets[i])
