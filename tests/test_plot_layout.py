"""Where the legends go and what the axes span (issue 33, item 10): artists' geometry, not pixels."""

from __future__ import annotations

import numpy as np
import pytest

from calibrate_cli.cli import cli
from calibrate_cli.plots.diagram import (
    ReliabilityDiagram,
    classwise_diagrams,
    comparison_figure,
    reliability_figure,
)


def model(scale: float, n=3000, k=10, seed=0):
    """Logits of a model whose labels follow softmax(z): ``scale`` > 1 over-, < 1 under-confident."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k)) * 2.0
    z[np.arange(n), rng.integers(0, k, n)] += 3.0
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    labels = (p.cumsum(1) > rng.random((n, 1))).argmax(1)
    return z * scale, labels


def inside(inner, outer, tol=0.5) -> bool:
    return (inner.x0 >= outer.x0 - tol and inner.x1 <= outer.x1 + tol
            and inner.y0 >= outer.y0 - tol and inner.y1 <= outer.y1 + tol)


def assert_one_placement(fig):
    """Every panel's legend inside its axes, holding the ECE only; one key under the panels."""
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_legend() is not None]
    assert panels
    for ax in panels:
        legend = ax.get_legend()
        assert inside(legend.get_window_extent(), ax.bbox), ax.get_title()
        texts = [t.get_text() for t in legend.get_texts()]
        assert len(texts) == 1 and "ECE" in texts[0], texts
    assert len(fig.legends) == 1
    key = fig.legends[0].get_window_extent()
    assert "Perfect calibration" in [t.get_text() for t in fig.legends[0].get_texts()]
    assert inside(key, fig.bbox)
    assert all(key.y1 <= ax.get_tightbbox().y0 + 0.5 for ax in fig.axes)  # under every panel


@pytest.fixture()
def saved_figures(monkeypatch):
    import calibrate_cli.plots.diagram as plots

    figures = []
    original = plots.save_figure

    def capture(fig, path, **kwargs):
        figures.append(fig)
        return original(fig, path, **kwargs)

    monkeypatch.setattr(plots, "save_figure", capture)
    return figures


@pytest.fixture()
def files(tmp_path):
    out = {}
    for name, scale in (("under", 0.5), ("over", 2.5), ("calibrated", 1.0), ("sharp", 4.0)):
        z, y = model(scale)
        np.save(tmp_path / f"{name}.npy", z)
        out[name] = tmp_path / f"{name}.npy"
    np.save(tmp_path / "y.npy", y)
    out["labels"] = tmp_path / "y.npy"
    return out


def run(runner, args):
    result = runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result


def test_temperature_and_calibrator_figures_place_the_legend_alike(runner, tmp_path, files, saved_figures):
    # with --temperature an under-confident model's legends went outside the axes (the figure widened),
    # with --calibrator they stayed inside: now both draw the ECE inside and one key under the panels
    run(runner, ["fit", files["under"], files["labels"], "--method", "isotonic", "-o", tmp_path / "iso.json",
                 "-f", "json"])
    run(runner, ["plot", files["under"], files["labels"], "--temperature", "0.5", "-o", tmp_path / "t.png"])
    run(runner, ["plot", files["under"], files["labels"], "--calibrator", tmp_path / "iso.json",
                 "-o", tmp_path / "c.png"])
    temperature, calibrator = saved_figures
    for fig in (temperature, calibrator):
        assert_one_placement(fig)
    assert tuple(temperature.get_size_inches()) == tuple(calibrator.get_size_inches())


def test_four_models_wrap_into_two_rows_with_one_key(runner, tmp_path, files, saved_figures):
    names = ["under", "over", "calibrated", "sharp"]
    args = ["plot", files[names[0]], files["labels"]]
    for name in names[1:]:
        args += ["--compare", files[name], files["labels"]]
    run(runner, [*args, "-o", tmp_path / "cmp.png"])
    (fig,) = saved_figures
    assert_one_placement(fig)
    width, height = fig.get_size_inches() * 150
    assert width <= 1400, width  # was 3,727 px: four panels and four legends in a row
    diagram_axes = [ax for ax in fig.axes if ax.get_legend() is not None]
    assert [ax.get_title() for ax in diagram_axes] == names
    rows = sorted({round(ax.get_position().y0, 1) for ax in diagram_axes})
    columns = sorted({round(ax.get_position().x0, 1) for ax in diagram_axes})
    assert len(rows) == 2 and len(columns) == 2


