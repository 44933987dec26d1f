"""``calib temperature``: fit a temperature on a validation set, report before/after (docs/temperature.md)."""

from __future__ import annotations

import click

from .._version import __version__
from ..calibrators import CALIBRATORS
from ..evaluate import conventions
from ..data.outputs import write_array
from ..data.number_text import PLAIN_NUMBERS, lenient_only
from ..calibrators.temperature_fit import DEFAULT_GRID, OBJECTIVES, SEARCHES, fit_temperature, parse_grid
from . import render
from .hints import cli_text
from .topk import refuse_topk_option
from .prepost import before_after, load_fit_and_test, prepost_report
from .options import (
    FilePairCommand,
    Outputs,
    binning_options,
    check_device,
    csv_options,
    device_option,
    labels_option,
    labels_name,
    output_options,
    plot_option,
    probs_option,
    read_weights,
    test_pair,
    test_set_option,
    weights_option,
)

DEFAULT_GRID_TEXT = ":".join(f"{v:g}" for v in DEFAULT_GRID)
#: what `--plot` calls each search in the figure's title (from the calibrator registry)
PLOT_TITLES = {search: spec.title for cls in CALIBRATORS.values() for search, spec in cls.searches.items()}


def _fit_label(fit) -> str:
    return f"T = {fit.temperature:.4g}" if fit.temperature is not None else fit.search


def temperature_payload(fit, sets: dict, inputs: dict, input_kind: str, warnings: list[str],
                        device: str = "cpu") -> dict:
    """The JSON document of ``calib temperature`` (docs/cli-contract.md; keys documented in docs/temperature.md)."""
    return {
        "calib_version": __version__,
        "command": "temperature",
        "inputs": {**inputs, "input_kind": input_kind or "logits"},
        "n_bins": fit.n_bins,
        "conventions": conventions(fit.compat),
        "temperature": fit.temperature,
        "search": fit.search,
        "objective": fit.objective,
        **{name: {"before": dict(b.metrics), "after": dict(a.metrics)} for name, (b, a) in sets.items()},
        "calibration": fit.to_dict(),
        "warnings": warnings,
        "device": device,
    }


def _report(fmt: str, fit, sets: dict, title: str):
    """The Pre/Post table of ``calib temperature`` (:func:`prepost_report`)."""
    post = f"Post T ({fit.temperature:.4g})" if fit.temperature is not None else f"Post {fit.label}"
    return prepost_report(fmt, fit.calibrator, sets, title, post)


def _title(fit, val_scores: str) -> str:
    how = f"{fit.search} search" + (f" by {fit.objective}" if fit.search == "grid" else "")
    value = render.format_value(fit.objective, fit.objective_value)
    at_one = render.format_value(fit.objective, fit.objective_at_one)
    compat = f", compat {fit.compat}" if fit.compat else ""
    return (
        f"{fit.label} ({how}, {fit.n_bins} bins{compat}); fitting-set {fit.objective}: "
        f"{at_one} at T = 1 → {value}"
    )


#: how `calib report` and `calib table` fit T on each validation set (the searches of temperature scaling)
TEMPERATURE_SEARCHES = tuple(CALIBRATORS["temperature"].searches)


def objective_option(help: str = "What the grid search minimises on the validation set [default: ece]."):
    """--objective: the metric the grid of T minimises (temperature, report, table)."""
    return click.option("--objective", type=click.Choice(OBJECTIVES), default=None, help=help)


def grid_option(help: str = "Temperatures of the grid search: START, START+STEP, ... ≤ STOP (T > 0)."):
    """--grid START:STOP:STEP: the temperatures of the grid search (temperature, report, table)."""
    return click.option(
        "--grid", "grid_text", default=DEFAULT_GRID_TEXT, show_default=True, metavar="START:STOP:STEP", help=help,
        callback=_plain_grid,
    )


def _plain_grid(ctx, param, value):
    """--grid's numbers as calib reads numbers (``1_5`` is not 15); the rest is checked by parse_grid."""
    for part in (value or "").split(":"):
        if lenient_only(part):
            raise click.BadParameter(f"{part.strip()!r} is not a number ({PLAIN_NUMBERS})")
    return value


@click.command("temperature", cls=FilePairCommand)
@refuse_topk_option
@click.argument("val_scores", metavar="VAL_LOGITS")
@click.argument("val_labels", metavar="[VAL_LABELS]", required=False)
@click.option(
    "--search",
    type=click.Choice(SEARCHES),
    default="grid",
    show_default=True,
    help="; ".join(f"{search}: {spec.help}" for cls in CALIBRATORS.values() for search, spec in cls.searches.items())
    + ".",
)
@objective_option("What the grid search minimises on the fitting set [default: ece; the other searches: nll].")
@grid_option()
@binning_options
@csv_options
@labels_option()
@weights_option
@test_set_option("A held-out test set: report its metrics before/after the fitted T too.")
@probs_option("Scores are probabilities: fitted through log p (a probability of 0 stays 0 at every T).")
@output_options(
    output_help="Write the report to FILE ('-': stdout; t.json: reusable as `calib eval --temperature t.json`)."
)
@click.option("--save-logits", metavar="FILE.npy",
              help="Save the calibrated scores (the test set's if --test, else the fitting set's) as .npy: "
              "logits, or probabilities with --probs.")
