"""Reliability diagrams (docs/plots.md), in scikit-learn's Display pattern.

:meth:`ReliabilityDiagram.from_predictions` computes through the metrics core (validation by
:func:`~calibrate_cli.predictions.as_predictions`, one pass by :func:`~calibrate_cli.summary.summarize`,
the bins of :func:`~calibrate_cli.metrics.equal_width_bins` / :func:`~calibrate_cli.metrics.equal_mass_bins`)
and stores the per-bin statistics; :meth:`ReliabilityDiagram.plot` draws them and returns ``self``
with ``ax_`` and ``figure_`` set, so plots compose::

    from calibrate_cli.plots import ReliabilityDiagram, reliability_figure, save_figure

    diagram = ReliabilityDiagram.from_predictions(logits, labels, n_bins=15, label="ResNet-50")
    diagram.bins.accuracy, diagram.ece                # the numbers behind the picture
    save_figure(reliability_figure(diagram), "reliability.png", dpi=150)

What is drawn, per non-empty bin b with edges (e_b, e_{b+1}]:

- a bar of height acc(B_b) (the accuracy, or for a classwise panel the frequency of [y = k]) spanning
  the bin (width e_{b+1} − e_b, so equal-mass bins have variable widths);
- the gap between acc(B_b) and the mean confidence conf(B_b): hatched red where the model is
  over-confident (conf > acc: the red box sits on top of the bar), hatched blue where it is
  under-confident (acc > conf: the blue box is the top of the bar, above the confidence);
- the diagonal acc = conf (perfect calibration), and the ECE (AdaECE for equal-mass bins, with an
  interval when given) in the legend;
- under the diagram, the share of samples |B_b|/N per bin.

Empty bins draw nothing. matplotlib is imported only inside functions (never by ``import
calibrate_cli``); figures created here use ``matplotlib.figure.Figure`` with the Agg canvas and no
pyplot state, so no display is needed and the user's backend is never touched.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from .binning import BinStats, bin_statistics, uniform_edges
from .errors import InputError
from .io import atomic_write, check_output_path
from .metrics import DEFAULT_N_BINS, equal_mass_bins, equal_width_bins, metrics_from_summary
from .predictions import InputKind, as_predictions
from .probabilities import to_probabilities
from .summary import summarize
from .calibrators.temperature import TemperatureScaling
from .temperature import apply_temperature, check_temperature

__all__ = [
    "STRATEGIES",
    "FIGURE_FORMATS",
    "DEFAULT_DPI",
    "MAX_CLASSWISE_CLASSES",
    "ReliabilityDiagram",
    "classwise_diagrams",
    "reliability_figure",
    "comparison_figure",
    "overlay_figure",
    "before_after_figure",
    "eval_figure",
    "classwise_figure",
    "fit_titles",
    "shorten_middle",
    "figure_format",
    "check_figure_path",
    "escape_mathtext",
    "save_figure",
]

STRATEGIES = ("uniform", "quantile")
FIGURE_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
DEFAULT_DPI = 150
MAX_CLASSWISE_CLASSES = 20

# Colours: neutral grey bars so that the gaps stand out; red/blue gaps with opaque light faces (a
# translucent blue over the bar turned muddy) and different hatch directions (readable in greyscale).
ACCURACY_COLOR = "#5c5c5c"
OVER_COLOR = "#d62728"
OVER_FACE = "#fbd3d3"
UNDER_COLOR = "#1f77b4"
UNDER_FACE = "#cfe2f3"
HIST_COLOR = "#9a9a9a"
PANEL_SIZE = (4.4, 5.2)  # inches per diagram with its histogram
CLASSWISE_PANEL_SIZE = (2.6, 2.6)


def _check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise InputError(f"Expected `strategy` to be one of {STRATEGIES}, but got {strategy!r}")
    return strategy


def _percent(x: float) -> str:
    return f"{100 * x:.2f}%"


def _compact(count: int) -> str:
    """1234 → "1.2k", 999999 → "1.0M" (counts over histogram bars)."""
    if count < 1000:
        return str(count)
    for size, suffix in ((1e3, "k"), (1e6, "M"), (1e9, "G")):
        value = count / size
        text = f"{value:.1f}" if value < 9.95 else f"{value:.0f}"
        if float(text) < 1000 or suffix == "G":
            return text + suffix
    raise AssertionError("unreachable")


def _format_temperature(t: float) -> str:
    return f"{t:.4g}"


ELLIPSIS = "…"


def shorten_middle(text: str, keep: int) -> str:
    """``text`` with its middle replaced by "…" so that ``keep`` of its characters remain (half from
    the start, half from the end, where a file name's distinctive parts are)."""
    if keep >= len(text):
        return text
    keep = max(keep, 1)
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head].rstrip() + ELLIPSIS + (text[len(text) - tail:].lstrip() if tail else "")


