"""The figures of the HTML report, drawn with the plot code of :mod:`calibrate_cli.plots.diagram` and
written as inline SVG (matplotlib's SVG backend; no file, no network).

- :func:`reliability_figure`: the reliability diagrams before / after T
  (:func:`~calibrate_cli.plots.diagram.comparison_figure` of the reports' own bins);
- :func:`temperature_figure`: ECE and NLL of the validation set against T, the fitted T marked;
- :func:`per_class_figure`: ECE_k per class before / after (the terms of classwise-ECE);
- :func:`confidence_figure`: the share of samples per confidence bin before / after, with the
  accuracy and the mean confidence marked (Guo et al. 2017, Fig. 1);
- :func:`selective_figure`: the risk–coverage curves of selective prediction before / after T, with
  the curve of a perfect ranking of the same predictions (section "Beyond one number");
- :func:`svg_text`: a figure as an ``<svg>`` element, its ids made unique in the page.

matplotlib is imported inside the functions only.
"""

from __future__ import annotations

import io as _io
import math
import re

import numpy as np

from ..plots.diagram import (
    ACCURACY_COLOR,
    FIGURE_METADATA,
    OVER_COLOR,
    UNDER_COLOR,
    ReliabilityDiagram,
    new_figure,
    percent_formatter,
    comparison_figure,
    fit_titles,
    reproducible_figure_output,
)

__all__ = [
    "MAX_CLASS_BARS",
    "reliability_figure",
    "temperature_figure",
    "per_class_figure",
    "per_class_shown",
    "confidence_figure",
    "selective_figure",
    "svg_text",
]

BEFORE_COLOR = "#9a9a9a"
AFTER_COLOR = "#1f77b4"
ECE_COLOR = OVER_COLOR
NLL_COLOR = UNDER_COLOR
#: at most this many classes get a bar (the worst before calibration when K is larger)
MAX_CLASS_BARS = 40


def _format_t(t: float) -> str:
    return f"{t:.4g}"


def _interval(report, name: str):
    ci = report.intervals.get(name)
    return None if ci is None else (ci.clipped_low, ci.clipped_high)  # as the tables show it


def reliability_figure(report):
    """Before / after T side by side: the equal-width bins of both reports, ECE (with its interval
    when bootstrapped) in the legends."""
    diagrams = [
        ReliabilityDiagram.from_report(report.before, label="Before: T = 1", interval=_interval(report.before, "ece")),
        ReliabilityDiagram.from_report(
            report.after, label=f"After: T = {_format_t(report.temperature)}", interval=_interval(report.after, "ece")
        ),
    ]
    return comparison_figure(diagrams)


