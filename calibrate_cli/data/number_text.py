"""Numbers written as text: ASCII decimal and scientific notation only.

Python's ``float()`` and ``int()`` are lenient: ``float("1_5")`` is 15 (digit grouping), and any
Unicode decimal digit counts (``float("١٢")``, Arabic-Indic, is 12; full-width ``"１２"`` too). A
CSV cell or an option value such as ``1_5`` is far more likely a typo or a damaged file than a
number, and reading it as 15 would be a silent wrong number. calib reads numbers the way numpy's C
parser (its fast CSV path) and other tools do: an optional sign, ASCII digits with at most one
decimal point, and an optional exponent (``1.5``, ``-.5``, ``2e-3``, ``1E+05``); for floats also
the spellings ``nan``, ``inf`` and ``infinity`` (any case, with a sign), which the value checks then
treat as before. Surrounding white space is ignored, as ``float()`` ignores it.
"""

from __future__ import annotations

import re

__all__ = ["is_plain_float", "is_plain_int", "lenient_only", "parse_float", "parse_int", "PLAIN_NUMBERS"]

_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_INT = re.compile(r"[+-]?[0-9]+")

#: what a number may look like, for messages
PLAIN_NUMBERS = "ASCII digits with an optional sign, '.' and exponent, e.g. 1.5 or 2e-3"


def is_plain_float(text: str) -> bool:
    """Whether ``text`` is a float as calib reads it (module docstring); ``"1_5"`` and ``"١٢"`` are not."""
    return _FLOAT.fullmatch(text.strip()) is not None


def is_plain_int(text: str) -> bool:
    """Whether ``text`` is a whole number in ASCII digits (an optional sign, no ``_``)."""
    return _INT.fullmatch(text.strip()) is not None


def lenient_only(text: str) -> bool:
    """Whether ``float(text)`` reads ``text`` although calib does not (``"1_5"``, ``"١٢"``)."""
    if is_plain_float(text):
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_float(text: str) -> float:
    """``float(text)`` for plain numbers only; ValueError otherwise (``"1_5"`` included)."""
    if not is_plain_float(text):
        raise ValueError(f"{text!r} is not a number ({PLAIN_NUMBERS})")
    return float(text)


def parse_int(text: str) -> int:
    """``int(text)`` for ASCII digits with an optional sign only; ValueError otherwise."""
    if not is_plain_int(text):
        raise ValueError(f"{text!r} is not a whole number (ASCII digits with an optional sign)")
    return int(text)
