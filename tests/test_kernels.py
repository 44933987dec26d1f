"""The fused engine (the C extension, else numba) of the summary pass reproduces the numpy engine.

Every per-sample quantity and every classwise sum must be bit-identical where numpy's float64 exp
and log are the C library's (tests/libm.py: every CPU without AVX512F), except the per-sample Brier
term: numpy's ``einsum`` sums a row with SIMD lanes and fused multiply-adds whose order depends on
the CPU, the fused loop sums sequentially, so the two differ by a few ulps (|Δ| ≤ K·2⁻⁵² · Σ terms,
documented in docs/performance.md). Where numpy runs its own AVX-512 exp/log, what is computed from
them (the confidences of logits, the NLL, the classwise Σp) agrees within a few ulps per value.
Without the C extension and numba these tests skip; the engine choice still works.
"""

import numpy as np
import pytest
from libm import PER_VALUE, assert_equal_up_to_exp, assert_metrics_agree

from calibrate_cli.engine import kernels
from calibrate_cli.errors import InputError
from calibrate_cli.evaluate import evaluate
from calibrate_cli.data.predictions import as_predictions
from calibrate_cli.engine.summary import summarize

needs_numba = pytest.mark.skipif(not kernels.fused_available(),
                                 reason="neither the C extension is built nor numba installed (extra [fast])")


def _assert_same(a, b, kind="logits"):
    """``a`` (numpy engine) and ``b`` (fused) agree: bit for bit where no exp/log is involved, else as
    tests/libm.py allows (softmax of logits, the NLL, the classwise Σp of logits)."""
    for name in ("correct", "top5") + (() if kind == "logits" else ("confidences",)):
        x, y = getattr(a, name), getattr(b, name)
        if x is None:
            assert y is None
            continue
        np.testing.assert_array_equal(x, y, err_msg=name)
        assert x.dtype == y.dtype, name
    for name in ("nll",) + (("confidences",) if kind == "logits" else ()):
        x, y = getattr(a, name), getattr(b, name)
        assert_equal_up_to_exp(x, y, err_msg=name)
        assert x.dtype == y.dtype, name
    # Brier: a different summation order within a row (see the module docstring): a few ulps of Σ_k terms,
    # plus 2·|p − y|·Δp ≤ 2·(2 PER_VALUE) per term where p comes from numpy's own exp
    np.testing.assert_allclose(a.brier, b.brier, rtol=0, atol=a.k * (2.0**-52 * 2.0 + 4 * PER_VALUE))
    if a.classwise is None:
        assert b.classwise is None
        return
    for name in ("count", "sum_correct"):
        np.testing.assert_array_equal(getattr(a.classwise, name), getattr(b.classwise, name), err_msg=name)
    if kind == "logits":
        assert_equal_up_to_exp(a.classwise.sum_conf, b.classwise.sum_conf, additions=a.n, err_msg="sum_conf")
    else:
        np.testing.assert_array_equal(a.classwise.sum_conf, b.classwise.sum_conf, err_msg="sum_conf")


def _both(scores, labels, kind="logits", **kw):
    p = as_predictions(scores, labels, kind)
    return summarize(p, engine="numpy", **kw), summarize(p, engine="fused", **kw)


@needs_numba
@pytest.mark.parametrize("k", [2, 3, 7, 10, 100, 300])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_logits(k, dtype):
    rng = np.random.default_rng(k)
    n = 3000
    logits = (rng.standard_normal((n, k)) * 3).astype(dtype)
    labels = rng.integers(0, k, n)
    _assert_same(*_both(logits, labels))


@needs_numba
def test_ties_and_rounded_logits():
    """Integer logits: ties everywhere (argmax lowest index, top-5 rank ties, equal probabilities)."""
    rng = np.random.default_rng(1)
    logits = rng.integers(-2, 3, (4000, 12)).astype(np.float32)
    labels = rng.integers(0, 12, 4000)
    a, b = _both(logits, labels)
    assert (logits == logits.max(axis=1, keepdims=True)).sum(axis=1).max() > 1  # the case is exercised
    _assert_same(a, b)


