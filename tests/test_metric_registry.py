"""The metric registry: sums → metrics by hand, declared ranges hold, every consumer reads it,
and the docs' "Adding a metric" walkthrough really is a one-entry change."""

from __future__ import annotations

import ast
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import naive_reference as naive
from calibrate_cli import evaluate
from calibrate_cli.bootstrap import bootstrap_values
from calibrate_cli.metrics.registry import (
    METRIC_DEFINITIONS,
    METRIC_NAMES,
    METRICS,
    BinSums,
    MetricSums,
    metric_spec,
    metric_values,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "calibrate_cli"


def _hand_sums(**overrides) -> MetricSums:
    """Two rows of N = 3 samples, M = 2 bins, K = 2 classes (values in the test below)."""
    fields = dict(
        n=3,
        width=BinSums(
            count=np.array([[2.0, 1.0], [0.0, 3.0]]),
            sum_conf=np.array([[0.8, 0.9], [0.0, 2.4]]),
            sum_correct=np.array([[1.0, 1.0], [0.0, 3.0]]),
        ),
        correct=np.array([2.0, 3.0]),
        conf=np.array([1.7, 2.4]),
        nll=np.array([1.5, 0.9]),
        nll_inf=np.array([0.0, 1.0]),
        brier=np.array([0.6, 0.3]),
        top5=np.array([3.0, 2.0]),
        s99=np.array([0.0, 1.0]),
        s99_correct=np.array([0.0, 1.0]),
        classwise_gap=np.array([[[0.2, -0.1], [0.3, 0.0]], [[0.0, 0.0], [0.6, 0.0]]]),
    )
    return MetricSums(**(fields | overrides))


def test_metrics_of_hand_computed_sums_row_by_row():
    v = metric_values(_hand_sums())
    close = lambda got, want: np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)  # noqa: E731
    close(v["ece"], [(0.2 + 0.1) / 3, 0.6 / 3])  # (1/N) Σ_b |Σcorrect − Σconf|
    close(v["mce"], [0.1, 0.2])  # row 0: |0.4 − 0.5|, |0.9 − 1|; row 1: the empty bin is skipped
    close(v["accuracy"], [2 / 3, 1.0])
    close(v["error"], [1 / 3, 0.0])
    close(v["mean_confidence"], [1.7 / 3, 0.8])
    assert v["nll"][0] == pytest.approx(0.5, abs=1e-15) and v["nll"][1] == math.inf
    close(v["brier"], [0.2, 0.1])
    close(v["top5_accuracy"], [1.0, 2 / 3])
    close(v["s99_share"], [0.0, 1 / 3])
    assert math.isnan(v["s99_accuracy"][0]) and v["s99_accuracy"][1] == 1.0
    close(v["classwise_ece"], [(0.3 / 3 + 0.3 / 3) / 2, (0.0 + 0.6 / 3) / 2])
    assert np.isnan(v["adaece"]).all()  # equal-mass sums not given


def test_classwise_over_the_classes_of_each_row_and_missing_sums_are_nan():
    v = metric_values(_hand_sums(classwise_classes=np.array([1.0, 2.0])))
    np.testing.assert_allclose(v["classwise_ece"], [0.3 / 3, 0.6 / 3 / 2], rtol=0, atol=1e-15)
    v = metric_values(_hand_sums(top5=None, nll=None, classwise_gap=None), ["top5_accuracy", "nll", "classwise_ece"])
    assert all(np.isnan(x).all() for x in v.values())


def test_metric_names_and_definitions_stay_importable_from_metrics():
    from calibrate_cli import METRIC_NAMES as top_level
    from calibrate_cli.metrics.functional import METRIC_DEFINITIONS as defs
    from calibrate_cli.metrics.functional import METRIC_NAMES as names

    assert names == top_level == METRIC_NAMES == tuple(s.name for s in METRICS)
    assert defs == METRIC_DEFINITIONS and list(defs) == list(names)
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("seed, k, kind", [(0, 3, "logits"), (1, 8, "logits"), (2, 12, "probs"), (3, 2, "probs")])
def test_every_value_lies_in_its_declared_range(seed, k, kind):
    """Point estimates and bootstrap values, on well and badly calibrated data, with ties and zeros."""
    rng = np.random.default_rng(seed)
    n = 150
    scores = rng.normal(size=(n, k)) * rng.choice([0.3, 5.0, 40.0], size=(n, 1))
    labels = rng.integers(0, k, n)
    if kind == "probs":
        scores = np.round(np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True), 1)
        scores[:, -1] = 1.0 - scores[:, :-1].sum(axis=1)
        scores = np.clip(scores, 0.0, 1.0)
        scores /= scores.sum(axis=1, keepdims=True)
    point, values = bootstrap_values(scores, labels, input_kind=kind, n_resamples=40, seed=seed, metrics="all")
    for spec in METRICS:
        low, high = spec.value_range
        if point[spec.name] is not None:
            assert low <= point[spec.name] <= high, (spec.name, point[spec.name])
        v = values[spec.name][~np.isnan(values[spec.name])]
        assert ((low <= v) & (v <= high)).all(), spec.name


