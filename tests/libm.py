"""The numeric contract between code paths, as the tests assert it (docs/conventions.md).

Two different paths (the numpy engine, the C extension, torch; the temperature grid and
``evaluate``; shards and one file) agree within a tolerance, never by equal bits: the fused loops call
the C library's ``exp`` and ``log``, numpy may run its own SIMD kernels (on AVX-512 CPUs about 5 % of
its ``exp`` results are 1 ulp from glibc's), and sums may be added in another order. Equal bits are
asserted only for the same path under other thread counts and chunk sizes (determinism).

``CALIB_TEST_PERTURB_LIBM=0.05 python -m pytest`` (tests/perturbed_libm.py) checks that no test asks
two paths for equal bits: numpy's exp and log are then 1 ulp off on 5 % of arguments.

:func:`assert_agree` compares metric dictionaries (undefined metrics None), JSON documents of two CLI
runs (nested dicts and lists; an infinite metric is the string "inf" there): floats within
:data:`METRIC_REL` (or :data:`METRIC_ABS` near 0; NaN = NaN, ±inf equal), everything else equal;
:func:`assert_bins_agree` bin tables.

tests/ is on sys.path (tests/conftest.py).
"""

import math

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


def _is_float(value) -> bool:
    return isinstance(value, (float, np.floating))


def assert_agree(actual, desired, *, rel: float = METRIC_REL, abs: float = METRIC_ABS, where: str = "") -> None:
    """``actual`` and ``desired`` (metric dicts, JSON documents, lists of bins…) agree: the same keys
    and lengths, floats within ``rel``/``abs``, every other value exactly equal."""
    if isinstance(desired, dict):
        assert isinstance(actual, dict), (where, actual, desired)
        assert sorted(actual) == sorted(desired), where
        for key in desired:
            assert_agree(actual[key], desired[key], rel=rel, abs=abs, where=f"{where}[{key!r}]")
    elif isinstance(desired, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(desired), (where, actual, desired)
        for i, (a, d) in enumerate(zip(actual, desired)):
            assert_agree(a, d, rel=rel, abs=abs, where=f"{where}[{i}]")
    elif isinstance(desired, np.ndarray) and desired.dtype.kind == "f":
        np.testing.assert_allclose(actual, desired, rtol=rel, atol=abs, equal_nan=True, err_msg=where)
    elif isinstance(desired, np.ndarray):
        np.testing.assert_array_equal(actual, desired, err_msg=where)
    elif _is_float(desired) and _is_float(actual):
        if math.isnan(desired) or math.isinf(desired):
            assert (math.isnan(actual) and math.isnan(desired)) or actual == desired, (where, actual, desired)
        else:
            assert math.isclose(actual, desired, rel_tol=rel, abs_tol=abs), (where, actual, desired)
    else:  # None (undefined), counts, flags, strings ("inf" in JSON), settings
        assert type(actual) is type(desired) and actual == desired, (where, actual, desired)


def assert_bins_agree(actual, desired, *, rel: float = METRIC_REL, abs: float = METRIC_ABS) -> None:
    """Bin tables (:class:`~calibrate_cli.engine.binning.BinStats` or ``SparseBinStats``) of two paths: the same
    counts and Σ correctness (sums of 0/1 or [y = k]: whole numbers, exact in float64), the edges and
    Σ confidence within the contract (equal-mass edges and the confidences come from exp where the
    inputs are logits, and the sums may be added in another order)."""
    assert actual.n == desired.n
    np.testing.assert_array_equal(actual.count, desired.count, err_msg="count")
    np.testing.assert_array_equal(actual.sum_correct, desired.sum_correct, err_msg="sum_correct")
    np.testing.assert_allclose(actual.edges, desired.edges, rtol=rel, atol=abs, err_msg="edges")
    np.testing.assert_allclose(actual.sum_conf, desired.sum_conf, rtol=rel, atol=abs, err_msg="sum_conf")


#: two paths' metric dictionaries (undefined metrics None on both sides)
assert_metrics_agree = assert_agree
