"""`calib fit`: one method (the Pre/Post table of `calib temperature`) or every method in one table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibrate_cli import evaluate
from calibrate_cli.calibrators import fit, load_calibrator
from calibrate_cli.cli import cli
from calibrate_cli.cli.render import json_ready

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
VAL = [str(SAMPLE / "val_logits.npy"), str(SAMPLE / "val_labels.npy")]
TEST = [str(SAMPLE / "test_logits.npy"), str(SAMPLE / "test_labels.npy")]


def _write(tmp_path, n=600, k=3, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k)) * 3
    logits[np.arange(n), labels] += 3
    paths = {}
    for name, array in {"val": logits[: n // 2], "val_y": labels[: n // 2], "test": logits[n // 2:], "test_y": labels[n // 2:]}.items():
        paths[name] = str(tmp_path / f"{name}.npy")
        np.save(paths[name], array)
    return paths, logits, labels


def test_fit_temperature_prints_the_table_of_calib_temperature(runner):
    a = runner.invoke(cli, ["fit", *VAL, "--method", "temperature", "--test", *TEST], env={"COLUMNS": "200"})
    b = runner.invoke(cli, ["temperature", *VAL, "--test", *TEST], env={"COLUMNS": "200"})
    assert a.exit_code == 0 and b.exit_code == 0, a.stderr
    assert a.stdout.splitlines()[1:] == b.stdout.splitlines()[1:]  # the same table under its own title
    a = runner.invoke(cli, ["fit", *VAL, "--method", "temperature", "--test", *TEST, "-f", "csv"])
    b = runner.invoke(cli, ["temperature", *VAL, "--test", *TEST, "-f", "csv"])
    assert a.stdout == b.stdout


@pytest.mark.parametrize("method", ["isotonic", "histogram", "bbq", "dirichlet", "ensemble_ts"])
def test_fit_saves_a_calibrator_that_eval_and_plot_apply(runner, tmp_path, method):
    paths, _, _ = _write(tmp_path)
    out = tmp_path / "c.json"
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", method, "--test", paths["test"],
                            paths["test_y"], "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    saved = json.loads(out.read_text())
    expected = fit(method, np.load(paths["val"]), np.load(paths["val_y"]))
    assert saved["calibration"] == json.loads(json.dumps(expected.to_dict()))
    # the test set's "after" column equals evaluate on the method's own output
    cal = load_calibrator(str(out))
    direct = evaluate(cal.apply(np.load(paths["test"])), np.load(paths["test_y"]), input_kind=cal.result_kind("logits"))
    assert saved["test"]["after"] == json_ready(dict(direct.metrics))
    e = runner.invoke(cli, ["eval", paths["test"], paths["test_y"], "--calibrator", str(out), "-f", "json"])
    assert e.exit_code == 0, e.stderr
    assert json.loads(e.stdout)["metrics"] == saved["test"]["after"]
    p = runner.invoke(cli, ["plot", paths["test"], paths["test_y"], "--calibrator", str(out), "-o", str(tmp_path / "p.png")])
    assert p.exit_code == 0, p.stderr


def test_beta_on_more_than_two_classes_is_one_line_exit_2(runner, tmp_path):
    paths, _, _ = _write(tmp_path)
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "beta"])
    assert r.exit_code == 2
    assert r.stderr.strip().count("\n") == 0 and "beta calibration is for binary problems" in r.stderr


def test_histogram_with_too_few_samples_is_exit_2(runner, tmp_path):
    paths, _, _ = _write(tmp_path, n=100)
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "histogram", "--n-bins", "15"])
    assert r.exit_code == 2 and "needs at least 75 fitting samples" in r.stderr and "Traceback" not in r.stderr


def test_method_all_on_the_sample(runner, tmp_path):
    """Every applicable method in one table (its speed is measured by benchmarks/, not here)."""
    r = runner.invoke(cli, ["fit", *VAL, "--method", "all", "--test", *TEST, "-f", "json", "-o", str(tmp_path / "all.json")])
    assert r.exit_code == 0, r.stderr
    doc = json.loads((tmp_path / "all.json").read_text())
    assert set(doc["skipped"]) == {"platt", "beta"}  # K = 10: binary methods do not apply
    assert set(doc["methods"]) == {"temperature", "vector", "histogram", "histogram_mass", "isotonic", "bbq", "matrix",
                                   "dirichlet", "ensemble_ts"}
    # the best per column, recomputed from the JSON (lower is better for every default column)
    rows = {"uncalibrated": doc["uncalibrated"]["metrics"], **{m: d["metrics"] for m, d in doc["methods"].items()}}
    for metric, best in doc["best"].items():
        values = {m: float(v[metric]) for m, v in rows.items()}
        assert best == [m for m, v in values.items() if v == min(values.values())]
    # the saved calibration is the selected one: best test ECE
    eces = {m: d["metrics"]["ece"] for m, d in doc["methods"].items()}
    assert doc["selected"] == min(eces, key=eces.get)
    assert doc["calibration"] == doc["methods"][doc["selected"]]["calibration"]
    assert load_calibrator(str(tmp_path / "all.json")).name == doc["selected"]
    # each method's row equals a fit of that method alone
    iso = fit("isotonic", np.load(VAL[0]), np.load(VAL[1]))
    direct = evaluate(iso.apply(np.load(TEST[0])), np.load(TEST[1]), input_kind="probs")
    assert doc["methods"]["isotonic"]["metrics"] == json_ready(dict(direct.metrics))


def test_method_all_table_marks_the_best_and_bootstrap_adds_intervals(runner, tmp_path):
    paths, _, _ = _write(tmp_path)
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "all", "--test", paths["test"], paths["test_y"],
                            "--metrics", "ece,nll", "-f", "markdown", "--bootstrap", "50"])
    assert r.exit_code == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("| ")]
    assert lines[0] == "| method | ECE | NLL |"
    assert sum(line.count("**") for line in lines) >= 4  # a bold best in each of the two columns
    assert all("[" in line for line in lines[1:])  # intervals
    csv = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "all", "--metrics", "ece,nll", "-f", "csv"])
    assert csv.stdout.splitlines()[0] == "method,ece,nll,best,parameters"
    assert "uncalibrated" in csv.stdout and ",beta," not in csv.stdout


def test_unknown_metric_is_a_usage_error(runner):
    r = runner.invoke(cli, ["fit", *VAL, "--method", "all", "--metrics", "ece,bogus"])
    assert r.exit_code == 2 and "unknown metric bogus" in r.stderr