def _fit_text(artist, width: float) -> None:
    """Shorten the text of ``artist`` (a title) with a middle ellipsis until it is at most ``width``
    display units wide, measured with the figure's renderer (the font's real glyph widths)."""
    full = artist.get_text()
    if not full or artist.get_window_extent().width <= width:
        return
    low, high = 1, len(full) - 1  # the most characters that fit, by bisection (width grows with them)
    while low < high:
        mid = (low + high + 1) // 2
        artist.set_text(shorten_middle(full, mid))
        if artist.get_window_extent().width <= width:
            low = mid
        else:
            high = mid - 1
    artist.set_text(shorten_middle(full, low))


def fit_titles(fig) -> None:
    """Shorten every axes title to its axes' width and the figure title to the figure's width.

    Called by the figure builders before they return; measured on the axes as laid out before the
    constrained layout, which only widens them, so a shortened title always fits."""
    for ax in fig.axes:
        if ax.get_visible():
            for title in (ax.title, ax._left_title, ax._right_title):
                _fit_text(title, ax.bbox.width)
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None:
        _fit_text(suptitle, 0.96 * fig.bbox.width)


class ReliabilityDiagram:
    """A reliability diagram: per-bin statistics and the calibration error they give.

    Build it with :meth:`from_predictions` (or directly from :class:`~calibrate_cli.binning.BinStats`),
    draw it with :meth:`plot`.

    bins          per-bin count, Σconf, Σcorrect and edges
    ece           Σ_b |B_b|/N · |acc(B_b) − conf(B_b)| over ``bins`` (AdaECE for equal-mass bins)
    metric_name   how the legend names ``ece`` ("ECE", "AdaECE", "ECE_k", ...)
    interval      optional (low, high) interval of ``ece`` shown in the legend (e.g. a bootstrap CI)
    label         the model's name (panel title)
    temperature   the temperature applied to the logits, if any
    accuracy      overall accuracy (None when not known, e.g. classwise panels)

    After :meth:`plot`: ``ax_``, ``hist_ax_`` (None without histogram), ``figure_``, and the
    artists ``accuracy_bars_``, ``over_bars_``, ``under_bars_``, ``hist_bars_``, ``count_labels_``, ``diagonal_``,
    ``legend_``.
    """

    def __init__(
        self,
        bins: BinStats,
        *,
        ece: float | None = None,
        metric_name: str = "ECE",
        strategy: str = "uniform",
        label: str | None = None,
        interval: tuple[float, float] | None = None,
        temperature: float | None = None,
        accuracy: float | None = None,
        xlabel: str = "Confidence",
        ylabel: str = "Accuracy",
    ) -> None:
        self.bins = bins
        self.ece = float(bins.calibration_error()) if ece is None else float(ece)
        self.metric_name = metric_name
        self.strategy = _check_strategy(strategy)
        self.label = label
        if interval is not None:
            low, high = (float(v) for v in interval)
            interval = (low, high)
        self.interval = interval
        self.temperature = temperature
        self.accuracy = accuracy
        self.xlabel = xlabel
        self.ylabel = ylabel

    @property
    def n(self) -> int:
        return int(self.bins.n)

    @classmethod
    def from_predictions(
        cls,
        scores,
        labels,
        *,
        input_kind: InputKind | None = None,
        n_bins: int = DEFAULT_N_BINS,
        strategy: str = "uniform",
        temperature: float | None = None,
        label: str | None = None,
        interval: tuple[float, float] | None = None,
        scores_name: str = "scores",
        labels_name: str = "labels",
        device: str | None = None,
    ) -> "ReliabilityDiagram":
        """Bin the top-label confidences of ``scores`` (logits or probabilities) against ``labels``.
        ``device``: where the summary pass runs (:func:`~calibrate_cli.summary.summarize`; None: the CPU).

        ``strategy="uniform"``: M equal-width bins (b/M, (b+1)/M], the legend shows the ECE;
        ``"quantile"``: M equal-mass bins, the legend shows the AdaECE. ``temperature`` T scales the
        logits first (p = softmax(logits / T); logits only).
        """
        _check_strategy(strategy)
        predictions = as_predictions(
            scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name
        )
        if temperature is not None:
            if predictions.input_kind != "logits":
                raise InputError("a temperature scales logits; the scores are probabilities", remedy="logits")
            temperature = check_temperature(temperature)
            # logits / T as each chunk is read (no (N, K) float64 array)
            predictions = TemperatureScaling(temperature).apply_as_read(predictions, scores_name=scores_name)
        # the diagram reads the top label only: no NLL, Brier, top-5 or classwise work; equal-width bins
        # are made during the pass where they can be (no (N,) arrays)
        summary = summarize(predictions, n_bins=n_bins, classwise=False, device=device, top_label_only=True,
                            width_only=strategy == "uniform")
        if strategy == "uniform":
            bins = summary.width
            if bins is None:
                bins = equal_width_bins(summary.confidences, summary.correct, n_bins)
            metrics = metrics_from_summary(summary, n_bins, width=bins, names=["ece", "accuracy"])
            value, name = metrics["ece"], "ECE"
        else:
            bins = equal_mass_bins(summary.confidences, summary.correct, n_bins)
            metrics = metrics_from_summary(summary, n_bins, mass=bins, names=["adaece", "accuracy"])
            value, name = metrics["adaece"], "AdaECE"
        return cls(
            bins,
            ece=value,
            metric_name=name,
            strategy=strategy,
            label=label,
            interval=interval,
            temperature=temperature,
            accuracy=metrics["accuracy"],
        )

    @classmethod
    def from_report(
        cls, report, *, label: str | None = None, interval: tuple[float, float] | None = None
    ) -> "ReliabilityDiagram":
        """The diagram of an :class:`~calibrate_cli.evaluate.EvalReport` (its equal-width bins and
        ECE, no recomputation): what ``calib eval --plot`` draws."""
        return cls(
            report.bins,
            ece=report.metrics["ece"],
            metric_name="ECE",
            label=label,
            interval=interval,
            accuracy=report.metrics["accuracy"],
        )

    # ----------------------------------------------------------------------------------- drawing
    def legend_label(self) -> str:
        """The legend entry of the calibration error, e.g. ``ECE = 3.21% [2.80%, 3.62%]``."""
        text = f"{self.metric_name} = {_percent(self.ece)}"
        if self.interval is not None:
            text += f" [{_percent(self.interval[0])}, {_percent(self.interval[1])}]"
        return text

    def _repr_png_(self) -> bytes | None:
        """Jupyter shows a diagram as its figure (PNG): after :meth:`plot`, or drawn on demand, so
        ``ReliabilityDiagram.from_predictions(...).plot()`` at the end of a cell displays it."""
        import io as _io

        if getattr(self, "figure_", None) is None:
            self.plot()
        buffer = _io.BytesIO()
        self.figure_.savefig(buffer, format="png", dpi=DEFAULT_DPI)
        return buffer.getvalue()

    def title(self) -> str | None:
        parts = [self.label] if self.label else []
        if self.temperature is not None and (not self.label or "T =" not in self.label):
            parts.append(f"T = {_format_temperature(self.temperature)}")
        return ", ".join(parts) if parts else None

    def plot(
        self,
        ax=None,
        *,
        hist_ax=None,
        title: str | None = None,
        legend: bool = True,
        legend_loc: str | None = None,
        fontsize: float | None = None,
        count_labels: bool | None = None,
        **kwargs,
    ) -> "ReliabilityDiagram":
        """Draw the diagram on ``ax`` (a new Agg figure with a histogram axis when None).

        ``hist_ax``: where to draw the share of samples per bin (none when ``ax`` is given without
        it). ``title`` overrides the model label (shortened with "…" in the middle to the axes'
        width). ``legend_loc``: where the legend goes (default: the first of the corners upper left,
        lower right, upper right, lower left, where it covers no bar; outside the axes, on the right,
        when every corner would cover one; ``legend_outside_`` says which). ``count_labels``: write
        each bin's sample count over its histogram bar (bars at least 1/30 wide); default: for
        equal-width bins only (equal-mass bins all hold ~N/M). ``kwargs`` go to the accuracy bars
        (``Axes.bar``), e.g. ``color``. Returns ``self``
        with ``ax_``, ``hist_ax_``, ``figure_`` set. To draw several models on the same axes, use
        :meth:`plot_curve` (or :func:`overlay_figure`).
        """
        new_figure = ax is None
        if new_figure:
            fig = _new_figure(PANEL_SIZE)
            ax, hist_ax = _diagram_axes(fig, fig.add_gridspec(1, 1)[0, 0])
        bins = self.bins
        edges = np.asarray(bins.edges, dtype=np.float64)
        nonempty = bins.nonempty
        lefts = edges[:-1][nonempty]
        widths = np.diff(edges)[nonempty]
        acc = bins.accuracy[nonempty]
        conf = bins.mean_confidence[nonempty]
        text_size = fontsize
        if count_labels is None:
            count_labels = self.strategy == "uniform"

        bar_kwargs = {"color": ACCURACY_COLOR, "edgecolor": "white", "linewidth": 0.6, "label": self.ylabel}
        bar_kwargs.update(kwargs)
        self.accuracy_bars_ = ax.bar(lefts, acc, width=widths, align="edge", zorder=2, **bar_kwargs)

        over = conf > acc
        under = conf < acc
        gap_style = {"align": "edge", "linewidth": 1.0, "zorder": 3}
        self.over_bars_ = ax.bar(
            lefts[over], (conf - acc)[over], width=widths[over], bottom=acc[over],
            facecolor=OVER_FACE, edgecolor=OVER_COLOR, hatch="///",
            label="Gap: over-confident", **gap_style,
        )
        self.under_bars_ = ax.bar(
            lefts[under], (acc - conf)[under], width=widths[under], bottom=conf[under],
            facecolor=UNDER_FACE, edgecolor=UNDER_COLOR, hatch="\\\\\\",
            label="Gap: under-confident", **gap_style,
        )
        (self.diagonal_,) = ax.plot(
            [0, 1], [0, 1], linestyle="--", color="#333333", linewidth=1.2, zorder=4, label="Perfect calibration"
        )
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("auto")
        ax.set_ylabel(self.ylabel, fontsize=text_size)
        ax.grid(True, color="#dddddd", linewidth=0.6, zorder=0)
        ax.set_axisbelow(True)
        heading = title if title is not None else self.title()
        if heading:
            ax.set_title(heading, fontsize=text_size)

        self.legend_ = None
        self.legend_outside_ = False
        if legend:
            from matplotlib.lines import Line2D
            from matplotlib.patches import Patch

            handles = [
                Line2D([], [], linestyle="none", label=self.legend_label()),
                Patch(facecolor=bar_kwargs["color"], label=self.ylabel),
                Patch(facecolor=OVER_FACE, edgecolor=OVER_COLOR, hatch="///",
                      label="Gap: over-confident"),
                Patch(facecolor=UNDER_FACE, edgecolor=UNDER_COLOR, hatch="\\\\\\",
                      label="Gap: under-confident"),
                self.diagonal_,
            ]
            self.legend_ = ax.legend(
                handles=handles, loc=legend_loc or "upper left", fontsize=text_size if text_size else "small",
                framealpha=0.92, handlelength=1.6, borderaxespad=0.6,
            )
            # the metric entry has no handle: bold, flush left
            first = self.legend_.get_texts()[0]
            first.set_fontweight("bold")
            if legend_loc is None:
                # the bars reach up to max(accuracy, confidence) in each bin
                tops = np.maximum(acc, conf)
                self.legend_outside_ = not _place_legend(ax, self.legend_, lefts, widths, tops)

        self.hist_ax_ = hist_ax
        self.hist_bars_ = None
        self.count_labels_ = []
        if hist_ax is not None:
            share = bins.count[nonempty] / max(self.n, 1)
            self.hist_bars_ = hist_ax.bar(
                lefts, share, width=widths, align="edge", color=HIST_COLOR, edgecolor="white", linewidth=0.6
            )
            hist_ax.set_xlim(0, 1)
            top = float(share.max()) if share.size else 1.0
            if count_labels:
                # the sample count over each bar wide enough for it: a bin of 3 samples explains
                # a large gap that costs little ECE
                counts = bins.count[nonempty]
                wide = widths >= 1 / 30
                for left, width, h, c in zip(lefts[wide], widths[wide], share[wide], counts[wide]):
                    self.count_labels_.append(
                        hist_ax.text(left + width / 2, h, _compact(int(c)), ha="center", va="bottom",
                                     fontsize=6.5, color="#444444", clip_on=False)
                    )
            headroom = 1.32 if count_labels else 1.15
            hist_ax.set_ylim(0, top * headroom if top > 0 else 1.0)
            hist_ax.set_ylabel("Share", fontsize=text_size)
            hist_ax.set_xlabel(self.xlabel, fontsize=text_size)
            hist_ax.yaxis.set_major_formatter(_percent_formatter())
            hist_ax.yaxis.set_major_locator(_max_n_locator(3))
            hist_ax.grid(True, axis="y", color="#dddddd", linewidth=0.6)
            hist_ax.set_axisbelow(True)
            ax.tick_params(labelbottom=False)
        else:
            ax.set_xlabel(self.xlabel, fontsize=text_size)
        if new_figure:
            _widen_for_outside_legends(ax.figure, [self])
        if heading:
            _fit_text(ax.title, ax.bbox.width)
        self.ax_ = ax
        self.figure_ = ax.figure
        return self

    def plot_curve(self, ax=None, *, hist_ax=None, color=None, marker: str = "o", **kwargs) -> "ReliabilityDiagram":
        """Draw the diagram as a reliability curve, for several models on the same axes.

        One point per non-empty bin at (mean confidence, accuracy), joined by a line labelled with
        the model's name and its ECE; on ``hist_ax``, the share of samples per bin as an outline.
        The diagonal and the legend are left to the caller (:func:`overlay_figure` draws them).
        ``kwargs`` go to ``Axes.plot``. Sets ``curve_``, ``hist_steps_``, ``ax_``, ``figure_``.
        """
        if ax is None:
            fig = _new_figure(PANEL_SIZE)
            ax, hist_ax = _diagram_axes(fig, fig.add_gridspec(1, 1)[0, 0])
        bins = self.bins
        nonempty = bins.nonempty
        name = self.title()
        label = f"{name} — {self.legend_label()}" if name else self.legend_label()
        style = {"marker": marker, "markersize": 4.5, "linewidth": 1.8, "label": label, "zorder": 3}
        style.update(kwargs)
        (self.curve_,) = ax.plot(bins.mean_confidence[nonempty], bins.accuracy[nonempty], color=color, **style)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_ylabel(self.ylabel)
        ax.grid(True, color="#dddddd", linewidth=0.6, zorder=0)
        ax.set_axisbelow(True)
        self.hist_ax_ = hist_ax
        self.hist_steps_ = None
        if hist_ax is not None:
            edges = np.asarray(bins.edges, dtype=np.float64)
            share = bins.count / max(self.n, 1)
            self.hist_steps_ = hist_ax.stairs(share, edges, color=self.curve_.get_color(), linewidth=1.5)
            hist_ax.set_xlim(0, 1)
            hist_ax.set_ylabel("Share")
            hist_ax.set_xlabel(self.xlabel)
            hist_ax.yaxis.set_major_formatter(_percent_formatter())
            hist_ax.yaxis.set_major_locator(_max_n_locator(3))
            hist_ax.grid(True, axis="y", color="#dddddd", linewidth=0.6)
            ax.tick_params(labelbottom=False)
        else:
            ax.set_xlabel(self.xlabel)
        self.ax_ = ax
        self.figure_ = ax.figure
        return self


