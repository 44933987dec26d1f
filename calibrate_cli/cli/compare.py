"""``calib compare``: paired difference B − A of every metric, with a paired-bootstrap interval."""

from __future__ import annotations

import click

from .._version import __version__
from ..bootstrap import DEFAULT_N_RESAMPLES
from . import render
from .options import (
    Outputs,
    binning_options,
    bootstrap_options,
    check_device_use,
    check_resamples,
    csv_options,
    labels_option,
    pair_inputs,
    interval_warnings,
    load_inputs,
    output_options,
    probs_option,
    read_weights,
    weights_label,
    weights_option,
)

PROGRESS_MIN_WORK = 10_000_000


def compare_payload(comparison, paths: dict, input_kind: str, boot: dict | None) -> dict:
    """The JSON document of ``calib compare`` (keys documented in docs/bootstrap.md)."""
    return {
        "calib_version": __version__,
        "command": "compare",
        "inputs": {**paths, "input_kind": input_kind or "logits"},
        "bootstrap": boot,
        **comparison.to_dict(),
        "warnings": _warnings(comparison),
    }


def _warnings(comparison) -> list[str]:
    """The interval warnings of the differences (also printed on stderr)."""
    return interval_warnings({n: d.interval for n, d in comparison.differences.items()}, prefix="B − A ")


def _verdict(d) -> str:
    if d.interval is None:
        return "—"
    return "yes" if d.significant else "no"


def _signed(name: str, value) -> str:
    text = render.format_value(name, value)
    return text if value is None or text.startswith("-") or text == "—" else "+" + text


#: the difference table on a terminal and in Markdown; the numbers never wrap (a narrow terminal wraps
#: the metric's name and the last heading instead), so that no value is broken across lines
COLUMNS = [
    render.Column("metric", justify="left", style="bold"),
    *(render.Column(header, no_wrap=True) for header in ("A", "B", "B − A", "interval of B − A")),
    render.Column("excludes 0", justify="center"),
]
#: the same in CSV: raw numbers (15 significant digits), the interval's ends apart
CSV_COLUMNS = [render.Column(h) for h in ("metric", "a", "b", "difference", "low", "high", "excludes_zero")]


def comparison_report(fmt: str, comparison, *, title: str | None = None):
    """The differences B − A in ``fmt``: a Rich table, Markdown or CSV (JSON is the payload)."""
    rows = []
    for name, d in comparison.differences.items():
        ci = d.interval
        if fmt == "csv":
            low, high = (ci.low, ci.high) if ci else (None, None)
            numbers = (render.csv_number(v) for v in (d.a, d.b, d.difference, low, high))
            rows.append([name, *numbers, "" if ci is None else d.significant])
        else:
            fmt_value = lambda v: render.format_value(name, v)  # noqa: E731
            rows.append([render.PRETTY_NAMES[name], fmt_value(d.a), fmt_value(d.b), _signed(name, d.difference),
                         render.interval_text(name, ci), _verdict(d)])
    intervals = {n: d.interval for n, d in comparison.differences.items()}
    differences = {n: d.difference for n, d in comparison.differences.items()}
    notes = () if fmt == "csv" else [*render.interval_notes(intervals),
                                     *render.missing_interval_notes((differences, intervals))]
    return render.render_rows(fmt, CSV_COLUMNS if fmt == "csv" else COLUMNS, rows, title=title, notes=notes)