def test_a_diagram_in_the_users_grid_keeps_its_legend_inside_the_axes(tmp_path):
    # the legend went outside the axes when no corner was free, and savefig clipped it in a grid
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.5))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    for ax, scale in zip(axes, (0.3, 2.5)):  # the first: bars fill the diagram, no corner is free
        z, y = model(scale)
        d = ReliabilityDiagram.from_predictions(z, y).plot(ax)
        assert d.key_legend_ is d.legend_  # on the user's axes: ECE and key in one legend
        assert "Perfect calibration" in [t.get_text() for t in d.legend_.get_texts()]
    fig.savefig(tmp_path / "grid.png")
    for ax in axes:
        assert inside(ax.get_legend().get_window_extent(), ax.bbox)
        assert inside(ax.get_legend().get_window_extent(), fig.bbox)


def test_a_binary_top_label_diagram_starts_at_one_half(tmp_path):
    rng = np.random.default_rng(2)
    p1 = rng.random(2000)
    y = (rng.random(2000) < p1).astype(int)
    d = ReliabilityDiagram.from_predictions(p1, y, input_kind="probs").plot()
    assert d.k == 2 and d.x_range == (0.5, 1.0)
    assert d.ax_.get_xlim() == (0.5, 1.0) and d.hist_ax_.get_xlim() == (0.5, 1.0)
    lefts = np.array([b.get_x() for b in d.accuracy_bars_.patches])
    assert lefts.min() >= 0.5 and d.diagonal_.get_xdata()[0] == 0.5
    # the bin (7/15, 8/15] is drawn from 0.5, where its confidences are
    first = d.accuracy_bars_.patches[0]
    assert first.get_x() == 0.5 and first.get_x() + first.get_width() == pytest.approx(8 / 15)
    # from an EvalReport too (calib eval --plot)
    import calibrate_cli as calib

    fig = reliability_figure(ReliabilityDiagram.from_report(calib.evaluate(p1, y, input_kind="probs")))
    assert fig.axes[0].get_xlim() == (0.5, 1.0)
    # K = 3 and the classwise panels of K = 2 (p_ik spans [0, 1]) keep the whole axis
    z, y3 = model(1.0, k=3)
    assert ReliabilityDiagram.from_predictions(z, y3).plot().ax_.get_xlim() == (0.0, 1.0)
    panel = classwise_diagrams(np.column_stack([1 - p1, p1]), y, input_kind="probs")[0]
    assert panel.plot().ax_.get_xlim() == (0.0, 1.0)


def test_comparison_of_three_stays_one_row():
    diagrams = [ReliabilityDiagram.from_predictions(*model(s)) for s in (0.5, 1.0, 2.0)]
    fig = comparison_figure(diagrams)
    assert_one_placement(fig)
    assert len({round(d.ax_.get_position().y0, 1) for d in diagrams}) == 1


def test_equal_mass_bins_of_an_over_confident_model_are_readable():
    # 14 of 15 equal-mass bins lay in [0.99, 1]: bars thinner than a line. Now equally wide, the
    # dashed step at each bin's mean confidence, the ticks naming the edges (1−5e-7: 1 − 5·10⁻⁷)
    from calibrate_cli.plots.diagram import edge_label

    z, y = model(12.0)
    d = ReliabilityDiagram.from_predictions(z, y, strategy="quantile").plot()
    edges = np.asarray(d.bins.edges)
    assert (edges[1:-1] > 0.99).sum() >= 10  # the case of the issue
    widths = [b.get_width() for b in d.accuracy_bars_.patches]
    assert len(widths) >= 12 and min(widths) == pytest.approx(1 / 15)
    conf = d.bins.mean_confidence[d.bins.nonempty]
    np.testing.assert_allclose(d.diagonal_.get_ydata(), np.repeat(conf, 2))
    labels = [t.get_text() for t in d.hist_ax_.get_xticklabels()]
    assert len(labels) == 5 and len(set(labels)) == 5 and max(len(t) for t in labels) <= 7
    assert d.hist_ax_.get_xlabel().endswith("(equal-mass bins, drawn equally wide)")
    assert [edge_label(v) for v in (0.2668, 0.959, 0.99620621, 0.9995, 1 - 4e-5, 1.0)] == \
        ["0.27", "0.959", "0.9962", "1−5e-4", "1−4e-5", "1"]