# ------------------------------------------------------------------------------------ classwise
def classwise_diagrams(
    scores,
    labels,
    *,
    input_kind: InputKind | None = None,
    n_bins: int = DEFAULT_N_BINS,
    temperature: float | None = None,
    class_names: Sequence[str] | None = None,
    classes: Sequence[int] | None = None,
    max_classes: int = MAX_CLASSWISE_CLASSES,
    scores_name: str = "scores",
    labels_name: str = "labels",
) -> list[ReliabilityDiagram]:
    """One diagram per class k: equal-width bins of p_ik (all N samples) against [y_i = k].

    The legend of panel k shows ECE_k = Σ_b |B_kb|/N · |mean p_ik − mean [y_i = k]| (the classwise
    ECE is their mean over the K classes). ``classes``: the class indices to draw, in that order
    (default: all K). At most ``max_classes`` panels (a grid is unreadable beyond that).
    ``class_names``: one name per class of the scores (K names), default ``class k``.
    """
    predictions = as_predictions(scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name)
    k = predictions.k
    if class_names is not None and len(class_names) != k:
        raise InputError(f"got {len(class_names)} class names for K = {k} classes")
    if classes is None:
        if k > max_classes:
            raise InputError(
                f"{scores_name}: the classwise view shows at most {max_classes} classes, the scores have K = {k}"
            )
        classes = range(k)
    else:
        classes = [int(c) for c in classes]
        if not classes:
            raise InputError("no classes to draw")
        bad = [c for c in classes if not 0 <= c < k]
        if bad:
            raise InputError(f"{scores_name}: class {bad[0]} is out of range for K = {k} classes (expected 0..{k - 1})")
        if len(set(classes)) < len(classes):
            raise InputError(f"class {next(c for c in classes if classes.count(c) > 1)} is given twice")
        if len(classes) > max_classes:
            raise InputError(f"the classwise view shows at most {max_classes} classes, got {len(classes)}")
    s = predictions.scores
    if temperature is not None:
        if predictions.input_kind != "logits":
            raise InputError("a temperature scales logits; the scores are probabilities", remedy="logits")
        s = apply_temperature(s, temperature)
    probs = to_probabilities(s, predictions.input_kind)
    edges = uniform_edges(n_bins)
    out = []
    for c in classes:
        name = str(class_names[c]) if class_names is not None else f"class {c}"
        stats = bin_statistics(probs[:, c], predictions.labels == c, edges)
        out.append(
            ReliabilityDiagram(
                stats,
                metric_name="ECE_k",
                label=name,
                temperature=temperature,
                xlabel=f"p({name})",
                ylabel="Frequency",
            )
        )
    return out


