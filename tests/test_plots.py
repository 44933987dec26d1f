"""Reliability diagrams: the Display's data and artists (never pixels), figures and saving.

Expected values come from hand calculation or from the naive float64 loops below, written
independently of calib's binning.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libm import METRIC_ABS, METRIC_REL

from calibrate_cli.errors import InputError, OutputError
from calibrate_cli.plots.diagram import (
    MAX_CLASSWISE_CLASSES,
    ReliabilityDiagram,
    before_after_figure,
    classwise_diagrams,
    classwise_figure,
    comparison_figure,
    eval_figure,
    figure_format,
    overlay_figure,
    reliability_figure,
    save_figure,
)

MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-"}


# ------------------------------------------------------------------------- naive references
def naive_softmax_row(row) -> list[float]:
    m = max(row)
    e = [math.exp(float(v) - m) for v in row]
    s = sum(e)
    return [v / s for v in e]


def naive_top_label(logits, labels, temperature=1.0):
    conf, correct = [], []
    for row, y in zip(logits, labels):
        p = naive_softmax_row([float(v) / temperature for v in row])
        pred = max(range(len(p)), key=lambda k: (p[k], -k))
        conf.append(p[pred])
        correct.append(1.0 if pred == int(y) else 0.0)
    return conf, correct


def naive_uniform_bins(values, targets, m):
    """Per-bin count, Σvalue, Σtarget over (b/M, (b+1)/M], the lowest bin closed at 0."""
    count, s_val, s_tgt = [0] * m, [0.0] * m, [0.0] * m
    for v, t in zip(values, targets):
        b = 0
        for j in range(m):
            if v > j / m:
                b = j
        count[b] += 1
        s_val[b] += v
        s_tgt[b] += t
    return count, s_val, s_tgt


def naive_ece(count, s_val, s_tgt, n):
    return sum(abs(t - v) for c, v, t in zip(count, s_val, s_tgt) if c) / n


def synthetic(n=3000, k=10, sharpen=2.0, seed=0):
    """labels ~ softmax(z); the model reports z·sharpen (> 1: over-confident, < 1: under)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k)) * 1.5
    z[np.arange(n), rng.integers(0, k, n)] += 3.0
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (p.cumsum(1) < rng.random(n)[:, None]).sum(1).clip(0, k - 1)
    return z * sharpen, y


def bar_data(container):
    return (
        np.array([r.get_x() for r in container.patches]),
        np.array([r.get_width() for r in container.patches]),
        np.array([r.get_height() for r in container.patches]),
        np.array([r.get_y() for r in container.patches]),
    )


# ----------------------------------------------------------------------------- hand-computed
HAND_PROBS = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
HAND_LABELS = np.array([0, 1, 1])
# 10 bins: 0.7 → (0.6, 0.7] correct; 0.8 → (0.7, 0.8] wrong; 0.9 → (0.8, 0.9] correct. ECE = (0.3+0.8+0.1)/3


def test_hand_example_bars_gaps_and_histogram():
    d = ReliabilityDiagram.from_predictions(HAND_PROBS, HAND_LABELS, input_kind="probs", n_bins=10).plot()
    assert d.ece == pytest.approx(0.4)
    x, w, h, _ = bar_data(d.accuracy_bars_)
    assert len(d.accuracy_bars_.patches) == 3  # 7 empty bins draw nothing
    np.testing.assert_allclose(x, [0.6, 0.7, 0.8])
    np.testing.assert_allclose(w, [0.1, 0.1, 0.1])
    np.testing.assert_allclose(h, [1.0, 0.0, 1.0])
    # over-confident: (0.7, 0.8] with accuracy 0 and confidence 0.8
    ox, _, oh, ob = bar_data(d.over_bars_)
    np.testing.assert_allclose(ox, [0.7])
    np.testing.assert_allclose(oh, [0.8])
    np.testing.assert_allclose(ob, [0.0])
    # under-confident: accuracy 1 above confidence 0.7 and 0.9
    ux, _, uh, ub = bar_data(d.under_bars_)
    np.testing.assert_allclose(ux, [0.6, 0.8])
    np.testing.assert_allclose(uh, [0.3, 0.1])
    np.testing.assert_allclose(ub, [0.7, 0.9])
    _, _, hh, _ = bar_data(d.hist_bars_)
    np.testing.assert_allclose(hh, [1 / 3] * 3)
    assert [t.get_text() for t in d.count_labels_] == ["1", "1", "1"]
    texts = [t.get_text() for t in d.legend_.get_texts()]
    assert texts == ["ECE = 40.00%"]  # in the axes: the ECE; the key is under the diagram
    assert "Perfect calibration" in [t.get_text() for t in d.key_legend_.get_texts()]


