"""``calib eval``: every calibration metric of a model's saved outputs, with CI gates."""

from __future__ import annotations


import click

from .._version import __version__
from ..evaluate import evaluate
from ..gates import check_gates
from . import render
from .hints import gate_option
from .options import (
    binning_options,
    bootstrap_options,
    calibrator_option,
    check_device_use,
    check_resamples,
    gate_on_option,
    interval_warnings,
    gate_options,
    load_inputs,
    Outputs,
    output_options,
    parse_gates,
    plot_option,
    scores_and_labels,
)

#: show a progress bar when B × N exceeds this (about a second of work)
PROGRESS_MIN_WORK = 20_000_000


def eval_payload(report, results, scores: str, labels: str, gate_on: str = "point") -> dict:
    """The JSON document of ``calib eval`` (keys documented in docs/json-schema.md and docs/bootstrap.md):
    the report's, with the gates, the CLI's --gate-on and the intervals' warnings added."""
    body = report.to_dict()
    body["gates"] = [r.to_dict() for r in results]
    if report.bootstrap is not None:
        body["bootstrap"] = report.bootstrap | {"gate_on": gate_on}
    body["warnings"] = list(body["warnings"]) + interval_warnings(report.intervals)
    return {
        "calib_version": __version__,
        "command": "eval",
        "inputs": {"scores": scores, "labels": labels, "input_kind": report.input_kind},
        **body,
    }


BINS_HEADING = "Reliability: equal-width bins (gap = confidence − accuracy)"


def render_report(
    report,
    payload: dict,
    fmt: str,
    *,
    console_width: int | None = None,
    intervals: dict | None = None,
    bins_csv: bool = False,
) -> str | list:
    """The report in ``fmt``: a JSON or CSV or Markdown string, or the Rich tables (metrics, then the
    per-bin reliability table). CSV holds one table: the metrics, or the bins with ``bins_csv``."""
    if fmt == "json":
        return render.to_json(payload)
    as_dicts = {n: ci.to_dict() for n, ci in (intervals or {}).items()} or None
    if fmt == "csv":
        if bins_csv:
            return render.bins_csv(report.bins.to_rows())
        return render.metrics_csv(report.metrics, intervals=as_dicts)
    if fmt == "markdown":
        return (
            render.metrics_markdown(report.metrics, intervals=as_dicts)
            + "\n"
            + render.bins_markdown(report.bins.to_rows(), heading=BINS_HEADING, first_closed=report.compat is None)
        )
    title = f"{payload['inputs']['scores']}: N = {report.n}, K = {report.k}, {report.n_bins} bins"
    if report.compat:
        title += f", compat {report.compat}"
    boot = payload.get("bootstrap")
    if boot:
        title += f"; {100 * boot['level']:g}% {boot['method']} bootstrap intervals, {boot['n_resamples']} resamples"
    return [
        render.metrics_table(report.metrics, title=title, intervals=as_dicts),
        render.bins_table(
            report.bins.to_rows(),
            title=BINS_HEADING,
            first_closed=report.compat is None,
        ),
    ]


