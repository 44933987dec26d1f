"""Which metrics a bootstrap computes: built-in names and the user's own metric functions."""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from ..errors import InputError
from ..metrics.registry import BOOTSTRAP_DEFAULT
from ..metrics.functional import METRIC_NAMES

MetricFn = Callable[[np.ndarray, np.ndarray], float]
Metrics = Sequence["str | MetricFn"] | Mapping[str, "str | MetricFn"] | None


def split_metrics(metrics: Metrics) -> tuple[list[str] | None, dict[str, MetricFn]]:
    """(built-in metric names, {name: custom metric function}) of ``metrics``.

    Items are names from METRIC_NAMES or callables ``fn(scores, labels) -> float`` (named by their
    ``__name__``); a mapping names its entries itself; "all" is every built-in metric. None: the
    registry's :data:`~calibrate_cli.metrics.registry.BOOTSTRAP_DEFAULT` (all but the per-sample
    KS-CE and SmoothECE, which are costly to resample).
    """
    if metrics is None:
        return list(BOOTSTRAP_DEFAULT), {}
    if metrics == "all":
        return list(METRIC_NAMES), {}
    if isinstance(metrics, str):
        raise InputError(f"Expected `metrics` to be a list of metric names or functions, but got the string {metrics!r}")
    items = list(metrics.items()) if isinstance(metrics, Mapping) else [(None, m) for m in metrics]
    builtin: list[str] = []
    custom: dict[str, MetricFn] = {}
    for key, item in items:
        if isinstance(item, str):
            if item not in METRIC_NAMES:
                raise InputError(f"unknown metric {item!r}; choose from {', '.join(METRIC_NAMES)} or pass a function")
            builtin.append(item)
        elif callable(item):
            name = key if key is not None else getattr(item, "__name__", None)
            if not isinstance(name, str) or not name or name == "<lambda>":
                raise InputError("a custom metric needs a name: pass {name: function} or a named function")
            if name in METRIC_NAMES or name in custom:
                raise InputError(f"custom metric name {name!r} is already taken; pass {{other_name: function}}")
            custom[name] = item
        else:
            raise InputError(f"Expected a metric name or a function, but got {item!r}")
    return builtin, custom


def custom_value(name: str, fn: MetricFn, scores, labels) -> float:
    value = fn(scores, labels)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(f"custom metric {name!r} returned {value!r}, not a number") from None




def with_asked(asked) -> list[str] | str:
    """The metrics a report resamples when none are named but some are asked for (``evaluate``'s
    ``metrics``, a table's columns): the default selection and every metric ``asked`` by name (KS-CE,
    SmoothECE, ACE, … included: asked for, they are shown, so they get an interval); "all": every metric."""
    if asked == "all":
        return "all"
    return list(dict.fromkeys([*BOOTSTRAP_DEFAULT, *asked]))


def selected_metrics(point: dict, metrics: Metrics) -> list[str]:
    """The metrics that get an interval: those asked for (by default the ones defined on the data)."""
    builtin, custom = split_metrics(metrics)
    if metrics is None or metrics == "all":
        return [name for name in builtin if point.get(name) is not None]
    return builtin + list(custom)


