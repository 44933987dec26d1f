"""The opt-in classwise metrics (ACE of Nixon et al. 2019, classwise RMS-CE and KS-CE) against float64
loops written from the definitions, hand values, the authors' own code (uncertainty_metrics.numpy.ace's recorded values,
uncertainty-calibration's marginal ℓ2 error), resampling and the CLI."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate_cli import evaluate
from calibrate_cli.engine.binning import uniform_edges
from calibrate_cli.bootstrap import bootstrap_values
from calibrate_cli.engine.class_samples import ClassSamples, ace_gaps, sort_classes
from calibrate_cli.metrics.functional import ace, classwise_ks_ce, classwise_rms_ce

CLASSWISE = ("ace", "classwise_rms_ce", "classwise_ks_ce")


def ace_gap_sums(p, y, n_bins):
    """ACE's (K, R) per-bin sums of the data themselves (unit multiplicities)."""
    return ace_gaps(ClassSamples(sort_classes(p, y), np.ones((1, len(y)))), n_bins)[0]


def loop_ace(probs, labels, n_bins):
    """ACE by the definition, one value at a time: for each class k, sort the N values p_k, take the
    upper bin edges at ranks round(j·N/R) (j = 1..R−1, half to even, capped at N − 1), put each value
    in the bin of the edges it is not below (a value equal to an edge goes up), and add
    |Σ_bin ([y = k] − p_k)| / N; then average over the K classes."""
    probs = [[float(v) for v in row] for row in probs]
    n, k = len(probs), len(probs[0])
    total = 0.0
    for c in range(k):
        column = sorted(row[c] for row in probs)
        edges = []
        for j in range(1, n_bins):
            rank = min(int(np.round(j * n / n_bins)), n - 1)
            edges.append(column[rank])
        sums = [0.0] * n_bins
        for i in range(n):
            p = probs[i][c]
            b = sum(1 for e in edges if e <= p)
            sums[b] += (1.0 if labels[i] == c else 0.0) - p
        total += sum(abs(s) for s in sums) / n
    return total / k


def loop_classwise_rms(probs, labels, n_bins):
    """√((1/K) Σ_k Σ_b |B_kb|/N (acc − conf)²): bins (b/M, (b+1)/M], 0 in the first, one value at a time."""
    edges = [b / n_bins for b in range(n_bins + 1)]
    n, k = len(probs), len(probs[0])
    total = 0.0
    for c in range(k):
        count, hits, mass = [0] * n_bins, [0.0] * n_bins, [0.0] * n_bins
        for i in range(n):
            p = float(probs[i][c])
            b = next(j for j in range(n_bins) if p <= edges[j + 1]) if p > 0 else 0
            count[b] += 1
            hits[b] += 1.0 if labels[i] == c else 0.0
            mass[b] += p
        total += sum((hits[b] - mass[b]) ** 2 / count[b] for b in range(n_bins) if count[b]) / n
    return (total / k) ** 0.5


def loop_classwise_ks(probs, labels):
    """(1/K) Σ_k max_t |(1/N) Σ_{p_k ≤ t} (p_k − [y = k])|, t over the last value of each run of ties
    (a value whose next larger one lies more than 2^-40 of it above: docs/metrics.md)."""
    n, k = len(probs), len(probs[0])
    total = 0.0
    for c in range(k):
        best = 0.0
        values = sorted({float(row[c]) for row in probs})
        for t, after in zip(values, values[1:] + [math.inf]):
            if after <= t + abs(t) * 2.0**-40:
                continue
            s = sum(float(probs[i][c]) - (labels[i] == c) for i in range(n) if float(probs[i][c]) <= t)
            best = max(best, abs(s) / n)
        total += best
    return total / k


def _probs(rng, n, k, ties=False):
    p = rng.dirichlet(np.full(k, 0.7), size=n)
    if ties:  # coarse values: runs of equal probabilities straddle the edge ranks
        p = np.round(p, 1) + 0.05
        p /= p.sum(axis=1, keepdims=True)
    return p


