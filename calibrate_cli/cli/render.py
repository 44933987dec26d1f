"""Rendering reports for people (Rich table, Markdown) and scripts (JSON, CSV). No maths here.

Rich is imported on first use (a table, a console, a progress bar): JSON, CSV and Markdown output
do without it (a faster start: docs/performance.md)."""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import math
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..metrics.registry import METRIC_DEFINITIONS, METRIC_NAMES, METRICS

# Names, display names and formats come from the metric registry (calibrate_cli/metrics/registry.py).
# Metrics that are fractions in [0, 1] and read best as percentages in tables.
PERCENT_METRICS = frozenset(spec.name for spec in METRICS if spec.percent)
PRETTY_NAMES = {spec.name: spec.display_name for spec in METRICS}
_HIDDEN_WHEN_UNDEFINED = frozenset(spec.name for spec in METRICS if not spec.shown_when_undefined)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def stdout_console() -> Console:
    """The console of reports on stdout; refuses a closed stdout (the report would be lost)."""
    _check_stdout()
    from .terminal import CalibConsole

    return CalibConsole(highlight=False)


def stderr_console() -> Console:
    from .terminal import CalibConsole

    return CalibConsole(stderr=True, highlight=False)


def _is_text(cell) -> bool:
    """Whether ``cell`` is a Rich ``Text`` (none can be before Rich is imported)."""
    text = sys.modules.get("rich.text")
    return text is not None and isinstance(cell, text.Text)


