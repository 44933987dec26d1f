"""Probabilities given as logits are never softmaxed again in silence (issue 32, item 1): (N, K) scores
whose every row lies in [0, 1] and sums to 1 are refused unless the kind is stated (``--probs``, or
``--logits`` to insist; ``input_kind=`` in Python); 1-D scores in [0, 1] are taken as log-odds with a
warning."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import calibrate_cli as calib
from calibrate_cli.cli import cli
from calibrate_cli.errors import CalibWarning, InputError
from naive_reference import ece as naive_ece


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture()
def model(tmp_path):
    """A digits-like model: over-confident logits, their probabilities, labels."""
    rng = np.random.default_rng(7)
    y = rng.integers(0, 10, 600)
    z = rng.normal(size=(600, 10)) * 2
    z[np.arange(600), y] += 3.0
    p = _softmax(z)
    for name, array in {"z": z, "p": p, "y": y, "p32": p.astype(np.float32)}.items():
        np.save(tmp_path / f"{name}.npy", array)
    return tmp_path, z, p, y


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


@pytest.mark.parametrize("command", ["eval", "temperature", "fit", "plot", "report", "compare"])
def test_probabilities_without_probs_are_refused_naming_the_file_and_the_fix(runner, model, command):
    tmp, *_ = model
    p, y = tmp / "p.npy", tmp / "y.npy"
    args = {"eval": [p, y], "temperature": [p, y], "fit": [p, y], "plot": [p, y, "-o", tmp / "r.png"],
            "report": [p, y, "-o", tmp / "r.html"], "compare": [p, y, tmp / "z.npy", y]}[command]
    result = run(runner, command, *args)
    assert result.exit_code == 2, result.output + result.stderr
    line = result.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("Error: ")
    assert "p.npy" in line and "look like probabilities" in line and "--probs" in line and "--logits" in line
    assert not (tmp / "r.png").exists() and not (tmp / "r.html").exists()


def test_probs_gives_the_true_value_and_logits_insists(runner, model):
    tmp, z, p, y = model
    want = naive_ece(p, y, 15)  # an independent float64 loop over the probabilities
    got = json.loads(run(runner, "eval", tmp / "p.npy", tmp / "y.npy", "--probs", "-f", "json").stdout)
    assert got["metrics"]["ece"] == pytest.approx(want, rel=1e-12)
    insisted = run(runner, "eval", tmp / "p.npy", tmp / "y.npy", "--logits", "-f", "json")
    assert insisted.exit_code == 0, insisted.stderr
    # softmax of the probabilities: a flat, under-confident model, a very different (wrong) number
    assert json.loads(insisted.stdout)["metrics"]["ece"] == pytest.approx(naive_ece(_softmax(p), y, 15), rel=1e-12)
    assert json.loads(insisted.stdout)["metrics"]["ece"] > want + 0.2


def test_float32_probabilities_are_recognised(runner, model):
    tmp, *_ = model
    result = run(runner, "eval", tmp / "p32.npy", tmp / "y.npy")
    assert result.exit_code == 2 and "look like probabilities" in result.stderr


def test_logits_are_not_disturbed(runner, model):
    tmp, z, p, y = model
    result = run(runner, "eval", tmp / "z.npy", tmp / "y.npy", "-f", "json")
    assert result.exit_code == 0 and result.stderr == ""
    assert json.loads(result.stdout)["metrics"]["ece"] == pytest.approx(naive_ece(p, y, 15), rel=1e-12)


def test_the_calibrator_path_checks_before_the_map_hides_the_kind(runner, model):
    tmp, *_ = model
    fitted = run(runner, "temperature", tmp / "z.npy", tmp / "y.npy", "-o", tmp / "t.json")
    assert fitted.exit_code == 0, fitted.stderr
    result = run(runner, "eval", tmp / "p.npy", tmp / "y.npy", "--calibrator", tmp / "t.json")
    assert result.exit_code == 2 and "look like probabilities" in result.stderr


def test_binary_scores_in_the_unit_interval_warn_once(runner, tmp_path):
    rng = np.random.default_rng(3)
    s = rng.uniform(0.05, 0.95, 300)
    y = (rng.uniform(size=300) < s).astype(int)
    np.save(tmp_path / "s.npy", s)
    np.save(tmp_path / "y.npy", y)
    result = run(runner, "eval", tmp_path / "s.npy", tmp_path / "y.npy")
    assert result.exit_code == 0
    warning_lines = [line for line in result.stderr.splitlines() if line.startswith("Warning:")]
    assert len(warning_lines) == 1 and "s.npy" in warning_lines[0] and "--probs" in warning_lines[0]
    quiet = run(runner, "eval", tmp_path / "s.npy", tmp_path / "y.npy", "--probs")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_the_python_api_raises_unless_the_kind_is_given(model):
    _, z, p, y = model
    for fn in (calib.ece, calib.nll, calib.accuracy):
        with pytest.raises(InputError, match="look like probabilities.*input_kind='probs'"):
            fn(p, y)
    with pytest.raises(InputError, match="look like probabilities"):
        calib.evaluate(p, y)
    assert calib.ece(p, y, input_kind="probs") == pytest.approx(naive_ece(p, y, 15), rel=1e-12)
    assert calib.ece(p, y, input_kind="logits") == pytest.approx(naive_ece(_softmax(p), y, 15), rel=1e-12)
    assert calib.ece(z, y) == pytest.approx(naive_ece(p, y, 15), rel=1e-12)
    with pytest.warns(CalibWarning, match="log-odds"):
        calib.ece(p[:, 1], (y == 1).astype(int))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        calib.ece(p[:, 1], (y == 1).astype(int), input_kind="probs")


def test_one_row_that_is_not_a_probability_makes_them_logits():
    p = np.full((50, 4), 0.25)
    y = np.arange(50) % 4
    with pytest.raises(InputError):
        calib.ece(p, y)
    p[49] = [0.5, 0.5, 0.5, 0.5]  # the last row sums to 2: these are not probabilities
    assert calib.ece(p, y) == pytest.approx(naive_ece(_softmax(p), y, 15), abs=1e-15)


@pytest.mark.parametrize("command", ["eval", "temperature", "fit", "compare"])
def test_the_json_says_logits_when_no_kind_was_given(runner, model, command):
    tmp, *_ = model
    z, y = tmp / "z.npy", tmp / "y.npy"
    args = [z, y, z, y] if command == "compare" else [z, y]
    result = run(runner, command, *args, "-f", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["inputs"]["input_kind"] == "logits"
    if command == "eval":
        assert doc["input_kind"] == "logits"