def test_hand_value():
    # class 0: p = .9 .6 .3 .2, y0 = 1 0 0 0; R = 2: edge at rank round(4/2) = 2 of (.2 .3 .6 .9) = .6
    #   bin 0 {.3, .2}: 0 − .5; bin 1 {.9, .6}: 1 − 1.5  → (.5 + .5)/4
    # class 1: p = .1 .4 .7 .8, y1 = 0 1 1 1; edge .7: bin 0 {.1, .4}: 1 − .5; bin 1 {.7, .8}: 2 − 1.5
    p = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.2, 0.8]])
    y = np.array([0, 1, 1, 1])
    assert ace(p, y, n_bins=2, input_kind="probs") == pytest.approx((0.25 + 0.25) / 2, abs=1e-15)


def test_tied_values_go_to_the_upper_bin():
    # p1 = .5 .5 .5 .9 (R = 2, edge = sorted[2] = .5): every .5 is in bin 1 with the .9, bin 0 is empty
    p = np.array([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5], [0.1, 0.9]])
    y = np.array([1, 0, 1, 1])
    gaps = ace_gap_sums(p, y, 2)
    assert gaps[1].tolist() == pytest.approx([0.0, (3 - 2.4)])
    # p0 sorted .1 .5 .5 .5 (y0 = 0 1 0 0 for .5 .5 .5 .1): edge .5, only .1 below it
    assert gaps[0].tolist() == pytest.approx([0 - 0.1, 1 - 1.5])


@pytest.mark.parametrize("n,k,n_bins,ties", [(1, 2, 15, False), (2, 3, 15, False), (37, 4, 15, True),
                                             (500, 10, 15, False), (300, 2, 7, True), (64, 5, 100, True)])
def test_equals_the_loop(n, k, n_bins, ties):
    rng = np.random.default_rng(n * 31 + k)
    p = _probs(rng, n, k, ties)
    y = rng.integers(0, k, n)
    assert ace(p, y, n_bins=n_bins, input_kind="probs") == pytest.approx(loop_ace(p, y, n_bins), abs=1e-13)


def test_logits_and_binary_scores():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(200, 3)) * 3
    y = rng.integers(0, 3, 200)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    assert ace(logits, y) == pytest.approx(loop_ace(p, y, 15), abs=1e-13)
    s = rng.uniform(0.01, 0.99, 150)  # 1-D p(class 1): the columns [1 − s, s]
    yb = (rng.uniform(size=150) < s).astype(int)
    assert ace(s, yb, input_kind="probs") == pytest.approx(loop_ace(np.c_[1 - s, s], yb, 15), abs=1e-13)


AUTHORS_ACE = json.loads((Path(__file__).parent / "data" / "ace_authors_values.json").read_text())


@pytest.mark.parametrize("case", AUTHORS_ACE["cases"], ids=lambda c: f"n{len(c['labels'])}-M{c['n_bins']}")
def test_equals_the_authors_code(case):
    """Values recorded once from uncertainty_metrics==0.0.81 (Nixon et al.'s code; its wheel's metadata is
    refused by pip >= 24.1): scripts/record_ace_values.py. Probabilities without zeros, which it drops."""
    p = np.asarray(case["tenths"]) / 10 + 0.05
    p /= p.sum(axis=1, keepdims=True)
    y = np.asarray(case["labels"])
    assert ace(p, y, n_bins=case["n_bins"], input_kind="probs") == pytest.approx(case["ace"], abs=1e-14)
    assert loop_ace(p, y, case["n_bins"]) == pytest.approx(case["ace"], abs=1e-14)


def test_weighted_resamples_equal_resampled_arrays():
    rng = np.random.default_rng(11)
    n, k = 60, 4
    p = _probs(rng, n, k, ties=True)
    y = rng.integers(0, k, n)
    idx = rng.integers(0, n, size=(5, n))
    weights = np.stack([np.bincount(row, minlength=n) for row in idx]).astype(np.float64)
    got = ace_gaps(ClassSamples(sort_classes(p, y), weights), 15)
    for row, resample in zip(got, idx):
        np.testing.assert_allclose(row, ace_gap_sums(p[resample], y[resample], 15), atol=1e-13)


