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
    weights=None,
) -> Comparison:
    """Difference B − A of every metric, with a paired-bootstrap interval.

    Each resample draws the same sample indices for both models (the pairing removes the variation
    that the two share), and the interval of the difference is computed from the B differences as
    in :func:`bootstrap`. The labels must be identical. ``n_resamples=0`` gives the differences only.
    ``names``/``label_names`` name the inputs in error messages (e.g. file paths). ``device`` as in
    :func:`bootstrap`; ``metrics``: the metrics resampled (names or "all"; default: all but the
    per-sample KS-CE and SmoothECE, whose differences then get no interval). ``weights``: (N,) sample
    weights of the shared samples, the same for both models (:mod:`.weighted`: each drawn row carries
    its weight; on the CPU; the BCa's jackknife leaves groups out by setting their weights to 0).
    """
    check_device(device)
    la, lb = label_names or (f"{names[0]} labels", f"{names[1]} labels")
    if weights is not None:
        point_a, point_b, values, accel, (n, k) = _weighted_pair(
            (scores_a, labels_a), (scores_b, labels_b), weights, input_kind=input_kind, n_bins=n_bins, compat=compat,
            names=names, label_names=(la, lb), device=device, metrics=metrics, method=method, level=level,
            resample=(n_resamples, seed, indices, progress, batch_size))
        return Comparison(n, k, n_bins, _differences(point_a, point_b, values, accel, level, method))
    data_a = summarize_data(scores_a, labels_a, input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=names[0],
                            labels_name=la, metrics=metrics)
    data_b = summarize_data(scores_b, labels_b, input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=names[1],
                            labels_name=lb, metrics=metrics)
    sa, sb = data_a.summary, data_b.summary
    point_a, point_b = data_a.point(n_bins), data_b.point(n_bins)
    _same_samples(la, lb, sa, sb, names)
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
    return Comparison(sa.n, sa.k, n_bins, _differences(point_a, point_b, values, accel, level, method))


def _same_samples(la, lb, a, b, names) -> None:
    """Refuse two sets of predictions that are not of the same samples (N, labels, K)."""
    if a.n != b.n:
        raise InputError(f"{la} has {a.n} samples and {lb} has {b.n}: a paired comparison needs the same samples")
    if not np.array_equal(a.labels, b.labels):
        first = int(np.flatnonzero(a.labels != b.labels)[0])
        raise InputError(
            f"{la} and {lb} hold different labels (first at sample {first}): a paired comparison needs the same samples"
        )
    if a.k != b.k:
        raise InputError(f"{names[0]} has {a.k} classes and {names[1]} has {b.k}: they must match")


def _weighted_pair(pair_a, pair_b, weights, *, input_kind, n_bins, compat, names, label_names, device, metrics,
                   method, level, resample):
    """(point A, point B, {metric: B − A of each resample} or None, (N, K)) with sample weights: both
    models' :class:`~calibrate_cli.metrics.weighted.WeightedColumns`, the same draws for both."""
    from ..data.predictions import as_predictions
    from ..metrics.registry import METRICS, sums_needed
    from ..metrics.weighted import check_names, check_weights, weighted_columns
    from .weighted import WeightedResampler, weighted_jackknife

    if compat:
        raise InputError("sample weights: the compat mode reproduces the reference code, which has no weights",
                         remedy="no-compat")
    if device not in (None, "cpu", "auto"):
        raise InputError(f"sample weights are summed with numpy on the CPU, not on {device}", remedy="cpu-device")
    preds = [as_predictions(s, y, input_kind, scores_name=name, labels_name=label, check_values=False)
             for (s, y), name, label in zip((pair_a, pair_b), names, label_names)]
    _same_samples(*label_names, *preds, names)
    w = check_weights(weights, preds[0].n)
    wanted, custom = split_metrics(metrics)
    if custom:
        raise InputError("a paired comparison resamples built-in metrics only (names or 'all')")
    shown = [spec.name for spec in METRICS if spec.by_default or spec.name in wanted]
    check_names([*shown, *wanted], w, "weights")
    needed = sums_needed([*shown, *wanted])
    columns = [weighted_columns(p, n_bins, needed, scores_name=name)[2] for p, name in zip(preds, names)]
    points = [{m: None if math.isnan(v) else v for m, v in c.values(w[c.order], shown).items()} for c in columns]
    n_resamples, seed, indices, progress, batch_size = resample
    values, accel = None, {}
    if n_resamples or indices is not None:
        check_settings(n_resamples if indices is None else 1, level, method)
        engines = [WeightedResampler(c, w[c.order], wanted) for c in columns]
        va, vb = run_resamples(engines, preds[0].n, n_resamples, seed, indices, progress, batch_size)
        values = {name: vb[name] - va[name] for name in METRIC_NAMES}
        if method == "bca":  # the jackknife of the difference: both models on the same groups
            ja, jb = (weighted_jackknife(c, w[c.order], wanted) for c in columns)
            accel = {name: jackknife_acceleration(jb[name] - ja[name]) for name in jb}
    return points[0], points[1], values, accel, (preds[0].n, preds[0].k)


def _differences(point_a, point_b, values, accel, level, method) -> dict:
    """{metric: :class:`MetricDifference`} of the metrics both points hold (B − A, with its interval
    from the resampled differences ``values`` when given)."""
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
    return diffs