def test_compact_counts():
    from calibrate_cli.plots.diagram import _compact

    assert [_compact(c) for c in (0, 999, 1000, 1234, 9_960, 12_345, 999_999, 1_500_000)] == [
        "0", "999", "1.0k", "1.2k", "10k", "12k", "1.0M", "1.5M"
    ]


def test_interval_in_legend_and_label_in_title():
    d = ReliabilityDiagram.from_predictions(
        HAND_PROBS, HAND_LABELS, input_kind="probs", n_bins=10, interval=(0.25, 0.5), label="model A"
    ).plot()
    assert d.legend_.get_texts()[0].get_text() == "ECE = 40.00% [25.00%, 50.00%]"
    assert d.ax_.get_title() == "model A"
    assert d.figure_ is d.ax_.figure


# --------------------------------------------------------------------- against a naive loop
@pytest.mark.parametrize("sharpen", [0.5, 1.0, 2.0])
def test_uniform_bars_equal_naive_accuracy(sharpen):
    logits, labels = synthetic(n=1500, sharpen=sharpen, seed=3)
    m = 15
    d = ReliabilityDiagram.from_predictions(logits, labels, n_bins=m).plot()
    conf, correct = naive_top_label(logits, labels)
    count, s_conf, s_corr = naive_uniform_bins(conf, correct, m)
    nonempty = [b for b in range(m) if count[b]]
    x, w, h, _ = bar_data(d.accuracy_bars_)
    assert len(d.accuracy_bars_.patches) == len(nonempty)
    np.testing.assert_allclose(x, [b / m for b in nonempty], atol=1e-12)
    np.testing.assert_allclose(w, [1 / m] * len(nonempty), atol=1e-12)
    np.testing.assert_allclose(h, [s_corr[b] / count[b] for b in nonempty], atol=1e-12)
    assert int(d.bins.count.sum()) == len(labels)
    _, _, hist, _ = bar_data(d.hist_bars_)
    np.testing.assert_allclose(hist, [count[b] / len(labels) for b in nonempty], atol=1e-12)
    assert hist.sum() == pytest.approx(1.0)
    assert [t.get_text() for t in d.count_labels_] == [str(count[b]) for b in nonempty]
    expected = naive_ece(count, s_conf, s_corr, len(labels))
    assert d.ece == pytest.approx(expected, abs=1e-12)
    assert f"{100 * expected:.2f}%" in d.legend_.get_texts()[0].get_text()
    # every non-empty bin has exactly one gap box (none is exactly zero here), of the right sign
    gaps = [s_conf[b] / count[b] - s_corr[b] / count[b] for b in nonempty]
    assert len(d.over_bars_.patches) == sum(g > 0 for g in gaps)
    assert len(d.under_bars_.patches) == sum(g < 0 for g in gaps)
    _, _, oh, _ = bar_data(d.over_bars_)
    np.testing.assert_allclose(oh, [g for g in gaps if g > 0], atol=1e-12)


def test_uniform_bins_made_during_the_pass_are_calib_evals(monkeypatch):
    """The diagram's equal-width bins, made chunk by chunk during the pass (a summarize request for the equal-width bins alone,
    where the C extension runs), are the report's bins, and its ECE and accuracy the report's values,
    over many chunks on two threads. The width-only pass (the top-label kernel) and `evaluate`'s are
    two paths: counts, Σ correctness (whole numbers) and accuracy equal, Σ confidence and the ECE
    within the numeric contract of tests/libm.py."""
    from calibrate_cli.data import predictions as _predictions
    from calibrate_cli.evaluate import evaluate

    monkeypatch.setattr(_predictions, "_CHUNK_ELEMENTS", 4000)  # 400 rows a chunk: 15 chunks
    monkeypatch.setenv("CALIB_THREADS", "2")
    logits, labels = synthetic(n=6000, sharpen=2.0, seed=8)
    d = ReliabilityDiagram.from_predictions(logits, labels)
    report = evaluate(logits, labels)
    assert d.bins.count.tolist() == report.bins.count.tolist()
    np.testing.assert_allclose(d.bins.sum_conf, report.bins.sum_conf, rtol=METRIC_REL, atol=METRIC_ABS)
    assert d.bins.sum_correct.tolist() == report.bins.sum_correct.tolist()
    assert d.ece == pytest.approx(report.metrics["ece"], rel=METRIC_REL, abs=METRIC_ABS)
    assert d.accuracy == report.metrics["accuracy"]