def test_bootstrap_values_are_the_ace_of_each_resample():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(80, 5)) * 2
    y = rng.integers(0, 5, 80)
    idx = rng.integers(0, 80, size=(12, 80))
    point, values = bootstrap_values(logits, y, indices=idx, metrics=[*CLASSWISE, "ece"])
    for name, fn in zip(CLASSWISE, (ace, classwise_rms_ce, classwise_ks_ce)):
        assert point[name] == pytest.approx(fn(logits, y), abs=1e-15)
        np.testing.assert_allclose(values[name], [fn(logits[r], y[r]) for r in idx], atol=1e-13)


def test_jackknife_values_of_the_classwise_metrics_are_the_loops_without_each_sample():
    """BCa's acceleration reads these (issue #32 item 12: they raised KeyError). G = N is the
    leave-one-out jackknife: value i is the metric of the data without one sample, so the N values
    (in any order) are the loops' values on each leave-one-out subset."""
    from libm import METRIC_ABS, METRIC_REL

    from calibrate_cli.bootstrap import jackknife_values

    rng = np.random.default_rng(12)
    n, k = 30, 3
    p = _probs(rng, n, k)
    y = rng.integers(0, k, n)
    jack = jackknife_values(p, y, input_kind="probs", metrics=list(CLASSWISE), n_groups=n)
    keep = [np.arange(n) != i for i in range(n)]
    loops = {
        "ace": [loop_ace(p[m], y[m], 15) for m in keep],
        "classwise_rms_ce": [loop_classwise_rms(p[m], y[m], 15) for m in keep],
        "classwise_ks_ce": [loop_classwise_ks(p[m], y[m]) for m in keep],
    }
    for name in CLASSWISE:
        assert jack[name].shape == (n,) and np.isfinite(jack[name]).all(), name
        np.testing.assert_allclose(np.sort(jack[name]), np.sort(loops[name]), rtol=METRIC_REL, atol=METRIC_ABS * 100,
                                   err_msg=name)


@pytest.mark.parametrize("n,k,n_bins,ties", [(1, 2, 15, False), (37, 4, 15, True), (300, 3, 10, False),
                                             (64, 5, 7, True)])
def test_classwise_rms_and_ks_equal_the_loops(n, k, n_bins, ties):
    rng = np.random.default_rng(n * 7 + k)
    p = _probs(rng, n, k, ties)
    if ties:  # values on the bin edges b/M themselves
        p[: n // 2] = np.round(p[: n // 2] * n_bins) / n_bins
        p /= p.sum(axis=1, keepdims=True)
    y = rng.integers(0, k, n)
    assert classwise_rms_ce(p, y, n_bins=n_bins, input_kind="probs") == pytest.approx(loop_classwise_rms(p, y, n_bins), abs=1e-13)
    assert classwise_ks_ce(p, y, input_kind="probs") == pytest.approx(loop_classwise_ks(p, y), abs=1e-13)


def test_classwise_rms_equals_uncertainty_calibration_marginal_l2():
    """Kumar et al.'s own plug-in ℓ2 estimator per class on calib's equal-width bins, averaged as their
    ``get_binning_ce(mode="marginal", p=2, debias=False)`` averages."""
    utils = pytest.importorskip("calibration.utils")
    rng = np.random.default_rng(12)
    for n, k in [(400, 4), (60, 2), (2000, 10)]:
        p = rng.dirichlet(np.ones(k) * 0.5, size=n)
        y = rng.integers(0, k, n)
        per_class = [utils.plugin_ce(utils.bin(list(zip(p[:, c], (y == c).astype(float))), list(uniform_edges(15)[1:])), power=2) ** 2
                     for c in range(k)]
        assert classwise_rms_ce(p, y, input_kind="probs") == pytest.approx(np.mean(per_class) ** 0.5, abs=1e-12)


def test_the_classwise_variants_differ_from_the_top_label_ones():
    rng = np.random.default_rng(4)
    logits, y = rng.normal(size=(300, 4)) * 2, rng.integers(0, 4, 300)
    m = evaluate(logits, y, metrics="all").metrics
    assert m["classwise_rms_ce"] != pytest.approx(m["rms_ce"], rel=1e-3)
    assert m["classwise_ks_ce"] != pytest.approx(m["ks_ce"], rel=1e-3)


def test_evaluate_reports_ace_only_when_asked():
    rng = np.random.default_rng(2)
    logits, y = rng.normal(size=(50, 3)), rng.integers(0, 3, 50)
    assert not set(CLASSWISE) & set(evaluate(logits, y).metrics)
    report = evaluate(logits, y, metrics=["ace"])
    # the three share one sort of each class: asking for one reports them all
    assert set(CLASSWISE) <= set(report.metrics)
    assert report.metrics["ace"] == pytest.approx(ace(logits, y), abs=1e-15)
    assert evaluate(logits, y, metrics="all").metrics["ace"] == report.metrics["ace"]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(2, 5), st.integers(1, 20), st.integers(0, 2**32 - 1))
