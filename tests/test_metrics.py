"""Metrics against hand calculations, the naive float64 loop in tests/, and the edge cases of docs/metrics.md."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import calibrate_cli as calib
import naive_reference as naive
from calibrate_cli.errors import InputError
from libm import METRIC_ABS, METRIC_REL

METRICS = ("accuracy", "ece", "adaece", "classwise_ece", "mce", "nll", "brier", "mean_confidence")


def random_logits(n, k, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * scale
    logits[np.arange(n), labels] += rng.uniform(0, 4, n)  # a model that is right more often than chance
    return logits, labels


def naive_metrics(logits, labels, n_bins):
    probs = naive.softmax_rows(logits)
    share, acc99 = naive.s99(probs, labels)
    return {
        "accuracy": naive.accuracy(probs, labels),
        "ece": naive.ece(probs, labels, n_bins),
        "adaece": naive.adaece(probs, labels, n_bins),
        "classwise_ece": naive.classwise_ece(probs, labels, n_bins),
        "mce": naive.mce(probs, labels, n_bins),
        "nll": naive.nll(logits, labels),
        "brier": naive.brier(probs, labels),
        "mean_confidence": naive.mean_confidence(probs),
        "top5_accuracy": naive.top5_accuracy(probs, labels),
        "s99_share": share,
        "s99_accuracy": acc99,
    }


@pytest.mark.parametrize(("n", "k", "n_bins", "seed"), [(500, 10, 15, 0), (300, 2, 10, 1), (257, 7, 20, 2), (50, 3, 15, 3)])
def test_every_metric_equals_the_naive_float64_loop(n, k, n_bins, seed):
    logits, labels = random_logits(n, k, seed)
    report = calib.evaluate(logits, labels, n_bins=n_bins)
    expected = naive_metrics(logits, labels, n_bins)
    for name in METRICS:
        assert report.metrics[name] == pytest.approx(expected[name], abs=1e-12), name
    if k > 5:
        assert report.metrics["top5_accuracy"] == expected["top5_accuracy"]
    else:
        assert report.metrics["top5_accuracy"] is None
    assert report.metrics["s99_share"] == pytest.approx(expected["s99_share"], abs=1e-15)
    if math.isnan(expected["s99_accuracy"]):
        assert report.metrics["s99_accuracy"] is None
    else:
        assert report.metrics["s99_accuracy"] == pytest.approx(expected["s99_accuracy"], abs=1e-15)


@pytest.mark.parametrize("n", [40, 333])
def test_compat_mode_equals_the_naive_reference_code_loop(n):
    logits, labels = random_logits(n, 10, seed=n)
    labels[labels == 9] = 8  # the reference code divides classwise-ECE by max(label) + 1 = 9
    report = calib.evaluate(logits.astype(np.float32), labels, compat="focal-calibration")
    x = logits.astype(np.float32)
    assert report.metrics["ece"] == pytest.approx(naive.ece_compat(x, labels), abs=1e-7)
    assert report.metrics["adaece"] == pytest.approx(naive.adaece_compat(x, labels), abs=1e-7)
    assert report.metrics["classwise_ece"] == pytest.approx(naive.classwise_ece_compat(x, labels), abs=1e-7)
    assert report.metrics["nll"] == pytest.approx(naive.nll_compat(x, labels), abs=1e-6)
    spec = calib.evaluate(logits, labels)
    # the spec averages ECE_k over all 10 columns; the reference code over classes 0..8 only
    per_class = spec.classwise_ece_per_class
    assert spec.metrics["classwise_ece"] == pytest.approx(sum(per_class) / 10, abs=1e-15)
    assert report.metrics["classwise_ece"] == pytest.approx(sum(per_class[:9]) / 9, abs=1e-6)


def test_hand_computed_probabilities_three_samples():
    # conf = 0.9 (correct), 0.8 (wrong: label 1), 0.7 (correct), M = 10: three singleton bins
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    labels = np.array([0, 1, 1])
    m = calib.evaluate(probs, labels, input_kind="probs", n_bins=10).metrics
    assert m["accuracy"] == pytest.approx(2 / 3)
    # ECE = (|1-0.9| + |0-0.8| + |1-0.7|)/3 = 1.2/3
    assert m["ece"] == pytest.approx(0.4, abs=1e-15)
    assert m["mce"] == pytest.approx(0.8, abs=1e-15)
    # Brier = ((0.1²+0.1²) + (0.8²+0.8²) + (0.3²+0.3²))/3 = (0.02+1.28+0.18)/3
    assert m["brier"] == pytest.approx(1.48 / 3, abs=1e-15)
    assert m["nll"] == pytest.approx(-(math.log(0.9) + math.log(0.2) + math.log(0.7)) / 3, abs=1e-15)
    assert m["mean_confidence"] == pytest.approx(0.8, abs=1e-15)
    # classwise, class 0: p = 0.9 (y=1), 0.8 (y=0), 0.3 (y=0) → (0.1 + 0.8 + 0.3)/3 = 0.4
    #            class 1: p = 0.1 (y=0), 0.2 (y=1), 0.7 (y=1) → (0.1 + 0.8 + 0.3)/3 = 0.4
    assert m["classwise_ece"] == pytest.approx(0.4, abs=1e-15)
    assert m["s99_share"] == 0 and m["s99_accuracy"] is None


def test_adaece_counts_the_minimum_confidence_sample_and_compat_drops_it():
    # Four samples, M = 2, conf 0.6 (right), 0.7 (wrong), 0.8 (right), 0.9 (right).
    # Edges: interp([0, 2, 4], [0..3], sorted) = [0.6, 0.8, 0.9]: bins [0.6, 0.8] and (0.8, 0.9].
    probs = np.array([[0.6, 0.4], [0.3, 0.7], [0.8, 0.2], [0.1, 0.9]])
    labels = np.array([0, 0, 0, 1])
    # spec: bin 0 = {0.6 ✓, 0.7 ✗, 0.8 ✓}: |2 − 2.1| ; bin 1 = {0.9 ✓}: |1 − 0.9| → (0.1 + 0.1)/4
    assert calib.adaece(probs, labels, input_kind="probs", n_bins=2) == pytest.approx(0.05, abs=1e-12)
    # compat drops the 0.6 sample: bin 0 = {0.7 ✗, 0.8 ✓}: |1 − 1.5| = 0.5 → (0.5 + 0.1)/4
    compat = calib.adaece(probs.astype(np.float32), labels, input_kind="probs", n_bins=2, compat="focal-calibration")
    assert compat == pytest.approx(0.15, abs=1e-6)


def test_n_equals_one_and_fewer_samples_than_bins():
    m = calib.evaluate(np.array([[0.0, 2.0, 1.0]]), np.array([1])).metrics
    p = math.exp(2) / (1 + math.exp(2) + math.exp(1))
    assert m["accuracy"] == 1 and m["ece"] == pytest.approx(1 - p, abs=1e-15)
    assert m["adaece"] == pytest.approx(1 - p, abs=1e-15) and m["mce"] == pytest.approx(1 - p, abs=1e-15)
    report = calib.evaluate(np.array([[3.0, 0.0], [0.0, 1.0], [2.0, 2.5]]), np.array([0, 0, 1]), n_bins=15)
    assert report.bins.count.sum() == 3 and report.adaptive_bins.count.sum() == 3


def test_confidence_exactly_one_and_on_an_edge():
    probs = np.array([[1.0, 0.0], [0.2, 0.8], [0.8, 0.2]])
    labels = np.array([0, 1, 1])
    report = calib.evaluate(probs, labels, input_kind="probs", n_bins=5)
    # 1.0 → last bin (0.8, 1]; 0.8 sits on the edge of (0.6, 0.8] → bin 3 (twice)
    assert report.bins.count.tolist() == [0, 0, 0, 2, 1]
    # ECE = (|1 − 1.6| + |1 − 1|)/3 = 0.2
    assert report.metrics["ece"] == pytest.approx(0.2, abs=1e-15)


def test_argmax_ties_take_the_lowest_index():
    probs = np.array([[0.5, 0.5], [0.5, 0.5]])
    assert calib.accuracy(probs, [0, 1], input_kind="probs") == 0.5


def test_binary_scores_1d_match_two_columns():
    rng = np.random.default_rng(5)
    s = rng.normal(size=200) * 2
    y = (rng.uniform(size=200) < 1 / (1 + np.exp(-s))).astype(int)
    from_1d = calib.evaluate(s, y)
    from_2d = calib.evaluate(np.stack([np.zeros_like(s), s], axis=1), y)
    for name in METRICS:
        assert from_1d.metrics[name] == pytest.approx(from_2d.metrics[name], abs=1e-15)
    p = 1 / (1 + np.exp(-s))
    probs_1d = calib.evaluate(p, y, input_kind="probs")
    for name in METRICS:
        assert probs_1d.metrics[name] == pytest.approx(from_2d.metrics[name], abs=1e-12)
    assert from_1d.k == 2


def test_classes_absent_from_labels_still_count_in_classwise():
    logits, labels = random_logits(120, 4, seed=9)
    labels[labels == 3] = 0
    m = calib.evaluate(logits, labels).metrics
    probs = naive.softmax_rows(logits)
    assert m["classwise_ece"] == pytest.approx(naive.classwise_ece(probs, labels, 15), abs=1e-12)


def test_top5_tie_rule():
    # true class 6 ties with classes 0..5 (all 0.1): rank = #greater (0) + #tied with lower index (6) = 6 → miss
    probs = np.full((1, 10), 0.1)
    assert calib.top5_accuracy(probs, [6], input_kind="probs") == 0.0
    assert calib.top5_accuracy(probs, [4], input_kind="probs") == 1.0
    assert calib.top5_accuracy(np.eye(3)[[0]], [2], input_kind="probs") is None


def test_zero_true_probability_gives_inf_nll_and_a_warning():
    probs = np.array([[1.0, 0.0], [0.5, 0.5]])
    report = calib.evaluate(probs, [1, 0], input_kind="probs")
    assert math.isinf(report.metrics["nll"])
    assert any("NLL is inf" in w for w in report.warnings)
    # ECE unaffected: conf 1.0 wrong → |0 − 1| in the last bin; conf 0.5 (tie → class 0) right → |1 − 0.5|
    assert report.metrics["ece"] == pytest.approx((1.0 + 0.5) / 2, abs=1e-15)
    assert math.isfinite(report.metrics["brier"])


def test_one_hot_and_float_labels_are_accepted():
    logits, labels = random_logits(60, 3, seed=4)
    onehot = np.eye(3)[labels]
    a = calib.evaluate(logits, labels).metrics
    # the same path on the same scores: the labels are read as the same class indices, so equal bits
    assert calib.evaluate(logits, onehot).metrics == a
    assert calib.evaluate(logits, labels.astype(np.float32)).metrics == a


def test_nll_from_extreme_logits_needs_no_clipping():
    logits = np.array([[1000.0, -1000.0], [-1000.0, 1000.0]])
    assert calib.nll(logits, [0, 0]) == pytest.approx(1000.0, rel=1e-12)  # (0 + 2000)/2


def test_metric_functions_agree_with_evaluate():
    """The metric functions take their own passes (the top-label pass, the width-only bins, sums only):
    two paths with `evaluate`, so within the numeric contract (tests/libm.py); error and the S99 share
    are counts over N, equal."""
    logits, labels = random_logits(200, 6, seed=11)
    m = calib.evaluate(logits, labels, n_bins=12).metrics
    close = dict(rel=METRIC_REL, abs=METRIC_ABS)
    assert calib.ece(logits, labels, n_bins=12) == pytest.approx(m["ece"], **close)
    assert calib.adaece(logits, labels, n_bins=12) == pytest.approx(m["adaece"], **close)
    assert calib.classwise_ece(logits, labels, n_bins=12) == pytest.approx(m["classwise_ece"], **close)
    assert calib.mce(logits, labels, n_bins=12) == pytest.approx(m["mce"], **close)
    assert calib.nll(logits, labels) == pytest.approx(m["nll"], **close)
    assert calib.brier(logits, labels) == pytest.approx(m["brier"], **close)
    assert calib.error(logits, labels) == m["error"]
    assert calib.mean_confidence(logits, labels) == pytest.approx(m["mean_confidence"], **close)
    assert calib.s99(logits, labels)[0] == m["s99_share"]


def test_chunked_pass_equals_single_chunk(monkeypatch):
    import calibrate_cli.data.predictions as predictions

    logits, labels = random_logits(1000, 10, seed=12)
    whole = calib.evaluate(logits, labels).metrics
    monkeypatch.setattr(predictions, "_CHUNK_ELEMENTS", 70)  # 7 rows per chunk
    assert len(list(predictions.row_chunks(1000, 10))) == 143
    chunked = calib.evaluate(logits, labels).metrics
    for name in METRICS:
        assert chunked[name] == pytest.approx(whole[name], abs=1e-14)


def test_chunks_in_threads_give_identical_results(monkeypatch):
    """The chunks of the summarize pass run in a thread pool; the numbers do not depend on it."""
    import calibrate_cli.data.predictions as predictions
    import calibrate_cli.engine.summary as summary

    logits, labels = random_logits(1000, 10, seed=13)
    monkeypatch.setattr(predictions, "_CHUNK_ELEMENTS", 70)
    results = []
    for threads in (1, 2, 5):
        real = summary.map_chunks
        monkeypatch.setattr(summary, "map_chunks",
                            lambda fn, chunks, _threads=None, real=real, t=threads: real(fn, chunks, t))
        results.append(calib.evaluate(logits, labels).metrics)
        monkeypatch.setattr(summary, "map_chunks", real)
    assert results[0] == results[1] == results[2]


@pytest.mark.parametrize(
    ("scores", "labels", "kind", "message"),
    [
        (np.zeros((0, 3)), np.zeros(0, int), "logits", "N = 0"),
        (np.zeros((4, 1)), np.zeros(4, int), "logits", "K ≥ 2"),
        (np.zeros((2, 2, 2)), np.zeros(2, int), "logits", "shape"),
        (np.array([[0.0, np.nan]]), np.array([0]), "logits", "NaN"),
        (np.array([[0.0, 1.0], [np.inf, 0]]), np.array([0, 1]), "logits", "Inf"),
        (np.zeros((3, 2)), np.zeros(2, int), "logits", "2 labels"),
        (np.zeros((3, 2)), np.array([0, 1, 2]), "logits", "out of range"),
        (np.zeros((3, 2)), np.array([0, -1, 1]), "logits", "out of range"),
        (np.zeros((2, 2)), np.array([0.5, 1.0]), "logits", "whole numbers"),
        (np.array([[0.7, 0.7]]), np.array([0]), "probs", "sum to 1"),
        (np.array([[1.5, -0.5]]), np.array([0]), "probs", r"outside \[0, 1\]"),
        (np.array([0.2, 1.7]), np.array([0, 1]), "probs", r"outside \[0, 1\]"),
        (np.zeros((2, 3)), np.array([[1, 0, 0], [1, 1, 0]]), "logits", "one-hot"),
        (np.zeros((2, 3)), np.array([[1, 0], [0, 1]]), "logits", "columns"),
        (np.array([["a", "b"]]), np.array([0]), "logits", "numbers"),
    ],
)
def test_bad_input_is_a_one_line_input_error(scores, labels, kind, message):
    with pytest.raises(InputError, match=message) as info:
        calib.evaluate(scores, labels, input_kind=kind, scores_name="s.npy", labels_name="l.npy")
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(("s.npy", "l.npy"))


def test_bad_options_are_input_errors():
    logits, labels = random_logits(10, 3)
    with pytest.raises(InputError):
        calib.evaluate(logits, labels, input_kind="probabilities")
    with pytest.raises(InputError):
        calib.evaluate(logits, labels, compat="netcal")
    with pytest.raises(InputError):
        calib.evaluate(logits, labels, n_bins=0)


# ---- properties ---------------------------------------------------------------------------------

logit_arrays = st.integers(min_value=1, max_value=40).flatmap(
    lambda n: st.tuples(
        hnp.arrays(np.float64, (n, 3), elements=st.floats(-20, 20, allow_nan=False)),
        hnp.arrays(np.int64, n, elements=st.integers(0, 2)),
    )
)


@settings(max_examples=60, deadline=None)
@given(logit_arrays, st.integers(1, 20))
def test_calibration_errors_lie_in_0_1_and_counts_sum_to_n(data, n_bins):
    logits, labels = data
    report = calib.evaluate(logits, labels, n_bins=n_bins)
    for name in ("ece", "adaece", "classwise_ece", "mce"):
        assert -1e-15 <= report.metrics[name] <= 1 + 1e-15
    assert report.bins.count.sum() == len(labels)
    assert report.adaptive_bins.count.sum() == len(labels)
    assert 0 <= report.metrics["brier"] <= 2 + 1e-12


@settings(max_examples=40, deadline=None)
@given(logit_arrays, st.randoms(use_true_random=False))
def test_metrics_do_not_depend_on_sample_order(data, rnd):
    logits, labels = data
    order = list(range(len(labels)))
    rnd.shuffle(order)
    a = calib.evaluate(logits, labels).metrics
    b = calib.evaluate(logits[order], labels[order]).metrics
    for name in METRICS:
        assert a[name] == pytest.approx(b[name], abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.integers(0, 5), st.integers(1, 15))
def test_ties_in_confidence_are_order_independent(n_tied, n_other, n_bins):
    # many samples with identical confidence: equal-mass edges repeat; result must not depend on order
    probs = np.array([[0.6, 0.4]] * n_tied + [[0.2, 0.8]] * n_other)
    labels = np.array([0, 1] * ((n_tied + n_other) // 2) + [0] * ((n_tied + n_other) % 2))
    a = calib.adaece(probs, labels, input_kind="probs", n_bins=n_bins)
    b = calib.adaece(probs[::-1], labels[::-1], input_kind="probs", n_bins=n_bins)
    assert a == pytest.approx(b, abs=1e-15)
    assert a == pytest.approx(naive.adaece(probs, labels, n_bins), abs=1e-12)


def test_top5_is_invariant_to_temperature_even_when_probabilities_underflow():
    # classes 1..9 have logits −800…−808: their probabilities underflow to exactly 0 at T = 1 but
    # not at T = 100, so ranking on probabilities would tie them at T = 1 and not at T = 100.
    logits = np.array([[0.0, -808, -807, -806, -805, -804, -803, -802, -801, -800]])
    label = [1]  # rank 9 on the logits: not in the top 5 at any temperature
    assert calib.top5_accuracy(logits, label) == 0.0
    assert calib.top5_accuracy(logits / 100, label) == 0.0
    assert calib.top5_accuracy(logits, [9]) == 1.0 and calib.top5_accuracy(logits / 100, [9]) == 1.0


@pytest.mark.parametrize("input_kind", ["logits", "probs"])
def test_top_label_metrics_take_the_top_label_pass_and_equal_evaluate(input_kind, monkeypatch):
    """ECE, AdaECE, MCE, accuracy and mean confidence read the top label only: with the C extension they
    come from top_label_rows (no NLL, Brier, top-5 or classwise work): another kernel than `evaluate`'s,
    so within the numeric contract of tests/libm.py (accuracy, a count over N, equal); NLL still takes
    the full pass."""
    import calibrate_cli.engine.summary as summary_module
    from calibrate_cli.engine import kernels

    if not kernels.HAVE_CKERNEL:
        pytest.skip("the C extension is not built")
    calls = []

    def spy(*args, **kwargs):
        calls.append(1)
        return kernels.top_label_rows(*args, **kwargs)

    monkeypatch.setattr(summary_module, "top_label_rows", spy)
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((4000, 12)) * 3).astype(np.float32)
    y = rng.integers(0, 12, 4000)
    if input_kind == "probs":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        x = e / e.sum(axis=1, keepdims=True)
    report = calib.evaluate(x, y, input_kind=input_kind)
    for name in ("ece", "adaece", "mce", "accuracy", "mean_confidence"):
        calls.clear()
        value = getattr(calib, name)(x, y, input_kind=input_kind)
        assert calls, name
        if name == "accuracy":
            assert value == report.metrics[name], name
        else:
            assert value == pytest.approx(report.metrics[name], rel=METRIC_REL, abs=METRIC_ABS), name
    calls.clear()
    nll = calib.nll(x, y, input_kind=input_kind)
    assert nll == pytest.approx(report.metrics["nll"], rel=METRIC_REL, abs=METRIC_ABS)
    assert not calls