def _zoom_top(values: np.ndarray, at_one: float | None) -> float:
    """Top of a curve's y axis: the whole curve when it is modest, else enough to show its minimum
    and T = 1 well (very small or large T blow the ECE and NLL up and would flatten the rest)."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return 1.0
    low, high = float(finite.min()), float(finite.max())
    near = max(low * 2.5, (at_one if at_one is not None and math.isfinite(at_one) else low) * 1.6, low + 1e-3)
    return min(high, near) * 1.08


def _value_at_one(curve: np.ndarray) -> float | None:
    t, v = curve
    hit = np.flatnonzero(np.isclose(t, 1.0))
    return float(v[hit[0]]) if hit.size else None


def temperature_figure(report):
    """ECE (left axis, %) and NLL (right axis) of the validation set against T (log scale), the
    fitted T as a vertical line and T = 1 dotted; the y axes zoom on the minimum and T = 1
    (:func:`_zoom_top`), the curves leaving the frame where they blow up."""
    fig = new_figure((7.2, 3.8))
    ax = fig.add_subplot(1, 1, 1)
    t_fit = report.temperature
    lines = []
    if report.ece_curve is not None:
        curve = np.array(report.ece_curve, dtype=np.float64).T
        lines += ax.plot(*curve, color=ECE_COLOR, linewidth=1.8, label="ECE")
        ax.set_ylabel("ECE (validation set)", color=ECE_COLOR)
        ax.yaxis.set_major_locator(_percent_locator())
        ax.yaxis.set_major_formatter(_percent_formatter_fine(_zoom_top(curve[1], _value_at_one(curve))))
        ax.tick_params(axis="y", colors=ECE_COLOR)
        ax.set_ylim(0, _zoom_top(curve[1], _value_at_one(curve)))
    ax.set_xscale("log")
    ax.set_xlabel("Temperature T (log scale)")
    if report.nll_curve is not None:
        curve = np.array(report.nll_curve, dtype=np.float64).T
        ax2 = ax.twinx()
        lines += ax2.plot(*curve, color=NLL_COLOR, linewidth=1.8, linestyle="-.", label="NLL")
        ax2.set_ylabel("NLL (validation set)", color=NLL_COLOR)
        ax2.tick_params(axis="y", colors=NLL_COLOR)
        ax2.set_ylim(0, _zoom_top(curve[1], _value_at_one(curve)))
    lines.append(ax.axvline(t_fit, color="#222222", linewidth=1.4, label=f"fitted T = {_format_t(t_fit)}"))
    lines.append(ax.axvline(1.0, color="#777777", linewidth=1.0, linestyle=":", label="T = 1 (uncalibrated)"))
    from matplotlib.ticker import FixedLocator, NullFormatter

    ticks = [v for v in (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50) if ax.get_xlim()[0] <= v <= ax.get_xlim()[1]]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(_plain_formatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, color="#e5e5e5", linewidth=0.6)
    try:  # matplotlib ≥ 3.7 reserves room for a legend placed "outside"
        fig.legend(handles=lines, loc="outside lower center", ncols=len(lines), fontsize="small", frameon=False)
    except ValueError:
        fig.legend(handles=lines, loc="lower center", ncols=len(lines), fontsize="small", frameon=False)
    how = f"{report.fit.search} search" + (f" by {report.fit.objective}" if report.fit.search == "grid" else "")
    ax.set_title(f"T fitted on the validation set ({how})", fontsize=10)
    fit_titles(fig)
    return fig


def _plain_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda x, _pos: f"{x:g}")


def per_class_shown(report) -> np.ndarray:
    """The classes that get a bar: all K when K ≤ MAX_CLASS_BARS, else the MAX_CLASS_BARS with the
    highest ECE_k before calibration (ties: lower index first), in class order."""
    before = np.asarray(report.before.classwise_ece_per_class, dtype=np.float64)
    if before.size <= MAX_CLASS_BARS:
        return np.arange(before.size)
    worst = np.argsort(-before, kind="stable")[:MAX_CLASS_BARS]
    return np.sort(worst)


def per_class_figure(report, class_names=None):
    """ECE_k per class, before (grey) and after T (blue), grouped bars; the classwise-ECE (their
    mean) as horizontal lines."""
    shown = per_class_shown(report)
    before = np.asarray(report.before.classwise_ece_per_class, dtype=np.float64)[shown]
    after = np.asarray(report.after.classwise_ece_per_class, dtype=np.float64)[shown]
    width = min(12.0, max(5.0, 0.32 * len(shown) + 1.6))
    fig = new_figure((width, 3.4))
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(shown))
    ax.bar(x - 0.2, before, width=0.4, color=BEFORE_COLOR, label="before (T = 1)", zorder=2)
    ax.bar(x + 0.2, after, width=0.4, color=AFTER_COLOR, label=f"after (T = {_format_t(report.temperature)})", zorder=2)
    ax.axhline(report.before.metrics["classwise_ece"], color=BEFORE_COLOR, linestyle="--", linewidth=1.0,
               label="classwise-ECE before")
    ax.axhline(report.after.metrics["classwise_ece"], color=AFTER_COLOR, linestyle="--", linewidth=1.0,
               label="classwise-ECE after")
    labels = [str(class_names[c]) if class_names is not None else str(int(c)) for c in shown]
    ax.set_xticks(x, labels, rotation=90 if len(shown) > 12 or max(map(len, labels)) > 4 else 0, fontsize=8)
    ax.set_xlim(-0.7, len(shown) - 0.3)
    ax.set_xlabel("class" + ("" if len(shown) == report.k else f" (the {len(shown)} of {report.k} with the highest ECE_k before)"))
    ax.set_ylabel("ECE_k")
    ax.yaxis.set_major_locator(_percent_locator())
    ax.yaxis.set_major_formatter(_percent_formatter_fine(max(before.max(initial=0), after.max(initial=0))))
    ax.grid(True, axis="y", color="#e5e5e5", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)
    ax.legend(fontsize="small", ncols=2, framealpha=0.92, loc="upper right")
    top = max(before.max(initial=0), after.max(initial=0))
    ax.set_ylim(0, top * 1.45 if top > 0 else 1e-3)
    return fig


def _percent_locator():
    """Ticks at 1, 2 or 5 × a power of ten (of the fraction), which the formatter's decimals show exactly."""
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(nbins=6, steps=[1, 2, 5, 10])


def _percent_formatter_fine(top: float):
    """Percent ticks with enough decimals for small values (classwise terms are often < 1 %)."""
    from matplotlib.ticker import PercentFormatter

    decimals = 0 if top >= 0.05 else (1 if top >= 0.005 else 2)
    return PercentFormatter(xmax=1.0, decimals=decimals)


