"""calibrate_cli.ood: the AUROC of out-of-distribution detection against an independent Mann–Whitney
count (a float64 double loop in tests/naive_reference.py, and scipy.stats.mannwhitneyu)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from calibrate_cli.bootstrap import confidence_interval, resample_streams
from calibrate_cli.bootstrap.jackknife import jackknife_acceleration
from calibrate_cli.errors import InputError
from calibrate_cli.ood import _leave_one_out, auroc, ood_auroc, ood_bootstrap, ood_scores, softmax_entropy
from naive_reference import auroc_pairs, entropy, softmax_rows

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"


def naive_uncertainties(logits, temperature=1.0):
    """(entropy, −confidence) per sample, from the naive softmax and entropy loops."""
    probs = softmax_rows(np.asarray(logits, dtype=np.float64) / temperature)
    return entropy(probs), [-max(row) for row in probs]


# ------------------------------------------------------------------------------ the AUROC itself
def test_hand_computed_cases():
    # pairs (in, out): (0.1, 0.3) 1, (0.1, 0.2) 1, (0.2, 0.3) 1, (0.2, 0.2) ½ → 3.5 / 4
    assert auroc([0.1, 0.2], [0.3, 0.2]) == 0.875
    assert auroc([1.0, 2.0], [3.0, 4.0]) == 1.0  # every out sample above every in sample
    assert auroc([3.0, 4.0], [1.0, 2.0]) == 0.0
    assert auroc([5.0, 5.0, 5.0], [5.0, 5.0]) == 0.5  # all ties: ½ each
    assert auroc([0.0], [1.0]) == 1.0 and auroc([1.0], [1.0]) == 0.5  # N = 1 on both sides
    assert auroc([0.0, 2.0, 4.0], [1.0]) == 1 / 3  # one out sample, above 0 only: (1 + 0 + 0) / 3


@pytest.mark.parametrize("seed", range(6))
def test_equals_the_double_loop_exactly_with_many_ties(seed):
    rng = np.random.default_rng(seed)
    n_in, n_out = rng.integers(1, 60, 2)
    a = rng.integers(0, 6, n_in).astype(np.float64) / 4  # few distinct values: ties everywhere
    b = rng.integers(0, 8, n_out).astype(np.float64) / 4
    assert auroc(a, b) == auroc_pairs(a, b)  # exact: a count of halves over n_in · n_out


def test_single_samples_on_either_side():
    rng = np.random.default_rng(7)
    a = rng.normal(size=40)
    assert auroc(a, [0.0]) == auroc_pairs(a, [0.0])
    assert auroc([0.0], a) == auroc_pairs([0.0], a)


def test_empty_or_nan_is_an_input_error():
    with pytest.raises(InputError, match="at least one sample"):
        auroc([], [1.0])
    with pytest.raises(InputError, match="NaN"):
        auroc([np.nan], [1.0])


# ------------------------------------------------------------------------------ scores from logits
def test_entropy_by_hand():
    h = softmax_entropy(np.array([[0.5, 0.5], [1.0, 0.0], [0.25, 0.75]]))
    expected = [np.log(2), 0.0, -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))]
    np.testing.assert_allclose(h, expected, rtol=1e-15, atol=0)


def test_ood_auroc_equals_naive_loops_on_logits():
    rng = np.random.default_rng(1)
    inside = rng.normal(0, 1, (50, 4))
    inside[np.arange(50), rng.integers(0, 4, 50)] += 3.0  # confident
    outside = rng.normal(0, 1, (30, 4))  # unsure
    result = ood_auroc(inside, outside)
    (h_in, c_in), (h_out, c_out) = naive_uncertainties(inside), naive_uncertainties(outside)
    assert result.auroc_entropy == pytest.approx(auroc_pairs(h_in, h_out), abs=1e-15)
    assert result.auroc_confidence == pytest.approx(auroc_pairs(c_in, c_out), abs=1e-15)
    assert 0.8 < result.auroc_entropy <= 1.0  # the unsure set is found
    assert (result.n_in, result.n_out, result.k) == (50, 30, 4)
    assert result.mean_confidence[0] == pytest.approx(-np.mean(c_in)) and result.mean_entropy[1] == pytest.approx(
        np.mean(h_out))


def test_temperature_applied_changes_the_scores_as_softmax_of_logits_over_t():
    rng = np.random.default_rng(2)
    inside, outside = 3 * rng.normal(0, 1, (40, 5)), 3 * rng.normal(0, 1, (40, 5)) + 0.5
    (h_in, c_in), (h_out, c_out) = naive_uncertainties(inside, 2.5), naive_uncertainties(outside, 2.5)
    result = ood_auroc(inside / 2.5, outside / 2.5)
    assert result.auroc_entropy == pytest.approx(auroc_pairs(h_in, h_out), abs=1e-15)
    assert result.auroc_confidence == pytest.approx(auroc_pairs(c_in, c_out), abs=1e-15)


def test_exact_ties_between_identical_rows():
    row = np.array([[2.0, 0.0, 1.0]])
    result = ood_auroc(np.repeat(row, 3, axis=0), np.repeat(row[:, ::-1], 2, axis=0))  # a permutation: same H, conf
    assert result.auroc_entropy == 0.5 and result.auroc_confidence == 0.5


def test_binary_k2_vector_equals_two_columns_and_probs_equal_logits():
    rng = np.random.default_rng(3)
    s_in, s_out = 3 * rng.normal(size=30), rng.normal(size=20)
    one = ood_auroc(s_in, s_out)
    two = ood_auroc(np.stack([np.zeros(30), s_in], 1), np.stack([np.zeros(20), s_out], 1))
    assert one.auroc == two.auroc and one.k == 2
    p_in, p_out = 1 / (1 + np.exp(-s_in)), 1 / (1 + np.exp(-s_out))
    probs = ood_auroc(p_in, p_out, input_kind="probs")
    (h_in, c_in) = entropy(np.stack([1 - p_in, p_in], 1)), [-max(1 - p, p) for p in p_in]
    (h_out, c_out) = entropy(np.stack([1 - p_out, p_out], 1)), [-max(1 - p, p) for p in p_out]
    assert probs.auroc_entropy == pytest.approx(auroc_pairs(h_in, h_out), abs=1e-15)
    assert probs.auroc_confidence == pytest.approx(auroc_pairs(c_in, c_out), abs=1e-15)


def test_probabilities_with_zeros_have_finite_entropy():
    u = ood_scores(np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]), "probs")
    np.testing.assert_allclose(u["entropy"], [0.0, np.log(2)], rtol=1e-15)
    np.testing.assert_array_equal(u["confidence"], [-1.0, -0.5])


def test_k_mismatch_and_bad_scores_are_one_line_input_errors():
    with pytest.raises(InputError, match=r"out\.npy: K = 3 classes but in\.npy has K = 4"):
        ood_auroc(np.zeros((2, 4)), np.zeros((2, 3)), in_name="in.npy", out_name="out.npy")
    with pytest.raises(InputError, match="out.npy: scores contain NaN"):
        ood_auroc(np.zeros((2, 4)), np.full((2, 4), np.nan), out_name="out.npy")
    with pytest.raises(InputError, match="probabilities outside"):
        ood_auroc(np.full((2, 2), 0.5), np.full((2, 2), 2.0), input_kind="probs")


# ------------------------------------------------------------------------------ real logits vs scipy
@pytest.mark.parametrize("kind", ["noise", "shifted"])
def test_sample_model_against_scipy_mannwhitneyu(kind):
    logits = np.load(SAMPLE / "test_logits.npy")
    rng = np.random.default_rng(0)
    if kind == "noise":
        ood = rng.normal(0, float(logits.std()), logits.shape)
    else:
        ood = 0.3 * logits[rng.permutation(len(logits))] + rng.normal(0, 1, logits.shape)
    result = ood_auroc(logits, ood)
    p_in = np.exp(logits - logits.max(1, keepdims=True).astype(np.float64))
    p_in /= p_in.sum(1, keepdims=True)
    p_out = np.exp(ood - ood.max(1, keepdims=True))
    p_out /= p_out.sum(1, keepdims=True)
    for name, u_in, u_out in (
        ("entropy", -(p_in * np.log(np.where(p_in > 0, p_in, 1))).sum(1), -(p_out * np.log(p_out)).sum(1)),
        ("confidence", -p_in.max(1), -p_out.max(1)),
    ):
        u = mannwhitneyu(u_out, u_in, alternative="two-sided").statistic  # pairs with out > in, ties ½
        assert result.auroc[name] == pytest.approx(u / (len(u_in) * len(u_out)), abs=1e-12), name
    assert result.auroc_entropy > 0.7


# ------------------------------------------------------------------------------ the bootstrap
def _explicit_values(u_in, u_out, n_resamples, seed):
    """Each resample built explicitly: n_in from the in set, then n_out from the out set, from stream r."""
    values = []
    for stream in resample_streams(seed, n_resamples):
        rng = np.random.default_rng(stream)
        a = u_in[rng.integers(0, len(u_in), len(u_in))]
        b = u_out[rng.integers(0, len(u_out), len(u_out))]
        values.append(auroc_pairs(a, b))
    return np.array(values)


@pytest.mark.parametrize("method", ["basic", "percentile", "bca"])
def test_bootstrap_is_stratified_and_equals_explicit_resamples(method):
    rng = np.random.default_rng(4)
    pool = rng.normal(0, 1, (8, 3)) * 2  # rows drawn from a few: ties within and across the two sets
    inside, outside = pool[rng.integers(0, 5, 25)], pool[rng.integers(3, 8, 15)]
    u_in, u_out = ood_scores(inside), ood_scores(outside)
    intervals, settings = ood_bootstrap(u_in, u_out, 60, method=method, seed=5, level=0.8)
    for name in ("entropy", "confidence"):
        values = _explicit_values(u_in[name], u_out[name], 60, 5)
        point = auroc_pairs(u_in[name], u_out[name])
        accel = 0.0
        if method == "bca":
            jack = [auroc_pairs(np.delete(u_in[name], i), u_out[name]) for i in range(25)]
            jack += [auroc_pairs(u_in[name], np.delete(u_out[name], j)) for j in range(15)]
            accel = jackknife_acceleration(np.array(jack))
        expected = confidence_interval(point, values, level=0.8, method=method, acceleration=accel, bounds=(0, 1))
        got = intervals[name]
        assert got.low == pytest.approx(expected.low, abs=1e-12) and got.high == pytest.approx(expected.high, abs=1e-12)
        assert got.n_resamples == 60
    assert settings == {"n_resamples": 60, "level": 0.8, "method": method, "seed": 5, "stratified": True}


def test_leave_one_out_equals_deleting_each_sample():
    rng = np.random.default_rng(6)
    a, b = np.round(rng.normal(size=12), 1), np.round(rng.normal(size=9) + 0.5, 1)
    expected = [auroc_pairs(np.delete(a, i), b) for i in range(12)]
    expected += [auroc_pairs(a, np.delete(b, j)) for j in range(9)]
    np.testing.assert_allclose(_leave_one_out(a, b), expected, rtol=0, atol=1e-15)
    assert np.isnan(_leave_one_out(np.array([1.0]), b)[0])  # nothing left in the in set


def test_bootstrap_is_seeded_and_reproducible():
    rng = np.random.default_rng(8)
    inside, outside = rng.normal(0, 2, (40, 3)), rng.normal(0, 1, (40, 3))
    first = ood_auroc(inside, outside, bootstrap=50, seed=3)
    again = ood_auroc(inside, outside, bootstrap=50, seed=3)
    other = ood_auroc(inside, outside, bootstrap=50, seed=4)
    assert first.intervals["entropy"] == again.intervals["entropy"]
    assert first.intervals["entropy"].low != other.intervals["entropy"].low
    assert first.to_dict()["intervals"]["auroc_entropy"]["n_resamples"] == 50


def test_one_sample_per_set():
    inside, outside = np.array([[3.0, 0.0, 0.0]]), np.array([[0.5, 0.0, 0.0]])  # out less sure: both scores 1
    result = ood_auroc(inside, outside)
    assert result.auroc == {"entropy": 1.0, "confidence": 1.0} and (result.n_in, result.n_out) == (1, 1)
    boot = ood_auroc(inside, outside, bootstrap=20, ci_method="bca")
    assert boot.intervals["entropy"].low == boot.intervals["entropy"].high == 1.0  # every resample is the pair


def test_equals_the_reference_codes_roc_auc_score_convention():
    """ood_test.py of Mukhoti et al.: entropy with the OOD samples as positives; confidence with the labels
    flipped (in-distribution positive, score max_k p_k) — sklearn's roc_auc_score, ties counted ½."""
    metrics = pytest.importorskip("sklearn.metrics")
    logits = np.load(SAMPLE / "test_logits.npy")
    ood = np.load(SAMPLE / "ood_noise_logits.npy")
    result = ood_auroc(logits, ood)
    p = np.concatenate([np.asarray(softmax_rows(logits)), np.asarray(softmax_rows(ood))])
    is_ood = np.r_[np.zeros(len(logits)), np.ones(len(ood))]
    assert result.auroc_entropy == pytest.approx(metrics.roc_auc_score(is_ood, entropy(p)), abs=1e-12)
    assert result.auroc_confidence == pytest.approx(metrics.roc_auc_score(1 - is_ood, p.max(1)), abs=1e-12)