@needs_numba
def test_probabilities_on_bin_edges_and_confidence_one():
    """Probabilities exactly on the edges b/M, a confidence of 1.0 and true-class probabilities of 0."""
    m = 10
    rows = [[0.3, 0.7], [0.1, 0.9], [0.0, 1.0], [1.0, 0.0], [0.5, 0.5], [0.2, 0.8], [0.6, 0.4]]
    probs = np.array(rows * 50)
    labels = np.tile([0, 1, 0, 1, 1, 0, 0], 50)
    with np.errstate(divide="ignore"):
        a, b = _both(probs, labels, "probs", n_bins=m)
    assert np.isinf(a.nll).any() and (a.confidences == 1.0).any()
    _assert_same(a, b, "probs")
    rng = np.random.default_rng(2)
    k = 10
    p = rng.integers(0, m + 1, (500, k)).astype(np.float64)
    p[:, 0] += (p.sum(axis=1) == 0)  # no all-zero rows
    p /= p.sum(axis=1, keepdims=True)
    p = np.round(p * m) / m  # many values on edges
    p[:, -1] = 1.0 - p[:, :-1].sum(axis=1)
    keep = (p >= 0).all(axis=1)
    p, y = p[keep], rng.integers(0, k, keep.sum())
    with np.errstate(divide="ignore"):
        _assert_same(*_both(p, y, "probs", n_bins=m), "probs")


@needs_numba
@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_one_dimensional_scores_and_single_sample(kind):
    rng = np.random.default_rng(3)
    s = rng.standard_normal(1000) * 4 if kind == "logits" else rng.random(1000)
    y = rng.integers(0, 2, 1000)
    _assert_same(*_both(s, y, kind), kind)
    _assert_same(*_both(s[:1], y[:1], kind), kind)
    _assert_same(*_both(rng.standard_normal((1, 10)), [3]))


@needs_numba
def test_extreme_logits():
    """Logits near ±1e308: x − max overflows to −inf, whose exp is 0 (as in numpy)."""
    logits = np.array([[1e308, -1e308, 0.0], [-1e308, -1e308, -1e308], [5.0, 5.0, -1e300]])
    _assert_same(*_both(logits, [1, 2, 0]))


@needs_numba
def test_sparse_classwise_and_no_classwise():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((20, 5000)).astype(np.float32)  # K·M ≫ N·K: sparse classwise table
    labels = rng.integers(0, 5000, 20)
    _assert_same(*_both(logits, labels, n_bins=1000))
    _assert_same(*_both(logits, labels, classwise=False))


@needs_numba
def test_thread_count_independent(monkeypatch):
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((300_000, 10)).astype(np.float32)  # several chunks
    labels = rng.integers(0, 10, 300_000)
    results = []
    for threads in ("1", "2", "5"):
        monkeypatch.setenv("CALIB_THREADS", threads)
        monkeypatch.setenv(kernels.ENGINE_ENV, "fused")
        results.append(evaluate(logits, labels).metrics)
    assert results[0] == results[1] == results[2]


def test_the_steps_after_the_pass_run_at_once_with_the_same_numbers(monkeypatch):
    """On two threads the sort, the two binnings (run_together) and KS-CE with SmoothECE (from
    TOGETHER_SAMPLES samples) run at once; on one, one after the other (the confidences sorted in
    place): every metric and bin the same bits."""
    from calibrate_cli.engine.parallel import TOGETHER_SAMPLES

    rng = np.random.default_rng(8)
    n = TOGETHER_SAMPLES + 3
    logits = (rng.standard_normal((n, 3)) * 2).astype(np.float32)
    logits[:1000] = np.round(logits[:1000])  # ties of the confidence
    labels = rng.integers(0, 3, n)
    reports = []
    for threads in ("1", "2"):
        monkeypatch.setenv("CALIB_THREADS", threads)
        reports.append(evaluate(logits, labels))
    one, two = reports
    assert one.metrics == two.metrics and "ks_ce" in one.metrics and "smooth_ece" in one.metrics
    for a, b in ((one.bins, two.bins), (one.adaptive_bins, two.adaptive_bins)):
        for field in ("count", "sum_conf", "sum_correct", "edges"):
            assert np.array_equal(getattr(a, field), getattr(b, field))


@needs_numba
def test_evaluate_metrics_agree(monkeypatch):
    rng = np.random.default_rng(6)
    logits = rng.standard_normal((50_000, 20)).astype(np.float32) * 2
    labels = rng.integers(0, 20, 50_000)
    monkeypatch.setenv(kernels.ENGINE_ENV, "numpy")
    a = evaluate(logits, labels).metrics
    monkeypatch.setenv(kernels.ENGINE_ENV, "fused")
    b = evaluate(logits, labels).metrics
    # two paths: within the numeric contract (tests/libm.py), not bits
    assert_metrics_agree(b, a)


