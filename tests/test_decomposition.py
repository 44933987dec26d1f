"""CORP and Murphy score decompositions (calibrate_cli.diagnostics.decomposition) against independent
float64 loops written here: a naive PAV with ties pooled, the scores by their definitions, bins by
the rule b/M < x ≤ (b+1)/M; scikit-learn's IsotonicRegression as a peer where installed."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from calibrate_cli.diagnostics import (
    classwise_corp_decomposition,
    corp_decomposition,
    decompose,
    murphy_decomposition,
    pav_recalibrate,
    top_label,
)
from calibrate_cli.errors import CalibWarning, InputError


# --- independent references ------------------------------------------------------------------------

def naive_pav(x, y):
    """PAV by hand: pool identical forecasts, then merge adjacent violating blocks (weighted means)."""
    groups = {}
    for xi, yi in zip(x, y):
        total, count = groups.get(float(xi), (0.0, 0))
        groups[float(xi)] = (total + float(yi), count + 1)
    blocks = []  # [mean, weight, [keys]]
    for key in sorted(groups):
        total, count = groups[key]
        blocks.append([total / count, count, [key]])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, k2 = blocks.pop()
            m1, w1, k1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, k1 + k2])
    value = {}
    for mean, _, keys in blocks:
        for key in keys:
            value[key] = mean
    return [value[float(xi)] for xi in x]


def score_of(x, y, score):
    if score == "brier":
        return (x - y) ** 2
    total = 0.0
    if y == 1:
        total += math.inf if x == 0 else -math.log(x)
    else:
        total += math.inf if x == 1 else -math.log(1 - x)
    return total


def naive_corp(x, y, score):
    n = len(x)
    recal = naive_pav(x, y)
    ybar = sum(float(v) for v in y) / n
    s_x = sum(score_of(float(a), float(b), score) for a, b in zip(x, y)) / n
    s_c = sum(score_of(a, float(b), score) for a, b in zip(recal, y)) / n
    s_r = sum(score_of(ybar, float(b), score) for b in y) / n
    return s_x, s_x - s_c, s_r - s_c, s_r


def naive_softmax(row):
    m = max(row)
    e = [math.exp(v - m) for v in row]
    s = sum(e)
    return [v / s for v in e]


def naive_murphy(f, o, m):
    bins = [[] for _ in range(m)]
    for fi, oi in zip(f, o):
        b = 0
        for j in range(m):
            if fi > j / m:
                b = j
        bins[b].append((float(fi), float(oi)))
    n = len(f)
    obar = sum(float(v) for v in o) / n
    rel = res = wbv = wbc = 0.0
    for members in bins:
        if not members:
            continue
        nb = len(members)
        fb = sum(a for a, _ in members) / nb
        ob = sum(b for _, b in members) / nb
        rel += nb * (fb - ob) ** 2
        res += nb * (ob - obar) ** 2
        wbv += sum((a - fb) ** 2 for a, _ in members)
        wbc += 2 * sum((a - fb) * (b - ob) for a, b in members)
    bs = sum((float(a) - float(b)) ** 2 for a, b in zip(f, o)) / n
    return bs, rel / n, res / n, obar * (1 - obar), wbv / n, wbc / n


def check_corp(d, x, y, score, rel=1e-12):
    s, mcb, dsc, unc = naive_corp(list(x), list(y), score)
    assert d.score == pytest.approx(s, rel=rel, abs=1e-15)
    assert d.miscalibration == pytest.approx(mcb, rel=1e-10, abs=1e-14)
    assert d.discrimination == pytest.approx(dsc, rel=1e-10, abs=1e-14)
    assert d.uncertainty == pytest.approx(unc, rel=rel, abs=1e-15)
    assert d.score == pytest.approx(d.miscalibration - d.discrimination + d.uncertainty, rel=1e-12, abs=1e-15)
    assert d.miscalibration >= -1e-15 and d.discrimination >= -1e-15


# --- CORP ------------------------------------------------------------------------------------------

def test_hand_computed_example():
    # sorted: 0.6→1, 0.8→{1, 0} pooled to 1/2, 0.9→1; PAV merges {1, 1/2, 1/2} into 2/3
    x, y = [0.9, 0.8, 0.8, 0.6], [1, 1, 0, 1]
    assert pav_recalibrate(x, y).tolist() == pytest.approx([1.0, 2 / 3, 2 / 3, 2 / 3], abs=1e-15)
    d = corp_decomposition(x, y)
    assert d.score == pytest.approx(0.85 / 4)
    assert d.miscalibration == pytest.approx(0.85 / 4 - 1 / 6)
    assert d.discrimination == pytest.approx(0.1875 - 1 / 6)
    assert d.uncertainty == pytest.approx(0.1875)


@pytest.mark.parametrize("score", ["brier", "log"])
def test_random_against_naive_loop(score):
    rng = np.random.default_rng(3)
    x = np.round(rng.uniform(0.05, 0.95, 400), 2)  # rounding: many ties
    y = (rng.random(400) < x ** 1.5).astype(int)
    check_corp(corp_decomposition(x, y, score), x, y, score)


def test_ties_get_one_value_and_order_does_not_matter():
    x = np.array([0.7, 0.7, 0.7, 0.3, 0.3, 0.9])
    y = np.array([1, 0, 0, 1, 1, 0])
    recal = pav_recalibrate(x, y)
    for v in (0.7, 0.3):
        assert np.unique(recal[x == v]).size == 1
    assert recal.tolist() == pytest.approx(naive_pav(x, y), abs=1e-15)
    perm = np.random.default_rng(0).permutation(6)
    for score in ("brier", "log"):
        a, b = corp_decomposition(x, y, score), corp_decomposition(x[perm], y[perm], score)
        assert a.score == pytest.approx(b.score, rel=1e-14)
        assert a.miscalibration == pytest.approx(b.miscalibration, rel=1e-12)
        check_corp(a, x, y, score)


def test_identical_forecasts_pooled_before_pav():
    # unpooled, the sorted outcomes 0, 1 violate nothing and the two 0.5s would get 0 and 1
    assert pav_recalibrate([0.5, 0.5], [0, 1]).tolist() == [0.5, 0.5]
    d = corp_decomposition([0.5, 0.5], [0, 1])
    assert d.miscalibration == 0.0 and d.discrimination == 0.0 and d.score == pytest.approx(0.25)


def test_doctests():
    import doctest

    from calibrate_cli.diagnostics import decomposition, reliability_stats

    for module in (decomposition, reliability_stats):
        assert doctest.testmod(module).failed == 0


def test_sklearn_isotonic_peer():
    isotonic = pytest.importorskip("sklearn.isotonic")
    rng = np.random.default_rng(7)
    x = np.round(rng.uniform(0, 1, 300), 2)
    y = (rng.random(300) < x).astype(float)
    peer = isotonic.IsotonicRegression(y_min=0, y_max=1).fit(x, y).predict(x)
    assert pav_recalibrate(x, y) == pytest.approx(peer, abs=1e-12)


@pytest.mark.parametrize("score", ["brier", "log"])
def test_n_equals_one(score):
    d = corp_decomposition([0.8], [1], score)
    s = 0.04 if score == "brier" else -math.log(0.8)
    assert d.score == pytest.approx(s)
    assert d.miscalibration == pytest.approx(s)  # PAV gives the outcome itself: score 0
    assert d.discrimination == 0.0 and d.uncertainty == 0.0


def test_log_score_pav_values_zero_and_one_are_finite():
    # PAV gives 0 on the lowest block and 1 on the highest: 0·log 0 = 0
    x, y = [0.2, 0.3, 0.6, 0.8], [0, 0, 1, 1]
    d = corp_decomposition(x, y, "log")
    assert math.isfinite(d.miscalibration)
    assert d.discrimination == pytest.approx(d.uncertainty)  # perfect discrimination: S̄ of x̂ = 0
    check_corp(d, x, y, "log")


def test_log_score_certain_miss_is_infinite_with_a_warning():
    with pytest.warns(CalibWarning, match="infinite"):
        d = corp_decomposition([1.0, 0.6], [0, 1], "log")
    assert d.score == math.inf and d.miscalibration == math.inf
    assert math.isfinite(d.discrimination) and math.isfinite(d.uncertainty)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        corp_decomposition([1.0, 0.6], [0, 1], "brier")  # Brier: finite, no warning


def test_bad_input():
    with pytest.raises(InputError, match="score"):
        corp_decomposition([0.5], [1], "spherical")
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        corp_decomposition([1.5], [1])
    with pytest.raises(InputError, match="0 or 1"):
        corp_decomposition([0.5], [2])
    with pytest.raises(InputError, match="N = 0"):
        corp_decomposition([], [])
    with pytest.raises(InputError, match="values"):
        corp_decomposition([0.5, 0.6], [1])


# --- top label and per class from logits / probabilities --------------------------------------------

def test_top_label_from_logits_matches_a_softmax_loop():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(50, 3)) * 3
    labels = rng.integers(0, 3, 50)
    conf, correct = top_label(z, labels)
    for i in range(50):
        p = naive_softmax(z[i].tolist())
        k = max(range(3), key=lambda j: (p[j], -j))
        assert conf[i] == pytest.approx(p[k], rel=1e-14)
        assert correct[i] == (k == labels[i])


@pytest.mark.parametrize("score", ["brier", "log"])
def test_classwise_against_loop_and_multiclass_brier(score):
    rng = np.random.default_rng(2)
    z = np.round(rng.normal(size=(200, 4)), 1)
    labels = rng.integers(0, 4, 200)
    d = classwise_corp_decomposition(z, labels, score=score)
    probs = [naive_softmax(row) for row in z.tolist()]
    sums = [0.0, 0.0, 0.0, 0.0]
    for k in range(4):
        xk = [p[k] for p in probs]
        yk = [int(v == k) for v in labels]
        check_corp(d.per_class[k], xk, yk, score)
        for j, v in enumerate(naive_corp(xk, yk, score)):
            sums[j] += v
    for got, want in zip((d.mean.score, d.mean.miscalibration, d.mean.discrimination, d.mean.uncertainty), sums):
        assert got == pytest.approx(want / 4, rel=1e-10, abs=1e-14)
    if score == "brier":  # Σ_k (p_k − [y = k])² = K × the classwise mean
        multiclass = sum(sum((p[k] - (k == y)) ** 2 for k in range(4)) for p, y in zip(probs, labels)) / 200
        assert 4 * d.mean.score == pytest.approx(multiclass, rel=1e-12)


def test_k2_and_one_d_scores():
    rng = np.random.default_rng(4)
    s = np.round(rng.normal(size=120), 1)
    labels = (rng.random(120) < 1 / (1 + np.exp(-s))).astype(int)
    one_d = decompose(s, labels)
    two_col = decompose(np.stack([np.zeros(120), s], axis=1), labels)
    p1 = 1 / (1 + np.exp(-s))
    probs_1d = decompose(p1, labels, input_kind="probs")
    for score in ("brier", "log"):
        for other in (two_col, probs_1d):
            assert one_d.top_label[score].score == pytest.approx(other.top_label[score].score, rel=1e-12)
            assert one_d.classwise[score].mean.miscalibration == pytest.approx(
                other.classwise[score].mean.miscalibration, rel=1e-9, abs=1e-14)
        # K = 2: one-vs-rest for class 1 is the forecast p(class 1) of y; class 0 mirrors it
        x1 = [1 / (1 + math.exp(-v)) for v in s.tolist()]
        check_corp(one_d.classwise[score].per_class[1], x1, labels.tolist(), score)
        # top label: conf = max(p, 1 − p), correct = [argmax = y] (class 0 on the tie p = 1/2)
        conf = [max(v, 1 - v) for v in x1]
        corr = [int((1 if v > 0.5 else 0) == y) for v, y in zip(x1, labels.tolist())]
        check_corp(one_d.top_label[score], conf, corr, score)
    want = naive_murphy(conf, corr, 15)
    got = one_d.murphy
    for g, w in zip((got.brier, got.reliability, got.resolution, got.uncertainty, got.within_bin_variance,
                     got.within_bin_covariance), want):
        assert g == pytest.approx(w, rel=1e-11, abs=1e-15)


def test_probabilities_and_logits_agree():
    rng = np.random.default_rng(5)
    z = rng.normal(size=(80, 3))
    labels = rng.integers(0, 3, 80)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    a, b = decompose(z, labels).to_dict(), decompose(p, labels, input_kind="probs").to_dict()

    def numbers(tree):
        if isinstance(tree, dict):
            return [v for key in sorted(tree) for v in numbers(tree[key])]
        if isinstance(tree, list):
            return [v for item in tree for v in numbers(item)]
        return [tree] if isinstance(tree, float) else []

    assert len(numbers(a)) == 4 * 2 * (1 + 1 + 3) + 6
    assert numbers(a) == pytest.approx(numbers(b), rel=1e-9, abs=1e-14)


def test_decompose_n_equals_one():
    d = decompose(np.array([[2.0, 0.0, -1.0]]), np.array([0]))
    assert d.top_label["brier"].uncertainty == 0.0
    assert d.murphy.resolution == 0.0 and d.murphy.within_bin_variance == 0.0
    assert d.murphy.brier == pytest.approx(d.top_label["brier"].score)


# --- Murphy ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("m", [1, 2, 10, 15])
def test_murphy_against_loop(m):
    rng = np.random.default_rng(m)
    f = np.concatenate([rng.uniform(0, 1, 300), [0.0, 1.0, 0.2, 0.2, 0.5]])  # edges, ends, ties
    o = (rng.random(f.shape[0]) < f).astype(int)
    d = murphy_decomposition(f, o, m)
    want = naive_murphy(f.tolist(), o.tolist(), m)
    got = (d.brier, d.reliability, d.resolution, d.uncertainty, d.within_bin_variance, d.within_bin_covariance)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-11, abs=1e-15)
    exact = d.reliability - d.resolution + d.uncertainty + d.within_bin_variance - d.within_bin_covariance
    assert d.brier == pytest.approx(exact, rel=1e-12, abs=1e-15)


def test_murphy_hand_computed():
    # two bins of M = 2: (0, 1/2] holds 0.2 (o = 0) and 0.4 (o = 1); (1/2, 1] holds 0.8 (o = 1)
    d = murphy_decomposition([0.2, 0.4, 0.8], [0, 1, 1], 2)
    assert d.brier == pytest.approx((0.04 + 0.36 + 0.04) / 3)
    assert d.reliability == pytest.approx((2 * (0.3 - 0.5) ** 2 + (0.8 - 1) ** 2) / 3)
    assert d.resolution == pytest.approx((2 * (0.5 - 2 / 3) ** 2 + (1 - 2 / 3) ** 2) / 3)
    assert d.uncertainty == pytest.approx(2 / 9)
    assert d.within_bin_variance == pytest.approx(0.02 / 3)
    assert d.within_bin_covariance == pytest.approx(2 * ((-0.1) * (-0.5) + 0.1 * 0.5) / 3)
