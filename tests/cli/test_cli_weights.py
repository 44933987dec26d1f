"""`--weights` on calib eval, temperature and fit: the library's numbers, and one-line errors (exit 2)."""

import json

import numpy as np
import pytest

import calibrate_cli as calib
from calibrate_cli.calibrators import fit as fit_method
from calibrate_cli.cli import cli
from cli_helpers import one_line_error  # noqa: E402


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(21)
    labels = rng.integers(0, 3, 120)
    logits = rng.normal(size=(120, 3)) * 1.5
    logits[np.arange(120), labels] += 1.0
    weights = rng.gamma(0.9, 1.5, size=120)
    weights[:5] = 0.0
    np.save(tmp_path / "z.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    np.save(tmp_path / "w.npy", weights)
    return tmp_path, logits, labels, weights


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


def test_eval_json_equals_the_library_call(runner, data):
    folder, logits, labels, w = data
    result = run(runner, "eval", folder / "z.npy", folder / "y.npy", "--weights", folder / "w.npy", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    want = calib.evaluate(logits, labels, weights=w)
    assert doc["metrics"] == want.metrics
    assert doc["total_weight"] == want.total_weight and doc["inputs"]["weights"] == str(folder / "w.npy")
    assert abs(want.total_weight - float(w.sum())) <= 1e-12 * float(w.sum())  # Σw (in confidence order)
    assert doc["bins"]["ece"] == want.to_dict()["bins"]["ece"]


def test_eval_without_weights_has_no_total_weight(runner, data):
    folder, *_ = data
    doc = json.loads(run(runner, "eval", folder / "z.npy", folder / "y.npy", "--format", "json").stdout)
    assert "total_weight" not in doc


def test_eval_weights_column_of_a_csv_file(runner, tmp_path):
    rows = ["a,b,weight,label", "2,0,1,0", "0,1,3,1", "1,0,0.5,1", "0,3,2,1"]
    (tmp_path / "p.csv").write_text("\n".join(rows) + "\n")
    result = run(runner, "eval", tmp_path / "p.csv", "--labels", "label", "--scores", "a,b", "--weights", "weight",
                 "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    z = np.array([[2.0, 0], [0, 1], [1, 0], [0, 3]])
    want = calib.evaluate(z, np.array([0, 1, 1, 1]), weights=np.array([1, 3, 0.5, 2]))
    assert doc["metrics"] == want.metrics
    assert doc["inputs"]["weights"] == f"{tmp_path / 'p.csv'}[weight]"


def test_a_weights_column_needs_the_score_columns_named(runner, tmp_path):
    (tmp_path / "p.csv").write_text("a,b,weight,label\n2,0,1,0\n0,1,3,1\n")
    result = run(runner, "eval", tmp_path / "p.csv", "--labels", "label", "--weights", "weight")
    one_line_error(result, "weight", "--scores")


def test_eval_bootstrap_with_weights_is_seeded(runner, data):
    folder, logits, labels, w = data
    args = ("eval", folder / "z.npy", folder / "y.npy", "--weights", folder / "w.npy", "--bootstrap", 50, "--seed", 2,
            "--format", "json")
    first, second = run(runner, *args), run(runner, *args)
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["intervals"] == json.loads(second.stdout)["intervals"]
    want = calib.evaluate(logits, labels, weights=w, bootstrap=50, seed=2)
    assert json.loads(first.stdout)["intervals"]["ece"]["low"] == want.intervals["ece"].low


@pytest.mark.parametrize("values, fragment", [
    (lambda w: -w - 1, "≥ 0"),
    (lambda w: np.where(np.arange(w.size) == 3, np.nan, w), "finite"),
    (lambda w: w[:-1], "119 weights for 120 samples"),
    (lambda w: np.zeros_like(w), "every weight is 0"),
])
def test_bad_weights_are_one_line_naming_the_file(runner, data, values, fragment):
    folder, _, _, w = data
    np.save(folder / "bad.npy", values(w))
    result = run(runner, "eval", folder / "z.npy", folder / "y.npy", "--weights", folder / "bad.npy")
    one_line_error(result, "bad.npy", fragment)


def test_a_missing_weights_file_is_one_line(runner, data):
    folder, *_ = data
    one_line_error(run(runner, "eval", folder / "z.npy", folder / "y.npy", "--weights", folder / "nope.npy"),
                   "nope.npy")


@pytest.mark.parametrize("extra, fragment", [
    (("--decompose",), "--decompose"),
    (("--compat", "focal-calibration"), "--compat"),
])
def test_what_takes_no_weights_is_refused(runner, data, extra, fragment):
    folder, *_ = data
    result = run(runner, "eval", folder / "z.npy", folder / "y.npy", "--weights", folder / "w.npy", *extra)
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr and "Traceback" not in result.output


def test_shards_with_weights_are_refused(runner, data):
    folder, logits, labels, _ = data
    (folder / "x").mkdir()
    (folder / "t").mkdir()
    np.save(folder / "x" / "x_1.npy", logits)
    np.save(folder / "t" / "y_1.npy", labels)
    result = run(runner, "eval", folder / "x", folder / "t", "--weights", folder / "w.npy")
    assert result.exit_code == 2 and "shards" in result.stderr


def test_temperature_json_equals_the_library_call(runner, data):
    folder, logits, labels, w = data
    result = run(runner, "temperature", folder / "z.npy", folder / "y.npy", "--search", "nll", "--weights",
                 folder / "w.npy", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    fit = calib.fit_temperature(logits, labels, search="nll", weights=w)
    assert doc["temperature"] == fit.temperature
    assert doc["inputs"]["fit"]["weights"] == str(folder / "w.npy")
    assert doc["fit"]["before"] == calib.evaluate(logits, labels, weights=w).metrics  # the fitting set: weighted


def test_fit_one_method_with_weights(runner, data):
    folder, logits, labels, w = data
    result = run(runner, "fit", folder / "z.npy", folder / "y.npy", "--method", "isotonic", "--weights",
                 folder / "w.npy", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["calibration"] == fit_method("isotonic", logits, labels, weights=w).to_dict()


def test_fit_all_with_weights_cross_validates_with_them(runner, data):
    from calibrate_cli.calibrators.selection import cross_validate, stratified_folds

    folder, logits, labels, w = data
    result = run(runner, "fit", folder / "z.npy", folder / "y.npy", "--method", "all", "--weights", folder / "w.npy",
                 "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    values = doc["selection"]["values"]
    folds = stratified_folds(labels, 5, 0)
    assert values["isotonic"] == cross_validate("isotonic", logits, labels, metric="ece", folds=folds, weights=w).value
    assert values["uncalibrated"] == calib.evaluate(logits, labels, weights=w).metrics["ece"]
    assert doc["uncalibrated"]["metrics"]["ece"] == values["uncalibrated"]  # no --test: the weighted fitting set
    assert "top_label" in doc["skipped"] and "whole-number" in doc["skipped"]["top_label"]
