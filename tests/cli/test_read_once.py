"""Each command validates and summarises its data once (issue 14): counted with a profile hook, so the
count does not depend on how a module imports the functions. A data set's validation is its label
check (``_check_labels``, run only where a set is validated); calibrated scores are new scores and get a
score check of their own."""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
import pytest

from calibrate_cli.cli import cli
from calibrate_cli.data.predictions import _check_labels, check_scores
from calibrate_cli.engine.summary import summarize

WATCHED = {_check_labels.__code__: "validate", check_scores.__code__: "check_scores", summarize.__code__: "summarize"}


def _count_calls(runner, args) -> Counter:
    calls: Counter = Counter()

    def hook(frame, event, arg):
        if event == "call" and frame.f_code in WATCHED:
            calls[WATCHED[frame.f_code]] += 1

    sys.setprofile(hook)
    try:
        result = runner.invoke(cli, args)
    finally:
        sys.setprofile(None)
    assert result.exit_code == 0, result.stderr
    return calls


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    out = {}
    for name in ("val", "test", "other"):
        labels = rng.integers(0, 4, 400)
        logits = rng.normal(size=(400, 4)) * 2
        logits[np.arange(400), labels] += 1.5
        np.save(tmp_path / f"{name}_logits.npy", logits)
        np.save(tmp_path / f"{name}_labels.npy", labels)
        out[name] = (str(tmp_path / f"{name}_logits.npy"), str(tmp_path / f"{name}_labels.npy"))
    out["test_labels_again"] = out["test"][1]
    return out


def test_eval_with_bootstrap_validates_and_summarises_once(runner, files):
    calls = _count_calls(runner, ["eval", *files["test"], "--bootstrap", "40", "--format", "json"])
    assert calls == Counter(validate=1, check_scores=1, summarize=1)


def test_eval_with_bca_bootstrap_validates_once(runner, files):
    """The jackknife behind BCa recomputes on subsets of the validated data, never validating again."""
    calls = _count_calls(runner, ["eval", *files["test"], "--bootstrap", "40", "--ci-method", "bca", "-f", "json"])
    assert calls["validate"] == 1 and calls["check_scores"] == 1


def test_compare_validates_and_summarises_each_model_once(runner, files):
    a_logits, labels = files["test"]
    b_logits = files["other"][0]
    np.save(b_logits, np.load(a_logits) * 1.5)  # the same samples, a sharper model
    calls = _count_calls(runner, ["compare", a_logits, labels, b_logits, labels, "--bootstrap", "40", "-f", "json"])
    assert calls == Counter(validate=2, check_scores=2, summarize=2)
def test_temperature_validates_each_set_once(runner, files):
    calls = _count_calls(runner, ["temperature", *files["val"], "--test", *files["test"], "--format", "json"])
    assert calls["validate"] == 2  # the fitting set and the test set, once each
    # each set as loaded; the temperature-scaled sets are divided as they are read (Predictions.divided):
    # never written, never checked again
    assert calls["check_scores"] == 2


def test_temperature_checks_the_calibrated_scores_it_saves(runner, files, tmp_path):
    """With --save-logits the test set's calibrated logits are written: they are made, and checked, once."""
    calls = _count_calls(runner, ["temperature", *files["val"], "--test", *files["test"], "--format", "json",
                                  "--save-logits", str(tmp_path / "scaled.npy")])
    assert calls["validate"] == 2 and calls["check_scores"] == 3
    assert (tmp_path / "scaled.npy").exists()
