"""The one place where the core's neutral remedies become command-line flags.

The core names parameters and concepts ("use the grid search with the ECE objective"); an error
or warning with an obvious remedy carries its code (:data:`calibrate_cli.errors.REMEDIES`), and
:func:`cli_text` words that code as the flags of ``calib`` ("use --search grid --objective ece").
:class:`~calibrate_cli.cli.CalibGroup` applies it to every error, :func:`render.warn` to every
warning.
"""

from __future__ import annotations

from ..errors import with_remedy

#: remedy code (calibrate_cli/errors.py) → the same remedy as flags of calib
CLI_REMEDIES = {
    "grid-search-ece": "use --search grid --objective ece",
    "grid-search": "use --search grid, or drop --objective",
    "no-compat": "drop --compat",
    "nll-or-vector": "use --search nll or --search vector",
    "grid-format": "e.g. --grid 0.1:10:0.1",
    "widen-grid": "widen --grid START:STOP:STEP",
    "logits": "drop --probs",
    "probs-or-logits": "give --probs, or --logits to take them as logits all the same",
    "probs": "give --probs",
    "resume-or-force": "add --resume to continue it, or --force to start again",
    "topk-columns": "rename with --topk-ids, --topk-logprobs, --labels",
    "sequence-columns": "rename with --token-logprobs, --correct",
    "sequence-id": "name it with --sequence-id",
    "conformal-fit": "write one with calib conformal --save FILE.json",
    "classwise-metrics": "ask for it with --metrics classwise_ece",
    "cpu-device": "drop --device",
}


def cli_text(message) -> str:
    """An error or warning as ``calib`` says it: its remedy (if any) worded as flags."""
    remedy = getattr(message, "remedy", None)
    if remedy is None:
        return str(message)
    return with_remedy(message.message, remedy, CLI_REMEDIES)


def gate_option(gate) -> str:
    """A gate as the option that set it: ``--fail-above ece=0.02``."""
    return f"--fail-{gate.direction} {gate.metric}={gate.threshold:g}"
