"""BBQ (Naeini, Cooper & Hauskrecht 2015) against an independent float64 loop coded here from the
paper's formulas: equal-frequency binnings with N^{1/3}/C … C·N^{1/3} bins, Beta(N'/B·p_b, N'/B·(1 − p_b))
priors at the bins' midpoints, Bayesian model averaging; one-vs-rest and renormalised for K > 2."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from calibrate_cli import FitError, InputError
from calibrate_cli.calibrators import CALIBRATORS, fit, load_calibrator
from calibrate_cli.calibrators.bbq import BBQCalibration, bbq_bin_counts, bbq_fit


def _lgamma_terms(count, hits, size, a, c):
    """A bin's log marginal likelihood, Γ(N')/Γ(n + N') · Γ(k + α)/Γ(α) · Γ(n − k + β)/Γ(β), by lgamma."""
    return (math.lgamma(size) - math.lgamma(count + size) + math.lgamma(hits + a) - math.lgamma(a)
            + math.lgamma(count - hits + c) - math.lgamma(c))


def naive_bbq(scores, positive, x, bin_log_score=_lgamma_terms):
    """q(x) for one binary problem, by plain loops (sorted lists; each bin's log score by ``bin_log_score``)."""
    s = sorted(float(v) for v in scores)
    n = len(s)
    low = max(1, math.floor(n ** (1 / 3) / 10))
    high = max(low, min(n, math.ceil(10 * n ** (1 / 3))))
    logs, predictions = [], []
    for b_count in range(low, high + 1):
        interior = []
        for j in range(1, b_count):
            pos = j * n / b_count
            i = int(math.floor(pos))
            interior.append(s[-1] if i >= n - 1 else s[i] + (pos - i) * (s[i + 1] - s[i]))
        edges = [0.0] + interior + [1.0]

        def bin_of(v):
            return sum(1 for e in interior if e <= v)

        count, hits = [0] * b_count, [0] * b_count
        for v, yv in zip(scores, positive):
            count[bin_of(v)] += 1
            hits[bin_of(v)] += int(yv)
        size = 2.0 / b_count
        log_score, theta = 0.0, []
        for b in range(b_count):
            prior = (edges[b] + edges[b + 1]) / 2
            a, c = size * prior, size * (1 - prior)
            log_score += bin_log_score(count[b], hits[b], size, a, c)
            theta.append((hits[b] + a) / (count[b] + a + c))
        logs.append(log_score)
        predictions.append([theta[bin_of(v)] for v in x])
    top = max(logs)
    weights = [math.exp(v - top) if v > -math.inf else 0.0 for v in logs]
    total = sum(weights)
    return [sum(w * p[i] for w, p in zip(weights, predictions)) / total for i in range(len(x))]


def test_binary_map_equals_the_loop_on_random_scores():
    rng = np.random.default_rng(0)
    s = rng.beta(2, 2, 200)
    y = (rng.random(200) < s**2).astype(int)
    t, values, details = bbq_fit(s, y)
    x = np.concatenate([rng.random(50), s[:20], [0.0, 1.0]])
    got = values[np.searchsorted(t, x, side="right")]
    np.testing.assert_allclose(got, naive_bbq(s, y, x), rtol=1e-12, atol=1e-14)
    assert details["models"] == len(bbq_bin_counts(200)) == 59  # B = 1 … ⌈10·200^{1/3}⌉ = 59
    assert np.all(np.diff(t) > 0)


def test_hand_made_ties_and_a_single_model():
    # N = 4: B from max(1, ⌊4^{1/3}/10⌋) = 1 to min(4, ⌈10·4^{1/3}⌉) = 4, ties included
    s = np.array([0.2, 0.2, 0.7, 0.9])
    y = np.array([0, 1, 1, 1])
    assert list(bbq_bin_counts(4)) == [1, 2, 3, 4]
    t, values, _ = bbq_fit(s, y)
    x = np.array([0.0, 0.2, 0.5, 0.7, 0.8, 0.9, 1.0])
    np.testing.assert_allclose(values[np.searchsorted(t, x, side="right")], naive_bbq(s, y, x), rtol=1e-12)
    # one bin: (m + α)/(n + α + β) with α = β = 1 (midpoint 1/2, N' = 2): (3 + 1)/(4 + 2)
    s1 = np.array([0.5])
    t1, v1, _ = bbq_fit(s1, np.array([1]))
    assert t1.size == 0 and v1.tolist() == [pytest.approx((1 + 1) / (1 + 2))]


def test_multiclass_is_one_vs_rest_renormalised():
    rng = np.random.default_rng(3)
    n, k = 150, 3
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), labels] += 1.0
    cal = fit("bbq", logits, labels)
    test = rng.normal(0, 1.5, (40, k))
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    pt = np.exp(test - test.max(1, keepdims=True))
    pt /= pt.sum(1, keepdims=True)
    raw = np.array([naive_bbq(p[:, j], labels == j, pt[:, j]) for j in range(k)]).T
    expected = raw / raw.sum(1, keepdims=True)
    np.testing.assert_allclose(cal.predict_proba(test), expected, rtol=1e-12)
    assert cal.fit_info_.value < cal.fit_info_.at_identity  # the NLL on the fitting set improves
    # round trip through JSON, exactly
    again = load_calibrator(json.loads(json.dumps(cal.to_dict())))
    assert isinstance(again, BBQCalibration)
    np.testing.assert_array_equal(again.predict_proba(test), cal.predict_proba(test))
    assert "bbq" in CALIBRATORS


