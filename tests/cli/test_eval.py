"""`calib eval` through Click's CliRunner: formats, gates, files and every bad-input path."""

import json
import pickle

import numpy as np
import pytest
from click.testing import CliRunner

import calibrate_cli as calib
from calibrate_cli.cli import cli
from cli_helpers import after_eval_in_a_fresh_interpreter, one_line_error  # noqa: E402
from libm import METRIC_ABS, METRIC_REL


@pytest.fixture()
def runner():
    return CliRunner()


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, 300)
    logits = rng.normal(size=(300, 4)).astype(np.float32)
    logits[np.arange(300), labels] += 2
    np.save(tmp_path / "logits.npy", logits)
    np.save(tmp_path / "labels.npy", labels)
    return tmp_path, logits, labels


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


def test_json_output_equals_the_library_call(runner, data):
    folder, logits, labels = data
    result = run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    report = calib.evaluate(logits, labels)
    assert doc["metrics"] == report.metrics  # the CLI calls evaluate on the same array: the same path, bits
    assert (doc["n"], doc["k"], doc["n_bins"]) == (300, 4, 15)
    assert set(doc["metrics"]) == {
        "accuracy", "error", "ece", "adaece", "classwise_ece", "mce", "nll", "brier",
        "top5_accuracy", "mean_confidence", "s99_share", "s99_accuracy",
        "rms_ce", "debiased_l2_ce", "ks_ce", "smooth_ece",  # issue 16: additions
    }
    assert doc["intervals"] == {} and doc["gates"] == []
    assert doc["inputs"]["scores"].endswith("logits.npy")
    assert len(doc["bins"]["ece"]) == 15 and sum(b["count"] for b in doc["bins"]["ece"]) == 300
    assert set(doc["bins"]["ece"][0]) == {"lower", "upper", "count", "mean_confidence", "accuracy", "gap"}
    assert doc["calib_version"] == calib.__version__
    assert doc["metrics"]["top5_accuracy"] is None  # K = 4


def test_table_csv_markdown(runner, data):
    folder, logits, labels = data
    ece = calib.evaluate(logits, labels).metrics["ece"]
    table = run(runner, "eval", folder / "logits.npy", folder / "labels.npy")
    assert table.exit_code == 0 and "ECE" in table.stdout and f"{100 * ece:.2f} %" in table.stdout
    csv_out = run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "-f", "csv").stdout
    row = [line for line in csv_out.splitlines() if line.startswith("ece,")][0]
    # CSV numbers carry 15 significant digits (no float noise; issue 19.12): the value rounded, exactly
    assert row.split(",")[1] == f"{ece:.15g}"
    md = run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "-f", "markdown").stdout
    assert md.startswith("| metric | value | definition |")


def test_n_bins_and_compat_options(runner, data):
    folder, logits, labels = data
    doc = json.loads(run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "-f", "json", "--n-bins", "10", "--compat", "focal-calibration").stdout)
    assert doc["n_bins"] == 10 and doc["conventions"]["compat"] == "focal-calibration"
    # calib.ece takes a pass of its own (width-only bins): two paths with eval's, within the contract
    expected = calib.ece(logits, labels, n_bins=10, compat="focal-calibration")
    assert doc["metrics"]["ece"] == pytest.approx(expected, rel=METRIC_REL, abs=METRIC_ABS)


def test_gates_fail_with_exit_1_and_name_each_gate(runner, data):
    folder, logits, labels = data
    m = calib.evaluate(logits, labels).metrics
    ok = run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "--fail-above", f"ece={m['ece'] + 0.01}")
    assert ok.exit_code == 0
    bad = run(
        runner, "eval", folder / "logits.npy", folder / "labels.npy",
        "--fail-above", "ece=0.001", "--fail-above", "nll=100", "--fail-below", "accuracy=0.99", "-f", "json",
    )
    assert bad.exit_code == 1
    assert "ece" in bad.stderr and "accuracy" in bad.stderr and "nll" not in bad.stderr
    doc = json.loads(bad.stdout)
    assert [(g["metric"], g["passed"]) for g in doc["gates"]] == [("ece", False), ("nll", True), ("accuracy", False)]
    percent = run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "--fail-above", "ECE=0.1%")
    assert percent.exit_code == 1 and "0.001" in percent.stderr


