"""Temperature scaling core: reference values, hand-made cases, independent loops, properties."""

from __future__ import annotations

import doctest
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import calibrate_cli.data.predictions as predictions_module
import calibrate_cli.calibrators.temperature as temperature_module  # the grid and NLL searches live here
from calibrate_cli import InputError, TemperatureScaling, evaluate
from calibrate_cli.calibrators.temperature_fit import (
    apply_temperature,
    fit_temperature,
    parse_grid,
    probabilities_to_logits,
    scale_scores,
    temperature_grid,
)

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
COMPAT = "focal-calibration"


def reference(name: str) -> np.ndarray:
    path = REFERENCE / name
    if not path.exists():
        pytest.skip(f"reference data {path} not available")
    return np.load(path)


# ---------------------------------------------------------------------------------------------
# Independent float64 loops (no calib code)


def naive_mean_nll(logits, labels, t: float) -> float:
    total = 0.0
    for row, y in zip(np.asarray(logits, dtype=float), labels):
        x = [v / t for v in row]
        m = max(x)
        log_sum = m + math.log(sum(math.exp(v - m) for v in x))
        total += log_sum - x[int(y)]
    return total / len(labels)


def naive_nll_derivative_in_t(logits, labels, t: float) -> float:
    """d/dT of the mean NLL of softmax(z / T): (1/N) Σ_i (z_iy − E_p[z_i]) / T²."""
    total = 0.0
    for row, y in zip(np.asarray(logits, dtype=float), labels):
        x = [v / t for v in row]
        m = max(x)
        e = [math.exp(v - m) for v in x]
        s = sum(e)
        expected = sum(ei / s * zi for ei, zi in zip(e, row))
        total += (row[int(y)] - expected) / (t * t)
    return total / len(labels)


def naive_ece(logits, labels, t: float, n_bins: int = 15) -> float:
    """ECE of softmax(z / T) over bins (b/M, (b+1)/M], the lowest closed, by a plain loop."""
    count = [0] * n_bins
    conf_sum = [0.0] * n_bins
    correct_sum = [0.0] * n_bins
    for row, y in zip(np.asarray(logits, dtype=float), labels):
        x = [v / t for v in row]
        m = max(x)
        e = [math.exp(v - m) for v in x]
        s = sum(e)
        p = [ei / s for ei in e]
        pred = max(range(len(p)), key=lambda k: (p[k], -k))
        conf = p[pred]
        b = next(b for b in range(n_bins) if conf <= (b + 1) / n_bins) if conf > 0 else 0
        count[b] += 1
        conf_sum[b] += conf
        correct_sum[b] += pred == int(y)
    return sum(abs(c - a) for c, a in zip(conf_sum, correct_sum)) / len(labels)


def synthetic(n=600, k=5, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), labels] += 1.5
    return (scale * logits).astype(np.float32), labels


# ---------------------------------------------------------------------------------------------
# Reference values (reference/README.md)


@pytest.mark.parametrize("compat", [None, COMPAT])
def test_grid_temperatures_on_synthetic_reference(compat):
    logits, labels = reference("logits_N2000_K10.npy"), reference("labels_N2000_K10.npy")
    assert fit_temperature(logits, labels, objective="ece", compat=compat).temperature == 0.6
    assert fit_temperature(logits, labels, objective="nll", compat=compat).temperature == 0.9


def test_exact_nll_temperature_on_synthetic_reference():
    logits, labels = reference("logits_N2000_K10.npy"), reference("labels_N2000_K10.npy")
    fit = fit_temperature(logits, labels, search="nll")
    assert fit.temperature == pytest.approx(0.868922, abs=1e-6)
    assert fit.parameters["passes"] <= 8  # Newton converges quadratically; bisection would need ~40
    assert fit.objective_value <= fit.objective_at_one
    # independent check: the derivative of the mean NLL (plain loop) vanishes at T*
    assert abs(naive_nll_derivative_in_t(logits, labels, fit.temperature)) < 1e-9
    # and the NLL is larger on both sides
    for t in (fit.temperature - 1e-3, fit.temperature + 1e-3):
        assert naive_mean_nll(logits, labels, t) > naive_mean_nll(logits, labels, fit.temperature)


