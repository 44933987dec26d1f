"""``calib eval``: every calibration metric of a model's saved outputs, with CI gates."""

from __future__ import annotations

import contextlib
import functools

import click

from .._version import __version__
from ..errors import InputError
from ..evaluate import evaluate
from ..metrics.gates import check_gates
from ..data.predictions import Predictions, as_predictions, resolve_input_kind
from . import render
from .diagnostics import check_diagnostics, compute_diagnostics, diagnostics_options, rendered_with
from .selective import (
    check_selective, compute_selective, draw_risk_coverage, rendered_with_selective, selective_options,
)
from .hints import gate_option
from .topk import topk_options
from .options import (
    extra_metrics_option,
    binning_options,
    bootstrap_options,
    calibration_record,
    calibration_text,
    calibrator_option,
    check_device,
    check_resamples,
    gate_on_option,
    interval_warnings,
    gate_options,
    Outputs,
    output_options,
    parse_gates,
    PlainFloatRange,
    plot_option,
    read_inputs,
    scores_and_labels,
    shard_inputs,
    read_weights,
    weights_label,
    weights_option,
)

#: show a progress bar when B × N exceeds this (about a second of work)
PROGRESS_MIN_WORK = 20_000_000


def columns_text(columns) -> str:
    """`` (scores: logit_0, logit_1, …, logit_9)`` for a report's title: the score columns read
    (0-based indices as ``columns 1, 2, …``), or nothing when the file has no columns."""
    if not columns:
        return ""
    shown = [str(c) for c in columns]
    if len(shown) > 4:
        shown = shown[:2] + ["…", shown[-1]]
    what = "scores" if isinstance(columns[0], str) else "score columns"
    return f" ({what}: {', '.join(shown)})"


