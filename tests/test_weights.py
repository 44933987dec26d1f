"""Sample weights (docs/weights.md): evaluate(weights=), the weighted bootstrap and fit(weights=).

The independent references: the same data with row i repeated w_i times through the unweighted
path (whole-number weights), the rows of weight 0 dropped, and float64 loops written here."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import calibrate_cli as calib
from calibrate_cli.calibrators import CALIBRATORS
from calibrate_cli.errors import InputError
from calibrate_cli.metrics.registry import METRIC_NAMES

REL, ABS = 1e-12, 1e-15  # the numeric contract (docs/conventions.md)


def close(a, b, rel=REL, abs_=ABS) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def assert_metrics_equal(got: dict, want: dict, rel=REL):
    assert set(got) == set(want)
    bad = {m: (got[m], want[m]) for m in want if not close(got[m], want[m], rel)}
    assert not bad, bad


def repeated(scores, labels, w):
    rows = np.repeat(np.arange(len(labels)), np.asarray(w, dtype=np.int64))
    return scores[rows], labels[rows]


def _multiclass(seed=0, n=240, k=6):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * 2
    logits[np.arange(n), labels] += rng.random(n) * 3
    logits = np.round(logits, 1)  # ties: equal confidences, equal logits within a row
    return logits, labels, rng.integers(0, 5, n).astype(np.float64)


# ------------------------------------------------------------------ every metric: weights = repeated rows

CASES = {
    "K=6 with ties": lambda: _multiclass(),
    "K=2": lambda: (lambda z, y, w: (z[:, :2], np.minimum(y, 1), w))(*_multiclass(1, k=2)),
    "1-D log-odds": lambda: (lambda r: (r.normal(size=150) * 2, r.integers(0, 2, 150), r.integers(0, 4, 150) * 1.0))(
        np.random.default_rng(2)),
    "N=1": lambda: (np.array([[2.0, 0.5, -1.0]]), np.array([1]), np.array([3.0])),
}


@pytest.mark.parametrize("case", CASES)
def test_whole_number_weights_equal_repeated_rows_for_every_metric(case):
    scores, labels, w = CASES[case]()
    got = calib.evaluate(scores, labels, weights=w, metrics="all")
    want = calib.evaluate(*repeated(scores, labels, w), metrics="all")
    assert set(got.metrics) == set(METRIC_NAMES)  # every metric of the registry
    assert_metrics_equal(got.metrics, want.metrics)
    assert got.total_weight == float(w.sum()) and got.n == len(labels)
    assert np.allclose(got.bins.count, want.bins.count) and np.allclose(got.adaptive_bins.count, want.adaptive_bins.count)
    assert np.allclose(got.classwise_ece_per_class, want.classwise_ece_per_class, rtol=REL, atol=ABS)


def test_probabilities_with_weights_equal_repeated_rows():
    rng = np.random.default_rng(4)
    p = rng.dirichlet(np.ones(3) * 0.7, size=120)
    y = rng.integers(0, 3, 120)
    w = rng.integers(0, 3, 120).astype(float)
    got = calib.evaluate(p, y, input_kind="probs", weights=w, metrics="all")
    want = calib.evaluate(*repeated(p, y, w), input_kind="probs", metrics="all")
    assert_metrics_equal(got.metrics, want.metrics)


def test_a_weight_of_zero_removes_the_row():
    scores, labels, w = _multiclass(5)
    w = np.where(np.arange(len(labels)) % 3 == 0, 0.0, 1.0 + (np.arange(len(labels)) % 4))  # some rows out
    keep = w > 0
    got = calib.evaluate(scores, labels, weights=w, metrics="all").metrics
    want = calib.evaluate(scores[keep], labels[keep], weights=w[keep], metrics="all").metrics
    assert_metrics_equal(got, want)


def test_unit_weights_equal_the_unweighted_path():
    scores, labels, _ = _multiclass(6)
    got = calib.evaluate(scores, labels, weights=np.ones(len(labels)), metrics="all").metrics
    want = calib.evaluate(scores, labels, metrics="all").metrics
    assert_metrics_equal(got, want)


def test_scaling_every_weight_changes_nothing_but_smooth_ece_and_the_debiased_error():
    scores, labels, w = _multiclass(7)
    w = w + 0.5
    a = calib.evaluate(scores, labels, weights=w).metrics
    b = calib.evaluate(scores, labels, weights=w * 3.0).metrics
    # SmoothECE adds relplot's density floor 1e-4 to Σ weights, the debiased L2-CE divides by |B| − 1:
    # weights read as counts (docs/weights.md), so a scale changes them; every other metric is a ratio
    scaled = ("smooth_ece", "debiased_l2_ce")
    assert_metrics_equal({m: v for m, v in a.items() if m not in scaled},
                         {m: v for m, v in b.items() if m not in scaled}, rel=1e-11)
    assert a["debiased_l2_ce"] != b["debiased_l2_ce"]


# ------------------------------------------------------------------ non-integer weights: float64 loops


def _naive_weighted(logits, labels, w, n_bins=15):
    """ECE, NLL, Brier, accuracy, MCE of weighted samples by plain float64 loops over the rows."""
    total = 0.0
    nll = brier = acc = conf_sum = 0.0
    bins = [[0.0, 0.0, 0.0] for _ in range(n_bins)]  # Σw, Σw·conf, Σw·correct
    for z, y, wi in zip(logits, labels, w):
        e = [math.exp(v - max(z)) for v in z]
        s = sum(e)
        p = [v / s for v in e]
        pred = max(range(len(p)), key=lambda j: (p[j], -j))
        conf = p[pred]
        correct = 1.0 if pred == y else 0.0
        total += wi
        nll += wi * -(z[y] - max(z) - math.log(s))
        brier += wi * sum((p[j] - (1.0 if j == y else 0.0)) ** 2 for j in range(len(p)))
        acc += wi * correct
        conf_sum += wi * conf
        b = min(n_bins - 1, max(0, math.ceil(conf * n_bins) - 1))  # (b/M, (b+1)/M]
        while b > 0 and conf <= b / n_bins:
            b -= 1
        while b < n_bins - 1 and conf > (b + 1) / n_bins:
            b += 1
        bins[b][0] += wi
        bins[b][1] += wi * conf
        bins[b][2] += wi * correct
    ece = sum(abs(c - k) for _, c, k in bins) / total
    mce = max(abs(c / n - k / n) for n, c, k in bins if n > 0)
    return {"ece": ece, "nll": nll / total, "brier": brier / total, "accuracy": acc / total, "mce": mce,
            "mean_confidence": conf_sum / total}


def test_real_weights_against_a_float64_loop():
    rng = np.random.default_rng(8)
    logits = rng.normal(size=(200, 5)) * 2
    labels = rng.integers(0, 5, 200)
    w = rng.gamma(0.7, 1.3, size=200)
    w[:7] = 0.0
    got = calib.evaluate(logits, labels, weights=w).metrics
    want = _naive_weighted(logits, labels, w)
    for name, value in want.items():
        assert close(got[name], value, rel=1e-12), (name, got[name], value)


def test_hand_computed_two_samples():
    # 75 % sure of both, right on the first (weight 3), wrong on the second (weight 1): acc 3/4, conf 3/4
    p = np.array([[0.75, 0.25], [0.25, 0.75]])
    report = calib.evaluate(p, np.array([0, 0]), input_kind="probs", n_bins=4, weights=[3.0, 1.0])
    assert report.metrics["accuracy"] == 0.75
    assert report.metrics["ece"] == 0.0  # one bin (0.5, 0.75]: acc 3/4 = conf 3/4
    assert close(report.metrics["nll"], (3 * -math.log(0.75) + -math.log(0.25)) / 4)
    assert close(report.metrics["brier"], (3 * 0.125 + 1.125) / 4)


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("weights, fragment", [
    (-np.ones(4), "≥ 0"),
    (np.array([1.0, np.nan, 1.0, 1.0]), "finite"),
    (np.array([1.0, np.inf, 1.0, 1.0]), "finite"),
    (np.ones(3), "3 weights for 4 samples"),
    (np.ones((4, 2)), "shape"),
    (np.zeros(4), "every weight is 0"),
    (np.array(["a", "b", "c", "d"]), "numbers"),
])
def test_bad_weights_are_refused_naming_them(weights, fragment):
    with pytest.raises(InputError, match="w.npy") as err:
        calib.evaluate(np.eye(4) * 3, np.arange(4), weights=weights, weights_name="w.npy")
    assert fragment in str(err.value)


def test_what_cannot_take_weights_is_refused():
    scores, labels, w = _multiclass(9, n=60)
    with pytest.raises(InputError, match="compat"):
        calib.evaluate(scores, labels, weights=w + 1, compat="focal-calibration")
    with pytest.raises(InputError, match="CPU"):
        calib.evaluate(scores, labels, weights=w + 1, device="torch-cpu")
    with pytest.raises(InputError, match="ACE takes whole-number weights"):
        calib.evaluate(scores, labels, weights=w + 0.5, metrics=["ace"])
    calib.evaluate(scores, labels, weights=w + 1, metrics=["ace"])  # whole numbers: fine


# ------------------------------------------------------------------ the bootstrap


def test_weighted_bootstrap_is_reproducible_by_seed():
    scores, labels, w = _multiclass(10, n=150)
    w = w + 0.25
    a = calib.evaluate(scores, labels, weights=w, bootstrap=60, seed=3)
    b = calib.evaluate(scores, labels, weights=w, bootstrap=60, seed=3)
    c = calib.evaluate(scores, labels, weights=w, bootstrap=60, seed=4)
    assert {m: (ci.low, ci.high) for m, ci in a.intervals.items()} == {m: (ci.low, ci.high) for m, ci in b.intervals.items()}
    assert a.intervals["ece"].low != c.intervals["ece"].low
    assert a.bootstrap["n_resamples"] == 60 and "ece" in a.intervals and "nll" in a.intervals


def test_unit_weights_bootstrap_equals_the_unweighted_bootstrap():
    # the same draws (positions in the same stable confidence order): the same resamples
    scores, labels, _ = _multiclass(11, n=120)
    a = calib.evaluate(scores, labels, weights=np.ones(120), bootstrap=50, seed=1)
    b = calib.evaluate(scores, labels, bootstrap=50, seed=1)
    assert set(a.intervals) == set(b.intervals)
    for name in b.intervals:
        assert close(a.intervals[name].low, b.intervals[name].low, rel=1e-11), name
        assert close(a.intervals[name].high, b.intervals[name].high, rel=1e-11), name


def test_a_weighted_resample_is_the_weighted_metric_of_its_draw():
    # resample r's value: the weighted metric with weights multiplicity × weight (an independent call)
    from calibrate_cli.bootstrap.draws import resample_streams

    rng = np.random.default_rng(12)
    scores, labels, w = rng.normal(size=(80, 4)) * 2, rng.integers(0, 4, 80), rng.random(80) + 0.1
    report = calib.evaluate(scores, labels, weights=w, bootstrap=3, seed=7, ci_method="percentile",
                            bootstrap_metrics=["accuracy"])
    order = np.argsort(_confidences(scores), kind="stable")  # no ties: the engine's order
    values = []
    for stream in resample_streams(7, 3):
        drawn = np.random.default_rng(stream).integers(0, 80, 80)  # positions in confidence order
        mult = np.bincount(order[drawn], minlength=80)
        values.append(np.sum(mult * w * (scores.argmax(1) == labels)) / np.sum(mult * w))
    ci = report.intervals["accuracy"]
    assert close(ci.low, float(np.percentile(values, 5)), rel=1e-12)
    assert close(ci.high, float(np.percentile(values, 95)), rel=1e-12)


def _confidences(scores):
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)).max(axis=1)


def test_weighted_jackknife_leaves_each_group_out():
    """Value g of the weighted jackknife: the weighted metric of the rows outside group g (computed
    here by removing them), and with unit weights the unweighted jackknife."""
    from calibrate_cli.bootstrap.jackknife import jackknife_groups, jackknife_values
    from calibrate_cli.bootstrap.weighted import weighted_jackknife
    from calibrate_cli.data.predictions import as_predictions
    from calibrate_cli.metrics.registry import sums_needed
    from calibrate_cli.metrics.weighted import weighted_columns

    scores, labels, w = _multiclass(13, n=60)
    w = w + 0.5
    names = ["ece", "adaece", "nll", "brier", "accuracy", "classwise_ece"]

    def jackknife(weights):
        preds = as_predictions(scores, labels, "logits", check_values=False)
        columns = weighted_columns(preds, 15, sums_needed(names))[2]
        return weighted_jackknife(columns, weights[columns.order], names, n_groups=7)

    got = jackknife(w)
    for g, group in enumerate(jackknife_groups(60, 7)):
        keep = np.setdiff1d(np.arange(60), group)
        want = calib.evaluate(scores[keep], labels[keep], weights=w[keep], input_kind="logits").metrics
        for name in names:
            assert close(got[name][g], want[name]), (name, g)
    ones = jackknife(np.ones(60))
    plain = jackknife_values(scores, labels, input_kind="logits", metrics=names, n_groups=7)
    for name in names:
        np.testing.assert_allclose(ones[name], plain[name], rtol=1e-12, atol=1e-15)


def test_weighted_bca_interval_with_unit_weights_is_the_unweighted_one():
    scores, labels, _ = _multiclass(13, n=60)
    ones = calib.evaluate(scores, labels, weights=np.ones(60), bootstrap=50, seed=3, ci_method="bca")
    plain = calib.evaluate(scores, labels, bootstrap=50, seed=3, ci_method="bca")
    for name in ("ece", "nll", "brier", "accuracy"):
        x, z = ones.intervals[name], plain.intervals[name]
        assert close(x.low, z.low, rel=1e-11, abs_=1e-15) and close(x.high, z.high, rel=1e-11, abs_=1e-15), name


def test_weighted_bootstrap_refuses_what_takes_no_weights():
    scores, labels, w = _multiclass(13, n=60)
    with pytest.raises(InputError, match="custom metric"):
        calib.evaluate(scores, labels, weights=w + 1, bootstrap=20, bootstrap_metrics=[lambda s, y: 0.0])


# ------------------------------------------------------------------ every calibrator: weights = repeated rows

#: iterative optimisers: the same objective up to rounding, stopped by their own tolerances
TOLERANCE = {"beta": 1e-6, "ensemble_ts": 1e-6, "matrix": 1e-7, "dirichlet": 1e-7, "vector": 1e-8}
BINARY = {"platt", "beta"}


def _fit_data():
    rng = np.random.default_rng(14)
    n, k = 400, 4
    z = rng.normal(size=(n, k)) * 2
    y = np.where(rng.random(n) < 0.6, z.argmax(1), rng.integers(0, k, n))
    s = rng.normal(size=n) * 2
    yb = (rng.random(n) < 1 / (1 + np.exp(-0.7 * s))).astype(int)
    w = rng.integers(0, 4, n).astype(np.float64)
    return (z, y), (s, yb), w, rng.normal(size=(60, k)) * 2, rng.normal(size=60) * 2


@pytest.mark.parametrize("method", list(CALIBRATORS))
def test_every_calibrator_with_whole_number_weights_fits_as_repeated_rows(method):
    (z, y), (s, yb), w, test_z, test_s = _fit_data()
    scores, labels, test = (s, yb, test_s) if method in BINARY else (z, y, test_z)
    options = {"search": "nll"} if method == "temperature" else {}
    weighted = CALIBRATORS[method](**options).fit(scores, labels, weights=w)
    plain = CALIBRATORS[method](**options).fit(*repeated(scores, labels, w))
    tol = TOLERANCE.get(method, 1e-12)
    assert np.allclose(weighted.predict_proba(test), plain.predict_proba(test), rtol=0, atol=tol), method
    assert close(weighted.fit_info_.value, plain.fit_info_.value, rel=max(tol, 1e-12)), method


@pytest.mark.parametrize("objective", ["ece", "adaece", "nll"])
def test_the_weighted_temperature_grid_picks_the_repeated_rows_temperature(objective):
    (z, y), _, w, _, _ = _fit_data()
    z = z / 3  # an optimum inside the grid
    a = calib.fit_temperature(z, y, objective=objective, weights=w)
    b = calib.fit_temperature(*repeated(z, y, w), objective=objective)
    assert a.temperature == b.temperature
    assert close(a.objective_value, b.objective_value, rel=1e-12)


def test_the_weighted_nll_temperature_is_the_root_of_the_weighted_gradient():
    # d/dβ (1/W) Σ w_i NLL_i(β) = (1/W) Σ w_i (E_p[z_i] − z_iy) = 0 at β = 1/T: a float64 loop here
    rng = np.random.default_rng(15)
    z = rng.normal(size=(150, 3)) * 3
    y = np.where(rng.random(150) < 0.7, z.argmax(1), rng.integers(0, 3, 150))
    w = rng.gamma(0.8, 2.0, size=150)
    t = calib.fit_temperature(z, y, search="nll", weights=w).temperature
    beta, grad = 1.0 / t, 0.0
    for zi, yi, wi in zip(z, y, w):
        e = [math.exp(beta * (v - max(zi))) for v in zi]
        mean = sum(ei * v for ei, v in zip(e, zi)) / sum(e)
        grad += wi * (mean - zi[yi])
    assert abs(grad / w.sum()) < 1e-9


def test_weighted_histogram_binning_by_hand():
    # two bins on p_0: (0, 0.5] holds rows 1, 2; (0.5, 1] holds rows 0, 3; θ = Σw[y = 0] / Σw
    p = np.tile(np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.8, 0.2]]), (3, 1))  # 12 rows: ≥ 5 per bin
    cal = CALIBRATORS["histogram"](n_bins=2)
    cal.fit(p, [0, 0, 1, 1] * 3, input_kind="probs", weights=[3.0, 1.0, 4.0, 1.0] * 3)
    assert cal.values_[0].tolist() == [1 / 5, 3 / 4]


def test_zero_weight_rows_are_left_out_of_a_fit():
    (z, y), _, w, test_z, _ = _fit_data()
    w = np.where(w == 0, 0.0, 1.0)
    keep = w > 0
    for method in ("temperature", "isotonic", "histogram_mass", "vector"):
        options = {"search": "nll"} if method == "temperature" else {}
        a = CALIBRATORS[method](**options).fit(z, y, weights=w)
        b = CALIBRATORS[method](**options).fit(z[keep], y[keep])
        assert np.allclose(a.predict_proba(test_z), b.predict_proba(test_z), atol=TOLERANCE.get(method, 1e-12))


def test_fits_refuse_weights_they_cannot_take():
    (z, y), _, w, _, _ = _fit_data()
    with pytest.raises(InputError, match="whole-number"):
        CALIBRATORS["top_label"]().fit(z, y, weights=w + 0.5)
    with pytest.raises(InputError, match="compat"):
        calib.fit_temperature(z, y, compat="focal-calibration", weights=w + 1)
    with pytest.raises(InputError, match="≥ 0"):
        calib.fit_temperature(z, y, weights=-w)


def test_the_bootstrap_function_takes_weights_as_evaluate_does():
    scores, labels, w = _multiclass(16, n=90)
    got = calib.bootstrap(scores, labels, weights=w + 1, n_resamples=40, seed=5, metrics=["ece", "nll"])
    want = calib.evaluate(scores, labels, weights=w + 1, bootstrap=40, seed=5, bootstrap_metrics=["ece", "nll"])
    assert sorted(got) == ["ece", "nll"]
    assert {m: (ci.low, ci.high) for m, ci in got.items()} == {m: (want.intervals[m].low, want.intervals[m].high)
                                                              for m in got}
    with pytest.raises(InputError, match="indices"):
        calib.bootstrap(scores, labels, weights=w + 1, indices=np.zeros((2, 90), dtype=int))


def test_cross_validation_with_unit_weights_is_the_unweighted_one():
    from calibrate_cli.calibrators.selection import cross_validate, stratified_folds

    (z, y), _, _, _, _ = _fit_data()
    folds = stratified_folds(y, 4, 1)
    for method in ("temperature", "isotonic", "histogram"):
        a = cross_validate(method, z, y, metric="ece", folds=folds, weights=np.ones(len(y))).value
        b = cross_validate(method, z, y, metric="ece", folds=folds).value
        assert close(a, b, rel=1e-9), method


def test_a_zero_weight_row_with_probability_zero_for_its_class_is_left_out():
    p = np.array([[0.7, 0.3, 0.0], [0.2, 0.5, 0.3], [0.6, 0.1, 0.3], [0.1, 0.2, 0.7]] * 3)
    y = np.array([2, 1, 0, 2] * 3)  # row 0 (and its copies): the true class has probability 0
    w = np.array([0.0, 1.5, 2.0, 0.5] * 3)
    keep = w > 0
    got = calib.evaluate(p, y, input_kind="probs", weights=w)
    want = calib.evaluate(p[keep], y[keep], input_kind="probs", weights=w[keep])
    assert math.isfinite(got.metrics["nll"]) and not got.warnings
    assert_metrics_equal(got.metrics, want.metrics)
    fitted = calib.fit_temperature(p, y, search="nll", input_kind="probs", weights=w).temperature
    assert close(fitted, calib.fit_temperature(p[keep], y[keep], search="nll", input_kind="probs",
                                               weights=w[keep]).temperature, rel=1e-9)
    # a row of weight > 0 with probability 0 for its class: NLL inf, said once
    w[0] = 1.0
    report = calib.evaluate(p, y, input_kind="probs", weights=w)
    assert report.metrics["nll"] == math.inf and "1 sample(s) of weight > 0" in report.warnings[0]


def test_paired_comparison_with_weights():
    # point differences: the weighted metrics of each model; unit weights: the unweighted comparison
    rng = np.random.default_rng(17)
    y = rng.integers(0, 3, 100)
    a, b = rng.normal(size=(100, 3)) * 2, rng.normal(size=(100, 3))
    w = rng.random(100) + 0.2
    got = calib.compare(a, y, b, y, weights=w, n_resamples=40, seed=2, method="percentile")
    for name in ("ece", "nll", "accuracy"):
        d = got.differences[name]
        want_a = calib.evaluate(a, y, weights=w).metrics[name]
        want_b = calib.evaluate(b, y, weights=w).metrics[name]
        assert (d.a, d.b) == (want_a, want_b) and close(d.difference, want_b - want_a)
        assert d.interval is not None
    ones = calib.compare(a, y, b, y, weights=np.ones(100), n_resamples=40, seed=2, method="percentile")
    plain = calib.compare(a, y, b, y, n_resamples=40, seed=2, method="percentile")
    for name in ("ece", "adaece", "nll", "brier", "accuracy"):
        x, z = ones.differences[name], plain.differences[name]
        assert close(x.difference, z.difference, rel=1e-11, abs_=1e-15), name
        assert close(x.interval.low, z.interval.low, rel=1e-11, abs_=1e-15), name
        assert close(x.interval.high, z.interval.high, rel=1e-11, abs_=1e-15), name
    ones = calib.compare(a, y, b, y, weights=np.ones(100), n_resamples=40, seed=2, method="bca")
    plain = calib.compare(a, y, b, y, n_resamples=40, seed=2, method="bca")
    for name in ("ece", "nll", "accuracy"):
        x, z = ones.differences[name].interval, plain.differences[name].interval
        assert close(x.low, z.low, rel=1e-11, abs_=1e-15) and close(x.high, z.high, rel=1e-11, abs_=1e-15), name
    assert calib.compare(a, y, b, y, weights=w, n_resamples=20, method="bca").differences["ece"].interval is not None


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 25), k=st.integers(2, 4), n_bins=st.integers(1, 12), seed=st.integers(0, 2**31))
def test_property_whole_number_weights_equal_repeated_rows(n, k, n_bins, seed):
    rng = np.random.default_rng(seed)
    logits = np.round(rng.normal(size=(n, k)) * 2, 0)  # many ties, confidences on bin edges (e.g. 0.5)
    labels = rng.integers(0, k, n)
    w = rng.integers(0, 4, n).astype(float)
    w[rng.integers(0, n)] += 1  # not all zero
    # rounded logits can be rows of 0 and 1 that look like probabilities: say what they are
    got = calib.evaluate(logits, labels, weights=w, n_bins=n_bins, metrics="all", input_kind="logits").metrics
    want = calib.evaluate(*repeated(logits, labels, w), n_bins=n_bins, metrics="all", input_kind="logits").metrics
    assert_metrics_equal(got, want)
