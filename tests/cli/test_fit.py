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


def _folds_by_hand(labels, n_folds, seed):
    """docs/calibrators.md: shuffle (default_rng(seed)), group by label keeping that order, deal 0, 1, …"""
    order = list(np.random.default_rng(seed).permutation(len(labels)))
    order.sort(key=lambda i: labels[i])  # Python's sort is stable
    folds = np.empty(len(labels), dtype=int)
    for position, i in enumerate(order):
        folds[i] = position % n_folds
    return folds


def _cv_by_hand(method, logits, labels, folds, metric="ece", **options):
    out = np.empty(logits.shape)
    for f in range(folds.max() + 1):
        held = folds == f
        out[held] = fit(method, logits[~held], labels[~held], **options).predict_proba(logits[held])
    return evaluate(out, labels, input_kind="probs").metrics[metric]


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
                                   "dirichlet", "ensemble_ts", "top_label"}
    # the best per column, recomputed from the JSON (lower is better for every default column)
    rows = {"uncalibrated": doc["uncalibrated"]["metrics"], **{m: d["metrics"] for m, d in doc["methods"].items()}}
    for metric, best in doc["best"].items():
        values = {m: float(v[metric]) for m, v in rows.items()}
        assert best == [m for m, v in values.items() if v == min(values.values())]
    # the saved calibration is the selected one: the best 5-fold cross-validated ECE on the fitting set,
    # recomputed here (folds by the documented rule, each method fitted on 4 folds, ECE of the out-of-fold
    # predictions), never the test set's
    assert doc["selection"] == {"rule": "cross-validation", "metric": "ece", "folds": 5, "seed": 0, "stratified": True,
                                "on": "fit", "values": {"uncalibrated": doc["selection"]["values"]["uncalibrated"],
                                                        **{m: d["cv"] for m, d in doc["methods"].items()}}}
    logits, labels = np.load(VAL[0]), np.load(VAL[1])
    folds = _folds_by_hand(labels, 5, 0)
    for method in ("temperature", "histogram", "isotonic"):
        assert doc["methods"][method]["cv"] == pytest.approx(_cv_by_hand(method, logits, labels, folds), abs=1e-12)
    cvs = {m: d["cv"] for m, d in doc["methods"].items()}
    assert doc["selected"] == min(cvs, key=cvs.get)
    assert doc["selection"]["values"]["uncalibrated"] == pytest.approx(evaluate(logits, labels).metrics["ece"], abs=1e-15)
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
    assert lines[0] == "| method | ECE | NLL | CV ECE |"  # the last: the cross-validated value that chooses
    assert sum(line.count("**") for line in lines) >= 4  # a bold best in each of the two columns
    assert all("[" in line for line in lines[1:])  # intervals
    csv = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "all", "--metrics", "ece,nll", "-f", "csv"])
    assert csv.stdout.splitlines()[0] == "method,ece,nll,best,parameters,cv_ece"
    assert "uncalibrated" in csv.stdout and ",beta," not in csv.stdout


def test_unknown_metric_is_a_usage_error(runner):
    r = runner.invoke(cli, ["fit", *VAL, "--method", "all", "--metrics", "ece,bogus"])
    assert r.exit_code == 2 and "unknown metric bogus" in r.stderr


def test_method_all_selects_on_the_fitting_set_whatever_the_test_set(runner, tmp_path):
    """Before: the test set chose when given (optimistic), else the fitting set (in-sample) — silently."""
    paths, _, _ = _write(tmp_path)
    docs = {}
    for name, extra in {"with": ["--test", paths["test"], paths["test_y"]], "without": []}.items():
        r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "all", *extra, "-f", "json"])
        assert r.exit_code == 0, r.stderr
        docs[name] = json.loads(r.stdout)
    assert docs["with"]["selected"] == docs["without"]["selected"]
    assert docs["with"]["selection"] == docs["without"]["selection"]
    assert docs["with"]["evaluated_on"] == "test" and docs["without"]["evaluated_on"] == "fit"
    table = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "all"], env={"COLUMNS": "250"})
    title = table.stdout.splitlines()[0]
    assert "(in-sample, optimistic: give --test)" in title
    assert f"selected by 5-fold cross-validated ECE on the fitting set: {docs['without']['selected']}" in title