def eval_payload(report, results, scores: str, labels: str, gate_on: str = "point", score_columns=None,
                 calibration: dict | None = None, weights: str | None = None) -> dict:
    """The JSON document of ``calib eval`` (keys documented in docs/json-schema.md and docs/bootstrap.md):
    the report's, with the gates, the CLI's --gate-on and the intervals' warnings added.
    ``score_columns``: the columns of a CSV or table file the scores were read from (inputs'
    ``score_columns``: names, or 0-based indices in a CSV file without a header). ``calibration``:
    what --temperature/--calibrator applied (:func:`~.options.calibration_record`), None without one.
    ``weights``: where --weights came from (inputs' ``weights``), None without them."""
    inputs = {"scores": scores, "labels": labels, "input_kind": report.input_kind}
    if score_columns is not None:
        inputs = {"scores": scores, "score_columns": list(score_columns), **inputs}
    if weights is not None:
        inputs["weights"] = weights
    body = report.to_dict()
    body["gates"] = [r.to_dict() for r in results]
    if report.bootstrap is not None:
        body["bootstrap"] = report.bootstrap | {"gate_on": gate_on}
    body["warnings"] = list(body["warnings"]) + interval_warnings(report.intervals)
    return {
        "calib_version": __version__,
        "command": "eval",
        "inputs": inputs,
        "calibration": calibration,
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
    calibration = payload.get("calibration")
    if fmt == "csv":  # a column saying what calibration produced the numbers, when one was applied
        constant = {"calibration": calibration_text(calibration, prefix="")} if calibration else None
        if bins_csv:
            return render.bins_csv(report.bins.to_rows(), constant=constant)
        return render.metrics_csv(report.metrics, intervals=as_dicts, constant=constant)
    if fmt == "markdown":
        heading = calibration_text(calibration, prefix="Calibrated: ") or None
        return (
            render.metrics_markdown(report.metrics, heading=heading, intervals=as_dicts)
            + "\n"
            + render.bins_markdown(report.bins.to_rows(), heading=BINS_HEADING, first_closed=report.compat is None)
        )
    inputs = payload["inputs"]
    title = f"{inputs['scores']}{columns_text(inputs.get('score_columns'))}: N = {report.n}, K = {report.k}, "
    title += f"{report.n_bins} bins"
    if report.total_weight is not None:
        title += f", weights summing to {report.total_weight:g}"
    if report.compat:
        title += f", compat {report.compat}"
    if calibration:
        title += f"; {calibration_text(calibration)}"
    boot = payload.get("bootstrap")
    if boot:
        from ..bootstrap.intervals import method_label

        title += f"; {100 * boot['level']:g}% {method_label(boot['method'])} bootstrap intervals, {boot['n_resamples']} resamples"
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
@weights_option
@binning_options
@output_options
@gate_options
@plot_option("Also draw the reliability diagram to FILE (.png, .svg, .pdf; --force overwrites it).")
@calibrator_option(
    "Evaluate after calibration: at temperature T, softmax(logits / T) (with --probs: p^(1/T), "
    "renormalised), or any fit saved by `calib fit -o FILE.json` or `calib temperature -o FILE.json` (any method: temperature, vector, isotonic, Dirichlet, …).",
    load=True,
)
@click.option(
    "--bins", "bins_csv", is_flag=True,
    help="With --format csv: write the per-bin table (bin, lower, upper, count, mean_confidence, accuracy, "
    "gap) instead of the metrics (a CSV holds one table; the other formats always include the bins).",
)
@bootstrap_options(whole_pass=True)
@gate_on_option
@extra_metrics_option
@diagnostics_options
@selective_options
@click.option(
    "--engine", type=click.Choice(["local", "dask"]), default="local", show_default=True,
    help="Where shard summaries are computed: here, or as Dask tasks (one per shard, each reading its own "
    "files) on a LocalCluster or on --scheduler's cluster; needs the [dask] extra.",
)
@click.option(
    "--scheduler", metavar="ADDRESS",
    help="With --engine dask: a running Dask scheduler (e.g. tcp://10.0.0.5:8786) instead of a LocalCluster; "
    "its workers must see the shard paths.",
)
@click.option(
    "--scheduler-timeout", metavar="SECONDS", type=PlainFloatRange(min=0, min_open=True, max=3600),
    default=None, help="With --scheduler: how long to wait for it to accept the connection, and then for its "
    "first answer (default 10).",
)
@topk_options
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
    bootstrap_metrics,
    gate_on,
    extra_metrics,
    engine,
    scheduler,
    scheduler_timeout,
    decompose=False,
    bin_intervals=None,
    calibration_test=None,
    fail_p_below=None,
    selective=False,
    risk_coverage_path=None,
    conformal_path=None,
    weights=None,
):
    """Report every calibration metric of a model's saved outputs.

    SCORES holds the model's outputs: an (N, K) array of logits (default) or probabilities
    (--probs), or a 1-D vector of binary scores. LABELS holds N integer labels in [0, K) or
    one-hot rows. Files: .npy, .npz (file.npz:key), .pt/.pth (file.pt:key, needs torch), .csv (a
    header row is detected), .parquet/.arrow/.feather, .safetensors, .h5/.hdf5 and .zarr
    (file:key; docs/inputs.md).

    Metrics: accuracy, error, ECE, AdaECE, classwise-ECE, MCE, RMS-CE, debiased L2-CE, KS-CE,
    SmoothECE, NLL, Brier, top-5 accuracy, mean confidence and S99, as fractions; per-bin
    statistics are in the table and the JSON. --metrics ace adds ACE.

    Gates exit with code 1 and name each failed gate on stderr; bad input exits with code 2.

    --bootstrap B adds a confidence interval to every metric (B resamples of the N samples,
    equal-mass edges recomputed per resample); --gate-on upper|lower then gates an end of the
    interval instead of the point estimate (docs/bootstrap.md explains which to use in CI).

    Shards: SCORES and LABELS may be quoted glob patterns or directories (their .npy files), paired
    by the numbers in their names (x_1 with y_01; a shard without a partner is an error); calib
    evaluates their concatenation by merging per-shard summaries (same numbers as one file).
    --engine dask runs one Dask task per shard.

    \b
    Examples:
      calib eval logits.npy labels.npy
      calib eval probs.npy labels.npy --probs --n-bins 10
      calib eval outputs.npz:logits outputs.npz:labels --format json -o metrics.json
      calib eval preds.csv --label-col label --probs
      calib eval preds.parquet --scores 'logit_*' --labels label   # also .arrow, .feather
      calib eval run.safetensors:logits run.safetensors:labels     # also run.h5:/eval/logits, run.zarr:logits
      calib eval logits.npy labels.npy --compat focal-calibration
      calib eval preds.parquet --topk                 # an LLM's top-k log-probabilities (also .jsonl)
      calib eval answers.jsonl --sequences --rule mean   # answers: token log-probs + correctness
      calib eval logits.npy labels.npy --fail-above ece=0.02 --fail-below accuracy=0.9
      calib eval test_logits.npy test_labels.npy --temperature 1.5
      calib eval test_logits.npy test_labels.npy --temperature t.json   # from `calib temperature -o t.json`
      calib eval test_logits.npy test_labels.npy --calibrator v.json    # from `... --search vector -o v.json`
      calib eval logits.npy labels.npy --plot reliability.png
      calib eval logits.npy labels.npy --format csv --bins -o bins.csv   # the per-bin table
      calib eval logits.npy labels.npy --bootstrap 1000 --ci-level 0.95
      calib eval logits.npy labels.npy --metrics ace          # also ACE (Nixon et al. 2019)
      calib eval logits.npy labels.npy --weights w.npy         # sample weights (w_i counts as w_i rows)
      calib eval logits.npy labels.npy --decompose             # Brier/log score = MCB − DSC + UNC (CORP)
      calib eval logits.npy labels.npy --bin-intervals 0.95    # Clopper–Pearson interval per bin
      calib eval logits.npy labels.npy --calibration-test 1000 --fail-p-below 0.05   # exit 1 if miscalibrated
      calib eval logits.npy labels.npy --selective --risk-coverage rc.png   # AURC, AUGRC, risk at a coverage
      calib eval test.npy test_y.npy --conformal sets.json     # from `calib conformal ... --save sets.json`
      calib eval logits.npy labels.npy --device cuda    # the metrics pass on the GPU (torch, float64)
      calib eval logits.npy labels.npy --bootstrap 1000 --device auto   # GPU via torch when there is one
      calib eval logits.npy labels.npy --bootstrap 1000 --gate-on lower --fail-above ece=0.02
      calib eval 'preds/x_*.npy' 'labels/y_*.npy'              # shards, quoted: calib expands them
      calib eval preds/ labels/ --engine dask                   # a Dask task per shard, LocalCluster
      calib eval 'preds/x_*.npy' 'labels/y_*.npy' --engine dask --scheduler tcp://head:8786
    """
    if gate_on != "point" and not n_resamples:
        raise click.UsageError(f"--gate-on {gate_on} needs --bootstrap B (B > 0)")
    check_device(device)  # an unavailable device is the first thing to fix
    check_resamples(n_resamples, ci_level, device)
    gates = parse_gates(fail_above, fail_below)
    if gates and extra_metrics != "all":  # a gated metric is computed even when it is not a default one
        extra_metrics = (*(extra_metrics or ()), *(g.metric for g in gates))
    Outputs(force).report("--output", output).figure("--plot", plot_path).check()  # before any work
    if scheduler and engine != "dask":
        raise click.UsageError("--scheduler needs --engine dask")
    if scheduler_timeout is not None and not scheduler:
        raise click.UsageError("--scheduler-timeout needs --scheduler")
    if engine == "dask" and n_resamples:
        raise click.UsageError(
            "--bootstrap resamples every sample on one machine: drop --engine dask to bootstrap the shards here"
        )
    sharded = shard_inputs(scores, labels, label_col, single=engine == "dask")
    check_diagnostics(decompose, calibration_test, fail_p_below, bin_intervals, fmt=fmt, sharded=sharded is not None,
                      bins_csv=bins_csv)
    conformal_fit = check_selective(selective, risk_coverage_path, conformal_path, fmt=fmt, sharded=sharded is not None,
                                    calibrator=calibrator, force=force)
    if weights is not None:
        _check_weights_use(sharded=sharded is not None, decompose=decompose, bin_intervals=bin_intervals,
                           calibration_test=calibration_test, selective=selective,
                           risk_coverage_path=risk_coverage_path, conformal_path=conformal_path)
    if sharded is not None and _optional_metrics(extra_metrics):
        raise click.UsageError(
            f"{', '.join(_optional_metrics(extra_metrics))} sorts every class's probabilities over all the samples, "
            "which shard summaries do not keep: evaluate one file (or drop it from --metrics)"
        )
    if sharded is not None:
        report, labels_name, score_columns = _eval_shards(
            *sharded, scores=scores, labels=labels, label_col=label_col, calibrator=calibrator, input_kind=input_kind,
            n_bins=n_bins, compat=compat, engine=engine, scheduler=scheduler, bootstrap=n_resamples,
            ci_level=ci_level, ci_method=ci_method, seed=seed, device=device, bootstrap_metrics=bootstrap_metrics,
            scheduler_timeout=scheduler_timeout,
        )
    else:
        report, labels_name, score_columns = _eval_file(
            scores, labels, label_col, calibrator=calibrator, input_kind=input_kind, n_bins=n_bins, compat=compat,
            n_resamples=n_resamples, ci_level=ci_level, ci_method=ci_method, seed=seed, device=device,
            bootstrap_metrics=bootstrap_metrics, extra_metrics=extra_metrics, weights=weights,
        )
    diagnostics = compute_diagnostics(
        report, decompose=decompose, calibration_test=calibration_test, fail_p_below=fail_p_below,
        bin_intervals=bin_intervals, scores=scores, labels=labels, label_col=label_col, calibrator=calibrator,
        input_kind=input_kind, n_bins=n_bins, seed=seed)
    extras = compute_selective(selective=selective, risk_coverage_path=risk_coverage_path, conformal_fit=conformal_fit,
                               conformal_path=conformal_path, scores=scores, labels=labels, label_col=label_col,
                               calibrator=calibrator, input_kind=input_kind)
    if risk_coverage_path:
        draw_risk_coverage(extras, risk_coverage_path, label=scores, force=force)
    _finish(report, scores, labels_name, gates, gate_on, plot_path, force, fmt, output, bins_csv, score_columns,
            calibration_record(calibrator), diagnostics, extras, weights_label(weights, scores))