def test_compat_ece_after_grid_temperature_on_synthetic_reference():
    logits, labels = reference("logits_N2000_K10.npy"), reference("labels_N2000_K10.npy")
    fit = fit_temperature(logits, labels, objective="ece", compat=COMPAT)
    assert fit.objective_value == pytest.approx(0.041869193, abs=2e-6)
    assert fit.objective_at_one == pytest.approx(0.0873361081, abs=2e-6)


REAL_SETS = {
    # name: (grid T by ECE, by NLL, exact NLL T, compat test ECE / AdaECE / CW-ECE / NLL at the ECE grid T)
    "cifar100_wrn16-4_netcal": (1.2, 1.1, 1.123270, (0.041064, 0.040901, 0.002652, 0.956953)),
    "cifar10_cleanlab": (1.5, 1.5, 1.499625, (0.013217, 0.008294, 0.005099, 0.202297)),
}


@pytest.mark.parametrize("name", sorted(REAL_SETS))
def test_real_reference_sets(name):
    t_ece, t_nll, t_exact, after = REAL_SETS[name]
    val = reference(f"{name}_val_logits.npy"), reference(f"{name}_val_labels.npy")
    test = reference(f"{name}_test_logits.npy"), reference(f"{name}_test_labels.npy")
    fit = fit_temperature(*val, objective="ece", compat=COMPAT)
    assert fit.temperature == t_ece
    assert fit_temperature(*val, objective="ece").temperature == t_ece
    assert fit_temperature(*val, objective="nll").temperature == t_nll
    # the published values have 6 decimals: tolerance 1e-6 plus half a unit of the last digit
    assert fit_temperature(*val, search="nll").temperature == pytest.approx(t_exact, abs=1.5e-6)
    metrics = evaluate(fit.transform(test[0]), test[1], compat=COMPAT).metrics
    got = (metrics["ece"], metrics["adaece"], metrics["classwise_ece"], metrics["nll"])
    assert got == pytest.approx(after, abs=2.5e-6)


# ---------------------------------------------------------------------------------------------
# The grid


def test_default_grid_is_exactly_one_tenth_steps():
    grid = temperature_grid()
    assert grid.shape == (100,)
    assert np.array_equal(grid, np.arange(1, 101) / 10)  # i/10 is the float nearest each decimal
    assert 0.3 in grid and 0.0 not in grid


def test_grid_from_text():
    assert np.array_equal(temperature_grid(*parse_grid("0.05:5:0.05")), np.arange(1, 101) / 20)
    assert np.array_equal(temperature_grid(*parse_grid("1:1:1")), [1.0])
    assert np.array_equal(temperature_grid(*parse_grid("0.5:1.2:0.5")), [0.5, 1.0])  # stop not on the grid


@pytest.mark.parametrize(
    "text, message",
    [
        ("0:1:0.1", "start must be > 0"),
        ("-1:1:0.1", "start must be > 0"),
        ("0.1:1:0", "step must be > 0"),
        ("0.1:1:-0.1", "step must be > 0"),
        ("2:1:0.1", "must be ≥ start"),
        ("0.1:10", "START:STOP:STEP"),
        ("a:b:c", "must be a number"),
        ("0.1:nan:0.1", "must be finite"),
        ("1e-9:1000:1e-9", "at most"),
    ],
)
def test_bad_grids(text, message):
    with pytest.raises(InputError, match=message):
        parse_grid(text)


@pytest.mark.parametrize("compat", [None, COMPAT])
@pytest.mark.parametrize("chunk_rows", [None, 37])
def test_grid_objective_equals_evaluate_at_every_temperature(monkeypatch, compat, chunk_rows):
    if chunk_rows:  # many chunks: per-chunk statistics merged
        monkeypatch.setattr(temperature_module, "_GRID_CHUNK_ELEMENTS", 16 * 5 * chunk_rows)
    logits, labels = synthetic()
    for objective, metric in (("ece", "ece"), ("adaece", "adaece"), ("nll", "nll")):
        fit = fit_temperature(logits, labels, objective=objective, grid=(0.25, 4, 0.25), compat=compat)
        for t, value in fit.curve:
            expected = evaluate(apply_temperature(logits, t), labels, compat=compat).metrics[metric]
            assert value == pytest.approx(expected, abs=1e-12 if compat is None else 1e-7)