def test_method_all_folds_and_seed_change_the_folds(runner, tmp_path):
    paths, logits, labels = _write(tmp_path)
    val, val_y = np.load(paths["val"]), np.load(paths["val_y"])
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "all", "--folds", "3", "--seed", "7",
                            "--select", "nll", "-f", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["selection"]["folds"], doc["selection"]["seed"], doc["selection"]["metric"]) == (3, 7, "nll")
    expected = _cv_by_hand("vector", val, val_y, _folds_by_hand(val_y, 3, 7), metric="nll")
    assert doc["methods"]["vector"]["cv"] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("args, message", [
    (["--folds", "1"], "--folds"),
    (["--select", "mean_confidence"], "--select"),  # no better direction: it cannot choose
])
def test_method_all_bad_selection_options_are_usage_errors(runner, args, message):
    r = runner.invoke(cli, ["fit", *VAL, "--method", "all", *args])
    assert r.exit_code == 2 and message in r.stderr


def test_method_all_more_folds_than_samples_is_one_line(runner, tmp_path):
    paths, _, _ = _write(tmp_path, n=40)
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "all", "--folds", "30"])
    assert r.exit_code == 2 and r.stderr.strip().count("\n") == 0
    assert "30 folds need at least 30 fitting samples, got 20" in r.stderr


def _forest_like(tmp_path, n=1200, k=4, seed=2):
    """Probabilities as a random forest's (votes of 10 trees: exact 0s and 1s), split val / test."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    votes = np.zeros((n, k))
    for _ in range(10):
        right = rng.random(n) < 0.5
        votes[np.arange(n), np.where(right, labels, rng.integers(0, k, n))] += 1
    probs = votes / 10
    paths = {}
    for name, array in {"val": probs[: n // 2], "val_y": labels[: n // 2], "test": probs[n // 2:],
                        "test_y": labels[n // 2:]}.items():
        paths[name] = str(tmp_path / f"{name}.npy")
        np.save(paths[name], array)
    return paths


def test_bbq_on_forest_probabilities_keeps_the_accuracy(runner, tmp_path):
    """Issue #32: before, a raw RuntimeWarning, then accuracy 1/K (every row uniform), NLL = log K."""
    paths = _forest_like(tmp_path)
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--probs", "--method", "bbq", "--test", paths["test"],
                            paths["test_y"], "-f", "json"])
    assert r.exit_code == 0, r.stderr
    assert "RuntimeWarning" not in r.stderr and "Warning" not in r.stderr
    doc = json.loads(r.stdout)
    before, after = doc["test"]["before"], doc["test"]["after"]
    assert after["accuracy"] >= before["accuracy"] - 0.01 and after["nll"] < before["nll"]
    assert after["nll"] < np.log(4) - 0.5


def test_a_method_that_fails_is_reported_and_never_selected(runner, tmp_path, monkeypatch):
    """The BBQ of issue #32 (its Beta terms as gammaln(c + a) − gammaln(a): NaN at a = 0), put back:
    --method all names it as failed with the reason, never in the table, never the calibration."""
    from scipy.special import gammaln

    from calibrate_cli.calibrators import bbq

    monkeypatch.setattr(bbq, "_log_rising", lambda count, a: gammaln(count + a) - gammaln(a))
    paths = _forest_like(tmp_path)
    out = tmp_path / "best.json"
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--probs", "--method", "all", "--test", paths["test"],
                            paths["test_y"], "--select", "ece", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    assert "RuntimeWarning" not in r.stderr
    assert "Warning: failed bbq: " in r.stderr and "the bbq fit " in r.stderr
    doc = json.loads(out.read_text())
    assert "bbq" in doc["failed"] and "bbq" not in doc["methods"] and doc["selected"] != "bbq"
    assert doc["calibration"]["method"] == doc["selected"]
    assert "null" not in json.dumps(doc["calibration"])
    e = runner.invoke(cli, ["eval", paths["test"], paths["test_y"], "--probs", "--calibrator", str(out), "-f", "json"])
    assert e.exit_code == 0, e.stderr
    assert json.loads(e.stdout)["metrics"]["accuracy"] == doc["methods"][doc["selected"]]["metrics"]["accuracy"]


