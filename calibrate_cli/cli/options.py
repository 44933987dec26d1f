"""Options shared by several commands, and the load step (files → arrays)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import click

from ..bootstrap import CI_METHODS, DEFAULT_CI_LEVEL, DEFAULT_CI_METHOD, DEFAULT_SEED
from ..engine.devices import DEFAULT_DEVICE, DEVICES
from ..errors import OutputError
from ..metrics.gates import GATE_ON, Gate
from ..errors import InputError
from ..data.io import (
    AmbiguousHeaderError,
    CsvCellError,
    IndexColumnError,
    list_shards,
    load_labels,
    load_shard,
    pair_shards,
    read_scores,
)
from ..engine.binning import MAX_N_BINS
from ..metrics.functional import DEFAULT_N_BINS
from ..data.number_text import PLAIN_NUMBERS, is_plain_float, is_plain_int, lenient_only, parse_float
from ..engine.summary import COMPAT_MODES

FORMATS = ("table", "json", "csv", "markdown")


# -- numbers in options: ASCII decimal and scientific notation only ----------------------------------
# Click converts with float() / int(), which read "1_5" as 15 and Arabic-Indic "١٢" as 12: every
# numeric option and argument takes one of these types instead (calibrate_cli.data.number_text).


class _PlainNumber:
    """Refuse text that Python's ``float()`` / ``int()`` read but calib does not (``1_5``, ``١٢``);
    anything else converts (or fails) as Click's own type does."""

    _whole = False

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            plain = is_plain_int(value) if self._whole else is_plain_float(value)
            if not plain and lenient_only(value):
                whole = "whole number (ASCII digits with an optional sign)"
                self.fail(f"{value!r} is not a {whole if self._whole else f'number ({PLAIN_NUMBERS})'}", param, ctx)
        return super().convert(value, param, ctx)


class PlainFloat(_PlainNumber, click.types.FloatParamType):
    """``type=float`` for calib: ASCII decimal and scientific notation (and nan/inf) only."""


