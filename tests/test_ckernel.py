"""The C extension calibrate_cli.engine._ckernel agrees with the numba kernels and the numpy engine.

``fused_rows`` against numba's ``_fused_rows`` and :func:`calibrate_cli.engine.kernels.numpy_chunk` (every output
array: counts and flags equal, what comes from exp/log within the numeric contract of tests/libm.py; the
numpy engine's Brier, an ``einsum`` whose summation order depends on the CPU, to a few ulps as in
tests/test_kernels.py), ``bin_sums_1d`` against numba's and the numpy pass of
:func:`calibrate_cli.engine.binning.bin_statistics`; bad arguments raise TypeError/ValueError; ``calib eval``
does not import numba when the extension is built. Skipped when the extension was not built (no C
compiler at install time); the numba comparisons skip without numba.
"""

import math
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from libm import PER_VALUE, assert_equal_up_to_exp

from calibrate_cli.engine import binning
from calibrate_cli.engine import kernels

ck = pytest.importorskip(
    "calibrate_cli.engine._ckernel", reason="the C extension calibrate_cli.engine._ckernel is not built (pip install . with a C compiler)"
)


def _numba_rows():
    pytest.importorskip("numba")
    from calibrate_cli.engine.numba_rows import _fused_rows

    return _fused_rows


def _outputs(rows, k, m, top5, classwise):
    shape = (k, m) if classwise else (0, m)
    return [np.empty(rows), np.empty(rows, dtype=np.bool_), np.empty(rows), np.empty(rows),
            np.empty(rows if top5 else 0, dtype=np.bool_),
            np.zeros(shape, dtype=np.int64), np.zeros(shape), np.zeros(shape)]


def _run(fn, scores, labels, is_logits, edges, top5, classwise):
    rows, k = scores.shape
    m = edges.shape[0] - 1
    out = _outputs(rows, k, m, top5, classwise)
    fn(scores, labels, is_logits, m, edges, top5, classwise, *out)
    return out


def _cases():
    """(scores, labels, is_logits): K = 2, 7, 10, 130 (numpy's pairwise split), float32 and float64,
    with rows of equal logits (ties), rows whose softmax is exactly 1.0 (the others underflow), and
    probabilities b/15 exactly on the bin edges."""
    rng = np.random.default_rng(2024)
    out = []
    for k in (2, 7, 10, 130):
        n = 400
        logits = rng.standard_normal((n, k)) * 3
        logits[:20] = 1.5  # all equal: ties for argmax and the top-5 rank
        logits[20:40, 0] = 900.0  # p_0 = 1.0 exactly, the rest 0
        logits[40:60, :] = np.round(logits[40:60, :])  # partial ties
        labels = rng.integers(0, k, n).astype(np.int64)
        for dtype in (np.float32, np.float64):
            out.append((np.ascontiguousarray(logits.astype(dtype)), labels, True))
        # probabilities: rows of multiples of 1/15 (on the edges of 15 bins), renormalised rows, one-hots
        raw = rng.integers(0, 16, (n, k)).astype(np.float64)
        probs = rng.dirichlet(np.ones(k), n)
        probs[:100] = raw[:100] / 15.0
        probs[100:120] = 0.0
        probs[100:120, 1] = 1.0
        probs[120:130] = 1.0 / k
        for dtype in (np.float32, np.float64):
            out.append((np.ascontiguousarray(probs.astype(dtype)), labels, False))
    return out


CASES = _cases()


def _ids():
    return [f"K{s.shape[1]}-{s.dtype}-{'logits' if lg else 'probs'}" for s, _, lg in CASES]


