"""`calib conformal` and `calib eval --conformal / --selective / --risk-coverage` through CliRunner:
the JSON equals the library calls, the saved fit is reused, outputs are never overwritten without
--force, usage errors and bad input are one line."""

import json

import numpy as np
import pytest

from calibrate_cli.cli import cli
from calibrate_cli.cli.render import json_ready
from calibrate_cli.conformal import ConformalFit, coverage_report, fit_conformal, prediction_sets
from calibrate_cli.diagnostics.selective import confidence_and_correct, selective_report
from cli_helpers import one_line_error  # noqa: E402


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(5)
    for name, n in (("val", 400), ("test", 300)):
        labels = rng.integers(0, 4, n)
        logits = rng.normal(size=(n, 4))
        logits[np.arange(n), labels] += 1.5
        np.save(tmp_path / f"{name}.npy", logits)
        np.save(tmp_path / f"{name}_y.npy", labels)
    return tmp_path


def files(folder, test=True):
    out = [folder / "val.npy", folder / "val_y.npy"]
    return [str(f) for f in out + ([folder / "test.npy", folder / "test_y.npy"] if test else [])]


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


@pytest.mark.parametrize("extra", [[], ["--method", "aps"], ["--method", "raps", "--lambda", "0.1", "--k-reg", "1"],
                                   ["--method", "aps", "--randomized", "--seed", "3"], ["--alpha", "0.2"]])
