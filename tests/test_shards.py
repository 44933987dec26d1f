"""calibrate_cli.engine.shards: the merged summaries of shards give the numbers of the concatenated arrays.

Shards and one file are two paths: each shard is summarised on its own (the engine is chosen by the
input's size: a small shard may take another engine than the whole, or another machine's numpy with
Dask), and the merge adds the shards' sums where a single pass adds its chunks'. So they agree within
the numeric contract of tests/libm.py, not by equal bits: the per-sample values computed through
exp/log (confidence, NLL, Brier) within a few ulps each, every metric, edge and Σ confidence within
METRIC_REL (the classwise Σ p_ik is a sum of up to N such values in another order: |Δ| ≤ n · 2⁻⁵³ · Σp,
below 1e-12 relative for N ≤ 10⁴). What is a count or a flag — labels, correctness, top-5 hits, bin
counts, Σ[y = k] (whole numbers, exact in float64) — and every undefined (None) metric is equal."""

import time

import numpy as np
import pytest
from libm import METRIC_ABS, METRIC_REL, PER_VALUE, assert_agree, assert_bins_agree, assert_equal_up_to_exp

from calibrate_cli.engine.binning import SparseBinStats
from calibrate_cli.errors import InputError
from calibrate_cli.evaluate import evaluate, summarize_data
from calibrate_cli.engine.shards import evaluate_shards, merge_summaries, summarize_shards

CLASSWISE_RTOL = METRIC_REL


