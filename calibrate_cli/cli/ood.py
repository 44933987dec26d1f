"""``calib ood``: AUROC of telling out-of-distribution samples from in-distribution ones (docs/ood.md)."""

from __future__ import annotations

import click

from .._version import __version__
from ..ood import OOD_SCORES, ood_auroc
from ..data.predictions import resolve_input_kind
from . import render
from .options import (
    Outputs,
    bootstrap_options,
    calibrator_option,
    check_resamples,
    csv_options,
    labels_option,
    interval_warnings,
    load_scores_only,
    output_options,
    probs_option,
)

#: the rows of the report: display name, what is measured, and the mean shown beside it
SCORE_ROWS = {
    "entropy": ("Entropy", "H(p) = −Σ_k p_k log p_k, higher = out of distribution", "entropy"),
    "confidence": ("Confidence", "max_k p_k, lower = out of distribution", "confidence"),
}


def _percent(value: float) -> str:
    return f"{100 * value:.2f} %"


def ood_payload(result, before, calibrator, inputs: dict, input_kind: str, warnings: list[str]) -> dict:
    """The JSON document of ``calib ood`` (keys documented in docs/ood.md)."""
    return {
        "calib_version": __version__,
        "command": "ood",
        "inputs": {**inputs, "input_kind": input_kind or "logits"},
        **result.to_dict(),
        "temperature": None if calibrator is None else calibrator.temperature,
        "calibration": None if calibrator is None else calibrator.to_dict(),
        "before": None if before is None else before.detection_dict(),
        "warnings": warnings,
    }


def render_ood(fmt: str, result, before, post_label: str | None, title: str):
    """The report in ``fmt`` (table, markdown, csv): one row per score."""
    intervals = result.intervals or {}
    if fmt == "csv":
        columns = ["score", "auroc", *(["low", "high"] if intervals else []), "fpr95", "aupr_in", "aupr_out",
                   "mean_in", "mean_out"]
        columns += ["auroc_before"] if before is not None else []
        rows = []
        for name in OOD_SCORES:
            means = result.mean_entropy if name == "entropy" else result.mean_confidence
            row = [name, render.csv_number(result.auroc[name])]
            if intervals:
                ci = intervals.get(name)
                row += [render.csv_number(ci.low), render.csv_number(ci.high)] if ci else ["", ""]
            row += [render.csv_number(result.fpr95[name]), render.csv_number(result.aupr_in[name]),
                    render.csv_number(result.aupr_out[name])]
            row += [render.csv_number(means[0]), render.csv_number(means[1])]
            if before is not None:
                row.append(render.csv_number(before.auroc[name]))
            rows.append(row)
        return render.render_rows("csv", [render.Column(c) for c in columns], rows)
    columns = [render.Column("score", justify="left", style="bold")]
    if before is not None:
        columns.append(render.Column("AUROC\nPre T"))
    columns.append(render.Column(f"AUROC\n{post_label}" if before is not None else "AUROC"))
    if intervals:
        columns.append(render.Column("interval"))
    columns += [render.Column("FPR95"), render.Column("AUPR\nin"), render.Column("AUPR\nout")]
    columns += [render.Column("mean in"), render.Column("mean out"),
                render.Column("definition", justify="left", style="dim", optional=True)]
    rows = []
    for name in OOD_SCORES:
        display, definition, _ = SCORE_ROWS[name]
        means = result.mean_entropy if name == "entropy" else result.mean_confidence
        row = [display]
        if before is not None:
            row.append(_percent(before.auroc[name]))
        row.append(_percent(result.auroc[name]))
        if intervals:
            ci = intervals.get(name)
            row.append(f"[{_percent(ci.clipped_low)}, {_percent(ci.clipped_high)}]{ci.marks}" if ci else "")
        row += [_percent(result.fpr95[name]), _percent(result.aupr_in[name]), _percent(result.aupr_out[name])]
        row += [f"{means[0]:.4f}", f"{means[1]:.4f}", definition]
        rows.append(row)
    return render.render_rows(fmt, columns, rows, title=title, notes=render.interval_notes(intervals))


