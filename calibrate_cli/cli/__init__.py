"""The ``calib`` command line: a thin Click shell over the core (parse → load → core → render).

Errors are translated in one place, :class:`CalibGroup` (remedies worded as flags by
:mod:`calibrate_cli.cli.hints`), into the exit codes of
docs/cli-contract.md: 0 ok, 1 a gate failed, 2 bad input or usage (``Error: <one line>`` on
stderr naming the file, never a traceback), 3 a bug in calib (``internal error``; set
``CALIB_DEBUG=1`` for the traceback), 130 Ctrl-C, 141 the reader of stdout went away (quietly, as
Unix tools), 143 SIGTERM (temporaries removed). Heavy libraries (torch, matplotlib) are imported
only inside the commands that need them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

import click

from .._version import __version__
from ..errors import CalibError

DEBUG_ENV = "CALIB_DEBUG"

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a tool killed by SIGPIPE
#: signals that end a run at once, temporaries removed, with 128 + the signal's number (and SIGINT)
TERMINATING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class _ShownOnStderr(click.ClickException):
    """A ClickException written to ``sys.stderr`` as it is. Click's own stream for errors re-encodes
    an ASCII stderr (PYTHONIOENCODING=ascii, LANG=C) as UTF-8, so a file name's ``é`` reached an
    ASCII terminal as raw bytes; ``sys.stderr`` replaces what it cannot encode (``?``,
    :func:`_tolerant_streams`)."""

    def show(self, file=None):
        super().show(sys.stderr if file is None else file)


class UserError(_ShownOnStderr):
    """A problem with the user's input or files: ``Error: ...`` on stderr, exit code 2."""

    exit_code = EXIT_USAGE


class InternalError(_ShownOnStderr):
    """A bug in calib (an exception nobody expected): ``Error: internal error: ...``, exit code 3."""

    exit_code = EXIT_INTERNAL


class _ClickErrorOnStderr(click.ClickException):
    """Click's own error (a usage error: its usage line, hint and ``Error: ...``) shown as Click shows
    it, but on ``sys.stderr`` (see :class:`_ShownOnStderr`), with its exit code."""

    def __init__(self, error: click.ClickException):
        super().__init__(error.message)
        self.error = error
        self.exit_code = error.exit_code

    def show(self, file=None):
        self.error.show(sys.stderr if file is None else file)


def _on_stderr(error: click.ClickException) -> click.ClickException:
    return error if isinstance(error, (_ShownOnStderr, _ClickErrorOnStderr)) else _ClickErrorOnStderr(error)


def _show_traceback() -> None:
    """With CALIB_DEBUG: the traceback of the exception being handled, on stderr (the exit code
    stays the contract's: 2 for bad input, 3 for a bug)."""
    import traceback

    traceback.print_exc(file=sys.stderr)


def _thread_start_failed(exc: BaseException) -> bool:
    """A thread that could not start (``RuntimeError: can't start new thread``): the process ran
    out of memory for its stack (ulimit -v) or of processes (ulimit -u)."""
    return isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)


def _end_now(signum, frame):
    """SIGTERM, SIGHUP, SIGINT: remove this run's temporaries and exit with 128 + the signal's
    number at once. (Raising an exception instead is not reliable: a C++ extension such as
    matplotlib's Agg may turn it into an unrelated TypeError.)"""
    from ..data.outputs import remove_live_temporaries

    remove_live_temporaries()
    os._exit(128 + signum)


@contextlib.contextmanager
def _terminating_signals():
    """Install :func:`_end_now` while a command runs (main thread only; not for SIGINT with
    CALIB_DEBUG, which keeps Python's KeyboardInterrupt and its traceback)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = TERMINATING_SIGNALS + (() if os.environ.get(DEBUG_ENV) else (signal.SIGINT,))
    previous = {}
    try:
        for signum in signals:
            previous[signum] = signal.signal(signum, _end_now)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _tolerant_streams() -> None:
    """Text the terminal's encoding cannot show (``−`` under PYTHONIOENCODING=ascii, a file name
    that is not UTF-8) becomes ``?`` instead of a UnicodeEncodeError. Files written with -o are
    always UTF-8."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(Exception):
                reconfigure(errors="replace")


