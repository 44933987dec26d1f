"""``calib plot``: reliability diagrams (one model, before/after temperature, several models, classwise)."""

from __future__ import annotations

import click

from ..io import load_temperature, split_source
from ..metrics import DEFAULT_N_BINS
from ..plots import DEFAULT_DPI, STRATEGIES, MAX_CLASSWISE_CLASSES, check_figure_path
from . import render
from .options import load_inputs, scores_and_labels


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


@click.command("plot")
@scores_and_labels
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), metavar="FILE",
    help="Figure file: .png, .svg or .pdf (by extension).",
)
@click.option(
    "--n-bins", type=click.IntRange(min=1), default=DEFAULT_N_BINS, show_default=True, help="Number of bins M."
)
@click.option(
    "--strategy", type=click.Choice(STRATEGIES), default="uniform", show_default=True,
    help="uniform: equal-width bins (legend: ECE); quantile: equal-mass bins (legend: AdaECE).",
)
@click.option(
    "--temperature", "temperature_value", metavar="T|FILE.json",
    help="Draw before / after temperature scaling side by side (T, or the JSON of calib temperature -o).",
)
@click.option(
    "--compare", nargs=2, multiple=True, metavar="SCORES2 LABELS2",
    help="Another model to draw side by side (repeatable; same --probs as SCORES).",
)
@click.option("--name", "names", multiple=True, metavar="NAME", help="Model name (repeatable, one per model).")
@click.option("--title", help="Figure title.")
@click.option(
    "--overlay", is_flag=True,
    help="With --temperature or --compare: draw the models as curves on the same axes instead of side by side.",
)
@click.option(
    "--classwise", is_flag=True,
    help=f"A grid of per-class diagrams (p_k against [y = k]) for up to {MAX_CLASSWISE_CLASSES} classes.",
)
@click.option(
    "--dpi", type=click.IntRange(10, 2400), default=DEFAULT_DPI, show_default=True, help="Resolution of a PNG."
)
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
def plot_command(
    scores, labels, input_kind, label_col, output, n_bins, strategy, temperature_value, compare, names, title,
    classwise, overlay, dpi, force,
):
    """Draw a reliability diagram of a model's saved outputs.

    Bars: accuracy per confidence bin; hatched red where the model is over-confident (mean
    confidence above accuracy), hatched blue where it is under-confident; the dashed diagonal is
    perfect calibration; the ECE is in the legend; under it, the share of samples per bin.

    With --temperature, the diagram before and after scaling the logits by T, side by side.
    With --compare, several models side by side. With --classwise, one panel per class.
    The output format follows FILE's extension (.png, .svg, .pdf); an existing FILE is never
    overwritten without --force.

    \b
    Examples:
      calib plot logits.npy labels.npy -o reliability.png
      calib plot logits.npy labels.npy -o reliability.pdf --strategy quantile --title "ResNet-50"
      calib plot logits.npy labels.npy -o before_after.png --temperature t.json
      calib plot logits.npy labels.npy -o before_after.png --temperature 1.5 --overlay
      calib plot ce.npy labels.npy --compare focal.npy labels.npy --name CE --name "Focal (γ=3)" -o cmp.svg
      calib plot logits.npy labels.npy --classwise -o classes.png
    """
    from ..plots import (
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
    if classwise and strategy != "uniform":
        raise click.UsageError("--classwise uses equal-width bins (as classwise-ECE); drop --strategy")
    if temperature_value is not None and input_kind == "probs":
        raise click.UsageError("--temperature scales logits; it cannot be used with --probs")
    # every limit is checked before any work starts
    check_figure_path(output, force=force)
    temperature = load_temperature(temperature_value) if temperature_value is not None else None
    sources = [scores] + [pair[0] for pair in compare]
    model_names(sources, names)  # checks the --name count early
    score_array, label_array, labels_name = load_inputs(scores, labels, label_col)
    others = [(*load_inputs(s, l, None)[:2], s, l) for s, l in compare]
    names_ = model_names(sources, names)
    common = dict(input_kind=input_kind, n_bins=n_bins)

    if classwise:
        diagrams = classwise_diagrams(score_array, label_array, scores_name=scores, labels_name=labels_name, **common)
        fig = classwise_figure(diagrams, title=title or f"{names_[0]}: classwise reliability")
    elif temperature is not None:
        fig = before_after_figure(
            score_array, label_array, temperature, n_bins=n_bins, strategy=strategy,
            title=title or names_[0], overlay=overlay, scores_name=scores, labels_name=labels_name,
        )
    else:
        diagrams = [
            ReliabilityDiagram.from_predictions(
                score_array, label_array, strategy=strategy, label=names_[0], scores_name=scores,
                labels_name=labels_name, **common,
            )
        ]
        for (s_arr, l_arr, s_name, l_name), name in zip(others, names_[1:]):
            diagrams.append(
                ReliabilityDiagram.from_predictions(
                    s_arr, l_arr, strategy=strategy, label=name, scores_name=s_name, labels_name=l_name, **common
                )
            )
        fig = (overlay_figure if overlay else comparison_figure)(diagrams, title=title)
    path = save_figure(fig, output, dpi=dpi, force=force)
    render.stderr_console().print(f"Wrote {path}", soft_wrap=True, markup=False)
