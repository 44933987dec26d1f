"""``calib eval --topk`` (top-k log-probabilities) and ``calib eval --sequences`` (generated answers):
options that :func:`topk_options` adds to ``calib eval``, and the thin shell that reads, evaluates and
renders (docs/topk.md)."""

from __future__ import annotations

import functools

import click

from .._version import __version__
from ..metrics.gates import check_gates
from . import render
from .options import Outputs, parse_gates

#: the options of ``calib eval`` that apply to --topk / --sequences (besides their own)
_COMMON = {"scores", "n_bins", "fmt", "output", "force", "fail_above", "fail_below"}
_TOPK = _COMMON | {"label_col", "topk", "topk_ids", "topk_logprobs", "label_logprob"}
_SEQUENCES = _COMMON | {"sequences", "sequence_id", "token_logprobs", "correct_col", "rule"}
_OWN = ("topk", "topk_ids", "topk_logprobs", "label_logprob", "sequences", "sequence_id", "token_logprobs",
        "correct_col", "rule")


def topk_options(command):
    """Add --topk, --topk-ids, --topk-logprobs, --label-logprob, --sequences, --sequence-id,
    --token-logprobs, --correct and --rule to ``command`` (``calib eval``); with --topk or --sequences
    the command's own work is replaced by :func:`run_topk` / :func:`run_sequences`."""
    from ..metrics.sequences import SEQUENCE_RULES

    @functools.wraps(command)
    def wrapped(*args, **kwargs):
        own = {name: kwargs.pop(name) for name in _OWN}
        if own["topk"] and own["sequences"]:
            raise click.UsageError("--topk and --sequences read different files: give one of them")
        if own["topk"]:
            return run_topk(**_only(kwargs | own, _TOPK, "--topk"))
        if own["sequences"]:
            return run_sequences(**_only(kwargs | own, _SEQUENCES, "--sequences"))
        for name in _OWN:
            if _given(name):
                raise click.UsageError(f"--{name.replace('_col', '').replace('_', '-')} needs --topk or --sequences")
        return command(*args, **kwargs)

    options = [
        click.option("--topk", is_flag=True, help="SCORES is a .parquet or .jsonl file of top-k log-probabilities "
                     "(an LLM's top_logprobs): list columns topk_ids and topk_logprobs (descending), an int label, "
                     "optionally label_logprob; the top-label metrics are exact, NLL needs every label's "
                     "log-probability, classwise-ECE and Brier are not available (docs/topk.md)."),
        click.option("--topk-ids", metavar="COLUMN", help="With --topk: the column of the top-k ids [topk_ids]."),
        click.option("--topk-logprobs", metavar="COLUMN",
                     help="With --topk: the column of their log-probabilities [topk_logprobs]."),
        click.option("--label-logprob", metavar="COLUMN", help="With --topk: the label's own log-probability "
                     "when it is outside the top k [label_logprob; absent or null: unknown]."),
        click.option("--sequences", is_flag=True, help="SCORES is a .parquet or .jsonl file of generated answers: "
                     "token log-probabilities grouped by a sequence id and each answer's correctness; reports "
                     "the calibration of answer correctness against the answer confidence (--rule)."),
        click.option("--sequence-id", metavar="COLUMN", help="With --sequences: the sequence id column [sequence_id]."),
        click.option("--token-logprobs", metavar="COLUMN",
                     help="With --sequences: the token log-probability column (a number a row, or a list of an "
                     "answer's tokens) [token_logprob]."),
        click.option("--correct", "correct_col", metavar="COLUMN",
                     help="With --sequences: the 0/1 correctness column [correct]."),
        click.option("--rule", type=click.Choice(SEQUENCE_RULES), default="product", show_default=True,
                     help="With --sequences: the answer confidence: product of token probabilities, their mean, "
                     "geometric mean, or minimum."),
    ]
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped


def _given(name: str) -> bool:
    from click.core import ParameterSource

    source = click.get_current_context().get_parameter_source(name)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _only(kwargs: dict, allowed: set[str], mode: str) -> dict:
    """``kwargs`` restricted to ``allowed``; a UsageError naming any other option given on the command line."""
    ctx = click.get_current_context()
    for param in ctx.command.params:
        if param.name not in allowed and param.name in kwargs and _given(param.name):
            what = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
            raise click.UsageError(f"{what} does not apply to {mode}")
    return {name: kwargs[name] for name in allowed if name in kwargs}


def _finish(report, payload: dict, tables: list, fmt: str, output, force: bool, gates) -> None:
    """Gates, the report in ``fmt``, warnings and the exit code (as ``calib eval``)."""
    results = check_gates(report.metrics, gates)
    payload["gates"] = [r.to_dict() for r in results]
    render.warn(report.warnings)
    if fmt == "json":
        rendered = render.to_json(payload)
    elif fmt == "csv":
        rendered = render.metrics_csv(report.metrics)
    elif fmt == "markdown":
        rendered = "\n".join(t if isinstance(t, str) else "" for t in tables)
    else:
        rendered = tables
    render.write_report(rendered, output, force)
    failed = [r for r in results if not r.passed]
    if failed:
        from .hints import gate_option

        err = render.stderr_console()
        for result in failed:
            err.print(f"[red]{render.plain(result.describe(gate_option))}[/red]", soft_wrap=True)
        click.get_current_context().exit(1)


