"""``calib plot``: reliability diagrams (one model, before/after temperature, several models, classwise)."""

from __future__ import annotations

import re

import click

from ..calibrators import load_calibrator
from ..errors import InputError
from ..data.io import split_source
from ..data.predictions import resolve_input_kind
from ..plots.diagram import DEFAULT_DPI, STRATEGIES, MAX_CLASSWISE_CLASSES, escape_mathtext
from . import render
from .options import (
    PlainFloatRange,
    PlainIntRange,
    Outputs,
    FilePairCommand,
    ScoresThenLabels,
    calibrator_option,
    check_device,
    device_option,
    force_option,
    labels_name as name_labels,
    load_inputs,
    n_bins_option,
    name_option,
    output_option,
    read_inputs,
    read_weights,
    scores_and_labels,
    test_pair,
    title_option,
    weights_option,
)


def model_names(sources: list[str], names: tuple[str, ...]) -> list[str]:
    """``--name`` values, else each scores file's name without extension (its path when two clash)."""
    if names:
        if len(names) != len(sources):
            raise click.UsageError(f"got {len(names)} --name value(s) for {len(sources)} model(s)")
        return list(names)
    stems = []
    for source in sources:
        path, key = split_source(source)
        stems.append(f"{path.stem}:{key}" if key else path.stem)
    if len(set(stems)) < len(stems):
        return list(sources)
    return stems


def parse_classes(ctx, param, value: str | None) -> list[int] | None:
    """``--classes 0,3,7`` or ranges ``0-9,15`` → [0, 3, 7] (in the order given)."""
    if value is None:
        return None
    classes: list[int] = []
    for part in value.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part, re.ASCII)  # not ١٢: ASCII digits only
        if not match:
            raise click.BadParameter(f"{part!r} is not a class index or a range like 0-9", ctx, param)
        first, last = int(match[1]), int(match[2] if match[2] is not None else match[1])
        if last < first:
            raise click.BadParameter(f"range {part!r} runs backwards", ctx, param)
        if last - first >= MAX_CLASSWISE_CLASSES:
            raise click.BadParameter(f"range {part!r} holds more than {MAX_CLASSWISE_CLASSES} classes", ctx, param)
        classes.extend(range(first, last + 1))
    return classes


