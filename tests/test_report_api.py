"""The Python API's report object: ``cc.evaluate(...)`` → ``.to_dict()``, ``.to_frame()`` (pandas), and
its text, HTML and Rich displays. Expected numbers by hand: two samples 75 % sure, one right."""

from __future__ import annotations

import io
import math
import sys

import numpy as np
import pytest

import calibrate_cli as cc

PROBS = np.array([[0.75, 0.25], [0.25, 0.75]])
LABELS = np.array([0, 0])
# accuracy ½; both confidences 0.75 in bin (0.5, 0.75] of 4: |0.5 − 0.75| = 0.25; NLL = (−log ¾ − log ¼)/2;
# Brier = ((¼)² + (¼)² + (¾)² + (¾)²)/2
HAND = {"accuracy": 0.5, "ece": 0.25, "nll": (-math.log(0.75) - math.log(0.25)) / 2, "brier": 0.625}


@pytest.fixture
def report():
    return cc.evaluate(PROBS, LABELS, input_kind="probs", n_bins=4)


def test_to_dict_is_unchanged_and_json_ready(report):
    d = report.to_dict()
    assert set(d) == {"n", "k", "n_bins", "input_kind", "conventions", "metrics", "intervals", "bins",
                      "classwise_ece_per_class", "warnings", "bootstrap"}
    for name, value in HAND.items():
        assert d["metrics"][name] == pytest.approx(value, abs=1e-15)


def test_to_frame_one_row_per_metric(report):
    pd = pytest.importorskip("pandas")
    frame = report.to_frame()
    assert isinstance(frame, pd.DataFrame) and frame.index.name == "metric"
    assert list(frame.index) == list(report.metrics) and list(frame.columns) == ["value"]
    for name, value in HAND.items():
        assert frame.loc[name, "value"] == pytest.approx(value, abs=1e-15)
    assert math.isnan(frame.loc["s99_accuracy", "value"])  # undefined (no confidence ≥ 0.99): NaN


def test_to_frame_with_intervals():
    pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 300)
    logits = rng.normal(0, 1, (300, 3))
    report = cc.evaluate(logits, labels, bootstrap=50, seed=1)
    frame = report.to_frame()
    assert list(frame.columns) == ["value", "low", "high"]
    assert frame.loc["ece", "low"] == report.intervals["ece"].low
    assert frame.loc["ece", "high"] == report.intervals["ece"].high
    assert math.isnan(frame.loc["ks_ce", "low"])  # no interval by default


def test_to_frame_without_pandas_is_a_clear_error(report, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    with pytest.raises(ImportError, match=r"to_frame\(\) needs pandas, which is not installed: pip install pandas"):
        report.to_frame()


def test_repr_is_a_readable_table(report):
    text = repr(report)
    lines = text.splitlines()
    assert lines[0] == "EvalReport: N = 2, K = 2, 4 bins, probs"
    assert "  accuracy         50.00 %" in lines and "  ece              25.00 %" in lines
    assert f"  nll              {HAND['nll']:7.4f}".rstrip() in [line.rstrip() for line in lines]
    assert "s99_accuracy" in text and "—" in text  # undefined shown as —
    assert "top5_accuracy" not in text  # K ≤ 5: not shown
    assert lines[-1] == "  warnings: 0"


def test_html_and_rich_displays(report):
    html = report._repr_html_()
    assert html.startswith("<div>") and "<table>" in html and "25.00 %" in html and "<code>ece</code>" in html
    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=120, color_system=None).print(report)
    shown = buffer.getvalue()
    assert "ECE" in shown and "25.00 %" in shown and "EvalReport: N = 2" in shown


def test_html_escapes_warnings():
    report = cc.evaluate(np.array([[1.0, 0.0]]), np.array([1]), input_kind="probs", scores_name="<b>x</b>")
    assert report.warnings  # NLL inf, naming the scores
    html = report._repr_html_()
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert "inf" in repr(report)
