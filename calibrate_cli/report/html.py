"""The HTML of a calibration report: one self-contained file (inline CSS and SVG; no script, no
font, image or style sheet fetched from anywhere), readable offline in any browser and printable.

:func:`render_html` turns a :class:`~calibrate_cli.report.core.CalibrationReport` into the page.
Every string that comes from a user (file names, the title, warnings) is escaped with
:func:`html.escape`. Each metric cell carries its exact value for scripts:
``<td data-metric="ece" data-set="before" data-value="0.0380…">3.80 %</td>`` (``repr`` of the
float64, ``None`` where undefined), as do the per-class cells (``data-class``), the cells of the
section "Beyond one number" (``data-beyond``: e.g. ``brier_mcb``, ``calibration_p``, ``aurc``) and the
temperature (``data-temperature``).
"""

from __future__ import annotations

import html
import math
from string import Template

from ..bootstrap.intervals import CLIPPED_MARK, EXCLUDES_MARK, MARK_NOTES, method_label, methods_note
from ..evaluate import conventions
from ..metrics.registry import METRICS
from ..diagnostics.decomposition import SCORES
from .core import BEYOND_COVERAGE, CalibrationReport
from .figures import (
    confidence_figure,
    selective_figure,
    per_class_figure,
    per_class_shown,
    reliability_figure,
    svg_text,
    temperature_figure,
)

__all__ = ["render_html", "format_metric", "FIGURE_IDS", "BEYOND_FIGURE_ID"]

_SPECS = {spec.name: spec for spec in METRICS}
#: the figures of a report, in page order (their ``id`` in the page)
FIGURE_IDS = ("reliability", "temperature", "per-class", "confidence")
#: the figure of the section "Beyond one number" (when the report has it)
BEYOND_FIGURE_ID = "risk-coverage"


def esc(value) -> str:
    """Any value as HTML text, escaped (quotes too: safe in attributes)."""
    return html.escape(str(value), quote=True)


def format_metric(name: str, value: float | None) -> str:
    """A metric as the tables of ``calib eval`` show it: fractions as ``3.80 %``, others ``0.2998``;
    ``—`` where undefined, ``inf`` for an infinite NLL."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if math.isinf(value):
        return "inf"
    spec = _SPECS.get(name)
    if spec is not None and spec.percent:
        return f"{100 * value:.2f} %"
    return f"{value:.4f}"


def _exact(value) -> str:
    return "None" if value is None else repr(float(value))


def _interval_cell(name: str, ci) -> str:
    """The interval as shown: clipped to the metric's range, † when it excludes its estimate, ‡ when
    clipped; ``data-low``/``data-high`` keep the raw ends (as the JSON), ``data-clipped`` says which."""
    if ci is None:
        return '<td class="ci"></td>'
    flag = "" if ci.contains_point else f' <span class="flag" title="{esc(MARK_NOTES[EXCLUDES_MARK])}">{EXCLUDES_MARK}</span>'
    if ci.clipped:
        flag += f' <span class="flag clipped" title="{esc(_clipped_title(name, ci))}">{CLIPPED_MARK}</span>'
    return (
        f'<td class="ci" data-metric="{esc(name)}" data-low="{_exact(ci.low)}" data-high="{_exact(ci.high)}" '
        f'data-clipped="{str(ci.clipped).lower()}">'
        f"[{esc(format_metric(name, ci.clipped_low))}, {esc(format_metric(name, ci.clipped_high))}]{flag}</td>"
    )


def _clipped_title(name: str, ci) -> str:
    """``the interval reached [-0.1758, 0.5018]: shown clipped to the metric's range [0, inf)``."""
    spec = _SPECS.get(name)
    where = f" {spec.range_text()}" if spec is not None else ""
    raw = f"[{format_metric(name, ci.low)}, {format_metric(name, ci.high)}]"
    if spec is not None and not spec.percent:  # 4 decimals hide what sets a Brier of 1e-5 apart
        raw = f"[{ci.low:.4g}, {ci.high:.4g}]"
    return f"the interval reached {raw}: shown clipped to the metric's range{where}"


def _better(name: str, before, after) -> str:
    """A class for the after-cell: better / worse than before, for metrics with a direction."""
    spec = _SPECS.get(name)
    if spec is None or spec.lower_is_better is None or before is None or after is None:
        return ""
    if any(math.isnan(v) for v in (before, after)) or before == after:
        return ""
    improved = (after < before) if spec.lower_is_better else (after > before)
    return " better" if improved else " worse"