def test_binary_one_dimensional_scores():
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 2, 120)
    s = 2.0 * (labels - 0.5) + rng.normal(0, 1.5, 120)
    cal = fit("bbq", s, labels)
    q = cal.predict_proba(s)
    assert q.shape == (120, 2) and np.allclose(q.sum(1), 1.0)


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({"edges": [[0.5], [0.5]], "values": [[0.1], [0.2, 0.3]]}, "one longer"),
        ({"edges": [[0.5, 0.4], [0.5]], "values": [[0.1, 0.2, 0.3], [0.2, 0.3]]}, "increase"),
        ({"edges": [[0.5], [0.5]], "values": [[0.1, 2.0], [0.2, 0.3]]}, "probabilities"),
        ({"edges": [[0.5]], "values": [[0.1, 0.2]]}, "K ≥ 2"),
        ([1, 2], "must be an object"),
    ],
)
def test_bad_saved_parameters_are_one_line_errors(params, fragment):
    with pytest.raises(InputError, match=fragment):
        load_calibrator({"method": "bbq", "bbq": params})


# ---------------------------------------------------------------------------------------------
# Scores of exactly 0 or 1 (a random forest's probabilities, softmax of huge logits): issue #32


def _log_rising_by_product(c, a):
    """ln [a (a + 1) ⋯ (a + c − 1)] as a sum of logs (c = 0: the empty product 1; a = 0 < c: ln 0 = −∞),
    independent of the gamma function the code uses."""
    return sum(math.log(a + j) if a + j > 0 else -math.inf for j in range(int(c)))


def _product_terms(count, hits, size, a, c):
    """The same log score with the Beta terms as rising factorials: Γ(N')/Γ(n + N') = 1 / [N' (N' + 1) ⋯]."""
    return (-_log_rising_by_product(count, size) + _log_rising_by_product(hits, a)
            + _log_rising_by_product(count - hits, c))


def naive_bbq_limits(scores, positive, x):
    """naive_bbq with the Beta terms as rising factorials (well defined at α = 0 or β = 0)."""
    return naive_bbq(scores, positive, x, _product_terms)


def test_the_product_form_reference_equals_the_paper_loop_where_both_are_defined():
    rng = np.random.default_rng(7)
    s = rng.beta(2, 3, 80)
    y = (rng.random(80) < s).astype(int)
    x = np.linspace(0, 1, 23)
    np.testing.assert_allclose(naive_bbq_limits(s, y, x), naive_bbq(s, y, x), rtol=1e-10)


