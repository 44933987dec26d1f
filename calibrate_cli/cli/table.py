"""``calib table``: the paper's Table 1 — several models, Pre T / Post T (T) (docs/table.md)."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import click

from .._version import __version__
from ..errors import InputError
from ..evaluate import conventions
from ..data.io import split_source
from ..training.paper_table import TABLE_METRICS, model_row
from ..calibrators.temperature_fit import OBJECTIVES, parse_grid
from . import render
from .hints import cli_text
from .options import (
    FORMATS,
    SUFFIX_FORMATS,
    Outputs,
    binning_options,
    csv_options,
    labels_name,
    labels_option,
    name_option,
    output_options,
    probs_option,
)
from .prepost import load_fit_and_test
from .temperature import TEMPERATURE_SEARCHES, grid_option, objective_option

#: the four files of a run folder of `calib train`, in the order of a group on the command line
RUN_FILES = ("val_logits.npy", "val_labels.npy", "test_logits.npy", "test_labels.npy")
#: column headings of the paper's metrics, from the metric registry (fractions shown in %)
HEADINGS = {metric: render.PRETTY_NAMES[metric] for metric in TABLE_METRICS}
PERCENT = render.PERCENT_METRICS
#: the error (T never changes it: one column) and the metric whose Post-T cell carries T in LaTeX
ERROR, ECE = TABLE_METRICS[0], TABLE_METRICS[1]
#: the temperature searches of `calib temperature` (the calibrator registry's)


def group_inputs(items: tuple[str, ...], label_col: str | None = None) -> list[tuple[str, tuple]]:
    """The models on the command line: each a (default name, (val scores, val labels, test scores,
    test labels)), from a group of four files (with ``--labels`` ``label_col``: two, VAL_SCORES TEST_SCORES,
    the labels None) or a run folder of `calib train` (its ``RUN_FILES``).
    A problem is one line (:class:`~calibrate_cli.errors.InputError`)."""
    per_model = 4 if label_col is None else 2
    if not items:
        raise InputError(
            "no models: give VAL_SCORES VAL_LABELS TEST_SCORES TEST_LABELS for each model, "
            "or a run folder of calib train"
        )
    models, pending = [], []
    for item in items:
        path, _ = split_source(item)
        if path.is_dir():
            if pending:
                raise InputError(_incomplete(pending, before=item, per_model=per_model))
            missing = [f for f in RUN_FILES if not (path / f).is_file()]
            if missing:
                raise InputError(
                    f"{item}: not a run folder of calib train: it lacks {', '.join(missing)} "
                    f"(a run folder holds {', '.join(RUN_FILES)})"
                )
            models.append((item, tuple(str(path / f) for f in RUN_FILES)))
        else:
            pending.append(item)
            if len(pending) == per_model:
                models.append((None, tuple(pending) if per_model == 4 else (pending[0], None, pending[1], None)))
                pending = []
    if pending:
        raise InputError(_incomplete(pending, per_model=per_model))
    return _named(models)


def _incomplete(pending: list[str], before: str | None = None, per_model: int = 4) -> str:
    for item in pending:  # a mistyped run folder or file: say that first, not "do not make a model"
        path, _ = split_source(item)
        if not os.path.lexists(path) and not glob.has_magic(item):
            return f"{item}: no such file or run folder"
    where = f" before the run folder {before}" if before else " at the end"
    group = ("four files VAL_SCORES VAL_LABELS TEST_SCORES TEST_LABELS" if per_model == 4
             else "two files VAL_SCORES TEST_SCORES (with --labels)")
    return (
        f"{len(pending)} file(s){where} ({' '.join(pending)}) do not make a model: each model is {group}, "
        "or a run folder of calib train"
    )


def _named(models) -> list:
    """Default names: a run folder's name; for four files, the test scores file's name without
    extension. When two models would share a name: the folder and that name; then the path."""
    def stem(source: str) -> str:
        path, key = split_source(source)
        return f"{path.stem}:{key}" if key else path.stem

    def short(folder, files):
        return Path(folder).resolve().name if folder is not None else stem(files[2])

    def longer(folder, files):
        if folder is not None:
            return "/".join(Path(folder).resolve().parts[-2:])
        return f"{split_source(files[2])[0].resolve().parent.name}/{stem(files[2])}"

    def full(folder, files):
        return folder if folder is not None else files[2]

    for naming in (short, longer, full):
        names = [naming(folder, files) for folder, files in models]
        if len(set(names)) == len(names):
            break
    return [(name, files) for name, (_, files) in zip(names, models)]


def _cell(metric: str, value) -> str:
    if value is None:
        return "—"
    if value == float("inf"):
        return "inf"
    return f"{100 * value:.2f}" if metric in PERCENT else f"{value:.4f}"


def _heading(metric: str) -> str:
    return HEADINGS[metric] + (" (%)" if metric in PERCENT else "")


def render_table(fmt: str, rows, title: str):
    """The table in ``fmt``: markdown (rows = models; Error once, since T never changes it; then
    "Pre T / Post T" of ECE, AdaECE, Classwise-ECE and NLL; T), a terminal table (a Pre T and a
    Post T (T) line per model, to fit 80 columns), csv (one column each, exact values), latex
    (:func:`latex_table`)."""
    if fmt == "latex":
        return latex_table(rows, title)
    if fmt == "csv":
        columns = ["model", "temperature", ERROR]
        columns += [f"{m}_{when}" for m in TABLE_METRICS[1:] for when in ("pre", "post")]
        out = []
        for row in rows:
            values = row.values()
            cells = [row.name, repr(row.temperature), render.csv_number(values[ERROR][0])]
            cells += [render.csv_number(v) for m in TABLE_METRICS[1:] for v in values[m]]
            out.append(cells)
        return render.render_rows("csv", [render.Column(c) for c in columns], out)
    if fmt == "markdown":  # one row per model, "Pre T / Post T" in each cell
        columns = [render.Column("model", justify="left"), render.Column("Error")]
        columns += [render.Column(f"{HEADINGS[m]} Pre T / Post T") for m in TABLE_METRICS[1:]]
        columns.append(render.Column("T"))
        out = []
        for row in rows:
            values = row.values()
            cells = [row.name, _cell(ERROR, values[ERROR][0])]
            cells += [f"{_cell(m, values[m][0])} / {_cell(m, values[m][1])}" for m in TABLE_METRICS[1:]]
            out.append([*cells, f"{row.temperature:.4g}"])
        return render.render_rows(fmt, columns, out, title=title)
    # a terminal: two lines per model, Pre T and Post T (T), so that the table fits 80 columns
    columns = [render.Column("model", justify="left", style="bold"), render.Column("", justify="left", no_wrap=True)]
    columns += [render.Column(HEADINGS[m], no_wrap=True) for m in TABLE_METRICS]
    out = []
    for row in rows:
        values = row.values()
        out.append([row.name, "Pre T", *(_cell(m, values[m][0]) for m in TABLE_METRICS)])
        out.append(["", f"Post T ({row.temperature:.4g})", *(_cell(m, values[m][1]) for m in TABLE_METRICS)])
    return render.render_rows(fmt, columns, out, title=title)


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    """``text`` as LaTeX text: the ten special characters escaped (``resnet_50`` → ``resnet\\_50``)."""
    return "".join(_LATEX_SPECIAL.get(c, c) for c in str(text))


def latex_table(rows, title: str) -> str:
    """A booktabs tabular (``\\usepackage{booktabs}``): the paper's layout, each metric's Pre T and
    Post T side by side and T in parentheses after the Post-T ECE, as in Table 1 of Mukhoti et al."""
    spec = "l" + "r" + "rr" * (len(TABLE_METRICS) - 1)
    lines = [f"% {latex_escape(title)}", f"% calib {__version__}: calib table", r"\begin{tabular}{" + spec + "}",
             r"\toprule"]
    head = ["Model", _latex_heading(ERROR)]
    rules = []
    for i, metric in enumerate(TABLE_METRICS[1:]):
        head.append(r"\multicolumn{2}{c}{" + _latex_heading(metric) + "}")
        rules.append(rf"\cmidrule(lr){{{3 + 2 * i}-{4 + 2 * i}}}")
    lines.append(" & ".join(head) + r" \\")
    lines.append(" ".join(rules))
    lines.append(" & ".join(["", ""] + ["Pre T", "Post T"] * (len(TABLE_METRICS) - 1)) + r" \\")
    lines.append(r"\midrule")
    for row in rows:
        values = row.values()
        cells = [latex_escape(row.name), _cell(ERROR, values[ERROR][0])]
        for metric in TABLE_METRICS[1:]:
            post = _cell(metric, values[metric][1])
            if metric == ECE:
                post += f" ({row.temperature:.4g})"
            cells += [_cell(metric, values[metric][0]), post]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def _latex_heading(metric: str) -> str:
    return HEADINGS[metric] + (r" (\%)" if metric in PERCENT else "")


def table_payload(rows, models, input_kind: str, n_bins: int, compat, warnings: list[str]) -> dict:
    """The JSON document of ``calib table`` (keys documented in docs/table.md)."""
    return {
        "calib_version": __version__,
        "command": "table",
        "input_kind": input_kind or "logits",
        "n_bins": n_bins,
        "conventions": conventions(compat),
        "metrics": list(TABLE_METRICS),
        "models": [
            {**row.to_dict(), "inputs": dict(zip(("val_scores", "val_labels", "test_scores", "test_labels"), files))}
            for row, (_, files) in zip(rows, models)
        ],
        "warnings": warnings,
    }


@click.command("table")
@click.argument("inputs", nargs=-1, metavar="VAL_SCORES VAL_LABELS TEST_SCORES TEST_LABELS [...] | RUN_DIR ...")
@name_option
@click.option(
    "--search", type=click.Choice(TEMPERATURE_SEARCHES), default="grid", show_default=True,
    help="How T is fitted on each validation set, as `calib temperature`: grid (the paper: T = 0.1 … 10.0 by "
    "the ECE) or nll (the exact NLL optimum).",
)
@objective_option()
@grid_option()
@binning_options
@probs_option()
@csv_options
@labels_option()
@output_options(formats=(*FORMATS, "latex"), suffixes={**SUFFIX_FORMATS, ".tex": "latex"})
def table_command(inputs, names, search, objective, grid_text, n_bins, compat, input_kind, label_col, fmt, output,
                  force):
    """The paper's Table 1: several models, each before and after temperature scaling.

    One model per group of four files VAL_SCORES VAL_LABELS TEST_SCORES TEST_LABELS (any file
    type of `calib eval`), or a run folder of `calib train` (val_logits.npy, val_labels.npy,
    test_logits.npy, test_labels.npy) in place of a group; with --labels NAME a group is two files,
    VAL_SCORES TEST_SCORES, whose labels are their column NAME. For each model, T is fitted on its
    validation set exactly as `calib temperature` does, and its test set is measured at T = 1
    (Pre T) and at T (Post T): error, ECE, AdaECE, Classwise-ECE (in %) and NLL.

    Rows are the models, named after their run folder or test scores file, or by --name
    (repeat it, one per model, in order). --format latex writes a booktabs tabular
    (\\usepackage{booktabs}) with T in parentheses after the Post-T ECE, as in the paper.

    \b
    Examples:
      calib table runs/resnet50 runs/densenet121 runs/wide_resnet     # run folders of calib train
      calib table val.npy val_y.npy test.npy test_y.npy --name ResNet-50
      calib table a/val.npy a/val_y.npy a/test.npy a/test_y.npy b/val.npy b/val_y.npy b/test.npy b/test_y.npy
      calib table runs/* --format markdown
      calib table runs/* -o table1.tex                  # LaTeX (booktabs), from the suffix
      calib table runs/* --search nll --format csv      # exact NLL-optimal T, exact numbers
      calib table a/val.csv a/test.csv b/val.csv b/test.csv --labels label --probs  # labels: a column of each file
    """
    grid = parse_grid(grid_text)
    Outputs(force).report("--output", output).check()  # before any work
    models = group_inputs(inputs, label_col)
    if names:
        if len(names) != len(models):
            raise InputError(
                f"got {len(names)} --name value(s) for {len(models)} model(s): give one per model, in order"
            )
        models = [(name, files) for name, (_, files) in zip(names, models)]
    # the labels of a group of files with --labels: its scores files' column (a run folder has label files)
    models = [(name, tuple(labels_name(files[i - 1], f, label_col) if i % 2 else f for i, f in enumerate(files)),
               files) for name, files in models]
    rows, warnings = [], []
    with render.progress_bar(f"{len(models)} models", enabled=len(models) > 1) as progress:
        for i, (name, files, given) in enumerate(models):
            val_array, val_predictions, (test_array, test_predictions) = load_fit_and_test(
                given[0], given[1], (given[2], given[3]), input_kind, label_col if given[1] is None else None
            )
            row = model_row(
                name, val_predictions, None, test_predictions, None, input_kind=input_kind, search=search,
                objective=objective, grid=grid, n_bins=n_bins, compat=compat, names=files, test_raw=test_array,
            )
            rows.append(row)
            for w in (*row.fit.warnings, *row.before.warnings, *row.after.warnings):
                text = f"{name}: {cli_text(w)}"
                if text not in warnings:
                    warnings.append(text)
            if progress is not None:
                progress(i + 1, len(models))
    how = f"{search} search" + (f" by {objective or OBJECTIVES[0]}" if search == "grid" else "")
    title = (
        f"Test sets before (Pre T) and after (Post T) temperature scaling, T fitted on each validation set ({how}, "
        f"{n_bins} bins); error and calibration errors in %"
    )
    render.warn(warnings)
    if fmt == "json":
        payload = table_payload(rows, [(name, files) for name, files, _ in models], input_kind, n_bins, compat,
                                warnings)
        render.write_report(render.to_json(payload), output, force)
    else:
        render.write_report(render_table(fmt, rows, title), output, force)