BINS_HEADING = "Reliability: equal-width bins (gap = confidence − accuracy)"


def _tables(report, title: str, fmt: str, extra_rows=(), extra_title: str = "", notes=()) -> list:
    """The metrics, an extra table (top-k accuracy), and the bins, in the table or Markdown format."""
    columns = [render.Column("", justify="left", style="bold", no_wrap=True), render.Column("value", no_wrap=True),
               render.Column("note", justify="left", style="dim")]
    if fmt == "markdown":
        out = [render.metrics_markdown(report.metrics, heading=title)]
        if extra_rows or notes:
            out.append(render.render_rows("markdown", columns, extra_rows, title=extra_title, notes=notes))
        out.append(render.bins_markdown(report.bins.to_rows(), heading=BINS_HEADING))
        return out
    out = [render.metrics_table(report.metrics, title=title)]
    if extra_rows or notes:
        out.append(render.render_rows("table", columns, extra_rows, title=extra_title, notes=notes))
    out.append(render.bins_table(report.bins.to_rows(), title=BINS_HEADING))
    return out


def run_topk(*, scores, label_col, n_bins, fmt, output, force, fail_above, fail_below, topk, topk_ids,
             topk_logprobs, label_logprob):
    """``calib eval FILE --topk``: read, evaluate (:func:`~calibrate_cli.metrics.topk.evaluate_topk`), render."""
    from ..data.topk import read_topk
    from ..metrics.topk import evaluate_topk

    del topk
    gates = parse_gates(fail_above, fail_below)
    Outputs(force).report("--output", output).check()
    predictions = read_topk(scores, ids=topk_ids, logprobs=topk_logprobs, labels=label_col,
                            label_logprob=label_logprob)
    report = evaluate_topk(predictions, n_bins=n_bins, name=scores)
    payload = {"calib_version": __version__, "command": "eval",
               "inputs": {"scores": scores, "input_kind": "topk_logprobs"}, **report.to_dict()}
    title = f"{scores}: N = {report.n}, top k = {report.k}, {report.n_bins} bins (top-k log-probabilities)"
    rows = [[f"top-{j} accuracy", render.format_value("accuracy", v), ""] for j, v in report.topk_accuracy.items()]
    rows.append(["labels outside the top k", f"{report.labels_outside} of {report.n}", ""])
    rows += [[name, "not available", why] for name, why in report.unavailable.items()]
    tables = _tables(report, title, fmt, rows, "Top-k accuracy, and what the top k cannot give")
    _finish(report, payload, tables, fmt, output, force, gates)


def run_sequences(*, scores, n_bins, fmt, output, force, fail_above, fail_below, sequences, sequence_id,
                  token_logprobs, correct_col, rule):
    """``calib eval FILE --sequences``: answer confidences by ``rule``, then their calibration."""
    from ..data.topk import read_sequences
    from ..metrics.sequences import evaluate_answers, sequence_confidence

    del sequences
    gates = parse_gates(fail_above, fail_below)
    Outputs(force).report("--output", output).check()
    lp, ids, ok = read_sequences(scores, sequence_id=sequence_id, token_logprobs=token_logprobs, correct=correct_col)
    seq = sequence_confidence(lp, ids, rule, correct=ok, name=scores)
    report = evaluate_answers(seq.confidence, seq.correct, n_bins=n_bins, rule=rule, name=scores)
    payload = {"calib_version": __version__, "command": "eval",
               "inputs": {"scores": scores, "input_kind": "sequences", "tokens": int(lp.shape[0])}, **report.to_dict()}
    title = (f"{scores}: {report.n} answers ({int(lp.shape[0])} tokens), confidence = {rule} of token "
             f"probabilities, {n_bins} bins; accuracy = share of correct answers")
    tables = _tables(report, title, fmt)
    _finish(report, payload, tables, fmt, output, force, gates)


#: why calib fits no calibrator on top-k log-probabilities
TOPK_FIT_REFUSAL = (
    "--topk: calibrators are fitted on the full scores. A temperature (and every other map of the logits) "
    "renormalises over the whole vocabulary, which the top k log-probabilities do not hold, so a fit on "
    "them would not be the fit on the model's outputs (docs/topk.md); save the full logits to fit one"
)


def _refuse_topk(ctx, param, value):
    if value:
        raise click.UsageError(TOPK_FIT_REFUSAL, ctx=ctx)
    return value


#: ``--topk`` on ``calib temperature`` / ``calib fit``: refused, with the reason
refuse_topk_option = click.option(
    "--topk", is_flag=True, expose_value=False, is_eager=True, callback=_refuse_topk,
    help="Top-k log-probabilities cannot be calibrated exactly (no fit on them): docs/topk.md.",
)