def test_grid_ece_matches_a_plain_loop():
    logits, labels = synthetic(n=300, k=4, seed=3)
    fit = fit_temperature(logits, labels, objective="ece", grid=(0.5, 2, 0.5))
    for t, value in fit.curve:
        assert value == pytest.approx(naive_ece(logits, labels, t), abs=1e-12)


def test_ties_go_to_the_smallest_temperature_and_boundary_warns():
    # all-equal logits: confidence 1/2 at every T, so every T has the same ECE (|0.5 − 0.5| = 0)
    fit = fit_temperature(np.zeros((4, 2)), [0, 1, 0, 1], objective="ece")
    assert fit.temperature == 0.1
    assert all(v == 0.0 for _, v in fit.curve)
    assert any("lower boundary" in w for w in fit.warnings)


def test_upper_boundary_warning_and_no_warning_inside():
    logits, labels = synthetic()
    assert any("upper boundary" in w for w in fit_temperature(logits, labels, grid=(0.1, 0.3, 0.1)).warnings)
    assert fit_temperature(logits, labels, objective="nll").warnings == ()


def test_grid_without_one_still_reports_the_objective_at_one():
    logits, labels = synthetic()
    fit = fit_temperature(logits, labels, grid=(1.5, 3, 0.5))
    assert fit.objective_at_one == pytest.approx(evaluate(logits, labels).metrics["ece"], abs=1e-12)


def test_progress_is_called_per_chunk(monkeypatch):
    monkeypatch.setattr(temperature_module, "_GRID_CHUNK_ELEMENTS", 100 * 5 * 50)  # 50 rows per chunk
    logits, labels = synthetic(n=120)
    calls = []
    fit_temperature(logits, labels, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(50, 120), (100, 120), (120, 120)]


# ---------------------------------------------------------------------------------------------
# Exact NLL, Platt, vector


def test_nll_hand_case():
    # NLL(β) = (1/3)[2 log(1 + e^{−4β}) + log(1 + e^{4β})]: zero derivative at σ(4β) = 2/3, T = 4 / ln 2
    fit = fit_temperature(np.array([[4.0, 0.0], [0.0, 4.0], [4.0, 0.0]]), [0, 1, 1], search="nll")
    assert fit.temperature == pytest.approx(4 / math.log(2), abs=1e-7)
    assert fit.objective == "nll" and fit.grid is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nll_optimum_derivative_is_zero(seed):
    logits, labels = synthetic(n=300, k=4, seed=seed, scale=0.5 + seed)
    fit = fit_temperature(logits, labels, search="nll")
    assert abs(naive_nll_derivative_in_t(logits, labels, fit.temperature)) < 1e-9
    assert fit.parameters["passes"] <= 10
    assert fit.objective_value == pytest.approx(naive_mean_nll(logits, labels, fit.temperature), abs=1e-12)
    assert fit.objective_at_one == pytest.approx(naive_mean_nll(logits, labels, 1.0), abs=1e-12)


def test_nll_separable_data_warns_at_the_bound():
    fit = fit_temperature(np.array([[2.0, 0.0], [0.0, 2.0]]), [0, 1], search="nll")
    assert fit.temperature == temperature_module.NLL_TEMPERATURE_BOUNDS[0]
    assert any("separable" in w for w in fit.warnings)


def test_platt_hand_case():
    # two score values: the MLE matches each group's rate: σ(a + b) = 3/4, σ(−a + b) = 1/2
    fit = fit_temperature(np.array([1, 1, 1, 1, -1, -1.0]), [1, 1, 1, 0, 1, 0], search="platt")
    assert fit.parameters["a"] == pytest.approx(math.log(3) / 2, abs=1e-9)
    assert fit.parameters["b"] == pytest.approx(math.log(3) / 2, abs=1e-9)
    assert fit.temperature is None
    two_columns = fit.transform(np.array([[0.0, 1.0], [0.5, -0.5]]))
    assert two_columns[:, 0].tolist() == [0.0, 0.0]
    assert two_columns[:, 1] == pytest.approx([math.log(3), 0.0])