def test_percent_metrics_are_fractions_and_ranges_read_well():
    for spec in METRICS:
        assert spec.percent == (spec.value_range == (0.0, 1.0)), spec.name
    assert metric_spec("nll").range_text() == "[0, inf)"
    assert metric_spec("brier").range_text() == "[0, 2]"
    assert metric_spec("ece").range_text() == "[0, 1]"


def test_render_reads_the_registry():
    from calibrate_cli.cli import render

    assert render.PRETTY_NAMES == {s.name: s.display_name for s in METRICS}
    assert render.PERCENT_METRICS == {"accuracy", "error", "ece", "adaece", "classwise_ece", "mce", "top5_accuracy",
                                      "mean_confidence", "s99_share", "s99_accuracy",
                                      "rms_ce", "debiased_l2_ce", "ks_ce", "smooth_ece", "ace",
                                      "classwise_rms_ce", "classwise_ks_ce"}
    assert render.format_value("nll", 0.25) == "0.2500" and render.format_value("ece", 0.25) == "25.00 %"
    assert "top5_accuracy" not in render.shown_metrics({"top5_accuracy": None})
    assert "s99_accuracy" in render.shown_metrics({"s99_accuracy": None})


@pytest.mark.parametrize("doc", ["README.md", "docs/metrics.md", "docs/json-schema.md"])
def test_the_docs_name_every_registry_metric(doc):
    text = (ROOT / doc).read_text()
    missing = [name for name in METRIC_NAMES if f"`{name}`" not in text and f'"{name}"' not in text]
    assert not missing, f"{doc} does not document {missing}"


# Metric names written as string literals outside the registry, each with its reason. Anything new
# here means a metric list is being written out again: read the registry instead.
_ALLOWED_LITERALS = {
    "metrics/registry.py": set(METRIC_NAMES),  # the one place
    "metrics/functional.py": set(METRIC_NAMES),  # __all__ and each convenience function naming its registry entry
    "__init__.py": set(METRIC_NAMES),  # __all__: the public function names
    "engine/binning.py": {"accuracy", "mean_confidence"},  # per-bin row keys of BinStats.to_rows, not metrics
    "cli/render.py": {"accuracy", "mean_confidence"},  # the per-bin table's columns and row keys
    "evaluate.py": {"ece", "adaece"},  # JSON keys of the two binnings (report.bins / adaptive_bins)
    "plots/diagram.py": {"ece", "adaece", "accuracy"},  # the reliability diagram annotates these three
    "cli/eval.py": {"ece"},
    "metrics/smooth_ece.py": {"smooth_ece"},  # __all__: the module's function name  # the ECE interval shown on `eval --plot`
    "training/losses.py": {"brier"},  # the training loss named brier (make_loss("brier")), not the metric
    "training/data.py": {"error"},  # warnings.simplefilter("error", ...): the warnings action, not the metric
    # the temperature search objectives and the search "nll" (own option values of calib temperature)
    "calibrators/base.py": {"ece", "nll", "adaece"},
    "calibrators/temperature.py": {"ece", "nll", "adaece"},
    "training/paper_table.py": {"error", "ece", "adaece", "classwise_ece", "nll"},  # TABLE_METRICS: the paper's Table 1 columns
    "ood.py": {"mean_confidence"},  # OodResult's mean max-probability of each set (a field, not the metric)
    # calib report: the curves against T (the search objectives "ece" and "nll"), the headline numbers
    # (ECE, NLL, accuracy), the per-class view (classwise_ece) and the confidence histogram's two lines
    "report/core.py": {"ece", "nll"},
    "report/figures.py": {"ece", "classwise_ece", "accuracy", "mean_confidence"},
    "report/html.py": {"ece", "nll", "accuracy", "classwise_ece"},
    "cli/report.py": {"ece", "nll"},
    # beyond one number: the decomposed score's name, the calibration test's statistic (the ECE), the
    # per-bin row keys of the interval table, and the selective risk (the error of the accepted samples)
    "diagnostics/decomposition.py": {"brier"},
    "diagnostics/reliability_stats.py": {"ece", "accuracy", "mean_confidence"},
    "cli/diagnostics.py": {"accuracy"},
    "diagnostics/selective.py": {"error"},
    "cli/fit.py": {"nll"},  # whether the NLL is one of the table's columns (its inf warning then)
    "cli/topk.py": {"accuracy"},  # top-j accuracies formatted as the accuracy is
    "metrics/meter.py": {"nll", "brier"},  # the running sums of a meter (MetricSums fields)
    # answers' binary NLL and Brier (p of the outcome), and the JSON keys of the two binnings
    "metrics/sequences.py": {"nll", "brier", "ece", "adaece"},
    # what the top k determine (the registry's top-label metrics, NLL, top-5) and what they do not
    "metrics/topk.py": {"classwise_ece", "brier", "nll", "ece", "adaece", "top5_accuracy"},
}