# ---------------------------------------------------------------------------------- figures
def _new_figure(size: tuple[float, float]):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _percent_formatter():
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(xmax=1.0, decimals=0)


def _max_n_locator(n: int):
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(nbins=n, min_n_ticks=2)


LEGEND_CORNERS = ("upper left", "lower right", "upper right", "lower left")


def _set_legend_loc(legend, loc: str) -> None:
    if hasattr(legend, "set_loc"):  # matplotlib ≥ 3.8
        legend.set_loc(loc)
    else:
        legend._loc = legend.codes[loc]


def _place_legend(ax, legend, lefts, widths, tops) -> bool:
    """Put ``legend`` in the first corner of ``LEGEND_CORNERS`` where it overlaps no bar (bars span
    [left, left + width] × [0, top] in data coordinates, the axes' limits (0, 1)); else outside the
    axes on the right, where it hides nothing. Returns whether a corner was free.

    Measured on the axes as laid out now (before the constrained layout, which makes the axes
    larger and the legend relatively smaller, so a free corner stays free)."""
    to_data = ax.transData.inverted()
    margin = 0.01  # keep the frame off the bars' tops
    for loc in LEGEND_CORNERS:
        _set_legend_loc(legend, loc)
        (x0, y0), (x1, y1) = to_data.transform(legend.get_window_extent().get_points())
        hit = (lefts < x1) & (lefts + widths > x0) & (tops + margin > y0)
        if not hit.any():
            return True
    _set_legend_loc(legend, "upper left")
    legend.set_bbox_to_anchor((1.02, 1.0), transform=ax.transAxes)  # (see _put_legend_outside)
    return False