def test_classwise_metrics_are_fractions_and_ignore_sample_order(n, k, n_bins, seed):
    rng = np.random.default_rng(seed)
    p = _probs(rng, n, k, ties=bool(seed % 2))
    y = rng.integers(0, k, n)
    perm = rng.permutation(n)
    for fn in (ace, classwise_rms_ce):
        value = fn(p, y, n_bins=n_bins, input_kind="probs")
        assert 0.0 <= value <= 1.0
        assert fn(p[perm], y[perm], n_bins=n_bins, input_kind="probs") == pytest.approx(value, abs=1e-14)
    value = classwise_ks_ce(p, y, input_kind="probs")
    assert 0.0 <= value <= 1.0 and classwise_ks_ce(p[perm], y[perm], input_kind="probs") == pytest.approx(value, abs=1e-14)


# ------------------------------------------------------------------------------------------ CLI


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(9)
    logits, y = rng.normal(size=(120, 4)) * 2, rng.integers(0, 4, 120)
    np.save(tmp_path / "x.npy", logits)
    np.save(tmp_path / "y.npy", y)
    return tmp_path, logits, y


def test_cli_metrics_ace(runner, files):
    from calibrate_cli.cli import cli

    tmp, logits, y = files
    args = ["eval", str(tmp / "x.npy"), str(tmp / "y.npy"), "--format", "json"]
    plain = json.loads(runner.invoke(cli, args).stdout)
    assert "ace" not in plain["metrics"]
    result = runner.invoke(cli, [*args, "--metrics", "ace"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["metrics"]["ace"] == pytest.approx(ace(logits, y), abs=1e-15)
    table = runner.invoke(cli, args[:3] + ["--metrics", "all"])
    assert "ACE" in table.stdout


def test_cli_gate_on_ace_computes_it(runner, files):
    from calibrate_cli.cli import cli

    tmp, logits, y = files
    value = ace(logits, y)
    base = ["eval", str(tmp / "x.npy"), str(tmp / "y.npy")]
    assert runner.invoke(cli, [*base, "--fail-above", f"ace={value * 0.9}"]).exit_code == 1
    assert runner.invoke(cli, [*base, "--fail-above", f"ace={value * 1.1}"]).exit_code == 0


def test_cli_bad_metric_names_and_shards(runner, files):
    from calibrate_cli.cli import cli

    tmp, _, _ = files
    result = runner.invoke(cli, ["eval", str(tmp / "x.npy"), str(tmp / "y.npy"), "--metrics", "acee"])
    assert result.exit_code == 2 and "unknown metric acee" in result.stderr
    shards = runner.invoke(cli, ["eval", str(tmp / "x*.npy"), str(tmp / "y*.npy"), "--metrics", "ace"])
    assert shards.exit_code == 2 and "shard" in shards.stderr
