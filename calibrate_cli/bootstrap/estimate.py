"""Bootstrap intervals of one model's metrics: :func:`bootstrap`, :func:`bootstrap_values`, and
:func:`bootstrap_prepared` for data that is already validated and summarised (``evaluate`` reads once)."""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..engine.devices import DEFAULT_DEVICE, check_device
from ..evaluate import SummarizedData, evaluate, summarize_data
from ..metrics.functional import DEFAULT_N_BINS
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
)
from .jackknife import jackknife_acceleration, jackknife_values
from .resampler import on_device, resampler_for
from .weighted import WeightedResampler
from .selection import Metrics, custom_value, selected_metrics, split_metrics


def bootstrap_values(
    scores,
    labels,
    *,
    input_kind: InputKind | None = None,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed=DEFAULT_SEED,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    indices: np.ndarray | None = None,
    progress: Progress | None = None,
    batch_size: int | None = None,
    metrics: Metrics = None,
    device: str = DEFAULT_DEVICE,
) -> tuple[dict, dict[str, np.ndarray]]:
    """(point metrics, {metric: the B bootstrap values}) — what :func:`bootstrap` summarises.

    ``indices`` (B, N): explicit resamples (row r draws samples ``indices[r]``; B = len(indices),
    ``n_resamples`` is then ignored), e.g. to reproduce another implementation's draws. Otherwise
    row r is ``np.random.default_rng(resample_streams(seed, B)[r]).integers(0, N, N)`` (its own
    stream, so independent of ``batch_size`` and of the drawing threads), read as positions in the
    (stable) order of increasing confidence, which saves a gather. Built-in metrics not in
    ``metrics`` (default: all) may be left NaN; custom metric functions in ``metrics`` (see
    :func:`bootstrap`) get their point value and B values under their names. ``device``: ``"cpu"``
    | ``"cuda"`` | ``"auto"`` | ``"torch-cpu"`` (:mod:`calibrate_cli.engine.devices`); the same draws on every device.
    """
    check_device(device)  # an unavailable device fails before any work
    split_metrics(metrics)  # unknown names fail before any work
    data = summarize_data(scores, labels, input_kind=input_kind, n_bins=n_bins, compat=compat, metrics=metrics)
    raw = _raw(scores, labels, metrics)
    return _values(data, data.point(n_bins), n_bins, n_resamples, seed, indices, progress, batch_size, metrics, device, raw)


def _raw(scores, labels, metrics) -> tuple | None:
    """(scores, labels) as arrays for the custom metric functions of ``metrics``; None when there are
    none (the scores, e.g. a bfloat16 row reader, are then never read whole)."""
    return (np.asarray(scores), np.asarray(labels)) if split_metrics(metrics)[1] else None


def _values(data: SummarizedData, point, n_bins, n_resamples, seed, indices, progress, batch_size, metrics, device, raw,
            weighted=None):
    builtin, custom = split_metrics(metrics)
    point = dict(point)
    if custom:
        point |= {name: custom_value(name, fn, *raw) for name, fn in custom.items()}
    if weighted is not None:  # (WeightedColumns, weights in confidence order): numpy, on the CPU
        engines = [WeightedResampler(*weighted, builtin)]
    else:
        engines = on_device([resampler_for(data, n_bins, builtin)], device)
    values = run_resamples(engines, data.summary.n, n_resamples, seed, indices, progress, batch_size, custom, raw)[0]
    return point, values


