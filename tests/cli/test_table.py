"""``calib table`` through Click's CliRunner: each row equals ``calib temperature``'s numbers on its
group, the four formats and LaTeX, model names, and one-line errors for bad groupings."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from calibrate_cli.cli import cli

COLUMNS = ("error", "ece", "adaece", "classwise_ece", "nll")


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


def synthetic(n, k, seed, scale):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), labels] += 1.5
    return (scale * logits).astype(np.float32), labels


@pytest.fixture
def models(tmp_path):
    """Model a: four loose files; model b: a run folder of calib train (its four file names)."""
    a_dir, b_dir = tmp_path / "a", tmp_path / "runs" / "wide_b"
    a_dir.mkdir()
    b_dir.mkdir(parents=True)
    a = [*synthetic(300, 4, 0, 3.0), *synthetic(200, 4, 1, 3.0)]
    b = [*synthetic(250, 4, 2, 0.6), *synthetic(220, 4, 3, 0.6)]  # under-confident: T < 1
    a_files = [a_dir / f for f in ("val.npy", "val_y.npy", "test.npy", "test_y.npy")]
    for path, array in zip(a_files, a):
        np.save(path, array)
    for name, array in zip(("val_logits.npy", "val_labels.npy", "test_logits.npy", "test_labels.npy"), b):
        np.save(b_dir / name, array)
    b_files = [b_dir / f for f in ("val_logits.npy", "val_labels.npy", "test_logits.npy", "test_labels.npy")]
    return tmp_path, a_files, b_dir, b_files


def temperature_json(runner, files, *options):
    result = run(runner, "temperature", files[0], files[1], "--test", files[2], files[3], "-f", "json", *options)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("options", [(), ("--search", "nll"), ("--objective", "adaece", "--n-bins", "10")])
def test_each_row_equals_calib_temperature_on_its_group(runner, models, options):
    _, a_files, b_dir, b_files = models
    result = run(runner, "table", *a_files, b_dir, "-f", "json", *options)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [m["name"] for m in doc["models"]] == ["test", "wide_b"]
    for model, files in zip(doc["models"], (a_files, b_files)):
        expected = temperature_json(runner, files, *options)
        assert model["temperature"] == expected["temperature"]
        for metric in COLUMNS:
            assert model["before"][metric] == expected["test"]["before"][metric], metric
            assert model["after"][metric] == expected["test"]["after"][metric], metric
        assert model["inputs"]["test_scores"] == str(files[2])
    assert doc["models"][1]["temperature"] < 1 < doc["models"][0]["temperature"]


def test_csv_has_the_exact_values_and_markdown_the_paper_layout(runner, models):
    _, a_files, b_dir, b_files = models
    doc = json.loads(run(runner, "table", *a_files, b_dir, "-f", "json").stdout)
    rows = list(csv.DictReader(io.StringIO(run(runner, "table", *a_files, b_dir, "-f", "csv").stdout)))
    assert [r["model"] for r in rows] == ["test", "wide_b"]
    for row, model in zip(rows, doc["models"]):
        assert float(row["temperature"]) == model["temperature"]
        assert float(row["ece_pre"]) == pytest.approx(model["before"]["ece"], rel=1e-14)
        assert float(row["nll_post"]) == pytest.approx(model["after"]["nll"], rel=1e-14)
        assert float(row["error"]) == pytest.approx(model["before"]["error"], rel=1e-14)
    md = run(runner, "table", *a_files, b_dir, "-f", "markdown").stdout
    line = next(x for x in md.splitlines() if x.startswith("| wide_b |"))
    b = doc["models"][1]
    assert f"{100 * b['before']['ece']:.2f} / {100 * b['after']['ece']:.2f}" in line
    assert f"{b['before']['nll']:.4f} / {b['after']['nll']:.4f}" in line
    assert line.endswith(f"| {b['temperature']:.4g} |")
    table = run(runner, "table", *a_files, b_dir)  # a terminal: a Pre T and a Post T (T) line per model
    assert table.exit_code == 0, table.stderr
    assert f"Post T ({b['temperature']:.4g})" in table.stdout and "wide_b" in table.stdout
    assert f"{100 * b['after']['adaece']:.2f}" in table.stdout


def test_latex_booktabs(runner, models, tmp_path):
    _, a_files, b_dir, _ = models
    result = run(runner, "table", *a_files, b_dir, "--name", "ResNet_50 & co", "--name", "B", "-f", "latex")
    assert result.exit_code == 0, result.stderr
    tex = result.stdout
    doc = json.loads(run(runner, "table", *a_files, b_dir, "-f", "json").stdout)
    for command in (r"\begin{tabular}{lrrrrrrrrr}", r"\toprule", r"\midrule", r"\bottomrule", r"\end{tabular}",
                    r"\multicolumn{2}{c}{ECE (\%)}", r"\cmidrule(lr){3-4}"):
        assert command in tex, command
    row = next(x for x in tex.splitlines() if x.startswith("ResNet\\_50 \\& co &"))
    a = doc["models"][0]
    assert row.endswith(r" \\") and row.count("&") == 10
    assert f"& {100 * a['after']['ece']:.2f} ({a['temperature']:.4g}) &" in row
    # -o FILE.tex: LaTeX from the suffix
    out = tmp_path / "table1.tex"
    assert run(runner, "table", *a_files, "-o", out).exit_code == 0
    assert out.read_text().startswith("% ") and r"\toprule" in out.read_text()


def test_names_from_files_folders_and_name(runner, models, tmp_path):
    _, a_files, b_dir, _ = models
    doc = json.loads(run(runner, "table", b_dir, *a_files, "--name", "x", "--name", "y", "-f", "json").stdout)
    assert [m["name"] for m in doc["models"]] == ["x", "y"]
    other = tmp_path / "other" / "wide_b"
    other.parent.mkdir()
    other.mkdir()
    for f in b_dir.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    doc = json.loads(run(runner, "table", b_dir, other, "-f", "json").stdout)
    assert [m["name"] for m in doc["models"]] == ["runs/wide_b", "other/wide_b"]  # same folder name: one level up


@pytest.mark.parametrize("count", [1, 3, 5, 6])
def test_not_a_multiple_of_four_is_one_line(runner, models, count):
    _, a_files, b_dir, _ = models
    files = (a_files * 2)[:count]
    result = run(runner, "table", *files)
    assert result.exit_code == 2, result.output
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "do not make a model" in lines[0], result.stderr


def test_grouping_errors(runner, models, tmp_path):
    _, a_files, b_dir, _ = models

    def one_line(result, fragment):
        assert result.exit_code == 2, result.output
        lines = [x for x in result.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and fragment in lines[0], result.stderr

    one_line(run(runner, "table", *a_files[:3], b_dir), "before the run folder")
    one_line(run(runner, "table"), "no models")
    one_line(run(runner, "table", b_dir, "--name", "a", "--name", "b"), "got 2 --name value(s) for 1 model(s)")
    empty = tmp_path / "empty_run"
    empty.mkdir()
    (empty / "val_logits.npy").write_bytes((b_dir / "val_logits.npy").read_bytes())
    one_line(run(runner, "table", empty), "not a run folder of calib train: it lacks val_labels.npy, test_logits.npy")
    np.save(tmp_path / "k3.npy", np.zeros((200, 3)))
    one_line(run(runner, "table", a_files[0], a_files[1], tmp_path / "k3.npy", a_files[3]), "K = 3 classes")
    one_line(run(runner, "table", a_files[0], a_files[1], a_files[2], tmp_path / "nope.npy"), "nope.npy")