def _put_legend_outside(diagram) -> None:
    _set_legend_loc(diagram.legend_, "upper left")
    diagram.legend_.set_bbox_to_anchor((1.02, 1.0), transform=diagram.ax_.transAxes)
    diagram.legend_outside_ = True


def _widen_for_outside_legends(fig, diagrams) -> None:
    """Make room for legends placed outside their axes: widen the figure by the widest of them per panel (the
    constrained layout then keeps the diagrams' width). Side by side, when one legend is outside,
    all are (so that the panels keep the same size)."""
    outside = [d for d in diagrams if getattr(d, "legend_outside_", False)]
    if outside:
        for d in diagrams:
            if d.legend_ is not None and not d.legend_outside_:
                _put_legend_outside(d)
    widths = [d.legend_.get_window_extent().width for d in diagrams if getattr(d, "legend_outside_", False)]
    if widths:
        w, h = fig.get_size_inches()
        fig.set_size_inches(w + len(widths) * (max(widths) / fig.dpi + 0.15), h)


def _diagram_axes(fig, cell):
    """A diagram axis and a histogram axis (a quarter of its height) under it, sharing x."""
    inner = cell.subgridspec(2, 1, height_ratios=[4, 1], hspace=0.04)
    ax = fig.add_subplot(inner[0])
    hist_ax = fig.add_subplot(inner[1], sharex=ax)
    return ax, hist_ax