def test_quantile_bars_are_equally_wide_and_the_ticks_name_the_equal_mass_edges():
    logits, labels = synthetic(n=1200, sharpen=2.0, seed=5)
    m = 10
    d = ReliabilityDiagram.from_predictions(logits, labels, n_bins=m, strategy="quantile").plot()
    conf, correct = naive_top_label(logits, labels)
    srt = sorted(conf)
    n = len(conf)
    # docs/metrics.md: e = interp(linspace(0, N, M + 1), arange(N), sort(conf)); bin 0 closed
    edges = [float(np.interp(n * j / m, range(n), srt)) for j in range(m + 1)]
    count, s_corr = [0] * m, [0.0] * m
    for c, ok in zip(conf, correct):
        b = 0
        for j in range(m):
            if c > edges[j]:
                b = j
        count[b] += 1
        s_corr[b] += ok
    nonempty = [b for b in range(m) if count[b]]
    x, w, h, _ = bar_data(d.accuracy_bars_)
    # issue 33: drawn equally wide (each bin holds 1/M of the samples), in the order of confidence
    np.testing.assert_allclose(x, [b / m for b in nonempty], atol=1e-12)
    np.testing.assert_allclose(w, 1 / m, atol=1e-12)
    ticks = d.ax_.get_xticks()
    labels = [t.get_text() for t in d.hist_ax_.get_xticklabels()]
    assert len(labels) == len(ticks) >= 3
    for position, label in zip(ticks, labels):  # a tick at edge j/M is labelled with that edge
        j = int(round(position * m))
        assert position == pytest.approx(j / m)
        value = 1 - float(label[2:]) if label.startswith("1−") else float(label)  # 1−2e-6 = 1 − 2·10⁻⁶
        assert value == pytest.approx(edges[j], abs=0.006)
    np.testing.assert_allclose(h, [s_corr[b] / count[b] for b in nonempty], atol=1e-12)
    assert sum(count) == n == int(d.bins.count.sum())
    assert d.legend_.get_texts()[0].get_text().startswith("AdaECE = ")
    assert d.count_labels_ == []  # every equal-mass bin holds ~N/M: no count labels


def test_temperature_scales_the_logits():
    logits, labels = synthetic(n=800, sharpen=2.0, seed=1)
    d = ReliabilityDiagram.from_predictions(logits, labels, temperature=2.0, n_bins=15)
    conf, correct = naive_top_label(logits, labels, temperature=2.0)
    count, s_conf, s_corr = naive_uniform_bins(conf, correct, 15)
    np.testing.assert_array_equal(d.bins.count, count)
    assert d.ece == pytest.approx(naive_ece(count, s_conf, s_corr, len(labels)), abs=1e-12)
    assert d.temperature == 2.0


def test_binary_one_dimensional_scores():
    # 1-D probs are p(class 1): rows [0.2, 0.8] → conf 0.8 pred 1; [0.6, 0.4] → conf 0.6 pred 0
    d = ReliabilityDiagram.from_predictions(np.array([0.8, 0.4]), np.array([1, 1]), input_kind="probs", n_bins=5)
    np.testing.assert_array_equal(d.bins.count, [0, 0, 1, 1, 0])
    np.testing.assert_allclose(d.bins.accuracy[2:4], [0.0, 1.0])


