"""`calib eval --decompose / --bin-intervals / --calibration-test / --fail-p-below` through CliRunner:
the JSON equals the library calls, the CSV columns, the gate's exit code, the usage errors."""

import csv
import io
import json

import numpy as np
import pytest

from calibrate_cli.cli import cli
from calibrate_cli.cli.render import json_ready
from calibrate_cli.diagnostics import calibration_test, clopper_pearson, decompose, top_label
from cli_helpers import one_line_error  # noqa: E402


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, 300)
    logits = rng.normal(size=(300, 4))
    logits[np.arange(300), labels] += 2
    np.save(tmp_path / "logits.npy", logits)
    np.save(tmp_path / "labels.npy", labels)
    return tmp_path, logits, labels


def run(runner, *args):
    return runner.invoke(cli, ["eval", *(str(a) for a in args)])


def test_decompose_json_equals_the_library_call(runner, data):
    folder, logits, labels = data
    result = run(runner, folder / "logits.npy", folder / "labels.npy", "--decompose", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["decompositions"] == json_ready(decompose(logits, labels).to_dict())
    top = doc["decompositions"]["top_label"]["brier"]
    assert top["score"] == pytest.approx(top["miscalibration"] - top["discrimination"] + top["uncertainty"])
    assert "metrics" in doc and "calibration_test" not in doc


def test_decompose_table_and_markdown(runner, data):
    folder, _, _ = data
    result = run(runner, folder / "logits.npy", folder / "labels.npy", "--decompose")
    assert result.exit_code == 0, result.output
    assert "Score decompositions (CORP)" in result.stdout and "classwise mean" in result.stdout
    assert "Murphy" in result.stdout
    md = run(runner, folder / "logits.npy", folder / "labels.npy", "--decompose", "--format", "markdown")
    assert md.exit_code == 0 and "| top-label | log |" in md.stdout


def test_decompose_after_a_temperature(runner, data):
    folder, logits, labels = data
    result = run(runner, folder / "logits.npy", folder / "labels.npy", "--temperature", 1.5, "--decompose",
                 "--calibration-test", 19, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["decompositions"] == json_ready(decompose(logits / 1.5, labels).to_dict())
    conf, correct = top_label(logits / 1.5, labels)
    assert doc["calibration_test"]["p_value"] == calibration_test(conf, correct, n_resamples=19).p_value


def test_decompose_one_d_probabilities(runner, tmp_path):
    rng = np.random.default_rng(0)
    p = np.round(rng.uniform(0, 1, 50), 1)
    y = (rng.random(50) < p).astype(int)
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "y.npy", y)
    result = run(runner, tmp_path / "p.npy", tmp_path / "y.npy", "--probs", "--decompose", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)["decompositions"]
    assert len(doc["classwise"]["brier"]["per_class"]) == 2
    assert doc == json_ready(decompose(p, y, input_kind="probs").to_dict())


def test_decompose_infinite_log_score_warns(runner, tmp_path):
    np.save(tmp_path / "p.npy", np.array([[1.0, 0.0], [0.3, 0.7]]))
    np.save(tmp_path / "y.npy", np.array([1, 1]))
    result = run(runner, tmp_path / "p.npy", tmp_path / "y.npy", "--probs", "--decompose", "--format", "json")
    assert result.exit_code == 0, result.output
    assert "infinite" in result.stderr
    assert json.loads(result.stdout)["decompositions"]["top_label"]["log"]["miscalibration"] == "inf"


def test_calibration_test_json_and_seed(runner, data):
    folder, logits, labels = data
    args = (folder / "logits.npy", folder / "labels.npy", "--calibration-test", 99, "--format", "json")
    doc = json.loads(run(runner, *args).stdout)["calibration_test"]
    conf, correct = top_label(logits, labels)
    want = calibration_test(conf, correct, n_resamples=99, seed=0)
    assert doc["p_value"] == want.p_value and doc["value"] == pytest.approx(want.statistic, rel=1e-15)
    seeded = json.loads(run(runner, *args, "--seed", 4).stdout)["calibration_test"]
    assert seeded["seed"] == 4 and seeded["p_value"] == calibration_test(conf, correct, n_resamples=99, seed=4).p_value


def test_fail_p_below_gates(runner, tmp_path):
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 3, 400)
    logits = rng.normal(size=(400, 3)) * 6  # over-confident and mostly wrong
    np.save(tmp_path / "s.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    result = run(runner, tmp_path / "s.npy", tmp_path / "y.npy", "--calibration-test", 99, "--fail-p-below", 0.05,
                 "--format", "json")
    assert result.exit_code == 1
    assert "calibration test failed" in result.stderr and "p = 0.01 < 0.05" in result.stderr
    doc = json.loads(result.stdout)  # the report is still written
    assert doc["calibration_test"]["gate"] == {"fail_p_below": 0.05, "passed": False}
    # calibrated outcomes: the gate passes
    p = rng.uniform(0.5, 1, 400)
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "z.npy", (rng.random(400) < p).astype(int))
    ok = run(runner, tmp_path / "p.npy", tmp_path / "z.npy", "--probs", "--calibration-test", 99,
             "--fail-p-below", 0.01)
    assert ok.exit_code == 0, ok.output


