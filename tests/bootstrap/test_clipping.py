"""Intervals outside the metric's range (issue 32, item 11): shown clipped to the range and marked ‡,
the raw ends kept (JSON), the ranges from the metric registry. Expected values by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calibrate_cli.bootstrap import METRIC_RANGES, ConfidenceInterval, confidence_interval
from calibrate_cli.bootstrap.intervals import CLIPPED_MARK, EXCLUDES_MARK, clip_to_range
from calibrate_cli.metrics.gates import Gate, check_gates
from calibrate_cli.metrics.registry import metric_spec

INF = math.inf


@pytest.mark.parametrize(
    "low, high, bounds, expected",
    [
        (0.951, 1.023, (0.0, 1.0), (0.951, 1.0)),  # S99 accuracy [95.1 %, 102.3 %]
        (-1.12, 3.69, (0.0, INF), (0.0, 3.69)),  # NLL [−1.12, 3.69]
        (-0.009, 0.05, (0.0, 2.0), (0.0, 0.05)),  # Brier [−0.009, …]
        (0.767, 1.379, (0.0, 1.0), (0.767, 1.0)),  # MCE [76.7 %, 137.9 %]
        (-0.03, -0.01, (0.0, 1.0), (0.0, 0.0)),  # wholly below: a point at the lower end
        (1.02, 1.05, (0.0, 1.0), (1.0, 1.0)),  # wholly above: a point at the upper end
        (0.2, 0.3, (0.0, 1.0), (0.2, 0.3)),  # inside: unchanged
        (-0.5, 2.5, (-1.0, 1.0), (-0.5, 1.0)),  # a difference B − A of fractions ranges over [−1, 1]
        (-0.5, 2.5, None, (-0.5, 2.5)),  # no range: unchanged
    ],
)
def test_clip_to_range_by_hand(low, high, bounds, expected):
    assert clip_to_range(low, high, bounds) == expected


def test_the_ranges_come_from_the_metric_registry():
    for name, bounds in [("nll", (0.0, INF)), ("brier", (0.0, 2.0)), ("ece", (0.0, 1.0)), ("mce", (0.0, 1.0)),
                         ("accuracy", (0.0, 1.0)), ("error", (0.0, 1.0)), ("s99_accuracy", (0.0, 1.0)),
                         ("s99_share", (0.0, 1.0)), ("mean_confidence", (0.0, 1.0))]:
        assert metric_spec(name).value_range == bounds == METRIC_RANGES[name], name


def test_a_basic_interval_above_1_is_shown_clipped_and_keeps_its_raw_ends():
    # q_5 of linspace(0.7, 1.0, 301) is 0.7 + 0.05·0.3 = 0.715, q_95 = 0.985 (linear interpolation on an
    # evenly spaced grid); basic at θ̂ = 0.9: [1.8 − 0.985, 1.8 − 0.715] = [0.815, 1.085]
    values = np.linspace(0.7, 1.0, 301)
    ci = confidence_interval(0.9, values, level=0.9, method="basic", bounds=(0.0, 1.0))
    assert (ci.low, ci.high) == pytest.approx((0.815, 1.085), abs=1e-12)  # raw: the method's numbers
    assert ci.clipped and (ci.clipped_low, ci.clipped_high) == (pytest.approx(0.815, abs=1e-12), 1.0)
    assert ci.marks == CLIPPED_MARK and ci.contains_point
    d = ci.to_dict()
    assert d["clipped"] is True and d["clipped_high"] == 1.0
    assert d["low"] == ci.low and d["high"] == pytest.approx(1.085, abs=1e-12)  # the JSON keeps the raw ends
    assert any("reaches above 1" in w and "1.085" in w and CLIPPED_MARK in w for w in ci.warnings)
    # the percentile interval of the same values, [0.715, 0.985], is inside: nothing to clip
    pct = confidence_interval(0.9, values, level=0.9, method="percentile", bounds=(0.0, 1.0))
    assert not pct.clipped and pct.marks == "" and pct.to_dict()["clipped"] is False
    assert (pct.clipped_low, pct.clipped_high) == (pct.low, pct.high)


def test_an_nll_interval_below_0_is_clipped_at_0_and_unbounded_above():
    # θ̂ = 0.1, values 0 … 0.5: q_5 = 0.025, q_95 = 0.475; basic [0.2 − 0.475, 0.2 − 0.025] = [−0.275, 0.175]
    ci = confidence_interval(0.1, np.linspace(0.0, 0.5, 101), method="basic", bounds=(0.0, INF))
    assert (ci.low, ci.high) == pytest.approx((-0.275, 0.175), abs=1e-12)
    assert (ci.clipped_low, ci.clipped_high) == (0.0, pytest.approx(0.175, abs=1e-12)) and ci.clipped


def test_both_marks_when_the_interval_also_excludes_its_estimate():
    # every resampled value above θ̂ = 0.04 (an upward-biased ECE): basic [0.08 − 0.088, 0.08 − 0.052]
    ci = confidence_interval(0.04, np.linspace(0.05, 0.09, 1000), method="basic", bounds=(0.0, 1.0))
    assert (ci.low, ci.high) == pytest.approx((-0.008, 0.028))
    assert (ci.clipped_low, ci.clipped_high) == (0.0, pytest.approx(0.028))
    assert ci.marks == EXCLUDES_MARK + CLIPPED_MARK


def test_an_interval_without_a_range_is_never_clipped():
    ci = ConfidenceInterval(0.5, -2.0, 3.0, 0.9, "basic", 100)
    assert not ci.clipped and (ci.clipped_low, ci.clipped_high) == (-2.0, 3.0) and ci.marks == ""


def test_gates_compare_the_clipped_end():
    """``--fail-above error=1 --gate-on upper``: a raw upper end of 102.5 % is impossible; as shown (100 %)
    it does not exceed 1, so the gate passes. ``--fail-below accuracy=0 --gate-on lower`` likewise."""
    error = ConfidenceInterval(0.975, 0.95, 1.025, 0.9, "basic", 200, bounds=(0.0, 1.0))
    [result] = check_gates({"error": 0.975}, [Gate("error", "above", 1.0)], gated_on="upper",
                           intervals={"error": error})
    assert result.passed and result.value == 1.0
    as_dict = {"accuracy": {"low": -0.02, "high": 0.05, "clipped_low": 0.0, "clipped_high": 0.05}}
    [result] = check_gates({"accuracy": 0.01}, [Gate("accuracy", "below", 0.0)], gated_on="lower", intervals=as_dict)
    assert result.passed and result.value == 0.0
    # a dict without the clipped ends (an older document) is gated on its raw ends
    [result] = check_gates({"accuracy": 0.01}, [Gate("accuracy", "below", 0.0)], gated_on="lower",
                           intervals={"accuracy": {"low": -0.02, "high": 0.05}})
    assert not result.passed and result.value == -0.02


def test_auto_takes_each_metrics_method_from_the_registry():
    from calibrate_cli.bootstrap.intervals import DEFAULT_CI_METHOD, method_for

    assert DEFAULT_CI_METHOD == "auto"
    for name in ("accuracy", "error", "nll", "brier", "top5_accuracy", "mean_confidence", "s99_share", "s99_accuracy"):
        assert method_for(name, "auto") == metric_spec(name).ci_method == "percentile", name
    for name in ("ece", "adaece", "classwise_ece", "mce", "rms_ce", "debiased_l2_ce", "ks_ce", "smooth_ece", "ace"):
        assert method_for(name, "auto") == "basic", name
    assert method_for("my_metric", "auto") == method_for(None, "auto") == "basic"  # not in the registry
    assert method_for("nll", "bca") == "bca" and method_for("ece", "percentile") == "percentile"  # explicit wins
    # the same values as above: percentile [0.715, 0.985] for a mean, basic [0.815, 1.085] for ECE (by hand)
    values = np.linspace(0.7, 1.0, 301)
    acc = confidence_interval(0.9, values, bounds=(0.0, 1.0), metric="accuracy")
    assert acc.method == "percentile" and (acc.low, acc.high) == pytest.approx((0.715, 0.985), abs=1e-12)
    ece = confidence_interval(0.9, values, bounds=(0.0, 1.0), metric="ece")
    assert ece.method == "basic" and (ece.low, ece.high) == pytest.approx((0.815, 1.085), abs=1e-12)
    assert confidence_interval(0.9, values).method == "basic"  # no metric named: basic, as before