def _num(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4f}"


def _beyond_cell(key: str, when: str, value, text: str, cls: str = "", title: str = "") -> str:
    tip = f' title="{esc(title)}"' if title else ""
    return (f'<td class="num{cls}" data-beyond="{esc(key)}" data-set="{when}" data-value="{_exact(value)}"{tip}>'
            f"{esc(text)}</td>")


def _direction(before, after, lower_is_better: bool) -> str:
    if before is None or after is None or before == after or math.isnan(before) or math.isnan(after):
        return ""
    return " better" if (after < before) == lower_is_better else " worse"


#: the CORP terms: (field of ScoreDecomposition, key suffix, label, lower is better, what it means)
_CORP_ROWS = (
    ("score", "score", "score S̄", True,
     "The mean score of the confidences as forecasts of being right (lower is better); S̄ = MCB − DSC + UNC."),
    ("miscalibration", "mcb", "MCB: miscalibration", True,
     "The part of the score that recalibrating the confidences (isotonic, PAV) would remove; 0 when calibrated."),
    ("discrimination", "dsc", "DSC: discrimination", False,
     "How much the recalibrated confidences beat always forecasting the accuracy: the model's skill."),
    ("uncertainty", "unc", "UNC: uncertainty", None,
     "The score of always forecasting the accuracy: how hard the problem is; no recalibration changes it."),
)


def _beyond_section(report: CalibrationReport, svg: str) -> str:
    """The section "Beyond one number": the CORP decompositions (Brier, log) of the top-label problem,
    the calibration test's p-value and selective prediction, before and after T, with the figure."""
    b, a = report.beyond.before, report.beyond.after
    t_text = f"{report.temperature:.4g}"
    head = "".join(f"<th>{esc(name.capitalize())} score {when}</th>" for name in SCORES for when in ("before", "after"))
    rows = []
    for field_name, suffix, label, lower, meaning in _CORP_ROWS:
        cells = []
        for score in SCORES:
            vb = getattr(b.decompositions[score], field_name)
            va = getattr(a.decompositions[score], field_name)
            cls = "" if lower is None else _direction(vb, va, lower)
            cells.append(_beyond_cell(f"{score}_{suffix}", "before", vb, _num(vb)))
            cells.append(_beyond_cell(f"{score}_{suffix}", "after", va, _num(va), cls))
        rows.append(f'<tr><th scope="row">{esc(label)}</th>{"".join(cells)}<td class="def">{esc(meaning)}</td></tr>')
    corp = (f'<table class="beyond" id="beyond-corp"><thead><tr><th>term</th>{head}<th>what it means</th></tr></thead>'
            "<tbody>\n" + "\n".join(rows) + "\n</tbody></table>")

    tb, ta = b.test, a.test
    sb, sa = b.selective, a.selective
    pb, pa = sb.at_coverage[BEYOND_COVERAGE], sa.at_coverage[BEYOND_COVERAGE]
    percent = f"{100 * BEYOND_COVERAGE:g} %"

    def point_title(point) -> str:
        return (f"{point.accepted} samples accepted (coverage {100 * point.coverage:.2f} %), "
                f"confidence ≥ {point.threshold:.4g}")

    other = [
        ("calibration_p", "calibration test: p-value", tb.p_value, ta.p_value, f"{tb.p_value:.3g}", f"{ta.p_value:.3g}",
         _direction(tb.p_value, ta.p_value, False), ("", ""),
         f"How often a calibrated model (outcomes drawn as Bernoulli(confidence), {tb.n_resamples} resamples, seed "
         f"{tb.seed}) shows an ECE at least this large: small (below 0.05) is evidence of miscalibration; the "
         f"smallest possible value is {1 / (tb.n_resamples + 1):.3g}."),
        ("aurc", "AURC", sb.aurc, sa.aurc, _num(sb.aurc), _num(sa.aurc), _direction(sb.aurc, sa.aurc, True), ("", ""),
         "The mean error of the accepted samples over every coverage, accepting the most confident first (lower is "
         "better)."),
        ("e_aurc", "E-AURC", sb.e_aurc, sa.e_aurc, _num(sb.e_aurc), _num(sa.e_aurc),
         _direction(sb.e_aurc, sa.e_aurc, True), ("", ""),
         "AURC minus that of a perfect ranking of the same predictions: what a better confidence order would gain "
         "(0 is perfect)."),
        ("risk_at_coverage", f"risk at {percent} coverage", pb.risk, pa.risk, f"{100 * pb.risk:.2f} %",
         f"{100 * pa.risk:.2f} %", _direction(pb.risk, pa.risk, True), (point_title(pb), point_title(pa)),
         f"The error rate of the {percent} most confident samples, when the model abstains on the rest."),
    ]
    rows = []
    for key, label, vb, va, text_b, text_a, cls, (title_b, title_a), meaning in other:
        rows.append(
            f'<tr><th scope="row">{esc(label)}</th>{_beyond_cell(key, "before", vb, text_b, "", title_b)}'
            f'{_beyond_cell(key, "after", va, text_a, cls, title_a)}<td class="def">{esc(meaning)}</td></tr>'
        )
    tests = ('<table class="beyond" id="beyond-more"><thead><tr><th>quantity</th><th>before</th><th>after</th>'
             "<th>what it means</th></tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>")
    lead = (f"The {report.evaluated_on} set's top-label problem (forecast: the confidence, the max probability; "
            "outcome: "
            f"whether the prediction is right) before (T = 1) and after T = {t_text}. The CORP decomposition "
            "(Dimitriadis, Gneiting & Jordan 2021) splits the Brier and log scores of the confidences exactly into "
            "miscalibration, discrimination and uncertainty (docs/diagnostics.md); selective prediction asks how well "
            "the confidence tells when to abstain (docs/selective.md). Green: better after; red: worse.")
    caption = ("Selective risk (the error of the accepted samples) against coverage, the most confident accepted "
               "first, "
               f"before (grey) and after T (blue); dotted: a perfect ranking of the same predictions (E-AURC is the "
               f"area between a curve and it); dashed: {percent} coverage.")
    return (f'<section id="beyond-section">\n<h2>Beyond one number</h2>\n<p class="lead">{esc(lead)}</p>\n'
            f"{corp}\n{tests}\n<figure id=\"{BEYOND_FIGURE_ID}\">{svg}\n"
            f"<figcaption>{esc(caption)}</figcaption></figure>\n"
            "</section>")


