"""The paper's Table 1: several models, each before and after temperature scaling (Mukhoti et al. 2020).

For each model: a temperature T is fitted on its validation set (:func:`~calibrate_cli.calibrators.temperature_fit.fit_temperature`,
by default the paper's grid T = 0.1 … 10.0 minimising the validation ECE, exactly as
``calib temperature``), and its test set is measured at T = 1 ("Pre T") and at T ("Post T"): error,
ECE, AdaECE, classwise-ECE and NLL (the definitions of docs/metrics.md, 15 bins by default).
A temperature never changes the predictions, so the error is the same before and after.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..calibrators import TemperatureScaling
from ..errors import InputError
from ..evaluate import EvalReport, evaluate
from ..metrics.functional import DEFAULT_N_BINS
from ..data.predictions import InputKind, Predictions, as_predictions
from ..calibrators.temperature_fit import TemperatureFit, fit_temperature

__all__ = ["TABLE_METRICS", "ModelRow", "model_row"]

#: the columns of the paper's Table 1, in order (metric names of the registry)
TABLE_METRICS = ("error", "ece", "adaece", "classwise_ece", "nll")


@dataclass(frozen=True)
class ModelRow:
    """One model of the table: its name, the fitted temperature, the test-set reports before and after.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, 400); z = rng.normal(0, 1, (400, 3)); z[np.arange(400), y] += 1.5
    >>> logits = 4 * z                                    # an over-confident model
    >>> row = model_row("m", logits[:200], y[:200], logits[200:], y[200:], search="nll")
    >>> round(row.temperature, 2)                         # fitted on the first 200 samples
    2.66
    >>> for metric, (pre, post) in row.values().items():  # on the other 200
    ...     print(f"{metric}: {pre:.3f} → {post:.3f}")
    error: 0.185 → 0.185
    ece: 0.130 → 0.074
    adaece: 0.096 → 0.081
    classwise_ece: 0.096 → 0.069
    nll: 0.657 → 0.507
    """

    name: str
    fit: TemperatureFit
    before: EvalReport
    after: EvalReport

    @property
    def temperature(self) -> float:
        return self.fit.temperature

    def values(self) -> dict[str, tuple[float | None, float | None]]:
        """metric → (Pre T, Post T) on the test set, for :data:`TABLE_METRICS`."""
        return {m: (self.before.metrics[m], self.after.metrics[m]) for m in TABLE_METRICS}

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "temperature": self.temperature,
            "search": self.fit.search,
            "objective": self.fit.objective,
            "n_val": self.fit.n,
            "n_test": self.before.n,
            "k": self.before.k,
            "before": {m: v[0] for m, v in self.values().items()},
            "after": {m: v[1] for m, v in self.values().items()},
        }


def model_row(
    name: str,
    val_scores,
    val_labels,
    test_scores,
    test_labels,
    *,
    input_kind: InputKind | None = None,
    search: str = "grid",
    objective: str | None = None,
    grid=None,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    names: tuple[str, str, str, str] = ("validation scores", "validation labels", "test scores", "test labels"),
    test_raw=None,
) -> ModelRow:
    """Fit T on (``val_scores``, ``val_labels``) and measure the test set before and after it.

    ``search``/``objective``/``grid``/``n_bins``/``compat``: as :func:`~calibrate_cli.calibrators.temperature_fit.fit_temperature`
    (a temperature search: "grid" or "nll"). Each set is validated once (``Predictions`` are taken as
    they are; ``test_raw``: then the test scores as read, which the temperature scales, as
    ``calib temperature`` does); ``names`` name the four inputs in error messages. The numbers are those of
    ``calib temperature VAL VAL_LABELS --test TEST TEST_LABELS`` with the same options.
    """
    if search not in TemperatureScaling.searches:
        searches = tuple(TemperatureScaling.searches)
        raise InputError(f"the table fits a temperature: search one of {searches}, not {search!r}")
    val = as_predictions(val_scores, val_labels, input_kind, scores_name=names[0], labels_name=names[1])
    test = as_predictions(test_scores, test_labels, input_kind, scores_name=names[2], labels_name=names[3])
    if test.k != val.k:
        raise InputError(
            f"{names[2]}: the test set has K = {test.k} classes but the validation set {names[0]} has K = {val.k}"
        )
    fit = fit_temperature(
        val, None, search=search, objective=objective, n_bins=n_bins, compat=compat, input_kind=input_kind,
        scores_name=names[0], labels_name=names[1], **({} if grid is None else {"grid": grid}),
    )
    kwargs = dict(input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=names[2])
    before = evaluate(test, None, **kwargs)
    raw = test_raw if test_raw is not None else (test.scores if isinstance(test_scores, Predictions) else test_scores)
    after_predictions = test.with_scores(fit.apply(raw, test.input_kind, scores_name=names[2]), scores_name=names[2])
    after = evaluate(after_predictions, None, **kwargs)
    return ModelRow(name, fit, before, after)
