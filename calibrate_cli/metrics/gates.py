"""CI gates (docs/cli-contract.md): fail when a metric is above a threshold (ece above 0.02) or below one
(accuracy below 0.9); the CLI sets them with ``--fail-above ece=0.02`` and ``--fail-below accuracy=0.9``.

A gate fails when the gated value is above (``fail-above``) or below (``fail-below``) its
threshold, or when the value is undefined (None/NaN: a gate that cannot be checked never passes).

With bootstrap intervals, ``gated_on`` picks the value every gate compares (docs/cli-contract.md): ``"point"``
(the estimate, default), ``"upper"`` (the interval's upper end) or ``"lower"`` (its lower end).
For ``--fail-above`` the upper end is strict (pass only when significantly below the threshold)
and the lower end lenient (fail only when significantly above); for ``--fail-below`` the other
way round. A metric without an interval (e.g. an infinite NLL) is gated on its point value.

Thresholds are checked against the metric's range in the registry
(:mod:`calibrate_cli.metrics.registry`): ``ece=2`` (meant as 2 %) and ``ece=150%`` are errors, since
ECE is a fraction in [0, 1]; a percentage (``2%``) is accepted only for fraction metrics, so
``nll=5%`` is an error too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Literal, Mapping

from ..errors import InputError
from .registry import METRIC_NAMES, MetricSpec, metric_spec
from ..data.number_text import PLAIN_NUMBERS, parse_float

__all__ = ["GATE_ON", "Gate", "GateResult", "check_gates", "normalize_metric_name"]

GATE_ON = ("point", "upper", "lower")

Direction = Literal["above", "below"]


def normalize_metric_name(name: str) -> str:
    """``ECE`` → ``ece``, ``classwise-ece`` → ``classwise_ece``; unknown names are an InputError."""
    key = name.strip().lower().replace("-", "_")
    if key not in METRIC_NAMES:
        raise InputError(f"unknown metric {name!r}; choose from {', '.join(METRIC_NAMES)}")
    return key


def _check_threshold(text: str, spec: MetricSpec, number: float, percent: bool, threshold: float) -> None:
    """A threshold outside the metric's range (or a percentage of a non-fraction) is an InputError."""
    name, shown = spec.name, f"{number:g}"
    if percent and not spec.percent:
        raise InputError(
            f"gate {text!r}: {name} is not a fraction (it lies in {spec.range_text()}), so a percentage does not "
            f"apply: write the value itself, e.g. {name}={threshold:g}"
        )
    low, high = spec.value_range
    if low <= threshold <= high:
        return
    if not spec.percent:
        raise InputError(f"gate {text!r}: {name} lies in {spec.range_text()}, so {shown} is out of range")
    if percent:
        raise InputError(f"gate {text!r}: {name} is a fraction in [0, 1] (0% to 100%), so {shown}% is out of range")
    hint = f"; for {shown} % write {name}={shown}%" if 1.0 < number <= 100.0 else ""
    raise InputError(f"gate {text!r}: {name} is a fraction in [0, 1], so {shown} is out of range{hint}")


@dataclass(frozen=True)
class Gate:
    """Fail when ``metric`` is ``direction`` ``threshold``."""

    metric: str
    direction: Direction
    threshold: float

    @classmethod
    def parse(cls, text: str, direction: Direction) -> "Gate":
        """Parse ``METRIC=VALUE`` (VALUE a number or a percentage such as ``2%``)."""
        name, sep, value = text.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise InputError(f"gate {text!r}: expected METRIC=VALUE, e.g. ece=0.02")
        value = value.strip()
        percent = value.endswith("%")
        if percent:
            value = value[:-1].strip()
        try:
            number = parse_float(value)  # ASCII notation: float() would read 1_5 as 15
        except ValueError:
            raise InputError(f"gate {text!r}: {value!r} is not a number ({PLAIN_NUMBERS})") from None
        if math.isnan(number):
            raise InputError(f"gate {text!r}: the threshold is NaN")
        metric = normalize_metric_name(name)
        threshold = number * 0.01 if percent else number
        _check_threshold(text, metric_spec(metric), number, percent, threshold)
        return cls(metric, direction, threshold)

    def __str__(self) -> str:
        """``ece above 0.02``: the gate in words (the CLI shows it as its option, ``--fail-above ece=0.02``)."""
        return f"{self.metric} {self.direction} {self.threshold:g}"


@dataclass(frozen=True)
class GateResult:
    """A gate checked against a value: ``passed`` is False when it fails or cannot be checked."""

    gate: Gate
    value: float | None
    passed: bool
    gated_on: str = "point"

    def describe(self, shown: Callable[[Gate], str] = str) -> str:
        """One line on the result; ``shown`` words the gate (default: ``ece above 0.02``)."""
        g = self.gate
        if self.value is None or math.isnan(self.value):
            return f"{g.metric} is undefined for this data, so the gate {shown(g)} cannot pass"
        if g.direction == "above":
            op = "≤" if self.passed else ">"
        else:
            op = "≥" if self.passed else "<"
        verdict = "passed" if self.passed else "failed"
        subject = g.metric if self.gated_on == "point" else f"{g.metric} ({self.gated_on} end of its interval)"
        return f"gate {verdict}: {subject} = {self.value:.6g} {op} {g.threshold:g} ({shown(g)})"

    def to_dict(self) -> dict:
        return {
            "metric": self.gate.metric,
            "direction": self.gate.direction,
            "threshold": self.gate.threshold,
            "value": self.value,
            "gated_on": self.gated_on,
            "passed": self.passed,
        }


def _interval_end(interval, end: str) -> float:
    """The ``end`` of the interval as tables show it: clipped to the metric's range (a basic interval's
    upper end of 102.5 % is gated as 100 %; the decision differs from the raw end's only for a
    threshold at the end of the range, e.g. ``--fail-above error=1``, where the raw end is impossible)."""
    key = "high" if end == "upper" else "low"
    if isinstance(interval, Mapping):
        return interval.get(f"clipped_{key}", interval[key])
    return getattr(interval, f"clipped_{key}", getattr(interval, key))


def check_gates(
    metrics: Mapping[str, float | None],
    gates: Iterable[Gate],
    *,
    gated_on: str = "point",
    intervals: Mapping | None = None,
) -> list[GateResult]:
    """Check each gate against ``metrics[gate.metric]``; returns one result per gate, in order.

    ``gated_on="upper"``/``"lower"``: compare the upper/lower end of ``intervals[gate.metric]``
    (a :class:`~calibrate_cli.bootstrap.ConfidenceInterval` or a dict with ``low``/``high``) instead,
    clipped to the metric's range as tables show it (``clipped_low``/``clipped_high`` when given).
    """
    if gated_on not in GATE_ON:
        raise InputError(f"Expected `gated_on` to be one of {GATE_ON}, but got {gated_on!r}")
    if gated_on != "point" and intervals is None:
        raise InputError(f"gating on the {gated_on} end of an interval needs bootstrap intervals")
    results = []
    for gate in gates:
        on = gated_on
        if on != "point" and gate.metric in intervals:
            value = _interval_end(intervals[gate.metric], on)
        else:
            on, value = "point", metrics.get(gate.metric)
        if value is None or math.isnan(value):
            results.append(GateResult(gate, value, False, on))
            continue
        failed = value > gate.threshold if gate.direction == "above" else value < gate.threshold
        results.append(GateResult(gate, float(value), not failed, on))
    return results
