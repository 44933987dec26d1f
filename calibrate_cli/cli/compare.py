"""``calib compare``: paired difference B − A of every metric, with a paired-bootstrap interval."""

from __future__ import annotations

import csv
import io

import click
from rich.markup import escape
from rich.table import Table

from .._version import __version__
from ..bootstrap import DEFAULT_N_RESAMPLES
from . import render
from .options import binning_options, bootstrap_options, check_device_use, csv_options, load_inputs, output_options

PROGRESS_MIN_WORK = 10_000_000


def compare_payload(comparison, paths: dict, input_kind: str, boot: dict | None) -> dict:
    """The JSON document of ``calib compare`` (keys documented in docs/bootstrap.md)."""
    return {
        "calib_version": __version__,
        "command": "compare",
        "inputs": {**paths, "input_kind": input_kind},
        "bootstrap": boot,
        **comparison.to_dict(),
    }


def _rows(comparison):
    for name, d in comparison.differences.items():
        ci = d.interval
        yield name, d, ci


def _verdict(d) -> str:
    if d.interval is None:
        return "—"
    return "yes" if d.significant else "no"


def comparison_table(comparison, *, title: str) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("metric", style="bold")
    for col in ("A", "B", "B − A", "interval of B − A"):
        table.add_column(col, justify="right")
    table.add_column("excludes 0", justify="center")
    for name, d, ci in _rows(comparison):
        fmt = lambda v: render.format_value(name, v)  # noqa: E731
        interval = f"[{fmt(ci.low)}, {fmt(ci.high)}]" if ci else ""
        table.add_row(
            escape(render.PRETTY_NAMES[name]), fmt(d.a), fmt(d.b), _signed(name, d.difference), interval, _verdict(d)
        )
    return table


def _signed(name: str, value) -> str:
    text = render.format_value(name, value)
    return text if value is None or text.startswith("-") or text == "—" else "+" + text


def comparison_csv(comparison) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["metric", "a", "b", "difference", "low", "high", "excludes_zero"])
    for name, d, ci in _rows(comparison):
        writer.writerow(
            [name, d.a, d.b, d.difference, ci.low if ci else "", ci.high if ci else "", "" if ci is None else d.significant]
        )
    return buf.getvalue()


def comparison_markdown(comparison) -> str:
    lines = ["| metric | A | B | B − A | interval | excludes 0 |", "|---|---:|---:|---:|---:|:---:|"]
    for name, d, ci in _rows(comparison):
        fmt = lambda v: render.format_value(name, v)  # noqa: E731
        interval = f"[{fmt(ci.low)}, {fmt(ci.high)}]" if ci else ""
        lines.append(
            f"| {render.PRETTY_NAMES[name]} | {fmt(d.a)} | {fmt(d.b)} | {_signed(name, d.difference)} | {interval} | {_verdict(d)} |"
        )
    return "\n".join(lines) + "\n"


@click.command("compare")
@click.argument("a_scores", metavar="A_LOGITS")
@click.argument("a_labels", metavar="A_LABELS")
@click.argument("b_scores", metavar="B_LOGITS")
@click.argument("b_labels", metavar="B_LABELS")
@click.option(
    "--probs",
    "input_kind",
    flag_value="probs",
    default="logits",
    help="Both score files hold probabilities instead of logits.",
)
@binning_options
@csv_options
@bootstrap_options(DEFAULT_N_RESAMPLES)
@output_options
def compare_command(
    a_scores, a_labels, b_scores, b_labels, input_kind, n_bins, compat, n_resamples, ci_level, ci_method, seed, device, fmt, output, force
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
    """
    from ..bootstrap import compare, resolve_device

    check_device_use(device, n_resamples)
    a, ya, a_labels_name = load_inputs(a_scores, a_labels, None)
    b, yb, b_labels_name = load_inputs(b_scores, b_labels, None)
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
            names=(a_scores, b_scores),
            label_names=(a_labels_name, b_labels_name),
            device=device,
        )
    boot = None
    if n_resamples:
        boot = {"n_resamples": n_resamples, "level": ci_level, "method": ci_method, "seed": seed}
        boot["device"] = resolve_device(device)
    paths = {"a_scores": a_scores, "a_labels": a_labels_name, "b_scores": b_scores, "b_labels": b_labels_name}
    payload = compare_payload(comparison, paths, input_kind, boot)
    if fmt == "json":
        render.emit(render.to_json(payload), output, force)
    elif fmt == "csv":
        render.emit(comparison_csv(comparison), output, force)
    elif fmt == "markdown":
        render.emit(comparison_markdown(comparison), output, force)
    else:
        title = f"B − A: A = {a_scores}, B = {b_scores}; N = {comparison.n}, K = {comparison.k}, {n_bins} bins"
        if boot:
            title += f"; {100 * ci_level:g}% paired {ci_method} bootstrap, {n_resamples} resamples"
        table = comparison_table(comparison, title=title)
        if output:
            render.emit(render.tables_to_text([table]), output, force)
        else:
            render.render_tables(render.stdout_console(), [table])
