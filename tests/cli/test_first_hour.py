"""What a new user trips over in the first hour (issue 19, items 6, 8, 9, 10, 12): through the CLI."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from calibrate_cli.cli import cli
from cli_helpers import one_line_error  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def run(runner, args, **kwargs):
    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False, **kwargs)


@pytest.fixture()
def model(tmp_path):
    """A 10-class model's logits (float32, as saved by a training script) and its integer labels."""
    rng = np.random.default_rng(3)
    n, k = 300, 10
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)).astype(np.float32)
    logits[np.arange(n), labels] += 2.5
    np.save(tmp_path / "test_logits.npy", logits)
    np.save(tmp_path / "test_labels.npy", labels)
    return tmp_path


# ------------------------------------------------------------------------------ 19.6 swapped inputs
@pytest.mark.parametrize("command", [["eval"], ["plot", "-o", "fig.png"]])
def test_swapped_scores_and_labels_are_named(runner, model, command):
    logits, labels = model / "test_logits.npy", model / "test_labels.npy"
    args = [command[0], labels, logits, *[model / a if a.endswith(".png") else a for a in command[1:]]]
    result = run(runner, args)
    one_line_error(result, f"{labels} looks like labels", f"{logits} like scores", "wrong order")
    assert "one-hot" not in result.stderr


def test_swapped_temperature_sets_are_named(runner, model):
    logits, labels = model / "test_logits.npy", model / "test_labels.npy"
    result = run(runner, ["temperature", logits, labels, "--test", labels, logits])
    one_line_error(result, f"{labels} looks like labels", "wrong order")


def test_float_label_vector_swapped_too(runner, model):
    """Labels saved as float (whole numbers) are still labels."""
    labels = np.load(model / "test_labels.npy").astype(np.float64)
    np.save(model / "y_float.npy", labels)
    one_line_error(run(runner, ["eval", model / "y_float.npy", model / "test_logits.npy"]), "wrong order")