@click.command("compare")
@click.argument("a_scores", metavar="A_LOGITS")
@click.argument("a_labels", metavar="[A_LABELS]", required=False)
@click.argument("b_scores", metavar="B_LOGITS", required=False)
@click.argument("b_labels", metavar="[B_LABELS]", required=False)
@probs_option("Both score files hold probabilities instead of logits.")
@binning_options
@csv_options
@labels_option()
@bootstrap_options(DEFAULT_N_RESAMPLES)
@weights_option
@output_options
def compare_command(
    a_scores, a_labels, b_scores, b_labels, input_kind, n_bins, compat, label_col, n_resamples, ci_level, ci_method, seed, device, bootstrap_metrics, fmt, output, force,
    weights=None,
):
    """Compare two models on the same samples: B − A for every metric, with paired intervals.

    A and B are two models' outputs on the same N samples (or one model before and after a
    temperature); their label files must hold the same labels in the same order. Each bootstrap
    resample draws the same samples for A and B, so the interval of the difference is much
    tighter than two separate intervals would suggest. "excludes 0" says whether the difference
    is significant at --ci-level. --bootstrap 0 prints the differences only.

    \b
    Examples:
      calib compare base_logits.npy labels.npy focal_logits.npy labels.npy
      calib compare a.npy y.npy b.npy y.npy --bootstrap 2000 --ci-level 0.95 --format json -o diff.json
      calib compare val_logits.npy y.npy val_logits_T.npy y.npy --ci-method percentile
      calib compare a.npy y.npy b.npy y.npy --bootstrap 10000 --device cuda
      calib compare a.csv b.csv --labels label --probs     # labels: a column of each file
      calib compare a.npy y.npy b.npy y.npy --weights w.npy   # the shared samples' weights
    """
    from ..bootstrap import compare
    from ..engine.devices import resolve_device

    check_device_use(device, n_resamples)
    check_resamples(n_resamples, ci_level, device)
    Outputs(force).report("--output", output).check()  # before any work
    pairs = pair_inputs((a_scores, a_labels, b_scores, b_labels), label_col, "A_LOGITS A_LABELS B_LOGITS B_LABELS")
    if len(pairs) != 2:
        given = sum(f is not None for f in (a_scores, a_labels, b_scores, b_labels))
        raise click.UsageError(
            f"compare takes two models: A_LOGITS A_LABELS B_LOGITS B_LABELS, or A_LOGITS B_LOGITS with --labels NAME "
            f"(the labels a column of each file); got {given} file(s)"
        )
    (a_scores, a_labels), (b_scores, b_labels) = pairs
    a, ya, a_labels_name = load_inputs(a_scores, a_labels, label_col)
    b, yb, b_labels_name = load_inputs(b_scores, b_labels, label_col)
    weight_array, weights_name = read_weights(weights, a_scores)
    if weight_array is not None:  # checked here so that the message names the file
        from ..metrics.weighted import check_weights

        weight_array = check_weights(weight_array, len(ya), name=weights_name)
    n = len(ya)
    with render.progress_bar("paired bootstrap", enabled=2 * n_resamples * n > PROGRESS_MIN_WORK) as progress:
        comparison = compare(
            a,
            ya,
            b,
            yb,
            input_kind=input_kind,
            n_resamples=n_resamples,
            level=ci_level,
            method=ci_method,
            seed=seed,
            n_bins=n_bins,
            compat=compat,
            progress=progress,
            metrics=bootstrap_metrics,
            names=(a_scores, b_scores),
            label_names=(a_labels_name, b_labels_name),
            device=device,
            weights=weight_array,
        )
    boot = None
    if n_resamples:
        boot = {"n_resamples": n_resamples, "level": ci_level, "method": ci_method, "seed": seed}
        boot["device"] = resolve_device(device)
    paths = {"a_scores": a_scores, "a_labels": a_labels_name, "b_scores": b_scores, "b_labels": b_labels_name}
    if weights is not None:
        paths["weights"] = weights_label(weights, a_scores)
    payload = compare_payload(comparison, paths, input_kind, boot)
    render.warn(payload["warnings"])
    if fmt == "json":
        rendered = render.to_json(payload)
    else:
        title = None
        if fmt == "table":
            title = f"B − A: A = {a_scores}, B = {b_scores}; N = {comparison.n}, K = {comparison.k}, {n_bins} bins"
            if weights is not None:
                title += f", weights {paths['weights']}"
            if boot:
                from ..bootstrap.intervals import method_label

                title += f"; {100 * ci_level:g}% paired {method_label(ci_method)} bootstrap, {n_resamples} resamples"
        rendered = comparison_report(fmt, comparison, title=title)
    render.write_report(rendered, output, force)