def _optional_metrics(extra) -> list[str]:
    """The metrics of ``--metrics`` (and gates) that the default pass leaves out."""
    from ..metrics.registry import METRICS

    return [spec.name for spec in METRICS if not spec.by_default and (extra == "all" or spec.name in (extra or ()))]


def _check_weights_use(*, sharded, decompose, bin_intervals, calibration_test, selective, risk_coverage_path,
                       conformal_path) -> None:
    """--weights with what takes no sample weights: a usage error naming it (never silently unweighted)."""
    if sharded:
        raise click.UsageError("--weights takes one SCORES file, not shards: concatenate them, or drop --weights")
    unweighted = [flag for flag, on in (("--decompose", decompose), ("--bin-intervals", bin_intervals is not None),
                                        ("--calibration-test", calibration_test is not None),
                                        ("--selective", selective), ("--risk-coverage", risk_coverage_path),
                                        ("--conformal", conformal_path)) if on]
    if unweighted:
        raise click.UsageError(f"{', '.join(unweighted)} take(s) no sample weights: drop it or --weights")


def _eval_file(scores, labels, label_col, *, calibrator, input_kind, n_bins, compat, n_resamples, ci_level, ci_method,
               seed, device, bootstrap_metrics=None, extra_metrics=None, weights=None):
    """One SCORES file (and LABELS): load, calibrate, evaluate (``weights``: the --weights text, or None)."""
    if (calibrator is None and not n_resamples and not _optional_metrics(extra_metrics) and device in (None, "cpu")
            and weights is None):
        streamed = _streamed(scores, label_col, input_kind=input_kind, n_bins=n_bins, compat=compat, device=device,
                             extra_metrics=extra_metrics) if labels is None and label_col is not None else None
        if streamed is not None:
            return streamed[0], f"{scores}[{label_col}]", streamed[1]
    found, label_array, labels_name = read_inputs(scores, labels, label_col)
    score_array = found.scores
    weight_array, weights_name = read_weights(weights, scores, found.score_columns)
    if calibrator is not None:
        input_kind = resolve_input_kind(score_array, input_kind, scores)  # before the map hides what they are
        view = None
        if not n_resamples and not _optional_metrics(extra_metrics) and device in (None, "cpu"):
            # calibrated a row chunk at a time as the pass reads them: no (N, K) float64 copy written
            view = calibrator.apply_by_rows(as_predictions(score_array, label_array, input_kind, scores_name=scores,
                                                           labels_name=labels_name), scores_name=scores)
        if view is not None:
            score_array, input_kind = view, view.input_kind
        else:
            score_array = calibrator.apply(score_array, input_kind, scores_name=scores)
            input_kind = calibrator.result_kind(input_kind)  # histogram binning, isotonic, …: probabilities
    with render.progress_bar(
        "bootstrap", enabled=n_resamples * len(label_array) > PROGRESS_MIN_WORK
    ) as progress:  # the data are validated and summarised once, for the metrics and their intervals
        report = evaluate(
            score_array,
            None if isinstance(score_array, Predictions) else label_array,  # calibrated as read: labels inside
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
            bootstrap_metrics=bootstrap_metrics,
            metrics=extra_metrics,
            weights=weight_array,
            weights_name=weights_name or "weights",
        )
    return report, labels_name, found.score_columns


