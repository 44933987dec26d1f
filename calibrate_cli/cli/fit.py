"""``calib fit``: fit any calibrator of the family (or all of them) on a validation set, report before/after."""

from __future__ import annotations

import click

from .._version import __version__
from ..calibrators import CALIBRATORS, OBJECTIVES, fit as fit_method
from ..errors import InputError
from ..evaluate import conventions
from ..metric_registry import METRIC_NAMES, METRICS, PAPER_COLUMNS
from . import render
from .hints import cli_text
from .options import (
    parse_metric_list,
    Outputs,
    binning_options,
    csv_options,
    bootstrap_options,
    check_device_use,
    check_resamples,
    interval_warnings,
    output_options,
    probs_option,
)
from .temperature import _before_after, load_fit_and_test, prepost_report

#: the methods `--method all` fits, in table order (every registered calibrator)
METHODS = tuple(CALIBRATORS)
_LOWER_IS_BETTER = {spec.name: spec.lower_is_better for spec in METRICS}
#: the columns of the `--method all` table unless --metrics says otherwise: the paper's (and Brier), so
#: that the table fits a terminal; every other metric is one --metrics away
DEFAULT_COLUMNS = PAPER_COLUMNS
DEFAULT_SELECT = OBJECTIVES[0]  # the ECE, what the paper's temperature grid minimises


def _options_for(method: str, n_bins: int) -> dict:
    """The constructor options `calib fit` gives a method: the bins of histogram binning and of the
    temperature grid's ECE objective come from --n-bins."""
    import inspect

    parameters = inspect.signature(CALIBRATORS[method].__init__).parameters
    return {"n_bins": n_bins} if "n_bins" in parameters else {}


def _fit_one(method, val_predictions, input_kind, n_bins, val_scores, val_labels, progress=None):
    return fit_method(method, val_predictions, None, input_kind=input_kind, progress=progress, scores_name=val_scores,
                      labels_name=val_labels, **_options_for(method, n_bins))


def _header(name: str, fmt: str) -> str:
    """A long metric name over two lines on a terminal (``Classwise-ECE`` → ``Classwise-`` / ``ECE``),
    so that the paper's columns fit 80 columns."""
    if fmt != "table" or len(name) <= 9:
        return name
    for sep, keep in ((" ", ""), ("-", "-")):
        if sep in name:
            head, tail = name.split(sep, 1)
            return f"{head}{keep}\n{tail}"
    return name


def _parse_metrics(text: str | None) -> tuple[str, ...]:
    names = parse_metric_list(text)
    if names is None:
        return DEFAULT_COLUMNS
    return METRIC_NAMES if names == "all" else names


def _best(values: dict[str, float | None], metric: str) -> set[str]:
    """The methods with the best value of ``metric`` (ties: all); none when no direction is better."""
    direction = _LOWER_IS_BETTER.get(metric)
    finite = {m: v for m, v in values.items() if v is not None and v == v}
    if direction is None or not finite:
        return set()
    best = min(finite.values()) if direction else max(finite.values())
    return {m for m, v in finite.items() if v == best}


@click.command("fit")
@click.argument("val_scores", metavar="VAL_SCORES")
@click.argument("val_labels", metavar="VAL_LABELS")
@click.option("--method", "method", type=click.Choice((*METHODS, "all")), default="temperature", show_default=True,
              help="The calibrator (docs/calibrators.md), or all: every method that applies, one table.")
@click.option("--test", nargs=2, metavar="TEST_SCORES TEST_LABELS", default=None,
              help="A held-out test set: report its metrics before/after too (the --method all table: test metrics).")
@click.option("--metrics", "metrics_text", metavar="LIST", default=None,
              help=f"--method all: the columns, e.g. ece,nll,brier [default: the paper's and Brier: {','.join(PAPER_COLUMNS)}].")
@click.option("--select", type=click.Choice(METRIC_NAMES), default=DEFAULT_SELECT, show_default=True,
              help="--method all: the metric (on the test set if --test, else the fitting set) that picks the "
              "calibrator saved in the JSON report.")
