"""Options shared by several commands, and the load step (files → arrays)."""

from __future__ import annotations

import click

from ..bootstrap import CI_METHODS, DEFAULT_CI_LEVEL, DEFAULT_CI_METHOD, DEFAULT_DEVICE, DEFAULT_SEED, DEVICES
from ..gates import GATE_ON, Gate
from ..errors import InputError
from ..io import AmbiguousHeaderError, CsvCellError, load_labels, read_scores
from ..binning import MAX_N_BINS
from ..metrics import DEFAULT_N_BINS
from ..summary import COMPAT_MODES

FORMATS = ("table", "json", "csv", "markdown")


_HEADER_KEY, _SCORE_COLS_KEY = "calib.csv_header", "calib.score_cols"


def _remember(key: str):
    def callback(ctx: click.Context, param, value):
        ctx.meta[key] = value
        return value

    return callback


def csv_options(func):
    """--header/--no-header and --score-cols: how CSV inputs are read (kept in ``ctx.meta`` for
    :func:`load_inputs`, so commands need no extra parameters)."""
    func = click.option(
        "--score-cols",
        metavar="COLS",
        expose_value=False,
        callback=_remember(_SCORE_COLS_KEY),
        help="CSV input: the score columns, by name, 0-based index or glob, comma-separated "
        "(e.g. 'p_*' or 'cat,dog'); other columns (ids, ...) are ignored. Labels that are class "
        "names map to these columns in order (p_cat or cat ← label cat).",
    )(func)
    func = click.option(
        "--header/--no-header",
        default=None,
        expose_value=False,
        callback=_remember(_HEADER_KEY),
        help="CSV input: the first row is (not) a header. Default: detected; a first row that could be "
        "either (a number among names, an empty cell, pandas' 0,1,2,... column names) is an error.",
    )(func)
    return func


def scores_and_labels(func):
    """SCORES [LABELS] arguments, --probs, --label-col and the CSV options."""
    func = csv_options(func)
    func = click.option(
        "--label-col",
        metavar="NAME",
        help="CSV input: the labels are this column of SCORES (name or 0-based index); omit LABELS.",
    )(func)
    func = click.option(
        "--probs",
        "input_kind",
        flag_value="probs",
        default="logits",
        help="Scores are probabilities (rows sum to 1; 1-D: p(class 1)) instead of logits.",
    )(func)
    func = click.argument("labels", required=False, metavar="[LABELS]")(func)
    func = click.argument("scores", metavar="SCORES")(func)
    return func


def binning_options(func):
    func = click.option(
        "--compat",
        type=click.Choice(COMPAT_MODES),
        default=None,
        help="Reproduce another implementation's numbers: focal-calibration = the reference code of "
        "Mukhoti et al. 2020 (float32, AdaECE drops the min-confidence sample).",
    )(func)
    func = click.option(
        "--n-bins",
        type=click.IntRange(min=1, max=MAX_N_BINS),
        default=DEFAULT_N_BINS,
        show_default=True,
        help=f"Number of bins M for ECE, AdaECE, classwise-ECE and MCE (at most {MAX_N_BINS}).",
    )(func)
    return func


def output_options(func):
    func = click.option("--force", is_flag=True, help="Overwrite --output FILE if it exists.")(func)
    func = click.option(
        "-o", "--output", type=click.Path(dir_okay=False), help="Write the report to FILE instead of stdout."
    )(func)
    func = click.option(
        "-f", "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True, help="Report format."
    )(func)
    return func


def gate_options(func):
    func = click.option(
        "--fail-below",
        multiple=True,
        metavar="METRIC=V",
        help="Exit 1 when METRIC is below V (repeatable), e.g. accuracy=0.9.",
    )(func)
    func = click.option(
        "--fail-above",
        multiple=True,
        metavar="METRIC=V",
        help="Exit 1 when METRIC is above V (repeatable), e.g. ece=0.02 or ece=2%.",
    )(func)
    return func


