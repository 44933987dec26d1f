"""Intervals outside the metric's range (issue 32, item 11): `calib eval` and `calib report` show them
clipped to the range and marked ‡ (with a note); the JSON keeps the raw ends and says ``"clipped": true``.

The raw basic intervals are recomputed here with a float64 loop over the documented resamples
(docs/bootstrap.md: resample r draws ``default_rng(SeedSequence(S).spawn(B)[r]).integers(0, N, N)``,
positions in the stable order of increasing confidence), not with calib's bootstrap."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from calibrate_cli.cli import cli

B, SEED = 200, 0


@pytest.fixture
def nearly_always_right(tmp_path):
    """40 samples, 3 classes, 39 right and 1 confidently wrong: accuracy 97.5 %, whose basic interval
    reaches above 100 %, and an NLL whose basic interval reaches below 0."""
    rng = np.random.default_rng(3)
    n, k = 40, 3
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * 0.5  # logits: rows do not sum to 1
    logits[np.arange(n), labels] += 4.0
    logits[0] = [0.0, 9.0, 0.0] if labels[0] != 1 else [9.0, 0.0, 0.0]
    np.save(tmp_path / "logits.npy", logits)
    np.save(tmp_path / "labels.npy", labels)
    return str(tmp_path / "logits.npy"), str(tmp_path / "labels.npy"), logits, labels


def _raw_basic(logits, labels, level=0.9, percentile=False):
    """Independent float64 loop: point, raw basic [2θ̂ − q_95, 2θ̂ − q_5] of accuracy and NLL (or the
    percentile interval [q_5, q_95])."""
    n = len(labels)
    out = {}
    log_probs = []
    for row in logits.astype(np.float64):
        m = max(row)
        log_z = m + math.log(sum(math.exp(v - m) for v in row))
        log_probs.append([v - log_z for v in row])
    conf = np.array([math.exp(max(lp)) for lp in log_probs])
    correct = np.array([float(int(np.argmax(lp)) == y) for lp, y in zip(log_probs, labels)])
    nll = np.array([-lp[y] for lp, y in zip(log_probs, labels)])
    order = np.argsort(conf, kind="stable")
    streams = np.random.SeedSequence(SEED).spawn(B)
    draws = [order[np.random.default_rng(s).integers(0, n, n)] for s in streams]
    alpha = 1 - level
    for name, per_sample in (("accuracy", correct), ("nll", nll)):
        point = sum(per_sample) / n
        values = np.array([sum(per_sample[i] for i in idx) / n for idx in draws])
        q_lo, q_hi = np.percentile(values, [100 * alpha / 2, 100 * (1 - alpha / 2)])
        out[name] = (point, q_lo, q_hi) if percentile else (point, 2 * point - q_hi, 2 * point - q_lo)
    return out


def test_eval_shows_out_of_range_intervals_clipped_and_marked_json_keeps_raw(runner, nearly_always_right):
    logits_path, labels_path, logits, labels = nearly_always_right
    expected = _raw_basic(logits, labels)
    acc_point, acc_low, acc_high = expected["accuracy"]
    nll_point, nll_low, nll_high = expected["nll"]
    assert acc_point == 0.975 and acc_high > 1.0 and nll_low < 0.0  # the data do what they should
    base = ["eval", logits_path, labels_path, "--bootstrap", str(B), "--seed", str(SEED), "--ci-method", "basic"]

    doc = json.loads(runner.invoke(cli, base + ["--format", "json"]).stdout)
    acc, nll = doc["intervals"]["accuracy"], doc["intervals"]["nll"]
    assert acc["method"] == nll["method"] == "basic"
    # the JSON keeps the raw ends (those of the independent loop) and says they were clipped
    assert acc["low"] == pytest.approx(acc_low, abs=1e-12) and acc["high"] == pytest.approx(acc_high, abs=1e-12)
    assert acc["clipped"] is True and acc["clipped_high"] == 1.0 and acc["clipped_low"] == acc["low"]
    assert nll["low"] == pytest.approx(nll_low, abs=1e-12) and nll["high"] == pytest.approx(nll_high, abs=1e-12)
    assert nll["clipped"] is True and nll["clipped_low"] == 0.0 and nll["clipped_high"] == nll["high"]
    assert doc["intervals"]["mean_confidence"]["clipped"] is False

    # the table: clipped to the range, marked ‡, the mark explained under the table
    result = runner.invoke(cli, base)
    assert result.exit_code == 0, result.stderr
    rows = {line.split("│")[0].strip(): line for line in result.stdout.splitlines() if "│" in line}
    assert f"[{100 * acc_low:.2f} %, 100.00 %]‡" in rows["Accuracy"]
    assert f"[0.0000, {nll_high:.4f}]‡" in rows["NLL"]
    assert "102" not in rows["Accuracy"] and "-0." not in rows["NLL"]
    assert "‡ the interval reached outside the metric's range and is shown clipped to it" in result.stdout
    assert "‡" not in rows["Mean confidence"]
    # stderr says what the raw end was
    assert any(line.startswith("Warning: Accuracy interval: the interval reaches above 1") and f"{acc_high:.4g}" in line
               for line in result.stderr.splitlines()), result.stderr

    # Markdown the same; CSV keeps the raw ends (as the JSON) with a `clipped` column
    md = runner.invoke(cli, base + ["--format", "markdown"]).stdout
    assert f"| [0.0000, {nll_high:.4f}]‡ |" in md and "‡ the interval reached outside" in md
    import csv
    import io

    csv_rows = {r["metric"]: r for r in csv.DictReader(io.StringIO(runner.invoke(cli, base + ["--format", "csv"]).stdout))}
    assert float(csv_rows["accuracy"]["high"]) == pytest.approx(acc_high, rel=1e-14)
    assert csv_rows["accuracy"]["clipped"] == "True" and csv_rows["mean_confidence"]["clipped"] == "False"


def test_report_html_shows_the_clipped_interval_with_its_mark(nearly_always_right):
    from calibrate_cli.report import build_report, render_html

    _, _, logits, labels = nearly_always_right
    expected = _raw_basic(logits, labels)
    report = build_report(logits, labels, bootstrap=B, seed=SEED, ci_method="basic")
    page = render_html(report)
    cell = next(c for c in page.split("<td ") if c.startswith('class="ci" data-metric="nll"'))
    low = float(cell.split('data-low="')[1].split('"')[0])
    assert low == pytest.approx(expected["nll"][1], abs=1e-12)  # the raw end, for scripts
    assert 'data-clipped="true"' in cell and f"[0.0000, {expected['nll'][2]:.4f}]" in cell and "‡</span>" in cell
    acc = next(c for c in page.split("<td ") if c.startswith('class="ci" data-metric="accuracy"'))
    shown = acc.split(">", 1)[1].split("<span", 1)[0]  # the cell's visible interval (the mark's tooltip names the raw end)
    assert shown.strip() == f"[{100 * expected['accuracy'][1]:.2f} %, 100.00 %]" and "‡</span>" in acc
    assert "102.50 %" in acc.split("<span", 1)[1]  # the tooltip: "the interval reached [95.00 %, 102.50 %]: ..."
    assert "‡ one that reached outside the metric&#x27;s range" in page  # the lead explains the mark


def test_by_default_the_means_get_percentile_intervals_and_the_calibration_errors_basic(runner, nearly_always_right):
    """--ci-method auto (the default): the registry's method per metric, recorded per interval in the JSON
    and named under the table; the percentile interval of a mean never leaves the range."""
    logits_path, labels_path, logits, labels = nearly_always_right
    expected = _raw_basic(logits, labels, percentile=True)
    base = ["eval", logits_path, labels_path, "--bootstrap", str(B), "--seed", str(SEED)]
    doc = json.loads(runner.invoke(cli, base + ["--format", "json"]).stdout)
    assert doc["bootstrap"]["method"] == "auto"
    for name in ("accuracy", "nll"):
        got = doc["intervals"][name]
        assert got["method"] == "percentile" and got["clipped"] is False
        assert (got["low"], got["high"]) == pytest.approx(expected[name][1:], abs=1e-12)
    assert {doc["intervals"][m]["method"] for m in ("brier", "error", "mean_confidence", "s99_share")} == {"percentile"}
    assert {doc["intervals"][m]["method"] for m in ("ece", "adaece", "classwise_ece", "mce")} == {"basic"}
    table = " ".join(runner.invoke(cli, base).stdout.split())
    assert "90% basic/percentile bootstrap intervals" in table
    assert "intervals: percentile for Accuracy, Error, NLL, Brier, Mean confidence, S99 share, S99 accuracy; " \
           "basic for ECE, AdaECE, Classwise-ECE, MCE" in table