def test_empty_bins_draw_nothing_and_all_empty_but_one():
    d = ReliabilityDiagram.from_predictions(np.array([[1.0, 0.0]] * 4), np.zeros(4, int), input_kind="probs").plot()
    assert len(d.accuracy_bars_.patches) == 1
    assert len(d.over_bars_.patches) == 0 and len(d.under_bars_.patches) == 0  # acc 1 = conf 1
    x, w, h, _ = bar_data(d.accuracy_bars_)
    assert x[0] == pytest.approx(14 / 15) and h[0] == 1.0


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    k=st.integers(2, 5),
    m=st.integers(1, 20),
    strategy=st.sampled_from(["uniform", "quantile"]),
    seed=st.integers(0, 2**16),
)
def test_counts_sum_to_n_and_heights_in_unit_interval(n, k, m, strategy, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * rng.uniform(0.1, 5)
    labels = rng.integers(0, k, n)
    d = ReliabilityDiagram.from_predictions(logits, labels, n_bins=m, strategy=strategy)
    assert int(d.bins.count.sum()) == n
    acc = d.bins.accuracy[d.bins.nonempty]
    assert ((acc >= 0) & (acc <= 1)).all()
    assert 0 <= d.ece <= 1


# ---------------------------------------------------------------------------------- classwise
def test_classwise_panels_equal_naive_frequency():
    logits, labels = synthetic(n=600, k=4, sharpen=2.0, seed=2)
    m = 10
    diagrams = classwise_diagrams(logits, labels, n_bins=m)
    assert len(diagrams) == 4
    eces = []
    for c, d in enumerate(diagrams):
        p_c = [naive_softmax_row(row)[c] for row in logits]
        count, s_p, s_y = naive_uniform_bins(p_c, [1.0 if y == c else 0.0 for y in labels], m)
        np.testing.assert_array_equal(d.bins.count, count)
        nonempty = [b for b in range(m) if count[b]]
        np.testing.assert_allclose(d.bins.accuracy[nonempty], [s_y[b] / count[b] for b in nonempty], atol=1e-12)
        expected = naive_ece(count, s_p, s_y, len(labels))
        assert d.ece == pytest.approx(expected, abs=1e-12)
        eces.append(expected)
    fig = classwise_figure(diagrams, title="grid")
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 4
    assert f"{100 * eces[0]:.2f}%" in diagrams[0].ax_.get_title()
    assert fig.legends and "Perfect calibration" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_classwise_refuses_more_than_20_classes():
    logits = np.zeros((3, MAX_CLASSWISE_CLASSES + 1))
    with pytest.raises(InputError, match="at most 20 classes"):
        classwise_diagrams(logits, np.zeros(3, int))


# ------------------------------------------------------------------------------------ figures
def test_user_axes_are_used_without_histogram_and_without_pyplot():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    d = ReliabilityDiagram.from_predictions(HAND_PROBS, HAND_LABELS, input_kind="probs", n_bins=10)
    assert d.plot(ax, color="green") is d
    assert d.ax_ is ax and d.figure_ is fig and d.hist_ax_ is None and d.hist_bars_ is None
    assert ax.get_xlabel() == "Confidence"
    assert d.accuracy_bars_.patches[0].get_facecolor()[:3] == pytest.approx((0, 128 / 255, 0))


def test_comparison_and_before_after_figures():
    logits, labels = synthetic(n=500, sharpen=2.0)
    fig = before_after_figure(logits, labels, 2.0, title="T")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["Before: T = 1", "After: T = 2"]
    assert fig._suptitle.get_text() == "T"
    d1 = ReliabilityDiagram.from_predictions(logits, labels, label="a")
    d2 = ReliabilityDiagram.from_predictions(logits, labels, label="b", temperature=2.0)
    fig = comparison_figure([d1, d2, d1])
    assert len(fig.axes) == 6  # diagram + histogram per model
    assert d1.hist_ax_.get_ylim() == d2.hist_ax_.get_ylim()  # one scale for comparison


def test_overlay_curves_pass_through_bin_means():
    logits, labels = synthetic(n=900, sharpen=2.0, seed=4)
    conf, correct = naive_top_label(logits, labels)
    count, s_conf, s_corr = naive_uniform_bins(conf, correct, 15)
    nonempty = [b for b in range(15) if count[b]]
    before = ReliabilityDiagram.from_predictions(logits, labels, label="before")
    after = ReliabilityDiagram.from_predictions(logits, labels, label="after", temperature=2.0)
    fig = overlay_figure([before, after], title="overlay")
    x, y = before.curve_.get_data()
    np.testing.assert_allclose(x, [s_conf[b] / count[b] for b in nonempty], atol=1e-12)
    np.testing.assert_allclose(y, [s_corr[b] / count[b] for b in nonempty], atol=1e-12)
    assert before.ax_ is after.ax_  # the same axes
    texts = [t.get_text() for t in before.ax_.get_legend().get_texts()]
    assert texts[0] == f"before — ECE = {100 * naive_ece(count, s_conf, s_corr, len(labels)):.2f}%"
    assert texts[1].startswith("after, T = 2 — ECE = ") and texts[2] == "Perfect calibration"
    assert before.hist_steps_.get_data().values.sum() == pytest.approx(1.0)
    assert len(fig.axes) == 2


def test_eval_figure_uses_the_report_bins():
    from calibrate_cli import evaluate

    logits, labels = synthetic(n=400)
    report = evaluate(logits, labels)
    fig = eval_figure(report, label="m")
    d = ReliabilityDiagram.from_report(report)
    assert d.ece == report.metrics["ece"]
    assert fig.axes[0].get_legend().get_texts()[0].get_text() == f"ECE = {100 * report.metrics['ece']:.2f}%"


def test_bad_arguments():
    with pytest.raises(InputError, match="strategy"):
        ReliabilityDiagram.from_predictions(HAND_PROBS, HAND_LABELS, input_kind="probs", strategy="kmeans")
    with pytest.raises(InputError, match="probabilities"):
        ReliabilityDiagram.from_predictions(HAND_PROBS, HAND_LABELS, input_kind="probs", temperature=2.0)
    with pytest.raises(InputError, match="temperature"):
        ReliabilityDiagram.from_predictions(HAND_PROBS, HAND_LABELS, input_kind="logits", temperature=0)
    with pytest.raises(InputError, match="n_bins"):
        ReliabilityDiagram.from_predictions(HAND_PROBS, HAND_LABELS, input_kind="probs", n_bins=0)


# ------------------------------------------------------------------------------------- saving
@pytest.fixture(scope="module")
def small_figure():
    return reliability_figure(ReliabilityDiagram.from_predictions(HAND_PROBS, HAND_LABELS, input_kind="probs"))


@pytest.mark.parametrize("ext", ["png", "svg", "pdf", "PNG"])
def test_save_formats_are_valid_files(tmp_path, small_figure, ext):
    path = save_figure(small_figure, tmp_path / f"fig.{ext}")
    data = path.read_bytes()
    fmt = ext.lower()
    if fmt == "svg":
        assert data.lstrip().startswith(b"<?xml") and b"<svg" in data[:2000] and data.rstrip().endswith(b"</svg>")
    else:
        assert data.startswith(MAGIC[fmt])
    assert [p.name for p in tmp_path.iterdir()] == [f"fig.{ext}"]  # no temp file left


def test_png_dpi(tmp_path, small_figure):
    import struct

    def width(path):
        data = path.read_bytes()
        return struct.unpack(">I", data[16:20])[0]  # IHDR width

    w100 = width(save_figure(small_figure, tmp_path / "a.png", dpi=100))
    w200 = width(save_figure(small_figure, tmp_path / "b.png", dpi=200))
    assert w200 == pytest.approx(2 * w100, abs=2)


def test_save_refuses_overwrite_and_bad_extension(tmp_path, small_figure):
    target = tmp_path / "fig.png"
    target.write_bytes(b"precious")
    with pytest.raises(OutputError, match="already exists"):
        save_figure(small_figure, target)
    assert target.read_bytes() == b"precious"
    save_figure(small_figure, target, force=True)
    assert target.read_bytes().startswith(MAGIC["png"])
    with pytest.raises(InputError, match="unknown figure extension"):
        save_figure(small_figure, tmp_path / "fig.jpg")
    with pytest.raises(InputError):
        figure_format("figure")
    with pytest.raises(OutputError, match="does not exist"):
        save_figure(small_figure, tmp_path / "missing" / "fig.png")


# ------------------------------------------------------------------------------ lazy imports
def test_cli_import_loads_neither_matplotlib_nor_torch():
    """Nor scipy.stats / scipy.special (~0.5 s of every `calib` start when `calibrate_cli.ood` imported them)."""
    code = (
        "import sys, calibrate_cli, calibrate_cli.cli, calibrate_cli.plots.diagram; "
        "print(sorted(m for m in ('matplotlib', 'torch', 'scipy.stats', 'scipy.special') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_drawing_never_uses_pyplot():
    code = (
        "import sys, numpy as np, tempfile, os\n"
        "from calibrate_cli.plots.diagram import ReliabilityDiagram, reliability_figure, save_figure\n"
        "d = ReliabilityDiagram.from_predictions(np.array([[2.0, 0.0], [0.0, 1.0]]), np.array([0, 0]))\n"
        "save_figure(reliability_figure(d), os.path.join(tempfile.mkdtemp(), 'f.png'))\n"
        "print('matplotlib.pyplot' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_diagram_renders_in_jupyter_as_png():
    """Jupyter displays the object a cell ends with through ``_repr_png_`` (issue 19.12): the
    Display's ``plot()`` returns the diagram, which must render as its figure."""
    from calibrate_cli.plots.diagram import ReliabilityDiagram

    rng = np.random.default_rng(0)
    diagram = ReliabilityDiagram.from_predictions(rng.normal(size=(200, 3)), rng.integers(0, 3, 200))
    fresh = diagram._repr_png_()  # not plotted yet: drawn on demand
    plotted = diagram.plot()._repr_png_()
    for png in (fresh, plotted):
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_a_temperature_diagram_equals_the_diagram_of_the_divided_logits(strategy):
    """With `temperature`, the logits are divided as they are read (never written whole): the bins and
    the legend's value equal, bit for bit, those of the diagram of logits / T computed first (one path:
    the same float64 division per value, then the same pass over the same values)."""
    from calibrate_cli.plots.diagram import ReliabilityDiagram
    from calibrate_cli.calibrators.temperature_fit import apply_temperature

    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3000, 7)) * 3).astype(np.float32)
    y = rng.integers(0, 7, 3000)
    scaled = ReliabilityDiagram.from_predictions(x, y, temperature=1.7, strategy=strategy)
    direct = ReliabilityDiagram.from_predictions(apply_temperature(x, 1.7), y, strategy=strategy)
    assert scaled.ece == direct.ece and scaled.accuracy == direct.accuracy
    for field in ("edges", "count", "sum_conf", "sum_correct"):
        assert np.array_equal(getattr(scaled.bins, field), getattr(direct.bins, field))