def test_gate_on_undefined_metric_fails(runner, data):
    folder, _, _ = data
    result = run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "--fail-below", "top5_accuracy=0.5")
    assert result.exit_code == 1 and "undefined" in result.stderr


@pytest.mark.parametrize("gate", ["ece", "ece=", "foo=0.1", "ece=abc", "=0.1"])
def test_malformed_gate_is_exit_2(runner, data, gate):
    folder, _, _ = data
    one_line_error(run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "--fail-above", gate), "gate" if gate != "foo=0.1" else "unknown metric")


def test_output_file_is_written_atomically_and_not_overwritten(runner, data):
    folder, _, _ = data
    out = folder / "m.json"
    first = run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "-f", "json", "-o", out)
    assert first.exit_code == 0 and json.loads(out.read_text())["n"] == 300
    out.write_text("keep me")
    again = run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "-f", "json", "-o", out)
    one_line_error(again, str(out), "--force")
    assert out.read_text() == "keep me"
    forced = run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "-o", out, "--force")
    # the format follows the suffix (issue 19.3): a forced rewrite of m.json is JSON, not the table
    assert forced.exit_code == 0 and json.loads(out.read_text())["n"] == 300
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp") or ".calib-tmp-" in p.name]


def test_npz_keys_csv_header_and_label_column(runner, data):
    folder, logits, labels = data
    expected = calib.evaluate(logits, labels).metrics["ece"]
    np.savez(folder / "run.npz", logits=logits, labels=labels)
    doc = json.loads(run(runner, "eval", f"{folder}/run.npz:logits", f"{folder}/run.npz:labels", "-f", "json").stdout)
    assert doc["metrics"]["ece"] == expected
    np.savez(folder / "single.npz", logits)
    assert run(runner, "eval", folder / "single.npz", folder / "labels.npy").exit_code == 0
    header = "a,b,c,d,label\n" + "\n".join(
        ",".join(repr(float(v)) for v in row) + f",{y}" for row, y in zip(logits, labels)
    )
    (folder / "preds.csv").write_text(header + "\n")
    doc = json.loads(run(runner, "eval", folder / "preds.csv", "--label-col", "label", "-f", "json").stdout)
    assert doc["metrics"]["ece"] == pytest.approx(expected, abs=1e-12)
    np.savetxt(folder / "plain.csv", logits, delimiter=",")
    np.savetxt(folder / "labels.csv", labels, fmt="%d")
    doc = json.loads(run(runner, "eval", folder / "plain.csv", folder / "labels.csv", "-f", "json").stdout)
    assert doc["metrics"]["ece"] == pytest.approx(expected, abs=1e-6)


def test_probs_flag_and_binary_scores(runner, tmp_path):
    p = np.array([0.9, 0.2, 0.6, 0.4])
    y = np.array([1, 0, 0, 1])
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "y.npy", y)
    doc = json.loads(run(runner, "eval", tmp_path / "p.npy", tmp_path / "y.npy", "--probs", "-f", "json", "--n-bins", "10").stdout)
    # conf: 0.9 ✓, 0.8 ✓, 0.6 ✗ (pred 1, y 0), 0.6 ✗ (pred 0, y 1) → ECE = (0.1 + 0.2 + |0 − 1.2|)/4
    assert doc["k"] == 2 and doc["metrics"]["ece"] == pytest.approx(1.5 / 4, abs=1e-15)
    assert doc["metrics"]["accuracy"] == 0.5