def _metrics_table(report: CalibrationReport) -> str:
    before, after = report.before, report.after
    intervals = bool(before.intervals)
    names = [  # the metrics computed (opt-in ones only when asked for), top-5 only when defined
        spec.name for spec in METRICS
        if spec.name in before.metrics and (spec.shown_when_undefined or before.metrics[spec.name] is not None)
    ]
    head = ["<th>metric</th>", "<th>Pre T</th>"]
    if intervals:
        head.append(f"<th>{esc(_level(before))} interval</th>")
    head.append(f"<th>Post T ({esc(f'{report.temperature:.4g}')})</th>")
    if intervals:
        head.append(f"<th>{esc(_level(after))} interval</th>")
    head.append('<th class="def">definition</th>')
    rows = []
    for name in names:
        spec = _SPECS[name]
        b, a = before.metrics.get(name), after.metrics.get(name)
        cells = [f'<th scope="row">{esc(spec.display_name)}</th>']
        cells.append(f'<td class="num" data-metric="{esc(name)}" data-set="before" data-value="{_exact(b)}">'
                     f"{esc(format_metric(name, b))}</td>")
        if intervals:
            cells.append(_interval_cell(name, before.intervals.get(name)))
        cells.append(f'<td class="num{_better(name, b, a)}" data-metric="{esc(name)}" data-set="after" '
                     f'data-value="{_exact(a)}">{esc(format_metric(name, a))}</td>')
        if intervals:
            cells.append(_interval_cell(name, after.intervals.get(name)))
        cells.append(f'<td class="def">{esc(spec.definition)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (
        '<table class="metrics" id="metrics-table"><thead><tr>' + "".join(head) + "</tr></thead><tbody>\n"
        + "\n".join(rows) + "\n</tbody></table>"
    )


def _level(report) -> str:
    settings = report.bootstrap or {}
    level = settings.get("level")
    return f"{100 * level:g}%" if level is not None else ""


def _per_class_table(report: CalibrationReport, class_names) -> str:
    before = report.before.classwise_ece_per_class
    after = report.after.classwise_ece_per_class
    rows = []
    for k, (b, a) in enumerate(zip(before, after)):
        name = class_names[k] if class_names is not None else k
        rows.append(
            f'<tr><th scope="row">{esc(name)}</th>'
            f'<td class="num" data-class="{k}" data-set="before" data-value="{_exact(b)}">{esc(format_metric("ece", b))}</td>'
            f'<td class="num{_better("ece", b, a)}" data-class="{k}" data-set="after" data-value="{_exact(a)}">'
            f"{esc(format_metric('ece', a))}</td></tr>"
        )
    return (
        '<table class="per-class"><thead><tr><th>class</th><th>ECE_k before</th><th>ECE_k after</th></tr></thead>'
        "<tbody>\n" + "\n".join(rows) + "\n</tbody></table>"
    )


