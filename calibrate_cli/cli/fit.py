"""``calib fit``: fit any calibrator of the family (or all of them) on a validation set, report before/after."""

from __future__ import annotations

import re

import click

from .._version import __version__
from ..calibrators import CALIBRATORS, OBJECTIVES, fit as fit_method
from ..calibrators.selection import DEFAULT_FOLDS, SELECTABLE, choose, cross_validate, stratified_folds
from ..errors import CalibError, FitError, InputError
from ..evaluate import conventions, evaluate
from ..metrics.registry import METRIC_NAMES, METRICS, PAPER_COLUMNS
from . import render
from .hints import cli_text
from .topk import refuse_topk_option
from .options import (
    FilePairCommand,
    PlainIntRange,
    parse_metric_list,
    Outputs,
    binning_options,
    csv_options,
    bootstrap_options,
    check_device_use,
    check_resamples,
    interval_warnings_by_cause,
    labels_name,
    labels_option,
    output_options,
    probs_option,
    read_weights,
    test_pair,
    test_set_option,
    weights_option,
)
from .prepost import before_after, load_fit_and_test, prepost_report

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


def _fit_one(method, val_predictions, input_kind, n_bins, val_scores, val_labels, progress=None, weights=None):
    return fit_method(method, val_predictions, None, input_kind=input_kind, progress=progress, scores_name=val_scores,
                      labels_name=val_labels, weights=weights, **_options_for(method, n_bins))


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


@click.command("fit", cls=FilePairCommand)
@refuse_topk_option
@click.argument("val_scores", metavar="VAL_SCORES")
@click.argument("val_labels", metavar="[VAL_LABELS]", required=False)
@click.option("--method", "method", type=click.Choice((*METHODS, "all")), default="temperature", show_default=True,
              help="The calibrator (docs/calibrators.md), or all: every method that applies, one table.")
@test_set_option("A held-out test set: report its metrics before/after too (the --method all table: test metrics).")
@click.option("--metrics", "metrics_text", metavar="LIST", default=None,
              help=f"--method all: the columns, e.g. ece,nll,brier [default: the paper's and Brier: {','.join(PAPER_COLUMNS)}].")
@click.option("--select", type=click.Choice(SELECTABLE), default=DEFAULT_SELECT, show_default=True,
              help="--method all: the metric that picks the calibrator saved in the JSON report, by its "
              "cross-validated value on the fitting set (--folds), never on the test set.")
@click.option("--folds", "n_folds", type=PlainIntRange(min=2), default=DEFAULT_FOLDS, show_default=True,
              help="--method all: the folds of the cross-validation that picks the calibrator (stratified by "
              "label, drawn with --seed, the same for every method).")