class PlainFloatRange(_PlainNumber, click.FloatRange):
    """``click.FloatRange`` for calib: ASCII decimal and scientific notation (and inf) only. NaN is in
    no range (Click's comparisons let it through: ``--ci-level nan`` was an internal error)."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if number != number:
            self.fail(f"{value!r} is not a number in the range {self._describe_range()}", param, ctx)
        return number


class PlainInt(_PlainNumber, click.types.IntParamType):
    """``type=int`` for calib: ASCII digits with an optional sign only."""

    _whole = True


class PlainIntRange(_PlainNumber, click.IntRange):
    """``click.IntRange`` for calib: ASCII digits with an optional sign only."""

    _whole = True


FLOAT, INT = PlainFloat(), PlainInt()


def plain_float_text(text: str, what: str) -> float:
    """A number given as text inside an option's value (``--alpha 1,2``, ``--grid 0.1:5:0.1``), as
    the types above read it; click.BadParameter naming ``what`` otherwise."""
    try:
        return parse_float(text)
    except ValueError:
        raise click.BadParameter(f"{text.strip()!r} in {what} is not a number ({PLAIN_NUMBERS})") from None


# -- the options of several commands, each defined once ---------------------------------------------
# A command takes the decorator, passing its own help where the option means something particular
# to it (``--probs`` of `calib temperature` fits through log p); names and parameters stay the same.

PROBS_HELP = "Scores are probabilities (rows sum to 1; 1-D: p(class 1)) instead of logits."
#: what ``--force`` says in every command's --help
FORCE_HELP = (
    "Replace output files that exist (regular files only; through a symbolic link, its target). "
    "Never a directory, FIFO or device."
)


LOGITS_HELP = (
    "Scores are logits, even where every row lies in [0, 1] and sums to 1 (without --probs or --logits "
    "such scores are refused as ambiguous)."
)


def probs_option(help: str = PROBS_HELP):
    """``--probs`` / ``--logits``: the command receives ``input_kind`` = "probs", "logits", or None when
    neither is given (logits, but scores that look like probabilities are refused:
    :func:`~calibrate_cli.data.predictions.resolve_input_kind`)."""
    def decorate(func):
        func = click.option("--logits", "input_kind", flag_value="logits", help=LOGITS_HELP)(func)
        return click.option("--probs", "input_kind", flag_value="probs", default=None, help=help)(func)

    return decorate


def n_bins_option(help: str = f"Number of bins M for ECE, AdaECE, classwise-ECE and MCE (at most {MAX_N_BINS})."):
    """``--n-bins M`` (1 … MAX_N_BINS, default DEFAULT_N_BINS)."""
    return click.option(
        "--n-bins", type=PlainIntRange(min=1, max=MAX_N_BINS), default=DEFAULT_N_BINS, show_default=True, help=help
    )


def compat_option(func):
    return click.option(
        "--compat",
        type=click.Choice(COMPAT_MODES),
        default=None,
        help="Reproduce another implementation's numbers: focal-calibration = the reference code of "
        "Mukhoti et al. 2020 (float32, AdaECE drops the min-confidence sample).",
    )(func)


def output_option(help: str, *, required: bool = False):
    """``-o/--output FILE`` (the command receives ``output``)."""
    return click.option("-o", "--output", required=required, metavar="FILE", help=help)


def force_option(func):
    """``--force``: replace outputs that exist (see :data:`FORCE_HELP`)."""
    return click.option("--force", is_flag=True, help=FORCE_HELP)(func)


def plot_option(help: str):
    """``--plot FILE``: also draw a figure (the command receives ``plot_path``)."""
    return click.option("--plot", "plot_path", metavar="FILE", help=help)


def calibrator_option(help: str, *, load: bool):
    """``--temperature T|FILE.json`` (alias ``--calibrator``): with ``load``, the command receives the
    loaded calibrator as ``calibrator``; else the text as ``temperature_value`` (loaded after the
    command's own checks)."""
    return click.option(
        "--temperature", "--calibrator", "calibrator" if load else "temperature_value", metavar="T|FILE.json",
        callback=_to_calibrator if load else _plain_temperature, help=help,
    )


def _plain_temperature(ctx, param, value):
    """``--temperature T``: T as calib reads numbers (``1_5`` is not 15), or a file's name."""
    if value is not None and lenient_only(value):
        raise click.BadParameter(f"{value!r} is neither a number ({PLAIN_NUMBERS}) nor a JSON file's name")
    return value


_CALIBRATOR_SOURCE_KEY = "calib.calibrator_source"


def _to_calibrator(ctx, param, value):
    from ..calibrators import load_calibrator

    ctx.meta[_CALIBRATOR_SOURCE_KEY] = value  # what the user gave, for the report (calibration_record)
    return None if value is None else load_calibrator(_plain_temperature(ctx, param, value))


def calibration_record(calibrator) -> dict | None:
    """What ``--temperature``/``--calibrator`` applied, for a report (None without one): ``method``,
    ``label`` (as titles show it), ``temperature`` (T, or None for other maps), ``file`` (the JSON
    file it was read from, None for a number) and ``calibrator`` (the map's ``to_dict()``, which
    ``--calibrator`` reads back)."""
    if calibrator is None:
        return None
    source = click.get_current_context().meta.get(_CALIBRATOR_SOURCE_KEY)
    is_number = source is not None and is_plain_float(str(source))
    saved = calibrator.to_dict()
    return {
        "method": saved["method"],
        "label": calibrator.label,
        "temperature": calibrator.temperature,
        "file": None if source is None or is_number else str(source),
        "calibrator": saved,
    }


def calibration_text(record: dict | None, prefix: str = "calibrated: ") -> str:
    """``calibrated: T = 1.5`` / ``calibrated: vector scaling from v.json`` for titles; "" without one."""
    if record is None:
        return ""
    return f"{prefix}{record['label']}" + (f" from {record['file']}" if record["file"] else "")


def name_option(func):
    """``--name NAME`` (repeatable): the models' names in figures (the command receives ``names``)."""
    return click.option(
        "--name", "names", multiple=True, metavar="NAME", help="Model name (repeatable, one per model)."
    )(func)


def title_option(func):
    """``--title TEXT``: a figure's title."""
    return click.option("--title", help="Figure title.")(func)


_HEADER_KEY, _SCORE_COLS_KEY = "calib.csv_header", "calib.score_cols"


def _remember(key: str):
    def callback(ctx: click.Context, param, value):
        ctx.meta[key] = value
        return value

    return callback


def csv_options(func):
    """--header/--no-header and --scores (alias --score-cols): how CSV and table inputs are read
    (kept in ``ctx.meta`` for :func:`load_inputs`, so commands need no extra parameters)."""
    func = click.option(
        "--scores",
        "--score-cols",
        "score_cols",
        metavar="COLS",
        expose_value=False,
        callback=_remember(_SCORE_COLS_KEY),
        help="CSV, Parquet, Arrow or Feather input: the score columns, by name, 0-based index or glob, "
        "comma-separated (e.g. 'logit_*' or 'cat,dog'), or one list column holding the K scores per row; "
        "other columns (ids, ...) are ignored. Without it: every column but the labels, where a column that "
        "looks like a row index (named id, idx, index or row, or holding 0..N−1 in order) is an error. "
        "Labels that are class names map to these columns in order (p_cat or cat ← label cat).",
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


LABELS_HELP = (
    "CSV, Parquet, Arrow or Feather input: the labels are this column of each scores file (name or 0-based "
    "index); omit the LABELS arguments. E.g. calib eval preds.parquet --scores 'logit_*' --labels label."
)


def labels_option(help: str = LABELS_HELP):
    """``--labels NAME`` (alias ``--label-col``): the labels are a column of each scores file, whose LABELS
    arguments are left out (the command receives ``label_col``; :func:`pair_inputs`, :func:`read_inputs`)."""
    return click.option("--labels", "--label-col", "label_col", metavar="NAME", help=help)


def scores_and_labels(func):
    """SCORES [LABELS] arguments, --probs, --label-col and the CSV options."""
    func = csv_options(func)
    func = labels_option()(func)
    func = probs_option()(func)
    func = click.argument("labels", required=False, metavar="[LABELS]")(func)
    func = click.argument("scores", metavar="SCORES")(func)
    return func


def pair_inputs(files, label_col: str | None, what: str) -> list[tuple[str, str | None]]:
    """The (scores, labels) pairs of a command's input files (None left out): SCORES LABELS SCORES LABELS …,
    or with ``--labels NAME`` (``label_col``) SCORES SCORES … (labels None: the column of each scores file,
    read by :func:`read_inputs`). ``what`` names the files expected, for the error."""
    files = [f for f in files if f is not None]
    if label_col is not None:
        return [(f, None) for f in files]
    if len(files) % 2:
        raise click.UsageError(
            f"{len(files)} file(s) do not pair up as {what}: each scores file needs its labels file, or "
            "--labels NAME when the labels are a column of each scores file (CSV, Parquet, Arrow, Feather)"
        )
    return list(zip(files[::2], files[1::2]))


#: joins SCORES and LABELS into one command-line word (no word of argv can hold a NUL)
_PAIR_JOIN = "\0"


class _FilePair(click.ParamType):
    """The value of a :class:`ScoresThenLabels` option: (scores,) or (scores, labels)."""

    name = "scores [labels]"

    def convert(self, value, param, ctx):
        return tuple(value.split(_PAIR_JOIN)) if isinstance(value, str) else tuple(value)


class ScoresThenLabels(click.Option):
    """An option that takes one file or two (``--test SCORES [LABELS]``): the next word is taken as
    LABELS unless it is an option (starts with ``-``). One file: its labels are the ``--labels`` column.
    Its command is a :class:`FilePairCommand`, which gives it the pair as one word."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, type=_FilePair(), **kwargs)


class FilePairCommand(click.Command):
    """A command with :class:`ScoresThenLabels` options: before Click parses the words (``parse_args``,
    Click's public API), ``--test SCORES LABELS`` (or ``--test=SCORES LABELS``) becomes ``--test``
    and one word holding both files, where the word after SCORES does not start with ``-``."""

    def parse_args(self, ctx, args):
        names = {name for param in self.params if isinstance(param, ScoresThenLabels) for name in param.opts}
        values = {name: param.nargs for param in self.params  # other options' values are read as they are
                  if isinstance(param, click.Option) and not (param.is_flag or param.count) for name in param.opts}
        words, rest = [], list(args)
        while rest:
            word = rest.pop(0)
            words.append(word)
            if word == "--":
                words += rest
                break
            name, inline, _ = word.partition("=")
            if name in values and name not in names and not inline:
                words += rest[: values[name]]
                del rest[: values[name]]
            if name not in names or not (inline or rest):
                continue
            if not inline:
                words.append(rest.pop(0))
            if rest and not rest[0].startswith("-"):
                words[-1] += _PAIR_JOIN + rest.pop(0)
        return super().parse_args(ctx, words)


def test_set_option(help: str):
    """``--test SCORES [LABELS]`` (the command receives ``test``: None, (scores,), or (scores, labels))."""
    return click.option(
        "--test", cls=ScoresThenLabels, default=None, metavar="TEST_SCORES [TEST_LABELS]",
        help=help + " With --labels: TEST_SCORES alone, its labels in that column.",
    )


def test_pair(test, label_col: str | None, option: str = "--test") -> tuple[str, str | None] | None:
    """The (scores, labels) of ``--test`` (or another :class:`ScoresThenLabels` option) as :func:`read_inputs`
    takes them (labels None: the ``--labels`` column)."""
    if test is None:
        return None
    if label_col is None and len(test) == 1:
        raise click.UsageError(
            f"{option} {test[0]}: give SCORES LABELS, or --labels NAME when the labels are a column of each "
            "scores file"
        )
    if label_col is not None and len(test) == 2:
        raise click.UsageError(
            f"{option} {' '.join(test)}: with --labels, {option} takes a scores file alone (its labels are its "
            f"column {label_col}); a word after it that is no labels file goes before {option}"
        )
    return (test[0], test[1] if len(test) == 2 else None)


def binning_options(func):
    """``--n-bins`` and ``--compat``."""
    return n_bins_option()(compat_option(func))


#: report format of ``--output FILE`` when --format is not given (anything else: table)
SUFFIX_FORMATS = {".json": "json", ".csv": "csv", ".md": "markdown", ".markdown": "markdown"}
def report_format(fmt: str | None, output: str | None, suffixes: dict[str, str] = SUFFIX_FORMATS) -> str:
    """The report format: ``--format`` when given, else from ``--output``'s suffix (.json → json,
    .csv → csv, .md/.markdown → markdown, and a command's own ``suffixes``; anything else → table),
    else table."""
    if fmt is not None:
        return fmt
    if output and output != "-":
        return suffixes.get(Path(output).suffix.lower(), "table")
    return "table"


def output_options(
    func=None, *, output_help: str | None = None, formats: tuple[str, ...] = FORMATS,
    suffixes: dict[str, str] = SUFFIX_FORMATS,
):
    """-f/--format, -o/--output and --force, shared by every command that writes a report.

    The command receives the resolved format (:func:`report_format`: a CI job writing
    ``-o metrics.json`` gets JSON without --format) and ``output=None`` for ``-o -`` (stdout).
    A command with more ``formats`` than :data:`FORMATS` (``calib table``'s latex) passes them, and
    the ``suffixes`` that select them.
    """
    shown = ", ".join(s for s in suffixes if s != ".markdown")

    def decorate(command):
        @functools.wraps(command)
        def resolved(*args, fmt, output, **kwargs):
            fmt = report_format(fmt, output, suffixes)
            return command(*args, fmt=fmt, output=None if output == "-" else output, **kwargs)

        resolved = force_option(resolved)
        resolved = output_option(output_help or "Write the report to FILE instead of stdout ('-': stdout).")(resolved)
        resolved = click.option(
            "-f", "--format", "fmt", type=click.Choice(formats), default=None,
            help=f"Report format [default: from --output's suffix: {shown}; else table].",
        )(resolved)
        return resolved

    return decorate(func) if func is not None else decorate


class Outputs:
    """Every file a command will write, checked together before any work starts.

    ``Outputs(force).report("--output", path).figure("--plot", path).array("--save-logits", path)``
    then :meth:`check`: each path must be writable (:func:`~calibrate_cli.data.outputs.check_output_path`:
    folder exists and is writable, name within NAME_MAX, no existing file without --force, never
    a directory/FIFO/device), a figure needs .png/.svg/.pdf and an array .npy, and no two options
    may name one file (same resolved path, or the same file through a link). ``-`` (stdout) is
    allowed for the report only. A problem is an :class:`~calibrate_cli.errors.OutputError` (exit 2).
    """

    def __init__(self, force: bool):
        self.force = force
        self._items: list[tuple[str, str, str]] = []

    def _add(self, kind: str, option: str, path: str | None) -> "Outputs":
        if path is not None:
            self._items.append((kind, option, path))
        return self

    def report(self, option: str, path: str | None) -> "Outputs":
        return self._add("report", option, path)

    def figure(self, option: str, path: str | None) -> "Outputs":
        return self._add("figure", option, path)

    def array(self, option: str, path: str | None) -> "Outputs":
        return self._add("array", option, path)

    def check(self) -> "Outputs":
        from ..data.outputs import check_array_path, check_output_path, is_sink

        seen: list[tuple[str, str, Path]] = []
        for kind, option, path in self._items:
            if path == "-":
                if kind == "report":
                    continue
                what = "a figure file (.png, .svg, .pdf)" if kind == "figure" else "a .npy file"
                raise OutputError(f"{option} -: standard output takes reports only; give {what}")
            if kind == "figure":
                from ..plots.diagram import check_figure_path

                target = check_figure_path(path, force=self.force)
            elif kind == "array":
                target = check_array_path(path, force=self.force)
            else:
                target = check_output_path(path, force=self.force)
            for other_option, other_path, other_target in seen:
                if _same_file(target, other_target) and not is_sink(target):  # /dev/null twice: both thrown away
                    raise OutputError(
                        f"{path}: {other_option} {other_path} and {option} {path} name the same file; "
                        "give each output its own file"
                    )
            seen.append((option, path, target))
        return self


def _same_file(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)  # hard links
    except OSError:
        return False


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
        help="Exit 1 when METRIC is above V (repeatable), e.g. ece=0.02 or ece=2% (a percentage only for "
        "metrics that are fractions; V must lie in the metric's range).",
    )(func)
    return func


def _bootstrap_metrics(value: str | None):
    """``--bootstrap-metrics``: None (the default set), "all", or a list of metric names."""
    if value is None or value.strip().lower() == "all":
        return None if value is None else "all"
    from ..metrics.gates import normalize_metric_name

    return [normalize_metric_name(name) for name in value.split(",") if name.strip()]


BOOTSTRAP_DEVICE_HELP = (
    "Where the bootstrap runs: cpu (numpy), cuda (torch on the GPU), auto (cuda when torch "
    "and a GPU are there, else cpu), torch-cpu (the torch code on the CPU). Same draws, same results."
)
DEVICE_HELP = (
    "Where the metrics pass (softmax, NLL, Brier, top-5, bins) runs: cpu (numpy), cuda (torch on the GPU, "
    "float64; the scores go to the GPU in row chunks, so any size fits), auto (cuda when torch and a GPU are "
    "there, else cpu), torch-cpu (the torch code on the CPU). The same numbers to 1e-9; the JSON's \"device\" "
    "says where it ran. With --bootstrap, the bootstrap runs there and the metrics pass on the CPU (the same "
    "draws, the same intervals on every device)."
)


def device_option(help_text: str = DEVICE_HELP):
    """--device cpu|cuda|auto|torch-cpu (calibrate_cli.engine.devices)."""
    return click.option(
        "--device", type=click.Choice(DEVICES), default=DEFAULT_DEVICE, show_default=True, help=help_text
    )


def check_device(device: str) -> str:
    """Resolve --device now, before any work: an unavailable one is a one-line error (exit 2)."""
    from ..engine.devices import resolve_device

    return resolve_device(device)


def bootstrap_options(default_resamples: int = 0, *, metrics_engine: bool = True, whole_pass: bool = False):
    """--bootstrap B, --ci-level, --ci-method, --seed (docs/bootstrap.md), and, with ``metrics_engine``
    (the resampling of the calibration metrics), --device and --bootstrap-metrics (``whole_pass``: --device
    is the device of the metrics pass too; else of the bootstrap only)."""

    def decorate(func):
        if metrics_engine:
            func = _engine_options(func, whole_pass)
        return _interval_options(func, default_resamples)

    return decorate


def _engine_options(func, whole_pass: bool = False):
    """--bootstrap-metrics and --device: what the calibration metrics' bootstrap resamples, and where."""
    func = click.option(
        "--bootstrap-metrics",
        metavar="all|LIST",
        default=None,
        callback=lambda ctx, param, value: _bootstrap_metrics(value),
        help="The metrics that get intervals: 'all', or names (comma-separated). Default: the metrics shown, "
        "but KS-CE, SmoothECE and the sorted classwise errors (every resample a pass over the N samples) only "
        "when asked for by name (--metrics); a note under the table names a metric shown without interval.",
    )(func)
    return device_option(DEVICE_HELP if whole_pass else BOOTSTRAP_DEVICE_HELP)(func)


def _interval_options(func, default_resamples: int):
    """--bootstrap B, --ci-level, --ci-method and --seed."""
    func = click.option(
        "--seed", type=INT, default=DEFAULT_SEED, show_default=True, help="Seed of the bootstrap resamples."
    )(func)
    func = click.option(
        "--ci-method",
        type=click.Choice(CI_METHODS),
        default=DEFAULT_CI_METHOD,
        show_default=True,
        help="auto: basic for the calibration errors, percentile for the means (accuracy, NLL, Brier, "
        "mean confidence, S99); basic: [2θ̂ − q_hi, 2θ̂ − q_lo] (Kumar et al. 2019; best coverage for the "
        "biased binned errors, see docs/bootstrap.md); percentile: [q_lo, q_hi]; bca: bias-corrected and "
        "accelerated percentiles (Efron 1987; +100 metric passes for its jackknife). A warning names every "
        "interval that excludes its estimate (†) or leaves the metric's range (shown clipped to it, ‡).",
    )(func)
    func = click.option(
        "--ci-level",
        type=PlainFloatRange(0, 1, min_open=True, max_open=True),
        default=DEFAULT_CI_LEVEL,
        show_default=True,
        help="Confidence level of the intervals.",
    )(func)
    func = click.option(
        "--bootstrap",
        "n_resamples",
        type=PlainIntRange(min=0),
        default=default_resamples,
        show_default=True,
        metavar="B",
        help="Bootstrap B resamples for confidence intervals of the metrics shown (0: off; which: "
        "--bootstrap-metrics, where the command has it). At least "
        "2/(1 − level) (20 at 90%); fewer than ~200 get a warning; 1000 recommended.",
    )(func)
    return func


def check_resamples(n_resamples: int, ci_level: float, device: str) -> None:
    """Refuse --bootstrap B too small to give a --ci-level interval (after a device error, if any).

    With B·α/2 < 1 a tail holds no resample and the ends are the extreme values (B = 1: an
    "interval" of width 0 that need not even contain the estimate); fewer than ~165 resamples
    (at 90 %) only get a warning, from the intervals themselves.
    """
    if not n_resamples:
        return
    from ..bootstrap import min_resamples, resolve_device
    from ..bootstrap.intervals import MAX_RESAMPLES, MIN_LEVEL

    if n_resamples > MAX_RESAMPLES:  # before any work: 10⁹ resamples grew the memory until it ran out
        raise click.UsageError(
            f"--bootstrap {n_resamples} is too many resamples: at most {MAX_RESAMPLES} (beyond, the interval's ends "
            "move by less than 0.2 % of its half-width from seed to seed, and the values alone fill the memory)"
        )
    resolve_device(device)  # an unavailable device is the first thing to fix
    if ci_level < MIN_LEVEL:
        raise click.UsageError(
            f"--ci-level {ci_level:g} is too small: both ends of the interval would be the median "
            f"(at least {MIN_LEVEL:g})"
        )
    least = min_resamples(ci_level)
    if n_resamples < least:
        raise click.UsageError(
            f"--bootstrap {n_resamples} is too few resamples for a {100 * ci_level:g}% interval: "
            f"at least {least} are needed (each end needs resamples beyond it); 1000 or more are recommended"
        )


def interval_warnings(intervals: dict, *, prefix: str = "") -> list[str]:
    """One line per suspect interval (``{metric: ConfidenceInterval}``), ``prefix`` before the metric.

    A warning shared by every interval (too few resamples) is said once, without a metric name.
    """
    from .render import PRETTY_NAMES

    cis = {name: ci for name, ci in intervals.items() if ci is not None}
    if not cis:
        return []
    shared = set.intersection(*(set(ci.warnings) for ci in cis.values()))
    lines = [f"bootstrap: {w}" for w in next(iter(cis.values())).warnings if w in shared]
    for name, ci in cis.items():
        lines += [f"{prefix}{PRETTY_NAMES.get(name, name)} interval: {w}" for w in ci.warnings if w not in shared]
    if any(not ci.contains_point for ci in cis.values()):
        lines.append(
            "an interval that excludes its estimate is the bootstrap's sign of a biased metric, not a bug; "
            "docs/bootstrap.md compares --ci-method basic, percentile and bca"
        )
    return lines


#: the causes of :attr:`~calibrate_cli.bootstrap.ConfidenceInterval.warnings` (by their first words), as
#: :func:`interval_warnings_by_cause` says each once
_CAUSES = {
    "the interval excludes": "intervals that exclude their estimate (†), the bootstrap's sign of a biased metric, not a "
    "bug (docs/bootstrap.md compares --ci-method basic, percentile and bca)",
    "the interval reaches": "intervals that reach outside their metric's range, shown clipped to it (‡)",
    "all resampled values lie": "intervals whose bias correction is at its limit (every resampled value on one side "
    "of the estimate): their ends are the most extreme values",
}


def interval_warnings_by_cause(sets: dict[str, dict]) -> list[str]:
    """The warnings of the intervals of several rows (``{row: {metric: ConfidenceInterval or None}}``, e.g.
    the methods of ``calib fit --method all``), one line per cause naming each metric with its rows:
    ``intervals that exclude their estimate (†) …: ECE (vector), Classwise-ECE (temperature, vector)``.
    Too few resamples is said once; the numbers of each interval are in the JSON."""
    from .render import PRETTY_NAMES

    once: list[str] = []
    by_cause: dict[str, dict[str, list[str]]] = {}
    for row, intervals in sets.items():
        for name, ci in intervals.items():
            for warning in ci.warnings if ci is not None else ():
                cause = next((c for c in _CAUSES if warning.startswith(c)), None)
                if cause is None:  # too few resamples (the same for every metric), or another word
                    line = f"bootstrap: {warning}" if warning.startswith("only ") else f"{row}: {name}: {warning}"
                    once += [line] if line not in once else []
                    continue
                rows = by_cause.setdefault(cause, {}).setdefault(PRETTY_NAMES.get(name, name), [])
                rows += [row] if row not in rows else []
    lines = [f"{_CAUSES[c]}: " + ", ".join(f"{m} ({', '.join(rows)})" for m, rows in metrics.items())
             for c, metrics in by_cause.items()]
    return once + lines


def check_device_use(device: str, n_resamples: int) -> None:
    """--device cuda / torch-cpu only moves the bootstrap: refuse it without one (auto is harmless)."""
    if device not in ("cpu", "auto") and not n_resamples:
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


def parse_metric_list(text: str | None, option: str = "--metrics"):
    """``--metrics``: None (not given), "all", or a tuple of known metric names (comma-separated)."""
    from ..metrics.registry import METRIC_NAMES

    if text is None:
        return None
    if text.strip() == "all":
        return "all"
    names = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in names if m not in METRIC_NAMES]
    if unknown or not names:
        raise click.UsageError(f"{option}: unknown metric {', '.join(unknown) or '(none)'}; known: {', '.join(METRIC_NAMES)}")
    return names


def extra_metrics_option(func):
    """``--metrics LIST|all`` on commands that report every default metric: the opt-in ones to add."""
    from ..metrics.registry import METRICS

    optional = ", ".join(spec.name for spec in METRICS if not spec.by_default)
    return click.option(
        "--metrics", "extra_metrics", metavar="LIST", default=None,
        callback=lambda ctx, param, value: parse_metric_list(value),
        help=f"Also compute these metrics, which the default pass leaves out ({optional}: each class's "
        "probabilities sorted, O(N·K log N)); 'all' for every metric. Gated metrics are always computed.",
    )(func)


def parse_gates(fail_above, fail_below) -> list[Gate]:
    return [Gate.parse(t, "above") for t in fail_above] + [Gate.parse(t, "below") for t in fail_below]


def csv_settings() -> tuple[bool | None, str | None]:
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    return meta.get(_HEADER_KEY), meta.get(_SCORE_COLS_KEY)


def _with_hint(exc: InputError, score_cols: str | None) -> InputError:
    """The core's neutral message plus the flag that fixes it."""
    if isinstance(exc, AmbiguousHeaderError):
        return InputError(f"{exc}; say which with --header or --no-header")
    if isinstance(exc, CsvCellError) and exc.named and score_cols is None:
        return InputError(f"{exc}; pick the score columns with --scores/--score-cols (e.g. --scores 'p_*')")
    if isinstance(exc, IndexColumnError):
        import shlex

        spec = shlex.quote(exc.spec) if exc.spec is not None else "COLS"
        return InputError(f"{exc.reason}; choose the score columns with --scores {spec}")
    return exc


def shard_inputs(scores: str, labels: str | None, label_col: str | None, *, single: bool = False):
    """Sharded SCORES/LABELS (quoted globs or directories, :func:`~calibrate_cli.data.io.list_shards`): the
    (scores file, labels file) pairs in order and a picklable loader of one pair; for single files
    None (or, with ``single``, one pair)."""
    if labels is not None and label_col is not None:
        raise click.UsageError("give either LABELS or --label-col, not both")
    if labels is None and label_col is None:
        return None  # load_inputs says what is missing
    score_files = list_shards(scores)
    label_files = list_shards(labels) if labels is not None else None
    if score_files is None and label_files is None and not single:
        return None
    if labels is None:
        score_files = score_files or [scores]
        pairs = [(s, None) for s in score_files]
    else:
        if len(score_files or [scores]) != len(label_files or [labels]):
            raise InputError(
                f"{scores} ({_shards_of(scores, score_files)}) and {labels} ({_shards_of(labels, label_files)}) "
                "must give as many shards: they pair by the numbers in their names"
            )
        pairs = pair_shards(score_files or [scores], label_files or [labels], scores, labels)
    header, score_cols = csv_settings()
    return pairs, functools.partial(load_pair, label_col=label_col, score_cols=score_cols, header=header)


def _shards_of(source: str, files: list[str] | None) -> str:
    if files is None:
        return "one file"
    if Path(source).is_dir():
        return f"a directory of {len(files)} .npy file(s)"
    return f"a pattern matching {len(files)} file(s)"


def load_pair(pair: tuple, **options) -> tuple:
    """One shard's (scores, labels, scores_name, labels_name) (:func:`~calibrate_cli.data.io.load_shard`)."""
    try:
        return load_shard(pair[0], pair[1], **options)
    except InputError as exc:
        raise _with_hint(exc, options.get("score_cols")) from None


def load_scores_only(scores: str, label_col: str | None = None):
    """Read SCORES alone (no labels: `calib ood`), with the command's CSV options; ``label_col`` (--labels)
    names a labels column, which is not read as scores."""
    header, score_cols = csv_settings()
    try:
        return read_scores(scores, label_col=label_col, score_cols=score_cols, header=header).scores
    except InputError as exc:
        raise _with_hint(exc, score_cols) from None


def load_inputs(scores: str, labels: str | None, label_col: str | None):
    """Read SCORES and LABELS (or SCORES' --label-col column), with the command's CSV options:
    (scores, labels, labels' name) (:func:`read_inputs`)."""
    found, label_array, labels_name = read_inputs(scores, labels, label_col)
    return found.scores, label_array, labels_name


def read_inputs(scores: str, labels: str | None, label_col: str | None):
    """(:class:`~calibrate_cli.data.io.ScoresFile` of SCORES, labels, labels' name): SCORES and LABELS (or
    SCORES' --label-col column) read with the command's CSV options.

    Labels that are class names map to the score columns' names. When the first row of a CSV file
    could be a header or data, the other file's N settles it if only one reading matches."""
    if labels is not None and label_col is not None:
        raise click.UsageError("give either LABELS or --label-col, not both")
    if labels is None and label_col is None:
        raise click.UsageError("missing LABELS (or --labels NAME for a CSV or table file with a labels column)")
    header, score_cols = csv_settings()
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
    return found, label_array, labels_name(scores, labels, label_col)


def labels_name(scores: str, labels: str | None, label_col: str | None) -> str:
    """How reports name the labels: the LABELS file, or ``SCORES[COLUMN]`` for the --labels column."""
    return labels if labels is not None else f"{scores}[{label_col}]"


WEIGHTS_HELP = (
    "Sample weights, one per row (≥ 0, not all 0): a file (.npy, .npz:key, .pt:key, a one-column .csv, …) "
    "or, when SCORES is a CSV or table file, the name of its weights column (then name the score columns "
    "with --scores). Row i counts w_i times in every metric (whole numbers: repeated rows); docs/weights.md."
)


def weights_option(func):
    """``--weights FILE|COLUMN`` (the command receives ``weights``: the text, or None; :func:`read_weights`)."""
    return click.option("--weights", "weights", metavar="FILE|COLUMN", default=None, help=WEIGHTS_HELP)(func)


def weights_label(source: str | None, scores: str) -> str | None:
    """How reports name ``--weights``: the file, or ``SCORES[COLUMN]`` for a column of SCORES (None without)."""
    if source is None:
        return None
    from ..data.io import INPUT_FORMATS, split_source

    path, _ = split_source(source)
    return source if path.exists() or path.suffix.lower() in INPUT_FORMATS else f"{scores}[{source}]"


def read_weights(source: str | None, scores: str, score_columns=None):
    """(weights array, its name for messages) of ``--weights``: a file (any array format), or the column
    ``source`` of the CSV or table file ``scores`` (named ``SCORES[COLUMN]``); (None, None) without it.
    The values are checked by the core (``evaluate(weights=...)``, ``fit(weights=...)``)."""
    if source is None:
        return None, None
    from ..data.io import INPUT_FORMATS, load_array, split_source

    path, _ = split_source(source)
    scores_path, _ = split_source(scores)
    as_file = path.exists() or path.suffix.lower() in INPUT_FORMATS
    header, score_cols = csv_settings()
    try:
        if as_file:
            return load_array(source), source
        fmt = INPUT_FORMATS.get(scores_path.suffix.lower())
        if fmt is None or fmt.read_columns is None:
            raise InputError(f"--weights {source}: no such file (a column name needs a CSV or table SCORES file)")
        if score_cols is None:  # else every column but the labels, the weights among them, would be scores
            raise InputError(f"--weights {source}: a weights column of {scores} needs the score columns named "
                             "with --scores (e.g. --scores 'logit_*')")
        if score_columns is not None and source in [str(c) for c in score_columns]:
            raise InputError(f"{scores}: the weights column {source} is read as scores too: name the score columns "
                             "with --scores")
        found = read_scores(scores, score_cols=source, header=header)
        return found.scores, weights_label(source, scores)
    except InputError as exc:
        raise _with_hint(exc, None) from None
