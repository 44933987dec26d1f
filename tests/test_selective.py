"""Selective prediction (calibrate_cli.diagnostics.selective) against hand values and naive float64
loops written here from the definitions (Geifman & El-Yaniv 2017; Traub et al. 2024's fd-shifts
``RiskCoverageStats``: one point per distinct confidence, trapezoids, the first point's selective
risk held down to coverage 0, the generalized risk starting at (0, 0))."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from calibrate_cli.diagnostics.selective import (
    aurc,
    augrc,
    confidence_and_correct,
    coverage_at_risk,
    e_aurc,
    risk_at_coverage,
    risk_coverage,
    selective_report,
)
from calibrate_cli.errors import InputError


# ------------------------------------------------------------------ naive loops (independent)
def naive_points(conf, correct):
    """fd-shifts' loop: ascending confidence, drop one sample at a time, a point where the confidence
    changes; returns (coverages, selective risks, generalized risks) by decreasing coverage."""
    n = len(conf)
    idx = sorted(range(n), key=lambda i: conf[i])
    residual = [0.0 if correct[i] else 1.0 for i in idx]
    c = [float(conf[i]) for i in idx]
    error_sum = sum(residual)
    cov = n
    covs, risks, grisks = [1.0], [error_sum / n], [error_sum / n]
    for i in range(n - 1):
        cov -= 1
        error_sum -= residual[i]
        if c[i] != c[i + 1]:
            covs.append(cov / n)
            risks.append(error_sum / cov)
            grisks.append(error_sum / n)
    return covs, risks, grisks


def naive_trapezoid(xs, ys):
    total = 0.0
    for i in range(len(xs) - 1):
        total += (xs[i] - xs[i + 1]) * (ys[i] + ys[i + 1]) / 2.0
    return total


def naive_aurc(conf, correct):
    covs, risks, _ = naive_points(conf, correct)
    return naive_trapezoid(covs + [0.0], risks + [risks[-1]])


def naive_augrc(conf, correct):
    covs, _, grisks = naive_points(conf, correct)
    return naive_trapezoid(covs + [0.0], grisks + [0.0])


def naive_optimal_aurc(n, errors):
    """AURC of a perfect ranking: n − errors correct ones first, all confidences distinct."""
    conf = [float(n - i) for i in range(n)]
    correct = [i < n - errors for i in range(n)]
    return naive_aurc(conf, correct)


def data(seed, n, k=5, decimals=None):
    rng = np.random.default_rng(seed)
    conf = rng.uniform(1.0 / k, 1.0, n)
    if decimals is not None:
        conf = np.round(conf, decimals)  # ties
    correct = rng.uniform(size=n) < conf
    return conf, correct


# ------------------------------------------------------------------ hand-computed
def test_hand_example_with_a_tie():
    conf, correct = [0.9, 0.8, 0.8, 0.6], [True, True, False, False]
    curve = risk_coverage(conf, correct)
    assert curve.threshold.tolist() == [0.9, 0.8, 0.6]
    assert curve.accepted.tolist() == [1, 3, 4] and curve.errors.tolist() == [0, 1, 2]
    assert curve.coverage.tolist() == [0.25, 0.75, 1.0]
    assert curve.risk.tolist() == pytest.approx([0.0, 1 / 3, 0.5], abs=0)
    # AURC: [0, 1/4] at risk 0; (1/4, 3/4] trapezoid 0 → 1/3; (3/4, 1] 1/3 → 1/2
    assert aurc(conf, correct) == pytest.approx(0.5 * (1 / 3) / 2 + 0.25 * (1 / 3 + 1 / 2) / 2, abs=1e-15)
    # AUGRC: (0,0) → (1/4, 0) → (3/4, 1/4) → (1, 1/2)
    assert augrc(conf, correct) == pytest.approx(0.5 * 0.25 / 2 + 0.25 * 0.75 / 2, abs=1e-15)
    # optimal: points (i/4, max(0, i − 2)/i) = 0, 0, 1/3, 1/2 → 0.25·(1/3)/2 + 0.25·(5/6)/2
    assert e_aurc(conf, correct) == pytest.approx(0.1875 - (1 / 24 + 5 / 48), abs=1e-15)


def test_n_equal_one():
    for ok in (True, False):
        curve = risk_coverage([0.7], [ok])
        assert curve.coverage.tolist() == [1.0]
        assert aurc([0.7], [ok]) == (0.0 if ok else 1.0)
        assert augrc([0.7], [ok]) == (0.0 if ok else 0.5)
        assert e_aurc([0.7], [ok]) == 0.0
        assert risk_at_coverage([0.7], [ok], coverage=0.5).coverage == 1.0


def test_all_tied_is_one_point():
    conf, correct = [0.5] * 4, [True, False, False, True]
    curve = risk_coverage(conf, correct)
    assert curve.coverage.tolist() == [1.0] and curve.risk.tolist() == [0.5]
    assert aurc(conf, correct) == 0.5      # flat: nothing can be rejected alone
    assert augrc(conf, correct) == 0.25    # a straight line from (0, 0) to (1, 1/2)
    # a perfect ranking, points (i/4: 0, 0, 1/3, 1/2), lies below the plateau
    assert e_aurc(conf, correct) == pytest.approx(0.5 - naive_optimal_aurc(4, 2), abs=1e-15)


def test_perfect_ranking_has_zero_excess():
    conf = np.linspace(1, 0.1, 50)
    correct = np.arange(50) < 37
    assert e_aurc(conf, correct) == pytest.approx(0.0, abs=1e-15)
    assert aurc(conf, correct) == pytest.approx(naive_optimal_aurc(50, 13), abs=1e-15)


def test_worst_ranking_errors_first():
    conf = np.linspace(1, 0.1, 10)
    correct = np.arange(10) >= 3  # the 3 most confident are wrong
    curve = risk_coverage(conf, correct)
    assert curve.risk[:3].tolist() == [1.0, 1.0, 1.0]
    assert e_aurc(conf, correct) > 0.4


# ------------------------------------------------------------------ against the naive loops
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("decimals", [None, 2, 1])
@pytest.mark.parametrize("n", [1, 2, 7, 300])
def test_areas_equal_the_naive_loop(seed, decimals, n):
    conf, correct = data(seed, n, decimals=decimals)
    assert aurc(conf, correct) == pytest.approx(naive_aurc(conf, correct), abs=1e-12)
    assert augrc(conf, correct) == pytest.approx(naive_augrc(conf, correct), abs=1e-12)
    expected = naive_aurc(conf, correct) - naive_optimal_aurc(n, int((~correct).sum()))
    assert e_aurc(conf, correct) == pytest.approx(expected, abs=1e-12)
    covs, risks, grisks = naive_points(conf, correct)
    curve = risk_coverage(conf, correct)
    assert curve.coverage.tolist() == pytest.approx(covs[::-1], abs=1e-15)
    assert curve.risk.tolist() == pytest.approx(risks[::-1], abs=1e-15)
    assert curve.generalized_risk.tolist() == pytest.approx(grisks[::-1], abs=1e-15)


def test_augrc_of_a_tie_is_the_mean_over_its_orders():
    """The straight line across a plateau = the mean, over every order of the tied samples, of the
    curve that accepts them one at a time (brute force over the 4! orders)."""
    conf = [0.9, 0.7, 0.7, 0.7, 0.7, 0.2]
    correct = [True, True, False, True, False, False]
    areas = []
    for order in itertools.permutations(range(1, 5)):
        distinct = list(conf)
        for rank, i in enumerate(order):
            distinct[i] = 0.7 - 0.01 * rank  # break the tie in this order
        areas.append(naive_augrc(distinct, correct))
    assert augrc(conf, correct) == pytest.approx(sum(areas) / len(areas), abs=1e-15)


def test_sample_order_does_not_matter():
    conf, correct = data(3, 200, decimals=2)
    perm = np.random.default_rng(0).permutation(200)
    for f in (aurc, augrc, e_aurc):
        assert f(conf[perm], correct[perm]) == f(conf, correct)


# ------------------------------------------------------------------ working points
def naive_risk_at_coverage(conf, correct, target):
    """Smallest achievable coverage ≥ target, from the points."""
    covs, risks, _ = naive_points(conf, correct)
    best = None
    for c, r in zip(covs, risks):
        if c >= target and (best is None or c < best[0]):
            best = (c, r)
    return best


def naive_coverage_at_risk(conf, correct, target):
    covs, risks, _ = naive_points(conf, correct)
    best = (0.0, None)
    for c, r in zip(covs, risks):
        if r <= target and c > best[0]:
            best = (c, r)
    return best


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("decimals", [None, 1])
def test_working_points_equal_the_naive_loop(seed, decimals):
    conf, correct = data(seed, 120, decimals=decimals)
    for target in (0.0, 0.1, 0.5, 0.8, 0.9, 0.95, 1.0):
        point = risk_at_coverage(conf, correct, coverage=target)
        assert (point.coverage, point.risk) == pytest.approx(naive_risk_at_coverage(conf, correct, target), abs=1e-15)
    for target in (0.0, 0.01, 0.05, 0.1, 0.3, 1.0):
        point = coverage_at_risk(conf, correct, risk=target)
        cov, risk = naive_coverage_at_risk(conf, correct, target)
        assert point.coverage == cov
        assert point.risk == (None if risk is None else pytest.approx(risk, abs=1e-15))


def test_working_points_by_hand():
    conf = [0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    correct = [True, True, True, True, True, True, True, True, False, False]
    # 0.9 of N = 10 is 9 samples exactly (not 10 through 0.9 · 10 in floating point)
    point = risk_at_coverage(conf, correct, coverage=0.9)
    assert (point.accepted, point.threshold, point.risk) == (9, 0.3, pytest.approx(1 / 9))
    point = coverage_at_risk(conf, correct, risk=0.1)  # 1/9 > 0.1: 8 samples
    assert (point.accepted, point.coverage, point.risk) == (8, 0.8, 0.0)
    assert coverage_at_risk(conf, correct, risk=0.2).accepted == 10  # 2/10 ≤ 0.2 exactly
    nothing = coverage_at_risk([0.9, 0.8], [False, True], risk=0.1)
    assert (nothing.coverage, nothing.threshold, nothing.risk, nothing.accepted) == (0.0, None, None, 0)


# ------------------------------------------------------------------ from scores
def test_confidence_and_correct_from_logits_probs_and_binary_scores():
    logits = np.array([[2.0, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 1.0, 0.0]])
    conf, ok = confidence_and_correct(logits, [0, 1, 0])
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    assert conf == pytest.approx((e / e.sum(axis=1, keepdims=True)).max(axis=1), abs=1e-15)
    assert ok.tolist() == [True, False, True]  # tie in row 3: lowest index
    conf, ok = confidence_and_correct(np.array([0.3, 0.8]), [1, 1], "probs")  # p(class 1)
    assert conf.tolist() == pytest.approx([0.7, 0.8]) and ok.tolist() == [False, True]
    conf, ok = confidence_and_correct(np.array([0.0, 2.0]), [0, 1], "logits")  # log-odds
    assert conf.tolist() == pytest.approx([0.5, 1 / (1 + math.exp(-2))]) and ok.tolist() == [True, True]


def test_report_holds_every_quantity():
    conf, correct = data(1, 500, decimals=2)
    report = selective_report(conf, correct, coverages=(0.5, 0.9), risks=(0.05,))
    assert report.aurc == aurc(conf, correct) and report.augrc == augrc(conf, correct)
    assert report.e_aurc == e_aurc(conf, correct)
    assert report.error == pytest.approx(1 - correct.mean())
    d = report.to_dict()
    assert set(d["risk_at_coverage"]) == {"0.5", "0.9"} and set(d["coverage_at_risk"]) == {"0.05"}
    assert "curve" not in d and len(report.to_dict(curve=True)["curve"]["coverage"]) == report.curve.coverage.size


@pytest.mark.parametrize(
    "conf, correct",
    [([], []), ([0.5, np.nan], [True, False]), ([0.5], [True, False]), ([[0.5]], [[True]]), ([0.5], [2])],
)
def test_bad_input_is_refused(conf, correct):
    with pytest.raises(InputError):
        aurc(conf, correct)


def test_bad_levels_are_refused():
    with pytest.raises(InputError, match="coverage"):
        risk_at_coverage([0.5], [True], coverage=1.5)
    with pytest.raises(InputError, match="risk"):
        coverage_at_risk([0.5], [True], risk=-0.1)


def test_properties_on_random_data():
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    @hypothesis.settings(max_examples=150, deadline=None)
    @hypothesis.given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=40))
    def check(pairs):
        conf = np.array([c / 5 for c, _ in pairs])
        correct = np.array([ok for _, ok in pairs])
        a, g = aurc(conf, correct), augrc(conf, correct)
        assert 0.0 <= g <= a + 1e-15 <= 1.0 + 1e-15  # generalized risk = selective risk × coverage
        assert a == pytest.approx(naive_aurc(conf, correct), abs=1e-12)
        assert g == pytest.approx(naive_augrc(conf, correct), abs=1e-12)
        curve = risk_coverage(conf, correct)
        assert curve.accepted[-1] == len(pairs) and np.all(np.diff(curve.coverage) > 0)

    check()