def test_metric_names_are_written_only_in_the_registry():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and node.value in METRIC_NAMES
                and id(node) not in docstrings
                and node.value not in _ALLOWED_LITERALS.get(rel, set())
            ):
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not found, "metric names written outside the registry: " + ", ".join(found)


# ------------------------------------------------------------------ the contributing.md walkthrough


def _walkthrough_code() -> str:
    text = (ROOT / "docs" / "contributing.md").read_text()
    section = text.split("## Adding a metric", 1)[1].split("\n## ", 1)[0]  # up to the next section
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


def _naive_overconfidence(probs, labels, n_bins=15) -> float:
    confs, correct = naive._conf_correct(probs, labels)
    count, s_conf, s_corr = [0] * n_bins, [0.0] * n_bins, [0.0] * n_bins
    for c, ok in zip(confs, correct):
        b = naive.equal_width_bin(c, n_bins)
        count[b] += 1
        s_conf[b] += c
        s_corr[b] += ok
    return sum(count[b] / len(confs) * max(s_conf[b] / count[b] - s_corr[b] / count[b], 0.0) for b in range(n_bins) if count[b])


def test_the_walkthrough_metric_matches_a_naive_loop():
    namespace = {}
    exec("from calibrate_cli.metrics.registry import *\nfrom calibrate_cli.metrics.registry import _spec\n"
         "import numpy as np\n" + _walkthrough_code(), namespace)
    spec = namespace["OVERCONFIDENCE"]
    rng = np.random.default_rng(11)
    logits = rng.normal(size=(400, 5)) * 3
    labels = rng.integers(0, 5, 400)
    probs = naive.softmax_rows(logits)
    from calibrate_cli.metrics.functional import summary_sums
    from calibrate_cli.data.predictions import as_predictions
    from calibrate_cli.engine.summary import summarize

    sums = summary_sums(summarize(as_predictions(logits, labels, "logits")), 15)
    assert spec.values(sums)[0] == pytest.approx(_naive_overconfidence(probs, labels), abs=1e-12)
    assert 0.0 < spec.values(sums)[0] <= evaluate(logits, labels).metrics["ece"]


_END_TO_END = r"""
import json, sys
import numpy as np
from click.testing import CliRunner
from calibrate_cli.cli import cli

folder = sys.argv[1]
runner = CliRunner()
def run(*args):
    r = runner.invoke(cli, [*args])
    return {"code": r.exit_code, "out": r.stdout, "err": r.stderr}
logits, labels = f"{folder}/logits.npy", f"{folder}/labels.npy"
print(json.dumps({
    "json": run("eval", logits, labels, "--format", "json", "--bootstrap", "30"),
    "table": run("eval", logits, labels),
    "csv": run("eval", logits, labels, "--format", "csv"),
    "gate_ok": run("eval", logits, labels, "--fail-above", "overconfidence=99%"),
    "gate_bad": run("eval", logits, labels, "--fail-above", "overconfidence=2"),
    "compare": run("compare", logits, labels, logits, labels, "--bootstrap", "20", "--format", "json"),
    "temperature": run("temperature", logits, labels, "--format", "csv"),
}))
"""


def test_adding_the_walkthrough_entry_is_the_whole_change(tmp_path):
    """Insert the docs' code into a copy of the registry, put the entry in METRICS, change nothing
    else: every command reports, formats, bootstraps, compares and gates the new metric."""
    copy = tmp_path / "pkg" / "calibrate_cli"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    registry = copy / "metrics" / "registry.py"
    source = registry.read_text()
    anchor = "_BY_NAME: dict[str, MetricSpec] ="
    assert source.count(anchor) == 1
    source = source.replace(anchor, _walkthrough_code() + "\nMETRICS = METRICS + (OVERCONFIDENCE,)\n\n" + anchor)
    registry.write_text(source)
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 6, 300)
    logits = rng.normal(size=(300, 6)) * 4
    np.save(tmp_path / "logits.npy", logits)
    np.save(tmp_path / "labels.npy", labels)
    env_path = str(tmp_path / "pkg")
    proc = subprocess.run(
        [sys.executable, "-c", _END_TO_END, str(tmp_path)],
        capture_output=True, text=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    doc = json.loads(r["json"]["out"])
    expected = _naive_overconfidence(naive.softmax_rows(logits), labels)
    assert doc["metrics"]["overconfidence"] == pytest.approx(expected, abs=1e-12)
    interval = doc["intervals"]["overconfidence"]
    assert interval["n_resamples"] == 30 and interval["low"] < interval["high"]
    assert "Overconfidence" in r["table"]["out"] and "%" in r["table"]["out"].split("Overconfidence")[1].split("\n")[0]
    assert "overconfidence," in r["csv"]["out"]
    assert r["gate_ok"]["code"] == 0
    assert r["gate_bad"]["code"] == 2 and "overconfidence=2%" in r["gate_bad"]["err"]
    assert "overconfidence" in json.loads(r["compare"]["out"])["differences"]
    assert r["temperature"]["code"] == 0 and "overconfidence" in r["temperature"]["out"]
