"""The numeric contract between code paths, as the tests assert it (docs/conventions.md).

Two different paths (the numpy engine, the C extension, numba, torch; the temperature grid and
``evaluate``; shards and one file) agree within a tolerance, never by equal bits: the fused loops call
the C library's ``exp`` and ``log``, numpy may run its own SIMD kernels (on AVX-512 CPUs about 5 % of
its ``exp`` results are 1 ulp from glibc's), and sums may be added in another order. Equal bits are
asserted only for the same path under other thread counts and chunk sizes (determinism).

``CALIB_TEST_PERTURB_LIBM=0.05 python -m pytest`` (tests/perturbed_libm.py) checks that no test asks
two paths for equal bits: numpy's exp and log are then 1 ulp off on 5 % of arguments.

tests/ is on sys.path (tests/conftest.py).
"""

import numpy as np

#: every metric of two paths within this relative gap (or :data:`METRIC_ABS` of values near 0)
METRIC_REL = 1e-12
METRIC_ABS = 1e-15

#: the relative gap allowed per value computed from exp/log (p = e/Σe, conf, log Σe): each exp within
#: 1 ulp of the other path's, so Σe within ~2 ulps and e/Σe within ~4 ulps; 16 ulps (2^-48) leaves a
#: 4× margin
PER_VALUE = 2.0**-48


def assert_equal_up_to_exp(actual, desired, *, additions: int = 0, err_msg: str = "") -> None:
    """Per-value arrays of two paths within :data:`PER_VALUE` relative (and absolute, for values near 0
    such as an NLL of −log 1), plus one rounding per ``additions`` (a sum of that many such values,
    added in the same order: each addition may round its slightly different operands differently)."""
    tolerance = PER_VALUE + additions * 2.0**-52
    np.testing.assert_allclose(actual, desired, rtol=tolerance, atol=tolerance, err_msg=err_msg)


def assert_metrics_agree(actual: dict, desired: dict, *, rel: float = METRIC_REL, abs: float = METRIC_ABS) -> None:
    """Two paths' metric dictionaries: the same names, each value within the contract (NaN = NaN)."""
    assert sorted(actual) == sorted(desired)
    for name in desired:
        np.testing.assert_allclose(actual[name], desired[name], rtol=rel, atol=abs, equal_nan=True, err_msg=name)
