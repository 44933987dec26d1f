"""Reliability diagrams (docs/plots.md), in scikit-learn's Display pattern.

:meth:`ReliabilityDiagram.from_predictions` computes through the metrics core (validation by
:func:`~calibrate_cli.data.predictions.as_predictions`, one pass by :func:`~calibrate_cli.engine.summary.summarize`,
the bins of :func:`~calibrate_cli.metrics.functional.equal_width_bins` / :func:`~calibrate_cli.metrics.functional.equal_mass_bins`)
and stores the per-bin statistics; :meth:`ReliabilityDiagram.plot` draws them and returns ``self``
with ``ax_`` and ``figure_`` set, so plots compose::

    from calibrate_cli.plots.diagram import ReliabilityDiagram, reliability_figure, save_figure

    diagram = ReliabilityDiagram.from_predictions(logits, labels, n_bins=15, label="ResNet-50")
    diagram.bins.accuracy, diagram.ece                # the numbers behind the picture
    save_figure(reliability_figure(diagram), "reliability.png", dpi=150)

What is drawn, per non-empty bin b with edges (e_b, e_{b+1}]:

- a bar of height acc(B_b) (the accuracy, or for a classwise panel the frequency of [y = k]) spanning
  the bin (width e_{b+1} − e_b; equal-mass bins are drawn equally wide, 1/M each, with their edges as
  tick labels, since an over-confident model's crowd into [0.99, 1]; for K = 2 the axis starts at 0.5);
- the gap between acc(B_b) and the mean confidence conf(B_b): hatched red where the model is
  over-confident (conf > acc: the red box sits on top of the bar), hatched blue where it is
  under-confident (acc > conf: a see-through blue frame over the top of the bar, from the
  confidence up to the accuracy, so the bar still shows the accuracy);
- the diagonal acc = conf (perfect calibration), and the ECE (AdaECE for equal-mass bins, with an
  interval when given) in a legend inside the axes; on a figure made here, the key (accuracy, gaps,
  diagonal) once under the panels (:func:`key_legend`);
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

from ..engine.binning import BinStats, bin_statistics, uniform_edges
from ..errors import InputError
from ..data.outputs import atomic_write, check_output_path, is_sink
from ..metrics.functional import DEFAULT_N_BINS, equal_mass_bins, metrics_from_summary
from ..metrics.registry import sums_needed
from ..data.predictions import InputKind, as_predictions
from ..data.probabilities import to_probabilities
from ..engine.summary import SummaryRequest, summarize
from ..calibrators.temperature import TemperatureScaling
from ..calibrators.temperature_fit import apply_temperature, check_temperature

__all__ = [
    "STRATEGIES",
    "FIGURE_FORMATS",
    "DEFAULT_DPI",
    "MAX_CLASSWISE_CLASSES",
    "ReliabilityDiagram",
    "classwise_diagrams",
    "reliability_figure",
    "comparison_figure",
    "comparison_grid",
    "key_legend",
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
    "reproducible_figure_output",
]

STRATEGIES = ("uniform", "quantile")
FIGURE_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
#: matplotlib's ``svg.hashsalt`` while calib writes SVG: ids derived from the content, not random
SVG_HASH_SALT = "calib"
#: ``savefig(metadata=...)`` per format: no creation date, so that the same figure gives the same bytes
FIGURE_METADATA = {"png": None, "svg": {"Date": None}, "pdf": {"CreationDate": None}}
DEFAULT_DPI = 150
MAX_CLASSWISE_CLASSES = 20

# Colours: neutral grey bars so that the gaps stand out; red/blue gaps with opaque light faces (a
# translucent blue over the bar turned muddy) and different hatch directions (readable in greyscale).
ACCURACY_COLOR = "#5c5c5c"
OVER_COLOR = "#d62728"
OVER_FACE = "#fbd3d3"
UNDER_COLOR = "#1f77b4"
UNDER_FACE = "#cfe2f3"
# the under-confident gap lies inside the accuracy bar (conf < acc): drawn there as a see-through
# box, light blue hatch and frame on the grey, so that the grey bar still reaches the accuracy
UNDER_HATCH = "#9ecae1"
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

    Build it with :meth:`from_predictions` (or directly from :class:`~calibrate_cli.engine.binning.BinStats`),
    draw it with :meth:`plot`.

    bins          per-bin count, Σconf, Σcorrect and edges
    ece           Σ_b |B_b|/N · |acc(B_b) − conf(B_b)| over ``bins`` (AdaECE for equal-mass bins)
    metric_name   how the legend names ``ece`` ("ECE", "AdaECE", "ECE_k", ...)
    interval      optional (low, high) interval of ``ece`` shown in the legend (e.g. a bootstrap CI)
    label         the model's name (panel title)
    temperature   the temperature applied to the logits, if any
    accuracy      overall accuracy (None when not known, e.g. classwise panels)
    k             the number of classes of a top-label diagram (None: unknown, or a classwise panel);
                  for K = 2 the x axis starts at 0.5, the least top-label confidence there can be

    After :meth:`plot`: ``ax_``, ``hist_ax_`` (None without histogram), ``figure_``, and the
    artists ``accuracy_bars_``, ``over_bars_``, ``under_bars_``, ``hist_bars_``, ``count_labels_``, ``diagonal_``,
    ``legend_`` (inside the axes: the ECE, and the key when drawn on the user's axes), ``key_legend_``
    (the legend that holds the key: ``legend_`` itself, or the figure's legend under the panels).
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
        k: int | None = None,
    ) -> None:
        self.bins = bins
        self.k = None if k is None else int(k)
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
        ``device``: where the summary pass runs (:func:`~calibrate_cli.engine.summary.summarize`; None: the CPU).

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
        # the pass computes what these metrics need: the top label only (no NLL, Brier, top-5 or
        # classwise work), equal-width bins made during the pass where they can be (no (N,) arrays)
        names = ["ece", "accuracy"] if strategy == "uniform" else ["adaece", "accuracy"]
        request = SummaryRequest(sums=frozenset(sums_needed(names)), columns=False)
        summary = summarize(predictions, n_bins=n_bins, request=request, device=device)
        if strategy == "uniform":
            bins = summary.width
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
            k=predictions.k,
        )

    @classmethod
    def from_report(
        cls, report, *, label: str | None = None, interval: tuple[float, float] | None = None,
        strategy: str = "uniform",
    ) -> "ReliabilityDiagram":
        """The diagram of an :class:`~calibrate_cli.evaluate.EvalReport` (its equal-width bins and
        ECE, or with ``strategy="quantile"`` its equal-mass bins and AdaECE; no recomputation): what
        ``calib eval --plot`` draws."""
        uniform = _check_strategy(strategy) == "uniform"
        return cls(
            report.bins if uniform else report.adaptive_bins,
            ece=report.metrics["ece" if uniform else "adaece"],
            metric_name="ECE" if uniform else "AdaECE",
            strategy=strategy,
            label=label,
            interval=interval,
            accuracy=report.metrics["accuracy"],
            k=report.k,
        )

    @property
    def x_range(self) -> tuple[float, float]:
        """The confidences a diagram can hold: (0.5, 1) for a top-label diagram of K = 2 classes
        (max(p, 1 − p) ≥ 0.5: half the width would otherwise stay empty), else (0, 1)."""
        return (0.5, 1.0) if self.k == 2 else (0.0, 1.0)

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
        legend: bool | str = True,
        legend_loc: str | None = None,
        fontsize: float | None = None,
        count_labels: bool | None = None,
        **kwargs,
    ) -> "ReliabilityDiagram":
        """Draw the diagram on ``ax`` (a new Agg figure with a histogram axis when None).

        ``hist_ax``: where to draw the share of samples per bin (none when ``ax`` is given without
        it). ``title`` overrides the model label (shortened with "…" in the middle to the axes'
        width). ``legend``: True: the ECE and the key (accuracy, gaps, diagonal) in one legend
        inside ``ax``; on a new figure, the ECE inside the axes and the key under the diagram (as in
        every figure calib makes, :func:`comparison_figure`); ``"metric"``: the ECE only (the caller
        draws the key, e.g. :func:`key_legend`); False: none. The legend always stays inside the
        axes (so ``savefig`` never clips it, whatever grid ``ax`` is part of): by default in the
        first of the corners upper left, lower right, upper right, lower left that covers no bar,
        else in the corner that covers the least; ``legend_loc`` imposes one. ``count_labels``: write
        each bin's sample count over its histogram bar (bars at least 1/30 wide); default: for
        equal-width bins only (equal-mass bins all hold ~N/M). ``kwargs`` go to the accuracy bars
        (``Axes.bar``), e.g. ``color``. The x axis spans :attr:`x_range` (from 0.5 for K = 2).
        Returns ``self`` with ``ax_``, ``hist_ax_``, ``figure_`` set. To draw several models on the
        same axes, use :meth:`plot_curve` (or :func:`overlay_figure`).
        """
        own_figure = ax is None
        if own_figure:
            fig = new_figure(PANEL_SIZE)
            ax, hist_ax = _diagram_axes(fig, fig.add_gridspec(1, 1)[0, 0])
        bins = self.bins
        edges = np.asarray(bins.edges, dtype=np.float64)
        nonempty = bins.nonempty
        acc = bins.accuracy[nonempty]
        conf = bins.mean_confidence[nonempty]
        equal_mass = self.strategy == "quantile"
        if equal_mass:
            # equal-mass bins drawn equally wide (each holds 1/M of the samples), in the order of
            # confidence; the ticks name the bins' confidence edges. At their true widths an
            # over-confident model's bins crowd into [0.99, 1] and cannot be read.
            x0, x1 = 0.0, 1.0
            m = len(bins.count)
            lefts = np.flatnonzero(nonempty) / m
            widths = np.full(lefts.shape, 1.0 / m)
        else:
            x0, x1 = self.x_range
            lefts = edges[:-1][nonempty]
            rights = edges[1:][nonempty]
            if x0 > 0:  # K = 2: a bin that straddles 0.5 is drawn from 0.5, where its confidences are
                lefts = np.maximum(lefts, x0)
            widths = rights - lefts
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
        # under-confident: the gap (conf, acc] is the top of the accuracy bar; see-through, so the
        # grey bar is the accuracy in every bin (the legend's promise)
        self.under_bars_ = ax.bar(
            lefts[under], (acc - conf)[under], width=widths[under], bottom=conf[under],
            facecolor="none", edgecolor=UNDER_HATCH, hatch="\\\\\\",
            label="Gap: under-confident", **gap_style,
        )
        if equal_mass:
            # perfect calibration: accuracy = the bin's mean confidence, a step across each bin
            (self.diagonal_,) = ax.plot(
                np.column_stack([lefts, lefts + widths]).ravel(), np.repeat(conf, 2), linestyle="--",
                color="#333333", linewidth=1.2, zorder=4, label="Perfect calibration",
            )
            _equal_mass_ticks(ax, edges)
        else:
            (self.diagonal_,) = ax.plot(
                [x0, x1], [x0, x1], linestyle="--", color="#333333", linewidth=1.2, zorder=4,
                label="Perfect calibration",
            )
        ax.set_xlim(x0, x1)
        ax.set_ylim(0, 1)
        ax.set_aspect("auto")
        ax.set_ylabel(self.ylabel, fontsize=text_size)
        ax.grid(True, color="#dddddd", linewidth=0.6, zorder=0)
        ax.set_axisbelow(True)
        heading = title if title is not None else self.title()
        if heading:
            ax.set_title(heading, fontsize=text_size)

        self.legend_ = None
        self.key_legend_ = None
        # the bars reach up to max(accuracy, confidence) in each bin
        self._bar_extent = (lefts, widths, np.maximum(acc, conf))
        if legend:
            keys_inside = legend is True and not own_figure
            handles = [_metric_handle(self.legend_label())]
            if keys_inside:
                handles += _key_handles(bar_kwargs["color"], self.ylabel)[:-1] + [self.diagonal_]
            self.legend_ = ax.legend(
                handles=handles, loc=legend_loc or "upper left", fontsize=text_size if text_size else "small",
                framealpha=0.92, handlelength=1.6 if keys_inside else 0, handletextpad=0.8 if keys_inside else 0,
                borderaxespad=0.6,
            )
            # the metric entry has no handle: bold, flush left
            self.legend_.get_texts()[0].set_fontweight("bold")
            if keys_inside:
                self.key_legend_ = self.legend_
            self._legend_auto = legend_loc is None
            if self._legend_auto:
                _place_legend(ax, self.legend_, *self._bar_extent)

        self.hist_ax_ = hist_ax
        self.hist_bars_ = None
        self.count_labels_ = []
        if hist_ax is not None:
            share = bins.count[nonempty] / max(self.n, 1)
            self.hist_bars_ = hist_ax.bar(
                lefts, share, width=widths, align="edge", color=HIST_COLOR, edgecolor="white", linewidth=0.6
            )
            hist_ax.set_xlim(x0, x1)
            top = float(share.max()) if share.size else 1.0
            if count_labels:
                # the sample count over each bar wide enough for it: a bin of 3 samples explains
                # a large gap that costs little ECE
                counts = bins.count[nonempty]
                wide = widths >= (x1 - x0) / 30
                for left, width, h, c in zip(lefts[wide], widths[wide], share[wide], counts[wide]):
                    self.count_labels_.append(
                        hist_ax.text(left + width / 2, h, _compact(int(c)), ha="center", va="bottom",
                                     fontsize=6.5, color="#444444", clip_on=False)
                    )
            headroom = 1.32 if count_labels else 1.15
            hist_ax.set_ylim(0, top * headroom if top > 0 else 1.0)
            hist_ax.set_ylabel("Share", fontsize=text_size)
            hist_ax.set_xlabel(self._xlabel(), fontsize=text_size)
            hist_ax.yaxis.set_major_formatter(percent_formatter())
            hist_ax.yaxis.set_major_locator(_max_n_locator(3))
            hist_ax.grid(True, axis="y", color="#dddddd", linewidth=0.6)
            hist_ax.set_axisbelow(True)
            ax.tick_params(labelbottom=False)
        else:
            ax.set_xlabel(self._xlabel(), fontsize=text_size)
        if own_figure:
            if legend:
                self.key_legend_ = key_legend(ax.figure, color=bar_kwargs["color"], ylabel=self.ylabel)
            _settle_legends(ax.figure, [self])
        if heading:
            _fit_text(ax.title, ax.bbox.width)
        self.ax_ = ax
        self.figure_ = ax.figure
        return self

    def _xlabel(self) -> str:
        if self.strategy == "quantile":
            return f"{self.xlabel} (equal-mass bins, drawn equally wide)"
        return self.xlabel

    def plot_curve(self, ax=None, *, hist_ax=None, color=None, marker: str = "o", **kwargs) -> "ReliabilityDiagram":
        """Draw the diagram as a reliability curve, for several models on the same axes.

        One point per non-empty bin at (mean confidence, accuracy), joined by a line labelled with
        the model's name and its ECE; on ``hist_ax``, the share of samples per bin as an outline.
        The diagonal and the legend are left to the caller (:func:`overlay_figure` draws them).
        ``kwargs`` go to ``Axes.plot``. Sets ``curve_``, ``hist_steps_``, ``ax_``, ``figure_``.
        """
        if ax is None:
            fig = new_figure(PANEL_SIZE)
            ax, hist_ax = _diagram_axes(fig, fig.add_gridspec(1, 1)[0, 0])
        bins = self.bins
        nonempty = bins.nonempty
        name = self.title()
        label = f"{name} — {self.legend_label()}" if name else self.legend_label()
        style = {"marker": marker, "markersize": 4.5, "linewidth": 1.8, "label": label, "zorder": 3}
        style.update(kwargs)
        (self.curve_,) = ax.plot(bins.mean_confidence[nonempty], bins.accuracy[nonempty], color=color, **style)
        ax.set_xlim(*self.x_range)
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
            hist_ax.set_xlim(*self.x_range)
            hist_ax.set_ylabel("Share")
            hist_ax.set_xlabel(self.xlabel)
            hist_ax.yaxis.set_major_formatter(percent_formatter())
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
def new_figure(size: tuple[float, float]):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def percent_formatter():
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
    [left, left + width] × [0, top] in data coordinates); else in the corner where it covers the
    least bar area. Never outside the axes: there ``savefig`` would clip it in a grid of the
    user's, and the panels of a figure would differ in size. Returns whether a corner was free.

    Measured on the axes as laid out now; the figure builders call it again once the constrained
    layout has settled (:func:`_settle_legends`)."""
    to_data = ax.transData.inverted()
    margin = 0.01  # keep the frame off the bars' tops
    best, best_cover = LEGEND_CORNERS[0], math.inf
    for loc in LEGEND_CORNERS:
        _set_legend_loc(legend, loc)
        (x0, y0), (x1, y1) = to_data.transform(legend.get_window_extent().get_points())
        overlap_x = np.clip(np.minimum(lefts + widths, x1) - np.maximum(lefts, x0), 0, None)
        overlap_y = np.clip(np.minimum(tops + margin, y1) - y0, 0, None)
        cover = float((overlap_x * overlap_y).sum())
        if cover == 0:
            return True
        if cover < best_cover:
            best, best_cover = loc, cover
    _set_legend_loc(legend, best)
    return False