def comparison_figure(diagrams: Sequence[ReliabilityDiagram], *, title: str | None = None, histogram: bool = True):
    """Diagrams side by side (one column each, histogram under each), e.g. several models."""
    diagrams = list(diagrams)
    if not diagrams:
        raise InputError("nothing to plot: no diagrams")
    n = len(diagrams)
    fig = _new_figure((PANEL_SIZE[0] * n, PANEL_SIZE[1] if histogram else PANEL_SIZE[1] * 0.82))
    grid = fig.add_gridspec(1, n)
    for i, diagram in enumerate(diagrams):
        if histogram:
            ax, hist_ax = _diagram_axes(fig, grid[0, i])
        else:
            ax, hist_ax = fig.add_subplot(grid[0, i]), None
        diagram.plot(ax, hist_ax=hist_ax)
        if i > 0:
            ax.set_ylabel("")
            if hist_ax is not None:
                hist_ax.set_ylabel("")
    if histogram and n > 1:  # one scale for the histograms, so that the panels compare
        top = max(d.hist_ax_.get_ylim()[1] for d in diagrams)
        for d in diagrams:
            d.hist_ax_.set_ylim(0, top)
    _widen_for_outside_legends(fig, diagrams)
    if title:
        fig.suptitle(title, fontweight="bold")
    fit_titles(fig)
    return fig