def test_compat_mode_takes_the_numpy_engine():
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((500, 10)).astype(np.float32)
    labels = rng.integers(0, 10, 500)
    p = as_predictions(logits, labels)
    a = summarize(p, compat="focal-calibration", engine="numpy")
    engine = "fused" if kernels.fused_available() else "numpy"
    b = summarize(p, compat="focal-calibration", engine=engine)
    assert b.confidences.dtype == np.float32
    for name in ("confidences", "correct", "nll", "brier", "top5"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_engine_choice(monkeypatch):
    monkeypatch.setenv(kernels.ENGINE_ENV, "numpy")
    assert kernels.default_engine() == "numpy"
    monkeypatch.setenv(kernels.ENGINE_ENV, "gpu")
    with pytest.raises(InputError, match="CALIB_ENGINE"):
        kernels.default_engine()
    monkeypatch.delenv(kernels.ENGINE_ENV)
    assert kernels.default_engine() == ("fused" if kernels.fused_available() else "numpy")
    # by size: small inputs stay on numpy (numba's import would cost more than the pass saves; the C
    # extension's threshold is far smaller)
    monkeypatch.setattr(kernels, "HAVE_CKERNEL", False)
    assert kernels.default_engine(kernels.FUSED_MIN_VALUES - 1) == "numpy"
    assert kernels.default_engine(kernels.FUSED_MIN_VALUES) == ("fused" if kernels.HAVE_NUMBA else "numpy")
    monkeypatch.setattr(kernels, "HAVE_CKERNEL", True)
    assert kernels.default_engine(kernels.CKERNEL_MIN_VALUES - 1) == "numpy"
    assert kernels.default_engine(kernels.CKERNEL_MIN_VALUES) == "fused"
    with pytest.raises(InputError, match="engine"):
        kernels.check_engine("cuda")


def test_fused_without_numba_is_an_error(monkeypatch):
    monkeypatch.setattr(kernels, "HAVE_NUMBA", False)
    monkeypatch.setattr(kernels, "HAVE_CKERNEL", False)
    with pytest.raises(InputError, match="numba"):
        kernels.check_engine("fused")
    assert kernels.default_engine() == "numpy"


@pytest.mark.parametrize("top_label_only", [False, True])
def test_the_pass_packs_the_sort_keys_of_every_chunk(top_label_only, monkeypatch):
    """summarize(sort_keys=True): the pass's threads pack each chunk's (conf, correct), the keys
    sort_by_confidence would make; none in compat mode, or when a chunk cannot be packed."""
    from calibrate_cli.data import predictions as _predictions
    from calibrate_cli.engine import sorting
    from calibrate_cli.engine import summary as summary_module
    from calibrate_cli.data.predictions import as_predictions

    monkeypatch.setattr(_predictions, "_CHUNK_ELEMENTS", 3000)  # several chunks
    monkeypatch.setenv("CALIB_THREADS", "2")
    rng = np.random.default_rng(9)
    logits = rng.standard_normal((5000, 4)).astype(np.float32)
    labels = rng.integers(0, 4, 5000)
    data = as_predictions(logits, labels, "logits")
    s = summary_module.summarize(data, sort_keys=True, top_label_only=top_label_only)
    want = np.empty(5000, dtype=np.int64)
    sorting.pack_keys(s.confidences, s.correct, want)
    assert s.sort_keys is not None and np.array_equal(s.sort_keys, want)
    conf, correct = sorting.sort_packed(s.sort_keys)
    assert np.array_equal(conf, np.sort(s.confidences))  # numpy's sort of the values
    for value in np.unique(conf)[:50]:  # each run of equal confidences: its correct ones, incorrect first
        run = correct[conf == value]
        assert run.sum() == s.correct[s.confidences == value].sum() and np.all(np.diff(run.astype(int)) >= 0)
    assert summary_module.summarize(data, sort_keys=True, compat="focal-calibration").sort_keys is None
    monkeypatch.setattr(summary_module, "pack_checked", lambda conf, correct, out: False)
    assert summary_module.summarize(data, sort_keys=True).sort_keys is None


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_width_only_bins_each_chunk_as_it_arrives_with_the_same_bits(threads, monkeypatch):
    """summarize(top_label_only, width_only): no (N,) arrays; each chunk's confidences and correctness
    in one of threads + 1 reused buffers, binned and summed on arrival in chunk order: the equal-width
    bins and the sums in sample order are those of the full summary, bit for bit, whatever the thread
    count (many more chunks than buffers); and calib.ece etc. equal evaluate()'s."""
    from calibrate_cli.metrics import functional as metrics
    from calibrate_cli.data import predictions as _predictions

    monkeypatch.setattr(_predictions, "_CHUNK_ELEMENTS", 3000)  # 750 rows a chunk: 27 chunks
    monkeypatch.setenv("CALIB_THREADS", threads)
    rng = np.random.default_rng(12)
    logits = (3 * rng.standard_normal((20_000, 4))).astype(np.float32)
    logits[:50] = 0.0  # confidence 1/4 exactly: a tie on no edge of 15 bins, and all four classes tied
    labels = rng.integers(0, 4, 20_000)
    data = as_predictions(logits, labels, "logits")
    if not kernels.top_label_runs(logits.dtype):
        pytest.skip("top_label_only (and so width_only) runs with the C extension")
    full = summarize(data, top_label_only=True)
    lean = summarize(data, top_label_only=True, width_only=True)
    assert lean.confidences is None and lean.correct is None
    want = metrics.equal_width_bins(full.confidences, full.correct)
    assert lean.width.count.tolist() == want.count.tolist() and lean.width.n == 20_000
    assert lean.width.sum_conf.tolist() == want.sum_conf.tolist()
    assert lean.width.sum_correct.tolist() == want.sum_correct.tolist()
    want_order = metrics.order_sums(full)
    assert {k: v.tolist() for k, v in lean.in_order.items()} == {k: v.tolist() for k, v in want_order.items()}
    report = evaluate(logits, labels)
    for name in ("ece", "mce", "rms_ce", "accuracy", "error", "mean_confidence", "s99_share", "s99_accuracy"):
        assert metrics._metric(name, logits, labels, "logits") == report.metrics[name], name
    assert summarize(data, width_only=True).confidences is not None  # only with top_label_only
    assert summarize(data, top_label_only=True, width_only=True, sort_keys=True).sort_keys is not None


@pytest.mark.parametrize("n", [0, 1, 7, (1 << 18) + 3])
def test_sort_packed_takes_the_keys_apart_as_numpy_does(n, monkeypatch):
    """The C extension's unpack_keys (in two halves at once from TOGETHER_SAMPLES keys on) gives the
    arrays of numpy's shift and low-byte view: the confidences' bits and the correctness."""
    from calibrate_cli.engine import parallel
    from calibrate_cli.engine import sorting

    if not kernels.HAVE_CKERNEL:
        pytest.skip("the C extension is not built")
    monkeypatch.setenv("CALIB_THREADS", "2")
    rng = np.random.default_rng(n)
    conf = rng.uniform(0, 1, n)
    conf[: n // 3] = np.round(conf[: n // 3], 2)  # runs of ties
    if n:
        conf[0] = 1.0
    correct = rng.random(n) < 0.7
    keys = np.empty(n, dtype=np.int64)
    sorting.pack_keys(conf, correct, keys)
    assert parallel.together(n) == (n > 1 << 18)
    got = sorting.sort_packed(keys.copy())
    monkeypatch.setattr(sorting, "_ckernel", lambda: None)
    want = sorting.sort_packed(keys.copy())
    assert np.array_equal(got[0].view(np.int64), want[0].view(np.int64)) and np.array_equal(got[1], want[1])
    assert np.array_equal(got[0], np.sort(conf)) and got[1].sum() == correct.sum()


@pytest.mark.parametrize("bad", [None, np.nan, 2.0, -1e-300, np.inf])
def test_pack_checked_equals_packable_and_pack_keys(bad, monkeypatch):
    """The C extension's one-pass pack_keys: the keys of numpy's shift and or where every confidence is
    packable ([0, 2): 0.0, 1.0 and the largest double below 2 included), False where one is not."""
    from calibrate_cli.engine import sorting

    rng = np.random.default_rng(5)
    conf = rng.uniform(0, 1, 1001)
    conf[:3] = [0.0, 1.0, np.nextafter(2.0, 0.0)]
    if bad is not None:
        conf[500] = bad
    correct = rng.random(1001) < 0.5
    got = np.zeros(1001, dtype=np.int64)
    ok = sorting.pack_checked(conf, correct, got)
    assert ok == (bad is None) == sorting.packable(conf)
    if ok:
        want = np.empty(1001, dtype=np.int64)
        sorting.pack_keys(conf, correct, want)
        assert np.array_equal(got, want)
    monkeypatch.setattr(sorting, "_ckernel", lambda: None)
    assert sorting.pack_checked(conf, correct, np.zeros(1001, dtype=np.int64)) == ok
