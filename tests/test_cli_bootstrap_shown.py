"""Issue #33 item 4: intervals for the metrics shown; one warning per cause, naming its metrics.

`eval --metrics ace --bootstrap B` gave ACE no interval; `fit --method all --metrics ece,nll,ks_ce
--bootstrap B` resampled every metric, warned about metrics not in its table (34 lines) and left KS-CE
without an interval or a word; `fit --method isotonic --test ... --bootstrap B` computed intervals and
showed none. A metric shown without an interval is named in a note, with the option that adds it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrate_cli.cli import cli
from calibrate_cli.metrics.registry import METRICS

PRETTY = {spec.name: spec.display_name for spec in METRICS}
B = "60"  # enough for a 90 % interval (at least 20), few enough to be quick


def run(runner, args):
    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """An over-confident 4-class model: validation and test logits and labels as .npy."""
    d = tmp_path_factory.mktemp("shown")
    rng = np.random.default_rng(4)
    for name, n in (("val", 300), ("test", 300)):
        labels = rng.integers(0, 4, n)
        logits = rng.normal(size=(n, 4)) * 3
        logits[np.arange(n), labels] += 2.0
        np.save(d / f"{name}.npy", logits)
        np.save(d / f"{name}_y.npy", labels)
    return {k: d / f"{k}.npy" for k in ("val", "val_y", "test", "test_y")}


def _doc(result):
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_eval_asked_for_ace_gets_its_interval(runner, files):
    doc = _doc(run(runner, ["eval", files["test"], files["test_y"], "--metrics", "ace", "--bootstrap", B,
                            "-f", "json"]))
    ace = doc["intervals"]["ace"]
    assert ace is not None and ace["low"] <= ace["high"]
    assert ace["point"] == doc["metrics"]["ace"]


def test_eval_names_the_metrics_shown_without_an_interval(runner, files):
    """KS-CE and SmoothECE are resampled only when named; the table says so, naming them."""
    result = run(runner, ["eval", files["test"], files["test_y"], "--bootstrap", B])
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "no interval for KS-CE, SmoothECE" in text and "--bootstrap-metrics all" in text and "ks_ce,smooth_ece" in text
    named = run(runner, ["eval", files["test"], files["test_y"], "--bootstrap", B, "--bootstrap-metrics", "all"])
    assert "no interval" not in named.stdout
    # a gated metric is asked for: its interval exists to gate on
    doc = _doc(run(runner, ["eval", files["test"], files["test_y"], "--bootstrap", B, "--fail-above", "ks_ce=0.9",
                            "--gate-on", "upper", "-f", "json"]))
    assert doc["intervals"]["ks_ce"] is not None


def test_fit_all_resamples_the_columns_shown_and_warns_once_per_cause(runner, files):
    args = ["fit", files["val"], files["val_y"], "--test", files["test"], files["test_y"], "--method", "all",
            "--metrics", "ece,nll,ks_ce", "--bootstrap", B, "--folds", "2"]
    doc = _doc(run(runner, [*args, "-f", "json"]))
    for name, method in {"uncalibrated": doc["uncalibrated"], **doc["methods"]}.items():
        values = method["metrics"]  # JSON writes an infinite NLL as a string
        finite = {m for m in ("ece", "nll", "ks_ce") if isinstance(values[m], float) and np.isfinite(values[m])}
        assert set(method["intervals"]) == finite, name  # KS-CE included, nothing else resampled
    result = run(runner, args)
    assert result.exit_code == 0
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning:")]
    for other in ("MCE", "AdaECE", "Classwise-ECE", "Debiased L2-CE", "RMS-CE", "Brier", "SmoothECE"):
        assert not any(f"{other} " in w or f"{other}:" in w for w in warnings), (other, warnings)
    for cause in ("intervals that exclude their estimate", "intervals that reach outside", "not a bug", "only "):
        assert sum(cause in w for w in warnings) <= 1, (cause, warnings)
    assert "no interval" not in result.stdout


def test_fit_one_method_shows_the_intervals_it_computed(runner, files):
    args = ["fit", files["val"], files["val_y"], "--test", files["test"], files["test_y"], "--method", "temperature",
            "--bootstrap", B]
    doc = _doc(run(runner, [*args, "-f", "json"]))
    for which in ("fit", "test"):
        for when in ("before", "after"):
            intervals = doc[which]["intervals"][when]
            assert intervals["ece"]["point"] == doc[which][when]["ece"]
    table = run(runner, args)
    ece_row = next(line for line in table.stdout.splitlines() if line.startswith("ECE "))
    assert ece_row.count("[") == 4  # fit and test, before and after
    assert "no interval for KS-CE, SmoothECE" in " ".join(table.stdout.split())


def test_compare_names_the_differences_without_an_interval(runner, files):
    result = run(runner, ["compare", files["test"], files["test_y"], files["test"], files["test_y"],
                          "--bootstrap", B])
    assert result.exit_code == 0, result.stderr
    assert "no interval for KS-CE, SmoothECE" in " ".join(result.stdout.split())


def test_report_warns_once_per_cause(runner, files, tmp_path):
    result = run(runner, ["report", files["val"], files["val_y"], files["test"], files["test_y"], "--bootstrap", B,
                          "-o", tmp_path / "r.html"])
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning:")]
    assert not any(w.startswith(("Warning: Pre T ", "Warning: Post T ")) for w in warnings), warnings
    for cause in ("intervals that exclude their estimate", "intervals that reach outside", "no interval for"):
        assert sum(cause in w for w in warnings) <= 1, (cause, warnings)
    assert sum("no interval for KS-CE, SmoothECE" in w for w in warnings) == 1