OVERLAY_COLORS = ("#e66101", "#5e3c99", "#1b9e77", "#222222", "#e7298a", "#a6761d", "#66a61e", "#7570b3")


def overlay_figure(diagrams: Sequence[ReliabilityDiagram], *, title: str | None = None):
    """Several diagrams on the same axes, as reliability curves (e.g. before / after temperature)."""
    diagrams = list(diagrams)
    if not diagrams:
        raise InputError("nothing to plot: no diagrams")
    fig = _new_figure((PANEL_SIZE[0] + 0.6, PANEL_SIZE[1]))
    ax, hist_ax = _diagram_axes(fig, fig.add_gridspec(1, 1)[0, 0])
    for i, diagram in enumerate(diagrams):
        diagram.plot_curve(ax, hist_ax=hist_ax, color=OVERLAY_COLORS[i % len(OVERLAY_COLORS)])
    ax.plot([0, 1], [0, 1], linestyle="--", color="#333333", linewidth=1.2, zorder=2, label="Perfect calibration")
    weight = sum(float((d.bins.sum_conf - d.bins.sum_correct).sum()) for d in diagrams)
    ax.legend(loc="upper left" if weight >= 0 else "lower right", fontsize="small", framealpha=0.92)
    top = hist_ax.get_ylim()[1]
    hist_ax.set_ylim(0, min(1.0, top))
    if title:
        ax.set_title(title)
    fit_titles(fig)
    return fig


def reliability_figure(diagram: ReliabilityDiagram, *, title: str | None = None):
    """The figure of one diagram with its histogram."""
    fig = comparison_figure([diagram])
    if title:
        diagram.ax_.set_title(title)
        fit_titles(fig)
    return fig


def eval_figure(report, *, label: str | None = None, interval: tuple[float, float] | None = None, title=None):
    """The figure of ``calib eval --plot``: the diagram of an EvalReport with its histogram."""
    return reliability_figure(ReliabilityDiagram.from_report(report, label=label, interval=interval), title=title)


def before_after_figure(
    scores,
    labels,
    temperature: float,
    *,
    n_bins: int = DEFAULT_N_BINS,
    strategy: str = "uniform",
    title: str | None = None,
    intervals: tuple | None = None,
    overlay: bool = False,
    scores_name: str = "scores",
    labels_name: str = "labels",
):
    """Before / after temperature scaling side by side: softmax(logits) and softmax(logits / T).

    ``intervals``: optional ((low, high) before, (low, high) after) for the legends; ``overlay``:
    both as curves on the same axes. This is what ``calib temperature --plot`` and
    ``calib plot --temperature`` draw.
    """
    temperature = check_temperature(temperature)
    low_high = intervals if intervals is not None else (None, None)
    common = dict(input_kind="logits", n_bins=n_bins, strategy=strategy, scores_name=scores_name,
                  labels_name=labels_name)
    before = ReliabilityDiagram.from_predictions(
        scores, labels, label="Before: T = 1", interval=low_high[0], **common
    )
    after = ReliabilityDiagram.from_predictions(
        scores, labels, temperature=temperature, label=f"After: T = {_format_temperature(temperature)}",
        interval=low_high[1], **common,
    )
    if overlay:
        return overlay_figure([before, after], title=title)
    return comparison_figure([before, after], title=title)