#: numpy's switch for huge-page advice on large arrays; a user's setting of it is kept
HUGEPAGE_ENV = "NUMPY_MADVISE_HUGEPAGE"


def _no_hugepage_advice() -> None:
    """Stop numpy from asking for transparent huge pages on its large arrays (``madvise``), unless
    ``NUMPY_MADVISE_HUGEPAGE`` says otherwise. calib's arrays are written once and read in order, so
    huge pages save little, while their first touch can cost several times that of small pages
    (measured in docs/performance.md)."""
    if HUGEPAGE_ENV in os.environ:
        return
    import numpy as np

    core = getattr(np, "_core", None) or getattr(np, "core", None)
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if switch is not None:
        with contextlib.suppress(Exception):
            switch(False)


def _silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the interpreter's final flush is quiet."""
    with contextlib.suppress(Exception):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return " ".join(lines)


@contextlib.contextmanager
def _calib_warnings_on_stderr():
    """The core's :class:`~calibrate_cli.errors.CalibWarning` as one ``Warning: ...`` line each on
    stderr (remedies worded as flags), once per text; other warnings as Python shows them."""
    import warnings

    from ..errors import CalibWarning

    shown = set()
    python_show = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, CalibWarning):
            return python_show(message, category, filename, lineno, file, line)
        advice = message.args[0] if isinstance(message, Warning) and message.args else message
        if str(advice) not in shown:
            from . import render  # only now: machine-readable output starts without Rich

            shown.add(str(advice))
            render.warn([advice])

    with warnings.catch_warnings():
        warnings.simplefilter("always", CalibWarning)
        warnings.showwarning = show
        yield


class CalibGroup(click.Group):
    """Root group: the one place where failures become exit codes (see the module's docstring)."""

    def main(self, *args, **kwargs):
        _tolerant_streams()
        _no_hugepage_advice()
        with _terminating_signals():
            return super().main(*args, **kwargs)

    def make_context(self, *args, **kwargs):
        # parsing prints --help and usage errors: a closed pipe or Ctrl-C there too
        try:
            return super().make_context(*args, **kwargs)
        except click.ClickException as exc:
            raise _on_stderr(exc) from None
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(EXIT_BROKEN_PIPE) from None
        except KeyboardInterrupt:
            raise click.exceptions.Exit(128 + signal.SIGINT) from None

    def invoke(self, ctx: click.Context):
        from . import render
        from ..data.formats import resource_problem
        from ..data.io import INPUTS_READ, inputs_read_text
        from ..data.outputs import remove_live_temporaries
        from .hints import cli_text

        debug = bool(os.environ.get(DEBUG_ENV))
        INPUTS_READ.clear()  # the files this command reads, for an out-of-memory message
        try:
            try:
                with _calib_warnings_on_stderr():
                    result = super().invoke(ctx)
            except click.exceptions.Exit:
                render.flush_stdout()
                raise
            render.flush_stdout()
            return result
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(EXIT_BROKEN_PIPE) from None
        except KeyboardInterrupt:
            remove_live_temporaries()
            if debug:
                raise
            raise click.exceptions.Exit(128 + signal.SIGINT) from None
        except CalibError as exc:
            if debug:
                _show_traceback()
            raise UserError(_one_line(cli_text(exc))) from None
        except MemoryError:
            if debug:
                _show_traceback()
            raise UserError(
                f"out of memory{inputs_read_text(' working on ')}; try a smaller input, "
                "CALIB_THREADS=1 or a machine with more RAM"
            ) from None
        except click.ClickException as exc:
            raise _on_stderr(exc) from None
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            if debug:
                _show_traceback()
            if resource_problem(exc):  # EMFILE while importing a module, ENOMEM, …: the machine's limit
                where = f" (opening {exc.filename})" if getattr(exc, "filename", None) else ""
                raise UserError(f"{resource_problem(exc)}{where}") from None
            if _thread_start_failed(exc):
                raise UserError(
                    "cannot start a thread: no memory is left for its stack (ulimit -v) or the user may "
                    "start no more processes (ulimit -u); raise the limit"
                ) from None
            raise InternalError(
                f"internal error: {type(exc).__name__}: {_one_line(exc)} "
                f"(set {DEBUG_ENV}=1 for a traceback and please report it)"
            ) from None