def test_bin_intervals_csv_and_json(runner, data):
    folder, logits, labels = data
    result = run(runner, folder / "logits.npy", folder / "labels.npy", "--bin-intervals", 0.9, "--format", "csv",
                 "--bins", "--n-bins", 5)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 5 and "accuracy_low" in rows[0]
    conf, correct = top_label(logits, labels)
    for b, row in enumerate(rows):
        members = correct[(conf > b / 5) & (conf <= (b + 1) / 5) | ((b == 0) & (conf == 0))]
        if members.size == 0:
            assert row["accuracy_low"] == ""
            continue
        low, high = clopper_pearson(int(members.sum()), members.size, 0.9)
        assert float(row["accuracy_low"]) == pytest.approx(float(low), rel=1e-6)
        assert float(row["accuracy_high"]) == pytest.approx(float(high), rel=1e-6)
    doc = json.loads(run(runner, folder / "logits.npy", folder / "labels.npy", "--bin-intervals", 0.9,
                         "--format", "json").stdout)
    assert doc["bin_intervals"]["level"] == 0.9 and len(doc["bin_intervals"]["bins"]) == 15
    table = run(runner, folder / "logits.npy", folder / "labels.npy", "--bin-intervals", 0.95)
    assert "95% Clopper–Pearson" in table.stdout


@pytest.mark.parametrize("args,fragment", [
    (["--fail-p-below", "0.05"], "--fail-p-below needs --calibration-test"),
    (["--decompose", "--format", "csv"], "--decompose"),
    (["--bin-intervals", "0.9", "--format", "csv"], "--bins"),
    (["--calibration-test", "0"], "--calibration-test"),
    (["--bin-intervals", "1.5"], "--bin-intervals"),
])
def test_usage_errors(runner, data, args, fragment):
    folder, _, _ = data
    result = run(runner, folder / "logits.npy", folder / "labels.npy", *args)
    assert result.exit_code == 2
    assert fragment in result.stderr


def test_bad_labels_are_one_line(runner, data):
    folder, _, _ = data
    np.save(folder / "bad.npy", np.array([0, 1]))
    one_line_error(run(runner, folder / "logits.npy", folder / "bad.npy", "--decompose"), "labels")


def test_help_teaches_by_example(runner):
    result = runner.invoke(cli, ["eval", "--help"])
    for flag in ("--decompose", "--bin-intervals", "--calibration-test", "--fail-p-below"):
        assert flag in result.stdout
    assert "calib eval logits.npy labels.npy --decompose" in result.stdout