def test_a_degenerate_single_fit_is_one_line_exit_2(runner, tmp_path):
    paths, _, _ = _write(tmp_path)
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "histogram", "--n-bins", "1"])
    assert r.exit_code == 2 and r.stderr.strip().count("\n") == 0
    assert r.stderr.startswith("Error: ") and "histogram fit is degenerate" in r.stderr


def test_a_calibrator_fitted_on_probabilities_remembers_it(runner, tmp_path):
    """Issue #32 item 4: the saved kind, used by calib eval / plot --calibrator and calib fit --test."""
    paths, logits, labels = _write(tmp_path)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = e / e.sum(axis=1, keepdims=True)
    for name, array in {"val_p": probs[:300], "test_p": probs[300:]}.items():
        paths[name] = str(tmp_path / f"{name}.npy")
        np.save(paths[name], array)
    for method in ("vector", "isotonic"):
        out = tmp_path / f"{method}.json"
        r = runner.invoke(cli, ["fit", paths["val_p"], paths["val_y"], "--probs", "--method", method, "--test",
                                paths["test_p"], paths["test_y"], "-o", str(out)])
        assert r.exit_code == 0, r.stderr
        doc = json.loads(out.read_text())
        assert doc["calibration"]["input_kind"] == "probs"
        # the "after" numbers: the map of log p fitted as logits, applied to log test_p (by hand)
        reference = fit(method, np.log(probs[:300]), labels[:300])
        expected = evaluate(reference.predict_proba(np.log(probs[300:])), labels[300:], input_kind="probs").metrics
        assert doc["test"]["after"]["ece"] == pytest.approx(expected["ece"], abs=1e-9)
        ev = runner.invoke(cli, ["eval", paths["test_p"], paths["test_y"], "--probs", "--calibrator", str(out), "-f", "json"])
        assert ev.exit_code == 0, ev.stderr
        assert json.loads(ev.stdout)["metrics"]["ece"] == pytest.approx(expected["ece"], abs=1e-9)
        assert load_calibrator(str(out)).predict_proba(probs[300:]) == pytest.approx(
            reference.predict_proba(np.log(probs[300:])), abs=1e-9)
    # vector scaling of log p is another map of logits: logits are refused, one line, naming the remedy
    for command in (["eval", paths["test"], paths["test_y"]], ["plot", paths["test"], paths["test_y"], "-o", str(tmp_path / "p.png")]):
        r = runner.invoke(cli, [*command, "--calibrator", str(tmp_path / "vector.json")])
        assert r.exit_code == 2 and r.stderr.strip().count("\n") == 0, r.stderr
        assert "fitted on probabilities" in r.stderr and "--probs" in r.stderr
    # isotonic sees softmax only: the same model's logits give the same numbers
    ev = runner.invoke(cli, ["eval", paths["test"], paths["test_y"], "--calibrator", str(tmp_path / "isotonic.json"), "-f", "json"])
    assert ev.exit_code == 0, ev.stderr


def test_an_old_calibration_without_its_kind_is_read_as_logits(runner, tmp_path):
    paths, _, _ = _write(tmp_path)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"method": "vector", "k": 3, "vector": {"w": [1.0, 2.0, 0.5], "b": [0.0, 0.1, -0.1]}}))
    r = runner.invoke(cli, ["eval", paths["test"], paths["test_y"], "--calibrator", str(old), "-f", "json"])
    assert r.exit_code == 0, r.stderr
    z = np.load(paths["test"]) * np.array([1.0, 2.0, 0.5]) + np.array([0.0, 0.1, -0.1])
    assert json.loads(r.stdout)["metrics"]["ece"] == pytest.approx(evaluate(z, np.load(paths["test_y"])).metrics["ece"], abs=1e-12)