@click.command("eval")
@scores_and_labels
@binning_options
@output_options
@gate_options
@plot_option("Also draw the reliability diagram to FILE (.png, .svg, .pdf; --force overwrites it).")
@calibrator_option(
    "Evaluate after calibration: at temperature T, softmax(logits / T) (with --probs: p^(1/T), "
    "renormalised), or any fit saved by `calib temperature -o FILE.json` (temperature, Platt, vector).",
    load=True,
)
@click.option(
    "--bins", "bins_csv", is_flag=True,
    help="With --format csv: write the per-bin table (bin, lower, upper, count, mean_confidence, accuracy, "
    "gap) instead of the metrics (a CSV holds one table; the other formats always include the bins).",
)
@bootstrap_options()
@gate_on_option
def eval_command(
    scores,
    labels,
    input_kind,
    label_col,
    n_bins,
    compat,
    fmt,
    output,
    force,
    fail_above,
    fail_below,
    plot_path,
    calibrator,
    bins_csv,
    n_resamples,
    ci_level,
    ci_method,
    seed,
    device,
    gate_on,
):
    """Report every calibration metric of a model's saved outputs.

    SCORES holds the model's outputs: an (N, K) array of logits (default) or probabilities
    (--probs), or a 1-D vector of binary scores. LABELS holds N integer labels in [0, K) or
    one-hot rows. Files: .npy, .npz (file.npz:key), .pt/.pth (file.pt:key, needs torch) and
    .csv (a header row is detected).

    Metrics: accuracy, error, ECE, AdaECE, classwise-ECE, MCE, NLL, Brier, top-5 accuracy,
    mean confidence and S99, as fractions; per-bin statistics are in the table and the JSON.

    Gates exit with code 1 and name each failed gate on stderr; bad input exits with code 2.

    --bootstrap B adds a confidence interval to every metric (B resamples of the N samples,
    equal-mass edges recomputed per resample); --gate-on upper|lower then gates an end of the
    interval instead of the point estimate (docs/bootstrap.md explains which to use in CI).

    \b
    Examples:
      calib eval logits.npy labels.npy
      calib eval probs.npy labels.npy --probs --n-bins 10
      calib eval outputs.npz:logits outputs.npz:labels --format json -o metrics.json
      calib eval preds.csv --label-col label --probs
      calib eval logits.npy labels.npy --compat focal-calibration
      calib eval logits.npy labels.npy --fail-above ece=0.02 --fail-below accuracy=0.9
      calib eval test_logits.npy test_labels.npy --temperature 1.5
      calib eval test_logits.npy test_labels.npy --temperature t.json   # from `calib temperature -o t.json`
      calib eval test_logits.npy test_labels.npy --calibrator v.json    # from `... --search vector -o v.json`
      calib eval logits.npy labels.npy --plot reliability.png
      calib eval logits.npy labels.npy --format csv --bins -o bins.csv   # the per-bin table
      calib eval logits.npy labels.npy --bootstrap 1000 --ci-level 0.95
      calib eval logits.npy labels.npy --bootstrap 1000 --device auto   # GPU via torch when there is one
      calib eval logits.npy labels.npy --bootstrap 1000 --gate-on lower --fail-above ece=0.02
    """
    if gate_on != "point" and not n_resamples:
        raise click.UsageError(f"--gate-on {gate_on} needs --bootstrap B (B > 0)")
    check_device_use(device, n_resamples)
    check_resamples(n_resamples, ci_level, device)
    gates = parse_gates(fail_above, fail_below)
    Outputs(force).report("--output", output).figure("--plot", plot_path).check()  # before any work
    score_array, label_array, labels_name = load_inputs(scores, labels, label_col)
    if calibrator is not None:
        score_array = calibrator.apply(score_array, input_kind, scores_name=scores)
        input_kind = calibrator.result_kind(input_kind)  # histogram binning, isotonic, …: probabilities
    with render.progress_bar(
        "bootstrap", enabled=n_resamples * len(label_array) > PROGRESS_MIN_WORK
    ) as progress:  # the data are validated and summarised once, for the metrics and their intervals
        report = evaluate(
            score_array,
            label_array,
            input_kind=input_kind,
            n_bins=n_bins,
            compat=compat,
            scores_name=scores,
            labels_name=labels_name,
            bootstrap=n_resamples,
            ci_level=ci_level,
            ci_method=ci_method,
            seed=seed,
            device=device,
            progress=progress,
        )
    intervals = report.intervals or None
    results = check_gates(report.metrics, gates, gated_on=gate_on, intervals=intervals)
    if plot_path:
        from ..plots import escape_mathtext, eval_figure, save_figure
        from .plot import model_names

        ece_ci = intervals.get("ece") if intervals else None
        interval = (ece_ci.low, ece_ci.high) if ece_ci else None
        figure = eval_figure(report, label=escape_mathtext(model_names([scores], ())[0]), interval=interval)
        written = save_figure(figure, plot_path, force=force)
        render.stderr_console().print(f"Wrote {written}", soft_wrap=True, markup=False)
    payload = eval_payload(report, results, scores, labels_name, gate_on)

    render.warn(report.warnings)
    render.warn(interval_warnings(intervals or {}))
    render.write_report(render_report(report, payload, fmt, intervals=intervals, bins_csv=bins_csv), output, force)

    failed = [r for r in results if not r.passed]
    if failed:
        err = render.stderr_console()
        for result in failed:
            err.print(f"[red]{render.plain(result.describe(gate_option))}[/red]", soft_wrap=True)
        click.get_current_context().exit(1)