@pytest.mark.parametrize("case", range(len(CASES)), ids=_ids())
@pytest.mark.parametrize("top5", [True, False])
@pytest.mark.parametrize("classwise", [True, False])
@pytest.mark.parametrize("m", [15, 10])
def test_fused_rows_equals_numba_and_numpy(case, top5, classwise, m):
    scores, labels, is_logits = CASES[case]
    edges = binning.uniform_edges(m)
    got = _run(ck.fused_rows, scores, labels, is_logits, edges, top5, classwise)
    names = ("conf", "correct", "nll", "brier", "top5", "count", "sum_p", "sum_y")
    # numpy's engine (an independent array implementation of the same formulas)
    conf, correct, nll, brier, hit5, stats = kernels.numpy_chunk(
        scores, labels, edges, is_logits=is_logits, compat=None, top5=top5, classwise=classwise,
        lowest_closed=True, work_dtype=np.float64)
    # two paths: within tests/libm.py's few ulps of what comes from exp/log (softmax, NLL, classwise Σp),
    # equal where no exp/log is involved
    same_up_to_exp = assert_equal_up_to_exp if is_logits else np.testing.assert_array_equal
    same_up_to_exp(got[0], conf)
    np.testing.assert_array_equal(got[1], correct)
    assert_equal_up_to_exp(got[2], nll)
    np.testing.assert_allclose(got[3], brier, rtol=0, atol=scores.shape[1] * (2.0**-52 * 2.0 + 4 * PER_VALUE))
    if top5:
        np.testing.assert_array_equal(got[4], hit5)
    if classwise:
        for name, a, b in zip(("count", "sum_p", "sum_y"), got[5:], stats):
            if name == "sum_p" and is_logits:
                assert_equal_up_to_exp(a, b, additions=scores.shape[0])
            else:
                np.testing.assert_array_equal(a, b)
            assert a.dtype == np.asarray(b).dtype
    # numba's loop, a third path: counts and flags equal, the rest within the contract (tests/libm.py)
    want = _run(_numba_rows(), scores, labels, is_logits, edges, top5, classwise)
    for name, a, b in zip(names, got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if a.dtype.kind == "f":
            assert_equal_up_to_exp(a, b, additions=scores.shape[0] if name == "sum_p" else 0, err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


def test_fused_rows_brier_is_the_sequential_sum():
    """Brier is Σ_k (p_k − [k = y])² added left to right without fused multiply-adds (-ffp-contract=off):
    equal bit for bit to a Python float loop of the same operations."""
    rng = np.random.default_rng(5)
    scores = rng.standard_normal((200, 37))
    labels = rng.integers(0, 37, 200).astype(np.int64)
    edges = binning.uniform_edges(15)
    got = _run(ck.fused_rows, scores, labels, True, edges, False, False)
    # the softmax as the loop computes it: the C library's exp (math.exp; numpy's own AVX-512 exp may
    # differ in the last bit, tests/libm.py), numpy's pairwise Σ, then one division
    e = np.array([[math.exp(v) for v in row] for row in scores - scores.max(axis=1, keepdims=True)])
    p = e / e.sum(axis=1, keepdims=True)
    for i in range(200):
        acc = 0.0
        for j in range(37):
            d = float(p[i, j]) - 1.0 if j == labels[i] else float(p[i, j])
            acc += d * d
        assert got[3][i] == acc


def test_fused_rows_adds_into_the_classwise_cells():
    """count/sum_p/sum_y are added to (chunks accumulate in the caller's arrays), in row order."""
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((300, 5))
    labels = rng.integers(0, 5, 300).astype(np.int64)
    edges = binning.uniform_edges(15)
    whole = _run(ck.fused_rows, scores, labels, True, edges, False, True)
    out = _outputs(150, 5, 15, False, True)
    ck.fused_rows(scores[:150], labels[:150], True, 15, edges, False, True, *out)
    out2 = _outputs(150, 5, 15, False, True)
    out2[5:] = out[5:]
    ck.fused_rows(scores[150:], labels[150:], True, 15, edges, False, True, *out2)
    for a, b in zip(whole[5:], out2[5:]):
        assert a.tobytes() == b.tobytes()
    assert whole[5].sum() == 300 * 5


def _bin_cases():
    rng = np.random.default_rng(9)
    conf = np.concatenate([rng.random(3000), [0.0, 1.0, 0.2, 0.3, 0.4, 0.6, 0.7], np.arange(16) / 15.0])
    correct = rng.random(conf.shape[0]) < 0.5
    cases = []
    for edges in (binning.uniform_edges(15), binning.uniform_edges(10), binning.equal_mass_edges(conf, 15),
                  binning.torch_linspace_edges(15), binning.equal_mass_edges(np.round(conf, 1), 7),
                  # 64 edges and more: the binary search rather than the count of the edges below
                  binning.equal_mass_edges(conf, 100), binning.uniform_edges(64)):
        for closed in (True, False):
            for targets in (correct, correct.astype(np.float64) * 0.75):
                cases.append((conf.astype(edges.dtype), targets, edges, closed))
    return cases


@pytest.mark.parametrize("case", range(28))
def test_bin_sums_1d_equals_numba_and_numpy(case, monkeypatch):
    values, targets, edges, closed = _bin_cases()[case]
    m = edges.shape[0] - 1
    uniform = edges.dtype == np.float64 and np.array_equal(edges, binning.uniform_edges(m))

    def run(fn):
        out = [np.zeros(m, dtype=np.int64), np.zeros(m), np.zeros(m)]
        fn(values, targets, edges, bool(uniform), closed, *out)
        return out

    got = run(ck.bin_sums_1d)
    monkeypatch.setattr(binning, "_COMPILED_MIN", 1 << 40)  # the numpy pass
    want = binning.bin_statistics(values, targets, edges, lowest_closed=closed)
    for a, b in zip(got, (want.count, want.sum_conf, want.sum_correct)):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if uniform:  # the binary search gives the same bins as the ⌈v·M⌉ formula on the edges b/M
        out = [np.zeros(m, dtype=np.int64), np.zeros(m), np.zeros(m)]
        ck.bin_sums_1d(values, targets, edges, False, closed, *out)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(got, out))
    pytest.importorskip("numba")
    from calibrate_cli.engine.numba_bins import bin_sums_1d

    for a, b in zip(got, run(bin_sums_1d)):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("m", [1, 2, 3, 7, 10, 15, 16, 17])
def test_bin_sums_1d_register_loop_is_bit_identical_to_the_scalar_loop(m):
    """The AVX2 loop of bin_sums_1d (float64 values, bool targets, at most 16 bins: the bins four at a
    time, the sums in registers) gives the scalar loop's count, Σvalue and Σtarget bit for bit: edges
    b/M and equal-mass edges, both closures, values on, one ulp around and between the edges, 0, 1,
    NaN, ±inf and out of range, N not a multiple of 4, and sums added into (whole-number Σtarget)."""
    rng = np.random.default_rng(m)
    base = np.concatenate([np.arange(m + 1) / m, (np.arange(m) + 0.5) / m])
    v = np.concatenate([rng.random(5001), base, np.nextafter(base, 2.0), np.nextafter(base, -1.0),
                        rng.random(300) * 1e-12, [0.0, -0.0, 1.0, np.nan, np.inf, -np.inf, -0.5, 1.5, 1e300]])
    v = v[rng.permutation(v.shape[0])]
    t = rng.random(v.shape[0]) < 0.7
    finite = v[np.isfinite(v) & (v >= 0) & (v <= 1)]
    for edges, uniform in ((binning.uniform_edges(m), True), (binning.equal_mass_edges(finite, m), False)):
        for closed in (True, False):
            start = [np.arange(m, dtype=np.int64), np.linspace(0.0, 3.0, m), np.arange(m) * 2.0]
            got, want = [a.copy() for a in start], [a.copy() for a in start]
            ran = ck.bin_sums_1d(v, t, edges, uniform, closed, *got)
            assert ck.bin_sums_1d(v, t, edges, uniform, closed, *want, False) is False
            assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want)), (uniform, closed)
            if "avx2" in _cpu_flags():
                assert ran is (m <= 16)
    edges = binning.uniform_edges(m)
    for start in ([np.zeros(m, dtype=np.int64), np.full(m, -0.0), np.zeros(m)],  # a masked +0.0 would make +0.0
                  [np.zeros(m, dtype=np.int64), np.zeros(m), np.full(m, 0.5)]):  # not a whole number
        got, want = [a.copy() for a in start], [a.copy() for a in start]
        assert ck.bin_sums_1d(v[:3], t[:3], edges, True, True, *got) is False
        ck.bin_sums_1d(v[:3], t[:3], edges, True, True, *want, False)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want))


def test_non_finite_values_bin_as_numpy_bins_them(monkeypatch):
    """NaN, ±inf and values outside [0, 1] (refused before the kernels in calib) never crash and land
    in the numpy pass's bins (assign_bins: a NaN or out-of-range ⌈v·M⌉ converts to INT64_MIN). numba's
    loop is not the reference here: LLVM's float-to-int conversion of such values is undefined."""
    odd = np.array([np.nan, np.inf, -np.inf, -0.5, 1.5, -0.0, 0.0, 1.0, 1e300, -1e300])
    monkeypatch.setattr(binning, "_COMPILED_MIN", 1 << 40)
    monkeypatch.setattr(binning, "_CKERNEL_MIN", 1 << 40)
    for edges, uniform in ((binning.uniform_edges(15), True), (binning.equal_mass_edges(np.linspace(0, 1, 99), 7), False)):
        m = edges.shape[0] - 1
        for closed in (True, False):
            # the binary search (as numba's) puts a NaN below the edges, searchsorted above them
            v = odd if uniform else odd[~np.isnan(odd)]
            out = [np.zeros(m, dtype=np.int64), np.zeros(m), np.zeros(m)]
            ck.bin_sums_1d(v, v > 0, edges, uniform, closed, *out)
            with np.errstate(all="ignore"):
                want = binning.bin_statistics(v, v > 0, edges, lowest_closed=closed)
            np.testing.assert_array_equal(out[0], want.count)
            np.testing.assert_array_equal(out[1], want.sum_conf)
            np.testing.assert_array_equal(out[2], want.sum_correct)
    probs = np.tile(odd, (3, 1))
    labels = np.array([0, 1, 3], dtype=np.int64)
    got = _run(ck.fused_rows, probs, labels, False, binning.uniform_edges(15), True, True)
    assert got[5].sum() == probs.size  # every value in some cell


def test_uniform_bins_one_ulp_around_the_edges(monkeypatch):
    """The ⌈v·M⌉ candidate (ceil_index, computed in integers) bins every value within a few ulps of an
    edge b/M, and values whose v·M is just above or below an integer, as the numpy pass does."""
    monkeypatch.setattr(binning, "_COMPILED_MIN", 1 << 40)
    monkeypatch.setattr(binning, "_CKERNEL_MIN", 1 << 40)
    for m in (7, 10, 15, 100):
        edges = binning.uniform_edges(m)
        base = np.concatenate([np.arange(m + 1) / m, edges, (np.arange(m + 1) + 0.5) / m])
        near, up, down = [base], base, base
        for _ in range(3):  # 1, 2 and 3 ulps above and below
            up, down = np.nextafter(up, 2.0), np.nextafter(down, -1.0)
            near += [up, down]
        v = np.unique(np.clip(np.concatenate(near), 0.0, 1.0))
        for closed in (True, False):
            out = [np.zeros(m, dtype=np.int64), np.zeros(m), np.zeros(m)]
            ck.bin_sums_1d(v, v > 0.5, edges, True, closed, *out)
            want = binning.bin_statistics(v, v > 0.5, edges, lowest_closed=closed)
            np.testing.assert_array_equal(out[0], want.count)
            assert out[1].tobytes() == want.sum_conf.tobytes() and out[2].tobytes() == want.sum_correct.tobytes()
            for x in v:  # one value at a time: its bin, not only the totals
                one = [np.zeros(m, dtype=np.int64), np.zeros(m), np.zeros(m)]
                ck.bin_sums_1d(np.array([x]), np.array([True]), edges, True, closed, *one)
                np.testing.assert_array_equal(
                    one[0], binning.bin_statistics(np.array([x]), np.array([True]), edges, lowest_closed=closed).count)


