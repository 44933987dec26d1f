"""What ``calib temperature`` and ``calib fit`` share: the validation and test sets loaded once, and
each set's metrics before and after a calibration map, rendered side by side."""

from __future__ import annotations

from ..data.predictions import as_predictions
from ..errors import InputError
from ..evaluate import evaluate
from ..metrics.functional import METRIC_NAMES
from . import render
from .options import load_inputs


def load_fit_and_test(val_scores: str, val_labels: str | None, test, input_kind: str, label_col: str | None = None):
    """(fitting scores as read, validated fitting set, (test scores, validated test set) or None):
    each set read and validated once; the test set must have the fitting set's K. A labels file that
    is None: the ``--labels`` column ``label_col`` of its scores file (``test`` = (scores, labels or None))."""
    val_array, val_predictions = _load_set(val_scores, val_labels, input_kind, label_col)
    if not test:
        return val_array, val_predictions, None
    test_array, test_predictions = _load_set(test[0], test[1], input_kind, label_col)
    if test_predictions.k != val_predictions.k:
        raise InputError(
            f"{test[0]}: the test set has K = {test_predictions.k} classes but the fitting set "
            f"{val_scores} has K = {val_predictions.k}"
        )
    return val_array, val_predictions, (test_array, test_predictions)


def _load_set(scores: str, labels: str | None, input_kind: str, label_col: str | None = None):
    score_array, label_array, name = load_inputs(scores, labels, label_col)
    predictions = as_predictions(score_array, label_array, input_kind, scores_name=scores, labels_name=name)
    return score_array, predictions


def before_after(fit, score_array, predictions, input_kind, n_bins, compat, name, keep_scores=True, **bootstrap):
    """The set's reports before and after calibration, and its calibrated scores (None unless
    ``keep_scores``; without it, the calibrated scores are evaluated as they are computed, a row chunk
    at a time: :meth:`~calibrate_cli.calibrators.Calibrator.apply_by_rows`). The set was validated
    when loaded; only the calibrated scores are checked (they are new). A method whose output is
    probabilities (``calibrator.result_kind``) is evaluated as probabilities. ``bootstrap``: the
    keywords of :func:`~calibrate_cli.evaluate.evaluate` for intervals (``bootstrap=B``, …)."""
    input_kind = predictions.input_kind  # as validated (stated, or logits that do not look like probabilities)
    kwargs = dict(input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=name, **bootstrap)
    before = evaluate(predictions, None, **kwargs)
    calibrator = getattr(fit, "calibrator", fit)
    # intervals, extra metrics (sample weights are no reason to keep the calibrated array)
    resampled = any(value for key, value in bootstrap.items() if key not in ("device", "weights", "weights_name"))
    as_read = None if resampled or keep_scores else calibrator.apply_by_rows(predictions, scores_name=name)
    if as_read is not None:
        # calibrated chunk by chunk as they are read: the same numbers as evaluating the calibrated
        # array, without writing an (N, K) float64 copy (nor widening a bfloat16 file whole)
        return before, evaluate(as_read, None, **{**kwargs, "input_kind": as_read.input_kind}), None
    after_scores = fit.apply(score_array, input_kind, scores_name=name)
    after_kind = calibrator.result_kind(input_kind)
    if after_kind == input_kind:
        after_predictions = predictions.with_scores(after_scores, scores_name=name)
    else:  # probabilities from logits: checked as probabilities
        after_predictions = as_predictions(after_scores, predictions.labels, after_kind, scores_name=name)
    after = evaluate(after_predictions, None, **{**kwargs, "input_kind": after_kind})
    return before, after, after_scores


def prepost_report(fmt: str, calibrator, sets: dict, title: str, post: str):
    """The Pre/Post table in ``fmt`` (a Rich table, Markdown or CSV; JSON is the payload).

    Columns: per set, the metrics before and after. Table and Markdown show the metrics of
    ``calib eval``'s table; CSV has every metric (15 significant digits, as every CSV of calib),
    then one row per parameter of the map: the identity before (T = 1, …), the fit after, exact
    (``repr``: read back, they give the same map)."""
    if fmt == "csv":
        columns = [render.Column("metric")]
        columns += [render.Column(f"{name}_{when}") for name in sets for when in ("before", "after")]
        rows = [
            [name, *(render.csv_number(r.metrics.get(name)) for pair in sets.values() for r in pair)]
            for name in METRIC_NAMES
            if any(name in r.metrics for pair in sets.values() for r in pair)
        ]
        identity = type(calibrator).identity(calibrator.k)
        before = dict(identity.parameter_rows()) if identity is not None else {}
        for name, value in calibrator.parameter_rows():
            cells = ["" if before.get(name) is None else repr(before[name]), repr(value)]
            rows.append([name, *(cells * len(sets))])
        return render.render_rows("csv", columns, rows)
    columns = [render.Column("metric", justify="left", style="bold")]
    reports = []
    for name, (before, after) in sets.items():
        columns += [render.Column(f"{name}\nPre T"), render.Column(f"{name}\n{post}")]
        reports += [before, after]
    shown = [m for m in METRIC_NAMES if any(r.metrics.get(m) is not None for r in reports)]

    def cell(m, r):  # the value, and its interval with --bootstrap (`calib fit`)
        ci = (r.intervals or {}).get(m)
        return render.format_value(m, r.metrics.get(m)) + (f" {render.interval_text(m, ci)}" if ci else "")

    rows = [[render.PRETTY_NAMES[m], *(cell(m, r) for r in reports)] for m in shown]
    cis = [{m: ci for m, ci in (r.intervals or {}).items() if m in shown} for r in reports]
    notes = [*render.interval_notes(*cis),
             *render.missing_interval_notes(*(({m: r.metrics.get(m) for m in shown}, c) for r, c in zip(reports, cis)))]
    return render.render_rows(fmt, columns, rows, title=title, notes=notes)
