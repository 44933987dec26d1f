"""calib eval --bootstrap / --gate-on and calib compare, through Click's CliRunner."""

from __future__ import annotations

import json

import numpy as np
import pytest
from libm import METRIC_ABS, METRIC_REL

from calibrate_cli.bootstrap import bootstrap, compare
from calibrate_cli.metrics.registry import BOOTSTRAP_DEFAULT
from calibrate_cli.cli import cli


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    n, k = 400, 6
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * 2.5
    logits[np.arange(n), labels] += 1.5
    paths = {
        "logits": tmp_path / "logits.npy",
        "labels": tmp_path / "labels.npy",
        "sharp": tmp_path / "sharp.npy",
        "other_labels": tmp_path / "other_labels.npy",
    }
    np.save(paths["logits"], logits)
    np.save(paths["labels"], labels)
    np.save(paths["sharp"], logits * 2)
    other = labels.copy()
    other[:3] = (other[:3] + 1) % k
    np.save(paths["other_labels"], other)
    return {name: str(p) for name, p in paths.items()}, logits, labels


def _inputs(command: str, paths: dict) -> list[str]:
    """The positional arguments of `eval` (one model) or `compare` (two models, same labels)."""
    return [command, paths["logits"], paths["labels"]] + ([paths["sharp"], paths["labels"]] if command == "compare" else [])


def _json(result):
    assert result.exit_code in (0, 1), result.output + result.stderr
    return json.loads(result.stdout)


def test_eval_bootstrap_json_intervals_equal_the_library(runner, files):
    paths, logits, labels = files
    args = ["eval", paths["logits"], paths["labels"], "--bootstrap", "60", "--seed", "3", "--format", "json"]
    doc = _json(runner.invoke(cli, args + ["--ci-method", "percentile", "--ci-level", "0.8"]))
    expected = bootstrap(logits, labels, n_resamples=60, seed=3, method="percentile", level=0.8)
    assert set(doc["intervals"]) == set(expected)
    for name, ci in expected.items():
        got = doc["intervals"][name]
        assert {"low", "high", "level", "method", "n_resamples"} <= set(got)
        assert got["low"] == pytest.approx(ci.low, abs=1e-12) and got["high"] == pytest.approx(ci.high, abs=1e-12)
        assert got["method"] == "percentile" and got["level"] == 0.8 and got["n_resamples"] == 60
    assert doc["bootstrap"]["seed"] == 3


def test_eval_without_bootstrap_has_empty_intervals(runner, files):
    paths, _, _ = files
    doc = _json(runner.invoke(cli, ["eval", paths["logits"], paths["labels"], "--format", "json"]))
    assert doc["intervals"] == {} and doc["bootstrap"] is None


def test_eval_table_shows_intervals(runner, files):
    paths, _, _ = files
    result = runner.invoke(cli, ["eval", paths["logits"], paths["labels"], "--bootstrap", "30"])
    assert result.exit_code == 0, result.stderr
    # the default --ci-method auto: basic for the calibration errors, percentile for the means, said under the table
    assert "interval" in result.stdout and "90% basic/percentile bootstrap" in result.stdout
    assert "intervals: percentile for Accuracy, Error, NLL" in " ".join(result.stdout.split())
    basic = runner.invoke(cli, ["eval", paths["logits"], paths["labels"], "--bootstrap", "30", "--ci-method", "basic"])
    assert "90% basic bootstrap" in basic.stdout and "intervals: " not in basic.stdout