def confidence_figure(report):
    """The share of samples per equal-width confidence bin, before and after T, with the accuracy
    (solid) and the mean confidence (dashed) as vertical lines: the gap between them is the
    over- (or under-) confidence."""
    fig = new_figure((7.2, 3.4))
    axes = fig.subplots(1, 2, sharey=True)
    edges = np.asarray(report.before.bins.edges, dtype=np.float64)
    for ax, rep, name, color in (
        (axes[0], report.before, "Before: T = 1", BEFORE_COLOR),
        (axes[1], report.after, f"After: T = {_format_t(report.temperature)}", AFTER_COLOR),
    ):
        share = np.asarray(rep.bins.count, dtype=np.float64) / max(rep.n, 1)
        ax.bar(edges[:-1], share, width=np.diff(edges), align="edge", color=color, edgecolor="white",
               linewidth=0.6, zorder=2)
        acc, conf = rep.metrics["accuracy"], rep.metrics["mean_confidence"]
        ax.axvline(acc, color=ACCURACY_COLOR, linewidth=1.6, label=f"accuracy {100 * acc:.2f}%", zorder=3)
        ax.axvline(conf, color=OVER_COLOR if conf > acc else UNDER_COLOR, linewidth=1.6, linestyle="--",
                   label=f"mean confidence {100 * conf:.2f}%", zorder=3)
        ax.set_xlim(0, 1)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("Confidence (max probability)")
        ax.xaxis.set_major_formatter(percent_formatter())
        ax.yaxis.set_major_formatter(percent_formatter())
        ax.grid(True, axis="y", color="#e5e5e5", linewidth=0.6, zorder=0)
        ax.set_axisbelow(True)
        ax.legend(loc="upper left", fontsize="small", framealpha=0.92)
    axes[0].set_ylabel("Share of samples")
    top = max(float(np.asarray(r.bins.count).max()) / max(r.n, 1) for r in (report.before, report.after))
    axes[0].set_ylim(0, min(1.0, top * 1.35) if top > 0 else 1.0)
    fit_titles(fig)
    return fig


def _perfect_ranking(n: int, errors: int) -> tuple[np.ndarray, np.ndarray]:
    """(coverage, selective risk) of a perfect ranking: every correct prediction accepted first."""
    i = np.arange(1, n + 1, dtype=np.float64)
    return i / n, np.maximum(0.0, i - (n - errors)) / i


def selective_figure(report):
    """Selective risk against coverage (samples accepted from the most confident down, one point per
    distinct confidence, straight lines between them as AURC integrates them), before (grey) and
    after T (blue), and a perfect ranking of the same predictions (dotted): E-AURC is the area
    between a curve and it. Needs ``report.beyond``."""
    fig = new_figure((6.4, 3.4))
    ax = fig.add_subplot(1, 1, 1)
    top = 1e-3
    for sel, name, color in (
        (report.beyond.before.selective, "before (T = 1)", BEFORE_COLOR),
        (report.beyond.after.selective, f"after (T = {_format_t(report.temperature)})", AFTER_COLOR),
    ):
        c = sel.curve
        ax.plot(np.r_[0.0, c.coverage], np.r_[c.risk[0], c.risk], color=color, linewidth=1.8,
                label=f"{name}: AURC {sel.aurc:.4f}")
        top = max(top, float(c.risk.max()))
    curve = report.beyond.after.selective.curve
    ox, oy = _perfect_ranking(curve.n, int(curve.errors[-1]))
    ax.plot(np.r_[0.0, ox], np.r_[oy[0], oy], color="#222222", linewidth=1.1, linestyle=":",
            label="perfect ranking of the same predictions")
    from .core import BEYOND_COVERAGE

    ax.axvline(BEYOND_COVERAGE, color="#777777", linewidth=0.9, linestyle="--", zorder=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, min(1.0, top * 1.15))
    ax.set_xlabel("Coverage (share of samples accepted, most confident first)")
    ax.set_ylabel("Selective risk (error)")
    ax.xaxis.set_major_formatter(percent_formatter())
    ax.yaxis.set_major_locator(_percent_locator())
    ax.yaxis.set_major_formatter(_percent_formatter_fine(top))
    ax.grid(True, color="#e5e5e5", linewidth=0.6)
    ax.legend(loc="upper left", fontsize="small", framealpha=0.92)
    return fig


_ID = re.compile(r'\bid="([^"]+)"')


def svg_text(fig, prefix: str, *, title: str | None = None) -> str:
    """``fig`` as one ``<svg>`` element to put in HTML: no XML prolog or DOCTYPE, every ``id`` (and
    every reference to it) prefixed with ``prefix`` so that several figures share a page without
    clashing (matplotlib names clip paths and glyphs by content), no date (reproducible bytes),
    an accessible ``<title>`` when given. ``title`` is escaped here."""
    import html

    buffer = _io.StringIO()
    with reproducible_figure_output():  # ids from the content, not random: the same page, the same bytes
        fig.savefig(buffer, format="svg", metadata=FIGURE_METADATA["svg"])
    text = buffer.getvalue()
    start = text.index("<svg")
    text = text[start:]
    ids = set(_ID.findall(text))
    if ids:
        names = "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
        text = re.sub(rf'\bid="({names})"', lambda m: f'id="{prefix}-{m.group(1)}"', text)
        text = re.sub(rf'#({names})(?=[")])', lambda m: f"#{prefix}-{m.group(1)}", text)
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    head_end = text.index(">") + 1
    head = text[:head_end]
    head = head.replace("<svg ", f'<svg class="figure" role="img" aria-label="{html.escape(title or "", quote=True)}" ', 1)
    body = text[head_end:]
    if title:
        body = f"\n <title>{html.escape(title)}</title>" + body
    return head + body.rstrip() + "\n"