def test_probs_with_zero_true_class_warns_and_reports_inf(runner, tmp_path):
    np.save(tmp_path / "p.npy", np.array([[1.0, 0.0], [0.5, 0.5]]))
    np.save(tmp_path / "y.npy", np.array([1, 0]))
    result = run(runner, "eval", tmp_path / "p.npy", tmp_path / "y.npy", "--probs", "-f", "json")
    assert result.exit_code == 0
    assert "Warning" in result.stderr and "inf" in result.stderr
    assert json.loads(result.stdout)["metrics"]["nll"] == "inf"


# ---- bad input: one line naming the file, exit 2, no traceback --------------------------------


def test_missing_and_unknown_files(runner, data, tmp_path):
    folder, _, _ = data
    one_line_error(run(runner, "eval", tmp_path / "nope.npy", folder / "labels.npy"), "nope.npy", "no such file")
    (tmp_path / "x.txt").write_text("1,2")
    one_line_error(run(runner, "eval", tmp_path / "x.txt", folder / "labels.npy"), "x.txt", "unknown file type")
    one_line_error(run(runner, "eval", tmp_path, folder / "labels.npy"), "directory")


def test_pickled_and_corrupt_files(runner, data, tmp_path):
    folder, logits, _ = data
    with open(tmp_path / "pickled.npy", "wb") as f:
        pickle.dump({"logits": logits}, f)
    one_line_error(run(runner, "eval", tmp_path / "pickled.npy", folder / "labels.npy"), "pickled.npy", "pickled")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    one_line_error(run(runner, "eval", tmp_path / "objects.npy", folder / "labels.npy"), "objects.npy", "pickled")
    raw = (folder / "logits.npy").read_bytes()
    (tmp_path / "truncated.npy").write_bytes(raw[: len(raw) // 2])
    one_line_error(run(runner, "eval", tmp_path / "truncated.npy", folder / "labels.npy"), "truncated.npy", "truncated or corrupt")
    (tmp_path / "garbage.npy").write_bytes(b"hello world, not numpy")
    one_line_error(run(runner, "eval", tmp_path / "garbage.npy", folder / "labels.npy"), "garbage.npy", "not a .npy")
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 broken zip")
    one_line_error(run(runner, "eval", tmp_path / "bad.npz", folder / "labels.npy"), "bad.npz")
    np.savez(tmp_path / "obj.npz", a=np.array([None, 1], dtype=object))
    one_line_error(run(runner, "eval", tmp_path / "obj.npz", folder / "labels.npy"), "obj.npz", "pickled")


def test_npz_key_errors(runner, data):
    folder, logits, labels = data
    np.savez(folder / "two.npz", logits=logits, labels=labels)
    one_line_error(run(runner, "eval", folder / "two.npz", folder / "labels.npy"), "two.npz", "several arrays")
    one_line_error(run(runner, "eval", f"{folder}/two.npz:nope", folder / "labels.npy"), "nope", "logits, labels")


@pytest.mark.parametrize(
    ("scores", "labels", "fragment"),
    [
        (np.zeros((3, 2)), np.zeros(2, int), "2 labels"),
        (np.zeros((3, 2)), np.array([0, 1, 5]), "out of range"),
        (np.array([[0.0, np.nan]]), np.array([0]), "NaN"),
        (np.array([[np.inf, 0.0]]), np.array([0]), "Inf"),
        (np.zeros((3, 1)), np.zeros(3, int), "K ≥ 2"),
        (np.zeros((0, 3)), np.zeros(0, int), "N = 0"),
        (np.zeros((2, 2, 2)), np.zeros(2, int), "shape"),
        (np.zeros((2, 2)), np.array([0.5, 1]), "whole numbers"),
    ],
)
def test_spec_error_list_through_the_cli(runner, tmp_path, scores, labels, fragment):
    np.save(tmp_path / "s.npy", scores)
    np.save(tmp_path / "l.npy", labels)
    result = run(runner, "eval", tmp_path / "s.npy", tmp_path / "l.npy")
    one_line_error(result, fragment)
    assert "s.npy" in result.stderr or "l.npy" in result.stderr


def test_probs_that_do_not_sum_to_one_suggest_dropping_the_flag(runner, data):
    folder, _, _ = data
    one_line_error(run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "--probs"), "logits.npy", "drop --probs")


def test_csv_errors(runner, tmp_path, data):
    folder, _, _ = data
    (tmp_path / "bad.csv").write_text("a,b\n0.1,0.9\n0.2,oops\n")
    one_line_error(run(runner, "eval", tmp_path / "bad.csv", folder / "labels.npy"), "bad.csv", "line 3", "oops")
    (tmp_path / "ragged.csv").write_text("0.1,0.9\n0.2\n")
    one_line_error(run(runner, "eval", tmp_path / "ragged.csv", folder / "labels.npy"), "ragged.csv", "columns")
    (tmp_path / "ok.csv").write_text("a,b,y\n0.1,0.9,1\n")
    one_line_error(run(runner, "eval", tmp_path / "ok.csv", "--label-col", "label"), "ok.csv", "no column named")
    one_line_error(run(runner, "eval", folder / "logits.npy", "--label-col", "y"), "--label-col works with .csv")


def test_usage_errors_exit_2(runner, data):
    folder, _, _ = data
    assert run(runner, "eval", folder / "logits.npy").exit_code == 2  # no labels
    assert run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "--n-bins", "0").exit_code == 2
    assert run(runner, "eval", folder / "logits.npy", folder / "labels.npy", "--format", "xml").exit_code == 2