def _streamed(scores, label_col, *, input_kind, n_bins, compat, device, extra_metrics):
    """(report, score columns) of SCORES with its --labels column, its blocks streamed into the summary pass
    (calibrate_cli.engine.stream: the same numbers, no (N, K) array held), or None where the file is read
    whole: a type or CSV layout only the whole reader handles, or any problem in the file (the whole
    reader then gives its message, with row numbers counted over the whole file)."""
    from ..evaluate import report_from_summary
    from ..data.io import NotStreamed, stream_scores
    from ..engine.stream import RowCountMismatch, summarize_blocks

    from .options import csv_settings

    header, score_cols = csv_settings()
    labels_name = f"{scores}[{label_col}]"

    columns = []

    def summarise(sums_only: bool):
        found = stream_scores(scores, label_col=label_col, score_cols=score_cols, header=header)
        if found is None:
            return None
        n_hint, _, blocks = found
        columns[:] = [getattr(blocks, "score_columns", None)]
        return summarize_blocks(
            blocks, input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=scores, labels_name=labels_name,
            n_hint=n_hint, sums_only=sums_only and bool(n_hint),  # sums as evaluate keeps them, where N is known
        )

    try:
        try:
            summary = summarise(True)
        except RowCountMismatch:  # a CSV file's line count missed (odd blank lines): again, keeping the columns
            summary = summarise(False)
        if summary is None:
            return None
    except (InputError, NotStreamed):
        return None
    return report_from_summary(
        summary, input_kind=input_kind, n_bins=n_bins, scores_name=scores, metrics=extra_metrics, device=device,
        summary_device=device, consume=True,
    ), columns[0]


