"""The uncertainty of a reliability diagram, drawn on it (docs/diagnostics.md): per-bin Clopper–Pearson
intervals of the accuracy, consistency bands under the calibrated null (Bröcker & Smith 2007) and the
CORP curve (PAV recalibration, Dimitriadis, Gneiting & Jordan 2021). The numbers come from
:mod:`calibrate_cli.diagnostics`; this module only draws them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..diagnostics.reliability_stats import (DEFAULT_BAND_LEVEL, BinIntervals, ConsistencyBands, CorpReliability,
                                             bin_intervals, consistency_bands, corp_reliability)

__all__ = ["BAND_COLOR", "CORP_COLOR", "DiagramUncertainty", "draw_uncertainty", "uncertainty_figure"]

BAND_COLOR = "#2ca02c"
CORP_COLOR = "#ff7f0e"
INTERVAL_COLOR = "#111111"


@dataclass(frozen=True)
class DiagramUncertainty:
    """What :func:`draw_uncertainty` draws: any of the per-bin intervals, the bands and the CORP curve."""

    intervals: BinIntervals | None = None
    bands: ConsistencyBands | None = None
    corp: CorpReliability | None = None


def _bin_spans(diagram) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) of every bin as the diagram draws it (from 0.5 for K = 2)."""
    edges = np.asarray(diagram.bins.edges, dtype=np.float64)
    x0 = diagram.x_range[0]
    return np.maximum(edges[:-1], x0), edges[1:]


def draw_uncertainty(diagram, what: DiagramUncertainty) -> list:
    """Draw ``what`` on the axes of a plotted equal-width ``diagram``
    (:class:`~calibrate_cli.plots.diagram.ReliabilityDiagram`); returns the legend handles. Sets
    ``interval_bars_``, ``band_patches_``, ``corp_line_`` on the diagram (None where not drawn)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ax = diagram.ax_
    lefts, rights = _bin_spans(diagram)
    handles = []
    diagram.band_patches_ = diagram.interval_bars_ = diagram.corp_line_ = None
    if what.bands is not None:
        b = what.bands
        keep = np.isfinite(b.low) & np.isfinite(b.high) & (rights > lefts)
        # a bar of 60 % of the bin's width, centred (Bröcker & Smith's consistency bars): where a
        # calibrated model's accuracy in that bin falls; the bin's own bar stays readable beside it
        half = 0.3 * (rights - lefts)
        centers = (lefts + rights) / 2
        diagram.band_patches_ = [
            ax.fill_between([c - h, c + h], [lo, lo], [hi, hi], facecolor=BAND_COLOR, alpha=0.35,
                            edgecolor=BAND_COLOR, linewidth=0.8, zorder=4.5)
            for c, h, lo, hi in zip(centers[keep], half[keep], b.low[keep], b.high[keep])
        ]
        handles.append(Patch(facecolor=BAND_COLOR, alpha=0.35, edgecolor=BAND_COLOR,
                             label=f"{100 * b.level:g}% consistency band (calibrated)"))
    if what.intervals is not None:
        iv = what.intervals
        keep = iv.count > 0
        centers = (lefts[keep] + rights[keep]) / 2
        acc = iv.accuracy[keep]
        diagram.interval_bars_ = ax.errorbar(
            centers, acc, yerr=[acc - iv.low[keep], iv.high[keep] - acc], fmt="none", ecolor=INTERVAL_COLOR,
            elinewidth=1.0, capsize=2.5, zorder=6)
        handles.append(Line2D([], [], color=INTERVAL_COLOR, marker="|", markersize=8, linewidth=1.0,
                              label=f"{100 * iv.level:g}% Clopper–Pearson interval"))
    if what.corp is not None:
        c = what.corp
        (diagram.corp_line_,) = ax.plot(c.x, c.recalibrated, color=CORP_COLOR, linewidth=1.8, zorder=7,
                                        drawstyle="default", label="CORP (PAV) curve")
        handles.append(Line2D([], [], color=CORP_COLOR, linewidth=1.8, label="CORP (PAV) curve"))
    return handles


def _with_key(fig, handles: list) -> None:
    """The figure's key legend (under the panel) with ``handles`` added."""
    if not handles or not fig.legends:
        return
    old = fig.legends[-1]
    existing = list(getattr(old, "legend_handles", None) or old.legendHandles)
    labels = [t.get_text() for t in old.get_texts()]
    for h, text in zip(existing, labels):
        h.set_label(text)
    old.remove()
    try:
        fig.legend(handles=existing + handles, loc="outside lower center", ncols=2, fontsize="small", frameon=False)
    except ValueError:
        fig.legend(handles=existing + handles, loc="lower center", ncols=2, fontsize="small", frameon=False)


def uncertainty_figure(scores, labels, *, input_kind=None, n_bins: int = 15, label: str | None = None,
                       title: str | None = None, interval_level: float | None = None, band_resamples: int | None = None,
                       band_level: float = DEFAULT_BAND_LEVEL, seed: int | None = 0, corp: bool = False,
                       scores_name: str = "scores", labels_name: str = "labels", device: str | None = None):
    """One model's equal-width reliability diagram with its uncertainty: Clopper–Pearson intervals at
    ``interval_level``, consistency bands from ``band_resamples`` resamples at ``band_level``, the CORP
    curve with ``corp``. Returns (figure, diagram, :class:`DiagramUncertainty`)."""
    from ..diagnostics import top_label
    from .diagram import ReliabilityDiagram, reliability_figure

    diagram = ReliabilityDiagram.from_predictions(scores, labels, input_kind=input_kind, n_bins=n_bins, label=label,
                                                  scores_name=scores_name, labels_name=labels_name, device=device)
    fig = reliability_figure(diagram, title=title)
    conf = correct = None
    if band_resamples or corp:
        conf, correct = top_label(scores, labels, input_kind=input_kind, scores_name=scores_name,
                                  labels_name=labels_name)
    what = DiagramUncertainty(
        intervals=bin_intervals(diagram.bins, interval_level) if interval_level is not None else None,
        bands=consistency_bands(conf, n_bins, n_resamples=band_resamples, level=band_level, seed=seed)
        if band_resamples else None,
        corp=corp_reliability(conf, correct) if corp else None,
    )
    _with_key(fig, draw_uncertainty(diagram, what))
    return fig, diagram, what