def test_platt_needs_two_classes():
    logits, labels = synthetic(k=3)
    with pytest.raises(InputError, match="Platt scaling is for binary"):
        fit_temperature(logits, labels, search="platt")


def test_vector_scaling_beats_the_best_temperature():
    logits, labels = synthetic(n=500, k=4, seed=5)
    vector = fit_temperature(logits, labels, search="vector")
    exact = fit_temperature(logits, labels, search="nll")
    # vector scaling contains temperature scaling (w = 1/T, b = 0): its optimum can only be lower
    assert vector.objective_value <= exact.objective_value + 1e-12
    w, b = np.array(vector.parameters["w"]), np.array(vector.parameters["b"])
    assert vector.objective_value == pytest.approx(naive_mean_nll(logits * w + b, labels, 1.0), abs=1e-12)
    # gradient of the plain-loop NLL at the optimum is ~0 (central differences)
    theta = np.concatenate([w, b])
    for j in range(theta.size):
        step = np.zeros_like(theta)
        step[j] = 1e-5

        def f(th):
            return naive_mean_nll(logits * th[:4] + th[4:], labels, 1.0)

        assert (f(theta + step) - f(theta - step)) / 2e-5 == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"search": "nll", "objective": "ece"}, "works with the grid search only"),
        ({"search": "bisect"}, "search"),
        ({"objective": "mce"}, "objective"),
        ({"search": "nll", "compat": COMPAT}, "compat"),
        ({"compat": "netcal"}, "compat"),
    ],
)
def test_bad_arguments(kwargs, message):
    logits, labels = synthetic(n=20)
    with pytest.raises(InputError, match=message):
        fit_temperature(logits, labels, **kwargs)


def test_bad_inputs_are_input_errors_naming_the_file():
    with pytest.raises(InputError, match="val.npy: scores contain NaN"):
        fit_temperature(np.array([[np.nan, 1.0]]), [0], scores_name="val.npy")
    with pytest.raises(InputError, match="out of range"):
        fit_temperature(np.zeros((2, 3)), [0, 3])


# ---------------------------------------------------------------------------------------------
# Probabilities


def test_probabilities_with_zeros_stay_zero():
    probs = np.array([[0.7, 0.3, 0.0], [0.1, 0.0, 0.9], [0.5, 0.25, 0.25], [0.0, 0.6, 0.4]])
    labels = np.array([0, 2, 1, 1])
    fit = fit_temperature(probs, labels, input_kind="probs")
    scaled = fit.apply(probs, "probs")
    assert np.array_equal(scaled == 0, probs == 0)
    t = fit.temperature
    powered = probs ** (1 / t)
    assert scaled == pytest.approx(powered / powered.sum(axis=1, keepdims=True), abs=1e-15)
    assert np.array_equal(probabilities_to_logits(probs) == -np.inf, probs == 0)


def test_probabilities_fit_like_their_logits():
    from calibrate_cli.data.probabilities import softmax

    logits, labels = synthetic()
    probs = softmax(logits)
    for search in ("grid", "nll"):
        from_probs = fit_temperature(probs, labels, search=search, input_kind="probs")
        from_logits = fit_temperature(logits, labels, search=search)
        assert from_probs.temperature == pytest.approx(from_logits.temperature, abs=1e-6)


def test_true_class_probability_zero_makes_nll_fits_impossible():
    probs = np.array([[1.0, 0.0], [0.4, 0.6]])
    with pytest.raises(InputError, match="p.npy: the true class has probability 0 at row 0"):
        fit_temperature(probs, [1, 1], search="nll", input_kind="probs", scores_name="p.npy")
    with pytest.raises(InputError, match="probability 0"):
        fit_temperature(probs, [1, 1], objective="nll", input_kind="probs")
    assert fit_temperature(probs, [1, 1], objective="ece", input_kind="probs").temperature > 0
    # Platt's map needs finite log p: a probability of exactly 0 is clipped to ε (issue #33), and said
    from calibrate_cli.errors import CalibWarning

    probs = np.array([[1.0, 0.0], [0.4, 0.6], [0.0, 1.0], [0.7, 0.3], [0.2, 0.8], [0.9, 0.1]])
    with pytest.warns(CalibWarning, match="clipped to ε = 2.22e-16"):
        platt = fit_temperature(probs, [0, 1, 1, 1, 0, 0], search="platt", input_kind="probs")
    with pytest.warns(CalibWarning, match="clipped"):
        assert np.isfinite(platt.calibrator.predict_proba(probs)).all()