def bootstrap_options(default_resamples: int = 0):
    """--bootstrap B, --ci-level, --ci-method, --seed (SPEC §4), --device."""

    def decorate(func):
        func = click.option(
            "--device",
            type=click.Choice(DEVICES),
            default=DEFAULT_DEVICE,
            show_default=True,
            help="Where the bootstrap runs: cpu (numpy), cuda (torch on the GPU), auto (cuda when torch "
            "and a GPU are there, else cpu), torch-cpu (the torch code on the CPU). Same draws, same results.",
        )(func)
        func = click.option(
            "--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Seed of the bootstrap resamples."
        )(func)
        func = click.option(
            "--ci-method",
            type=click.Choice(CI_METHODS),
            default=DEFAULT_CI_METHOD,
            show_default=True,
            help="basic: [2θ̂ − q_hi, 2θ̂ − q_lo] (Kumar et al. 2019); percentile: [q_lo, q_hi].",
        )(func)
        func = click.option(
            "--ci-level",
            type=click.FloatRange(0, 1, min_open=True, max_open=True),
            default=DEFAULT_CI_LEVEL,
            show_default=True,
            help="Confidence level of the intervals.",
        )(func)
        func = click.option(
            "--bootstrap",
            "n_resamples",
            type=click.IntRange(min=0),
            default=default_resamples,
            show_default=True,
            metavar="B",
            help="Bootstrap B resamples for confidence intervals of every metric (0: off).",
        )(func)
        return func

    return decorate


def check_device_use(device: str, n_resamples: int) -> None:
    """--device cuda / torch-cpu only moves the bootstrap: refuse it without one (auto is harmless)."""
    if device in ("cuda", "torch-cpu") and not n_resamples:
        raise click.UsageError(
            f"--device {device} applies to the bootstrap: add --bootstrap B (B > 0); the metrics pass runs on the CPU"
        )


def gate_on_option(func):
    return click.option(
        "--gate-on",
        type=click.Choice(GATE_ON),
        default="point",
        show_default=True,
        help="With --bootstrap: gate the point estimate, or the upper or lower end of its interval.",
    )(func)


def parse_gates(fail_above, fail_below) -> list[Gate]:
    return [Gate.parse(t, "above") for t in fail_above] + [Gate.parse(t, "below") for t in fail_below]


def _csv_settings() -> tuple[bool | None, str | None]:
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    return meta.get(_HEADER_KEY), meta.get(_SCORE_COLS_KEY)


def _with_hint(exc: InputError, score_cols: str | None) -> InputError:
    """The core's neutral message plus the flag that fixes it."""
    if isinstance(exc, AmbiguousHeaderError):
        return InputError(f"{exc}; say which with --header or --no-header")
    if isinstance(exc, CsvCellError) and exc.named and score_cols is None:
        return InputError(f"{exc}; pick the score columns with --score-cols (e.g. --score-cols 'p_*')")
    return exc


def load_inputs(scores: str, labels: str | None, label_col: str | None):
    """Read SCORES and LABELS (or SCORES' --label-col column), with the command's CSV options.

    Labels that are class names map to the score columns' names. When the first row of a CSV file
    could be a header or data, the other file's N settles it if only one reading matches."""
    if labels is not None and label_col is not None:
        raise click.UsageError("give either LABELS or --label-col, not both")
    if labels is None and label_col is None:
        raise click.UsageError("missing LABELS (or --label-col NAME for a CSV with a labels column)")
    header, score_cols = _csv_settings()
    try:
        try:
            found = read_scores(scores, label_col=label_col, score_cols=score_cols, header=header)
        except AmbiguousHeaderError as first:
            if labels is None:
                raise
            try:
                n_labels = len(load_labels(labels, header=header))
            except InputError:
                raise first from None
            found = read_scores(
                scores, label_col=label_col, score_cols=score_cols, header=header, expected_rows=n_labels
            )
        label_array = found.labels
        if label_array is None:
            n = found.scores.shape[0] if found.scores.ndim >= 1 else None
            label_array = load_labels(labels, header=header, classes=found.class_names, expected_rows=n)
    except InputError as exc:
        raise _with_hint(exc, score_cols) from None
    return found.scores, label_array, (labels if labels is not None else f"{scores}[{label_col}]")
