"""calibrate_cli.report: the report's data from arrays (build_report) and its HTML (render_html)."""

from __future__ import annotations

import numpy as np
import pytest

from calibrate_cli import InputError, evaluate, fit_temperature
from calibrate_cli.report import InputFile, build_report, render_html
from calibrate_cli.report.figures import MAX_CLASS_BARS, per_class_shown
from calibrate_cli.calibrators.temperature_fit import apply_temperature
from libm import METRIC_ABS, METRIC_REL
from report_page import read_page


def _data(n=400, k=3, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k)) * scale
    logits[np.arange(n), labels] += 2
    return logits, labels


def test_build_report_fits_on_validation_and_judges_on_test():
    val, val_y = _data(seed=1)
    test, test_y = _data(seed=2)
    report = build_report(val, val_y, test, test_y, search="nll")
    t = fit_temperature(val, val_y, search="nll").temperature
    assert report.temperature == t and report.evaluated_on == "test"
    assert report.before.metrics == evaluate(test, test_y).metrics
    assert report.after.metrics == evaluate(apply_temperature(test, t), test_y).metrics
    # both curves on the validation set over the default grid, whatever the search
    ece = dict(report.ece_curve)
    nll = dict(report.nll_curve)
    assert len(ece) == len(nll) == 100
    # the temperature grid and evaluate are two paths: within the numeric contract (tests/libm.py)
    assert ece[1.0] == pytest.approx(evaluate(val, val_y).metrics["ece"], rel=METRIC_REL, abs=METRIC_ABS)
    assert nll[2.0] == pytest.approx(evaluate(val / 2.0, val_y).metrics["nll"], rel=1e-12)
    assert report.n_validation == 400 and report.n_test == 400 and report.k == 3


def test_build_report_refuses_other_searches_and_mismatched_sets():
    val, val_y = _data()
    with pytest.raises(InputError, match="search"):
        build_report(val, val_y, search="vector")
    with pytest.raises(InputError, match="K = 4"):
        build_report(val, val_y, np.hstack([val, val[:, :1]]), val_y)
    with pytest.raises(InputError, match="both"):
        build_report(val, val_y, val)


def test_per_class_figure_shows_the_worst_classes_when_k_is_large():
    k = MAX_CLASS_BARS + 20
    logits, labels = _data(n=3000, k=k, seed=3, scale=1.0)
    report = build_report(logits, labels)
    shown = per_class_shown(report)
    assert len(shown) == MAX_CLASS_BARS and list(shown) == sorted(shown)
    per_class = np.asarray(report.before.classwise_ece_per_class)
    hidden = np.setdiff1d(np.arange(k), shown)
    assert per_class[shown].min() >= per_class[hidden].max()


def test_render_html_page_from_python_has_unique_ids_names_and_escapes():
    val, val_y = _data()
    report = build_report(val, val_y, title="A & <B>", inputs=[InputFile("validation scores", "x<y>.npy", 12, "ab" * 32)])
    text = render_html(report, class_names=["cat", "dog", "<e>"])
    page = read_page(text)
    assert len(page.figures) == 5 and len(page.ids) == len(set(page.ids))  # with "Beyond one number"
    assert "A &amp; &lt;B&gt;" in text and "x&lt;y&gt;.npy" in text and "<e>" not in text
    assert "&lt;e&gt;" in text and "12 bytes" in page.text
    with pytest.raises(InputError, match="2 class names"):
        render_html(report, class_names=["a", "b"])


def test_probabilities_with_a_zero_on_the_true_class_leave_the_nll_curve_out():
    rng = np.random.default_rng(4)
    probs = rng.dirichlet([2.0, 2.0, 2.0], 200)
    labels = rng.integers(0, 3, 200)
    probs[:3] = [1.0, 0.0, 0.0]
    labels[:3] = 1
    report = build_report(probs, labels, input_kind="probs")
    assert report.nll_curve is None and report.ece_curve is not None
    assert any(w.startswith("the NLL curve against T is left out: ") for w in report.warnings), report.warnings
    assert report.before.metrics["nll"] == float("inf")
    page = read_page(render_html(report))
    assert len(page.figures) == 5 and page.metrics[("before", "nll")] == (float("inf"), "inf")


def test_report_to_dict_is_json_with_the_numbers_of_the_page():
    import json

    val, val_y = _data(seed=5)
    report = build_report(val, val_y, inputs=[InputFile("validation scores", "v.npy", 10, "0" * 64)],
                          created="2026-01-01T00:00:00+00:00")
    data = json.loads(json.dumps(report.to_dict()))
    assert data["temperature"] == report.temperature and data["evaluated_on"] == "validation"
    assert data["after"]["metrics"]["ece"] == evaluate(apply_temperature(val, report.temperature), val_y).metrics["ece"]
    assert data["inputs"] == [{"role": "validation scores", "path": "v.npy", "size": 10, "sha256": "0" * 64}]
    assert data["created"] == "2026-01-01T00:00:00+00:00" and len(data["ece_curve"]) == 100
