"""``calib eval``: every calibration metric of a model's saved outputs, with CI gates."""

from __future__ import annotations


import click

from .._version import __version__
from ..evaluate import evaluate
from ..gates import check_gates
from ..io import load_temperature
from ..temperature import scale_scores
from . import render
from .options import binning_options, gate_options, load_inputs, output_options, parse_gates, scores_and_labels


def eval_payload(report, results, scores: str, labels: str) -> dict:
    """The JSON document of ``calib eval`` (keys documented in docs/json-schema.md)."""
    body = report.to_dict()
    body["gates"] = [r.to_dict() for r in results]
    return {
        "calib_version": __version__,
        "command": "eval",
        "inputs": {"scores": scores, "labels": labels, "input_kind": report.input_kind},
        **body,
    }


def render_report(report, payload: dict, fmt: str, *, console_width: int | None = None) -> str | list:
    if fmt == "json":
        return render.to_json(payload)
    if fmt == "csv":
        return render.metrics_csv(report.metrics)
    if fmt == "markdown":
        return render.metrics_markdown(report.metrics)
    title = f"{payload['inputs']['scores']}: N = {report.n}, K = {report.k}, {report.n_bins} bins"
    if report.compat:
        title += f", compat {report.compat}"
    return [
        render.metrics_table(report.metrics, title=title),
        render.bins_table(
            report.bins.to_rows(),
            title="Reliability: equal-width bins (gap = confidence − accuracy)",
            first_closed=report.compat is None,
        ),
    ]


@click.command("eval")
@scores_and_labels
@binning_options
@output_options
@gate_options
@click.option(
    "--plot", "plot_path", type=click.Path(dir_okay=False), metavar="FILE",
    help="Also draw the reliability diagram to FILE (.png, .svg, .pdf; --force overwrites it).",
)
@click.option(
    "--temperature",
    metavar="T|t.json",
    callback=lambda ctx, param, value: None if value is None else load_temperature(value),
    help="Evaluate at temperature T: softmax(logits / T) (with --probs: p^(1/T), renormalised). "
    "A number or the JSON written by `calib temperature -o t.json`.",
)
def eval_command(
    scores, labels, input_kind, label_col, n_bins, compat, fmt, output, force, fail_above, fail_below, plot_path,
    temperature,
):
    """Report every calibration metric of a model's saved outputs.

    SCORES holds the model's outputs: an (N, K) array of logits (default) or probabilities
    (--probs), or a 1-D vector of binary scores. LABELS holds N integer labels in [0, K) or
    one-hot rows. Files: .npy, .npz (file.npz:key), .pt/.pth (file.pt:key, needs torch) and
    .csv (a header row is detected).

    Metrics: accuracy, error, ECE, AdaECE, classwise-ECE, MCE, NLL, Brier, top-5 accuracy,
    mean confidence and S99, as fractions; per-bin statistics are in the table and the JSON.

    Gates exit with code 1 and name each failed gate on stderr; bad input exits with code 2.

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
      calib eval logits.npy labels.npy --plot reliability.png
    """
    gates = parse_gates(fail_above, fail_below)
    if plot_path:
        from ..plots import check_figure_path

        check_figure_path(plot_path, force=force)
    score_array, label_array, labels_name = load_inputs(scores, labels, label_col)
    score_array = score_array if temperature is None else scale_scores(score_array, temperature, input_kind, scores_name=scores)
    report = evaluate(
        score_array,
        label_array,
        input_kind=input_kind,
        n_bins=n_bins,
        compat=compat,
        scores_name=scores,
        labels_name=labels_name,
    )
    results = check_gates(report.metrics, gates)
    if plot_path:
        from ..plots import eval_figure, save_figure

        save_figure(eval_figure(report, label=scores), plot_path, force=force)
    payload = eval_payload(report, results, scores, labels_name)

    render.warn(report.warnings)
    rendered = render_report(report, payload, fmt)
    if isinstance(rendered, list):
        if output:
            render.emit(render.tables_to_text(rendered), output, force)
        else:
            render.render_tables(render.stdout_console(), rendered)
    else:
        render.emit(rendered, output, force)

    failed = [r for r in results if not r.passed]
    if failed:
        err = render.stderr_console()
        for result in failed:
            err.print(f"[red]{result.describe()}[/red]", soft_wrap=True)
        click.get_current_context().exit(1)
