"""``calib temperature``: fit a temperature on a validation set, report before/after (SPEC §3)."""

from __future__ import annotations

import contextlib
import csv
import io
import sys
from pathlib import Path

import click

from .._version import __version__
from ..errors import InputError, OutputError
from ..evaluate import conventions, evaluate
from ..io import write_array
from ..metrics import METRIC_NAMES
from ..predictions import as_predictions
from ..temperature import DEFAULT_GRID, OBJECTIVES, SEARCHES, fit_temperature, parse_grid
from . import render
from .options import FORMATS, binning_options, csv_options, load_inputs

SUFFIX_FORMATS = {".json": "json", ".csv": "csv", ".md": "markdown", ".markdown": "markdown"}
DEFAULT_GRID_TEXT = ":".join(f"{v:g}" for v in DEFAULT_GRID)


def _check_writable(path: str | None, force: bool) -> None:
    """Refuse before any work starts, not after a long fit."""
    if path and Path(path).exists() and not force:
        raise OutputError(f"{path}: already exists; use --force to overwrite")


@contextlib.contextmanager
def _progress(description: str):
    """A Rich progress bar on stderr (only on a terminal); yields the core's progress callback."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress

    with Progress(console=render.stderr_console(), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _load_set(scores: str, labels: str, input_kind: str):
    score_array, label_array, _ = load_inputs(scores, labels, None)
    predictions = as_predictions(score_array, label_array, input_kind, scores_name=scores, labels_name=labels)
    return score_array, predictions


def _before_after(fit, score_array, predictions, input_kind, n_bins, compat, name):
    kwargs = dict(input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=name)
    before = evaluate(predictions.scores, predictions.labels, **kwargs)
    after_scores = fit.apply(score_array, input_kind, scores_name=name)
    after = evaluate(after_scores, predictions.labels, **kwargs)
    return before, after, after_scores


def _fit_label(fit) -> str:
    return f"T = {fit.temperature:.4g}" if fit.temperature is not None else fit.search


def temperature_payload(fit, sets: dict, inputs: dict, input_kind: str, warnings: list[str]) -> dict:
    """The JSON document of ``calib temperature`` (SPEC §6; keys documented in docs/temperature.md)."""
    return {
        "calib_version": __version__,
        "command": "temperature",
        "inputs": {**inputs, "input_kind": input_kind},
        "n_bins": fit.n_bins,
        "conventions": conventions(fit.compat),
        "temperature": fit.temperature,
        "search": fit.search,
        "objective": fit.objective,
        **{name: {"before": dict(b.metrics), "after": dict(a.metrics)} for name, (b, a) in sets.items()},
        "calibration": fit.to_dict(),
        "warnings": warnings,
    }


def _columns(fit, sets: dict) -> list[tuple[str, dict]]:
    post = f"Post T ({fit.temperature:.4g})" if fit.temperature is not None else f"Post {fit.label}"
    columns = []
    for name, (before, after) in sets.items():
        columns.append((f"{name}\nPre T", before.metrics))
        columns.append((f"{name}\n{post}", after.metrics))
    return columns


def _shown(columns) -> list[str]:
    return [m for m in METRIC_NAMES if any(metrics.get(m) is not None for _, metrics in columns)]


def _table(fit, sets: dict, title: str):
    from rich.table import Table

    columns = _columns(fit, sets)
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("metric", style="bold")
    for header, _ in columns:
        table.add_column(header, justify="right")
    for name in _shown(columns):
        table.add_row(render.PRETTY_NAMES[name], *(render.format_value(name, m.get(name)) for _, m in columns))
    return table


def _csv(fit, sets: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["metric", *(f"{name}_{when}" for name in sets for when in ("before", "after"))])
    for name in METRIC_NAMES:
        row = [name]
        for before, after in sets.values():
            for metrics in (before.metrics, after.metrics):
                value = metrics[name]
                row.append("" if value is None else repr(float(value)))
        writer.writerow(row)
    return buffer.getvalue()


def _markdown(fit, sets: dict, title: str) -> str:
    columns = _columns(fit, sets)
    lines = [f"**{title}**", "", "| metric | " + " | ".join(h.replace("\n", " ") for h, _ in columns) + " |"]
    lines.append("|---|" + "---:|" * len(columns))
    for name in _shown(columns):
        cells = " | ".join(render.format_value(name, m.get(name)) for _, m in columns)
        lines.append(f"| {render.PRETTY_NAMES[name]} | {cells} |")
    return "\n".join(lines) + "\n"


def _title(fit, val_scores: str) -> str:
    how = f"{fit.search} search" + (f" by {fit.objective}" if fit.search == "grid" else "")
    value = render.format_value(fit.objective, fit.objective_value)
    at_one = render.format_value(fit.objective, fit.objective_at_one)
    compat = f", compat {fit.compat}" if fit.compat else ""
    return (
        f"{fit.label} ({how}, {fit.n_bins} bins{compat}); fitting-set {fit.objective}: "
        f"{at_one} at T = 1 → {value}"
    )


@click.command("temperature")
@click.argument("val_scores", metavar="VAL_LOGITS")
@click.argument("val_labels", metavar="VAL_LABELS")
@click.option(
    "--search",
    type=click.Choice(SEARCHES),
    default="grid",
    show_default=True,
    help="grid: the paper's grid of T; nll: the exact NLL-optimal T; platt: binary Platt scaling "
    "(a·s + b); vector: per-class scale and bias.",
)
@click.option(
    "--objective",
    type=click.Choice(OBJECTIVES),
    default=None,
    help="What the grid search minimises on the fitting set [default: ece; the other searches: nll].",
)
@click.option(
    "--grid",
    "grid_text",
    default=DEFAULT_GRID_TEXT,
    show_default=True,
    metavar="START:STOP:STEP",
    help="Temperatures of the grid search: START, START+STEP, ... ≤ STOP (T > 0).",
)
@binning_options
@csv_options
@click.option(
    "--test",
    nargs=2,
    metavar="TEST_LOGITS TEST_LABELS",
    default=None,
    help="A held-out test set: report its metrics before/after the fitted T too.",
)
@click.option(
    "--probs",
    "input_kind",
    flag_value="probs",
    default="logits",
    help="Scores are probabilities: fitted through log p (a probability of 0 stays 0 at every T).",
)
@click.option(
    "-f", "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
    help="Report format (with --output and no --format: from FILE's suffix, .json → json).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report to FILE (t.json: reusable "
              "as `calib eval --temperature t.json`).")
@click.option("--save-logits", type=click.Path(dir_okay=False), metavar="FILE.npy",
              help="Save the calibrated scores (the test set's if --test, else the fitting set's) as .npy: "
              "logits, or probabilities with --probs.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="Draw the reliability diagrams before / after side by side (test set if --test, else the "
              "fitting set) to FILE (.png, .svg, .pdf).")
@click.option("--force", is_flag=True, help="Overwrite --output / --save-logits / --plot files that exist.")
@click.pass_context
def temperature_command(
    ctx, val_scores, val_labels, search, objective, grid_text, n_bins, compat, test, input_kind, fmt, output,
    save_logits, plot_path, force,
):
    """Fit a temperature on a validation set and report the metrics before and after.

    VAL_LOGITS / VAL_LABELS: the fitting (validation) set, files as in `calib eval`. The
    temperature T divides the logits: p(T) = softmax(logits / T). It never changes the
    predictions, so never the accuracy. Fit on a validation set and judge on a test set (--test).

    The table is the paper's "Pre T / Post T (T)" comparison: every metric of `calib eval`
    before and after calibration, on the fitting set and on the test set.

    \b
    Examples:
      calib temperature val_logits.npy val_labels.npy --test test_logits.npy test_labels.npy
      calib temperature val_logits.npy val_labels.npy --search nll -o t.json
      calib eval test_logits.npy test_labels.npy --temperature t.json
      calib temperature val.npy val_y.npy --objective adaece --grid 0.05:5:0.05
      calib temperature val.npy val_y.npy --test test.npy test_y.npy --save-logits scaled.npy
      calib temperature val_scores.npy val_y.npy --search platt          # binary: σ(a·s + b)
      calib temperature val_probs.npy val_y.npy --probs --format json
      calib temperature val.npy val_y.npy --test test.npy test_y.npy --plot before_after.png
    """
    grid = parse_grid(grid_text)
    if output and ctx.get_parameter_source("fmt") == click.core.ParameterSource.DEFAULT:
        fmt = SUFFIX_FORMATS.get(Path(output).suffix.lower(), "table")
    if save_logits and output and Path(save_logits).resolve() == Path(output).resolve():
        raise InputError(f"{output}: --output and --save-logits name the same file")
    _check_writable(output, force)
    _check_writable(save_logits, force)

    if plot_path:
        from ..plots import check_figure_path

        check_figure_path(plot_path, force=force)
    val_array, val_predictions = _load_set(val_scores, val_labels, input_kind)
    test_loaded = None
    if test:
        test_array, test_predictions = _load_set(test[0], test[1], input_kind)
        if test_predictions.k != val_predictions.k:
            raise InputError(
                f"{test[0]}: the test set has K = {test_predictions.k} classes but the fitting set "
                f"{val_scores} has K = {val_predictions.k}"
            )
        test_loaded = (test_array, test_predictions)

    with _progress(f"{search} search") as progress:
        fit = fit_temperature(
            val_predictions.scores,
            val_predictions.labels,
            search=search,
            objective=objective,
            grid=grid,
            n_bins=n_bins,
            compat=compat,
            progress=progress,
            input_kind=input_kind,
            scores_name=val_scores,
            labels_name=val_labels,
        )

    warnings = list(fit.warnings)
    fit_before, fit_after, saved = _before_after(fit, val_array, val_predictions, input_kind, n_bins, compat, val_scores)
    sets = {"fit": (fit_before, fit_after)}
    inputs = {"fit": {"scores": val_scores, "labels": val_labels, "n": fit.n, "k": fit.k}}
    reports = [fit_before, fit_after]
    if test_loaded is not None:
        test_before, test_after, saved = _before_after(fit, *test_loaded, input_kind, n_bins, compat, test[0])
        sets["test"] = (test_before, test_after)
        inputs["test"] = {"scores": test[0], "labels": test[1], "n": test_before.n, "k": test_before.k}
        reports += [test_before, test_after]
    for report in reports:
        warnings += [w for w in report.warnings if w not in warnings]

    payload = temperature_payload(fit, sets, inputs, input_kind, warnings)
    title = _title(fit, val_scores)
    render.warn(warnings)
    if fmt == "json":
        text = render.to_json(payload)
    elif fmt == "csv":
        text = _csv(fit, sets)
    elif fmt == "markdown":
        text = _markdown(fit, sets, title)
    else:
        text = None
    if text is None:
        table = _table(fit, sets, title)
        if output:
            render.emit(render.tables_to_text([table]), output, force)
        else:
            render.render_tables(render.stdout_console(), [table])
    else:
        render.emit(text, output, force)
        if output:
            render.render_tables(render.stdout_console(), [_table(fit, sets, title)])

    if plot_path:
        from ..plots import ReliabilityDiagram, comparison_figure, save_figure

        which = "test" if "test" in sets else "fit"
        before, after = sets[which]
        diagrams = [
            ReliabilityDiagram.from_report(before, label="Before"),
            ReliabilityDiagram.from_report(after, label=f"After ({_fit_label(fit)})"),
        ]
        set_name = test[0] if which == "test" else val_scores
        save_figure(comparison_figure(diagrams, title=f"{set_name}: {search} calibration"), plot_path, force=force)

    if save_logits:
        write_array(save_logits, saved, force=force)
        which = "test" if test_loaded is not None else "fitting"
        kind = "probabilities" if input_kind == "probs" else "logits"
        render.stderr_console().print(f"Saved the calibrated {which}-set {kind} to {save_logits}", soft_wrap=True)