@plot_option(
    "Draw the reliability diagrams before / after side by side (test set if --test, else the "
    "fitting set) to FILE (.png, .svg, .pdf)."
)
@device_option(
    "Where the fit's passes (the grid by ECE or NLL, the exact NLL fit) and the before/after metrics run: cpu (numpy), cuda (torch on the GPU, float64, the scores "
    "moved in row chunks), auto (cuda when torch and a GPU are there), torch-cpu (the torch code on the CPU). "
    "The same numbers to 1e-9; the JSON's \"device\" says where they ran."
)
@click.pass_context
def temperature_command(
    ctx, val_scores, val_labels, search, objective, grid_text, n_bins, compat, label_col, test, input_kind, fmt,
    output, save_logits, plot_path, force, device, weights=None,
):
    """Fit a temperature on a validation set and report the metrics before and after.

    VAL_LOGITS / VAL_LABELS: the fitting (validation) set, files as in `calib eval`. The
    temperature T divides the logits: p(T) = softmax(logits / T). It never changes the
    predictions, so never the accuracy. Fit on a validation set and judge on a test set (--test).

    The table is the paper's "Pre T / Post T (T)" comparison: every metric of `calib eval`
    before and after calibration, on the fitting set and on the test set.

    \b
    Examples:
      calib temperature val_logits.npy val_labels.npy --test test_logits.npy test_labels.npy
      calib temperature val_logits.npy val_labels.npy --search nll -o t.json
      calib eval test_logits.npy test_labels.npy --temperature t.json
      calib temperature val.npy val_y.npy --objective adaece --grid 0.05:5:0.05
      calib temperature val.npy val_y.npy --test test.npy test_y.npy --save-logits scaled.npy
      calib temperature val_scores.npy val_y.npy --search platt          # binary: σ(a·s + b)
      calib temperature val.npy val_y.npy --search vector -o v.json      # then: calib eval --calibrator v.json
      calib temperature val_probs.npy val_y.npy --probs --format json
      calib temperature val.npy val_y.npy --test test.npy test_y.npy --plot before_after.png
      calib temperature val.npy val_y.npy --test test.npy test_y.npy --device cuda   # metrics on the GPU
      calib temperature val.csv --labels label --test test.csv --probs   # labels: a column of each file
      calib temperature val.npy val_y.npy --search nll --weights val_w.npy   # weighted NLL (fitting set)
    """
    resolved = check_device(device)  # an unavailable device: one line, before any work
    grid = parse_grid(grid_text)
    outputs = Outputs(force).report("--output", output).array("--save-logits", save_logits)
    outputs.figure("--plot", plot_path).check()  # before any work
    test = test_pair(test, label_col)
    val_array, val_predictions, test_loaded = load_fit_and_test(val_scores, val_labels, test, input_kind, label_col)
    val_labels = labels_name(val_scores, val_labels, label_col)  # as the report names them
    weight_array, weights_name = read_weights(weights, val_scores)
    weighted = {} if weights is None else dict(weights=weight_array, weights_name=weights_name)

    with render.progress_bar(f"{search} search") as progress:
        fit = fit_temperature(
            val_predictions,  # validated when loaded
            None,
            search=search,
            objective=objective,
            grid=grid,
            n_bins=n_bins,
            compat=compat,
            progress=progress,
            input_kind=input_kind,
            scores_name=val_scores,
            labels_name=val_labels,
            device=device,
            **weighted,
        )

    warnings = [cli_text(w) for w in fit.warnings]  # remedies as flags, in the JSON too
    fit_before, fit_after, saved = before_after(
        fit, val_array, val_predictions, input_kind, n_bins, compat, val_scores,
        keep_scores=bool(save_logits) and test_loaded is None, device=device, **weighted,
    )
    sets = {"fit": (fit_before, fit_after)}
    inputs = {"fit": {"scores": val_scores, "labels": val_labels, "n": fit.n, "k": fit.k}
              | ({"weights": weights_name} if weights is not None else {})}
    reports = [fit_before, fit_after]
    if test_loaded is not None:
        test_before, test_after, saved = before_after(
            fit, *test_loaded, input_kind, n_bins, compat, test[0], keep_scores=bool(save_logits), device=device
        )
        sets["test"] = (test_before, test_after)
        inputs["test"] = {"scores": test[0], "labels": labels_name(*test, label_col), "n": test_before.n,
                          "k": test_before.k}
        reports += [test_before, test_after]
    for report in reports:
        warnings += [w for w in report.warnings if w not in warnings]

    payload = temperature_payload(fit, sets, inputs, input_kind, warnings, resolved)
    title = _title(fit, val_scores)
    render.warn(warnings)
    # with -o the report goes to FILE only, as in every command (docs/cli-contract.md)
    render.write_report(render.to_json(payload) if fmt == "json" else _report(fmt, fit, sets, title), output, force)

    if plot_path:
        from ..plots.diagram import ReliabilityDiagram, comparison_figure, escape_mathtext, save_figure

        which = "test" if "test" in sets else "fit"
        before, after = sets[which]
        diagrams = [  # the panel titles of `calib plot --temperature`
            ReliabilityDiagram.from_report(before, label="Before: T = 1" if fit.temperature is not None else "Before"),
            ReliabilityDiagram.from_report(after, label=f"After: {_fit_label(fit)}"),
        ]
        from .plot import model_names

        set_name = model_names([test[0] if which == "test" else val_scores], ())[0]
        figure = comparison_figure(diagrams, title=escape_mathtext(f"{set_name}: {PLOT_TITLES[search]}"))
        written = save_figure(figure, plot_path, force=force)
        render.stderr_console().print(f"Wrote {written}", soft_wrap=True, markup=False)

    if save_logits:
        write_array(save_logits, saved, force=force)
        which = "test" if test_loaded is not None else "fitting"
        kind = "probabilities" if input_kind == "probs" else "logits"
        render.stderr_console().print(
            f"Saved the calibrated {which}-set {kind} to {save_logits}", soft_wrap=True, markup=False
        )