def test_binary_scores_with_one_hot_labels_are_not_a_swap(runner, tmp_path):
    """1-D whole-number log-odds with one-hot (float) labels: a valid binary input, no swap error."""
    scores = np.array([-3, -1, 0, 2, 4, 1, -2, 3])
    y = np.array([0, 0, 1, 1, 1, 0, 0, 1])
    np.save(tmp_path / "s.npy", scores)
    np.save(tmp_path / "y.npy", np.eye(2)[y])
    result = run(runner, ["eval", tmp_path / "s.npy", tmp_path / "y.npy", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["k"] == 2


# ------------------------------------------------------------------------------------ 19.8 plots
def models(folder: Path) -> dict[str, Path]:
    """Calibrated (labels drawn from the model's own softmax), over-confident (logits × 2.5) and
    under-confident (logits × 0.5) versions of one 10-class model, and the labels."""
    rng = np.random.default_rng(0)
    n, k = 4000, 10
    z = rng.normal(size=(n, k)) * 2.0
    z[np.arange(n), rng.integers(0, k, n)] += 3.0
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    labels = (p.cumsum(1) > rng.random((n, 1))).argmax(1)
    paths = {"labels": folder / "labels.npy"}
    np.save(paths["labels"], labels)
    for name, scale in (("calibrated", 1.0), ("over", 2.5), ("under", 0.5)):
        paths[name] = folder / f"{name}.npy"
        np.save(paths[name], z * scale)
    return paths


@pytest.fixture()
def saved_figures(monkeypatch):
    """The figures the CLI saves (the commands import save_figure from calibrate_cli.plots.diagram when run)."""
    import calibrate_cli.plots.diagram as plots

    figures = []
    original = plots.save_figure

    def capture(fig, path, **kwargs):
        figures.append(fig)
        return original(fig, path, **kwargs)

    monkeypatch.setattr(plots, "save_figure", capture)
    return figures


def bar_boxes(ax):
    """Display-space boxes of every bar drawn on ``ax`` (accuracy bars and gap boxes)."""
    return [patch.get_window_extent() for container in ax.containers for patch in container.patches]


def assert_legends_hide_no_bar(fig):
    fig.canvas.draw()  # after the constrained layout
    checked = 0
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or not ax.containers:
            continue
        box = legend.get_window_extent()
        covered = [b for b in bar_boxes(ax) if b.width > 0 and b.height > 0 and b.overlaps(box)]
        assert not covered, f"the legend {box} covers {len(covered)} bar(s) of {ax.get_title()!r}"
        checked += 1
    assert checked


def assert_titles_fit(fig):
    fig.canvas.draw()
    figure_box = fig.bbox
    texts = [ax.title for ax in fig.axes if ax.get_title()] + ([fig._suptitle] if fig._suptitle else [])
    for text in texts:
        box = text.get_window_extent()
        assert box.x0 >= figure_box.x0 - 0.5 and box.x1 <= figure_box.x1 + 0.5, text.get_text()
    for ax in fig.axes:
        if ax.get_title():
            assert ax.title.get_window_extent().width <= ax.bbox.width + 0.5, ax.get_title()


@pytest.mark.parametrize("which", ["calibrated", "over", "under"])
def test_plot_legend_hides_no_bar(runner, tmp_path, saved_figures, which):
    paths = models(tmp_path)
    result = run(runner, ["plot", paths[which], paths["labels"], "-o", tmp_path / "fig.png"])
    assert result.exit_code == 0, result.stderr
    (fig,) = saved_figures
    assert fig.axes[0].get_title() == which
    assert_legends_hide_no_bar(fig)


def test_temperature_plot_legends_hide_no_bar_and_title_is_the_stem(runner, tmp_path, saved_figures):
    paths = models(tmp_path)
    out = tmp_path / "ba.png"
    result = run(runner, ["temperature", paths["under"], paths["labels"], "--plot", out])
    assert result.exit_code == 0, result.stderr
    assert f"Wrote {out}" in result.stderr
    (fig,) = saved_figures
    assert fig._suptitle.get_text() == "under: temperature scaling (grid search)"
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0] == "Before: T = 1" and titles[1].startswith("After: T = 0.5")
    assert_legends_hide_no_bar(fig)
    assert_titles_fit(fig)


LONG = "resnet50_imagenet_val_after_finetuning_with_mixup_and_cutmix_and_label_smoothing_epoch_300_logits"


def test_eval_plot_titles_with_the_stem_shortened_to_fit(runner, tmp_path, saved_figures):
    paths = models(tmp_path)
    long_path = (tmp_path / f"{LONG}.npy").resolve()
    long_path.write_bytes(paths["under"].read_bytes())
    out = tmp_path / "r.png"
    result = run(runner, ["eval", long_path, paths["labels"], "--plot", out, "-f", "json"])
    assert result.exit_code == 0, result.stderr
    assert f"Wrote {out}" in result.stderr
    (fig,) = saved_figures
    title = fig.axes[0].get_title()
    assert str(tmp_path) not in title and "…" in title, title
    head, tail = title.split("…")
    assert LONG.startswith(head) and LONG.endswith(tail) and len(head) >= 10 and len(tail) >= 10
    assert_titles_fit(fig)
    assert_legends_hide_no_bar(fig)


def test_temperature_plot_long_name_fits(runner, tmp_path, saved_figures):
    paths = models(tmp_path)
    long_path = tmp_path / f"{LONG}_{LONG}.npy"
    long_path.write_bytes(paths["over"].read_bytes())
    result = run(runner, ["temperature", long_path, paths["labels"], "--plot", tmp_path / "t.png", "-f", "json"])
    assert result.exit_code == 0, result.stderr
    (fig,) = saved_figures
    assert "…" in fig._suptitle.get_text() and str(tmp_path) not in fig._suptitle.get_text()
    assert_titles_fit(fig)


def test_shorten_middle():
    from calibrate_cli.plots.diagram import shorten_middle

    assert shorten_middle("abcdef", 10) == "abcdef"
    assert shorten_middle("abcdefgh", 4) == "ab…gh"
    assert shorten_middle("abcdefgh", 3) == "ab…h"


# ------------------------------------------------------------------------- 19.9 install commands
def test_torch_missing_message_pins_torch(runner, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    (tmp_path / "logits.pt").write_bytes(b"not read")
    np.save(tmp_path / "y.npy", np.array([0, 1]))
    result = run(runner, ["eval", tmp_path / "logits.pt", tmp_path / "y.npy"])
    one_line_error(result, "logits.pt", "pip install torch==2.13.0")
    assert "calibrate-cli[torch]" not in result.stderr


def readme_code_lines() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    return [line for block in blocks for line in block.splitlines()]


def test_readme_installs_only_what_can_be_installed():
    """No package index has calibrate-cli: every `pip install` in the README's code installs a path
    (this repository) or a pinned torch."""
    installs = []
    for line in readme_code_lines():
        for command in re.findall(r"pip install ([^&#\n]+)", line):
            installs += command.split()
    assert installs
    for target in installs:
        target = target.strip("'\"")
        if target in ("-e", "--editable"):  # an option (editable install of the path that follows)
            continue
        assert target.startswith((".", "/")) or re.fullmatch(r"torch==[\d.]+", target), target


# ----------------------------------------------------------------------------- 19.10 terminal width
@pytest.fixture()
def sample(tmp_path):
    paths = models(tmp_path)
    return paths


def test_header_line_wraps_at_the_terminal_not_the_table(runner, sample):
    result = run(runner, ["temperature", sample["under"], sample["labels"]], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.stderr
    header = result.stdout.splitlines()[0]
    assert re.search(r"at T = 1 → \d+\.\d\d %$", header), result.stdout[:400]


def metric_rows(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("━")) + 1
    end = lines.index("", start)
    return lines[start:end]


@pytest.mark.parametrize("columns", [80, 100])
def test_narrow_terminal_keeps_one_line_per_metric(runner, sample, columns):
    result = run(runner, ["eval", sample["under"], sample["labels"]], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.stderr
    rows = metric_rows(result.stdout)
    names = ["Accuracy", "Error", "ECE", "AdaECE", "Classwise-ECE", "MCE",
             "RMS-CE", "Debiased L2-CE", "KS-CE", "SmoothECE", "NLL", "Brier", "Top-5 accuracy",
             "Mean confidence", "S99 share", "S99 accuracy"]
    assert [r.split("│")[0].strip() for r in rows] == names
    assert all(len(r) <= columns for r in result.stdout.splitlines()[1:])
    if columns == 80:
        assert "…" in result.stdout  # the definitions are cut short, not wrapped


def test_definitions_in_full_when_wide_and_dropped_when_very_narrow():
    from rich.console import Console

    import calibrate_cli as calib
    from calibrate_cli.cli import render
    from calibrate_cli.metrics.functional import METRIC_DEFINITIONS

    rng = np.random.default_rng(1)
    report = calib.evaluate(rng.normal(size=(50, 3)), rng.integers(0, 3, 50))

    def text(width):
        console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
        render.render_tables(console, [render.metrics_table(report.metrics, title="t " * 60)])
        return console.export_text()

    wide = text(200)
    assert METRIC_DEFINITIONS["ece"] in wide and ("t " * 60).strip() in wide.splitlines()[0]
    narrow = text(40)
    assert "definition" not in narrow and METRIC_DEFINITIONS["nll"][:10] not in narrow
    assert all(len(line) <= 40 for line in narrow.splitlines()[1:])


# -------------------------------------------------------------------------------- 19.12 smaller
@pytest.fixture()
def noisy(tmp_path):
    """1901 of 2000 right: accuracy 0.9505, and 1 − 0.9505 = 0.04949999999999999 in float64."""
    n, k = 2000, 3
    labels = np.zeros(n, dtype=np.int64)
    logits = np.zeros((n, k))
    logits[:1901, 0] = 2.0
    logits[1901:, 1] = 2.0
    np.save(tmp_path / "logits.npy", logits)
    np.save(tmp_path / "labels.npy", labels)
    assert 1 - 0.9505 == 0.04949999999999999
    return tmp_path


def test_csv_has_no_float_noise(runner, noisy):
    result = run(runner, ["eval", noisy / "logits.npy", noisy / "labels.npy", "-f", "csv"])
    rows = {r["metric"]: r for r in csv.DictReader(io.StringIO(result.stdout))}
    assert rows["error"]["value"] == "0.0495" and rows["accuracy"]["value"] == "0.9505"
    assert "99999999" not in result.stdout and "00000001" not in result.stdout


def test_csv_bins_table(runner, noisy):
    logits, labels = noisy / "logits.npy", noisy / "labels.npy"
    doc = json.loads(run(runner, ["eval", logits, labels, "-f", "json"]).stdout)
    result = run(runner, ["eval", logits, labels, "-f", "csv", "--bins"])
    assert result.exit_code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0]) == ["bin", "lower", "upper", "count", "mean_confidence", "accuracy", "gap"]
    assert len(rows) == 15 and sum(int(r["count"]) for r in rows) == 2000
    full = [r for r in rows if int(r["count"])]
    assert len(full) == 1
    # p = softmax([2, 0, 0]): max ≈ 0.787 in bin 11 = (11/15, 12/15]
    (b,) = full
    assert b["bin"] == "11" and float(b["lower"]) == pytest.approx(11 / 15) and b["accuracy"] == "0.9505"
    conf = np.exp(2) / (np.exp(2) + 2)
    assert float(b["mean_confidence"]) == pytest.approx(conf, rel=1e-14)
    assert float(b["gap"]) == pytest.approx(conf - 0.9505, rel=1e-13)
    assert [int(r["count"]) for r in rows] == [r["count"] for r in doc["bins"]["ece"]]
    assert [r["gap"] for r in rows] == ["" if r["gap"] is None else f"{r['gap']:.15g}" for r in doc["bins"]["ece"]]


def test_markdown_has_the_bins_table(runner, noisy):
    result = run(runner, ["eval", noisy / "logits.npy", noisy / "labels.npy", "-f", "markdown"])
    assert result.exit_code == 0, result.stderr
    md = result.stdout
    assert md.startswith("| metric | value | definition |")
    assert "| bin | count | confidence | accuracy | gap |" in md
    bin_rows = [line for line in md.splitlines() if re.match(r"\| [\[(]\d\.\d{3}, \d\.\d{3}\] \|", line)]
    assert len(bin_rows) == 15
    assert "| (0.733, 0.800] | 2000 | 0.7870 | 0.9505 | -0.1635 |" in md


def test_plot_classes_pick_the_classwise_panels(runner, tmp_path, saved_figures):
    rng = np.random.default_rng(2)
    n, k = 600, 30
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k))
    logits[np.arange(n), labels] += 2
    np.save(tmp_path / "k30.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    base = ["plot", tmp_path / "k30.npy", tmp_path / "y.npy", "--classwise", "-o", tmp_path / "c.png"]
    one_line_error(run(runner, base), "K = 30", "--classes")
    assert not saved_figures
    result = run(runner, [*base, "--classes", "0-4,7,29"])
    assert result.exit_code == 0, result.stderr
    (fig,) = saved_figures
    titles = [ax.get_title().split(":")[0] for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert titles == ["class 0", "class 1", "class 2", "class 3", "class 4", "class 7", "class 29"]
    one_line_error(run(runner, [*base, "--classes", "3,30", "--force"]), "class 30", "K = 30")
    bad = run(runner, [*base, "--classes", "0-x", "--force"])
    assert bad.exit_code == 2 and "--classes" in bad.stderr
    bad = run(runner, ["plot", tmp_path / "k30.npy", tmp_path / "y.npy", "--classes", "1", "-o", tmp_path / "d.png"])
    assert bad.exit_code == 2 and "--classwise" in bad.stderr


def test_shell_completion_is_documented_and_works(runner):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert 'eval "$(_CALIB_COMPLETE=bash_source calib)"' in readme
    result = runner.invoke(cli, [], env={"_CALIB_COMPLETE": "bash_source"}, prog_name="calib")
    assert result.exit_code == 0
    assert "_CALIB_COMPLETE" in result.stdout and "complete " in result.stdout


def test_metrics_doc_gives_the_chunk_size_once():
    from calibrate_cli.data import predictions

    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    sizes = re.findall(r"row chunks (?:of )?\(?(.{0,40}?)values", text, flags=re.S)
    assert predictions._CHUNK_ELEMENTS == 2**20
    assert sizes and all(s.startswith("2^20") for s in sizes), sizes
