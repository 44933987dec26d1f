"""Paired comparison of two models on the same samples: B − A of every metric with a paired-bootstrap interval."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..engine.devices import DEFAULT_DEVICE, check_device
from ..errors import InputError
from ..evaluate import summarize_data
from ..metrics.functional import DEFAULT_N_BINS, METRIC_NAMES
from ..data.predictions import InputKind
from .draws import DEFAULT_SEED, Progress, run_resamples
from .intervals import (
    DEFAULT_CI_LEVEL,
    DEFAULT_CI_METHOD,
    DEFAULT_N_RESAMPLES,
    METRIC_RANGES,
    ConfidenceInterval,
    Method,
    check_settings,
    confidence_interval,
    difference_range,
)
from .jackknife import jackknife_acceleration, jackknife_values
from .resampler import on_device, resampler_for
from .selection import split_metrics




@dataclass(frozen=True)
class MetricDifference:
    """B − A for one metric: the two point values, their difference and its paired interval."""

    metric: str
    a: float | None
    b: float | None
    difference: float | None
    interval: ConfidenceInterval | None

    @property
    def significant(self) -> bool | None:
        """Whether the interval excludes 0 (None without an interval)."""
        return None if self.interval is None else self.interval.excludes(0.0)

    def to_dict(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "difference": self.difference,
            "interval": None if self.interval is None else self.interval.to_dict(),
            "excludes_zero": self.significant,
        }


@dataclass(frozen=True)
class Comparison:
    """Paired comparison of two models on the same samples (same labels)."""

    n: int
    k: int
    n_bins: int
    differences: dict[str, MetricDifference]

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "k": self.k,
            "n_bins": self.n_bins,
            "differences": {name: d.to_dict() for name, d in self.differences.items()},
        }


def compare(
    scores_a,
    labels_a,
    scores_b,
    labels_b,
    *,
    input_kind: InputKind | None = None,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    level: float = DEFAULT_CI_LEVEL,
    method: Method = DEFAULT_CI_METHOD,
    seed=DEFAULT_SEED,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    indices: np.ndarray | None = None,
    progress: Progress | None = None,
    batch_size: int | None = None,
    names: tuple[str, str] = ("A", "B"),
    label_names: tuple[str, str] | None = None,
    device: str = DEFAULT_DEVICE,
    metrics=None,
) -> Comparison:
    """Difference B − A of every metric, with a paired-bootstrap interval.

    Each resample draws the same sample indices for both models (the pairing removes the variation
    that the two share), and the interval of the difference is computed from the B differences as
    in :func:`bootstrap`. The labels must be identical. ``n_resamples=0`` gives the differences only.
    ``names``/``label_names`` name the inputs in error messages (e.g. file paths). ``device`` as in
    :func:`bootstrap`; ``metrics``: the metrics resampled (names or "all"; default: all but the
    per-sample KS-CE and SmoothECE, whose differences then get no interval).
    """
    check_device(device)
    la, lb = label_names or (f"{names[0]} labels", f"{names[1]} labels")
    data_a = summarize_data(scores_a, labels_a, input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=names[0],
                            labels_name=la, metrics=metrics)
    data_b = summarize_data(scores_b, labels_b, input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=names[1],
                            labels_name=lb, metrics=metrics)
    sa, sb = data_a.summary, data_b.summary
    point_a, point_b = data_a.point(n_bins), data_b.point(n_bins)
    if sa.n != sb.n:
        raise InputError(f"{la} has {sa.n} samples and {lb} has {sb.n}: a paired comparison needs the same samples")
    if not np.array_equal(sa.labels, sb.labels):
        first = int(np.flatnonzero(sa.labels != sb.labels)[0])
        raise InputError(
            f"{la} and {lb} hold different labels (first at sample {first}): a paired comparison needs the same samples"
        )
    if sa.k != sb.k:
        raise InputError(f"{names[0]} has {sa.k} classes and {names[1]} has {sb.k}: they must match")
    values, accel = None, {}
    if n_resamples or indices is not None:
        check_settings(n_resamples if indices is None else 1, level, method)
        wanted, custom = split_metrics(metrics)  # default: all but the costly per-sample KS-CE and SmoothECE
        if custom:
            raise InputError("a paired comparison resamples built-in metrics only (names or 'all')")
        engines = on_device([resampler_for(data_a, n_bins, wanted), resampler_for(data_b, n_bins, wanted)], device)
        va, vb = run_resamples(engines, sa.n, n_resamples, seed, indices, progress, batch_size)
        values = {name: vb[name] - va[name] for name in METRIC_NAMES}
        if method == "bca":  # the jackknife of the difference: both models on the same groups
            ja, jb = (jackknife_values(d, None, n_bins=n_bins, metrics=wanted) for d in (data_a, data_b))
            accel = {name: jackknife_acceleration(jb[name] - ja[name]) for name in jb}
    diffs = {}
    for name in (m for m in METRIC_NAMES if m in point_a and m in point_b):
        a, b = point_a[name], point_b[name]
        if a is None or b is None:
            continue
        diff = b - a if math.isfinite(a) and math.isfinite(b) else None
        ci = None
        if values is not None and diff is not None:
            ci = confidence_interval(
                diff, values[name], level=level, method=method,
                acceleration=accel.get(name, 0.0), bounds=difference_range(METRIC_RANGES.get(name)), metric=name,
            )
        diffs[name] = MetricDifference(name, a, b, diff, ci)
    return Comparison(sa.n, sa.k, n_bins, diffs)

