"""``calib temperature`` and ``calib eval --temperature`` through Click's CliRunner.

The commands' numbers are compared with the library's bit for bit: they are the same path (the same
fit and `evaluate` on the same arrays; logits divided by T as they are read are the same float64
quotients as apply_temperature's, evaluated by the same pass), not two engines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from calibrate_cli import evaluate
from calibrate_cli.cli import cli
from calibrate_cli.calibrators import load_calibrator
from calibrate_cli.data.probabilities import softmax
from calibrate_cli.calibrators.temperature_fit import apply_temperature, fit_temperature
from cli_helpers import one_line_error  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"


def reference(name: str) -> str:
    path = REFERENCE / name
    if not path.exists():
        pytest.skip(f"reference data {path} not available")
    return str(path)


def synthetic(n, k, seed, scale=3.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), labels] += 1.5
    return (scale * logits).astype(np.float32), labels


@pytest.fixture
def files(tmp_path):
    val, val_y = synthetic(400, 5, 0)
    test, test_y = synthetic(300, 5, 1)
    paths = {}
    for name, array in {"val": val, "val_y": val_y, "test": test, "test_y": test_y}.items():
        paths[name] = str(tmp_path / f"{name}.npy")
        np.save(paths[name], array)
    paths["arrays"] = (val, val_y, test, test_y)
    return paths


def run(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result


def test_json_equals_the_library(files):
    val, val_y, test, test_y = files["arrays"]
    result = run("temperature", files["val"], files["val_y"], "--test", files["test"], files["test_y"], "-f", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    fit = fit_temperature(val, val_y)
    assert doc["temperature"] == fit.temperature
    assert (doc["search"], doc["objective"], doc["n_bins"]) == ("grid", "ece", 15)
    assert doc["fit"] == {"before": evaluate(val, val_y).metrics, "after": evaluate(apply_temperature(val, fit.temperature), val_y).metrics}
    assert doc["test"] == {"before": evaluate(test, test_y).metrics, "after": evaluate(apply_temperature(test, fit.temperature), test_y).metrics}
    assert doc["calibration"] == json.loads(json.dumps(fit.to_dict()))
    assert doc["inputs"]["test"] == {"scores": files["test"], "labels": files["test_y"], "n": 300, "k": 5}
    assert {"calib_version", "conventions", "warnings"} <= set(doc)


def test_table_shows_pre_and_post(files):
    result = run("temperature", files["val"], files["val_y"], "--test", files["test"], files["test_y"], "--search", "nll")
    assert result.exit_code == 0, result.output
    t = fit_temperature(*files["arrays"][:2], search="nll").temperature
    for text in ("Pre T", "test", f"Post T ({t:.4g})", "ECE", "Classwise-ECE", "S99 accuracy"):
        assert text in result.stdout


def test_csv_and_markdown(files):
    csv_out = run("temperature", files["val"], files["val_y"], "-f", "csv")
    assert csv_out.exit_code == 0
    rows = [line.split(",") for line in csv_out.stdout.splitlines()]
    assert rows[0] == ["metric", "fit_before", "fit_after"]
    assert [r[0] for r in rows[1:4]] == ["accuracy", "error", "ece"]
    assert rows[1][1] == rows[1][2]  # accuracy unchanged
    md = run("temperature", files["val"], files["val_y"], "-f", "markdown")
    assert md.exit_code == 0 and "| metric | fit Pre T | fit Post T (" in md.stdout


def test_output_json_is_readable_by_load_calibrator_and_eval(files, tmp_path):
    out = tmp_path / "t.json"
    result = run("temperature", files["val"], files["val_y"], "--search", "nll", "-o", out)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # with -o, the report goes to the file only (docs/cli-contract.md)
    t = load_calibrator(str(out)).temperature
    assert t == fit_temperature(*files["arrays"][:2], search="nll").temperature
    ev = run("eval", files["test"], files["test_y"], "--temperature", out, "-f", "json")
    assert ev.exit_code == 0, ev.output
    test, test_y = files["arrays"][2:]
    assert json.loads(ev.stdout)["metrics"] == evaluate(apply_temperature(test, t), test_y).metrics
    # never overwrite without --force, and refuse before doing the work
    again = run("temperature", files["val"], files["val_y"], "-o", out)
    one_line_error(again, "already exists; use --force")
    assert load_calibrator(str(out)).temperature == t
    assert run("temperature", files["val"], files["val_y"], "-o", out, "--force").exit_code == 0
    assert load_calibrator(str(out)).temperature == fit_temperature(*files["arrays"][:2]).temperature


def test_save_logits(files, tmp_path):
    saved = tmp_path / "scaled.npy"
    result = run("temperature", files["val"], files["val_y"], "--test", files["test"], files["test_y"], "--save-logits", saved)
    assert result.exit_code == 0, result.output
    t = fit_temperature(*files["arrays"][:2]).temperature
    assert np.array_equal(np.load(saved), files["arrays"][2].astype(np.float64) / t)
    one_line_error(run("temperature", files["val"], files["val_y"], "--save-logits", saved), "already exists")
    assert np.array_equal(np.load(saved), files["arrays"][2].astype(np.float64) / t)  # untouched
    assert run("temperature", files["val"], files["val_y"], "--save-logits", saved, "--force").exit_code == 0
    assert np.array_equal(np.load(saved), files["arrays"][0].astype(np.float64) / t)  # no --test: the fitting set
    one_line_error(run("temperature", files["val"], files["val_y"], "--save-logits", tmp_path / "x.txt"), ".npy")


def test_probs_with_exact_zeros(tmp_path):
    probs = np.array([[0.7, 0.3, 0.0], [0.1, 0.0, 0.9], [0.5, 0.25, 0.25], [0.0, 0.6, 0.4]] * 5)
    labels = np.array([0, 2, 1, 1] * 5)
    np.save(tmp_path / "p.npy", probs)
    np.save(tmp_path / "y.npy", labels)
    saved = tmp_path / "scaled.npy"
    result = run("temperature", tmp_path / "p.npy", tmp_path / "y.npy", "--probs", "--save-logits", saved, "-f", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    t = doc["temperature"]
    scaled = np.load(saved)
    powered = probs ** (1 / t)
    assert scaled == pytest.approx(powered / powered.sum(axis=1, keepdims=True), abs=1e-15)
    assert np.array_equal(scaled == 0, probs == 0)
    assert doc["fit"]["before"] == evaluate(probs, labels, input_kind="probs").metrics
    # a true-class probability of 0 cannot be fitted by NLL: one-line error
    bad = labels.copy()
    bad[0] = 2
    np.save(tmp_path / "bad.npy", bad)
    one_line_error(run("temperature", tmp_path / "p.npy", tmp_path / "bad.npy", "--probs", "--search", "nll"), "probability 0")


def test_platt_and_vector_in_the_same_table(tmp_path):
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 2, 500)
    scores = 3 * (labels - 0.5) + rng.normal(0, 1.5, 500)
    np.save(tmp_path / "s.npy", scores)
    np.save(tmp_path / "y.npy", labels)
    platt = run("temperature", tmp_path / "s.npy", tmp_path / "y.npy", "--search", "platt", "-f", "json")
    assert platt.exit_code == 0, platt.output
    doc = json.loads(platt.stdout)
    fit = fit_temperature(scores, labels, search="platt")
    assert doc["temperature"] is None and doc["calibration"]["platt"]["a"] == fit.parameters["a"]
    assert doc["fit"]["after"] == evaluate(fit.transform(scores), labels).metrics
    table = run("temperature", tmp_path / "s.npy", tmp_path / "y.npy", "--search", "vector")
    assert table.exit_code == 0 and "Post vector scaling" in table.stdout


def test_compat_reference_through_the_cli():
    name = "cifar10_cleanlab"
    result = run(
        "temperature", reference(f"{name}_val_logits.npy"), reference(f"{name}_val_labels.npy"),
        "--test", reference(f"{name}_test_logits.npy"), reference(f"{name}_test_labels.npy"),
        "--compat", "focal-calibration", "-f", "json",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["temperature"] == 1.5
    after = doc["test"]["after"]
    got = [after[m] for m in ("ece", "adaece", "classwise_ece", "nll")]
    assert got == pytest.approx([0.013217, 0.008294, 0.005099, 0.202297], abs=2.5e-6)


def test_boundary_warning_on_stderr(files):
    result = run("temperature", files["val"], files["val_y"], "--grid", "0.1:0.3:0.1")
    assert result.exit_code == 0
    assert "Warning:" in result.stderr and "upper boundary" in result.stderr


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--grid", "0:1:0.1"], "start must be > 0"),
        (["--grid", "1:0.5:0.1"], "must be ≥ start"),
        (["--grid", "abc"], "START:STOP:STEP"),
        (["--search", "nll", "--objective", "ece"], "works with the grid search only; use --search grid"),
        (["--search", "platt"], "Platt scaling is for binary"),
    ],
)
def test_bad_options_exit_2_with_one_line(files, extra, fragment):
    one_line_error(run("temperature", files["val"], files["val_y"], *extra), fragment)


def test_k_mismatch_is_an_error(files, tmp_path):
    np.save(tmp_path / "k3.npy", files["arrays"][2][:, :3])
    np.save(tmp_path / "k3_y.npy", files["arrays"][3] % 3)
    result = run("temperature", files["val"], files["val_y"], "--test", tmp_path / "k3.npy", tmp_path / "k3_y.npy")
    one_line_error(result, "K = 3 classes but the fitting set")


def test_missing_and_bad_files(files, tmp_path):
    one_line_error(run("temperature", tmp_path / "nope.npy", files["val_y"]), "nope.npy: no such file")
    one_line_error(run("temperature", files["val"], files["val_y"], "--test", files["test"], tmp_path / "no.npy"), "no.npy: no such file")
    np.save(tmp_path / "short.npy", files["arrays"][1][:10])
    one_line_error(run("temperature", files["val"], tmp_path / "short.npy"), "10 labels")


def test_eval_temperature_option(files, tmp_path):
    test, test_y = files["arrays"][2:]
    result = run("eval", files["test"], files["test_y"], "--temperature", "1.5", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["metrics"] == evaluate(apply_temperature(test, 1.5), test_y).metrics
    one_line_error(run("eval", files["test"], files["test_y"], "--temperature", "0"), "temperature must be finite and > 0")
    one_line_error(run("eval", files["test"], files["test_y"], "--temperature", tmp_path / "none.json"), "no such file")
    probs = softmax(test)
    np.save(tmp_path / "p.npy", probs)
    result = run("eval", tmp_path / "p.npy", files["test_y"], "--probs", "--temperature", "2", "-f", "json")
    assert result.exit_code == 0, result.output
    expected = evaluate(apply_temperature(test, 2.0), test_y).metrics
    assert json.loads(result.stdout)["metrics"] == pytest.approx(expected, abs=1e-12)


def test_help_lists_the_command():
    assert "temperature" in run("--help").stdout
    text = run("temperature", "--help").stdout
    assert "Examples:" in text and "--save-logits" in text


def test_temperature_plot_before_after(tmp_path):
    from click.testing import CliRunner

    from calibrate_cli.cli import cli

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    x = rng.normal(size=(200, 3)) * 4
    x[np.arange(200), y] += 2
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    out = tmp_path / "ba.png"
    args = ["temperature", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--search", "nll", "--plot", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 2 and "--force" in again.stderr
    assert CliRunner().invoke(cli, args + ["--force"]).exit_code == 0


# ---------------------------------------------------------------------------------------------
# Saved fits of every method reapplied by `calib eval` / `calib plot` (issue 19, item 4)


def naive_vector(z, w, b):
    """w ⊙ z + b per class, by hand (no calib code)."""
    return np.asarray(z, dtype=np.float64) * np.array(w) + np.array(b)


def test_a_saved_vector_fit_is_reapplied_by_eval(files, tmp_path):
    saved = tmp_path / "v.json"
    fitted = run("temperature", files["val"], files["val_y"], "--search", "vector",
                 "--test", files["test"], files["test_y"], "-o", saved)
    assert fitted.exit_code == 0, fitted.output
    doc = json.loads(saved.read_text())
    test, test_y = files["arrays"][2:]
    by_hand = evaluate(naive_vector(test, doc["calibration"]["vector"]["w"], doc["calibration"]["vector"]["b"]), test_y).metrics
    for option in ("--temperature", "--calibrator"):
        ev = run("eval", files["test"], files["test_y"], option, saved, "-f", "json")
        assert ev.exit_code == 0, ev.output
        metrics = json.loads(ev.stdout)["metrics"]
        assert metrics == doc["test"]["after"]  # the Post column of the fit's own test evaluation
        assert metrics == pytest.approx(by_hand, abs=1e-12)
    # the calibrator was fitted on K = 5: other K is one clear line
    np.save(tmp_path / "k3.npy", test[:, :3])
    np.save(tmp_path / "k3_y.npy", test_y % 3)
    one_line_error(run("eval", tmp_path / "k3.npy", tmp_path / "k3_y.npy", "--calibrator", saved), "fitted on K = 5")


def test_a_saved_platt_fit_is_reapplied_by_eval_and_plot(tmp_path):
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 2, 500)
    scores = 3 * (labels - 0.5) + rng.normal(0, 1.5, 500)
    np.save(tmp_path / "s.npy", scores)
    np.save(tmp_path / "y.npy", labels)
    saved = tmp_path / "p.json"
    fitted = run("temperature", tmp_path / "s.npy", tmp_path / "y.npy", "--search", "platt", "-o", saved)
    assert fitted.exit_code == 0, fitted.output
    doc = json.loads(saved.read_text())
    a, b = doc["calibration"]["platt"]["a"], doc["calibration"]["platt"]["b"]
    ev = run("eval", tmp_path / "s.npy", tmp_path / "y.npy", "--temperature", saved, "-f", "json")
    assert ev.exit_code == 0, ev.output
    metrics = json.loads(ev.stdout)["metrics"]
    assert metrics == doc["fit"]["after"]
    assert metrics == pytest.approx(evaluate(a * scores + b, labels).metrics, abs=1e-12)  # σ(a·s + b) by hand
    # probabilities in: the same map through log p
    p1 = 1 / (1 + np.exp(-scores))
    np.save(tmp_path / "p1.npy", p1)
    ev = run("eval", tmp_path / "p1.npy", tmp_path / "y.npy", "--probs", "--calibrator", saved, "-f", "json")
    assert ev.exit_code == 0, ev.output
    assert json.loads(ev.stdout)["metrics"] == pytest.approx(metrics, abs=1e-9)
    out = tmp_path / "platt.svg"
    plotted = run("plot", tmp_path / "s.npy", tmp_path / "y.npy", "--temperature", saved, "-o", out)
    assert plotted.exit_code == 0, plotted.output
    assert b"After: Platt (a = " in out.read_bytes()


def test_plot_with_a_saved_vector_fit(files, tmp_path):
    saved = tmp_path / "v.json"
    assert run("temperature", files["val"], files["val_y"], "--search", "vector", "-o", saved).exit_code == 0
    out = tmp_path / "v.svg"
    result = run("plot", files["test"], files["test_y"], "--calibrator", saved, "-o", out, "--overlay")
    assert result.exit_code == 0, result.output
    assert b"After: vector scaling" in out.read_bytes()


@pytest.mark.parametrize(
    "document, fragment",
    [
        ({"temperature": True}, "temperature must be a number, got true"),
        ({"temperature": "1.5"}, "temperature must be a number, got \"1.5\""),
        ({"temperature": None}, "temperature must be a number, got null"),
        ({"temperature": -2}, "temperature must be finite and > 0"),
        ({"ece": 0.1}, "no saved calibration"),
        ({"search": "platt", "temperature": None}, "a platt calibration needs its parameters under \"platt\""),
        ({"method": "vector", "vector": {"w": [1, 2], "b": [0]}}, "same length"),
        ({"method": "enir"}, "unknown calibration method 'enir'"),  # (bbq became a method)
        ([1.5], "expected a JSON object"),
    ],
)
def test_bad_saved_calibrations_are_one_line(files, tmp_path, document, fragment):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    for command in (["eval"], ["plot", "-o", tmp_path / "f.png"]):
        result = run(*command, files["test"], files["test_y"], "--temperature", path)
        one_line_error(result, fragment)
        assert f"{path}: " in result.stderr
    assert not (tmp_path / "f.png").exists()


def test_old_and_minimal_temperature_files_still_work(files, tmp_path):
    test, test_y = files["arrays"][2:]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"temperature": 1.25}))
    ev = run("eval", files["test"], files["test_y"], "--temperature", path, "-f", "json")
    assert ev.exit_code == 0, ev.output
    assert json.loads(ev.stdout)["metrics"] == evaluate(apply_temperature(test, 1.25), test_y).metrics
    assert load_calibrator(str(path)).temperature == 1.25


def test_csv_has_the_fitted_parameters(files, tmp_path):
    result = run("temperature", files["val"], files["val_y"], "--search", "nll", "--test", files["test"],
                 files["test_y"], "-f", "csv")
    assert result.exit_code == 0, result.output
    rows = {line.split(",")[0]: line.split(",")[1:] for line in result.stdout.splitlines()}
    t = fit_temperature(*files["arrays"][:2], search="nll").temperature
    assert rows["temperature"] == ["1.0", repr(t), "1.0", repr(t)]  # Pre T is T = 1
    vector = run("temperature", files["val"], files["val_y"], "--search", "vector", "-f", "csv")
    lines = [line.split(",") for line in vector.stdout.splitlines()]
    names = [r[0] for r in lines]
    assert names[-10:] == [f"vector_{p}_{k}" for p in "wb" for k in range(5)]
    assert [r[1] for r in lines[-10:]] == ["1.0"] * 5 + ["0.0"] * 5  # the identity before
    fit = fit_temperature(*files["arrays"][:2], search="vector")
    assert [float(r[2]) for r in lines[-10:]] == fit.parameters["w"] + fit.parameters["b"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("search", ["grid", "nll"])
def test_after_is_evaluated_as_read_and_equals_the_divided_array(dtype, search, monkeypatch):
    """Without --save-logits the calibrated set is never written: its logits are divided chunk by
    chunk as they are read (Predictions.divided). The report must equal, bit for bit, the report of
    the divided array evaluated as before (one path: the same quotients through the same pass, in
    other chunks); chunks of a few rows so that many chunks are read."""
    import calibrate_cli.data.predictions as predictions_module
    from calibrate_cli.cli.prepost import before_after
    from calibrate_cli.data.predictions import as_predictions

    monkeypatch.setattr(predictions_module, "_CHUNK_ELEMENTS", 64)
    x, y = synthetic(500, 7, seed=3)
    x = (x * 3).astype(dtype)
    predictions = as_predictions(x, y, "logits")
    fit = fit_temperature(predictions, None, search=search)
    before, after, none = before_after(fit, x, predictions, "logits", 15, None, "x.npy", keep_scores=False)
    assert none is None
    expected = evaluate(apply_temperature(x, fit.temperature), y)
    assert after.metrics == expected.metrics
    for got, want in ((after.bins, expected.bins), (after.adaptive_bins, expected.adaptive_bins)):
        for field in ("edges", "count", "sum_conf", "sum_correct"):
            assert np.array_equal(getattr(got, field), getattr(want, field))
    assert after.classwise_ece_per_class == expected.classwise_ece_per_class
    kept_before, kept_after, scores = before_after(fit, x, predictions, "logits", 15, None, "x.npy")
    assert np.array_equal(scores, apply_temperature(x, fit.temperature))
    assert kept_after.metrics == after.metrics and kept_before.metrics == before.metrics


def test_binary_log_odds_are_evaluated_as_read_too():
    """A 1-D vector of log-odds becomes the columns [0, s]; divided as read they are [0, s/T]: the same
    report, bit for bit, as the calibrated vector evaluated (and the same 0.0 in the first column)."""
    from calibrate_cli.cli.prepost import before_after
    from calibrate_cli.data.predictions import as_predictions

    rng = np.random.default_rng(8)
    y = rng.integers(0, 2, 700)
    s = (rng.normal(size=700) * 3 + (2 * y - 1)).astype(np.float32)
    predictions = as_predictions(s, y, "logits")
    fit = fit_temperature(predictions, None, search="nll")
    _, after, none = before_after(fit, s, predictions, "logits", 15, None, "s.npy", keep_scores=False)
    assert none is None
    assert after.metrics == evaluate(apply_temperature(s, fit.temperature), y).metrics


def test_scaled_rows_read_the_rows_of_the_divided_array():
    from calibrate_cli.data.predictions import ScaledRows

    x = np.random.default_rng(0).normal(size=(37, 5)).astype(np.float32) * 40
    scaled = ScaledRows(x, 0.37)
    divided = apply_temperature(x, 0.37)
    assert scaled.shape == (37, 5) and scaled.dtype == np.float64 and scaled.nbytes == divided.nbytes
    for rows in (slice(0, 37), slice(3, 9), slice(36, 37), slice(5, 5)):
        assert np.array_equal(scaled[rows], divided[rows])
    assert np.array_equal(np.asarray(scaled), divided)
    with pytest.raises(TypeError):
        scaled[3]