def test_method_all_says_when_no_method_beats_the_uncalibrated_model(runner):
    # accuracy: a temperature keeps every argmax, so at best a tie with the uncalibrated model
    r = runner.invoke(cli, ["fit", *VAL, "--method", "all", "--select", "accuracy", "-f", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    uncalibrated = evaluate(np.load(VAL[0]), np.load(VAL[1])).metrics["accuracy"]
    assert doc["selection"]["values"]["uncalibrated"] == uncalibrated
    assert doc["selection"]["values"]["temperature"] == uncalibrated  # T never changes the argmax
    assert max(v for v in doc["selection"]["values"].values()) == uncalibrated
    assert any(w.startswith("no method improves the uncalibrated accuracy under cross-validation") for w in doc["warnings"])


def test_probabilities_of_exactly_0_or_1_are_clipped(runner, tmp_path):
    """Issue #33 item 3: Platt and beta refused a probability of exactly 0 or 1 (a random forest's), and
    `--method all` skipped vector, matrix, dirichlet and ensemble_ts. They are clipped to ε = float64's
    machine epsilon, as betacal does (np.clip(p, eps, 1 - eps)); the fit says so on stderr."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(3)
    n = 400
    p1 = rng.beta(0.6, 0.6, n)
    p1[:40] = rng.integers(0, 2, 40)  # leaves of a forest: exactly 0 or 1
    y = (rng.random(n) < 0.15 + 0.7 * p1).astype(int)
    np.save(tmp_path / "p.npy", np.stack([1 - p1, p1], axis=1))
    np.save(tmp_path / "y.npy", y)
    eps = np.finfo(np.float64).eps
    q = np.clip(p1, eps, 1 - eps)

    def nll(m):
        return float(np.mean(np.logaddexp(0.0, -(2 * y - 1) * m)))

    s = np.log(q) - np.log1p(-q)
    expected = {
        "platt": minimize(lambda t: nll(t[0] * s + t[1]), [1.0, 0.0], method="BFGS", options={"gtol": 1e-10}).x,
        "beta": minimize(lambda t: nll(t[0] * np.log(q) - t[1] * np.log1p(-q) + t[2]), [1.0, 1.0, 0.0],
                         method="L-BFGS-B", bounds=[(0, None), (0, None), (None, None)],
                         options={"ftol": 1e-15, "gtol": 1e-10}).x,
    }
    for method, params in expected.items():
        out = tmp_path / f"{method}.json"
        r = runner.invoke(cli, ["fit", str(tmp_path / "p.npy"), str(tmp_path / "y.npy"), "--probs", "--method", method,
                                "-o", str(out)])
        assert r.exit_code == 0, r.stderr
        assert "probabilities of exactly 0 clipped to ε = 2.22e-16" in r.stderr
        saved = json.loads(out.read_text())["calibration"][method]
        assert list(saved.values()) == pytest.approx(list(params), abs=1e-5)
    # K = 3 with zeros: no method is skipped for them any more
    p3 = rng.dirichlet([0.5, 0.5, 0.5], n)
    p3[:30] = np.eye(3)[rng.integers(0, 3, 30)]
    np.save(tmp_path / "p3.npy", p3)
    np.save(tmp_path / "y3.npy", np.array([rng.choice(3, p=0.8 * row + 0.2 / 3) for row in p3]))
    r = runner.invoke(cli, ["fit", str(tmp_path / "p3.npy"), str(tmp_path / "y3.npy"), "--probs", "--method", "all",
                            "-f", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert r.stderr.count("clipped to ε") == 1  # once, not once per cross-validation fold
    assert {"vector", "matrix", "dirichlet", "ensemble_ts"} <= set(doc["methods"])
    assert not any(name in doc["skipped"] for name in ("vector", "matrix", "dirichlet", "ensemble_ts"))