class Evil:
    """Not a tensor: torch.load(weights_only=True) must refuse it."""


def test_pt_file_without_torch_says_how_to_install_it(runner, data, tmp_path, monkeypatch):
    folder, _, _ = data
    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # import torch → ImportError
    (tmp_path / "x.pt").write_bytes(b"not really")
    one_line_error(run(runner, "eval", tmp_path / "x.pt", folder / "labels.npy"), "x.pt", "pip install")


def test_pt_files(runner, data, tmp_path):
    folder, logits, labels = data
    torch = pytest.importorskip("torch")
    torch.save({"logits": torch.from_numpy(logits), "labels": torch.from_numpy(labels)}, tmp_path / "run.pt")
    doc = json.loads(run(runner, "eval", f"{tmp_path}/run.pt:logits", f"{tmp_path}/run.pt:labels", "-f", "json").stdout)
    assert doc["metrics"]["ece"] == calib.evaluate(logits, labels).metrics["ece"]
    torch.save({"obj": Evil()}, tmp_path / "evil.pt")
    one_line_error(run(runner, "eval", f"{tmp_path}/evil.pt:obj", folder / "labels.npy"), "evil.pt")


def test_help_lists_eval_and_ends_with_examples(runner):
    top = run(runner, "--help")
    assert top.exit_code == 0 and "eval" in top.stdout
    for command in ("eval", "temperature", "plot", "compare"):
        sub = run(runner, command, "--help").stdout
        assert "Examples:" in sub
        assert sub.rstrip().splitlines()[-1].strip().startswith(f"calib {command}"), command


def test_eval_of_npy_files_imports_no_module_it_does_not_use(tmp_path):
    """numpy.ma (np.unique's first call imports it), statistics (the bootstrap's normal quantiles) and
    zipfile (.npz files) cost ~20 ms of start-up together; `calib eval` of .npy files needs none."""
    expression = "sorted(m for m in ('numpy.ma', 'statistics', 'zipfile') if m in imported)"
    assert after_eval_in_a_fresh_interpreter(tmp_path, expression, "--format", "json") == "[]"


@pytest.mark.parametrize("fmt,rich_loaded", [("json", False), ("csv", False), ("table", True)])
def test_machine_readable_output_starts_without_rich(tmp_path, fmt, rich_loaded):
    """JSON and CSV reports never import Rich (~50 ms of start-up); the table does."""
    expression = "any(m == 'rich' or m.startswith('rich.') for m in imported)"
    assert after_eval_in_a_fresh_interpreter(tmp_path, expression, "--format", fmt) == str(rich_loaded)


