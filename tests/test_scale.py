"""The scale path of `calib eval` (issue 15): one shared sort for AdaECE / KS-CE / SmoothECE, the
summary that keeps only the sums of its NLL / Brier / top-5 columns, the piecewise binning and the
release of a memory-mapped input's pages. Expected values come from naive loops (tests/naive_*.py)
or from the previous whole-array numpy computations (np.argsort + cumsum, np.bincount, np.sum).

Equal bits are asserted only where the arithmetic guarantees them: one path in other pieces or chunks
(determinism: PairwiseSum's pieces add up to np.sum's tree, a cumsum carried across pieces is one
sequential cumsum, a summary that keeps only sums has the sums of one that keeps the columns), counts,
and sequential float64 sums of the same values in the same order, whoever adds them (numpy, the C
extension: no exp or log, each addition correctly rounded), which the chunked passes' determinism
relies on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import naive_metrics
import naive_reference
from calibrate_cli import evaluate
from calibrate_cli.engine import binning
from calibrate_cli.engine import sorting
from calibrate_cli.metrics.registry import MetricSums, WeightedSamples, metric_spec
from calibrate_cli.data.pages import mapped_file, release_rows
from calibrate_cli.data.predictions import as_predictions
from calibrate_cli.metrics.smooth_ece import smooth_ece
from calibrate_cli.engine.summary import SummaryRequest, summarize


def _ties(rng, n, k):
    """Probabilities with many exact ties, bin edges (0.4, 0.6, 2/3) and confidence 1.0."""
    choices = np.array([[0.4, 0.3, 0.3], [0.6, 0.2, 0.2], [2 / 3, 1 / 3, 0.0], [1.0, 0.0, 0.0], [0.5, 0.25, 0.25]])
    rows = choices[rng.integers(0, len(choices), n)]
    perm = np.argsort(rng.random((n, 3)), axis=1)
    probs = np.take_along_axis(rows, perm, axis=1)
    return probs[:, :k] if k == 3 else probs, rng.integers(0, 3, n)


def _old_ks(conf, correct):
    """The previous implementation: stable argsort, one cumsum, maximum at the ends of runs of ties."""
    order = np.argsort(conf, kind="stable")
    c, y = conf[order].astype(np.float64), correct[order].astype(np.float64)
    prefix = np.cumsum(c - y)
    last = np.append(c[1:] != c[:-1], True)
    return float(np.abs(prefix[last]).max(initial=0.0)) / c.shape[0]


@pytest.mark.parametrize("n", [1, 2, 7, 300])
def test_shared_sort_ks_and_adaece_equal_the_naive_loops_on_ties(n):
    rng = np.random.default_rng(n)
    probs, labels = _ties(rng, n, 3)
    m = evaluate(probs, labels, input_kind="probs").metrics
    assert m["ks_ce"] == pytest.approx(naive_metrics.ks_ce(probs, labels), abs=1e-14)
    assert m["adaece"] == pytest.approx(naive_reference.adaece(probs, labels), abs=1e-14)
    assert m["ece"] == pytest.approx(naive_reference.ece(probs, labels), abs=1e-14)


def test_binary_scores_and_k2_through_the_shared_sort():
    rng = np.random.default_rng(4)
    p = rng.choice([0.5, 0.75, 1.0, 0.2, 0.9], 200)
    labels = rng.integers(0, 2, 200)
    one_d = evaluate(p, labels, input_kind="probs").metrics
    two = np.stack([1 - p, p], axis=1)
    assert one_d["ks_ce"] == pytest.approx(naive_metrics.ks_ce(two, labels), abs=1e-14)
    assert one_d["adaece"] == pytest.approx(naive_reference.adaece(two, labels), abs=1e-14)
    logits = rng.normal(size=(500, 2))
    y = rng.integers(0, 2, 500)
    got = evaluate(logits, y).metrics
    probs = naive_reference.softmax_rows(logits)
    assert got["ks_ce"] == pytest.approx(naive_metrics.ks_ce(probs, y), abs=1e-12)


def test_sort_by_confidence_is_a_sort_and_keeps_each_pair():
    rng = np.random.default_rng(0)
    conf = rng.choice([0.1, 0.5, 0.5 + 2**-52, 1.0, 1 / 3], 1000)
    correct = rng.random(1000) < 0.5
    c, y = sorting.sort_by_confidence(conf, correct)
    assert np.array_equal(c, np.sort(conf))
    for value in np.unique(conf):  # within each run of ties the same number of correct samples
        assert y[c == value].sum() == correct[conf == value].sum()
    assert conf.dtype == np.float64 and not np.shares_memory(c, conf)
    c32, _ = sorting.sort_by_confidence(conf.astype(np.float32), correct)
    assert np.array_equal(c32, np.sort(conf.astype(np.float32)).astype(np.float64))


def test_ks_from_sorted_equals_one_cumsum_across_pieces(monkeypatch):
    rng = np.random.default_rng(1)
    conf = np.round(rng.random(5000), 2)  # many ties, runs crossing the pieces' boundaries
    correct = rng.random(5000) < conf
    whole = _old_ks(conf, correct)
    c, y = sorting.sort_by_confidence(conf, correct)
    monkeypatch.setattr(sorting, "PIECE", 7)
    pieces = sorting.ks_from_sorted(c, y)
    assert pieces == pytest.approx(whole, abs=1e-15)
    monkeypatch.setattr(sorting, "PIECE", 1 << 20)
    assert pieces == sorting.ks_from_sorted(c, y)  # exactly: the carry makes it one sequential cumsum


def test_unit_weight_ks_equals_the_weighted_path():
    rng = np.random.default_rng(2)
    conf = np.sort(np.round(rng.random(400), 1))
    correct = (rng.random(400) < 0.6).astype(np.float64)
    spec = metric_spec("ks_ce")
    base = dict(n=400, width=None, correct=np.zeros(1), conf=np.zeros(1))
    unit = spec.compute(MetricSums(**base, samples=WeightedSamples(conf, correct, None)))
    ones = spec.compute(MetricSums(**base, samples=WeightedSamples(conf, correct, np.ones((1, 400)))))
    assert unit[0] == pytest.approx(ones[0], abs=1e-15)


def test_smooth_ece_unit_spread_equals_the_matrix_spread(monkeypatch):
    """The O(N) bincount spread (weights None) against the sparse matrix (a row of ones), and
    pieces of any size give the same value."""
    import calibrate_cli.engine.sorting as s

    rng = np.random.default_rng(5)
    for n in (1, 50, 3000):
        conf = np.sort(rng.choice([0.3, 0.5, 1.0, 0.999], n) * rng.random(n) ** 0.01)
        correct = rng.random(n) < conf
        unit = smooth_ece(conf, correct)
        matrix = smooth_ece(conf, correct, np.ones((1, n)))
        assert unit[0] == pytest.approx(matrix[0], abs=1e-13)
        monkeypatch.setattr(s, "PIECE", 64)
        assert smooth_ece(conf, correct)[0] == pytest.approx(unit[0], abs=1e-13)
        monkeypatch.setattr(s, "PIECE", 1 << 20)


@pytest.mark.parametrize("n", [1, 5, 8, 128, 129, 1000, 65536, 65537, 300_001])
def test_pairwise_sum_equals_np_sum_for_any_pieces(n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n) * rng.exponential(1.0, n) ** 6
    want = np.sum(a)
    for piece in (1, 7, 1000, 65536, n):
        if n > 2000 and piece < 1000:
            continue
        acc = sorting.PairwiseSum(n)
        for i in range(0, n, piece):
            acc.add(a[i : i + piece])
        assert acc.total() == want, (n, piece)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 300_000), cuts=st.lists(st.integers(0, 300_000), max_size=8), seed=st.integers(0, 9))
def test_pairwise_pieces_made_in_any_order_add_up_to_np_sum(n, cuts, seed):
    """Pieces made out of order (as the pass's threads make them), then added in order: np.sum's bits,
    for pieces that start, end or lie inside numpy's 2^16 ranges, empty ones included."""
    a = np.random.default_rng(seed).standard_normal(n) * 1e3
    bounds = sorted({0, n, *(c for c in cuts if c <= n)})
    acc = sorting.PairwiseSum(n)
    made = {i: acc.pieces(a[lo:hi], lo) for i, (lo, hi) in reversed(list(enumerate(zip(bounds, bounds[1:]))))}
    for i in sorted(made):
        acc.add_pieces(made[i])
    assert acc.total() == np.sum(a)
    if n:
        with pytest.raises(ValueError, match="a piece at"):
            sorting.PairwiseSum(n).add_pieces(acc.pieces(a[1:], 1))


def test_pairwise_sum_refuses_a_missing_piece():
    acc = sorting.PairwiseSum(10)
    acc.add(np.ones(9))
    with pytest.raises(ValueError):
        acc.total()


@pytest.mark.parametrize("k", [2, 10])
def test_sums_only_summary_gives_the_same_metrics(k):
    rng = np.random.default_rng(k)
    logits = (rng.normal(size=(20_000, k)) * 3).astype(np.float32)
    logits[:5] = 0.0  # ties: confidence exactly 1/K
    labels = rng.integers(0, k, 20_000)
    full = evaluate(logits, labels, bootstrap=0).metrics
    predictions = as_predictions(logits, labels, "logits")
    kept = summarize(predictions)
    compact = summarize(predictions, request=SummaryRequest(columns=False))
    assert compact.nll is None and compact.brier is None and compact.top5 is None
    t = compact.totals
    assert t.nll_sum == np.sum(kept.nll) and t.brier_sum == np.sum(kept.brier) and t.nll_inf == 0
    assert t.top5_count == (None if k <= 5 else int(kept.top5.sum()))
    from calibrate_cli.metrics.functional import metrics_from_summary

    assert metrics_from_summary(kept) == metrics_from_summary(compact) == full


def test_sums_only_counts_infinite_nll_as_the_columns_do():
    probs = np.array([[1.0, 0.0], [0.3, 0.7], [0.6, 0.4]])
    labels = np.array([1, 1, 0])
    report = evaluate(probs, labels, input_kind="probs")
    assert report.metrics["nll"] == float("inf")
    assert report.warnings and "1 sample(s)" in report.warnings[0]


def test_piecewise_binning_equals_one_bincount(monkeypatch):
    rng = np.random.default_rng(6)
    conf = np.concatenate([rng.random(5000), [0.0, 1.0, 0.2, 0.4]])
    correct = rng.random(conf.shape[0]) < 0.5
    for edges, closed in ((binning.uniform_edges(15), True), (binning.equal_mass_edges(conf, 10), True),
                          (binning.torch_linspace_edges(15), False)):
        values = conf.astype(edges.dtype)
        idx = binning.assign_bins(values, edges, lowest_closed=closed)
        keep = idx >= 0
        monkeypatch.setattr(binning, "_PIECE", 333)
        got = binning.bin_statistics(values, correct, edges, lowest_closed=closed)
        assert np.array_equal(got.count, np.bincount(idx[keep], minlength=edges.shape[0] - 1))
        assert np.array_equal(got.sum_conf, np.bincount(idx[keep], weights=values[keep].astype(np.float64),
                                                        minlength=edges.shape[0] - 1))
        assert np.array_equal(got.sum_correct, np.bincount(idx[keep], weights=correct[keep].astype(np.float64),
                                                           minlength=edges.shape[0] - 1))


def test_memory_mapped_input_evaluates_the_same_and_pages_are_released(tmp_path):
    rng = np.random.default_rng(7)
    logits = rng.normal(size=(30_000, 10)).astype(np.float32)
    labels = rng.integers(0, 10, 30_000)
    path = tmp_path / "x.npy"
    np.save(path, logits)
    mapped = np.load(path, mmap_mode="r")
    assert mapped_file(mapped) is not None and mapped_file(logits) is None
    assert evaluate(mapped, labels).to_dict() == evaluate(logits, labels).to_dict()
    release_rows(logits, slice(0, 10))  # in memory: nothing to do
    release_rows(mapped, slice(0, 30_000))
    assert np.array_equal(mapped, logits)  # released pages read back from the file


_PEAK = textwrap.dedent(
    """
    import sys
    import numpy as np
    import calibrate_cli as calib
    x = np.load(sys.argv[1], mmap_mode="r")
    y = np.load(sys.argv[2])
    report = calib.evaluate(x, y)
    # VmHWM: this process's own peak (ru_maxrss would include the forking parent's resident memory)
    peak = [int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
    print(peak, report.metrics["ece"])
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_peak_memory_of_a_mapped_file_stays_below_its_size(tmp_path):
    """A 256 MB float32 file: the evaluation's peak RSS (mapped pages included) stays below the file
    (it reached the file's size plus the per-sample arrays before the pages were released)."""
    n, k = 400_000, 160
    x = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=(n, k))
    rng = np.random.default_rng(8)
    for start in range(0, n, 100_000):
        x[start : start + 100_000] = rng.standard_normal((100_000, k), dtype=np.float32)
    x.flush()
    size = os.path.getsize(tmp_path / "x.npy")
    del x
    np.save(tmp_path / "y.npy", rng.integers(0, k, n).astype(np.int32))
    env = dict(os.environ, CALIB_ENGINE="numpy", CALIB_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    peak = int(out.stdout.split()[0])
    assert peak < size, (peak, size)


@pytest.mark.parametrize("n", [1, 2, 3, 14, 15, 16, 100, 1001])
def test_equal_mass_edges_equal_np_interp_over_all_sorted_values(n):
    """The edges read from the order statistics around each position are np.interp's over all N."""
    rng = np.random.default_rng(n)
    for m in (1, 2, 15, 100, 1000):
        for v in (rng.random(n), np.round(rng.random(n), 1), rng.random(n).astype(np.float32)):
            want = np.interp(np.linspace(0, n, m + 1), np.arange(n), np.sort(v))
            assert np.array_equal(binning.equal_mass_edges(v, m), want), (n, m)
            assert np.array_equal(binning.equal_mass_edges(v, m, sorted_values=np.sort(v).astype(np.float64)), want)
