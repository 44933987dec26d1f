"""Ties split by rounding count as ties (docs/metrics.md): AdaECE and KS-CE, which compare samples with
one another, must not move when equal confidences come out a few ulps apart, as they do for rows equal
but for the order of their classes, or computed by another engine."""

from __future__ import annotations

import numpy as np
import pytest

import calibrate_cli as calib
from calibrate_cli.diagnostics import risk_coverage
from calibrate_cli.engine import kernels
from calibrate_cli.engine.sorting import TIE_SLACK, run_ends, tie_tolerant

ENGINES = ["numpy", pytest.param("fused", marks=pytest.mark.skipif(
    not kernels.HAVE_CKERNEL, reason="the C extension (the fused engine) is not built"))]
TWO_ULPS = 2.0**-52  # two ulps of a confidence in [0.5, 1)


def _binary_probs(conf):
    """(N, 2) probability rows [c, 1 − c] (exact, summing to 1: c ≥ 0.5), predicting class 0."""
    conf = np.asarray(conf, dtype=np.float64)
    return np.stack([conf, 1.0 - conf], axis=1)


@pytest.mark.parametrize("engine", ENGINES)
def test_adaece_puts_a_tie_split_by_rounding_in_one_bin(engine, monkeypatch):
    """Sorted confidences 0.6, 0.7, 0.8, 0.8 + 2 ulps, 0.9, 0.95 in 3 equal-mass bins: the edges are
    0.6, 0.8, 0.9, 0.95, and 0.8 + 2 ulps ties with the edge 0.8, so bin 0 holds four samples.
    By hand: |2.9 − 2| + |0.9 − 1| + |0.95 − 1| = 1.05 over N = 6 (0.85 / 6 if the tie were split)."""
    monkeypatch.setenv(kernels.ENGINE_ENV, engine)
    conf = [0.6, 0.7, 0.8, 0.8 + TWO_ULPS, 0.9, 0.95]
    labels = [0, 1, 0, 1, 0, 0]  # class 0 predicted: correct 1, 0, 1, 0, 1, 1
    report = calib.evaluate(_binary_probs(conf), labels, n_bins=3, input_kind="probs")
    assert report.adaptive_bins.count.tolist() == [4, 1, 1]
    assert report.adaptive_bins.edges.tolist() == [0.6, 0.8, 0.9, 0.95]  # the edges themselves
    assert report.metrics["adaece"] == pytest.approx(1.05 / 6, rel=1e-12)


@pytest.mark.parametrize("engine", ENGINES)
def test_ks_ce_takes_a_run_of_ties_split_by_rounding_as_one(engine, monkeypatch):
    """conf 0.7 (wrong), 0.7 + 2 ulps (right), 0.9 (right): the prefix sums of conf − correct are 0.7,
    0.4, 0.3; the first two samples are one run of ties, so the maximum is taken at 0.4 and 0.3: KS-CE
    = 0.4 / 3, as with an exact tie (0.7 / 3 if the run were split)."""
    monkeypatch.setenv(kernels.ENGINE_ENV, engine)
    split = calib.evaluate(_binary_probs([0.7, 0.7 + TWO_ULPS, 0.9]), [1, 0, 0], input_kind="probs",
                           metrics=["ks_ce"]).metrics["ks_ce"]
    exact = calib.evaluate(_binary_probs([0.7, 0.7, 0.9]), [1, 0, 0], input_kind="probs",
                           metrics=["ks_ce"]).metrics["ks_ce"]
    assert split == pytest.approx(0.4 / 3, rel=1e-12)
    assert exact == pytest.approx(0.4 / 3, rel=1e-12)


def test_the_risk_coverage_curve_takes_a_tie_split_by_rounding_as_one_plateau():
    """conf 0.9, 0.8 + 2 ulps, 0.8, 0.6 (right, right, wrong, wrong): one operating point for the two
    values 0.8, as for an exact tie (the docstring example of risk_coverage)."""
    split = risk_coverage([0.9, 0.8 + TWO_ULPS, 0.8, 0.6], [True, True, False, False])
    assert split.coverage.tolist() == [0.25, 0.75, 1.0]
    assert split.risk.tolist() == pytest.approx([0.0, 1 / 3, 0.5], rel=1e-15)
    assert split.threshold.tolist() == [0.9, 0.8, 0.6]


def test_the_tie_rule():
    """v ties with everything up to v + |v|·2^-40; a run of ties ends where the next value lies beyond."""
    v = np.array([0.25, 0.8, -0.5, 0.0])
    np.testing.assert_array_equal(tie_tolerant(v), v + np.abs(v) * 2.0**-40)
    assert TIE_SLACK == 2.0**-40
    values = np.array([0.1, 0.1 + 2**-55, 0.1 + 2**-54, 0.2, 0.2, 0.2 * (1 + 2**-39), 0.3])
    assert run_ends(values).tolist() == [False, False, True, False, True, True, True]
    assert run_ends(np.array([0.5])).tolist() == [True]


@pytest.mark.parametrize("engine", ENGINES)
def test_adaece_and_ks_ce_do_not_depend_on_the_order_of_the_classes(engine, monkeypatch):
    """Small integer logits (one maximum a row): the rows' confidences tie often, and the order of the
    classes changes the order of each row's sum, so the ties come out a few ulps apart. Every order of
    the columns gives the same AdaECE and KS-CE within the numeric contract (0.02 apart before the rule)."""
    monkeypatch.setenv(kernels.ENGINE_ENV, engine)
    rng = np.random.default_rng(0)
    for _ in range(40):
        n, k = int(rng.integers(20, 400)), int(rng.choice([3, 4, 5, 8]))
        x = rng.integers(-3, 4, (n, k)).astype(np.float64)
        x[np.arange(n), x.argmax(axis=1)] += 0.5  # one maximum: the prediction never depends on the order
        y = rng.integers(0, k, n)
        values = []
        for order in (np.arange(k), np.arange(k)[::-1], np.roll(np.arange(k), 1)):
            metrics = calib.evaluate(x[:, order], np.argsort(order)[y], metrics=["adaece", "ks_ce"]).metrics
            values.append((metrics["adaece"], metrics["ks_ce"]))
        for got in values[1:]:
            assert got == pytest.approx(values[0], rel=1e-12, abs=1e-15)