# -- issue #32 item 13: the report says which calibration produced it ---------------------------------


def test_eval_records_the_calibration_it_applied(runner, data, monkeypatch):
    folder, logits, labels = data
    monkeypatch.chdir(folder)
    vector = {"method": "vector", "k": 4, "vector": {"w": [2.0, 1.0, 1.0, 0.5], "b": [0.0, 0.1, 0.0, 0.0]}}
    (folder / "v.json").write_text(json.dumps(vector))
    (folder / "t.json").write_text(json.dumps({"method": "temperature", "k": 4, "temperature": 2.0}))

    def doc(*extra):
        result = run(runner, "eval", "logits.npy", "labels.npy", "-f", "json", *extra)
        assert result.exit_code == 0, result.output + result.stderr
        return json.loads(result.stdout)

    assert doc()["calibration"] is None
    assert doc("--temperature", "1.5")["calibration"] == {
        "method": "temperature", "label": "T = 1.5", "temperature": 1.5, "file": None,
        "calibrator": {"method": "temperature", "k": None, "temperature": 1.5},
    }
    got = doc("--temperature", "t.json")["calibration"]
    assert (got["method"], got["label"], got["temperature"], got["file"]) == ("temperature", "T = 2", 2.0, "t.json")
    got = doc("--calibrator", "v.json")
    assert (got["calibration"]["method"], got["calibration"]["temperature"], got["calibration"]["file"]) == (
        "vector", None, "v.json")
    assert got["calibration"]["calibrator"]["vector"] == vector["vector"]
    # the numbers are those of the calibrated logits z·w + b (by hand), which is what the record claims
    expected = calib.evaluate(logits.astype(np.float64) * np.array(vector["vector"]["w"]) + np.array(vector["vector"]["b"]),
                              labels).metrics
    for name, value in expected.items():
        if value is not None:
            assert got["metrics"][name] == pytest.approx(value, rel=METRIC_REL, abs=METRIC_ABS), name


def test_eval_table_markdown_csv_and_figure_name_the_calibration(runner, data, monkeypatch):
    folder, _, _ = data
    monkeypatch.chdir(folder)
    (folder / "t.json").write_text(json.dumps({"method": "temperature", "k": 4, "temperature": 2.0}))
    base = ["eval", "logits.npy", "labels.npy"]

    table = run(runner, *base, "--temperature", "t.json")
    assert table.exit_code == 0, table.stderr
    assert "15 bins; calibrated: T = 2 from t.json" in " ".join(table.stdout.split())
    plain = run(runner, *base)
    assert "calibrated" not in plain.stdout

    md = run(runner, *base, "--temperature", "1.5", "-f", "markdown").stdout
    assert md.splitlines()[0] == "**Calibrated: T = 1.5**"
    assert "Calibrated" not in run(runner, *base, "-f", "markdown").stdout

    csv_text = run(runner, *base, "--temperature", "t.json", "-f", "csv").stdout.splitlines()
    assert csv_text[0] == "metric,value,definition,calibration"
    assert all(line.endswith(",T = 2 from t.json") for line in csv_text[1:])
    bins = run(runner, *base, "--temperature", "t.json", "-f", "csv", "--bins").stdout.splitlines()
    assert bins[0] == "bin,lower,upper,count,mean_confidence,accuracy,gap,calibration"
    assert len(bins) == 16 and all(line.endswith(",T = 2 from t.json") for line in bins[1:])
    assert run(runner, *base, "-f", "csv").stdout.splitlines()[0] == "metric,value,definition"

    pytest.importorskip("matplotlib")
    result = run(runner, *base, "--temperature", "t.json", "--plot", "rel.svg", "-f", "json")
    assert result.exit_code == 0, result.stderr
    assert b"calibrated: T = 2 from t.json" in (folder / "rel.svg").read_bytes()