def _calibrated(pair, *, load, calibrator, input_kind):
    """One shard loaded, then calibrated (every calibrator maps each row on its own)."""
    scores, labels, scores_name, labels_name = load(pair)
    input_kind = resolve_input_kind(scores, input_kind, scores_name)  # before the map hides what they are
    return calibrator.apply(scores, input_kind, scores_name=scores_name), labels, scores_name, labels_name


def _eval_shards(pairs, load, *, scores, labels, label_col, calibrator, input_kind, n_bins, compat, engine, scheduler,
                 bootstrap, ci_level, ci_method, seed, device, bootstrap_metrics=None, scheduler_timeout=None):
    """Shards: summarise each (here or as Dask tasks), merge, report (calibrate_cli.engine.shards)."""
    from ..engine.shards import report_from_shards, summarize_shards

    if calibrator is not None:
        load = functools.partial(_calibrated, load=load, calibrator=calibrator, input_kind=input_kind)
        input_kind = calibrator.result_kind(input_kind)
    # the summary pass on --device (locally, without a bootstrap: see evaluate); Dask tasks on their workers' CPUs
    summary_device = None if (bootstrap or engine == "dask") else device
    options = dict(load=load, input_kind=input_kind, n_bins=n_bins, compat=compat, keep_predictions=bool(bootstrap))
    with render.progress_bar(f"{len(pairs)} shards", enabled=len(pairs) > 1) as progress:
        if engine == "dask":
            with _dask(scheduler, scheduler_timeout) as client:
                data = summarize_shards(pairs, client=client, progress=progress, **options)
        else:
            data = summarize_shards(pairs, progress=progress, device=summary_device, **options)
    with render.progress_bar("bootstrap", enabled=bootstrap * data.summary.n > PROGRESS_MIN_WORK) as progress:
        report = report_from_shards(
            data, n_bins=n_bins, scores_name=scores, bootstrap=bootstrap, ci_level=ci_level, ci_method=ci_method,
            seed=seed, device=device, progress=progress, bootstrap_metrics=bootstrap_metrics,
            summary_device=summary_device,
        )
    return report, labels if labels is not None else f"{scores}[{label_col}]", None