def bootstrap(
    scores,
    labels,
    *,
    input_kind: InputKind | None = None,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    level: float = DEFAULT_CI_LEVEL,
    method: Method = DEFAULT_CI_METHOD,
    seed=DEFAULT_SEED,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    metrics: Metrics = None,
    indices: np.ndarray | None = None,
    progress: Progress | None = None,
    batch_size: int | None = None,
    device: str = DEFAULT_DEVICE,
    weights=None,
) -> dict[str, ConfidenceInterval]:
    """Bootstrap confidence intervals of every metric of ``calib eval`` (docs/bootstrap.md).

    ``metrics``: names from :data:`~calibrate_cli.metrics.functional.METRIC_NAMES` (default: every metric that
    is defined on the data) and/or your own metric functions ``fn(scores, labels) -> float``, as a
    list (a function is named by its ``__name__``) or a ``{name: function}`` mapping. A function is
    called on the arrays you passed, indexed by each resample's sample indices (the same draws as
    the built-in metrics; it runs once per resample, so it sets the speed); NaN marks a resample on
    which it is undefined. A metric whose point value is infinite (NLL with a zero probability)
    gets no interval. ``method="auto"`` (default) gives each metric the registry's method (basic for
    the calibration errors, percentile for the means; basic for your functions); each interval's
    ``method`` says which. ``device``: where the resampling runs (``"cpu"`` numpy, ``"cuda"``,
    ``"auto"``, ``"torch-cpu"``; same draws, same results up to float64 rounding).
    ``progress(done, total)`` is called after each batch. Same seed (and same data), same
    intervals, whatever ``batch_size``. To get the metrics and their intervals from one read of
    the data, use ``evaluate(..., bootstrap=B)``. ``weights``: (N,) sample weights, each drawn row
    carrying its weight (:mod:`.weighted`; built-in metrics, basic or percentile intervals, on the CPU).

    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> logits = rng.normal(size=(500, 3)); labels = rng.integers(0, 3, 500)
    >>> ci = bootstrap(logits, labels, n_resamples=200, metrics=["ece"])["ece"]
    >>> ci.low < ci.point < ci.high
    True
    >>> def top2(scores, labels):
    ...     return float(np.mean((np.argsort(-scores, axis=1)[:, :2] == labels[:, None]).any(axis=1)))
    >>> cis = bootstrap(logits, labels, n_resamples=100, metrics=["ece", top2])
    >>> sorted(cis)
    ['ece', 'top2']
    """
    check_settings(n_resamples, level, method)
    check_device(device)
    split_metrics(metrics)  # unknown names fail before any work
    if weights is not None:  # evaluate's weighted path: the same validation, the weighted engine
        if indices is not None:
            raise InputError("explicit resamples (indices) take no sample weights")
        return evaluate(scores, labels, input_kind=input_kind, n_bins=n_bins, compat=compat, weights=weights,
                        bootstrap=n_resamples, ci_level=level, ci_method=method, seed=seed, device=device,
                        progress=progress, bootstrap_metrics=metrics).intervals
    data = summarize_data(scores, labels, input_kind=input_kind, n_bins=n_bins, compat=compat, metrics=metrics)
    return bootstrap_prepared(
        data, data.point(n_bins), n_bins=n_bins, n_resamples=n_resamples, level=level, method=method, seed=seed,
        metrics=metrics, indices=indices, progress=progress, batch_size=batch_size, device=device,
        raw=_raw(scores, labels, metrics),
    )


def bootstrap_prepared(
    data: SummarizedData,
    point: dict,
    *,
    n_bins: int = DEFAULT_N_BINS,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    level: float = DEFAULT_CI_LEVEL,
    method: Method = DEFAULT_CI_METHOD,
    seed=DEFAULT_SEED,
    metrics: Metrics = None,
    indices: np.ndarray | None = None,
    progress: Progress | None = None,
    batch_size: int | None = None,
    device: str = DEFAULT_DEVICE,
    raw: tuple | None = None,
    weighted: tuple | None = None,
) -> dict[str, ConfidenceInterval]:
    """:func:`bootstrap` on data already validated and summarised (:func:`~calibrate_cli.evaluate.summarize_data`)
    with its point metrics ``point``: nothing is read, validated or summarised again.

    ``raw`` = (scores, labels) as the user passed them, for custom metric functions (default: the
    validated arrays). ``weighted`` = (:class:`~calibrate_cli.metrics.weighted.WeightedColumns`, the
    sample weights in its confidence order): each drawn row carries its weight (:mod:`.weighted`);
    on the CPU; the BCa's jackknife leaves groups out by setting their weights to 0."""
    check_settings(n_resamples, level, method)
    check_device(device)
    if metrics is None or (isinstance(metrics, str) and metrics == "all"):
        # only the metrics with a point value get an interval (selected_metrics), so only those are
        # resampled: no (N, K) probabilities for the classwise metrics evaluate leaves out at large K
        metrics = [name for name in split_metrics(metrics)[0] if point.get(name) is not None]
    raw = raw if raw is not None else _raw(data.predictions.scores, data.predictions.labels, metrics)
    point, values = _values(data, point, n_bins, n_resamples, seed, indices, progress, batch_size, metrics, device, raw,
                            weighted)
    accel = {}
    if method == "bca" and weighted is not None:
        from .weighted import weighted_jackknife

        jack = weighted_jackknife(*weighted, [name for name in metrics if isinstance(name, str)])
        accel = {name: jackknife_acceleration(v) for name, v in jack.items()}
    elif method == "bca":
        jack = jackknife_values(data, None, n_bins=n_bins, metrics=metrics, raw=raw)
        accel = {name: jackknife_acceleration(v) for name, v in jack.items()}
    out = {}
    for name in selected_metrics(point, metrics):
        ci = confidence_interval(
            point[name], values[name], level=level, method=method,
            acceleration=accel.get(name, 0.0), bounds=METRIC_RANGES.get(name), metric=name,
        )
        if ci is not None:
            out[name] = ci
    return out