def test_binning_uses_the_extension_from_small_sizes(monkeypatch):
    """bin_statistics takes the C loop from _CKERNEL_MIN samples on (same sums as the numpy pass)."""
    calls = []
    real = ck.bin_sums_1d
    monkeypatch.setattr(ck, "bin_sums_1d", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(3)
    v = rng.random(binning._CKERNEL_MIN)
    t = rng.random(v.shape[0]) < 0.5
    got = binning.bin_statistics(v, t, binning.uniform_edges(15))
    assert calls == [1]
    monkeypatch.setattr(binning, "_COMPILED_MIN", 1 << 40)
    monkeypatch.setattr(binning, "_CKERNEL_MIN", 1 << 40)
    want = binning.bin_statistics(v, t, binning.uniform_edges(15))
    assert calls == [1]
    assert np.array_equal(got.sum_conf, want.sum_conf) and np.array_equal(got.count, want.count)


def _good_fused():
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((8, 3))
    labels = rng.integers(0, 3, 8).astype(np.int64)
    edges = binning.uniform_edges(15)
    return [scores, labels, True, 15, edges, True, True, *_outputs(8, 3, 15, True, True)]


@pytest.mark.parametrize("index, bad, error", [
    (0, np.zeros((8, 3), dtype=np.int32), TypeError),  # scores' dtype
    (0, np.zeros((8, 3), dtype=np.float16), TypeError),
    (0, np.zeros((3, 8)).T, ValueError),  # not C-contiguous (numpy's error type)
    (0, np.zeros(8), ValueError),  # 1-D
    (0, np.zeros((8, 0)), ValueError),  # no columns
    (0, [[0.0, 1.0, 2.0]] * 8, TypeError),  # not a buffer
    (1, np.zeros(8, dtype=np.int32), TypeError),  # labels int32
    (1, np.zeros(7, dtype=np.int64), ValueError),  # labels' length
    (1, np.full(8, 3, dtype=np.int64), ValueError),  # label out of range
    (1, np.full(8, -1, dtype=np.int64), ValueError),
    (3, 0, ValueError),  # m
    (4, np.zeros(15), ValueError),  # edges' length ≠ m + 1
    (4, np.zeros(16, dtype=np.float32), TypeError),
    (7, np.zeros(8, dtype=np.float32), TypeError),  # conf
    (7, np.zeros(8)[::-1], ValueError),  # negative stride: not C-contiguous
    (8, np.zeros(8, dtype=np.int8), TypeError),  # correct
    (9, np.zeros(9), ValueError),  # nll's length
    (11, np.zeros(0, dtype=np.bool_), ValueError),  # top5 wanted
    (12, np.zeros((3, 15)), TypeError),  # count float
    (12, np.zeros((3, 14), dtype=np.int64), ValueError),
    (13, np.zeros((2, 15)), ValueError),
    (14, np.zeros(45), ValueError),
])
def test_fused_rows_rejects_bad_arguments(index, bad, error):
    args = _good_fused()
    ck.fused_rows(*args)  # the good ones run
    args[index] = bad
    with pytest.raises(error):
        ck.fused_rows(*args)


def test_fused_rows_rejects_read_only_outputs_and_wrong_arity():
    args = _good_fused()
    ro = np.zeros(8)
    ro.flags.writeable = False
    args[7] = ro
    with pytest.raises((TypeError, ValueError), match="conf: expected a writable"):
        ck.fused_rows(*args)
    with pytest.raises(TypeError):
        ck.fused_rows(*_good_fused()[:-1])


def _good_bins():
    v = np.linspace(0, 1, 50)
    return [v, v > 0.5, binning.uniform_edges(15), True, True, np.zeros(15, dtype=np.int64), np.zeros(15), np.zeros(15)]


@pytest.mark.parametrize("index, bad, error", [
    (0, np.zeros(50, dtype=np.int64), TypeError),
    (0, np.zeros((50, 1)), ValueError),
    (0, np.zeros(100)[::2], ValueError),
    (1, np.zeros(50, dtype=np.int64), TypeError),  # targets int
    (1, np.zeros(49, dtype=np.bool_), ValueError),
    (2, np.linspace(0, 1, 16, dtype=np.float32), TypeError),  # edges' dtype ≠ values'
    (2, np.zeros(1), ValueError),  # no bin
    (5, np.zeros(15), TypeError),
    (5, np.zeros(14, dtype=np.int64), ValueError),
    (6, np.zeros(16), ValueError),
    (7, np.zeros(15, dtype=np.float32), TypeError),
])
def test_bin_sums_1d_rejects_bad_arguments(index, bad, error):
    args = _good_bins()
    ck.bin_sums_1d(*args)
    args[index] = bad
    with pytest.raises(error):
        ck.bin_sums_1d(*args)


def test_the_fused_engine_runs_the_extension(monkeypatch):
    """With the extension built, the fused engine is available, is the default from small inputs on,
    and calls the C loop (numba's is not loaded)."""
    assert kernels.HAVE_CKERNEL and kernels.fused_available()
    monkeypatch.delenv(kernels.ENGINE_ENV, raising=False)
    assert kernels.fused_min_values() == kernels.CKERNEL_MIN_VALUES < kernels.FUSED_MIN_VALUES
    assert kernels.default_engine(kernels.CKERNEL_MIN_VALUES) == "fused"
    assert kernels.default_engine(kernels.CKERNEL_MIN_VALUES - 1) == "numpy"
    assert kernels._compiled() is ck.fused_rows
    # the temperature kernels are numba's only: their default keeps numba's threshold
    assert kernels.numba_engine(kernels.FUSED_MIN_VALUES - 1) == "numpy"
    assert kernels.numba_engine(kernels.FUSED_MIN_VALUES) == ("fused" if kernels.HAVE_NUMBA else "numpy")
    monkeypatch.setattr(kernels, "HAVE_CKERNEL", False)
    assert kernels.fused_min_values() == kernels.FUSED_MIN_VALUES


_NO_NUMBA = """
import sys
from pathlib import Path
import numpy as np
from calibrate_cli.evaluate import evaluate
report = evaluate(np.load(sys.argv[1], mmap_mode="r"), np.load(sys.argv[2]))
print("numba" in sys.modules, "calibrate_cli.engine._ckernel" in sys.modules)
"""


def test_eval_does_not_import_numba(tmp_path):
    """calib's evaluation of 2·10^6 × 10 logits (above numba's FUSED_MIN_VALUES) in a fresh process
    runs the fused engine on the C loops without importing numba; the CLI does the same."""
    rng = np.random.default_rng(4)
    n, k = 2_000_000, 10
    np.save(tmp_path / "x.npy", rng.standard_normal((n, k), dtype=np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, k, n))
    env = {key: v for key, v in os.environ.items() if key != kernels.ENGINE_ENV}
    out = subprocess.run([sys.executable, "-c", _NO_NUMBA, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"], out.stdout
    cli = ("import sys, runpy; sys.argv = ['calib', 'eval', sys.argv[1], sys.argv[2], '--format', 'json'];"
           "from calibrate_cli.cli import main\n"
           "try:\n    main()\nexcept SystemExit:\n    pass\n"
           "print('NUMBA', 'numba' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", cli, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert "NUMBA False" in out.stderr, out.stderr[-2000:]


# --------------------------------------------------------------------------- spread_unit (SmoothECE)


def _numpy_spread(conf, correct, g, piece, start_value=0.0):
    """smooth_ece._Grids.spread_unit's numpy code, written out: per piece, four np.bincount from zero
    in sample order, each added into the grid (here filled with ``start_value``) in this order."""
    out = np.full((1, 2 * g), start_value)
    for start in range(0, conf.shape[0], piece):
        c = conf[start : start + piece]
        x = c * (g - 1)
        lo = x.astype(np.int32).clip(0, g - 2)
        frac = x - lo
        residual = c - np.asarray(correct[start : start + piece], dtype=np.float64)
        keep = 1 - frac
        out[0, :g] += np.bincount(lo, weights=keep * residual, minlength=g)
        out[0, :g] += np.bincount(lo + 1, weights=frac * residual, minlength=g)
        out[0, g:] += np.bincount(lo, weights=keep, minlength=g)
        out[0, g:] += np.bincount(lo + 1, weights=frac, minlength=g)
    return out


def _spread_conf(n, g, rng):
    """n confidences in [0, 1]: uniform, near 1 (where top-label confidences pile up), 0.0 and 1.0,
    exactly on grid nodes k/(g − 1) and one ulp either side of them, and repeated values (ties)."""
    conf = rng.random(n)
    kinds = rng.integers(0, 7, n)
    nodes = rng.integers(0, g, n) / (g - 1)
    conf = np.where(kinds == 1, 1 - rng.random(n) ** 4 * 0.1, conf)
    conf = np.where(kinds == 2, 0.0, conf)
    conf = np.where(kinds == 3, 1.0, conf)
    conf = np.where(kinds == 4, nodes, conf)
    conf = np.where(kinds == 5, np.clip(np.nextafter(nodes, rng.choice([0.0, 2.0], n)), 0.0, 1.0), conf)
    conf = np.where(kinds == 6, conf[0], conf)  # ties with the first sample
    return conf


# (g, n, piece): g = 2, 3 and smooth_ece's grids (1001 for σ ≥ 0.01, up to 10001 at σ = 0.001); one
# sample, fewer samples than a piece, a multiple of the piece, and not a multiple (many pieces)
_SPREAD_CASES = [(g, n, piece) for g in (2, 3, 1001, 2001, 10001)
                 for n, piece in ((1, 64), (5, 64), (640, 64), (1000, 7), (3001, 256), (20_000, 1 << 18))]


@pytest.mark.parametrize("g,n,piece", _SPREAD_CASES)
@pytest.mark.parametrize("correct_dtype", [np.bool_, np.float64, np.int64])
@pytest.mark.parametrize("halves", [False, True])
def test_spread_unit_equals_numpy_bit_for_bit(g, n, piece, correct_dtype, halves, monkeypatch):
    """_Grids.spread_unit with the extension equals its numpy code (written out here, and the module's
    own with the extension switched off) bit for bit, for any piece size; 0.0, 1.0, grid nodes, ties.
    ``halves``: the pieces in two halves at once (the second half's bincounts kept per piece, then
    added in order), as from TOGETHER_SAMPLES samples on two threads."""
    from calibrate_cli.metrics import smooth_ece
    from calibrate_cli.engine import sorting

    rng = np.random.default_rng(g * 7919 + n)
    conf = _spread_conf(n, g, rng)
    correct = (rng.random(n) < conf).astype(correct_dtype)
    monkeypatch.setattr(sorting, "PIECE", piece)
    monkeypatch.setenv("CALIB_THREADS", "2")
    monkeypatch.setattr(smooth_ece, "together", lambda n: halves)
    want = _numpy_spread(conf, correct, g, piece)
    got = smooth_ece._Grids(conf, correct, None).spread_unit(g)
    assert got.dtype == np.float64 and got.shape == (1, 2 * g)
    assert np.array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    monkeypatch.setattr(kernels, "HAVE_CKERNEL", False)
    assert np.array_equal(smooth_ece._Grids(conf, correct, None).spread_unit(g), want)


def test_spread_unit_calls_the_extension_and_adds_into_out(monkeypatch):
    """spread_unit runs the C loop when built; the C loop adds into `out` (piece by piece)."""
    from calibrate_cli.metrics import smooth_ece

    calls = []
    monkeypatch.setattr(kernels._ckernel, "spread_unit", lambda *a: calls.append(a), raising=False)
    smooth_ece._Grids(np.array([0.5]), np.array([True]), None).spread_unit(1001)
    assert len(calls) == 1
    monkeypatch.undo()
    rng = np.random.default_rng(3)
    conf, correct = rng.random(999), rng.random(999) < 0.5
    out = np.full(2 * 11, 0.25)
    ck.spread_unit(conf, correct, 11, 100, out)
    assert np.array_equal(out, _numpy_spread(conf, correct, 11, 100, start_value=0.25)[0])
    one = np.zeros(2 * 11)
    ck.spread_unit(np.array([0.35]), np.array([False]), 11, 100, one)
    # 0.35·10 = 3.5: node 3 gets 0.5·0.35 (residual) and 0.5 (density), node 4 the same
    assert one[3] == one[4] == 0.5 * 0.35 and one[11 + 3] == one[11 + 4] == 0.5
    parts, untouched = np.full((10, 4 * 11), np.nan), np.full(2 * 11, 0.25)
    ck.spread_unit(conf, correct, 11, 100, untouched, parts)  # each piece's four bincounts, out left alone
    assert np.all(untouched == 0.25)
    for part in parts:
        untouched[:11] += part[:11]
        untouched[:11] += part[11:22]
        untouched[11:] += part[22:33]
        untouched[11:] += part[33:]
    assert np.array_equal(untouched, out)
    with pytest.raises(ValueError, match="parts"):
        ck.spread_unit(conf, correct, 11, 100, out, np.empty((9, 44)))


def test_smooth_ece_of_evaluate_unchanged_by_the_extension(monkeypatch):
    """The SmoothECE of `evaluate` on 10^5 × 10 logits is the same float with the extension as with the
    numpy spreading. Both runs take the numpy engine for the summary pass, so that only the spreading
    differs (the fused engine's exp is the C library's, which numpy's own AVX-512 exp is not:
    tests/libm.py)."""
    from calibrate_cli.evaluate import evaluate

    monkeypatch.setenv(kernels.ENGINE_ENV, "numpy")
    rng = np.random.default_rng(11)
    logits = (rng.standard_normal((100_000, 10)) * 2).astype(np.float32)
    labels = rng.integers(0, 10, 100_000)
    with_c = evaluate(logits, labels).metrics["smooth_ece"]
    monkeypatch.setattr(kernels, "HAVE_CKERNEL", False)
    without = evaluate(logits, labels).metrics["smooth_ece"]
    assert np.array_equal(np.asarray(with_c), np.asarray(without)), (with_c, without)


def _good_spread():
    return [np.linspace(0, 1, 10), np.zeros(10, dtype=np.bool_), 11, 4, np.zeros(22)]


@pytest.mark.parametrize("index,bad,error", [
    (0, np.linspace(0, 1, 10, dtype=np.float32), TypeError),
    (0, np.zeros((2, 5)), ValueError),
    (1, np.zeros(10, dtype=np.int64), TypeError),
    (1, np.zeros(9, dtype=np.bool_), ValueError),
    (2, 1, ValueError),
    (3, 0, ValueError),
    (4, np.zeros(21), ValueError),
    (4, np.zeros(22, dtype=np.float32), TypeError),
])
def test_spread_unit_rejects_bad_arguments(index, bad, error):
    args = _good_spread()
    args[index] = bad
    with pytest.raises(error):
        ck.spread_unit(*args)
    read_only = np.zeros(22)
    read_only.flags.writeable = False
    with pytest.raises(ValueError):
        ck.spread_unit(*_good_spread()[:4], read_only)


def test_a_stale_build_lacking_a_loop_is_not_used_at_all():
    """An extension built from older sources (no spread_unit) is ignored as a whole: the numba/numpy
    paths run, never an AttributeError half-way through an evaluation."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import sys, types
        stale = types.ModuleType("calibrate_cli.engine._ckernel")
        stale.fused_rows = stale.bin_sums_1d = lambda *a: None  # no spread_unit
        sys.modules["calibrate_cli.engine._ckernel"] = stale
        import numpy as np
        import calibrate_cli.engine.kernels as kernels
        from calibrate_cli import evaluate
        assert not kernels.HAVE_CKERNEL and kernels._ckernel is None
        rng = np.random.default_rng(0)
        print(evaluate(rng.normal(size=(300, 3)), rng.integers(0, 3, 300)).metrics["smooth_ece"] >= 0)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


# --------------------------------------------------------------------------- nll_rows (exact NLL fit)


def _numpy_nll_sums(z, y, beta):
    """Σ NLL, Σ (E_p[d] − d_y), Σ Var_p[d] at β in plain numpy float64 (C library exp and log)."""
    z = np.asarray(z, dtype=np.float64)
    d = z - z.max(axis=1, keepdims=True)
    e = np.exp(beta * d)
    s = e.sum(axis=1)
    d0 = np.where(np.isneginf(d), 0.0, d)
    m1 = (e * d0).sum(axis=1) / s
    m2 = (e * d0 * d0).sum(axis=1) / s
    d_y = d[np.arange(len(y)), y]
    return np.array([np.sum(np.log(s) - beta * d_y), np.sum(m1 - d_y), np.sum(np.maximum(m2 - m1 * m1, 0.0))])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [2, 10, 130])
@pytest.mark.parametrize("beta", [0.05, 1.0, 7.5])
def test_nll_rows_equals_numpy_and_numba(dtype, k, beta):
    rng = np.random.default_rng(k)
    n = 3000
    z = (rng.standard_normal((n, k)) * 4).astype(dtype)
    z[:50] = np.round(z[:50])  # ties of the maximum
    y = rng.integers(0, k, n)
    out = np.full(3, 1.0)  # adds into out
    ck.nll_rows(z, y, beta, out)
    expected = _numpy_nll_sums(z, y, beta)
    np.testing.assert_allclose(out - 1.0, expected, rtol=1e-12)  # the polynomial exp: within 2 ulps
    if kernels.HAVE_NUMBA:
        from calibrate_cli.engine.numba_grid import nll_rows

        numba_out = np.full(3, 1.0)
        nll_rows(z, y, beta, numba_out)
        np.testing.assert_allclose(out, numba_out, rtol=1e-14)  # the same operations, contracted or not


def _bits(a):
    return np.asarray(a, dtype=np.float64).view(np.int64)


def test_exp_poly_avx2_is_bit_identical_to_the_scalar_loop():
    """The AVX2 loop does the scalar loop's operations in the same order, each rounded (no FMA):
    every value equal, including NaN/±inf/±0 and the −708 floor; lengths not a multiple of 4."""
    rng = np.random.default_rng(0)
    special = [np.nan, -np.inf, np.inf, 0.0, -0.0, -708.0, -708.0000001, -707.9999, 1e-300, -1e-300, 709.0, 1e3]
    x = np.concatenate([rng.uniform(-800, 40, 200_001), rng.normal(scale=1e-3, size=1001), special])
    vector, scalar = np.empty_like(x), np.empty_like(x)
    ran_vector = ck.exp_poly(x, vector, True)
    assert ck.exp_poly(x, scalar, False) is False
    assert np.array_equal(_bits(vector), _bits(scalar))
    if platform.machine() in ("x86_64", "AMD64") and "avx2" in _cpu_flags():
        assert ran_vector  # the vector loop was the one compared


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 100, 130])
def test_nll_rows_avx2_is_bit_identical_to_the_scalar_loop(dtype, k):
    """Four classes at a time (masked loads for a row's last, partial group), the three sums still
    added class after class: the same bits as the scalar pass, with log-probabilities of 0 (−inf)."""
    rng = np.random.default_rng(k)
    n = 2000
    z = (rng.standard_normal((n, k)) * 5).astype(dtype)
    z[:40] = np.round(z[:40])
    if k > 1:
        z[::13, rng.integers(0, k)] = -np.inf
    y = rng.integers(0, k, n)
    y[::13] = np.argmax(z[::13], axis=1)  # a true class of probability 0 would make the NLL inf
    for beta in (0.05, 1.0, 7.5):
        vector, scalar = np.full(3, 0.5), np.full(3, 0.5)
        ck.nll_rows(z, y, beta, vector)
        ck.nll_rows(z, y, beta, scalar, False)
        assert np.array_equal(_bits(vector), _bits(scalar))


def _fused_adversarial(k, dtype, rng):
    """(logits, labels) for the vector fused pass: random rows, rows of equal logits (p = 1/K, on a
    bin edge when K divides M or M divides a multiple of K), rows with p = 1.0 exactly (the others
    underflow to 0), rows all near −800 (exp of the padding lanes overflows), rounded rows (ties for
    the argmax and the top-5 rank), tiny probabilities (p·M < 1/2) and probabilities b/M − ε, b/M + ε."""
    n = 3000
    x = rng.standard_normal((n, k)) * 3
    x[:30] = 1.5
    x[30:60, 0] = 900.0
    x[60:90] = -800.0 + rng.standard_normal((30, k))
    x[90:400] = np.round(x[90:400])
    x[400:450] *= 12  # probabilities far below 1/(2M)
    if k >= 2:  # two classes whose p is b/M exactly or one ulp off: logits log(b), log(M − b)
        b = rng.integers(1, 15, 300)
        x[450:750] = -1e3
        x[450:750, 0] = np.log(b)
        x[450:750, 1] = np.log(15 - b) + rng.choice([-1, 0, 1], 300) * 2.0**-50
    y = rng.integers(0, k, n)
    return np.ascontiguousarray(x.astype(dtype)), y.astype(np.int64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 100, 130])
def test_fused_rows_avx2_is_bit_identical_to_the_scalar_loop(dtype, k):
    """The AVX2 block loop of fused_rows (exact_exp4, vector division, Brier's products, the top-5
    rank, the classwise bins away from the edges) gives every output of the scalar loop bit for bit,
    for M = 1, 3, 15, 100 and with or without top-5 and classwise cells."""
    rng = np.random.default_rng(100 + k)
    scores, labels = _fused_adversarial(k, dtype, rng)
    n = scores.shape[0]
    ran = []
    for m in (1, 3, 15, 100):
        edges = binning.uniform_edges(m)
        for top5, classwise in ((True, True), (False, True), (True, False)):
            outs = []
            for vector in (True, False):
                out = _outputs(n, k, m, top5, classwise)
                ran.append(ck.fused_rows(scores, labels, True, m, edges, top5, classwise, *out, vector))
                outs.append(out)
            for a, b in zip(*outs):
                assert a.tobytes() == b.tobytes(), (m, top5, classwise)
    assert ran[1] is False  # vector=False: the scalar loop
    if platform.machine() in ("x86_64", "AMD64") and "avx2" in _cpu_flags() and "fma" in _cpu_flags():
        assert ran[0]  # the vector loop was the one compared


def test_fused_rows_avx2_only_with_the_edges_b_over_m():
    """Edges other than b/M (np.linspace's, one ulp off for M = 10) keep the scalar loop for the
    classwise bins (the vector bins assume b/M), for logits and probabilities alike; probabilities of
    more than 128 classes take the scalar loop too."""
    rng = np.random.default_rng(7)
    scores, labels = _fused_adversarial(10, np.float32, rng)
    n = scores.shape[0]
    edges = np.linspace(0, 1, 11)
    assert not np.array_equal(edges, binning.uniform_edges(10))
    out = _outputs(n, 10, 10, True, True)
    assert ck.fused_rows(scores, labels, True, 10, edges, True, True, *out) is False
    want = _outputs(n, 10, 10, True, True)
    ck.fused_rows(scores, labels, True, 10, edges, True, True, *want, False)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(out, want))
    probs = rng.dirichlet(np.ones(10), n)
    assert ck.fused_rows(probs, labels, False, 10, edges, True, True, *_outputs(n, 10, 10, True, True)) is False
    wide = rng.dirichlet(np.ones(129), 50)
    assert ck.fused_rows(wide, labels[:50] % 129, False, 10, binning.uniform_edges(10), True, True,
                         *_outputs(50, 129, 10, True, True)) is False


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next((line for line in info if line.startswith("flags")), "")
    except OSError:
        return ""


def test_nll_rows_log_probabilities_of_zero_and_bad_arguments():
    with np.errstate(divide="ignore"):
        z = np.log(np.array([[0.0, 0.25, 0.75], [0.5, 0.5, 0.0]]))  # −inf: a probability of 0
    y = np.array([2, 0])
    out = np.zeros(3)
    ck.nll_rows(z, y, 1.0, out)
    np.testing.assert_allclose(out, _numpy_nll_sums(z, y, 1.0), rtol=1e-13)
    with pytest.raises(ValueError, match="outside"):
        ck.nll_rows(z, np.array([0, 3]), 1.0, np.zeros(3))
    with pytest.raises(ValueError, match="out"):
        ck.nll_rows(z, y, 1.0, np.zeros(2))
    with pytest.raises(TypeError):
        ck.nll_rows(np.zeros((2, 3), dtype=np.int64), y, 1.0, np.zeros(3))


_NLL_FIT = """
import sys
from pathlib import Path
import numpy as np
from calibrate_cli import fit_temperature
fit = fit_temperature(np.load(sys.argv[1]), np.load(sys.argv[2]), search="nll")
print("numba" in sys.modules, fit.parameters["passes"])
"""


def test_exact_nll_fit_runs_the_extension_without_numba(tmp_path):
    """The Newton passes of `--search nll` run on the C loops above numba's threshold: numba (and its
    ~1 s of import and cache loading) is not loaded."""
    rng = np.random.default_rng(5)
    n, k = 300_000, 10
    x = rng.standard_normal((n, k), dtype=np.float32) * 3
    y = rng.integers(0, k, n)
    x[np.arange(n), y] += 2
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    assert n * k * 8 >= kernels.FUSED_MIN_VALUES  # where numba's kernel was the default
    env = {key: v for key, v in os.environ.items() if key != kernels.ENGINE_ENV}
    out = subprocess.run([sys.executable, "-c", _NLL_FIT, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    imported, passes = out.stdout.split()
    assert imported == "False" and int(passes) > 1, out.stdout


# --------------------------------------------------------------------------- top_label_rows, exp_exact


def test_exp_exact_is_the_c_librarys_exp_bit_for_bit():
    """exact_exp4 (the GNU C library's exp, its operations four at a time) compared with Python's
    math.exp (the C library's) on values over every table entry, near 0 and 2^-54, near the ±512 and
    ±745 limits, NaN and ±inf, in lengths not a multiple of 4."""
    rng = np.random.default_rng(7)
    special = [0.0, -0.0, np.nan, -np.inf, np.inf, -700.0, 700.0, -699.9999, 699.9999, -745.2, 709.7,
               1e-300, -1e-300, -np.log(2) / 128, np.log(2) / 128, -np.log(2), 1.0, -1.0,
               2.0**-54, -(2.0**-54), np.nextafter(2.0**-54, 0), -np.nextafter(2.0**-54, 0), 2.0**-53, -(2.0**-53),
               512.0, -512.0, np.nextafter(512.0, 0), -np.nextafter(512.0, 0), 5e-324, -5e-324]
    x = np.concatenate([rng.uniform(-745, 0, 400_000), rng.uniform(-40, 40, 400_000),
                        rng.normal(scale=1e-4, size=50_001), np.arange(-256, 256) * np.log(2) / 128,
                        np.ldexp(rng.uniform(-1, 1, 20_000), -rng.integers(0, 64, 20_000)), special])
    out = np.empty_like(x)
    ran_vector = ck.exp_exact(x, out)
    expected = np.array([_c_exp(v) for v in x.tolist()])
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(out), nan)
    assert np.array_equal(_bits(out[~nan]), _bits(expected[~nan]))
    if platform.machine() in ("x86_64", "AMD64") and {"avx2", "fma"} <= set(_cpu_flags().split()):
        assert ran_vector  # the vector path was the one compared


def _c_exp(v: float) -> float:
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


def _numpy_top_label(scores, labels, is_logits):
    """Independent float64: p = e/Σe with the C library's exp (math.exp, whatever numpy's own SIMD exp)
    and numpy's row sums, conf = max p, correct = [first argmax = y]."""
    p = np.asarray(scores, dtype=np.float64)
    if is_logits:
        e = np.frompyfunc(math.exp, 1, 1)(p - p.max(axis=1, keepdims=True)).astype(np.float64)
        p = e / e.sum(axis=1, keepdims=True)
    return p.max(axis=1), p.argmax(axis=1) == labels


def _fused_top_label(scores, labels, is_logits):
    n, k = scores.shape
    conf, correct = np.empty(n), np.empty(n, dtype=bool)
    ck.fused_rows(scores, labels, is_logits, 15, np.linspace(0, 1, 16), False, False, conf, correct, np.empty(n),
                  np.empty(n), np.empty(n, dtype=bool), np.zeros((k, 15), np.int64), np.zeros((k, 15)),
                  np.zeros((k, 15)))
    return conf, correct


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8, 9, 10, 13, 100, 130])
def test_top_label_rows_equal_fused_rows_bit_for_bit(dtype, k):
    """The confidence and correctness of a plain float64 softmax (every class's p = e/Σe, first argmax), and
    of fused_rows, from conf = 1/Σe and the first e_j/Σe == conf: equal for logits (vector and scalar
    loops) and probabilities, with tied
    maxima, a second logit a hair below the maximum (its e rounds to 1), and huge gaps."""
    rng = np.random.default_rng(k)
    n = 3000
    z = rng.standard_normal((n, k)) * 6
    z[:300] = np.round(z[:300])  # ties of the maximum
    if k > 1:
        top = z.argmax(axis=1)
        z[300:400, 0] = z[300:400][np.arange(100), top[300:400]] * (1 - 1e-16)  # e = 1.0 below the max
        z[400:450, -1] = 800.0  # every other e = 0
    z = z.astype(dtype)
    y = rng.integers(0, k, n)
    y[:200] = z[:200].argmax(axis=1)
    for is_logits, scores in ((True, z), (False, None)):
        if scores is None:
            e = np.exp(z.astype(np.float64) - z.max(axis=1, keepdims=True))
            scores = (e / e.sum(axis=1, keepdims=True)).astype(dtype)
        want_conf, want_correct = _numpy_top_label(scores, y, is_logits)
        fused_conf, fused_correct = _fused_top_label(scores, y, is_logits)
        assert np.array_equal(_bits(fused_conf), _bits(want_conf)) and np.array_equal(fused_correct, want_correct)
        for vector in (True, False):
            conf, correct = np.empty(n), np.empty(n, dtype=bool)
            ck.top_label_rows(scores, y, is_logits, conf, correct, vector)
            assert np.array_equal(_bits(conf), _bits(want_conf))
            assert np.array_equal(correct, want_correct)


def _lanes_adversarial(n, k, dtype, rng):
    """Logits for the rows-in-lanes loop: random rows, tied maxima, a class before the maximum with
    e ≥ 1/2 (the prediction's search), e = 1 below the maximum, values 512 and more below the
    maximum and ±inf/NaN (those rows left to the C library's exp), labels of the first maximum."""
    x = rng.standard_normal((n, k)) * 4
    x[: n // 5] = np.round(x[: n // 5])
    rows = np.arange(n)
    top = x.argmax(axis=1)
    if k > 1:
        x[1::7, 0] = x[1::7].max(axis=1) - rng.uniform(0, 0.7, len(rows[1::7]))  # e_0 ≥ 1/2 before the max
        x[2::11, 0] = x[2::11].max(axis=1) * (1 - 1e-16)  # e_0 = 1.0, below the maximum
        x[3::13, -1] = x[3::13].max(axis=1) - 600.0  # one exp left to the C library
        x[5::17, 1] = -np.inf
    x[6::19, 0] = np.inf
    x[7::23, k - 1] = np.nan
    y = rng.integers(0, k, n)
    y[::3] = top[::3]
    return np.ascontiguousarray(x.astype(dtype)), y.astype(np.int64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 127, 128, 129])
def test_top_label_rows_rows_in_lanes_equal_the_scalar_loop(dtype, k):
    """The vector loop for few classes (four rows at a time, one per lane; K ≤ 32) against the scalar
    loop, bit for bit: row counts that leave 1-3 rows over, every kind of slow lane, and a bad label
    in the middle of a group of four (the same first bad row reported)."""
    rng = np.random.default_rng(1000 + k)
    for n in (1, 3, 4, 5, 6, 7, 1001, 1003):
        scores, labels = _lanes_adversarial(n, k, dtype, rng)
        got = []
        for vector in (True, False):
            conf, correct = np.full(n, -1.0), np.zeros(n, dtype=bool)
            with np.errstate(invalid="ignore"):
                ck.top_label_rows(scores, labels, True, conf, correct, vector)
            got.append((_bits(conf), correct))
        assert np.array_equal(got[0][0], got[1][0]) and np.array_equal(got[0][1], got[1][1]), n
    scores, labels = _lanes_adversarial(12, k, dtype, rng)
    labels[6], labels[9] = k, -1
    for vector in (True, False):
        with pytest.raises(ValueError, match=rf"labels\[6\] = {k}"):
            ck.top_label_rows(scores, labels, True, np.empty(12), np.empty(12, dtype=bool), vector)
    if k <= 128:  # probabilities too: the first largest p
        for n in (1, 5, 7, 1003):
            probs, labels = _lanes_probabilities(n, k, dtype, rng)
            got = []
            for vector in (True, False):
                conf, correct = np.full(n, -1.0), np.zeros(n, dtype=bool)
                ran = ck.top_label_rows(probs, labels, False, conf, correct, vector)
                got.append((_bits(conf), correct, ran))
            assert np.array_equal(got[0][0], got[1][0]) and np.array_equal(got[0][1], got[1][1]), n
            assert got[1][2] is False
            if platform.machine() in ("x86_64", "AMD64") and {"avx2", "fma"} <= set(_cpu_flags().split()):
                assert got[0][2]  # the vector loop was the one compared


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [2, 3, 5, 8, 10, 17, 128, 129])
def test_fused_rows_rows_in_lanes_equal_the_scalar_loop(dtype, k):
    """fused_rows' vector loop for K ≤ 128 (four rows at a time, one per lane) against the scalar loop,
    every output bit for bit, the classwise sums included (added into cells that already hold sums):
    row counts that leave 1-3 rows over or end a block of 64 rows inside, groups of four with a value
    left to the C library among vector groups, and a bad label in the middle of a group."""
    rng = np.random.default_rng(2000 + k)
    for n in (1, 5, 7, 64, 67, 130, 1003):
        scores, labels = _lanes_adversarial(n, k, dtype, rng)
        for m in (1, 15):
            edges = binning.uniform_edges(m)
            outs = []
            for vector in (True, False):
                out = _outputs(n, k, m, True, True)
                out[5][:] = 3
                out[6][:], out[7][:] = 0.1, 2.0
                with np.errstate(invalid="ignore"):
                    ck.fused_rows(scores, labels, True, m, edges, True, True, *out, vector)
                outs.append(out)
            for a, b in zip(*outs):
                assert a.tobytes() == b.tobytes(), (n, m)
    scores, labels = _lanes_adversarial(12, k, dtype, rng)
    labels[6] = k
    for vector in (True, False):
        with pytest.raises(ValueError, match=rf"labels\[6\] = {k}"):
            ck.fused_rows(scores, labels, True, 15, binning.uniform_edges(15), True, True,
                          *_outputs(12, k, 15, True, True), vector)


def _lanes_probabilities(n, k, dtype, rng):
    """Probabilities for the rows-in-lanes loop: softmax rows, tied maxima, zeros (NLL inf), a one-hot
    row (p = 1.0), p on and one ulp around the bin edges b/15, slightly above 1 and below 0 (inside the
    check's tolerance), and a NaN."""
    logits, labels = _lanes_adversarial(n, k, np.float64, rng)
    logits = np.nan_to_num(logits, nan=0.0, posinf=50.0, neginf=-50.0)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    p[: n // 7] = np.round(p[: n // 7], 1)  # ties and zeros
    p[1::9] = 0.0
    p[1::9, 0] = 1.0
    edges = np.arange(16) / 15
    b = rng.integers(0, 16, n)
    p[2::11, 1 % k] = np.nextafter(edges[b[2::11]], rng.choice([-1.0, 2.0], len(b[2::11])))
    p[3::13, 0] = 1.0 + 1e-7
    p[4::17, k - 1] = -1e-9
    p[5::19, 0] = np.nan
    return np.ascontiguousarray(p.astype(dtype)), labels


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [2, 3, 5, 8, 10, 17, 128])
def test_fused_rows_rows_in_lanes_on_probabilities_equal_the_scalar_loop(dtype, k):
    """Probabilities take the rows-in-lanes loop too (no exp: conf the first largest p, NLL −log p_y
    after each block): every output bit for bit as the scalar loop's, classwise sums added into."""
    rng = np.random.default_rng(3000 + k)
    for n in (1, 5, 7, 64, 67, 130, 1003):
        scores, labels = _lanes_probabilities(n, k, dtype, rng)
        for m in (1, 15):
            edges = binning.uniform_edges(m)
            outs, ran = [], []
            for vector in (True, False):
                out = _outputs(n, k, m, True, True)
                out[6][:] = 0.1
                with np.errstate(invalid="ignore", divide="ignore"):
                    ran.append(ck.fused_rows(scores, labels, False, m, edges, True, True, *out, vector))
                outs.append(out)
            for a, b in zip(*outs):
                assert a.tobytes() == b.tobytes(), (n, m)
            assert ran[1] is False
            if platform.machine() in ("x86_64", "AMD64") and {"avx2", "fma"} <= set(_cpu_flags().split()):
                assert ran[0]  # the vector loop was the one compared


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_finite_finds_each_nan_and_inf(dtype):
    """One NaN, +inf or −inf anywhere (first value, block edges of 32/4096 values, the last value, the
    scalar rest) makes all_finite False; the largest finite values, subnormals and ±0 do not."""
    rng = np.random.default_rng(3)
    big = np.finfo(dtype).max
    values = rng.standard_normal(10_001).astype(dtype)
    values[:6] = [big, -big, np.finfo(dtype).tiny / 2, 0.0, -0.0, np.finfo(dtype).tiny]
    assert ck.all_finite(values) is True
    for position in (0, 15, 16, 31, 32, 4095, 4096, 9_999, 10_000):
        for bad in (np.nan, np.inf, -np.inf):
            spoilt = values.copy()
            spoilt[position] = bad
            assert ck.all_finite(spoilt) is False, (position, bad)
    for n in range(40):
        assert ck.all_finite(values[:n].copy()) is True
    with pytest.raises(TypeError):
        ck.all_finite(np.zeros(3, dtype=np.int64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 2, 3, 10, 128, 130])
def test_probs_plausible_only_when_every_check_would_pass(dtype, k):
    """True for probabilities (one-hot rows, 0 and 1 + tol included); False for a value below 0, above
    1 + tol or NaN, or a row sum more than tol/2 from 1, in a group of four rows or in the rows left
    over; and ScoreCheck still accepts a row sum within tol but beyond tol/2 (the exact check decides)."""
    from calibrate_cli.errors import InputError
    from calibrate_cli.data.predictions import ScoreCheck

    rng = np.random.default_rng(k)
    tol = 1e-3
    p = rng.dirichlet(np.ones(k), 11).astype(dtype)
    p[3] = 0.0
    p[3, 0] = 1.0
    assert ck.probs_plausible(p, 1.0 + tol, tol) is True
    assert ck.probs_plausible(p[:0], 1.0 + tol, tol) is True
    for row in (0, 5, 10):  # in a group of four, and in the rows left over
        for bad in (-1e-9, 1.0 + 2 * tol, np.nan):
            spoilt = p.copy()
            spoilt[row, k - 1] = bad
            assert ck.probs_plausible(spoilt, 1.0 + tol, tol) is False, (row, bad)
        off = p.copy()
        off[row] = 0.0
        off[row, 0] = 1.0 + 0.75 * tol  # within the tolerance, beyond its half
        assert ck.probs_plausible(off, 1.0 + tol, tol) is False
        ScoreCheck("scores", "probs", tol).rows(off, 0)  # the exact check accepts it
        off[row, 0] = 1.0 + 1.5 * tol
        with pytest.raises(InputError):
            ScoreCheck("scores", "probs", tol).rows(off, 0)
    with pytest.raises(ValueError):
        ck.probs_plausible(p[:, 0].copy(), 1.0 + tol, tol)  # 1-D


def test_unpack_keys_refuses_bad_arguments():
    keys, correct = np.arange(4, dtype=np.int64), np.empty(4, dtype=bool)
    ck.unpack_keys(keys, correct)
    assert keys.tolist() == [0, 0, 1, 1] and correct.tolist() == [False, True, False, True]
    with pytest.raises(TypeError):
        ck.unpack_keys(keys.astype(np.float64), correct)
    with pytest.raises(ValueError, match="correct"):
        ck.unpack_keys(keys, np.empty(3, dtype=bool))
    read_only = keys.copy()
    read_only.flags.writeable = False
    with pytest.raises((TypeError, ValueError, BufferError)):
        ck.unpack_keys(read_only, correct)


def test_top_label_rows_refuse_bad_arguments():
    z = np.zeros((3, 4))
    conf, correct = np.empty(3), np.empty(3, dtype=bool)
    with pytest.raises(ValueError, match=r"labels\[1\] = 4"):
        ck.top_label_rows(z, np.array([0, 4, 1]), True, conf, correct)
    with pytest.raises(ValueError, match="conf"):
        ck.top_label_rows(z, np.array([0, 1, 1]), True, np.empty(2), correct)
    with pytest.raises(TypeError):
        ck.top_label_rows(z.astype(np.int64), np.array([0, 1, 1]), True, conf, correct)
    ck.top_label_rows(np.zeros((0, 4)), np.zeros(0, dtype=np.int64), True, np.empty(0), np.empty(0, dtype=bool))


def test_exp_table_header_is_what_its_generator_writes():
    """calibrate_cli/engine/_exp_table.h is generated (decimal, 60 digits): regenerating it changes nothing."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "gen_exp_table.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, "calibrate_cli/engine/_exp_table.h differs from scripts/gen_exp_table.py's output"


def test_bucket_passes_equal_numpys_and_refuse_bad_arguments():
    """bucket_counts / bucket_gather (order_statistics' passes): numpy's bucket counts of the values in
    [lo, hi], the members of the gathered buckets in order, min/max of the spanned ones; errors for no
    room, no buckets and a non-finite scale."""
    rng = np.random.default_rng(5)
    v = np.concatenate([rng.random(10_000), [0.0, 1.0, 0.25, 0.75]])
    lo, hi, nb = 0.25, 0.75, 64
    scale = nb / (hi - lo)
    counts = np.zeros(nb, dtype=np.int64)
    ck.bucket_counts(v, lo, hi, scale, counts)
    inside = v[(v >= lo) & (v <= hi)]
    b = np.minimum(((inside - lo) * scale).astype(np.int64), nb - 1)
    np.testing.assert_array_equal(counts, np.bincount(b, minlength=nb))
    gather, span = np.zeros(nb, dtype=bool), np.zeros(nb, dtype=bool)
    gather[[3, 63]], span[[0, 10]] = True, True
    members = np.empty(int(counts[gather].sum()))
    low, high = np.full(nb, np.inf), np.full(nb, -np.inf)
    assert ck.bucket_gather(v, lo, hi, scale, gather, span, members, low, high) == members.shape[0]
    np.testing.assert_array_equal(members, inside[gather[b]])
    for k in (0, 10):
        assert low[k] == inside[b == k].min() and high[k] == inside[b == k].max()
    assert np.isinf(low[5]) and np.isinf(high[5])
    with pytest.raises(ValueError, match="room"):
        ck.bucket_gather(v, lo, hi, scale, gather, span, members[:-1], low, high)
    with pytest.raises(ValueError, match="finite scale"):
        ck.bucket_counts(v, lo, hi, np.inf, counts)
    with pytest.raises(ValueError, match="at least one bucket"):
        ck.bucket_counts(v, lo, hi, scale, np.zeros(0, dtype=np.int64))
    with pytest.raises(TypeError):
        ck.bucket_counts(v.astype(np.float32), lo, hi, scale, counts)
