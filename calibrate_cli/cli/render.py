"""Rendering reports for people (Rich table, Markdown) and scripts (JSON, CSV). No maths here."""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..metrics import METRIC_DEFINITIONS, METRIC_NAMES

# Metrics that are fractions in [0, 1] and read best as percentages in tables.
PERCENT_METRICS = frozenset(METRIC_NAMES) - {"nll", "brier"}
PRETTY_NAMES = {
    "accuracy": "Accuracy",
    "error": "Error",
    "ece": "ECE",
    "adaece": "AdaECE",
    "classwise_ece": "Classwise-ECE",
    "mce": "MCE",
    "nll": "NLL",
    "brier": "Brier",
    "top5_accuracy": "Top-5 accuracy",
    "mean_confidence": "Mean confidence",
    "s99_share": "S99 share",
    "s99_accuracy": "S99 accuracy",
}


class _Console(Console):
    """Rich's console, except that a closed pipe raises BrokenPipeError (Rich's own answer is
    ``SystemExit(1)``, which reads as a failed gate): the CLI ends quietly with exit code 141."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def stdout_console() -> Console:
    """The console of reports on stdout; refuses a closed stdout (the report would be lost)."""
    _check_stdout()
    return _Console(highlight=False)


def stderr_console() -> Console:
    return _Console(stderr=True, highlight=False)


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
    """Metric names worth a row (top-5 only when defined)."""
    return [m for m in METRIC_NAMES if not (m == "top5_accuracy" and metrics.get(m) is None)]


def metrics_table(metrics: dict, *, title: str | None = None, intervals: dict | None = None) -> Table:
    """``title`` is plain text (file names may hold Rich markup such as ``[bold]``: escaped)."""
    table = Table(title=plain(title), title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    if intervals:
        table.add_column("interval", justify="right")
    table.add_column("definition", style="dim")
    for name in shown_metrics(metrics):
        row = [PRETTY_NAMES[name], format_value(name, metrics[name])]
        if intervals:
            ci = intervals.get(name)
            row.append(
                f"[{format_value(name, ci['low'])}, {format_value(name, ci['high'])}]" if ci else ""
            )
        row.append(escape(METRIC_DEFINITIONS[name]))
        table.add_row(*row)
    return table


def bins_table(rows: list[dict], *, title: str, first_closed: bool = True) -> Table:
    table = Table(title=plain(title), title_justify="left", show_edge=False, pad_edge=False)
    for col, justify in (("bin", "left"), ("count", "right"), ("confidence", "right"), ("accuracy", "right"), ("gap", "right")):
        table.add_column(col, justify=justify)
    table.add_column("", justify="left")
    total = sum(r["count"] for r in rows) or 1
    for i, r in enumerate(rows):
        opening = "[" if (i == 0 and first_closed) else "("
        span = escape(f"{opening}{r['lower']:.3f}, {r['upper']:.3f}]")
        if r["count"] == 0:
            table.add_row(span, "0", "", "", "", "", style="dim")
            continue
        gap = r["gap"]
        colour = "red" if gap > 0 else "blue"
        verdict = "over" if gap > 0 else "under"
        share = "█" * max(1, round(20 * r["count"] / total))
        table.add_row(
            span,
            str(r["count"]),
            f"{r['mean_confidence']:.4f}",
            f"{r['accuracy']:.4f}",
            f"[{colour}]{gap:+.4f}[/{colour}]",
            f"[dim]{share}[/dim] {verdict if abs(gap) > 0 else ''}",
        )
    return table


def plain(text: str | None) -> str | None:
    """User text (file names, messages quoting them) shown literally by Rich: ``[`` escaped."""
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
            console.print(table)


def tables_to_text(tables: list, width: int = 110) -> str:
    buffer = io.StringIO()
    render_tables(Console(file=buffer, width=width, no_color=True, highlight=False, color_system=None), tables)
    return buffer.getvalue()


def metrics_csv(metrics: dict, *, intervals: dict | None = None) -> str:
    """One row per metric; with ``intervals`` (name → {"low", "high"}), ``low`` and ``high`` columns."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["metric", "value", *(("low", "high") if intervals else ()), "definition"])

    def number(value) -> str:
        return "" if value is None else repr(float(value))

    for name in METRIC_NAMES:
        row = [name, number(metrics[name])]
        if intervals:
            ci = intervals.get(name)
            row += [number(ci["low"]), number(ci["high"])] if ci else ["", ""]
        writer.writerow([*row, METRIC_DEFINITIONS[name]])
    return buffer.getvalue()


def metrics_markdown(metrics: dict, *, heading: str | None = None, intervals: dict | None = None) -> str:
    lines = [f"**{heading}**", ""] if heading else []
    if intervals:
        lines += ["| metric | value | interval | definition |", "|---|---:|---:|---|"]
    else:
        lines += ["| metric | value | definition |", "|---|---:|---|"]
    for name in shown_metrics(metrics):
        definition = METRIC_DEFINITIONS[name].replace("|", "\\|")
        cells = [PRETTY_NAMES[name], format_value(name, metrics[name])]
        if intervals:
            ci = intervals.get(name)
            cells.append(f"[{format_value(name, ci['low'])}, {format_value(name, ci['high'])}]" if ci else "")
        lines.append("| " + " | ".join([*cells, definition]) + " |")
    return "\n".join(lines) + "\n"


def emit(text: str, output: str | None, force: bool) -> None:
    """Write ``text`` to ``output`` (atomically, refusing to overwrite without force) or to stdout
    (``None`` or ``-``)."""
    if output and output != "-":
        from ..io import write_text

        write_text(output, text, force=force)
    else:
        with writing_stdout():
            sys.stdout.write(text)


def warn(messages) -> None:
    console = stderr_console()
    for message in messages:
        console.print(f"[yellow]Warning:[/yellow] {plain(message)}", soft_wrap=True)


@contextlib.contextmanager
def progress_bar(description: str, *, enabled: bool = True):
    """A Rich progress bar on stderr; yields a ``progress(done, total)`` callback for the core.

    Shown only when ``enabled`` and stderr is a terminal (scripts and CI logs stay clean).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = stderr_console()
    if not (enabled and console.is_terminal):
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