@pytest.mark.parametrize(
    "gate_on, end, expect_fail",
    [
        ("upper", "high", True),  # threshold between low and high: the strict upper end fails
        ("lower", "low", False),  # ... and the lenient lower end passes
        ("point", "point", None),
    ],
)
def test_gate_on_picks_the_gated_value(runner, files, gate_on, end, expect_fail):
    paths, logits, labels = files
    ci = bootstrap(logits, labels, n_resamples=80, seed=0)["ece"]
    threshold = (ci.low + ci.high) / 2 if gate_on != "point" else ci.point - 1e-6
    args = ["eval", paths["logits"], paths["labels"], "--bootstrap", "80", "--gate-on", gate_on]
    args += ["--fail-above", f"ece={threshold!r}", "--format", "json"]
    result = runner.invoke(cli, args)
    doc = json.loads(result.stdout)
    gate = doc["gates"][0]
    assert gate["gated_on"] == gate_on
    assert gate["value"] == pytest.approx(ci.point if end == "point" else getattr(ci, end), abs=1e-12)
    if expect_fail is None:
        expect_fail = True  # point just above the threshold
    assert result.exit_code == (1 if expect_fail else 0)
    if expect_fail:
        assert "ece" in result.stderr and "failed" in result.stderr
        if gate_on != "point":
            assert f"{gate_on} end of its interval" in result.stderr
    else:
        assert "failed" not in result.stderr


def test_fail_below_with_gate_on_lower_uses_the_lower_end(runner, files):
    paths, logits, labels = files
    ci = bootstrap(logits, labels, n_resamples=50, seed=0)["accuracy"]
    threshold = (ci.low + ci.point) / 2  # point passes, lower end fails
    base = ["eval", paths["logits"], paths["labels"], "--fail-below", f"accuracy={threshold!r}"]
    assert runner.invoke(cli, base).exit_code == 0
    result = runner.invoke(cli, base + ["--bootstrap", "50", "--gate-on", "lower"])
    assert result.exit_code == 1
    assert "accuracy (lower end of its interval)" in result.stderr


def test_gate_on_without_bootstrap_is_a_usage_error(runner, files):
    paths, _, _ = files
    result = runner.invoke(cli, ["eval", paths["logits"], paths["labels"], "--gate-on", "upper"])
    assert result.exit_code == 2
    assert "--bootstrap" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("opt", [["--bootstrap", "-1"], ["--ci-level", "1.5"], ["--ci-method", "studentized"]])
def test_bad_bootstrap_options_exit_2(runner, files, opt):
    paths, _, _ = files
    result = runner.invoke(cli, ["eval", paths["logits"], paths["labels"], *opt])
    assert result.exit_code == 2


def test_compare_identical_models_gives_zero_differences(runner, files):
    paths, _, _ = files
    args = ["compare", paths["logits"], paths["labels"], paths["logits"], paths["labels"]]
    doc = _json(runner.invoke(cli, args + ["--bootstrap", "40", "--format", "json"]))
    assert doc["command"] == "compare"
    for name, d in doc["differences"].items():
        assert d["difference"] == 0.0, name
        if name not in BOOTSTRAP_DEFAULT:  # per-sample metrics get intervals only when asked
            assert d["interval"] is None, name
            continue
        assert (d["interval"]["low"], d["interval"]["high"]) == (0.0, 0.0)
        assert d["excludes_zero"] is False


def test_compare_json_equals_the_library(runner, files):
    paths, logits, labels = files
    args = ["compare", paths["logits"], paths["labels"], paths["sharp"], paths["labels"]]
    doc = _json(runner.invoke(cli, args + ["--bootstrap", "40", "--seed", "5", "--format", "json"]))
    expected = compare(logits, labels, logits * 2, labels, n_resamples=40, seed=5)
    for name, d in expected.differences.items():
        got = doc["differences"][name]
        assert got["difference"] == pytest.approx(d.difference, abs=1e-12)
        if d.interval is None:  # per-sample metrics: resampled only when asked (--bootstrap-metrics)
            assert name not in BOOTSTRAP_DEFAULT and got["interval"] is None
            continue
        assert got["interval"]["low"] == pytest.approx(d.interval.low, abs=1e-12)
        assert got["excludes_zero"] == d.significant
    assert doc["differences"]["ece"]["difference"] != 0


@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
def test_compare_other_formats(runner, files, fmt):
    paths, _, _ = files
    args = ["compare", paths["logits"], paths["labels"], paths["sharp"], paths["labels"], "--bootstrap", "20"]
    result = runner.invoke(cli, args + ["--format", fmt])
    assert result.exit_code == 0, result.stderr
    assert "ece" in result.stdout.lower()