def _fmt_size(size: int | None) -> str:
    if size is None:
        return "—"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit} ({size:,} bytes)"
    return f"{size} bytes"


def _provenance(report: CalibrationReport) -> str:
    rows = []
    for item in report.inputs:
        digest = esc(item.sha256) if item.sha256 else "—"
        rows.append(
            f"<tr><th scope=\"row\">{esc(item.role)}</th><td class=\"path\">{esc(item.path)}</td>"
            f"<td>{esc(_fmt_size(item.size))}</td><td class=\"hash\">{digest}</td></tr>"
        )
    files = (
        '<table class="inputs"><thead><tr><th>input</th><th>path</th><th>size</th><th>SHA-256</th></tr></thead>'
        "<tbody>\n" + "\n".join(rows) + "\n</tbody></table>"
        if rows else "<p>The arrays were given from Python (no files).</p>"
    )
    fit = report.fit
    settings = [
        ("N (validation)", f"{report.n_validation:,}"),
        ("N (test)", "—" if report.n_test is None else f"{report.n_test:,}"),
        ("K (classes)", str(report.k)),
        ("scores", report.input_kind),
        ("bins M", str(report.n_bins)),
        ("temperature", f"{fit.temperature!r} ({fit.search} search"
                        + (f" by {fit.objective}" if fit.search == "grid" else "") + ")"),
    ]
    if fit.grid is not None:
        settings.append(("grid", ":".join(f"{g:g}" for g in fit.grid)))
    boot = report.before.bootstrap
    if boot:
        settings.append(("bootstrap", f"{boot['n_resamples']} resamples, {100 * boot['level']:g}% {method_label(boot['method'])} "
                                      f"intervals, seed {boot['seed']}, device {boot['device']}"))
    else:
        settings.append(("bootstrap", "off"))
    for key, value in conventions(report.compat).items():
        if value is not None:
            settings.append((key.replace("_", " "), value))
    settings += [("calib version", report.calib_version), ("created", report.created)]
    table = "".join(f'<tr><th scope="row">{esc(k)}</th><td>{esc(v)}</td></tr>' for k, v in settings)
    return files + '\n<table class="settings"><tbody>' + table + "</tbody></table>"


def _summary(report: CalibrationReport) -> str:
    b, a = report.before.metrics, report.after.metrics
    cards = [
        ("Temperature", f'<span data-temperature="{_exact(report.temperature)}">{esc(f"{report.temperature:.4g}")}</span>',
         f"fitted on {report.n_validation:,} validation samples"),
        ("ECE", f"{esc(format_metric('ece', b['ece']))} → {esc(format_metric('ece', a['ece']))}",
         f"on the {report.evaluated_on} set"),
        ("NLL", f"{esc(format_metric('nll', b['nll']))} → {esc(format_metric('nll', a['nll']))}",
         f"on the {report.evaluated_on} set"),
        ("Accuracy", esc(format_metric("accuracy", b["accuracy"])),
         f"N = {report.before.n:,}, K = {report.k} (T never changes it)"),
    ]
    return "".join(
        f'<div class="card"><div class="label">{esc(label)}</div><div class="value">{value}</div>'
        f'<div class="note">{esc(note)}</div></div>'
        for label, value, note in cards
    )