def test_scores_of_exactly_0_and_1_give_no_nan_and_the_limits_of_the_formulas():
    # many exact 0s (a random forest's p_k for classes no tree votes for) and exact 1s: before, bins
    # [0, 0) and [1, 1] had priors of mean 0 or 1 and gammaln(0) − gammaln(0) = NaN everywhere
    rng = np.random.default_rng(1)
    s = np.concatenate([np.zeros(120), rng.random(60), np.ones(40)])
    y = np.concatenate([rng.random(120) < 0.02, rng.random(60) < s[120:180], np.ones(40, dtype=bool)]).astype(int)
    x = np.array([0.0, 0.1, 0.5, 0.9, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning
        t, values, _ = bbq_fit(s, y)
    assert np.all(np.isfinite(values)) and np.all((values >= 0) & (values <= 1))
    got = values[np.searchsorted(t, x, side="right")]
    np.testing.assert_allclose(got, naive_bbq_limits(s, y, x), rtol=1e-10, atol=1e-15)
    assert got[0] < 0.2 and got[-1] > 0.9  # the ranking kept: low at 0, high at 1


def _forest_like(n=900, k=4, seed=2):
    """Probabilities as a random forest's: votes of 10 trees, so mostly multiples of 0.1 with exact 0s and 1s."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    votes = np.zeros((n, k))
    for _ in range(10):
        right = rng.random(n) < 0.5
        votes[np.arange(n), np.where(right, labels, rng.integers(0, k, n))] += 1
    return votes / 10, labels


def test_forest_probabilities_keep_their_accuracy():
    probs, labels = _forest_like()
    assert (probs == 0).mean() > 0.15 and (probs == 1).any()
    x = np.linspace(0, 1, 11)
    for j in range(4):  # each one-vs-rest map on these very scores (ties and all) equals the reference
        t, values, _ = bbq_fit(probs[:, j], labels == j)
        np.testing.assert_allclose(values[np.searchsorted(t, x, side="right")],
                                   naive_bbq_limits(probs[:, j], labels == j, x), rtol=1e-10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cal = fit("bbq", probs, labels, input_kind="probs")
        q = cal.predict_proba(probs)
    assert np.all(np.isfinite(q)) and np.allclose(q.sum(1), 1.0)
    before = (probs.argmax(1) == labels).mean()
    assert (q.argmax(1) == labels).mean() >= before - 0.01  # before the fix: 1/K (every row uniform)
    assert cal.fit_info_.value < cal.fit_info_.at_identity


def test_huge_decision_values_of_a_binary_model():
    # a barely regularised logistic regression's decision values: p = σ(s) is exactly 1.0 beyond s ≈ 37
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 400)
    s = np.where(labels == 1, 1, -1) * rng.gamma(1.5, 40.0, 400) + rng.normal(0, 3, 400)
    p1 = np.where(s >= 0, 1 / (1 + np.exp(-np.abs(s))), np.exp(-np.abs(s)) / (1 + np.exp(-np.abs(s))))
    assert (p1 == 1.0).sum() > 50
    x = np.array([0.0, 1e-30, 0.5, 1 - 1e-12, 1.0])
    t, values, _ = bbq_fit(p1, labels == 1)
    np.testing.assert_allclose(values[np.searchsorted(t, x, side="right")], naive_bbq_limits(p1, labels == 1, x),
                               rtol=1e-10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cal = fit("bbq", s, labels)
        q = cal.predict_proba(s)
    assert np.all(np.isfinite(q)) and np.allclose(q.sum(1), 1.0)
    assert (q.argmax(1) == labels).mean() >= ((s > 0) == labels).mean() - 0.01  # before: 37 %-like collapse


def test_every_binning_impossible_is_a_fit_error_naming_bbq_and_the_class():
    # N = 9000: every binning has B ≥ 2 bins (⌊9000^{1/3}/10⌋ = 2); 60 % of the scores are exactly 1,
    # so every last bin is [1, 1] (prior mean 1: β = 0), and one negative there is impossible for all
    s = np.concatenate([np.ones(5400), np.linspace(0.0, 0.9, 3600)])
    y = np.concatenate([np.ones(5400), np.zeros(3600)]).astype(int)
    y[0] = 0
    with pytest.raises(FitError, match="every binning gives the outcomes probability 0"):
        bbq_fit(s, y)
    probs = np.stack([1 - s, s], axis=1)
    with pytest.raises(FitError, match=r"BBQ cannot be fitted for class 1"):
        fit("bbq", probs, y, input_kind="probs")
