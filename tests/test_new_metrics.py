"""RMS-CE, debiased ℓ2-CE (Kumar et al. 2019), KS-CE (Gupta et al. 2021) and SmoothECE (Błasiok &
Nakkiran 2023): hand cases, the naive float64 loops of tests/naive_metrics.py, the peers' own code
(relplot, uncertainty-calibration) where installed, the bootstrap and the gates."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import naive_metrics
import naive_reference as naive
from calibrate_cli import evaluate
from calibrate_cli.bootstrap import bootstrap, bootstrap_values
from calibrate_cli.cli import cli

NEW = ("rms_ce", "debiased_l2_ce", "ks_ce", "smooth_ece")


def _naive(probs, labels, n_bins=15) -> dict:
    return {
        "rms_ce": naive_metrics.rms_ce(probs, labels, n_bins),
        "debiased_l2_ce": naive_metrics.debiased_l2_ce(probs, labels, n_bins),
        "ks_ce": naive_metrics.ks_ce(probs, labels),
        "smooth_ece": naive_metrics.smooth_ece_top_label(probs, labels),
    }


def _cases():
    rng = np.random.default_rng(16)
    out = []
    for n, k, scale in [(200, 3, 3.0), (57, 2, 1.0), (120, 10, 6.0), (1, 2, 2.0), (2, 4, 0.5)]:
        logits = rng.normal(size=(n, k)) * scale
        labels = rng.integers(0, k, n)
        out.append((naive.softmax_rows(logits), labels))
    # ties: probabilities on a 0.1 grid (many equal confidences, some rows tied at the argmax)
    probs = np.round(rng.dirichlet(np.ones(3), size=90), 1)
    probs[:, 2] = np.round(1.0 - probs[:, 0] - probs[:, 1], 10)
    probs = np.clip(probs, 0, 1)
    probs /= probs.sum(axis=1, keepdims=True)
    out.append((probs.tolist(), rng.integers(0, 3, 90)))
    return out


@pytest.mark.parametrize("case", range(6))
def test_each_metric_equals_the_naive_loop(case):
    probs, labels = _cases()[case]
    got = evaluate(np.array(probs), labels, input_kind="probs").metrics
    want = _naive(probs, labels)
    for name in NEW:
        assert got[name] == pytest.approx(want[name], abs=1e-12), name


def test_hand_computed_case():
    """N = 4, binary: confidences 0.6, 0.6, 0.8, 0.9 (M = 10: bins (0.5, 0.6], (0.7, 0.8], (0.8, 0.9])."""
    probs = np.array([[0.6, 0.4], [0.4, 0.6], [0.8, 0.2], [0.1, 0.9]])
    labels = np.array([0, 0, 0, 0])  # correct: 1, 0, 1, 0
    m = evaluate(probs, labels, input_kind="probs", n_bins=10).metrics
    # bins: {0.6: acc 1/2, conf 0.6, n 2}, {0.8: acc 1, n 1}, {0.9: acc 0, n 1}
    assert m["rms_ce"] == pytest.approx(math.sqrt((2 * 0.1**2 + 0.2**2 + 0.9**2) / 4), abs=1e-15)
    # debiased: only the 2-sample bin counts: 2/4 · (0.1² − 0.5·0.5/1) < 0 → 0
    assert m["debiased_l2_ce"] == 0.0
    # KS: the run of ties at 0.6 ends at Σ = (0.6 − 1) + (0.6 − 0) = 0.2; then +(−0.2) = 0; then +0.9
    assert m["ks_ce"] == pytest.approx(0.9 / 4, abs=1e-15)


def test_debiased_estimator_subtracts_the_bin_variance():
    """One bin of 10 samples at confidence 0.95 with 6 correct: (0.95 − 0.6)² − 0.6·0.4/9."""
    probs = np.tile([0.95, 0.05], (10, 1))
    labels = np.array([0] * 6 + [1] * 4)
    m = evaluate(probs, labels, input_kind="probs").metrics
    assert m["debiased_l2_ce"] == pytest.approx(math.sqrt(0.35**2 - 0.24 / 9), abs=1e-15)
    assert m["rms_ce"] == pytest.approx(0.35, abs=1e-15)
    assert m["ks_ce"] == pytest.approx(0.35, abs=1e-15)  # one run of ties: |Σ| / N at its end


def test_ks_does_not_depend_on_the_order_of_tied_samples():
    probs = np.array([[0.7, 0.3]] * 4 + [[0.9, 0.1]] * 2)
    a = evaluate(probs, np.array([0, 0, 1, 1, 0, 1]), input_kind="probs").metrics["ks_ce"]
    b = evaluate(probs, np.array([1, 1, 0, 0, 1, 0]), input_kind="probs").metrics["ks_ce"]
    want = max(abs(4 * 0.7 - 2), abs(4 * 0.7 - 2 + 2 * 0.9 - 1)) / 6  # only at the ends of the two runs
    assert a == pytest.approx(want, abs=1e-15) and b == pytest.approx(want, abs=1e-15)
    # evaluated after every sample (Gupta et al.'s code), b would reach (0.7 + 0.7)/6 after its second sample


def test_smooth_ece_equals_relplot():
    relplot = pytest.importorskip("relplot")
    rng = np.random.default_rng(3)
    for n, k, scale in [(300, 5, 2.0), (2000, 10, 4.0), (40, 2, 0.5), (1, 3, 1.0)]:
        logits = rng.normal(size=(n, k)) * scale
        labels = rng.integers(0, k, n)
        conf, correct = relplot.multiclass_logits_to_confidences(logits, labels)
        got = evaluate(logits, labels).metrics["smooth_ece"]
        assert got == pytest.approx(relplot.smECE(conf, correct), abs=1e-12), n


def test_binned_l2_estimators_equal_uncertainty_calibration():
    """Kumar et al.'s own estimators (``unbiased_l2_ce``, ``plugin_ce``) on calib's equal-width bins."""
    utils = pytest.importorskip("calibration.utils")
    from calibrate_cli.engine.binning import uniform_edges

    rng = np.random.default_rng(5)
    for n, k in [(500, 4), (60, 2), (3000, 10)]:
        probs = rng.dirichlet(np.ones(k) * 0.4, size=n)
        labels = rng.integers(0, k, n)
        conf, correct = probs.max(axis=1), (probs.argmax(axis=1) == labels).astype(float)
        binned = utils.bin(list(zip(conf, correct)), list(uniform_edges(15)[1:]))
        m = evaluate(probs, labels, input_kind="probs").metrics
        assert m["debiased_l2_ce"] == pytest.approx(utils.unbiased_l2_ce(binned), abs=1e-12)
        assert m["rms_ce"] == pytest.approx(utils.plugin_ce(binned, power=2), abs=1e-12)


def test_bootstrap_values_equal_the_metrics_of_explicit_resamples():
    rng = np.random.default_rng(8)
    logits = rng.normal(size=(150, 4)) * 3
    labels = rng.integers(0, 4, 150)
    idx = rng.integers(0, 150, size=(6, 150))
    _, values = bootstrap_values(logits, labels, indices=idx, metrics=list(NEW))
    for r, rows in enumerate(idx):
        want = _naive(naive.softmax_rows(logits[rows]), labels[rows])
        for name in NEW:
            assert values[name][r] == pytest.approx(want[name], abs=1e-12), (name, r)


def test_bootstrap_intervals_exist_and_a_subset_is_the_same():
    rng = np.random.default_rng(9)
    logits = rng.normal(size=(400, 6)) * 3
    labels = rng.integers(0, 6, 400)
    every = bootstrap(logits, labels, n_resamples=50, seed=1, metrics="all")
    some = bootstrap(logits, labels, n_resamples=50, seed=1, metrics=["ks_ce", "smooth_ece"])
    for name in NEW:
        assert every[name].low <= every[name].high
    for name in some:
        assert (some[name].low, some[name].high) == (every[name].low, every[name].high)


def test_cli_eval_json_table_bootstrap_and_gates(runner, tmp_path):
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(300, 5)) * 3
    labels = rng.integers(0, 5, 300)
    np.save(tmp_path / "l.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    files = [str(tmp_path / "l.npy"), str(tmp_path / "y.npy")]
    res = runner.invoke(cli, ["eval", *files, "--format", "json", "--bootstrap", "40", "--bootstrap-metrics", "all"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    probs = naive.softmax_rows(logits)
    want = _naive(probs, labels)
    for name in NEW:
        assert doc["metrics"][name] == pytest.approx(want[name], abs=1e-12)
        assert doc["intervals"][name]["n_resamples"] == 40
    default = json.loads(runner.invoke(cli, ["eval", *files, "-f", "json", "--bootstrap", "40"]).stdout)
    assert "ks_ce" not in default["intervals"] and "smooth_ece" not in default["intervals"]  # costly: on request
    assert "rms_ce" in default["intervals"] and "debiased_l2_ce" in default["intervals"]  # from the bin sums
    some = json.loads(runner.invoke(cli, ["eval", *files, "-f", "json", "--bootstrap", "40",
                                          "--bootstrap-metrics", "ks-ce,ece"]).stdout)
    assert set(some["intervals"]) == {"ks_ce", "ece"}
    assert some["intervals"]["ks_ce"] == doc["intervals"]["ks_ce"]
    table = runner.invoke(cli, ["eval", *files]).stdout
    for title in ("RMS-CE", "Debiased L2-CE", "KS-CE", "SmoothECE"):
        assert title in table
    assert max(len(line) for line in table.splitlines()) <= 100
    failing = runner.invoke(cli, ["eval", *files, "--fail-above", "ks_ce=1%"])
    assert failing.exit_code == 1
    passing = runner.invoke(cli, ["eval", *files, "--fail-above", "smooth_ece=99%", "--fail-above", "rms_ce=0.99"])
    assert passing.exit_code == 0, passing.stderr
    bad = runner.invoke(cli, ["eval", *files, "--fail-above", "debiased_l2_ce=2"])
    assert bad.exit_code == 2 and "debiased_l2_ce" in bad.stderr
