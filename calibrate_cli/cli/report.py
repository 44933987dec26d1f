"""``calib report``: one self-contained HTML file to send to a colleague (docs/report.md)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import click

from ..data.io import split_source
from ..calibrators.temperature_fit import parse_grid
from . import render
from .hints import cli_text
from .options import (
    Outputs,
    binning_options,
    bootstrap_options,
    check_device_use,
    check_resamples,
    csv_options,
    labels_name,
    labels_option,
    pair_inputs,
    force_option,
    interval_warnings_by_cause,
    output_option,
    probs_option,
    read_weights,
    title_option,
    weights_option,
)
from .prepost import load_fit_and_test
from .temperature import TEMPERATURE_SEARCHES, grid_option, objective_option

#: the report's default resamples: intervals are part of what it shows
DEFAULT_REPORT_RESAMPLES = 1000
HTML_SUFFIXES = (".html", ".htm")
_CHUNK = 1 << 20


def input_file(role: str, source: str):
    """Provenance of one input: the path as given, its size and SHA-256 (of the whole file, also for
    ``file.npz:key``)."""
    from ..report import InputFile

    path, _key = split_source(source)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return InputFile(role=role, path=source, size=path.stat().st_size, sha256=digest.hexdigest())


def labels_file(role: str, scores: str, labels: str | None, label_col: str | None):
    """Provenance of the labels: their file, or (``--labels``) the scores file's, shown as ``SCORES[COLUMN]``."""
    if labels is not None:
        return input_file(role, labels)
    import dataclasses

    return dataclasses.replace(input_file(role, scores), path=labels_name(scores, None, label_col))