def _settle_legends(fig, diagrams) -> None:
    """Lay the figure out (constrained layout), then choose each diagram's legend corner on the
    axes as they are drawn."""
    fig.draw_without_rendering()
    for d in diagrams:
        if d.legend_ is not None and getattr(d, "_legend_auto", False):
            _place_legend(d.ax_ if getattr(d, "ax_", None) is not None else d.legend_.axes, d.legend_,
                          *d._bar_extent)


def _metric_handle(label: str):
    from matplotlib.lines import Line2D

    return Line2D([], [], linestyle="none", label=label)


def _key_handles(color=ACCURACY_COLOR, ylabel: str = "Accuracy") -> list:
    """The key of a reliability diagram, drawn as the diagram draws each element."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    return [
        Patch(facecolor=color, label=ylabel),
        Patch(facecolor=OVER_FACE, edgecolor=OVER_COLOR, hatch="///", label="Gap: over-confident"),
        Patch(facecolor=color, edgecolor=UNDER_HATCH, hatch="\\\\\\", label="Gap: under-confident"),
        Line2D([], [], linestyle="--", color="#333333", linewidth=1.2, label="Perfect calibration"),
    ]


def key_legend(fig, *, color=ACCURACY_COLOR, ylabel: str = "Accuracy"):
    """One key for every panel of ``fig`` (accuracy, the two gaps, the diagonal), under the
    panels, in room the constrained layout keeps for it: the same place in every figure calib
    draws, whatever the models' bars look like. Each panel's legend holds its ECE only."""
    handles = _key_handles(color, ylabel)
    ncols = 4 if fig.get_size_inches()[0] >= 7.5 else 2
    try:  # matplotlib ≥ 3.7 reserves room for a legend placed "outside"
        return fig.legend(handles=handles, loc="outside lower center", ncols=ncols, fontsize="small", frameon=False)
    except ValueError:
        return fig.legend(handles=handles, loc="lower center", ncols=ncols, fontsize="small", frameon=False)


def edge_label(value: float) -> str:
    """A bin edge as a short tick label that tells edges near 1 apart: 0.27, 0.959, 0.9962,
    1−4e-5 (below 1 by 4·10⁻⁵), 1."""
    if value >= 1.0:
        return "1"
    gap = 1.0 - value
    if gap < 1e-3:
        mantissa, exponent = f"{gap:.0e}".split("e")
        return f"1−{mantissa}e{int(exponent)}"
    digits = 2 if gap >= 0.1 else (3 if gap >= 0.01 else 4)
    text = f"{value:.{digits}f}"
    return text if digits == 2 else text.rstrip("0")


def _equal_mass_ticks(ax, edges) -> None:
    """Ticks of equally wide equal-mass bins: five of the M + 1 edges (fewer when M < 4),
    labelled with their confidence."""
    m = len(edges) - 1
    positions = sorted({int(round(j)) for j in np.linspace(0, m, min(5, m + 1))})
    ax.set_xticks([j / m for j in positions], [edge_label(float(edges[j])) for j in positions])


def _diagram_axes(fig, cell):
    """A diagram axis and a histogram axis (a quarter of its height) under it, sharing x."""
    inner = cell.subgridspec(2, 1, height_ratios=[4, 1], hspace=0.04)
    ax = fig.add_subplot(inner[0])
    hist_ax = fig.add_subplot(inner[1], sharex=ax)
    return ax, hist_ax


#: a comparison wraps into rows of at most this many panels (four models: two rows of two)
MAX_COMPARISON_COLUMNS = 3
KEY_LEGEND_HEIGHT = 0.45  # inches under the panels for the shared key (two rows of entries)


def comparison_grid(n: int) -> tuple[int, int]:
    """(rows, columns) of ``n`` panels: one row up to three, then as square as it goes (4 → 2 × 2,
    5 or 6 → 2 × 3, 7 to 9 → 3 × 3)."""
    rows = math.ceil(n / MAX_COMPARISON_COLUMNS)
    return rows, math.ceil(n / rows)


def comparison_figure(diagrams: Sequence[ReliabilityDiagram], *, title: str | None = None, histogram: bool = True):
    """Diagrams side by side (histogram under each), e.g. several models; more than three wrap into
    rows (:func:`comparison_grid`). Each panel's legend holds its ECE; one key for all of them
    goes under the panels (:func:`key_legend`)."""
    diagrams = list(diagrams)
    if not diagrams:
        raise InputError("nothing to plot: no diagrams")
    n = len(diagrams)
    rows, cols = comparison_grid(n)
    height = PANEL_SIZE[1] if histogram else PANEL_SIZE[1] * 0.82
    fig = new_figure((PANEL_SIZE[0] * max(cols, 1), height * rows + KEY_LEGEND_HEIGHT))
    grid = fig.add_gridspec(rows, cols)
    for i, diagram in enumerate(diagrams):
        r, c = divmod(i, cols)
        if histogram:
            ax, hist_ax = _diagram_axes(fig, grid[r, c])
        else:
            ax, hist_ax = fig.add_subplot(grid[r, c]), None
        diagram.plot(ax, hist_ax=hist_ax, legend="metric")
        if c > 0:
            ax.set_ylabel("")
            if hist_ax is not None:
                hist_ax.set_ylabel("")
    if histogram and n > 1:  # one scale for the histograms, so that the panels compare
        top = max(d.hist_ax_.get_ylim()[1] for d in diagrams)
        for d in diagrams:
            d.hist_ax_.set_ylim(0, top)
    key_legend(fig, ylabel=diagrams[0].ylabel)
    if title:
        fig.suptitle(title, fontweight="bold")
    fit_titles(fig)
    _settle_legends(fig, diagrams)
    return fig


OVERLAY_COLORS = ("#e66101", "#5e3c99", "#1b9e77", "#222222", "#e7298a", "#a6761d", "#66a61e", "#7570b3")


def overlay_figure(diagrams: Sequence[ReliabilityDiagram], *, title: str | None = None):
    """Several diagrams on the same axes, as reliability curves (e.g. before / after temperature)."""
    diagrams = list(diagrams)
    if not diagrams:
        raise InputError("nothing to plot: no diagrams")
    fig = new_figure((PANEL_SIZE[0] + 0.6, PANEL_SIZE[1]))
    ax, hist_ax = _diagram_axes(fig, fig.add_gridspec(1, 1)[0, 0])
    for i, diagram in enumerate(diagrams):
        diagram.plot_curve(ax, hist_ax=hist_ax, color=OVERLAY_COLORS[i % len(OVERLAY_COLORS)])
    x0 = min(d.x_range[0] for d in diagrams)  # 0.5 when every model has K = 2
    ax.plot([x0, 1], [x0, 1], linestyle="--", color="#333333", linewidth=1.2, zorder=2, label="Perfect calibration")
    ax.set_xlim(x0, 1)
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
    fig = new_figure((CLASSWISE_PANEL_SIZE[0] * cols, CLASSWISE_PANEL_SIZE[1] * rows + (0.4 if title else 0)))
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
        Patch(facecolor=ACCURACY_COLOR, edgecolor=UNDER_HATCH, hatch="\\\\\\", label="Gap: under-confident"),
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
    :func:`~calibrate_cli.data.outputs.check_output_path` (existing folder, no existing file unless
    ``force``, never a FIFO, device or directory; a sink such as /dev/null takes a PNG)."""
    if not is_sink(path):
        figure_format(path)
    return check_output_path(path, force=force)