# ------------------------------------------------------------- issue 33: what the picture promises
def _opaque_over(d, bar):
    """The opaque patches drawn above the accuracy bar ``bar`` that cover part of it."""
    x0, x1 = bar.get_x(), bar.get_x() + bar.get_width()
    y1 = bar.get_y() + bar.get_height()
    out = []
    for p in d.ax_.patches:
        if p is bar or p.get_zorder() <= bar.get_zorder() or p.get_facecolor()[3] == 0:
            continue
        px0, px1 = p.get_x(), p.get_x() + p.get_width()
        py0, py1 = p.get_y(), p.get_y() + p.get_height()
        if px0 < x1 - 1e-12 and px1 > x0 + 1e-12 and py0 < y1 - 1e-12 and py1 > 1e-12:
            out.append(p)
    return out


def test_the_grey_bar_is_the_accuracy_in_over_and_under_confident_bins():
    # issue 33 item 5: in an under-confident bin the opaque blue box hid the grey bar above the
    # confidence, so the grey stopped at the confidence, not at the accuracy the legend names
    d = ReliabilityDiagram.from_predictions(HAND_PROBS, HAND_LABELS, input_kind="probs", n_bins=10).plot()
    acc = d.bins.accuracy[d.bins.nonempty]
    conf = d.bins.mean_confidence[d.bins.nonempty]
    assert (acc > conf).any() and (acc < conf).any()  # both directions are drawn
    for bar, a in zip(d.accuracy_bars_.patches, acc):
        assert bar.get_height() == pytest.approx(a)
        assert _opaque_over(d, bar) == []  # nothing opaque hides any part of the grey bar
    # the over-confident box sits on the bar (acc → conf), the under-confident one marks (conf, acc]
    _, _, oh, ob = bar_data(d.over_bars_)
    np.testing.assert_allclose(ob, acc[acc < conf])
    np.testing.assert_allclose(ob + oh, conf[acc < conf])
    _, _, uh, ub = bar_data(d.under_bars_)
    np.testing.assert_allclose(ub, conf[acc > conf])
    np.testing.assert_allclose(ub + uh, acc[acc > conf])
    # the legend shows the under-confident gap as it is drawn: on the accuracy colour
    assert _key_handle(d.key_legend_, "Gap: under-confident").get_facecolor() == \
        d.accuracy_bars_.patches[0].get_facecolor()


def _key_handle(legend, label):
    handles = legend.legend_handles if hasattr(legend, "legend_handles") else legend.legendHandles
    return handles[[t.get_text() for t in legend.get_texts()].index(label)]