@binning_options
@csv_options
@labels_option()
@weights_option
@probs_option("Scores are probabilities (fitted through log p).")
@bootstrap_options()
@output_options(output_help="Write the report to FILE ('-': stdout; f.json: reusable as `calib eval --calibrator f.json`).")
def fit_command(val_scores, val_labels, method, test, metrics_text, select, n_folds, n_bins, compat, label_col,
                input_kind, n_resamples, ci_level, ci_method, seed, device, bootstrap_metrics, fmt, output, force,
                weights=None):
    """Fit a calibrator on a validation set and report the metrics before and after.

    VAL_SCORES / VAL_LABELS: the fitting (validation) set, files as in `calib eval`. --method picks
    the map (default temperature: the paper's grid of T by ECE, as `calib temperature`); the table is
    the same Pre / Post comparison. Methods: temperature, platt (binary), vector, histogram and
    histogram_mass (binning, --n-bins bins), isotonic, bbq (Bayesian binning into quantiles), beta
    (binary), matrix and dirichlet (ODIR), ensemble_ts, top_label (per predicted class: Gupta & Ramdas
    2022); formulas and references in docs/calibrators.md.

    --method all fits every method that applies (the others are named on stderr with the reason) and
    prints one table: a row per method, the test metrics as columns (the fitting set's without
    --test: in-sample, optimistic), the best of each column marked with *, intervals with --bootstrap
    B; its title names the pick and the rule (Markdown and CSV: a last column with each method's
    cross-validated --select metric). The choice is honest:
    each method is fitted on K − 1 of --folds K folds of the fitting set (stratified, drawn with
    --seed, the same folds for every method) and predicts the fold it did not see; the method whose
    out-of-fold predictions have the best --select metric (default ECE) is chosen, never by the test
    set. A method whose fit fails (or is degenerate) in any fold is reported as failed, with the
    reason, and never chosen. The JSON report holds every method's metrics, cross-validated value and
    parameters, the rule under "selection", and under "calibration" the chosen one: `-o best.json`
    then `calib eval --calibrator best.json` applies it.

    \b
    Examples:
      calib fit val_logits.npy val_labels.npy --method isotonic --test test_logits.npy test_labels.npy
      calib fit val.npy val_y.npy --method dirichlet -o d.json && calib eval test.npy test_y.npy --calibrator d.json
      calib fit val.npy val_y.npy --method all --test test.npy test_y.npy
      calib fit val.npy val_y.npy --method all --test test.npy test_y.npy --bootstrap 1000 --metrics ece,nll
      calib fit val.npy val_y.npy --method all --test test.npy test_y.npy --select nll -o best.json
      calib fit val.npy val_y.npy --method all --test test.npy test_y.npy --folds 10 --seed 1
      calib plot test.npy test_y.npy --calibrator best.json -o before_after.png
      calib fit val.parquet --labels label --test test.parquet --method all   # labels: a column of each file
      calib fit val.npy val_y.npy --method isotonic --weights val_w.npy   # weighted fit (and fitting-set metrics)
    """
    check_device_use(device, n_resamples)
    check_resamples(n_resamples, ci_level, device)
    columns = _parse_metrics(metrics_text)
    Outputs(force).report("--output", output).check()
    test = test_pair(test, label_col)
    val_array, val_predictions, test_loaded = load_fit_and_test(val_scores, val_labels, test, input_kind, label_col)
    val_labels = labels_name(val_scores, val_labels, label_col)  # as the report names them
    weight_array, weights_name = read_weights(weights, val_scores)
    bootstrap = dict(bootstrap=n_resamples, ci_level=ci_level, ci_method=ci_method, seed=seed, device=device,
                     bootstrap_metrics=bootstrap_metrics) if n_resamples else {}
    weighted = {} if weights is None else dict(weights=weight_array, weights_name=weights_name)
    inputs = {"fit": {"scores": val_scores, "labels": val_labels, "n": val_predictions.n, "k": val_predictions.k}}
    if weights is not None:
        inputs["fit"]["weights"] = weights_name
    if test_loaded:
        inputs["test"] = {"scores": test[0], "labels": labels_name(*test, label_col), "n": test_loaded[1].n,
                          "k": test_loaded[1].k}

    if method != "all":
        with render.progress_bar(f"{method} fit") as progress:
            cal = _fit_one(method, val_predictions, input_kind, n_bins, val_scores, val_labels, progress,
                           weights=weight_array)
        warnings = [cli_text(w) for w in cal.fit_info_.warnings]
        sets = {"fit": before_after(cal, val_array, val_predictions, input_kind, n_bins, compat, val_scores,
                                     keep_scores=False, **bootstrap, **weighted)[:2]}
        if test_loaded:
            sets["test"] = before_after(cal, *test_loaded, input_kind, n_bins, compat, test[0], keep_scores=False,
                                         **bootstrap)[:2]
        for pair in sets.values():
            for report in pair:
                warnings += [w for w in report.warnings if w not in warnings]
        if n_resamples:  # one line per cause, naming the metrics and the columns of the table
            warnings += interval_warnings_by_cause({f"{name} {when}": report.intervals or {} for name, pair in sets.items()
                                                    for when, report in zip(("before", "after"), pair)})
        info = cal.fit_info_
        payload = {
            "calib_version": __version__, "command": "fit", "inputs": {**inputs, "input_kind": input_kind or "logits"},
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
        render.write_report(rendered, output, force)  # with -o: to FILE only, as every command
        return

    # --method all: every method that applies, one table; the choice by cross-validation on the fitting set
    kind = val_predictions.input_kind  # as validated (stated, or logits)
    which = "test" if test_loaded else "fit"
    target = test_loaded if test_loaded else (val_array, val_predictions)
    target_name = test[0] if test_loaded else val_scores
    target_weights = {} if test_loaded else weighted  # the weights are the fitting set's
    folds = stratified_folds(val_predictions.labels, n_folds, seed)
    if bootstrap and bootstrap_metrics is None:  # intervals for the columns shown, and for them only
        bootstrap["bootstrap_metrics"] = list(columns)
    results, cv_values, skipped, failed, warnings = {}, {}, {}, {}, []
    before = None
    steps = len(METHODS) * (n_folds + 1)
    with render.progress_bar("fitting", enabled=True) as progress:
        for i, name in enumerate(METHODS):
            if progress is not None:
                progress(i * (n_folds + 1), steps)
            try:
                cal = _fit_one(name, val_predictions, kind, n_bins, val_scores, val_labels, weights=weight_array)
            except FitError as exc:  # degenerate or non-finite: refused, never shown as a result
                failed[name] = exc.message
                continue
            except InputError as exc:  # does not apply here (binary only, too few samples per bin, …)
                skipped[name] = exc.message  # (its remedy names `calib temperature` flags)
                continue
            cv = cross_validate(name, val_predictions, None, metric=select, folds=folds, n_bins=n_bins, compat=compat,
                                scores_name=val_scores, options=_options_for(name, n_bins), weights=weight_array,
                                progress=None if progress is None else
                                lambda done, _, start=i * (n_folds + 1) + 1: progress(start + done, steps))
            if cv.failure is not None:
                failed[name] = cv.failure
                continue
            try:
                before, after, _ = before_after(cal, *target, kind, n_bins, compat, target_name, metrics=columns,
                                                 keep_scores=False, **bootstrap, **target_weights)
            except CalibError as exc:  # its calibrated scores of the reported set are not valid scores
                failed[name] = f"on {target_name}: {exc.message}"
                continue
            results[name] = (cal, after)
            cv_values[name] = cv.value
            warnings += [f"{name}: {cli_text(w)}" for w in cal.fit_info_.warnings]
    if before is None:  # nothing fitted: the uncalibrated row alone
        before = before_after(CALIBRATORS["temperature"].identity(), *target, kind, n_bins, compat, target_name, metrics=columns,
                               keep_scores=False, **bootstrap, **target_weights)[0]
    baseline = before  # the uncalibrated model on the same set (identical for every method)
    # the uncalibrated model's value on the whole fitting set: nothing was fitted, so it is out-of-sample too
    uncalibrated_cv = _metric_on_fit_set(val_predictions, select, n_bins, compat, weight_array)
    rows_reports = {"uncalibrated": baseline, **{name: after for name, (_, after) in results.items()}}
    best = {m: _best({n: r.metrics.get(m) for n, r in rows_reports.items()}, m) for m in columns}
    selected = choose(cv_values, select)
    for name, reason in skipped.items():
        warnings.append(f"skipped {name}: {reason}")
    for name, reason in failed.items():
        warnings.append(f"failed {name}: {reason}")
    if results and selected is None:
        warnings.append(f"no method has a cross-validated {select}: none selected")
    elif selected is not None and uncalibrated_cv is not None and choose(
            {"uncalibrated": uncalibrated_cv, selected: cv_values[selected]}, select) == "uncalibrated":
        warnings.append(f"no method improves the uncalibrated {select} under cross-validation "
                        f"({render.format_value(select, uncalibrated_cv)} uncalibrated, "
                        f"{render.format_value(select, cv_values[selected])} for {selected})")
    infinite = {}  # the rows whose NLL is inf (said once, and only when NLL is a column)
    for name, report in rows_reports.items():
        for w in report.warnings:
            count = re.match(r".*: (\d+) sample\(s\) give probability 0 to the true class", w)
            if count:
                infinite[name] = count.group(1)
            elif f"{name}: {w}" not in warnings:
                warnings.append(f"{name}: {w}")
    if infinite and "nll" in columns:
        warnings.append(f"NLL is inf (not clipped) on {target_name}: samples given probability 0 for their true "
                        "class by " + ", ".join(f"{name} ({n})" for name, n in infinite.items()))
    if n_resamples:  # one line per cause, naming the metrics and rows (the table's columns only)
        warnings += interval_warnings_by_cause(
            {name: {m: ci for m, ci in (r.intervals or {}).items() if m in columns} for name, r in rows_reports.items()}
        )

    selection = {"rule": "cross-validation", "metric": select, "folds": n_folds, "seed": seed, "stratified": True,
                 "on": "fit", "values": {"uncalibrated": uncalibrated_cv, **cv_values}}
    payload = {
        "calib_version": __version__, "command": "fit", "inputs": {**inputs, "input_kind": kind},
        "n_bins": n_bins, "conventions": conventions(compat), "method": "all", "evaluated_on": which,
        "select": select, "selected": selected, "selection": selection,
        "uncalibrated": _report_dict(baseline),
        "methods": {
            name: {**_report_dict(after), "cv": cv_values[name], "calibration": cal.to_dict(),
                   "fit": {"objective": cal.fit_info_.objective, "value": cal.fit_info_.value,
                           "at_identity": cal.fit_info_.at_identity, "solver": cal.fit_info_.solver,
                           "warnings": [cli_text(w) for w in cal.fit_info_.warnings]}}
            for name, (cal, after) in results.items()
        },
        "best": {m: sorted(best[m], key=list(rows_reports).index) for m in columns},
        "skipped": skipped,
        "failed": failed,
        "calibration": results[selected][0].to_dict() if selected else None,
        "warnings": warnings,
    }
    where = (f"the test set {target_name}" if test_loaded
             else f"the fitting set {target_name} (in-sample, optimistic: give --test)")
    title = f"{len(results)} calibrators fitted on {val_scores}, metrics on {where} (* best per column)"
    pretty = render.PRETTY_NAMES[select]
    rule = f"selected by {n_folds}-fold cross-validated {pretty} on the fitting set: {selected or 'none'}"
    if selected:
        rule += (f" ({pretty} {render.format_value(select, cv_values[selected])} cross-validated; uncalibrated "
                 f"{render.format_value(select, uncalibrated_cv)})")
    table = dict(columns=columns, best=best, title=title, rule=rule, selected=selected, select=select,
                 cv={"uncalibrated": uncalibrated_cv, **cv_values})
    render.warn(warnings)
    rendered = render.to_json(payload) if fmt == "json" else _all_table(fmt, rows_reports, results, **table)
    render.write_report(rendered, output, force)  # with -o: to FILE only, as every command


def _metric_on_fit_set(predictions, metric, n_bins, compat, weights=None) -> float | None:
    """``metric`` of the uncalibrated scores of the fitting set (None where undefined; weighted with ``weights``)."""
    value = evaluate(predictions, None, n_bins=n_bins, compat=compat, metrics=[metric],
                     weights=weights).metrics.get(metric)
    return None if value is None or value != value else float(value)


def _report_dict(report) -> dict:
    out = {"metrics": dict(report.metrics)}
    if report.intervals:
        out["intervals"] = {m: ci.to_dict() if ci is not None else None for m, ci in report.intervals.items()}
    return out


def _pair_dict(before, after) -> dict:
    out = {"before": dict(before.metrics), "after": dict(after.metrics)}
    if before.intervals or after.intervals:  # with --bootstrap
        out["intervals"] = {when: {m: ci.to_dict() for m, ci in (r.intervals or {}).items() if ci is not None}
                            for when, r in (("before", before), ("after", after))}
    return out


def _all_table(fmt, reports: dict, results: dict, *, columns, best: dict, title: str, rule: str, selected, select,
               cv: dict):
    """Methods as rows, metrics as columns; the best per column marked (* and bold; CSV: a ``best`` column);
    last, the cross-validated value of ``select`` that chose (the uncalibrated row: its fitting-set value)."""
    from rich.text import Text

    labels = {"uncalibrated": "uncalibrated"}
    labels.update({name: name for name in results})
    if fmt == "csv":
        head = [render.Column("method"), *(render.Column(m) for m in columns)]
        with_ci = any(r.intervals for r in reports.values())
        if with_ci:
            head += [c for m in columns for c in (render.Column(f"{m}_low"), render.Column(f"{m}_high"))]
        head += [render.Column("best"), render.Column("parameters"), render.Column(f"cv_{select}")]
        rows = []
        for name, report in reports.items():
            row = [name, *(render.csv_number(report.metrics.get(m)) for m in columns)]
            if with_ci:
                for m in columns:
                    ci = (report.intervals or {}).get(m)
                    row += [render.csv_number(ci.low), render.csv_number(ci.high)] if ci else ["", ""]
            params = results[name][0].label if name in results else ""
            rows.append([*row, ";".join(m for m in columns if name in best[m]), params,
                         render.csv_number(cv.get(name))])
        return render.render_rows("csv", head, rows)
    head = [render.Column("method", justify="left", style="bold", no_wrap=True)]
    head += [render.Column(_header(render.PRETTY_NAMES[m], fmt), no_wrap=fmt == "table") for m in columns]
    with_cv = fmt != "table"  # a terminal's table keeps to 80 columns: its title gives the chosen one's value
    if with_cv:
        head.append(render.Column(f"CV {render.PRETTY_NAMES[select]}"))
    rows = []
    for name, report in reports.items():
        cells = []
        for m in columns:
            text = render.format_value(m, report.metrics.get(m))
            ci = (report.intervals or {}).get(m)
            if ci is not None:
                text += " " + render.interval_text(m, ci)
            if name in best[m]:
                cells.append(f"**{text}** *" if fmt == "markdown" else Text(f"{text}*", style="bold green"))
            else:
                cells.append(text)
        marker = " (selected)" if name == selected and fmt != "table" else ""  # the table's title names it
        rows.append([labels[name] + marker, *cells, *([render.format_value(select, cv.get(name))] if with_cv else [])])
    shown = [{m: (r.intervals or {}).get(m) for m in columns} for r in reports.values()]
    missing = render.missing_interval_notes(*(({m: r.metrics.get(m) for m in columns}, cis)
                                              for r, cis in zip(reports.values(), shown)))
    return render.render_rows(fmt, head, rows, title=f"{title}; {rule}", notes=[*render.interval_notes(*shown), *missing])
