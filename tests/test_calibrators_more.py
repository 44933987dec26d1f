"""The calibrators of issue 16: histogram binning, isotonic, beta, matrix/Dirichlet (ODIR), ensemble TS.

Each fitted map is checked against an independent fit coded here (plain float64 loops), and every
method round-trips through its JSON exactly."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from calibrate_cli import InputError, evaluate
from calibrate_cli.calibrators import CALIBRATORS, fit, load_calibrator
from calibrate_cli.calibrators.ensemble import EnsembleTemperatureScaling
from calibrate_cli.calibrators.histogram import EqualMassHistogramBinning, HistogramBinning
from calibrate_cli.calibrators.isotonic import IsotonicCalibration
from calibrate_cli.calibrators.matrix import DirichletCalibration, MatrixScaling, odir_objective

NEW = ("histogram", "histogram_mass", "isotonic", "beta", "matrix", "dirichlet", "ensemble_ts")


def synthetic(n=400, k=4, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), labels] += 1.5
    return scale * logits, labels


def binary(n=500, seed=4):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    return 3 * (labels - 0.5) + rng.normal(0, 1.5, n), labels


def naive_softmax(z):
    out = []
    for row in np.atleast_2d(z):
        m = max(row)
        e = [math.exp(v - m) for v in row]
        out.append([v / sum(e) for v in e])
    return out


# ---------------------------------------------------------------------------------------------
# Independent references


def pav(y, w):
    """Pool adjacent violators, the textbook loop: blocks of (mean, weight, size), merged while a
    block's mean is above the next one's."""
    blocks = []
    for value, weight in zip(y, w):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    out = []
    for mean, _, size in blocks:
        out += [mean] * size
    return out


def naive_isotonic_at_points(p, target):
    """g(p_i) for each fitting point: tied p pooled (mean, count), then PAV in order of p."""
    order = sorted(set(p))
    means = [sum(t for q, t in zip(p, target) if q == x) / sum(1 for q in p if q == x) for x in order]
    counts = [sum(1 for q in p if q == x) for x in order]
    fitted = dict(zip(order, pav(means, counts)))
    return [fitted[q] for q in p]


# ---------------------------------------------------------------------------------------------
# Isotonic


def test_isotonic_equals_a_pav_loop_at_every_fitting_point():
    logits, labels = synthetic(n=300, k=3, seed=1)
    logits = np.round(logits, 1)  # ties in p_k
    cal = IsotonicCalibration().fit(logits, labels)
    probs = naive_softmax(logits)
    raw = np.empty((300, 3))
    for k in range(3):
        raw[:, k] = naive_isotonic_at_points([row[k] for row in probs], [float(y == k) for y in labels])
    totals = raw.sum(axis=1, keepdims=True)
    expected = np.where(totals > 0, raw / np.where(totals > 0, totals, 1), 1 / 3)
    assert np.allclose(cal.predict_proba(logits), expected, atol=1e-12)


def test_isotonic_by_hand_interpolates_and_clips():
    z = np.log(np.array([[0.9, 0.1], [0.7, 0.3], [0.6, 0.4], [0.2, 0.8]]))
    cal = IsotonicCalibration().fit(z, [0, 1, 0, 1])
    # class 0 in order of p_0 = 0.2, 0.6, 0.7, 0.9: labels 1, 0, 1, 0 → targets 0, 1, 0, 1 → PAV 0, ½, ½, 1
    assert cal.y_[0].tolist() == [0.0, 0.5, 0.5, 1.0] and cal.x_[0].tolist() == pytest.approx([0.2, 0.6, 0.7, 0.9])
    q = np.interp([0.1, 0.4, 0.8, 0.95], cal.x_[0], cal.y_[0])
    assert q.tolist() == pytest.approx([0.0, 0.25, 0.75, 1.0])


# ---------------------------------------------------------------------------------------------
# Histogram binning


def test_histogram_binning_by_hand():
    # p_0 = 0.9, 0.8, 0.3, 0.4 (×3); 2 equal-width bins (0, 0.5], (0.5, 1]
    z = np.log(np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6]] * 3))
    labels = [0, 1, 1, 1] * 3
    cal = HistogramBinning(n_bins=2).fit(z, labels)
    # class 0: bin 0 holds p_0 = 0.3, 0.4 (labels 1, 1) → 0; bin 1 holds 0.9, 0.8 (labels 0, 1) → 1/2
    # class 1: bin 0 holds p_1 = 0.1, 0.2 (labels 0, 1) → 1/2; bin 1 holds 0.7, 0.6 (labels 1, 1) → 1
    assert cal.values_.tolist() == [[0.0, 0.5], [0.5, 1.0]]
    q = cal.predict_proba(np.log(np.array([[0.9, 0.1], [0.5, 0.5], [0.2, 0.8]])))
    # row 0: (1/2, 1/2); row 1: p = 0.5 is in bin 0 for both: (0, 1/2) → (0, 1); row 2: (0, 1)
    assert q.tolist() == [[0.5, 0.5], [0.0, 1.0], [0.0, 1.0]]


def test_histogram_mass_by_hand():
    p0 = np.array([0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9] * 2)
    z = np.log(np.stack([p0, 1 - p0], axis=1))
    labels = np.array([1, 1, 0, 1, 0, 0, 1, 0] * 2)
    cal = EqualMassHistogramBinning(n_bins=2).fit(z, labels)
    # class 0: median edge 0.5 (linear quantile of the 16 values); bin 0 (≤ 0.5): labels 1,1,0,1 → 1/4 class 0
    assert cal.edges_[0].tolist() == pytest.approx([0.5])
    assert cal.values_[0].tolist() == pytest.approx([0.25, 0.75])


def test_histogram_needs_samples_per_bin():
    logits, labels = synthetic(n=40, k=3)
    with pytest.raises(InputError, match="needs at least 75 fitting samples"):
        HistogramBinning(n_bins=15).fit(logits, labels)
    with pytest.raises(InputError, match="histogram binning with 15 bins"):
        fit("histogram_mass", logits, labels)


# ---------------------------------------------------------------------------------------------
# Matrix scaling and Dirichlet calibration (ODIR)


def naive_odir(x, labels, w, b, lam, mu):
    """The ODIR objective by plain loops."""
    n, k = len(x), len(b)
    total = 0.0
    for row, y in zip(x, labels):
        s = [sum(w[j][l] * row[l] for l in range(k)) + b[j] for j in range(k)]
        m = max(s)
        total += m + math.log(sum(math.exp(v - m) for v in s)) - s[y]
    off = sum(w[j][l] ** 2 for j in range(k) for l in range(k) if j != l)
    return total / n + lam / (k * (k - 1)) * off + mu / k * sum(v * v for v in b)


def test_odir_objective_and_gradient_against_loops_and_finite_differences():
    rng = np.random.default_rng(7)
    x, labels = synthetic(n=50, k=3, seed=2)
    w, b = rng.normal(size=(3, 3)), rng.normal(size=3)
    value, dw, db = odir_objective(x, labels, w, b, 0.3, 0.2)
    assert value == pytest.approx(naive_odir(x.tolist(), labels, w.tolist(), b.tolist(), 0.3, 0.2), rel=1e-12)
    h = 1e-6
    for j in range(3):
        for l in range(3):
            e = np.zeros((3, 3))
            e[j, l] = h
            fd = (naive_odir(x, labels, w + e, b, 0.3, 0.2) - naive_odir(x, labels, w - e, b, 0.3, 0.2)) / (2 * h)
            assert dw[j, l] == pytest.approx(fd, abs=1e-7)
        e = np.zeros(3)
        e[j] = h
        fd = (naive_odir(x, labels, w, b + e, 0.3, 0.2) - naive_odir(x, labels, w, b - e, 0.3, 0.2)) / (2 * h)
        assert db[j] == pytest.approx(fd, abs=1e-7)


@pytest.mark.parametrize("cls", [MatrixScaling, DirichletCalibration])
def test_matrix_fits_reach_a_stationary_point_below_the_identity(cls):
    logits, labels = synthetic(n=300, k=3, seed=3)
    cal = cls(odir_lambda=0.05).fit(logits, labels)
    x = logits if cls is MatrixScaling else np.log(np.array(naive_softmax(logits)))
    value, dw, db = odir_objective(x, labels, cal.w_, cal.b_, 0.05, 0.05)
    assert max(np.abs(dw).max(), np.abs(db).max()) < 1e-5
    assert value == pytest.approx(cal.fit_info_.value, rel=1e-12)
    assert cal.fit_info_.value < cal.fit_info_.at_identity
    # the identity map is W = I, b = 0 for Dirichlet (softmax(log p) = p)
    if cls is DirichletCalibration:
        identity = cls.identity(3)
        assert np.allclose(identity.predict_proba(logits), naive_softmax(logits), atol=1e-14)


def test_matrix_refuses_negative_odir():
    with pytest.raises(InputError, match="ODIR weights must be ≥ 0"):
        MatrixScaling(odir_lambda=-1.0)


# ---------------------------------------------------------------------------------------------
# Ensemble temperature scaling


def test_ensemble_ts_weights_on_the_simplex_and_argmax_kept():
    logits, labels = synthetic(n=500, k=5, seed=5, scale=4.0)
    cal = EnsembleTemperatureScaling().fit(logits, labels)
    w = cal.weights_
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0, abs=1e-12) and w[:2].sum() > 0
    q = cal.predict_proba(logits)
    assert np.array_equal(q.argmax(axis=1), logits.argmax(axis=1))
    assert np.allclose(q.sum(axis=1), 1.0, atol=1e-12)
    # the mixture by hand, and never worse than its temperature alone
    t = cal.temperature_
    expected = [[w[0] * a + w[1] * b + w[2] / 5 for a, b in zip(ra, rb)]
                for ra, rb in zip(naive_softmax(logits / t), naive_softmax(logits))]
    assert np.allclose(q, expected, atol=1e-14)
    ts = fit("temperature", logits, labels, search="nll")
    # two paths (numpy's exp on one, the C library's on the other: tests/libm.py): the same T to within
    # what a few ulps per exp move the NLL's root
    assert cal.temperature_ == pytest.approx(ts.temperature, rel=1e-12)
    nll_ts = -np.mean(np.log(np.array(naive_softmax(logits / t))[np.arange(500), labels]))
    assert cal.fit_info_.value <= nll_ts + 1e-12


def test_ensemble_ts_weights_are_optimal_on_the_simplex():
    logits, labels = synthetic(n=400, k=4, seed=6, scale=5.0)
    cal = EnsembleTemperatureScaling().fit(logits, labels)

    def nll(w):
        return -np.mean(np.log(EnsembleTemperatureScaling(cal.temperature_, w).predict_proba(logits)[np.arange(400), labels]))

    best = nll(cal.weights_)
    grid = [(a / 20, b / 20, (20 - a - b) / 20) for a in range(21) for b in range(21 - a)]
    assert best <= min(nll(np.array(g)) for g in grid) + 1e-9


# ---------------------------------------------------------------------------------------------
# Beta calibration


def naive_beta_nll(s, labels, a, b, c):
    total = 0.0
    for v, y in zip(s, labels):
        p = 1 / (1 + math.exp(-v))
        m = a * math.log(p) - b * math.log(1 - p) + c
        q = 1 / (1 + math.exp(-m))
        total -= math.log(q if y == 1 else 1 - q)
    return total / len(s)


def test_beta_calibration_is_the_nll_optimum():
    s, labels = binary()
    s = 0.6 * s + 0.1 * s**2 / 3  # a miscalibration that is not a sigmoid of s
    cal = fit("beta", s, labels)
    a, b, c = cal.a_, cal.b_, cal.c_
    best = naive_beta_nll(s, labels, a, b, c)
    assert best == pytest.approx(cal.fit_info_.value, rel=1e-10)
    for da, db, dc in [(1e-3, 0, 0), (-1e-3, 0, 0), (0, 1e-3, 0), (0, -1e-3, 0), (0, 0, 1e-3), (0, 0, -1e-3)]:
        if a + da >= 0 and b + db >= 0:
            assert naive_beta_nll(s, labels, a + da, b + db, c + dc) >= best - 1e-12
    assert cal.fit_info_.value < cal.fit_info_.at_identity
    assert naive_beta_nll(s, labels, 1, 1, 0) == pytest.approx(cal.fit_info_.at_identity, rel=1e-12)


def test_beta_refuses_more_than_two_classes():
    logits, labels = synthetic(k=3)
    with pytest.raises(InputError, match="beta calibration is for binary problems .* got K = 3"):
        fit("beta", logits, labels)


# ---------------------------------------------------------------------------------------------
# Every method: JSON round trip, kinds


def _data_for(method):
    return binary() if method == "beta" else synthetic(n=400, k=4)


@pytest.mark.parametrize("method", NEW)
def test_round_trip_through_json_is_bit_identical(method, tmp_path):
    scores, labels = _data_for(method)
    cal = fit(method, scores, labels)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cal.to_dict()))
    loaded = load_calibrator(str(path))
    assert type(loaded) is type(cal) and loaded.k == cal.k
    test, _ = _data_for(method)
    test = test + 0.37
    assert np.array_equal(loaded.predict_proba(test), cal.predict_proba(test))
    kind = cal.result_kind("logits")
    out = loaded.apply(test, "logits")
    assert np.array_equal(out, cal.apply(test, "logits"))
    assert kind == ("probs" if cal.output_kind == "probs" else "logits")
    evaluate(out, _data_for(method)[1], input_kind=kind)  # a valid input of its kind (no −inf logits)


@pytest.mark.parametrize("method", ["histogram", "isotonic", "ensemble_ts"])
def test_probability_methods_apply_to_probabilities_and_give_probabilities(method):
    logits, labels = synthetic()
    cal = fit(method, logits, labels)
    probs = np.array(naive_softmax(logits))
    from_probs = cal.apply(probs, "probs")
    assert cal.result_kind("probs") == "probs"
    assert np.allclose(from_probs, cal.predict_proba(logits), atol=1e-12)


@pytest.mark.parametrize(
    "document, message",
    [
        ({"method": "histogram", "k": 2, "histogram": {"edges": [[0.5], [0.5]], "values": [[0.1, 2.0], [0.0, 1.0]]}},
         "values must be probabilities"),
        ({"method": "isotonic", "isotonic": {"x": [[0.2, 0.1], [0.1, 0.2]], "y": [[0, 1], [0, 1]]}}, "each row of x must increase"),
        ({"method": "ensemble_ts", "ensemble_ts": {"temperature": 1.5, "weights": [0.5, 0.6, 0.0]}}, "summing to 1"),
        ({"method": "beta", "k": 3, "beta": {"a": 1, "b": 1, "c": 0}}, "binary problems"),
        ({"method": "matrix", "matrix": {"W": [[1, 0], [0]], "b": [0, 0]}}, "K rows of K numbers"),
        ({"method": "dirichlet", "dirichlet": {"W": [[1, 0], [0, "x"]], "b": [0, 0]}}, "must be a number"),
    ],
)
def test_bad_saved_parameters_are_one_line(document, message):
    with pytest.raises(InputError, match=message):
        load_calibrator(document)


def test_registry_holds_the_new_methods():
    assert set(NEW) <= set(CALIBRATORS)
    for name in NEW:
        assert CALIBRATORS[name].name == name