def test_scale_scores():
    logits = np.array([[1.0, 2.0], [3.0, -1.0]])
    assert scale_scores(logits, 1.0) is logits
    assert np.array_equal(scale_scores(logits, 2.0), logits / 2)
    probs = np.array([[0.2, 0.8], [1.0, 0.0]])
    assert scale_scores(probs, 0.5, "probs") == pytest.approx(np.array([[0.04, 0.64], [1.0, 0.0]]) / [[0.68], [1.0]])
    with pytest.raises(InputError, match="p.npy: probabilities outside"):
        scale_scores(np.array([[-0.1, 1.1]]), 2.0, "probs", scores_name="p.npy")
    with pytest.raises(InputError, match="temperature must be finite and > 0"):
        scale_scores(logits, 0.0)


# ---------------------------------------------------------------------------------------------
# TemperatureScaling as a scikit-learn style estimator, and the old name


def test_scaling_fit_transform_and_the_old_name():
    logits, labels = synthetic()
    scaler = TemperatureScaling(search="nll")
    with pytest.raises(InputError, match="not fitted"):
        scaler.transform(logits)
    assert scaler.fit(logits, labels) is scaler
    assert scaler.temperature_ == fit_temperature(logits, labels, search="nll").temperature
    assert np.array_equal(scaler.transform(logits), logits.astype(np.float64) / scaler.temperature_)
    with pytest.raises(InputError, match="K = 5"):
        scaler.transform(logits[:, :3])
    import calibrate_cli

    with pytest.warns(DeprecationWarning, match="TemperatureScaling"):
        assert calibrate_cli.TemperatureScaler is TemperatureScaling


def test_to_dict_is_json_ready():
    import json

    logits, labels = synthetic()
    d = fit_temperature(logits, labels).to_dict()
    assert json.loads(json.dumps(d)) == d
    assert {"temperature", "search", "objective", "objective_value", "objective_at_one", "grid", "curve", "warnings"} <= set(d)
    assert len(d["curve"]) == 100
    platt = fit_temperature(logits[:, 0] - logits[:, 1], labels % 2, search="platt").to_dict()
    assert platt["temperature"] is None and set(platt["platt"]) >= {"a", "b"}


def test_doctests():
    assert doctest.testmod(temperature_module).failed == 0


# ---------------------------------------------------------------------------------------------
# Properties

logit_rows = st.integers(min_value=1, max_value=30).flatmap(
    lambda n: st.integers(min_value=2, max_value=6).flatmap(
        lambda k: st.tuples(
            # multiples of 1/8: exact in binary, so no accidental ties from rounding
            hnp.arrays(np.float64, (n, k), elements=st.integers(-80, 80).map(lambda v: v / 8)),
            hnp.arrays(np.int64, (n,), elements=st.integers(0, k - 1)),
        )
    )
)
temperatures = st.sampled_from(list(temperature_grid())) | st.floats(0.05, 20)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logit_rows, temperatures)
def test_temperature_never_changes_accuracy(data, t):
    logits, labels = data
    before = evaluate(logits, labels).metrics
    after = evaluate(apply_temperature(logits, t), labels).metrics
    assert after["accuracy"] == before["accuracy"]
    assert after["top5_accuracy"] == before["top5_accuracy"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logit_rows, st.sampled_from(["ece", "adaece", "nll"]))