@click.command("report")
@click.argument("val_scores", metavar="VAL_SCORES")
@click.argument("val_labels", metavar="[VAL_LABELS]", required=False)
@click.argument("test_scores", metavar="[TEST_SCORES", required=False)
@click.argument("test_labels", metavar="[TEST_LABELS]]", required=False)
@output_option("The HTML file to write (.html or .htm).", required=True)
@force_option
@click.option(
    "--search", type=click.Choice(TEMPERATURE_SEARCHES), default="grid", show_default=True,
    help="grid: the paper's grid of T, minimising --objective; nll: the exact NLL-optimal T.",
)
@objective_option()
@grid_option("Temperatures of the grid search, and of the ECE/NLL-versus-T curves.")
@binning_options
@csv_options
@labels_option()
@probs_option("Scores are probabilities: T is fitted through log p (a probability of 0 stays 0).")
@bootstrap_options(default_resamples=DEFAULT_REPORT_RESAMPLES)
@title_option
@weights_option
@click.option(
    "--beyond/--no-beyond", default=True, show_default=True,
    help="The section 'Beyond one number': CORP decompositions of the Brier and log scores, a calibration "
         "test (499 resamples, --seed) and selective prediction (AURC, E-AURC, risk at 90% coverage).",
)
def report_command(
    val_scores, val_labels, test_scores, test_labels, output, force, search, objective, grid_text, n_bins, compat,
    label_col, input_kind, n_resamples, ci_level, ci_method, seed, device, bootstrap_metrics, title, weights, beyond,
):
    """Write an HTML calibration report: one self-contained file to send to a colleague.

    T is fitted on VAL_SCORES / VAL_LABELS (the validation set) and applied to TEST_SCORES /
    TEST_LABELS when given (else the report judges T on the validation set itself, and says so).
    The page holds the metrics before and after T with bootstrap intervals, the reliability
    diagrams before / after, ECE and NLL against T with the fitted T marked, the per-class ECE,
    the confidence histogram, the section "Beyond one number" (--no-beyond leaves it out), and the
    provenance: paths, sizes and SHA-256 of the inputs, N, K,
    the calib version and the date ($SOURCE_DATE_EPOCH when set: then two runs on the same inputs
    write the same bytes). Figures are inline SVG; the page loads nothing from the
    network and needs no JavaScript. Files as in `calib eval`; an existing FILE is never
    overwritten without --force. --weights weights the validation set (docs/weights.md): the fit, the
    curves and, without a test set, the metrics; "Beyond one number" takes no weights and is left out.

    \b
    Examples:
      calib report val_logits.npy val_labels.npy test_logits.npy test_labels.npy -o report.html
      calib report val_logits.npy val_labels.npy -o report.html           # no test set
      calib report val.npy val_y.npy test.npy test_y.npy -o report.html --bootstrap 0 --force
      calib report val.npz:logits val.npz:labels test.npz:logits test.npz:labels -o r.html --search nll
      calib report val_probs.csv val_y.csv test_probs.csv test_y.csv --probs -o r.html --title "ResNet-50"
      calib report val.parquet test.parquet --labels label -o r.html   # labels: a column of each file
      calib report val.npy val_y.npy -o r.html --weights val_w.npy      # importance weights
    """
    from ..report import build_report
    from ..report.core import report_time
    from ..report.html import render_html

    if label_col is None and test_scores is not None and test_labels is None:
        raise click.UsageError("a test set needs TEST_SCORES and TEST_LABELS (give four files, or two; or "
                               "--labels NAME when the labels are a column of each scores file)")
    pairs = pair_inputs((val_scores, val_labels, test_scores, test_labels), label_col,
                        "VAL_SCORES VAL_LABELS [TEST_SCORES TEST_LABELS]")
    if len(pairs) > 2:
        raise click.UsageError(f"give VAL_SCORES [TEST_SCORES] with --labels: got {len(pairs)} files")
    (val_scores, val_labels), (test_scores, test_labels) = pairs[0], (pairs[1] if len(pairs) == 2 else (None, None))
    if Path(output).suffix.lower() not in HTML_SUFFIXES:
        raise click.UsageError(f"-o {output}: the report is an HTML file; give a name ending in .html")
    grid = parse_grid(grid_text)
    check_device_use(device, n_resamples)
    check_resamples(n_resamples, ci_level, device)
    Outputs(force).report("--output", output).check()  # before any work
    created = report_time()  # $SOURCE_DATE_EPOCH when set (reproducible bytes); a malformed one fails here
    test = (test_scores, test_labels) if test_scores is not None else None
    _, validation, test_loaded = load_fit_and_test(val_scores, val_labels, test, input_kind, label_col)

    weight_array, weights_name = read_weights(weights, val_scores)
    inputs = [input_file("validation scores", val_scores), labels_file("validation labels", val_scores, val_labels,
                                                                        label_col)]
    if weights is not None and weights_name == weights:  # a file (a column of VAL_SCORES is in its hash)
        inputs.append(input_file("validation weights", weights))
    if test is not None:
        inputs += [input_file("test scores", test_scores), labels_file("test labels", test_scores, test_labels,
                                                                        label_col)]
    names = (val_scores, labels_name(val_scores, val_labels, label_col), test_scores or "test scores",
             labels_name(test_scores, test_labels, label_col) if test is not None else "test labels")
    with render.progress_bar("bootstrap", enabled=bool(n_resamples)) as progress:
        report = build_report(
            validation, None, test_loaded[1] if test_loaded else None, None,
            input_kind=input_kind, n_bins=n_bins, search=search, objective=objective, grid=grid,
            compat=compat, bootstrap=n_resamples, ci_level=ci_level, ci_method=ci_method, seed=seed,
            device=device, bootstrap_metrics=bootstrap_metrics, inputs=inputs, names=names, progress=progress,
            title=title or f"Calibration report: {test_scores or val_scores}", created=created, beyond=beyond,
            **({} if weights is None else dict(weights=weight_array, weights_name=weights_name)),
        )
    warnings = [cli_text(w) for w in report.warnings]
    # one line per cause, naming the metrics (before / after); then the metrics shown without an interval
    notes = interval_warnings_by_cause({"Pre T": report.before.intervals or {}, "Post T": report.after.intervals or {}})
    notes += render.missing_interval_notes(*((r.metrics, r.intervals or {}) for r in (report.before, report.after)))
    render.warn(warnings + notes)
    page = render_html(report, warnings=warnings, interval_notes=notes)
    from ..data.outputs import write_text

    written = write_text(output, page, force=force)
    render.stderr_console().print(
        f"Wrote {written} (T = {report.temperature:.4g}; {report.evaluated_on}-set ECE "
        f"{render.format_value('ece', report.before.metrics['ece'])} → "
        f"{render.format_value('ece', report.after.metrics['ece'])})",
        soft_wrap=True, markup=False,
    )