def _logits(n, k, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(scale=2.0, size=(n, k))
    logits[np.arange(n), labels] += 1.5
    return logits.astype(dtype), labels


def _split(scores, labels, sizes):
    bounds = np.cumsum([0, *sizes])
    assert bounds[-1] == len(labels)
    return [(scores[a:b], labels[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def assert_same_report(sharded, whole):
    assert (sharded.n, sharded.k, sharded.n_bins, sharded.compat) == (whole.n, whole.k, whole.n_bins, whole.compat)
    # two paths: every metric within the contract (None = None where undefined), not bit for bit
    assert_agree(sharded.metrics, whole.metrics)
    assert_bins_agree(sharded.bins, whole.bins)
    assert_bins_agree(sharded.adaptive_bins, whole.adaptive_bins)
    np.testing.assert_allclose(sharded.classwise_ece_per_class, whole.classwise_ece_per_class, rtol=CLASSWISE_RTOL,
                               atol=METRIC_ABS)
    assert sharded.warnings == whole.warnings


def assert_same_per_sample(merged, whole):
    """Per-sample arrays of two paths: labels, correctness and top-5 hits equal; what comes from exp/log
    within tests/libm.py's few ulps per value (Brier as tests/test_engines.py allows: the numpy engine
    adds its Σ_k in another order)."""
    for name in ("labels", "correct", "top5"):
        a, b = getattr(merged, name), getattr(whole, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    for name in ("confidences", "nll"):
        a, b = getattr(merged, name), getattr(whole, name)
        assert a.dtype == b.dtype, name
        assert_equal_up_to_exp(a, b, err_msg=name)
    assert merged.brier.dtype == whole.brier.dtype
    np.testing.assert_allclose(merged.brier, whole.brier, rtol=0, atol=whole.k * (2.0**-52 * 2.0 + 4 * PER_VALUE))


def _summary_of(scores, labels, **kw):
    return summarize_data(scores, labels, **kw).summary


@pytest.mark.parametrize("sizes", [(1000,), (1, 999), (300, 300, 400), (7, 500, 1, 492)])
def test_shards_equal_one_array(sizes):
    logits, labels = _logits(1000, 10)  # K > 5: top-5 too
    whole = evaluate(logits, labels)
    assert_same_report(evaluate_shards(_split(logits, labels, sizes)), whole)


def test_per_sample_arrays_and_classwise_cells():
    logits, labels = _logits(900, 7, seed=1, dtype=np.float32)
    whole = _summary_of(logits, labels)
    merged = summarize_shards(_split(logits, labels, (250, 250, 400))).summary
    assert_same_per_sample(merged, whole)
    np.testing.assert_array_equal(merged.classwise.count, whole.classwise.count)
    np.testing.assert_array_equal(merged.classwise.sum_correct, whole.classwise.sum_correct)
    np.testing.assert_allclose(merged.classwise.sum_conf, whole.classwise.sum_conf, rtol=CLASSWISE_RTOL)
    assert merged.classwise.n == whole.classwise.n == 900


@pytest.mark.parametrize(
    "case",
    ["probs", "compat", "binary_logits", "binary_probs", "onehot", "n_bins_7"],
)
def test_shards_equal_one_array_every_input_form(case):
    rng = np.random.default_rng(5)
    logits, labels = _logits(600, 4, seed=2)
    kw = {}
    scores = logits
    if case == "probs":
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        scores, kw = e / e.sum(axis=1, keepdims=True), {"input_kind": "probs"}
    elif case == "compat":
        kw = {"compat": "focal-calibration"}
        scores = logits.astype(np.float32)
    elif case == "binary_logits":
        scores, labels = rng.normal(size=600), rng.integers(0, 2, 600)
    elif case == "binary_probs":
        scores, labels, kw = rng.uniform(size=600), rng.integers(0, 2, 600), {"input_kind": "probs"}
    elif case == "onehot":
        labels = np.eye(4, dtype=np.int64)[labels]
    elif case == "n_bins_7":
        kw = {"n_bins": 7}
    whole = evaluate(scores, labels, **kw)
    assert_same_report(evaluate_shards(_split(scores, labels, (100, 200, 300)), **kw), whole)


def test_ties_and_confidence_one_on_equal_mass_edges():
    """Equal-mass edges come from the merged, sorted confidences: ties across shards stay exact."""
    probs = np.tile(np.array([[1.0, 0.0], [0.5, 0.5], [0.75, 0.25], [0.25, 0.75]]), (50, 1))
    labels = np.tile(np.array([0, 1, 0, 0]), 50)
    whole = evaluate(probs, labels, input_kind="probs", n_bins=10)
    sharded = evaluate_shards(_split(probs, labels, (3, 97, 100)), input_kind="probs", n_bins=10)
    assert_same_report(sharded, whole)


@pytest.mark.parametrize("n, sizes", [(600, (200, 200, 200)), (1100, (300, 300, 500))])
def test_sparse_classwise_statistics(n, sizes):
    """K·M = 2·10⁶ cells: every shard keeps sparse cells; the merge is sparse (N = 600) or dense (N = 1100)
    exactly when a single pass over the N samples would be."""
    logits, labels = _logits(n, 2000, seed=3, dtype=np.float32)
    whole_summary = _summary_of(logits, labels, n_bins=1000)
    shards = _split(logits, labels, sizes)
    assert all(isinstance(_summary_of(s, y, n_bins=1000).classwise, SparseBinStats) for s, y in shards)
    merged = summarize_shards(shards, n_bins=1000).summary
    assert type(merged.classwise) is type(whole_summary.classwise)
    np.testing.assert_array_equal(merged.classwise.count, whole_summary.classwise.count)
    np.testing.assert_array_equal(merged.classwise.sum_correct, whole_summary.classwise.sum_correct)
    np.testing.assert_allclose(merged.classwise.sum_conf, whole_summary.classwise.sum_conf, rtol=CLASSWISE_RTOL)
    assert_same_report(evaluate_shards(shards, n_bins=1000), evaluate(logits, labels, n_bins=1000))


def test_infinite_nll_warning_survives_the_merge():
    probs = np.array([[1.0, 0.0], [0.2, 0.8], [0.6, 0.4], [0.0, 1.0]])
    labels = np.array([1, 1, 0, 1])
    whole = evaluate(probs, labels, input_kind="probs")
    sharded = evaluate_shards(_split(probs, labels, (1, 3)), input_kind="probs")
    assert whole.metrics["nll"] is not None and np.isinf(whole.metrics["nll"])
    assert_same_report(sharded, whole)


def test_loader_callback_receives_each_shard_in_order():
    logits, labels = _logits(400, 3, seed=4)
    store = dict(enumerate(_split(logits, labels, (100, 100, 200))))
    seen, ticks = [], []

    def load(key):
        seen.append(key)
        return (*store[key], f"x_{key}.npy", f"y_{key}.npy")

    report = evaluate_shards([0, 1, 2], load=load, shard_progress=lambda done, total: ticks.append((done, total)))
    assert seen == [0, 1, 2] and ticks == [(1, 3), (2, 3), (3, 3)]
    assert_same_report(report, evaluate(logits, labels))


def test_bootstrap_on_shards_equals_one_array():
    logits, labels = _logits(500, 6, seed=6)
    whole = evaluate(logits, labels, bootstrap=40, seed=3)
    sharded = evaluate_shards(_split(logits, labels, (200, 300)), bootstrap=40, seed=3)
    assert sharded.bootstrap == whole.bootstrap
    assert set(sharded.intervals) == set(whole.intervals)
    for name, ci in whole.intervals.items():
        got = sharded.intervals[name].to_dict()
        for key, value in ci.to_dict().items():
            # the same draws; every float within the contract, counts and settings equal
            assert_agree(got[key], value, where=f"{name}.{key}")


def test_mismatched_pair_names_the_shard():
    logits, labels = _logits(300, 3)
    shards = [(logits[:100], labels[:100]), (logits[100:250], labels[100:], "x_1.npy", "y_1.npy")]
    with pytest.raises(InputError, match=r"^shard 2 of 2: y_1\.npy: 200 labels but x_1\.npy has 150 rows"):
        evaluate_shards(shards)


def test_merge_refuses_different_k_bins_or_compat():
    a = _summary_of(*_logits(50, 3))
    with pytest.raises(InputError, match="shard 2: K = 4 classes, but shard 1 has K = 3"):
        merge_summaries([a, _summary_of(*_logits(50, 4))])
    with pytest.raises(InputError, match="shard 2: binned with other edges"):
        merge_summaries([a, _summary_of(*_logits(50, 3), n_bins=10)])
    with pytest.raises(InputError, match="compat mode"):
        merge_summaries([a, _summary_of(*_logits(50, 3), compat="focal-calibration")])
    with pytest.raises(InputError, match="shard 2 of 2: .*K = 4"):
        evaluate_shards([_logits(50, 3), _logits(50, 4)])
    with pytest.raises(InputError, match="no shards"):
        evaluate_shards([])


def test_dask_local_cluster_equals_local():
    pytest.importorskip("distributed")
    from calibrate_cli.engine.shards import dask_client

    logits, labels = _logits(3000, 10, seed=7)
    shards = _split(logits, labels, (1000, 500, 1500))
    local = summarize_shards(shards)
    from distributed import get_task_stream

    start = time.perf_counter()
    with dask_client() as client:
        with get_task_stream(client) as stream:  # the tasks the cluster's workers ran
            remote = summarize_shards(range(3), load=shards.__getitem__, client=client)
        with pytest.raises(InputError, match="^shard 2 of 2: .*labels but"):
            summarize_shards([shards[0], (logits[:10], labels[:11])], client=client)
    print(f"dask LocalCluster: {time.perf_counter() - start:.2f} s")
    # the workers are other processes (other machines in a real cluster: another CPU's numpy), so the
    # same two paths as shards against one file
    assert_same_per_sample(remote.summary, local.summary)
    assert_bins_agree(remote.summary.classwise, local.summary.classwise)
    assert len(stream.data) == 3, stream.data  # one task per shard