def test_fitted_grid_temperature_never_worse_than_one(data, objective):
    logits, labels = data
    fit = fit_temperature(logits, labels, objective=objective, grid=(0.5, 3, 0.5))
    metric = evaluate(logits, labels).metrics[objective]
    assert fit.objective_at_one == pytest.approx(metric, abs=1e-12)
    assert fit.objective_value <= fit.objective_at_one
    at_t = evaluate(apply_temperature(logits, fit.temperature), labels).metrics[objective]
    assert fit.objective_value == pytest.approx(at_t, abs=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logit_rows)
def test_exact_nll_temperature_never_worse_than_one(data):
    logits, labels = data
    fit = fit_temperature(logits, labels, search="nll")
    assert fit.objective_value <= evaluate(logits, labels).metrics["nll"] + 1e-12


@settings(max_examples=30, deadline=None)
@given(logit_rows)
def test_temperature_one_is_the_identity(data):
    logits, labels = data
    assert np.array_equal(apply_temperature(logits, 1.0), logits)
    fit = fit_temperature(logits, labels, grid=(1, 1, 1))
    assert fit.temperature == 1.0 and fit.objective_value == fit.objective_at_one
    assert np.array_equal(fit.transform(logits), logits)
    assert evaluate(fit.transform(logits), labels).metrics == evaluate(logits, labels).metrics


@pytest.mark.parametrize("search,objective", [("grid", "ece"), ("grid", "nll"), ("grid", "adaece"), ("nll", None)])
def test_fits_do_not_depend_on_the_thread_count(monkeypatch, search, objective):
    """Row chunks run in a thread pool; sums over chunks are added in chunk order, so 1 or 3 threads
    give the very same numbers."""
    monkeypatch.setattr(temperature_module, "_GRID_CHUNK_ELEMENTS", 100 * 5 * 30)
    monkeypatch.setattr(predictions_module, "_CHUNK_ELEMENTS", 5 * 40)
    logits, labels = synthetic(n=400)
    fits = []
    real = temperature_module.map_chunks
    for threads in (1, 3):
        monkeypatch.setattr(temperature_module, "map_chunks", lambda fn, c, t=threads: real(fn, c, t))
        fits.append(fit_temperature(logits, labels, search=search, objective=objective))
    assert fits[0].temperature == fits[1].temperature
    assert fits[0].objective_value == fits[1].objective_value
    assert fits[0].curve == fits[1].curve


def test_adaece_grid_in_temperature_groups_equals_evaluate(monkeypatch):
    """With a small budget the AdaECE grid runs in groups of T (one pass each): same values, and the
    progress runs once from 0 to the end over all the passes."""
    logits, labels = synthetic(n=300)
    monkeypatch.setattr(temperature_module, "_ADAECE_GRID_VALUES", 300 * 3)  # 3 temperatures per pass
    calls = []
    fit = fit_temperature(
        logits, labels, objective="adaece", grid=(0.5, 4, 0.5), progress=lambda d, t: calls.append((d, t))
    )
    assert len(fit.curve) == 8
    for t, value in fit.curve:
        expected = evaluate(apply_temperature(logits, t), labels).metrics["adaece"]
        assert value == pytest.approx(expected, abs=1e-12)
    done = [d for d, _ in calls]
    assert done == sorted(done) and calls[-1] == (900, 900) and {t for _, t in calls} == {900}


@pytest.mark.parametrize("engine", ["numpy", "fused"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float16])
@pytest.mark.parametrize("search", ["grid", "nll"])
def test_integer_and_half_logits_fit_as_their_float64_values(dtype, search, engine, monkeypatch):
    """The compiled passes take float32/float64 rows: other logits are widened first (an int64
    array once reached the C NLL kernel and failed with a TypeError)."""
    if engine == "fused":
        pytest.importorskip("calibrate_cli.engine._ckernel", reason="the C extension is not built")
    monkeypatch.setenv("CALIB_ENGINE", engine)
    rng = np.random.default_rng(5)
    y = rng.integers(0, 6, 300)
    x = rng.normal(scale=4.0, size=(300, 6)).round().astype(dtype)
    x[np.arange(300), y] += dtype(3)
    got = fit_temperature(x, y, search=search)
    want = fit_temperature(x.astype(np.float64), y, search=search)
    assert got.temperature == want.temperature