def escape_mathtext(text: str | None) -> str | None:
    """``text`` shown literally by matplotlib: each ``$`` escaped, so a file name such as
    ``tex$\\foo$.npy`` is not parsed as mathtext. For text from users (file names, ``--title``,
    ``--name``); Python callers who want mathtext in their labels pass them unescaped."""
    return None if text is None else str(text).replace("$", r"\$")


def save_figure(fig, path: str | os.PathLike, *, dpi: int = DEFAULT_DPI, force: bool = False) -> Path:
    """Write ``fig`` to ``path`` as PNG, SVG or PDF (by extension), atomically (a temporary in the same
    folder, then a hard link, or with ``force`` a rename: :func:`~calibrate_cli.data.outputs.atomic_write`);
    never overwrite an existing file unless ``force``. ``dpi`` applies to PNG. A sink such as
    /dev/null (:func:`~calibrate_cli.data.outputs.is_sink`) gets a PNG, written straight into it."""
    fmt = "png" if is_sink(path) else figure_format(path)
    if isinstance(dpi, bool) or not isinstance(dpi, (int, np.integer)) or not 10 <= dpi <= 2400:
        raise InputError(f"Expected `dpi` to be an integer in [10, 2400], but got {dpi!r}")
    metadata = FIGURE_METADATA[fmt]

    def write(f):
        with reproducible_figure_output():
            fig.savefig(f, format=fmt, dpi=int(dpi), metadata=metadata)

    return atomic_write(path, write, force=force)


def reproducible_figure_output():
    """A context in which ``savefig`` writes the same bytes for the same figure: matplotlib's
    ``svg.hashsalt`` set (SVG clip-path and glyph ids are otherwise random per run), for this
    context only, never globally; with :data:`FIGURE_METADATA` (no creation date in SVG and PDF),
    two runs give identical files (docs/plots.md)."""
    import matplotlib

    return matplotlib.rc_context({"svg.hashsalt": SVG_HASH_SALT})