def test_json_equals_the_library_calls(runner, data, extra):
    result = run(runner, "conformal", *files(data), *extra, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    options = {"alpha": 0.1, "method": "lac"}
    args = iter(extra)
    for flag in args:
        value = True if flag == "--randomized" else next(args)
        key = {"--lambda": "lam", "--k-reg": "k_reg", "--seed": "seed"}.get(flag, flag.lstrip("-"))
        options[key] = {"alpha": float, "lam": float, "k_reg": int, "seed": int}.get(key, lambda v: v)(value)
    fit = fit_conformal(np.load(data / "val.npy"), np.load(data / "val_y.npy"), **options)
    coverage = coverage_report(prediction_sets(fit, np.load(data / "test.npy")), np.load(data / "test_y.npy"))
    assert doc["fit"] == json_ready(fit.to_dict())
    assert doc["test"] == json_ready(coverage.to_dict())
    assert doc["threshold"] == fit.threshold and doc["command"] == "conformal"
    assert doc["guarantee"] == {"low": 1 - fit.alpha, "high": pytest.approx(1 - fit.alpha + 1 / 401)}


def test_table_markdown_and_csv(runner, data):
    result = run(runner, "conformal", *files(data))
    assert result.exit_code == 0, result.output
    assert "threshold" in result.stdout and "Prediction set sizes" in result.stdout
    md = run(runner, "conformal", *files(data), "--format", "markdown")
    assert md.exit_code == 0 and "| coverage |" in md.stdout and "| set size | sets | share |" in md.stdout
    csv = run(runner, "conformal", *files(data), "--format", "csv")
    assert csv.exit_code == 0 and csv.stdout.startswith("quantity,value\n") and "\ncoverage," in csv.stdout


def test_save_then_eval_conformal(runner, data):
    fit_file = data / "fit.json"
    result = run(runner, "conformal", *files(data, test=False), "--method", "aps", "--save", fit_file)
    assert result.exit_code == 0, result.output
    fit = ConformalFit.from_dict(json.loads(fit_file.read_text()))
    assert fit.method == "aps" and fit.n == 400
    again = run(runner, "conformal", *files(data, test=False), "--save", fit_file)
    one_line_error(again, "fit.json", "--force")
    assert ConformalFit.from_dict(json.loads(fit_file.read_text())).method == "aps"  # untouched
    assert run(runner, "conformal", *files(data, test=False), "--save", fit_file, "--force").exit_code == 0

    fit_file.write_text(json.dumps(fit.to_dict()))
    ev = run(runner, "eval", data / "test.npy", data / "test_y.npy", "--conformal", fit_file, "--format", "json")
    assert ev.exit_code == 0, ev.output
    doc = json.loads(ev.stdout)
    coverage = coverage_report(prediction_sets(fit, np.load(data / "test.npy")), np.load(data / "test_y.npy"))
    assert doc["conformal"]["coverage"] == coverage.coverage
    assert doc["conformal"]["size_histogram"] == list(coverage.size_histogram)
    assert doc["conformal"]["fit"] == json_ready(fit.to_dict()) and "metrics" in doc
    table = run(runner, "eval", data / "test.npy", data / "test_y.npy", "--conformal", fit_file)
    assert table.exit_code == 0 and "Conformal prediction sets from" in table.stdout


def test_alpha_too_small_warns_and_gives_full_sets(runner, data):
    result = run(runner, "conformal", *files(data), "--alpha", "0.001", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["threshold"] is None and doc["test"]["coverage"] == 1.0 and doc["test"]["mean_size"] == 4.0
    assert "too small" in result.stderr and doc["warnings"]


def test_binary_one_dimensional_probabilities(runner, tmp_path):
    rng = np.random.default_rng(0)
    p = rng.uniform(size=200)
    y = (rng.uniform(size=200) < p).astype(int)
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "y.npy", y)
    result = run(runner, "conformal", tmp_path / "p.npy", tmp_path / "y.npy", tmp_path / "p.npy", tmp_path / "y.npy",
                 "--probs", "--format", "json")
    assert result.exit_code == 0, result.output
    fit = fit_conformal(p, y, input_kind="probs")
    assert json.loads(result.stdout)["threshold"] == fit.threshold and fit.k == 2


@pytest.mark.parametrize("args, fragments", [
    (["--alpha", "0"], ["--alpha"]),
    (["--alpha", "1"], ["--alpha"]),
    (["--method", "thr"], ["--method"]),
    (["--lambda", "0.5"], ["--lambda", "raps"]),
    (["--randomized"], ["--randomized"]),
    (["--method", "aps", "--seed", "3"], ["--seed", "--randomized"]),
])
def test_usage_errors(runner, data, args, fragments):
    result = run(runner, "conformal", *files(data), *args)
    assert result.exit_code == 2
    for fragment in fragments:
        assert fragment in result.stderr


def test_bad_input_is_one_line(runner, data, tmp_path):
    np.save(tmp_path / "k3.npy", np.zeros((5, 3)))
    np.save(tmp_path / "k3_y.npy", np.zeros(5, dtype=int))
    result = run(runner, "conformal", *files(data, test=False), tmp_path / "k3.npy", tmp_path / "k3_y.npy")
    one_line_error(result, "K = 3")
    result = run(runner, "conformal", data / "val.npy", data / "test_y.npy")
    one_line_error(result, "test_y.npy")
    result = run(runner, "conformal", *files(data, test=False), data / "test.npy")
    assert result.exit_code == 2 and "do not pair up" in result.stderr  # TEST_LOGITS without its labels
    (tmp_path / "bad.json").write_text('{"format": "calib.calibrator"}')
    result = run(runner, "eval", data / "test.npy", data / "test_y.npy", "--conformal", tmp_path / "bad.json")
    one_line_error(result, "bad.json", "not a conformal fit")


# ------------------------------------------------------------------ calib eval --selective
def test_eval_selective_json_equals_the_library_call(runner, data):
    result = run(runner, "eval", data / "test.npy", data / "test_y.npy", "--selective", "--format", "json")
    assert result.exit_code == 0, result.output
    conf, correct = confidence_and_correct(np.load(data / "test.npy"), np.load(data / "test_y.npy"))
    assert json.loads(result.stdout)["selective"] == json_ready(selective_report(conf, correct).to_dict())


def test_eval_selective_table_markdown_and_temperature(runner, data):
    result = run(runner, "eval", data / "test.npy", data / "test_y.npy", "--selective")
    assert result.exit_code == 0, result.output
    assert "AURC" in result.stdout and "AUGRC" in result.stdout and "risk at 90% coverage" in result.stdout
    md = run(runner, "eval", data / "test.npy", data / "test_y.npy", "--selective", "--format", "markdown")
    assert md.exit_code == 0 and "| E-AURC |" in md.stdout
    # ranked by the calibrated confidences (T changes the order across samples, not the argmax)
    t = run(runner, "eval", data / "test.npy", data / "test_y.npy", "--selective", "--temperature", "2", "-f", "json")
    conf, correct = confidence_and_correct(np.load(data / "test.npy") / 2, np.load(data / "test_y.npy"))
    assert json.loads(t.stdout)["selective"]["aurc"] == pytest.approx(selective_report(conf, correct).aurc, abs=1e-12)


def test_eval_risk_coverage_plot(runner, data):
    out = data / "rc.png"
    result = run(runner, "eval", data / "test.npy", data / "test_y.npy", "--risk-coverage", out, "-f", "json")
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "selective" in json.loads(result.stdout)
    again = run(runner, "eval", data / "test.npy", data / "test_y.npy", "--risk-coverage", out)
    one_line_error(again, "rc.png")
    assert run(runner, "eval", data / "test.npy", data / "test_y.npy", "--risk-coverage", out, "--force").exit_code == 0


def test_eval_selective_usage_errors(runner, data):
    result = run(runner, "eval", data / "test.npy", data / "test_y.npy", "--selective", "--format", "csv")
    assert result.exit_code == 2 and "CSV" in result.stderr
    (data / "fit.json").write_text(json.dumps(fit_conformal(np.load(data / "val.npy"), np.load(data / "val_y.npy"))
                                              .to_dict()))
    result = run(runner, "eval", data / "test.npy", data / "test_y.npy", "--conformal", data / "fit.json",
                 "--temperature", "1.5")
    assert result.exit_code == 2 and "--conformal" in result.stderr


def test_risk_coverage_display_data():
    from calibrate_cli.plots.selective import RiskCoverageDisplay

    display = RiskCoverageDisplay.from_predictions([0.9, 0.8, 0.8, 0.6], [True, True, False, False], label="m").plot()
    lines = display.ax_.get_lines()
    assert lines[0].get_xdata().tolist() == [0.0, 0.25, 0.75, 1.0]
    assert lines[0].get_ydata().tolist() == pytest.approx([0.0, 0.0, 1 / 3, 0.5])
    assert lines[2].get_ydata().tolist() == pytest.approx([0.0, 0.0, 0.25, 0.5])  # generalized risk
    assert "AURC 0.1875" in lines[0].get_label() and display.ax_.get_title() == "m"