@binning_options
@csv_options
@probs_option("Scores are probabilities (fitted through log p).")
@bootstrap_options()
@output_options(output_help="Write the report to FILE ('-': stdout; f.json: reusable as `calib eval --calibrator f.json`).")
def fit_command(val_scores, val_labels, method, test, metrics_text, select, n_bins, compat, input_kind,
                n_resamples, ci_level, ci_method, seed, device, bootstrap_metrics, fmt, output, force):
    """Fit a calibrator on a validation set and report the metrics before and after.

    VAL_SCORES / VAL_LABELS: the fitting (validation) set, files as in `calib eval`. --method picks
    the map (default temperature: the paper's grid of T by ECE, as `calib temperature`); the table is
    the same Pre / Post comparison. Methods: temperature, platt (binary), vector, histogram and
    histogram_mass (binning, --n-bins bins), isotonic, bbq (Bayesian binning into quantiles), beta
    (binary), matrix and dirichlet (ODIR),
    ensemble_ts; formulas and references in docs/calibrators.md.

    --method all fits every method that applies (the others are named on stderr with the reason) and
    prints one table: a row per method, the test metrics as columns (the fitting set's without
    --test), the best of each column marked with *, intervals with --bootstrap B. Its JSON report holds
    every method's metrics and parameters, and under "calibration" the one with the best --select
    metric (by default ECE, on the test set if given): `-o best.json` then `calib eval --calibrator
    best.json` applies it. Picking on the test set makes that set's numbers for the pick optimistic;
    confirm on fresh data.

    \b
    Examples:
      calib fit val_logits.npy val_labels.npy --method isotonic --test test_logits.npy test_labels.npy
      calib fit val.npy val_y.npy --method dirichlet -o d.json && calib eval test.npy test_y.npy --calibrator d.json
      calib fit val.npy val_y.npy --method all --test test.npy test_y.npy
      calib fit val.npy val_y.npy --method all --test test.npy test_y.npy --bootstrap 1000 --metrics ece,nll
      calib fit val.npy val_y.npy --method all --test test.npy test_y.npy --select nll -o best.json
      calib plot test.npy test_y.npy --calibrator best.json -o before_after.png
    """
    check_device_use(device, n_resamples)
    check_resamples(n_resamples, ci_level, device)
    columns = _parse_metrics(metrics_text)
    Outputs(force).report("--output", output).check()
    val_array, val_predictions, test_loaded = load_fit_and_test(val_scores, val_labels, test, input_kind)
    bootstrap = dict(bootstrap=n_resamples, ci_level=ci_level, ci_method=ci_method, seed=seed, device=device,
                     bootstrap_metrics=bootstrap_metrics) if n_resamples else {}
    inputs = {"fit": {"scores": val_scores, "labels": val_labels, "n": val_predictions.n, "k": val_predictions.k}}
    if test_loaded:
        inputs["test"] = {"scores": test[0], "labels": test[1], "n": test_loaded[1].n, "k": test_loaded[1].k}

    if method != "all":
        with render.progress_bar(f"{method} fit") as progress:
            cal = _fit_one(method, val_predictions, input_kind, n_bins, val_scores, val_labels, progress)
        warnings = [cli_text(w) for w in cal.fit_info_.warnings]
        sets = {"fit": _before_after(cal, val_array, val_predictions, input_kind, n_bins, compat, val_scores,
                                     keep_scores=False)[:2]}
        if test_loaded:
            sets["test"] = _before_after(cal, *test_loaded, input_kind, n_bins, compat, test[0], keep_scores=False,
                                         **bootstrap)[:2]
        for pair in sets.values():
            for report in pair:
                warnings += [w for w in report.warnings if w not in warnings]
        info = cal.fit_info_
        payload = {
            "calib_version": __version__, "command": "fit", "inputs": {**inputs, "input_kind": input_kind},
            "n_bins": n_bins, "conventions": conventions(compat), "method": method,
            "fit": {"objective": info.objective, "value": info.value, "at_identity": info.at_identity,
                    "solver": info.solver},
            **{name: _pair_dict(b, a) for name, (b, a) in sets.items()},
            "calibration": cal.to_dict(), "warnings": warnings,
        }
        value = render.format_value(info.objective, info.value)
        before = render.format_value(info.objective, info.at_identity)
        title = f"{cal.label} ({method}); fitting-set {info.objective}: {before} uncalibrated → {value}"
        post = f"Post T ({cal.temperature:.4g})" if cal.temperature is not None else f"Post {cal.label}"
        render.warn(warnings)
        rendered = render.to_json(payload) if fmt == "json" else prepost_report(fmt, cal, sets, title, post)
        render.write_report(rendered, output, force)
        if output and fmt != "table":
            render.write_report(prepost_report("table", cal, sets, title, post), None, force)
        return

    # --method all: every method that applies, one table
    which = "test" if test_loaded else "fit"
    target = test_loaded if test_loaded else (val_array, val_predictions)
    target_name = test[0] if test_loaded else val_scores
    results, skipped, warnings = {}, {}, []
    with render.progress_bar("fitting", enabled=True) as progress:
        for i, name in enumerate(METHODS):
            if progress is not None:
                progress(i, len(METHODS))
            try:
                cal = _fit_one(name, val_predictions, input_kind, n_bins, val_scores, val_labels)
            except InputError as exc:  # does not apply here (binary only, too few samples per bin, …)
                skipped[name] = exc.message  # (its remedy names `calib temperature` flags)
                continue
            before, after, _ = _before_after(cal, *target, input_kind, n_bins, compat, target_name, metrics=columns, keep_scores=False,
                                             **bootstrap)
            results[name] = (cal, after)
            warnings += [f"{name}: {cli_text(w)}" for w in cal.fit_info_.warnings]
    baseline = before  # the uncalibrated model on the same set (identical for every method)
    rows_reports = {"uncalibrated": baseline, **{name: after for name, (_, after) in results.items()}}
    best = {m: _best({n: r.metrics.get(m) for n, r in rows_reports.items()}, m) for m in columns}
    select_values = {n: r.metrics.get(select) for n, (_, r) in results.items()}
    chosen = sorted(_best(select_values, select) or set(results), key=list(results).index)
    selected = chosen[0] if chosen else None
    for name, reason in skipped.items():
        warnings.append(f"skipped {name}: {reason}")
    for name, report in rows_reports.items():
        warnings += [f"{name}: {w}" for w in report.warnings if f"{name}: {w}" not in warnings]
        warnings += interval_warnings(report.intervals or {}, prefix=f"{name}: ") if n_resamples else []

    payload = {
        "calib_version": __version__, "command": "fit", "inputs": {**inputs, "input_kind": input_kind},
        "n_bins": n_bins, "conventions": conventions(compat), "method": "all", "evaluated_on": which,
        "select": select, "selected": selected,
        "uncalibrated": _report_dict(baseline),
        "methods": {
            name: {**_report_dict(after), "calibration": cal.to_dict(),
                   "fit": {"objective": cal.fit_info_.objective, "value": cal.fit_info_.value,
                           "at_identity": cal.fit_info_.at_identity, "solver": cal.fit_info_.solver,
                           "warnings": [cli_text(w) for w in cal.fit_info_.warnings]}}
            for name, (cal, after) in results.items()
        },
        "best": {m: sorted(best[m], key=list(rows_reports).index) for m in columns},
        "skipped": skipped,
        "calibration": results[selected][0].to_dict() if selected else None,
        "warnings": warnings,
    }
    title = (f"{len(results)} calibrators fitted on {val_scores}, metrics on the {'test' if test_loaded else 'fitting'} "
             f"set {target_name} (* best per column)")
    render.warn(warnings)
    rendered = (render.to_json(payload) if fmt == "json"
                else _all_table(fmt, rows_reports, results, columns, best, title, selected, select))
    render.write_report(rendered, output, force)
    if output and fmt != "table":
        render.write_report(_all_table("table", rows_reports, results, columns, best, title, selected, select), None, force)