#: the commands, in the order ``calib --help`` lists them: name → (module of calibrate_cli.cli, attribute).
#: A command's module is imported only when that command runs (or ``--help`` lists them all), so
#: ``calib eval`` does not pay for the imports of ``train``, ``report`` or ``compare``.
COMMANDS = {
    "eval": ("eval", "eval_command"),
    "temperature": ("temperature", "temperature_command"),
    "fit": ("fit", "fit_command"),
    "plot": ("plot", "plot_command"),
    "compare": ("compare", "compare_command"),
    "ood": ("ood", "ood_command"),
    "conformal": ("conformal", "conformal_command"),
    "table": ("table", "table_command"),
    "report": ("report", "report_command"),
    "gamma": ("gamma", "gamma_command"),
    "train": ("train", "train_command"),
}


class LazyCommands(CalibGroup):
    """:class:`CalibGroup` whose subcommands (:data:`COMMANDS`) are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*COMMANDS, *(name for name in self.commands if name not in COMMANDS)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS:
            import importlib

            module, attribute = COMMANDS[name]
            command = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
            self.add_command(_examples_last(command), name)
        return super().get_command(ctx, name)

    def load_all(self) -> dict[str, click.Command]:
        """Every subcommand, imported: name → command (for ``--help`` pages and docs)."""
        ctx = click.Context(self)
        for name in self.list_commands(ctx):
            self.get_command(ctx, name)
        return dict(self.commands)


@click.group(
    cls=LazyCommands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "-V", "--version", prog_name="calib")
def cli() -> None:
    """Measure and fix the calibration of classifiers.

    A model is calibrated when its confidence matches its accuracy: of the predictions it
    makes at 80% confidence, 80% are right. Point calib at a model's saved outputs (logits or
    probabilities, and labels) in .npy, .npz, .pt/.pth, .csv, .parquet, .arrow/.feather,
    .safetensors, .h5/.hdf5 or .zarr files (docs/inputs.md).

    Environment: CALIB_THREADS=N sets the worker threads (default: the CPUs, at most 8);
    CALIB_DEBUG=1 shows a traceback before the one-line error (the exit code stays).

    \b
    Examples:
      calib eval logits.npy labels.npy
      calib eval logits.npy labels.npy --format json --output metrics.json
      calib eval logits.npy labels.npy --fail-above ece=0.02   # exit 1 in CI when miscalibrated
      calib temperature val_logits.npy val_labels.npy --test test_logits.npy test_labels.npy
      calib fit val_logits.npy val_labels.npy --method all --test test_logits.npy test_labels.npy
      calib eval logits.npy labels.npy --bootstrap 1000          # intervals on every metric
      calib compare base.npy labels.npy focal.npy labels.npy     # paired B − A with intervals
      calib plot logits.npy labels.npy -o reliability.png
      calib report val.npy val_y.npy test.npy test_y.npy -o report.html   # one HTML file to send
      CALIB_THREADS=1 calib eval logits.npy labels.npy
    """


def _examples_last(command: click.Command) -> click.Command:
    """Move the docstring's ``Examples:`` block into the epilog, so ``--help`` ends with examples."""
    import inspect

    text = inspect.cleandoc(command.help or "")
    marker = "\b\nExamples:"
    if marker in text and not command.epilog:
        body, examples = text.split(marker, 1)
        command.help = body.rstrip()
        command.epilog = marker + examples
    return command


_examples_last(cli)


def main() -> None:
    """Console-script entry point.

    The objects made so far (the imported modules, Click's command tree) are frozen out of the
    garbage collector (``gc.freeze``): a command-line process keeps them to its end anyway, and
    every later collection, the interpreter's last one at exit included, then skips them."""
    import gc

    gc.freeze()
    cli(prog_name="calib")