_PAGE = Template("""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="calib $version">
<title>$title</title>
<style>
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: #1d1d1f; margin: 0; background: #fff; line-height: 1.45; }
main { max-width: 1100px; margin: 0 auto; padding: 28px 28px 48px; }
header { border-bottom: 2px solid #1d1d1f; margin-bottom: 18px; padding-bottom: 10px; }
header h1 { margin: 0 0 4px; font-size: 1.7rem; }
header p { margin: 0; color: #5f6368; }
h2 { font-size: 1.2rem; margin: 30px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #dadce0; }
p.lead { color: #5f6368; margin: 4px 0 12px; max-width: 80ch; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(200px, 1fr)); gap: 12px; margin: 16px 0; }
.card { background: #f6f7f9; border: 1px solid #dadce0; border-radius: 8px; padding: 10px 14px; }
.card .label { font-size: .8rem; text-transform: uppercase; letter-spacing: .04em; color: #5f6368; }
.card .value { font-size: 1.45rem; font-weight: 650; font-variant-numeric: tabular-nums; }
.card .note { font-size: .8rem; color: #5f6368; }
table { border-collapse: collapse; margin: 8px 0 12px; font-size: .9rem; }
th, td { padding: 4px 10px; border-bottom: 1px solid #dadce0; text-align: left; vertical-align: top; }
thead th { background: #f6f7f9; font-weight: 600; white-space: nowrap; }
td.num, td.ci { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.ci { color: #5f6368; }
td.better { color: #137333; font-weight: 600; }
td.worse { color: #b3261e; font-weight: 600; }
td.def { color: #5f6368; font-size: .8rem; }
td.path, td.hash { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .78rem;
                   word-break: break-all; }
.flag { color: #b3261e; }
figure { margin: 10px 0 18px; }
figure svg.figure { max-width: 100%; height: auto; display: block; }
figcaption { color: #5f6368; font-size: .85rem; max-width: 90ch; }
.warnings { background: #fff8e1; border: 1px solid #f0c36d; border-radius: 6px; padding: 8px 14px; }
.warnings li, .notes li { margin: 2px 0; }
.notes { font-size: .85rem; color: #5f6368; }
details summary { cursor: pointer; color: #5f6368; margin: 6px 0; }
footer { margin-top: 36px; color: #5f6368; font-size: .8rem; border-top: 1px solid #dadce0; padding-top: 8px; }
@media print { main { max-width: none; padding: 0; } h2 { break-after: avoid; } figure { break-inside: avoid; } }
</style>
</head>
<body>
<main>
<header>
<h1>$title</h1>
<p>$subtitle</p>
</header>
<div class="cards">$summary</div>
$warnings
<section id="metrics">
<h2>Metrics before and after temperature scaling</h2>
<p class="lead">$metrics_lead</p>
$metrics_table
$interval_notes
</section>
<section id="reliability-section">
<h2>Reliability diagrams</h2>
<figure id="reliability">$reliability_svg
<figcaption>Grey bars: accuracy per confidence bin ($n_bins equal-width bins) of the $set set. Red hatched boxes:
where the model is over-confident (mean confidence above accuracy); blue: under-confident. Dashed line: perfect
calibration. Under each diagram, the share of samples per bin.</figcaption></figure>
</section>
<section id="temperature-section">
<h2>ECE and NLL against the temperature</h2>
<figure id="temperature">$temperature_svg
<figcaption>p(T) = softmax(logits / T) on the validation set ($n_val samples): T &gt; 1 softens the probabilities,
T &lt; 1 sharpens them. The vertical line is the fitted T = $t_text; the dotted one, T = 1 (the model as it is). The y axes zoom on
the minimum and T = 1; the curves leave the frame where they blow up.</figcaption></figure>
</section>
<section id="per-class-section">
<h2>Per-class ECE</h2>
<p class="lead">ECE_k = Σ_b |B_kb|/N · |mean p_ik − mean [y_i = k]| over $n_bins equal-width bins of p_ik, all N samples
of the $set set; classwise-ECE is their mean over the K = $k classes ($cw_before before, $cw_after after).</p>
<figure id="per-class">$per_class_svg
<figcaption>$per_class_caption</figcaption></figure>
<details><summary>All $k classes as a table</summary>
$per_class_table
</details>
</section>
<section id="confidence-section">
<h2>Confidence histogram</h2>
<figure id="confidence">$confidence_svg
<figcaption>Share of the $set set's samples per confidence bin, before and after T. When the mean confidence
(dashed) lies right of the accuracy (solid), the model is over-confident on average.</figcaption></figure>
</section>
$beyond_section
<section id="provenance">
<h2>Provenance</h2>
$provenance
</section>
<footer>Made by calib $version on $created. This page is self-contained: it loads nothing from the network and
needs no JavaScript. Each number's exact value is in its cell's data-value attribute.</footer>
</main>
</body>
</html>
""")