@click.command("plot", cls=FilePairCommand)
@scores_and_labels
@output_option("Figure file: .png, .svg or .pdf (by extension).", required=True)
@n_bins_option("Number of bins M.")
@click.option(
    "--strategy", type=click.Choice(STRATEGIES), default="uniform", show_default=True,
    help="uniform: equal-width bins (legend: ECE); quantile: equal-mass bins (legend: AdaECE).",
)
@calibrator_option(
    "Draw before / after calibration side by side: temperature T, or any fit saved by "
    "`calib fit -o FILE.json` or `calib temperature -o FILE.json` (any method: temperature, vector, isotonic, Dirichlet, …).",
    load=False,
)
@click.option(
    "--compare", cls=ScoresThenLabels, multiple=True, metavar="SCORES2 [LABELS2]",
    help="Another model to draw side by side (repeatable; same --probs as SCORES). With --labels: SCORES2 alone, "
    "its labels in that column.",
)
@name_option
@title_option
@click.option(
    "--overlay", is_flag=True,
    help="With --temperature or --compare: draw the models as curves on the same axes instead of side by side.",
)
@click.option(
    "--classwise", is_flag=True,
    help=f"A grid of per-class diagrams (p_k against [y = k]) for up to {MAX_CLASSWISE_CLASSES} classes "
    "(pick them with --classes).",
)
@click.option(
    "--classes", callback=parse_classes, metavar="LIST",
    help=f"With --classwise: the classes to draw, e.g. 0,3,7 or 0-9 (needed when K > {MAX_CLASSWISE_CLASSES}).",
)
@click.option(
    "--bin-intervals", "bin_intervals", metavar="LEVEL", default=None,
    type=PlainFloatRange(min=0, max=1, min_open=True, max_open=True),
    help="Draw each bin's Clopper–Pearson interval of the accuracy at LEVEL (e.g. 0.95). One model, equal-width bins.",
)
@click.option(
    "--consistency-bands", "consistency_bands", metavar="B", default=None, type=PlainIntRange(1, 100_000),
    help="Draw 90% consistency bands: where a calibrated model's accuracy per bin falls (Bröcker & Smith 2007, "
    "B resamples, seed 0). One model, equal-width bins.",
)
@click.option(
    "--corp", is_flag=True,
    help="Draw the CORP reliability curve: the PAV recalibration of the confidences, no bins (Dimitriadis et al. "
    "2021). One model, equal-width bins.",
)
@click.option(
    "--dpi", type=PlainIntRange(10, 2400), default=DEFAULT_DPI, show_default=True, help="Resolution of a PNG."
)
@device_option(
    "Where the metrics pass behind each diagram runs: cpu (numpy), cuda (torch on the GPU, float64, the "
    "scores moved in row chunks), auto (cuda when torch and a GPU are there), torch-cpu (the torch code on the CPU)."
)
@weights_option
@force_option
def plot_command(
    scores, labels, input_kind, label_col, output, n_bins, strategy, temperature_value, compare, names, title,
    classwise, overlay, classes, dpi, force, device, bin_intervals=None, consistency_bands=None, corp=False,
    weights=None,
):
    """Draw a reliability diagram of a model's saved outputs.

    Bars: accuracy per confidence bin; hatched red where the model is over-confident (mean
    confidence above accuracy), hatched blue where it is under-confident; the dashed diagonal is
    perfect calibration; the ECE is in the legend; under it, the share of samples per bin.

    With --temperature (or --calibrator), the diagram before and after scaling the logits by T,
    or after any saved calibration (Platt, vector scaling, isotonic, …), side by side; with --probs,
    T scales log p (p^(1/T), renormalised), as `calib eval --probs` does.
    With --compare, several models side by side. With --classwise, one panel per class.
    The output format follows FILE's extension (.png, .svg, .pdf); an existing FILE is never
    overwritten without --force.

    \b
    Examples:
      calib plot logits.npy labels.npy -o reliability.png
      calib plot logits.npy labels.npy -o reliability.pdf --strategy quantile --title "ResNet-50"
      calib plot logits.npy labels.npy -o before_after.png --temperature t.json
      calib plot logits.npy labels.npy -o before_after.png --temperature 1.5 --overlay
      calib plot logits.npy labels.npy -o vector.png --calibrator v.json   # `calib temperature --search vector -o v.json`
      calib plot ce.npy labels.npy --compare focal.npy labels.npy --name CE --name "Focal (γ=3)" -o cmp.svg
      calib plot logits.npy labels.npy --classwise -o classes.png
      calib plot logits.npy labels.npy --classwise --classes 0-4,7 -o classes.png   # K > 20: pick classes
      calib plot logits.npy labels.npy -o reliability.png --device cuda   # the pass on the GPU
      calib plot logits.npy labels.npy -o sure.png --bin-intervals 0.95 --consistency-bands 1000 --corp
      calib plot logits.npy labels.npy -o weighted.png --weights w.npy   # row i counts w_i times
    """
    from ..plots.diagram import (
        ReliabilityDiagram,
        before_after_figure,
        classwise_diagrams,
        classwise_figure,
        comparison_figure,
        overlay_figure,
        save_figure,
    )

    if temperature_value is not None and compare:
        raise click.UsageError("--temperature and --compare cannot be combined")
    if classwise and (compare or temperature_value is not None):
        raise click.UsageError("--classwise cannot be combined with --compare or --temperature")
    if overlay and not (compare or temperature_value is not None):
        raise click.UsageError("--overlay needs --temperature or --compare (several diagrams)")
    if classes is not None and not classwise:
        raise click.UsageError("--classes picks the panels of --classwise; add --classwise")
    if classwise and strategy != "uniform":
        raise click.UsageError("--classwise uses equal-width bins (as classwise-ECE); drop --strategy")
    uncertainty = bin_intervals is not None or consistency_bands is not None or corp
    if uncertainty and (compare or temperature_value is not None or classwise or strategy != "uniform"):
        raise click.UsageError("--bin-intervals, --consistency-bands and --corp draw on one model's equal-width "
                               "diagram: drop --compare, --temperature, --classwise and --strategy")
    if weights is not None and (compare or temperature_value is not None or classwise or uncertainty):
        raise click.UsageError("--weights draws one model's diagram: drop --compare, --temperature, --classwise, "
                               "--bin-intervals, --consistency-bands and --corp, or drop --weights")
    if weights is not None and device not in (None, "cpu"):
        raise click.UsageError("--weights runs on the CPU: drop --device")
    # every limit is checked before any work starts
    check_device(device)
    Outputs(force).figure("--output", output).check()
    calibrator = load_calibrator(temperature_value) if temperature_value is not None else None
    compare = [test_pair(pair, label_col, "--compare") for pair in compare]
    sources = [scores] + [pair[0] for pair in compare]
    model_names(sources, names)  # checks the --name count early
    found, label_array, labels_name = read_inputs(scores, labels, label_col)
    score_array = found.scores
    weight_array, weights_name = read_weights(weights, scores, getattr(found, "score_columns", None))
    others = [(*load_inputs(s, l, label_col)[:2], s, name_labels(s, l, label_col)) for s, l in compare]
    for other in others:  # every model's scores: never probabilities taken as logits
        resolve_input_kind(other[0], input_kind, other[2])
    input_kind = resolve_input_kind(score_array, input_kind, scores)
    names_ = [escape_mathtext(name) for name in model_names(sources, names)]  # shown literally ($ is not math)
    title = escape_mathtext(title)
    common = dict(input_kind=input_kind, n_bins=n_bins)

    if classwise:
        k = score_array.shape[1] if score_array.ndim == 2 else 2
        if classes is None and k > MAX_CLASSWISE_CLASSES:
            raise InputError(
                f"{scores}: --classwise draws at most {MAX_CLASSWISE_CLASSES} classes and the scores have "
                f"K = {k}: pick some with --classes, e.g. --classes 0-9 or --classes 0,3,7"
            )
        diagrams = classwise_diagrams(
            score_array, label_array, classes=classes, scores_name=scores, labels_name=labels_name, **common
        )
        fig = classwise_figure(diagrams, title=title or f"{names_[0]}: classwise reliability")
    elif calibrator is not None and calibrator.temperature is not None and input_kind != "probs":
        fig = before_after_figure(
            score_array, label_array, calibrator.temperature, n_bins=n_bins, strategy=strategy,
            title=title or names_[0], overlay=overlay, scores_name=scores, labels_name=labels_name,
        )
    elif calibrator is not None:  # any other map, or T on probabilities (p^(1/T), as `calib eval --probs`)
        def diagram(s_arr, label, kind=input_kind):
            return ReliabilityDiagram.from_predictions(
                s_arr, label_array, strategy=strategy, label=label, scores_name=scores, labels_name=labels_name,
                device=device, **{**common, "input_kind": kind},
            )

        before = diagram(score_array, "Before")  # validates the scores first
        after = calibrator.apply(score_array, input_kind, scores_name=scores, validate=False)
        diagrams = [before, diagram(after, f"After: {calibrator.label}", calibrator.result_kind(input_kind))]
        fig = (overlay_figure if overlay else comparison_figure)(diagrams, title=title or names_[0])
    elif uncertainty:  # one model with its uncertainty (calibrate_cli/plots/uncertainty.py)
        from ..plots.uncertainty import uncertainty_figure

        fig = uncertainty_figure(
            score_array, label_array, input_kind=input_kind, n_bins=n_bins, label=names_[0], title=title,
            interval_level=bin_intervals, band_resamples=consistency_bands, corp=corp, scores_name=scores,
            labels_name=labels_name, device=device,
        )[0]
    elif weight_array is not None:  # the weighted bins of evaluate (docs/weights.md)
        from ..evaluate import evaluate

        report = evaluate(score_array, label_array, weights=weight_array, scores_name=scores, labels_name=labels_name,
                          weights_name=weights_name, **common)
        diagram = ReliabilityDiagram.from_report(report, label=names_[0], strategy=strategy)
        fig = comparison_figure([diagram], title=title)
    else:
        diagrams = [
            ReliabilityDiagram.from_predictions(
                score_array, label_array, strategy=strategy, label=names_[0], scores_name=scores,
                labels_name=labels_name, device=device, **common,
            )
        ]
        for (s_arr, l_arr, s_name, l_name), name in zip(others, names_[1:]):
            diagrams.append(
                ReliabilityDiagram.from_predictions(
                    s_arr, l_arr, strategy=strategy, label=name, scores_name=s_name, labels_name=l_name,
                    device=device, **common,
                )
            )
        fig = (overlay_figure if overlay else comparison_figure)(diagrams, title=title)
    path = save_figure(fig, output, dpi=dpi, force=force)
    render.stderr_console().print(f"Wrote {path}", soft_wrap=True, markup=False)