def _report_dict(report) -> dict:
    out = {"metrics": dict(report.metrics)}
    if report.intervals:
        out["intervals"] = {m: ci.to_dict() if ci is not None else None for m, ci in report.intervals.items()}
    return out


def _pair_dict(before, after) -> dict:
    return {"before": dict(before.metrics), "after": dict(after.metrics)}


def _all_table(fmt, reports: dict, results: dict, columns, best: dict, title: str, selected, select):
    """Methods as rows, metrics as columns; the best per column marked (* and bold; CSV: a ``best`` column)."""
    from rich.text import Text

    labels = {"uncalibrated": "uncalibrated"}
    labels.update({name: name for name in results})
    if fmt == "csv":
        head = [render.Column("method"), *(render.Column(m) for m in columns)]
        with_ci = any(r.intervals for r in reports.values())
        if with_ci:
            head += [c for m in columns for c in (render.Column(f"{m}_low"), render.Column(f"{m}_high"))]
        head += [render.Column("best"), render.Column("parameters")]
        rows = []
        for name, report in reports.items():
            row = [name, *(render.csv_number(report.metrics.get(m)) for m in columns)]
            if with_ci:
                for m in columns:
                    ci = (report.intervals or {}).get(m)
                    row += [render.csv_number(ci.low), render.csv_number(ci.high)] if ci else ["", ""]
            params = results[name][0].label if name in results else ""
            rows.append([*row, ";".join(m for m in columns if name in best[m]), params])
        return render.render_rows("csv", head, rows)
    head = [render.Column("method", justify="left", style="bold", no_wrap=True)]
    head += [render.Column(_header(render.PRETTY_NAMES[m], fmt), no_wrap=fmt == "table") for m in columns]
    rows = []
    for name, report in reports.items():
        cells = []
        for m in columns:
            text = render.format_value(m, report.metrics.get(m))
            ci = (report.intervals or {}).get(m)
            if ci is not None:
                text += " " + render.interval_text(m, {"low": ci.low, "high": ci.high})
            if name in best[m]:
                cells.append(f"**{text}** *" if fmt == "markdown" else Text(f"{text}*", style="bold green"))
            else:
                cells.append(text)
        marker = " (selected)" if name == selected and fmt != "table" else ""  # the table's title names it
        rows.append([labels[name] + marker, *cells])
    return render.render_rows(fmt, head, rows, title=title + f"; selected by {select}: {selected}")