def classwise_figure(diagrams: Sequence[ReliabilityDiagram], *, title: str | None = None, columns: int | None = None):
    """A small-multiples grid of per-class diagrams (from :func:`classwise_diagrams`), shared axes."""
    diagrams = list(diagrams)
    if not diagrams:
        raise InputError("nothing to plot: no diagrams")
    n = len(diagrams)
    cols = columns or min(5, n if n <= 5 else math.ceil(math.sqrt(n)) + (1 if n > 9 else 0))
    cols = max(1, min(cols, n))
    rows = math.ceil(n / cols)
    fig = _new_figure((CLASSWISE_PANEL_SIZE[0] * cols, CLASSWISE_PANEL_SIZE[1] * rows + (0.4 if title else 0)))
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    for i, diagram in enumerate(diagrams):
        r, c = divmod(i, cols)
        ax = axes[r][c]
        diagram.plot(ax, legend=False, title=f"{diagram.label}: ECE {_percent(diagram.ece)}", fontsize=9)
        ax.set_xlabel("p(class)" if r == rows - 1 else "", fontsize=9)
        ax.set_ylabel("Frequency" if c == 0 else "", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.set_xticks([0, 0.5, 1])
        ax.set_yticks([0, 0.5, 1])
    for j in range(n, rows * cols):
        r, c = divmod(j, cols)
        axes[r][c].set_visible(False)
        if r > 0:  # the panel above ends its column: it carries the x axis
            axes[r - 1][c].tick_params(labelbottom=True)
            axes[r - 1][c].set_xlabel("p(class)", fontsize=9)
    # one legend for the whole grid
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(facecolor=ACCURACY_COLOR, label="Frequency of the class"),
        Patch(facecolor=OVER_FACE, edgecolor=OVER_COLOR, hatch="///", label="Gap: over-confident"),
        Patch(facecolor=UNDER_FACE, edgecolor=UNDER_COLOR, hatch="\\\\\\", label="Gap: under-confident"),
        Line2D([], [], linestyle="--", color="#333333", label="Perfect calibration"),
    ]
    try:  # matplotlib ≥ 3.7 reserves room for a legend placed "outside"
        fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize="small", frameon=False)
    except ValueError:
        fig.legend(handles=handles, loc="lower center", ncols=4, fontsize="small", frameon=False)
    if title:
        fig.suptitle(title, fontweight="bold")
    fit_titles(fig)
    return fig


# ----------------------------------------------------------------------------------- saving
def figure_format(path: str | os.PathLike) -> str:
    """``png``, ``svg`` or ``pdf`` from the file's extension (InputError for any other)."""
    suffix = Path(path).suffix.lower()
    if suffix not in FIGURE_FORMATS:
        raise InputError(
            f"{path}: unknown figure extension {suffix or '(none)'!r}; use .png, .svg or .pdf"
        )
    return FIGURE_FORMATS[suffix]


def check_figure_path(path: str | os.PathLike, *, force: bool = False) -> Path:
    """Check before any work that ``path`` can receive a figure: known extension, and the rules of
    :func:`~calibrate_cli.io.check_output_path` (existing folder, no existing file unless
    ``force``, never a FIFO, device or directory)."""
    figure_format(path)
    return check_output_path(path, force=force)


def escape_mathtext(text: str | None) -> str | None:
    """``text`` shown literally by matplotlib: each ``$`` escaped, so a file name such as
    ``tex$\\foo$.npy`` is not parsed as mathtext. For text from users (file names, ``--title``,
    ``--name``); Python callers who want mathtext in their labels pass them unescaped."""
    return None if text is None else str(text).replace("$", r"\$")


def save_figure(fig, path: str | os.PathLike, *, dpi: int = DEFAULT_DPI, force: bool = False) -> Path:
    """Write ``fig`` to ``path`` as PNG, SVG or PDF (by extension), atomically (a temporary in the same
    folder, then a hard link, or with ``force`` a rename: :func:`~calibrate_cli.io.atomic_write`);
    never overwrite an existing file unless ``force``. ``dpi`` applies to PNG."""
    fmt = figure_format(path)
    if isinstance(dpi, bool) or not isinstance(dpi, (int, np.integer)) or not 10 <= dpi <= 2400:
        raise InputError(f"Expected `dpi` to be an integer in [10, 2400], but got {dpi!r}")
    metadata = {"png": None, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
    return atomic_write(path, lambda f: fig.savefig(f, format=fmt, dpi=int(dpi), metadata=metadata), force=force)