def json_ready(obj):
    """Replace NaN by None and ±inf by the strings "inf"/"-inf" so the output is strict JSON."""
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {k: json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    return obj


def to_json(payload: dict) -> str:
    return json.dumps(json_ready(payload), indent=2, allow_nan=False) + "\n"


def format_value(name: str, value: float | None, *, percent: bool = True) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if math.isinf(value):
        return "inf"
    if percent and name in PERCENT_METRICS:
        return f"{100 * value:.2f} %"
    return f"{value:.4f}"


def shown_metrics(metrics: dict) -> list[str]:
    """Metric names worth a row (top-5 only when defined: the registry's ``shown_when_undefined``)."""
    return [m for m in METRIC_NAMES if m in metrics and not (m in _HIDDEN_WHEN_UNDEFINED and metrics[m] is None)]


@dataclass(frozen=True)
class Column:
    """A column of a report table, for :func:`render_rows`.

    ``header``: its heading (a newline breaks the line on a terminal; a space in Markdown);
    ``justify``: left, right or center (also Markdown's alignment); ``style``: Rich style of its
    cells; ``optional``: gives way on a narrow terminal (see :class:`FittedTable`);
    ``markdown=False``: terminal only (e.g. a bar of ``█``).
    """

    header: str
    justify: str = "right"
    style: str | None = None
    no_wrap: bool = False
    optional: bool = False
    markdown: bool = True


_MARKDOWN_ALIGN = {"left": "---", "right": "---:", "center": ":---:"}


def render_rows(fmt: str, columns: list[Column], rows, *, title: str | None = None, notes=()):
    """Rows + columns → the report in ``fmt``: a Rich table ("table"), or Markdown or CSV text.

    The one table renderer of the CLI (eval's metrics and bins, temperature's Pre/Post table,
    compare's differences). A cell is a ``str`` shown literally (never Rich markup), a Rich
    ``Text`` (styled on a terminal, plain in Markdown), or for CSV any value (``str()``; numbers
    formatted by the caller, e.g. :func:`csv_number`). ``title``: plain text above the table
    (bold in Markdown; CSV has none). ``notes``: plain lines below it (the table's caption on a
    terminal, lines after a Markdown table; CSV has none), e.g. what the marks of its cells mean.
    """
    rows = [list(row) for row in rows]
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow([c.header for c in columns])
        writer.writerows(rows)
        return buffer.getvalue()
    if fmt == "markdown":
        keep = [i for i, c in enumerate(columns) if c.markdown]

        def line(cells) -> str:
            return "| " + " | ".join(str(cells[i]).replace("\n", " ").replace("|", "\\|") for i in keep) + " |"

        lines = [f"**{title}**", ""] if title else []
        lines.append(line([c.header for c in columns]))
        lines.append("|" + "".join(_MARKDOWN_ALIGN[columns[i].justify] + "|" for i in keep))
        lines += [line([_plain_text(cell) for cell in row]) for row in rows]
        if notes:
            lines += ["", *(f"{note}  " for note in notes)]  # two spaces: a line break in Markdown
        return "\n".join(lines) + "\n"
    from rich.table import Table
    from rich.text import Text

    optional = [c.header for c in columns if c.optional]
    from .terminal import FittedTable

    table = (FittedTable if optional else Table)(
        title=plain(title), title_justify="left", show_edge=False, pad_edge=False,
        caption=plain("\n".join(notes)) if notes else None, caption_justify="left")
    if optional:
        table.optional_column = optional[0]
    for c in columns:
        table.add_column(c.header, justify=c.justify, style=c.style, no_wrap=c.no_wrap)
    for row in rows:
        table.add_row(*(cell if isinstance(cell, Text) else Text(str(cell)) for cell in row))
    return table


def _plain_text(cell) -> str:
    return cell.plain if _is_text(cell) else str(cell)


def interval_text(name: str, interval) -> str:
    """``[low, high]`` in the metric's format, clipped to the metric's range, then its marks ("" without
    an interval): † it excludes its estimate, ‡ it reached outside the range and is shown clipped
    (:func:`interval_notes` says so under the table). ``interval``: a
    :class:`~calibrate_cli.bootstrap.ConfidenceInterval` or its ``to_dict()``."""
    if not interval:
        return ""
    from ..bootstrap.intervals import interval_marks

    ci = interval if isinstance(interval, dict) else interval.to_dict()
    low, high = ci.get("clipped_low", ci["low"]), ci.get("clipped_high", ci["high"])
    return f"[{format_value(name, low)}, {format_value(name, high)}]{interval_marks(ci)}"


def interval_notes(*interval_sets) -> list[str]:
    """The notes under a table of intervals (each set ``{name: ConfidenceInterval, its dict, or None}``):
    what each mark that appears means, and which method each metric got when they differ
    (:func:`calibrate_cli.bootstrap.intervals.interval_notes`)."""
    from ..bootstrap.intervals import interval_notes as notes

    return notes(*interval_sets)


def missing_interval_notes(*tables) -> list[str]:
    """The notes naming the metrics a table shows with a finite value but no interval, one per cause
    (nothing when no interval at all was computed: no bootstrap). ``tables``: (``{metric: value}`` as
    shown, ``{metric: interval or None}``) of each column or row of intervals. KS-CE, SmoothECE and the
    sorted classwise errors (every resample a pass over the samples) are resampled only when named."""
    from ..metrics.registry import BOOTSTRAP_DEFAULT

    if not any(ci for _, intervals in tables for ci in intervals.values()):
        return []
    missing: list[str] = []
    for values, intervals in tables:
        for name, value in values.items():
            finite = isinstance(value, (int, float)) and math.isfinite(value)
            if finite and not intervals.get(name) and name not in missing:
                missing.append(name)
    named = [m for m in missing if m not in BOOTSTRAP_DEFAULT]
    other = [m for m in missing if m in BOOTSTRAP_DEFAULT]
    pretty = lambda names: ", ".join(PRETTY_NAMES.get(m, m) for m in names)  # noqa: E731
    notes = []
    if named:
        notes.append(f"no interval for {pretty(named)}: every resample of {'it' if len(named) == 1 else 'them'} is a "
                     f"pass over the samples, so {'it is' if len(named) == 1 else 'they are'} resampled only when "
                     f"named: --bootstrap-metrics all, or the list of metrics to resample with {','.join(named)}")
    if other:
        notes.append(f"no interval for {pretty(other)}: not among the --bootstrap-metrics")
    return notes


def _metrics_rows(metrics: dict, intervals: dict | None, names) -> list[list]:
    rows = []
    for name in names:
        row = [PRETTY_NAMES[name], format_value(name, metrics[name])]
        if intervals:
            row.append(interval_text(name, intervals.get(name)))
        rows.append([*row, METRIC_DEFINITIONS[name]])
    return rows


def _metrics_columns(intervals: dict | None) -> list[Column]:
    return [
        Column("metric", justify="left", style="bold", no_wrap=True),
        Column("value", no_wrap=True),
        *([Column("interval", no_wrap=True)] if intervals else []),
        Column("definition", justify="left", style="dim", optional=True),
    ]


def metrics_table(metrics: dict, *, title: str | None = None, intervals: dict | None = None) -> Table:
    """The metrics: name, value, [interval], definition (the definition gives way on narrow consoles).

    ``title`` is plain text (file names may hold Rich markup such as ``[bold]``: shown literally)."""
    names = shown_metrics(metrics)
    rows = _metrics_rows(metrics, intervals, names)
    notes = interval_notes(intervals or {}) + missing_interval_notes(({m: metrics[m] for m in names}, intervals or {}))
    return render_rows("table", _metrics_columns(intervals), rows, title=title, notes=notes)


def _bins_rows(rows: list[dict], first_closed: bool) -> list[list]:
    """The per-bin rows of the terminal and Markdown tables: span, count, confidence, accuracy, gap
    (coloured: red over-confident, blue under-confident) and, on a terminal, a bar of the bin's share."""
    from rich.text import Text

    total = sum(r["count"] for r in rows) or 1
    out = []
    for i, r in enumerate(rows):
        opening = "[" if (i == 0 and first_closed) else "("
        span = f"{opening}{r['lower']:.3f}, {r['upper']:.3f}]"
        if r["count"] == 0:
            out.append([Text(span, style="dim"), Text("0", style="dim"), "", "", "", ""])
            continue
        gap = r["gap"]
        colour, verdict = ("red", "over") if gap > 0 else ("blue", "under")
        share = "█" * max(1, round(20 * r["count"] / total))
        out.append([
            span,
            str(r["count"]),
            f"{r['mean_confidence']:.4f}",
            f"{r['accuracy']:.4f}",
            Text(f"{gap:+.4f}", style=colour),
            Text.assemble((share, "dim"), f" {verdict if abs(gap) > 0 else ''}"),
        ])
    return out


_BINS_COLUMNS = [
    Column("bin", justify="left"),
    Column("count"),
    Column("confidence"),
    Column("accuracy"),
    Column("gap"),
    Column("", justify="left", markdown=False),
]


def bins_table(rows: list[dict], *, title: str, first_closed: bool = True) -> Table:
    return render_rows("table", _BINS_COLUMNS, _bins_rows(rows, first_closed), title=title)


def plain(text: str | None) -> str | None:
    """User text (file names, messages quoting them) shown literally by Rich: ``[`` escaped."""
    from rich.markup import escape

    return None if text is None else escape(str(text))


def _check_stdout() -> None:
    if sys.stdout is None or getattr(sys.stdout, "closed", False):
        from ..errors import OutputError

        raise OutputError("standard output is closed; write the report to a file with -o FILE")


@contextlib.contextmanager
def writing_stdout():
    """Errors writing stdout, as one line: a full disk, a bad descriptor (exit 2). A reader that
    went away (BrokenPipeError) passes through: the CLI ends quietly with 141, as Unix tools."""
    from ..errors import OutputError

    _check_stdout()
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(f"standard output: cannot write ({exc.strerror or exc})") from None


def flush_stdout() -> None:
    """Flush stdout inside the CLI's error handling (a buffered write fails only here)."""
    if sys.stdout is None or getattr(sys.stdout, "closed", False):
        return
    with writing_stdout():
        sys.stdout.flush()


def render_tables(console: Console, tables: list) -> None:
    with writing_stdout() if console.file is sys.stdout else contextlib.nullcontext():
        for i, table in enumerate(tables):
            if i:
                console.print()
            title = getattr(table, "title", None)
            if title:
                untitled = copy.copy(table)
                untitled.title = None
                console.print(title, style="table.title", soft_wrap=True)
                table = untitled
            console.print(table)


def tables_to_text(tables: list, width: int = 160) -> str:
    """The tables as plain text for a file: wide enough that no definition is cut (titles never wrap)."""
    from rich.console import Console

    buffer = io.StringIO()
    render_tables(Console(file=buffer, width=width, no_color=True, highlight=False, color_system=None), tables)
    return buffer.getvalue()


#: significant digits of the numbers in CSV output: 15 is the most that every float64 keeps exactly in
#: decimal (DBL_DIG), so a value computed as 1 − 0.9505 is written 0.0495, not 0.04949999999999999
CSV_DIGITS = 15


def csv_number(value) -> str:
    """A number for CSV output: ``CSV_DIGITS`` significant digits (no float noise), "" for None;
    NaN and ±inf as ``nan``, ``inf``, ``-inf`` (what ``float()`` and pandas read back)."""
    if value is None:
        return ""
    return f"{float(value):.{CSV_DIGITS}g}"


def metrics_csv(metrics: dict, *, intervals: dict | None = None, constant: dict | None = None) -> str:
    """One row per metric; with ``intervals`` (name → {"low", "high", "clipped"}), ``low`` and ``high``
    columns (the raw ends, as in the JSON) and ``clipped`` (True when an end lies outside the metric's range).
    ``constant``: last columns (header → text) with the same cell in every row (e.g. the calibration applied)."""
    constant = constant or {}
    columns = [Column("metric"), Column("value"),
               *((Column("low"), Column("high"), Column("clipped")) if intervals else ()), Column("definition"),
               *(Column(header) for header in constant)]
    rows = []
    for name in (m for m in METRIC_NAMES if m in metrics):
        row = [name, csv_number(metrics[name])]
        if intervals:
            ci = intervals.get(name)
            row += [csv_number(ci["low"]), csv_number(ci["high"]), ci.get("clipped", False)] if ci else ["", "", ""]
        rows.append([*row, METRIC_DEFINITIONS[name], *constant.values()])
    return render_rows("csv", columns, rows)


BIN_CSV_COLUMNS = ("bin", "lower", "upper", "count", "mean_confidence", "accuracy", "gap")


def bins_csv(rows: list[dict], *, constant: dict | None = None) -> str:
    """The per-bin table, one row per bin (``BinStats.to_rows()``): index, edges, count, mean
    confidence, accuracy and gap = confidence − accuracy (empty cells for an empty bin).
    ``constant``: as :func:`metrics_csv`'s."""
    constant = constant or {}
    out = [[i, *(csv_number(r[c]) for c in BIN_CSV_COLUMNS[1:3]), r["count"],
            *(csv_number(r[c]) for c in BIN_CSV_COLUMNS[4:]), *constant.values()] for i, r in enumerate(rows)]
    return render_rows("csv", [Column(c) for c in (*BIN_CSV_COLUMNS, *constant)], out)


def metrics_markdown(metrics: dict, *, heading: str | None = None, intervals: dict | None = None) -> str:
    names = shown_metrics(metrics)
    rows = _metrics_rows(metrics, intervals, names)
    notes = interval_notes(intervals or {}) + missing_interval_notes(({m: metrics[m] for m in names}, intervals or {}))
    return render_rows("markdown", _metrics_columns(intervals), rows, title=heading, notes=notes)


def bins_markdown(rows: list[dict], *, heading: str | None = None, first_closed: bool = True) -> str:
    """The per-bin table as Markdown: the rows of the terminal's reliability table."""
    return render_rows("markdown", _BINS_COLUMNS, _bins_rows(rows, first_closed), title=heading)


def emit(text: str, output: str | None, force: bool) -> None:
    """Write ``text`` to ``output`` (atomically, refusing to overwrite without force) or to stdout
    (``None`` or ``-``)."""
    if output and output != "-":
        from ..data.outputs import write_text

        write_text(output, text, force=force)
    else:
        with writing_stdout():
            sys.stdout.write(text)


def write_report(rendered, output: str | None, force: bool) -> None:
    """A rendered report (text, or Rich tables) to ``output`` or, when None, stdout: text as it
    is, tables drawn on the terminal or written as plain text to a file."""
    if isinstance(rendered, str):
        emit(rendered, output, force)
        return
    tables = rendered if isinstance(rendered, list) else [rendered]
    if output:
        emit(tables_to_text(tables), output, force)
    else:
        render_tables(stdout_console(), tables)


def warn(messages) -> None:
    """``Warning: ...`` on stderr for each message, remedies worded as flags (:mod:`.hints`)."""
    from .hints import cli_text

    if not messages:
        return
    console = stderr_console()
    for message in messages:
        console.print(f"[yellow]Warning:[/yellow] {plain(cli_text(message))}", soft_wrap=True)


#: the variables with which Rich takes a stream that is no TTY for a terminal
_FORCE_TERMINAL_ENV = ("FORCE_COLOR", "TTY_INTERACTIVE", "TTY_COMPATIBLE")


def _may_be_terminal(stream) -> bool:
    """False where Rich's console on ``stream`` cannot be a terminal: no TTY and no variable forcing one."""
    try:
        tty = stream is not None and stream.isatty()
    except (AttributeError, ValueError, OSError):  # a closed or odd stream
        tty = False
    return tty or any(os.environ.get(name) for name in _FORCE_TERMINAL_ENV)


@contextlib.contextmanager
def progress_bar(description: str, *, enabled: bool = True):
    """A Rich progress bar on stderr; yields a ``progress(done, total)`` callback for the core.

    Shown only when ``enabled`` and stderr is a terminal (scripts and CI logs stay clean).
    """
    if not (enabled and _may_be_terminal(sys.stderr)):  # surely not one: Rich is not even imported
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = stderr_console()
    if not console.is_terminal:
        yield None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
