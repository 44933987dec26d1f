"""Whether numpy's float64 ``exp`` and ``log`` are the C library's on this machine, and the comparison
that follows from it for the tests of the fused loops against the numpy engine.

The fused loops (the C extension, numba) call the C library's ``exp`` and ``log``, or copies of
glibc's that give the same bits (the C extension's vector loops). numpy calls the same functions on
CPUs without AVX512F. With AVX512F, numpy's wheels run their own float64 kernels instead (Tang's
table method: numpy/_core/src/umath/loops_exponent_log.dispatch.c.src), and about 5 % of their
``exp`` results are 1 ulp away from glibc's. So the two engines agree bit for bit only where numpy
uses the C library's functions; elsewhere they agree within a few ulps per value, which
:func:`assert_equal_up_to_exp` bounds.

tests/ is on sys.path (tests/conftest.py).
"""

import functools
import math

import numpy as np

#: the relative gap allowed per value computed from exp/log (p = e/Σe, conf, log Σe) where numpy's
#: exp/log are not the C library's: each exp within 1 ulp of the other's, so Σe within ~2 ulps and
#: e/Σe within ~4 ulps; 16 ulps (2^-48) leaves a 4× margin
PER_VALUE = 2.0**-48


@functools.cache
def numpy_exp_log_are_libms() -> bool:
    """True when numpy's float64 ``exp`` and ``log`` give the C library's bits on this machine.

    False on a CPU with AVX512F (numpy dispatches its own kernels there: no probe can show that
    they agree everywhere), else a probe: 40 000 arguments over the ranges the tests use, compared
    with ``math.exp`` and ``math.log`` (CPython calls the C library's)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # pragma: no cover - numpy < 2
        features = {}
    if features.get("AVX512F", False):
        return False
    rng = np.random.default_rng(20260)
    x = np.concatenate([rng.standard_normal(10_000) * 10, rng.uniform(-745, 709, 10_000)])
    y = np.concatenate([rng.uniform(0, 2, 10_000), np.exp2(rng.uniform(-1000, 1000, 10_000))])
    exp_same = np.exp(x).tobytes() == np.array([math.exp(v) for v in x]).tobytes()
    log_same = np.log(y).tobytes() == np.array([math.log(v) for v in y]).tobytes()
    return exp_same and log_same


def assert_equal_up_to_exp(actual, desired, *, additions: int = 0, err_msg: str = "") -> None:
    """``actual`` == ``desired`` bit for bit where numpy's exp/log are the C library's; elsewhere
    within :data:`PER_VALUE` relative (and absolute, for values near 0 such as an NLL of −log 1),
    plus one rounding per ``additions`` (a sum of that many such values, added in the same order:
    each addition may round its slightly different operands to a neighbouring double)."""
    if numpy_exp_log_are_libms():
        np.testing.assert_array_equal(actual, desired, err_msg=err_msg)
        return
    tolerance = PER_VALUE + additions * 2.0**-52
    np.testing.assert_allclose(actual, desired, rtol=tolerance, atol=tolerance, err_msg=err_msg)
