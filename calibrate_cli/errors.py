"""Exceptions raised by calib's core, and the remedies they may point to.

Every error a user can cause derives from :class:`CalibError`; the CLI turns it into a one-line
``Error: ...`` on stderr with exit code 2 (see ``calibrate_cli.cli``). The core never exits or prints.

The core's messages name parameters and concepts, never command-line flags: an error or warning
that has an obvious remedy carries its code (``remedy="grid-search"``), worded for Python callers
in :data:`REMEDIES`; the CLI words the same code as its flags (``calibrate_cli/cli/hints.py``).
"""

from __future__ import annotations

#: remedy code → what a Python caller can change (the CLI's wording: calibrate_cli/cli/hints.py)
REMEDIES = {
    "grid-search-ece": "use the grid search with the ECE objective",
    "grid-search": "use the grid search, or the search's own objective",
    "no-compat": "leave the compat mode out",
    "nll-or-vector": "fit a temperature (NLL search) or vector scaling instead",
    "grid-format": "e.g. 0.1:10:0.1",
    "widen-grid": "widen the grid (START:STOP:STEP)",
    "logits": "give logits (input_kind='logits')",
    "probs-or-logits": "say input_kind='probs', or input_kind='logits' to take them as logits all the same",
    "probs": "say input_kind='probs'",
    "resume-or-force": "resume the run, or start it again with force",
    "topk-columns": "name the columns (topk_ids, topk_logprobs, labels)",
    "sequence-columns": "name the columns (token_logprobs, correct)",
    "sequence-id": "name the sequence id column (sequence_id)",
    "conformal-fit": "save one with ConformalFit.to_dict()",
    "classwise-metrics": "ask for it by name, e.g. metrics=['classwise_ece']",
    "cpu-device": "leave the device at cpu",
}


def with_remedy(message: str, remedy: str | None, wording: dict[str, str] = REMEDIES) -> str:
    """``message`` followed by ``remedy`` as ``wording`` says it (``"…; use the grid search"``)."""
    return f"{message}; {wording[remedy]}" if remedy else message


class CalibError(Exception):
    """Base class of every error calib reports to a user.

    ``remedy``: a code of :data:`REMEDIES`; ``str(error)`` ends with its neutral wording and
    ``error.message`` is the message without it.
    """

    def __init__(self, message: str = "", *, remedy: str | None = None):
        if remedy is not None and remedy not in REMEDIES:
            raise KeyError(f"unknown remedy {remedy!r}")
        self.message = str(message)
        self.remedy = remedy
        super().__init__(with_remedy(self.message, remedy))


class InputError(CalibError, ValueError):
    """Bad input data: unreadable file, wrong shape, NaN scores, labels out of range, ..."""


class OutputError(CalibError, OSError):
    """An output file cannot be written (exists without ``force``, unwritable folder, ...)."""


class FitError(InputError):
    """A calibration method cannot be fitted to these data: its fit gave parameters that are not
    finite, or a degenerate map (probabilities that are not finite, or the same probabilities for
    every sample where the scores differ). The message names the method and why; the calibrator is
    never returned, saved or selected."""


class CalibWarning(UserWarning):
    """A warning about the input that does not stop the computation (e.g. 1-D scores in [0, 1] taken
    as log-odds); its argument may be an :class:`Advice`, which the CLI words as flags."""


class Advice(str):
    """A warning (a plain ``str``: JSON and comparisons see the neutral text) with a remedy code
    the CLI words as flags, like :class:`CalibError`'s."""

    message: str
    remedy: str | None

    def __new__(cls, message: str, remedy: str | None = None) -> "Advice":
        if remedy is not None and remedy not in REMEDIES:
            raise KeyError(f"unknown remedy {remedy!r}")
        self = super().__new__(cls, with_remedy(message, remedy))
        self.message, self.remedy = message, remedy
        return self
