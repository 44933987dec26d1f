"""Choosing a calibration method honestly: by K-fold cross-validation on the fitting set.

Picking the method with the best metric on the set it is reported on makes that number optimistic
(the pick is fitted to the noise of that set), and picking on the fitting set favours the methods
that overfit it (histogram binning and isotonic regression reproduce it almost exactly). So:

- the fitting set is split into ``n_folds`` folds by :func:`stratified_folds` (seeded; the same folds
  for every method);
- for each fold, the method is fitted on the other folds and applied to it: every sample gets a
  calibrated prediction from a map that never saw it (the *out-of-fold* predictions);
- the method's cross-validated value is the metric of those N predictions, exactly as ``evaluate``
  computes it on any scores (:func:`cross_validate`). The folds are read from the scores a row chunk
  at a time (:class:`~calibrate_cli.data.predictions.KeptRows`) and the predictions computed chunk by
  chunk as the metric reads them (:class:`OutOfFoldRows`): at vocabulary scale (K up to 262,144,
  bfloat16) neither a copy of the training folds nor an (N, K) array of predictions is held;
- the method with the best value is chosen (:func:`choose`; ties: the first in the order given). A
  method whose fit fails in any fold (an error, or a degenerate fit refused as
  :class:`~calibrate_cli.errors.FitError`) has no value and is never chosen.

>>> import numpy as np
>>> stratified_folds(np.array([0, 0, 0, 1, 1, 1]), 3, seed=0).tolist()  # each fold: one sample of each class
[1, 2, 0, 0, 2, 1]
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ..metrics.functional import DEFAULT_N_BINS
from ..bootstrap.draws import DEFAULT_SEED
from ..errors import CalibError, InputError
from ..metrics.registry import METRICS
from ..data.predictions import (InputKind, KeptRows, Predictions, RowSlices, ScoreCheck, as_predictions,
                                check_scores, probs_sum_tolerance)
from .base import Calibrator, ProbabilitiesClipped

__all__ = ["DEFAULT_FOLDS", "CrossValidated", "choose", "cross_validate", "stratified_folds"]

DEFAULT_FOLDS = 5
#: the metrics that can choose: those with a better direction (not mean confidence or the S99 share)
SELECTABLE = tuple(spec.name for spec in METRICS if spec.lower_is_better is not None)
_LOWER_IS_BETTER = {spec.name: spec.lower_is_better for spec in METRICS}


def stratified_folds(labels, n_folds: int = DEFAULT_FOLDS, seed: int = DEFAULT_SEED) -> np.ndarray:
    """The fold (0 … n_folds − 1) of each sample, stratified by label.

    The samples are put in a random order (``np.random.default_rng(seed).permutation``), then grouped
    by label keeping that order (a stable sort), and dealt to the folds in turn, 0, 1, …, n_folds − 1,
    0, …, continuing from one class to the next: every fold gets ⌊N/n_folds⌋ or ⌈N/n_folds⌉ samples
    and each class's count in a fold differs from its count in another by at most one.
    """
    labels = np.asarray(labels)
    n = int(labels.shape[0])
    if isinstance(n_folds, bool) or not isinstance(n_folds, (int, np.integer)) or n_folds < 2:
        raise InputError(f"Expected `n_folds` to be an integer ≥ 2, but got {n_folds!r}")
    if n_folds > n:
        raise InputError(f"{n_folds} folds need at least {n_folds} fitting samples, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    order = order[np.argsort(labels[order], kind="stable")]
    folds = np.empty(n, dtype=np.int64)
    folds[order] = np.arange(n) % n_folds
    return folds


@dataclass(frozen=True)
class CrossValidated:
    """The cross-validated ``metric`` of one method.

    value   the metric of the out-of-fold predictions (None when a fold failed, or where the metric
            is undefined, e.g. the S99 accuracy without a sample of confidence ≥ 0.99)
    failure why a fold failed ("fold 2 of 5: …"), else None
    """

    method: str
    metric: str
    n_folds: int
    value: float | None
    failure: str | None = None

    def to_dict(self) -> dict:
        return {"method": self.method, "metric": self.metric, "folds": self.n_folds, "value": self.value,
                "failure": self.failure}


class OutOfFoldRows(RowSlices):
    """The out-of-fold predictions of a cross-validation, computed as each row chunk is read: the chunk's
    rows of fold f are mapped by ``calibrators[f]`` (fitted without fold f) through
    :meth:`~calibrate_cli.calibrators.base.Calibrator.apply`, the same per-row map as applying it to the
    whole fold, so the same values bit for bit, with no (N, K) float64 array written."""

    dtype = np.dtype(np.float64)

    def __init__(self, calibrators: list[Calibrator], folds: np.ndarray, scores, input_kind: InputKind,
                 names: list[str]) -> None:
        self.calibrators, self.folds, self.scores, self.input_kind, self.names = (
            calibrators, folds, scores, input_kind, names)
        self.shape = (int(scores.shape[0]), int(scores.shape[1]))

    def read(self, rows: slice) -> np.ndarray:
        chunk, fold = np.asarray(self.scores[rows]), self.folds[rows]
        out = np.empty(chunk.shape, dtype=np.float64)
        for f, cal in enumerate(self.calibrators):
            at = np.flatnonzero(fold == f)
            if at.size:  # checked by the pass that reads them (Predictions.pending), as evaluate checks scores
                out[at] = cal.apply(chunk[at], self.input_kind, scores_name=self.names[f], validate=False)
        return out


def cross_validate(
    method: str,
    scores,
    labels=None,
    *,
    metric: str,
    folds: np.ndarray,
    input_kind=None,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    scores_name: str = "scores",
    options: dict | None = None,
    progress=None,
    weights=None,
) -> CrossValidated:
    """The cross-validated ``metric`` of ``method`` on the fitting set (``scores``, ``labels``, or
    validated :class:`~calibrate_cli.data.predictions.Predictions` with ``labels`` None), over ``folds``
    (:func:`stratified_folds`); ``options`` go to the method, ``n_bins`` and ``compat`` to the metric.
    A fold whose fit or map fails gives a :class:`CrossValidated` with its ``failure``, never a value.
    ``progress(done, total)`` after each fold. ``weights``: sample weights, those of the other folds
    in each fit and all of them in the metric of the out-of-fold predictions (docs/weights.md)."""
    from ..evaluate import evaluate
    from .registry import fit

    if metric not in SELECTABLE:
        raise InputError(f"Expected `metric` to be one of {SELECTABLE}, but got {metric!r}")
    predictions = as_predictions(scores, labels, input_kind, scores_name=scores_name)
    folds = np.asarray(folds)
    if folds.shape != (predictions.n,):
        raise InputError(f"folds: expected one fold per sample ({predictions.n}), got shape {folds.shape}")
    n_folds = int(folds.max()) + 1
    kind = predictions.input_kind
    if weights is not None:
        from ..metrics.weighted import check_weights

        weights = check_weights(weights, predictions.n)
    if predictions.pending is not None:  # each fold's fit takes its rows as checked
        check_scores(predictions.scores, scores_name, kind)
    calibrators, names = [], []
    with warnings.catch_warnings():  # a fold's clipping is the whole set's, said once by its own fit
        warnings.simplefilter("ignore", ProbabilitiesClipped)
        for f in range(n_folds):
            train = np.flatnonzero(folds != f)  # the other folds, read a row chunk at a time (no copy)
            names.append(f"{scores_name} (fold {f + 1} of {n_folds} held out)")
            # validated rows, given as Predictions: not checked again, and kept a row reader (its dtype and
            # stored_eps the scores': bfloat16's probability-sum tolerance holds)
            fold_set = Predictions(KeptRows(predictions.scores, train), predictions.labels[train], kind)
            try:
                calibrators.append(fit(method, fold_set, None, input_kind=kind, scores_name=names[-1],
                                       weights=None if weights is None else weights[train], **(options or {})))
            except CalibError as exc:
                return CrossValidated(method, metric, n_folds, None, f"fold {f + 1} of {n_folds}: {exc}")
            if progress is not None:
                progress(f + 1, n_folds)
        out_kind = calibrators[0].result_kind(kind)
        out = OutOfFoldRows(calibrators, folds, predictions.scores, kind, names)
        name = f"{scores_name} (out-of-fold {method})"
        check = ScoreCheck(name, out_kind, probs_sum_tolerance(out))
        try:
            report = evaluate(Predictions(out, predictions.labels, out_kind, pending=check), None, input_kind=out_kind,
                              n_bins=n_bins, compat=compat, scores_name=name, metrics=[metric], weights=weights)
        except CalibError as exc:
            return CrossValidated(method, metric, n_folds, None, f"its out-of-fold predictions: {exc}")
    value = report.metrics.get(metric)
    value = None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
    return CrossValidated(method, metric, n_folds, value)


def choose(values: dict[str, float | None], metric: str) -> str | None:
    """The name with the best ``metric`` value (lower or higher as the metric says; ties: the first
    in ``values``' order); None when no value is defined."""
    if metric not in SELECTABLE:
        raise InputError(f"Expected `metric` to be one of {SELECTABLE}, but got {metric!r}")
    defined = {name: v for name, v in values.items() if v is not None and not math.isnan(v)}
    if not defined:
        return None
    best = min(defined.values()) if _LOWER_IS_BETTER[metric] else max(defined.values())
    return next(name for name, v in defined.items() if v == best)