def test_compare_different_labels_exit_2_with_one_line(runner, files):
    paths, _, _ = files
    args = ["compare", paths["logits"], paths["labels"], paths["sharp"], paths["other_labels"], "--bootstrap", "20"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:") and "different labels" in lines[0]
    assert paths["other_labels"] in lines[0] and "first at sample 0" in lines[0]


def test_compare_output_file_refuses_to_overwrite(runner, files, tmp_path):
    paths, _, _ = files
    out = tmp_path / "diff.json"
    out.write_text("keep")
    args = ["compare", paths["logits"], paths["labels"], paths["sharp"], paths["labels"], "--bootstrap", "20"]
    result = runner.invoke(cli, args + ["--format", "json", "-o", str(out)])
    assert result.exit_code == 2 and out.read_text() == "keep"
    result = runner.invoke(cli, args + ["--format", "json", "-o", str(out), "--force"])
    assert result.exit_code == 0 and json.loads(out.read_text())["command"] == "compare"


def test_eval_csv_and_markdown_carry_the_intervals(runner, files):
    paths, logits, labels = files
    base = ["eval", paths["logits"], paths["labels"], "--bootstrap", "30", "--seed", "2"]
    result = runner.invoke(cli, base + ["--format", "csv"])
    assert result.exit_code == 0, result.stderr
    import csv
    import io

    rows = {r["metric"]: r for r in csv.DictReader(io.StringIO(result.stdout))}
    ci = bootstrap(logits, labels, n_resamples=30, seed=2)["ece"]
    # CSV numbers carry 15 significant digits (issue 19.12: no float noise)
    assert rows["ece"]["low"] == f"{ci.low:.15g}" and rows["ece"]["high"] == f"{ci.high:.15g}"
    md = runner.invoke(cli, base + ["--format", "markdown"])
    assert "| interval |" in md.stdout
    plain = runner.invoke(cli, ["eval", paths["logits"], paths["labels"], "--format", "csv"])
    assert plain.stdout.splitlines()[0] == "metric,value,definition"


def test_eval_plot_shows_the_ece_interval(runner, files, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import calibrate_cli.plots.diagram as plots

    paths, logits, labels = files
    seen = {}
    real = plots.eval_figure

    def spy(report, **kwargs):
        seen.update(kwargs)
        return real(report, **kwargs)

    monkeypatch.setattr(plots, "eval_figure", spy)
    out = tmp_path / "rel.png"
    args = ["eval", paths["logits"], paths["labels"], "--bootstrap", "20", "--plot", str(out)]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.stderr
    ci = bootstrap(logits, labels, n_resamples=20, metrics=["ece"])["ece"]
    assert seen["interval"] == (ci.low, ci.high) and out.exists()


@pytest.mark.parametrize("command", ["eval", "compare"])
def test_device_needing_missing_torch_exits_2_with_one_line(runner, files, monkeypatch, command):
    """torch not importable (sys.modules entry None): --device cuda/torch-cpu is a one-line error."""
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    paths, _, _ = files
    args = _inputs(command, paths)
    for device in ("cuda", "torch-cpu"):
        result = runner.invoke(cli, args + ["--bootstrap", "10", "--device", device])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error:") and "needs torch" in lines[0]
    # auto falls back to numpy: the same numbers as --device cpu
    docs = [
        _json(runner.invoke(cli, args + ["--bootstrap", "20", "--format", "json", "--device", d])) for d in ("auto", "cpu")
    ]
    assert docs[0] == docs[1]


def test_unknown_device_exits_2(runner, files):
    paths, _, _ = files
    result = runner.invoke(cli, ["eval", paths["logits"], paths["labels"], "--bootstrap", "5", "--device", "tpu"])
    assert result.exit_code == 2 and "tpu" in result.stderr


@pytest.mark.parametrize("command", ["compare"])
def test_torch_device_without_bootstrap_is_a_usage_error(runner, files, command):
    """compare's --device only moves the bootstrap: asking for cuda/torch-cpu without one is refused, not
    ignored (eval's --device also moves the metrics pass: tests/cli/test_device.py)."""
    paths, _, _ = files
    args = _inputs(command, paths)
    for device in ("cuda", "torch-cpu"):
        result = runner.invoke(cli, args + ["--bootstrap", "0", "--device", device])
        assert result.exit_code == 2, result.output
        assert "--bootstrap" in result.stderr and device in result.stderr
    assert runner.invoke(cli, args + ["--bootstrap", "0", "--device", "auto"]).exit_code == 0


@pytest.mark.parametrize("command", ["eval", "compare"])
def test_json_records_where_the_bootstrap_ran(runner, files, command):
    paths, _, _ = files
    args = _inputs(command, paths)
    args += ["--bootstrap", "20", "--format", "json"]
    assert _json(runner.invoke(cli, args))["bootstrap"]["device"] == "cpu"
    pytest.importorskip("torch")
    assert _json(runner.invoke(cli, args + ["--device", "torch-cpu"]))["bootstrap"]["device"] == "torch-cpu"


# ---------------------------------------------------------------- suspect intervals say so (issue 19, item 2)


@pytest.fixture
def biased(tmp_path):
    """150 samples, 10 classes, weak logits: AdaECE and classwise-ECE are strongly biased upward, so
    the basic interval (2θ̂ − q) of both lies below the estimate, and AdaECE's reaches below 0."""
    rng = np.random.default_rng(0)
    n, k = 150, 10
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * 0.5
    logits[np.arange(n), labels] += 0.3
    strong = rng.normal(size=(n, k))  # a model that is nearly always right: little bias to cancel B's
    strong[np.arange(n), labels] += 8
    paths = {"logits": tmp_path / "weak.npy", "labels": tmp_path / "weak_labels.npy", "strong": tmp_path / "strong.npy"}
    np.save(paths["logits"], logits)
    np.save(paths["labels"], labels)
    np.save(paths["strong"], strong)
    return {name: str(p) for name, p in paths.items()}


def test_eval_warns_when_an_interval_excludes_its_estimate_or_leaves_the_range(runner, biased):
    args = ["eval", biased["logits"], biased["labels"], "--bootstrap", "200", "--ci-method", "basic"]
    doc = _json(runner.invoke(cli, args + ["--format", "json"]))
    excluded = {m for m, ci in doc["intervals"].items() if not ci["low"] <= ci["point"] <= ci["high"]}
    below_zero = {m for m, ci in doc["intervals"].items() if ci["low"] < 0}
    assert {"adaece", "classwise_ece"} <= excluded and "adaece" in below_zero  # the data do what they should
    result = runner.invoke(cli, args)
    assert result.exit_code == 0
    lines = result.stderr.splitlines()
    for name, pretty in [("adaece", "AdaECE"), ("classwise_ece", "Classwise-ECE")]:
        hit = [line for line in lines if line.startswith(f"Warning: {pretty} interval: the interval excludes")]
        assert len(hit) == 1 and "biased upward" in hit[0], result.stderr
    assert any(line.startswith("Warning: AdaECE interval: the interval reaches below 0") for line in lines)
    assert not any(line.startswith("Warning: Accuracy interval") for line in lines)  # accuracy's is fine
    # the JSON says the same, per interval and in the document's warnings
    assert doc["intervals"]["classwise_ece"]["contains_point"] is False
    assert any("excludes the point estimate" in w for w in doc["intervals"]["classwise_ece"]["warnings"])
    assert doc["intervals"]["accuracy"]["warnings"] == [] and doc["intervals"]["accuracy"]["contains_point"]
    assert any(w.startswith("AdaECE interval: the interval reaches below 0") for w in doc["warnings"])


def test_compare_warns_for_a_difference_interval_that_excludes_the_difference(runner, biased):
    args = ["compare", biased["strong"], biased["labels"], biased["logits"], biased["labels"], "--bootstrap", "200"]
    doc = _json(runner.invoke(cli, args + ["--ci-method", "basic", "--format", "json"]))
    excluded = [m for m, d in doc["differences"].items() if d["interval"] and not d["interval"]["contains_point"]]
    assert excluded  # these data give at least one
    for m in excluded:
        lo, hi, diff = (doc["differences"][m]["interval"][key] for key in ("low", "high", "point"))
        assert diff < lo or diff > hi
    result = runner.invoke(cli, args + ["--ci-method", "basic"])
    assert result.exit_code == 0
    assert sum("B − A" in line and "excludes the point estimate" in line for line in result.stderr.splitlines()) == len(
        excluded
    )


@pytest.mark.parametrize("command", ["eval", "compare"])
@pytest.mark.parametrize("b", ["1", "19"])
def test_too_few_resamples_for_the_level_are_refused(runner, files, command, b):
    """--bootstrap 1 printed `Accuracy 95.05 % [95.06 %, 95.06 %]` without a word."""
    paths, _, _ = files
    result = runner.invoke(cli, _inputs(command, paths) + ["--bootstrap", b])
    assert result.exit_code == 2
    assert f"--bootstrap {b} is too few resamples for a 90% interval: at least 20" in result.stderr
    assert "Traceback" not in result.stderr
    # at 95 % a tail of 2.5 % needs 40 resamples
    result = runner.invoke(cli, _inputs(command, paths) + ["--bootstrap", "20", "--ci-level", "0.95"])
    assert result.exit_code == 2 and "at least 40" in result.stderr


@pytest.mark.parametrize("command", ["eval", "compare"])
def test_few_resamples_get_one_summarising_warning(runner, files, command):
    paths, _, _ = files
    result = runner.invoke(cli, _inputs(command, paths) + ["--bootstrap", "50"])
    assert result.exit_code == 0
    lines = [line for line in result.stderr.splitlines() if "only 50 resamples" in line]
    assert lines == [lines[0]] and lines[0].startswith("Warning: bootstrap: only 50 resamples"), result.stderr
    # 1000 resamples: nothing to say about the resample count
    quiet = runner.invoke(cli, _inputs(command, paths) + ["--bootstrap", "1000", "--format", "json"])
    assert "resamples" not in quiet.stderr


def test_ci_method_bca_is_offered_and_recorded(runner, files):
    paths, logits, labels = files
    args = ["eval", paths["logits"], paths["labels"], "--bootstrap", "200", "--ci-method", "bca", "--format", "json"]
    doc = _json(runner.invoke(cli, args))
    expected = bootstrap(logits, labels, n_resamples=200, method="bca")
    assert doc["bootstrap"]["method"] == "bca"
    for name, ci in expected.items():
        assert doc["intervals"][name]["low"] == ci.low and doc["intervals"][name]["high"] == ci.high


@pytest.mark.parametrize("command", ["eval", "compare"])
@pytest.mark.parametrize("chosen", ["ace", "classwise_rms_ce", "classwise_ks_ce", "all"])
def test_bca_gives_intervals_of_the_opt_in_classwise_metrics(runner, files, command, chosen):
    """Issue #32 item 12: --ci-method bca with ACE / classwise RMS / classwise KS exited 3 (KeyError in
    the jackknife). Each now gets a BCa interval, the library's, around its estimate's neighbourhood."""
    paths, logits, labels = files
    args = _inputs(command, paths) + ["--bootstrap", "60", "--ci-method", "bca", "--bootstrap-metrics", chosen,
                                      "--format", "json"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output + result.stderr
    assert "internal error" not in result.stderr
    doc = json.loads(result.stdout)
    names = ["ace", "classwise_rms_ce", "classwise_ks_ce"] if chosen == "all" else [chosen]
    if command == "eval":
        expected = bootstrap(logits, labels, n_resamples=60, method="bca", metrics="all" if chosen == "all" else names)
    else:
        expected = compare(logits, labels, logits * 2, labels, n_resamples=60, method="bca",
                           metrics="all" if chosen == "all" else names)
    for name in names:
        got = doc["intervals"][name] if command == "eval" else doc["differences"][name]["interval"]
        ci = expected[name] if command == "eval" else expected.differences[name].interval
        assert np.isfinite(got["low"]) and got["low"] <= got["high"]
        assert got["low"] == pytest.approx(ci.low, rel=METRIC_REL, abs=METRIC_ABS)
        assert got["high"] == pytest.approx(ci.high, rel=METRIC_REL, abs=METRIC_ABS)
    assert doc["bootstrap"]["method"] == "bca"
