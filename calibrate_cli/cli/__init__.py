"""The ``calib`` command line: a thin Click shell over the core (parse → load → core → render).

Errors are translated in one place, :class:`CalibGroup`: a :class:`~calibrate_cli.errors.CalibError`
becomes ``Error: <one line>`` on stderr with exit code 2, never a traceback (set ``CALIB_DEBUG=1``
to see one). Heavy libraries (torch, matplotlib) are imported only inside the commands that need them.
"""

from __future__ import annotations

import os

import click

from .._version import __version__
from ..errors import CalibError

DEBUG_ENV = "CALIB_DEBUG"


class UserError(click.ClickException):
    """A problem with the user's input or files: ``Error: ...`` on stderr, exit code 2."""

    exit_code = 2


class CalibGroup(click.Group):
    """Root group: turns every CalibError (and unexpected failures) into a one-line error."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CalibError as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            raise UserError(str(exc)) from None
        except MemoryError:
            if os.environ.get(DEBUG_ENV):
                raise
            raise UserError("out of memory; try a smaller input or a machine with more RAM") from None
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            raise click.ClickException(
                f"internal error: {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for a traceback and please report it)"
            ) from None


@click.group(
    cls=CalibGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "-V", "--version", prog_name="calib")
def cli() -> None:
    """Measure and fix the calibration of classifiers.

    A model is calibrated when its confidence matches its accuracy: of the predictions it
    makes at 80% confidence, 80% are right. Point calib at a model's saved outputs (logits or
    probabilities, and labels) in .npy, .npz, .pt or .csv files.

    Environment: CALIB_THREADS=N sets the worker threads (default: the CPUs, at most 8);
    CALIB_DEBUG=1 shows a traceback instead of a one-line error.

    \b
    Examples:
      calib eval logits.npy labels.npy
      calib eval logits.npy labels.npy --format json --output metrics.json
      calib eval logits.npy labels.npy --fail-above ece=0.02   # exit 1 in CI when miscalibrated
      calib temperature val_logits.npy val_labels.npy --test test_logits.npy test_labels.npy
      calib eval logits.npy labels.npy --bootstrap 1000          # intervals on every metric
      calib compare base.npy labels.npy focal.npy labels.npy     # paired B − A with intervals
      calib plot logits.npy labels.npy -o reliability.png
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


def _register() -> None:
    from .compare import compare_command
    from .eval import eval_command
    from .plot import plot_command
    from .temperature import temperature_command

    cli.add_command(eval_command)
    cli.add_command(temperature_command)
    cli.add_command(plot_command)
    cli.add_command(compare_command)
    for command in (cli, *cli.commands.values()):
        _examples_last(command)


_register()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="calib")