#: what `--engine dask` says when dask is missing
DASK_INSTALL = "pip install 'dask[distributed]>=2024.1' (or, in a checkout of calib, pip install '.[dask]')"


@contextlib.contextmanager
def _dask(scheduler: str | None, timeout: float | None = None):
    """A Dask client: on ``scheduler`` (waiting ``timeout`` seconds at most), or a LocalCluster in this
    process; one line when dask is missing, the address is not one, or the scheduler cannot be
    reached or does not answer."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise InputError(f"--engine dask needs dask[distributed], which is not installed: {DASK_INSTALL}") from None
    from ..engine.shards import dask_client

    stack = contextlib.ExitStack()
    stack.callback(_silence_dask_for_the_rest_of_the_process)
    try:
        client = stack.enter_context(dask_client(scheduler, timeout=timeout))
    except InputError as exc:  # an address distributed could not connect to (no port, file://, …)
        stack.close()
        raise InputError(f"--scheduler {scheduler}: {render.plain(str(exc))}") from None
    except (OSError, TimeoutError) as exc:
        stack.close()
        raise InputError(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({render.plain(str(exc))})") from None
    with stack:
        yield client


def _silence_dask_for_the_rest_of_the_process() -> None:
    """Leave distributed's, tornado's and asyncio's loggers off once the cluster is closed: the command
    is over, and what the cluster's threads leave behind (a future with an unread TimeoutError from a
    close that timed out on a loaded machine) can be finalised as late as interpreter exit, where its
    record would land on stderr after calib's own output (CI saw it once)."""
    from ..engine.shards import dask_loggers

    for logger in dask_loggers():
        logger.disabled = True


def _finish(report, scores, labels_name, gates, gate_on, plot_path, force, fmt, output, bins_csv, score_columns=None,
            calibration=None, diagnostics=None, extras=None, weights=None):
    """Gates, the figure, the report and the exit code (``calibration``: :func:`~.options.calibration_record`)."""
    intervals = report.intervals or None
    results = check_gates(report.metrics, gates, gated_on=gate_on, intervals=intervals)
    if plot_path:
        from ..plots.diagram import escape_mathtext, eval_figure, save_figure
        from .plot import model_names

        ece_ci = intervals.get("ece") if intervals else None
        interval = (ece_ci.clipped_low, ece_ci.clipped_high) if ece_ci else None  # as the table shows it
        label = model_names([scores], ())[0] + (f" ({calibration_text(calibration)})" if calibration else "")
        figure = eval_figure(report, label=escape_mathtext(label), interval=interval)
        written = save_figure(figure, plot_path, force=force)
        render.stderr_console().print(f"Wrote {written}", soft_wrap=True, markup=False)
    payload = eval_payload(report, results, scores, labels_name, gate_on, score_columns, calibration, weights)
    if diagnostics is not None:  # --decompose, --bin-intervals, --calibration-test (cli/diagnostics.py)
        payload.update(diagnostics.payload())
    if extras is not None:  # --selective, --conformal (cli/selective.py)
        payload.update(extras.payload())

    render.warn(report.warnings)
    render.warn(interval_warnings(intervals or {}))
    rendered = render_report(report, payload, fmt, intervals=intervals, bins_csv=bins_csv)
    if diagnostics is not None:
        rendered = rendered_with(rendered, diagnostics, fmt, report=report, payload=payload, bins_csv=bins_csv)
    if extras is not None:
        rendered = rendered_with_selective(rendered, extras, fmt)
    render.write_report(rendered, output, force)

    failed = [r for r in results if not r.passed]
    test_failure = diagnostics.failure() if diagnostics is not None else None
    if failed or test_failure:
        err = render.stderr_console()
        for result in failed:
            err.print(f"[red]{render.plain(result.describe(gate_option))}[/red]", soft_wrap=True)
        if test_failure:
            err.print(f"[red]{render.plain(test_failure)}[/red]", soft_wrap=True)
        click.get_current_context().exit(1)
