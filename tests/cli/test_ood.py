"""``calib ood`` through Click's CliRunner: the AUROCs against the naive Mann–Whitney double loop,
temperature, formats, bootstrap and one-line errors."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from calibrate_cli.cli import cli
from naive_reference import auroc_pairs, entropy, softmax_rows
from cli_helpers import one_line_error  # noqa: E402


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


def naive(logits, temperature=1.0):
    probs = softmax_rows(np.asarray(logits, dtype=np.float64) / temperature)
    return entropy(probs), [-max(row) for row in probs]


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(11)
    inside = rng.normal(0, 1, (80, 5))
    inside[np.arange(80), rng.integers(0, 5, 80)] += 3.0
    outside = rng.normal(0, 1, (50, 5)) * 1.5
    np.save(tmp_path / "in.npy", inside.astype(np.float32))
    np.save(tmp_path / "out.npy", outside.astype(np.float32))
    return tmp_path, inside.astype(np.float32), outside.astype(np.float32)


def test_json_keys_equal_the_double_loop(runner, files):
    folder, inside, outside = files
    result = run(runner, "ood", folder / "in.npy", folder / "out.npy", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    (h_in, c_in), (h_out, c_out) = naive(inside), naive(outside)
    assert doc["auroc_entropy"] == pytest.approx(auroc_pairs(h_in, h_out), abs=1e-15)
    assert doc["auroc_confidence"] == pytest.approx(auroc_pairs(c_in, c_out), abs=1e-15)
    assert doc["command"] == "ood" and doc["n_in"] == 80 and doc["n_out"] == 50 and doc["k"] == 5
    assert doc["temperature"] is None and doc["before"] is None and doc["intervals"] == {}


def test_temperature_number_and_file(runner, files, tmp_path):
    folder, inside, outside = files
    result = run(runner, "ood", folder / "in.npy", folder / "out.npy", "--temperature", "2.5", "-f", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    (h_in, c_in), (h_out, c_out) = naive(inside, 2.5), naive(outside, 2.5)
    assert doc["auroc_entropy"] == pytest.approx(auroc_pairs(h_in, h_out), abs=1e-15)
    assert doc["auroc_confidence"] == pytest.approx(auroc_pairs(c_in, c_out), abs=1e-15)
    (h_in, c_in), (h_out, c_out) = naive(inside), naive(outside)
    assert doc["before"]["auroc_entropy"] == pytest.approx(auroc_pairs(h_in, h_out), abs=1e-15)
    assert doc["temperature"] == 2.5
    # a fit saved by calib temperature: the same as its T given as a number
    rng = np.random.default_rng(0)
    np.save(tmp_path / "val.npy", 3 * inside)
    np.save(tmp_path / "val_y.npy", rng.integers(0, 5, 80))
    fit = run(runner, "temperature", tmp_path / "val.npy", tmp_path / "val_y.npy", "--search", "nll",
              "-o", tmp_path / "t.json")
    assert fit.exit_code == 0, fit.stderr
    t = json.loads((tmp_path / "t.json").read_text())["temperature"]
    from_file = json.loads(run(runner, "ood", folder / "in.npy", folder / "out.npy", "--temperature",
                               tmp_path / "t.json", "-f", "json").stdout)
    from_number = json.loads(run(runner, "ood", folder / "in.npy", folder / "out.npy", "--temperature",
                                 repr(t), "-f", "json").stdout)
    assert from_file["auroc_entropy"] == from_number["auroc_entropy"]
    assert from_file["auroc_confidence"] == from_number["auroc_confidence"]


def test_table_markdown_and_csv(runner, files):
    folder, inside, outside = files
    doc = json.loads(run(runner, "ood", folder / "in.npy", folder / "out.npy", "-f", "json").stdout)
    table = run(runner, "ood", folder / "in.npy", folder / "out.npy")
    assert table.exit_code == 0
    assert f"{100 * doc['auroc_entropy']:.2f} %" in table.stdout and "Entropy" in table.stdout
    assert f"{100 * doc['auroc_confidence']:.2f} %" in table.stdout and "Confidence" in table.stdout
    md = run(runner, "ood", folder / "in.npy", folder / "out.npy", "-f", "markdown", "--temperature", "2")
    assert "| Entropy |" in md.stdout and "Post T (2)" in md.stdout and "Pre T" in md.stdout
    csv_text = run(runner, "ood", folder / "in.npy", folder / "out.npy", "-f", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert [r["score"] for r in rows] == ["entropy", "confidence"]
    assert float(rows[0]["auroc"]) == pytest.approx(doc["auroc_entropy"], rel=1e-14)
    assert float(rows[1]["mean_in"]) == pytest.approx(doc["mean_confidence"]["in"], rel=1e-14)


def test_probs_input_and_binary_vectors(runner, tmp_path):
    rng = np.random.default_rng(5)
    p_in, p_out = rng.uniform(0.8, 1.0, 30), rng.uniform(0.3, 0.95, 20)
    np.save(tmp_path / "pin.npy", p_in)
    np.save(tmp_path / "pout.npy", p_out)
    doc = json.loads(run(runner, "ood", tmp_path / "pin.npy", tmp_path / "pout.npy", "--probs", "-f", "json").stdout)
    c_in, c_out = [-max(p, 1 - p) for p in p_in], [-max(p, 1 - p) for p in p_out]
    assert doc["auroc_confidence"] == pytest.approx(auroc_pairs(c_in, c_out), abs=1e-15)
    assert doc["k"] == 2


def test_bootstrap_seeded_intervals(runner, files):
    folder, _, _ = files
    args = ["ood", folder / "in.npy", folder / "out.npy", "--bootstrap", "200", "-f", "json"]
    first, again = run(runner, *args, "--seed", "1"), run(runner, *args, "--seed", "1")
    other = run(runner, *args, "--seed", "2", "--ci-level", "0.95")
    assert first.exit_code == 0, first.stderr
    a, b, c = (json.loads(r.stdout) for r in (first, again, other))
    assert a["intervals"] == b["intervals"]
    ci = a["intervals"]["auroc_entropy"]
    assert ci["low"] <= a["auroc_entropy"] <= ci["high"] and ci["n_resamples"] == 200 and ci["level"] == 0.9
    assert c["intervals"]["auroc_entropy"]["level"] == 0.95 and c["bootstrap"]["seed"] == 2
    assert a["bootstrap"]["stratified"] is True
    table = run(runner, *args[:-2], "--seed", "1")
    assert "stratified bootstrap" in table.stdout and "interval" in table.stdout


def test_too_few_resamples_is_refused(runner, files):
    folder, _, _ = files
    result = run(runner, "ood", folder / "in.npy", folder / "out.npy", "--bootstrap", "5")
    assert result.exit_code == 2 and "too few resamples" in result.stderr


def test_errors_are_one_line(runner, files, tmp_path):
    folder, _, _ = files
    np.save(tmp_path / "k3.npy", np.zeros((4, 3)))
    one_line_error(run(runner, "ood", folder / "in.npy", tmp_path / "k3.npy"), "K = 3 classes but")
    one_line_error(run(runner, "ood", folder / "in.npy", tmp_path / "missing.npy"), "missing.npy")
    np.save(tmp_path / "nan.npy", np.full((3, 5), np.nan))
    one_line_error(run(runner, "ood", tmp_path / "nan.npy", folder / "out.npy"), "nan.npy: scores contain NaN")
    one_line_error(run(runner, "ood", folder / "in.npy", folder / "out.npy", "--probs"), "probabilities")


def test_output_file_not_overwritten_without_force(runner, files):
    folder, _, _ = files
    target = folder / "ood.json"
    assert run(runner, "ood", folder / "in.npy", folder / "out.npy", "-o", target).exit_code == 0
    assert "auroc_entropy" in json.loads(target.read_text())  # the format from the suffix
    again = run(runner, "ood", folder / "in.npy", folder / "out.npy", "-o", target)
    assert again.exit_code == 2
    assert run(runner, "ood", folder / "in.npy", folder / "out.npy", "-o", target, "--force").exit_code == 0


def test_one_sample_each_and_ties(runner, tmp_path):
    np.save(tmp_path / "a.npy", np.array([[1.0, 0.0]]))
    np.save(tmp_path / "b.npy", np.array([[0.0, 1.0]]))  # the same probabilities, permuted: a tie
    # logits [1, 0] look like probabilities too: --logits says which they are
    doc = json.loads(run(runner, "ood", tmp_path / "a.npy", tmp_path / "b.npy", "--logits", "-f", "json").stdout)
    assert doc["auroc_entropy"] == 0.5 and doc["auroc_confidence"] == 0.5 and doc["n_in"] == doc["n_out"] == 1