@click.command("ood")
@click.argument("in_scores", metavar="IN_SCORES")
@click.argument("out_scores", metavar="OUT_SCORES")
@calibrator_option(
    "Score the samples after calibration: at temperature T, softmax(logits / T), or any fit saved by "
    "`calib temperature -o FILE.json`; the table shows the AUROCs before (Pre T) and after.",
    load=True,
)
@probs_option()
@csv_options
@labels_option(
    "CSV, Parquet, Arrow or Feather input: the labels are this column of each scores file (name or 0-based "
    "index); calib ood uses no labels, so this column is left out of the scores. E.g. calib ood test.csv "
    "ood.csv --labels label."
)
@output_options
@bootstrap_options(metrics_engine=False)
def ood_command(in_scores, out_scores, calibrator, input_kind, label_col, fmt, output, force, n_resamples, ci_level,
                ci_method, seed):
    """AUROC of telling out-of-distribution samples from in-distribution ones (the paper's Table 3).

    IN_SCORES: a model's outputs on its own test set; OUT_SCORES: the same model's outputs on
    samples of another distribution (e.g. SVHN for a CIFAR-10 model): (N, K) logits (default) or
    probabilities (--probs), or 1-D binary scores, in any file type of `calib eval`. No labels.

    Each sample's uncertainty is scored two ways: the entropy of its softmax, H(p) (higher: out
    of distribution), and its confidence, max_k p_k (lower: out of distribution). The AUROC is
    the probability that a random out-of-distribution sample is more uncertain than a random
    in-distribution one, ties counted half: the Mann–Whitney U / (n_in · n_out). 0.5 is chance,
    1 perfect separation. Beside it: FPR95, the share of out-of-distribution samples accepted at
    the threshold accepting 95 % of the in-distribution ones (the threshold's tie group accepted
    whole), and the average precisions AUPR-in (in-distribution samples as positives, scored by
    confidence or −entropy) and AUPR-out (out-of-distribution samples as positives). JSON keys:
    auroc_entropy, auroc_confidence, fpr95_*, aupr_in_*, aupr_out_* (docs/ood.md).

    --temperature scores the samples at T (the paper's "Post T"). --bootstrap B resamples each
    set on its own (stratified) and puts an interval on both AUROCs (the AUROCs only).

    \b
    Examples:
      calib ood cifar10_test_logits.npy svhn_logits.npy
      calib ood test_logits.npy ood_logits.npy --temperature 2.3
      calib ood test_logits.npy ood_logits.npy --temperature t.json --format json
      calib ood test_probs.npy ood_probs.npy --probs --format markdown
      calib ood test_logits.npy ood_logits.npy --bootstrap 1000 --seed 1 --ci-level 0.95
      calib ood test.parquet ood.parquet --labels label      # a labels column: not scores
    """
    check_resamples(n_resamples, ci_level, "cpu")
    Outputs(force).report("--output", output).check()  # before any work
    in_array, out_array = load_scores_only(in_scores, label_col), load_scores_only(out_scores, label_col)
    input_kind = resolve_input_kind(out_array, resolve_input_kind(in_array, input_kind, in_scores), out_scores)
    kind = input_kind
    before = None
    if calibrator is not None:
        names = dict(in_name=in_scores, out_name=out_scores)
        before = ood_auroc(in_array, out_array, input_kind=input_kind, **names)  # also validates both
        in_array = calibrator.apply(in_array, input_kind, scores_name=in_scores)
        out_array = calibrator.apply(out_array, input_kind, scores_name=out_scores)
        kind = calibrator.result_kind(input_kind)
    result = ood_auroc(
        in_array, out_array, input_kind=kind, in_name=in_scores, out_name=out_scores, bootstrap=n_resamples,
        ci_level=ci_level, ci_method=ci_method, seed=seed,
    )
    warnings = interval_warnings(result.intervals, prefix="AUROC ")
    inputs = {"in": {"scores": in_scores, "n": result.n_in}, "out": {"scores": out_scores, "n": result.n_out}}
    post_label = None
    if calibrator is not None:
        post_label = f"Post T ({calibrator.temperature:.4g})" if calibrator.temperature is not None else \
            f"Post {calibrator.label}"
    title = f"{in_scores} (in, N = {result.n_in}) vs {out_scores} (out, N = {result.n_out}), K = {result.k}"
    if result.bootstrap:
        boot = result.bootstrap
        title += (f"; {100 * boot['level']:g}% {boot['method']} stratified bootstrap intervals, "
                  f"{boot['n_resamples']} resamples")
    render.warn(warnings)
    if fmt == "json":
        payload = ood_payload(result, before, calibrator, inputs, input_kind, warnings)
        render.write_report(render.to_json(payload), output, force)
    else:
        render.write_report(render_ood(fmt, result, before, post_label, title), output, force)