def render_html(report: CalibrationReport, *, warnings=None, interval_notes=(), class_names=None) -> str:
    """The report as one self-contained HTML page (a ``str``).

    ``warnings``: the lines of the warnings box at the top (default ``report.warnings``; the CLI
    passes them worded with its flags). ``interval_notes``: what the bootstrap says about its
    intervals (e.g. one that reaches below 0), folded under the metrics table.
    ``class_names``: K names for the per-class figure and table (default the indices 0..K−1).
    """
    if class_names is not None and len(class_names) != report.k:
        from ..errors import InputError

        raise InputError(f"got {len(class_names)} class names for K = {report.k} classes")
    warnings = list(report.warnings if warnings is None else warnings)
    warnings_html = ""
    if warnings:
        warnings_html = (
            '<div class="warnings" id="warnings"><strong>Warnings</strong><ul>'
            + "".join(f"<li>{esc(w)}</li>" for w in warnings)
            + "</ul></div>"
        )
    notes_html = ""
    if interval_notes:
        notes_html = (
            f'<details class="notes" id="interval-notes"><summary>{len(interval_notes)} note(s) on the intervals'
            "</summary><ul>" + "".join(f"<li>{esc(n)}</li>" for n in interval_notes) + "</ul></details>"
        )
    t_text = f"{report.temperature:.4g}"
    on_test = report.evaluated_on == "test"
    if on_test:
        subtitle = (f"T fitted on the validation set ({report.n_validation:,} samples), applied to the test set "
                    f"({report.n_test:,} samples); K = {report.k} classes.")
    else:
        subtitle = (f"No test set: T fitted and judged on the same {report.n_validation:,} validation samples "
                    f"(the 'after' numbers are optimistic); K = {report.k} classes.")
    if report.weights is not None:
        name, total = report.weights
        subtitle += (f" The validation samples are weighted by {name} (Σw = {total:,.6g}): "
                     + ("the fit and the curves; the test set's metrics are not." if on_test
                        else "the fit, the curves and the metrics."))
    boot = report.before.bootstrap
    metrics_lead = f"The {report.evaluated_on} set at T = 1 (Pre T) and at the fitted T = {t_text} (Post T)."
    if boot:
        metrics_lead += (f" Intervals: {100 * boot['level']:g}% bootstrap ({method_label(boot['method'])}, {boot['n_resamples']} "
                         "resamples, the same resamples before and after); † marks an interval that excludes its "
                         "estimate, the bootstrap's sign of a biased metric (docs/bootstrap.md); ‡ one that reached "
                         "outside the metric's range (an accuracy above 100 %, an NLL below 0), shown clipped to "
                         "the range (its raw ends are in the JSON and the cell's data-low/data-high).")
        methods = methods_note(report.before.intervals, report.after.intervals)
        if methods:
            metrics_lead += f" Methods: {methods.removeprefix('intervals: ')}."
    metrics_lead += " Green: better after; red: worse."
    shown = per_class_shown(report)
    if len(shown) < report.k:
        caption = (f"The {len(shown)} classes with the highest ECE_k before calibration (of K = {report.k}); "
                   "dashed: classwise-ECE before and after. Every class is in the table below.")
    else:
        caption = "ECE_k of each class before (grey) and after (blue) T; dashed: classwise-ECE before and after."
    figures = {
        "reliability": svg_text(reliability_figure(report), "f1", title="Reliability diagrams before and after T"),
        "temperature": svg_text(temperature_figure(report), "f2", title="ECE and NLL against T"),
        "per-class": svg_text(per_class_figure(report, class_names), "f3", title="Per-class ECE"),
        "confidence": svg_text(confidence_figure(report), "f4", title="Confidence histogram"),
    }
    beyond = ""
    if report.beyond is not None:
        beyond = _beyond_section(report, svg_text(selective_figure(report), "f5", title="Risk–coverage curves before and after T"))
    return _PAGE.substitute(
        version=esc(report.calib_version),
        title=esc(report.title),
        subtitle=esc(subtitle),
        summary=_summary(report),
        warnings=warnings_html,
        metrics_lead=esc(metrics_lead),
        metrics_table=_metrics_table(report),
        interval_notes=notes_html,
        reliability_svg=figures["reliability"],
        temperature_svg=figures["temperature"],
        per_class_svg=figures["per-class"],
        confidence_svg=figures["confidence"],
        per_class_caption=esc(caption),
        per_class_table=_per_class_table(report, class_names),
        n_bins=report.n_bins,
        set=esc(report.evaluated_on),
        n_val=f"{report.n_validation:,}",
        t_text=esc(t_text),
        k=report.k,
        cw_before=esc(format_metric("classwise_ece", report.before.metrics["classwise_ece"])),
        cw_after=esc(format_metric("classwise_ece", report.after.metrics["classwise_ece"])),
        provenance=_provenance(report),
        created=esc(report.created),
        beyond_section=beyond,
    )
