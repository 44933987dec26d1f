"""Temperature scaling and its family, as ``calib temperature`` fits them (docs/temperature.md).

p(T) = softmax(logits / T): T > 1 softens the probabilities, T < 1 sharpens them; T never changes
the argmax, so never the accuracy. :func:`fit_temperature` fits one calibration map on a validation
set and reports the objective before and after (:class:`TemperatureFit`); ``search`` picks the map
and how it is fitted:

- ``"grid"`` (Mukhoti et al. 2020): T on a grid (default {0.1, …, 10.0}) minimising ECE, AdaECE or
  NLL, ties to the smallest T; ``"nll"`` (Guo et al. 2017): the exact NLL-optimal T. Both are
  :class:`~calibrate_cli.calibrators.TemperatureScaling` (the algorithms are documented there).
- ``"platt"`` (Platt 1999, binary): σ(a·s + b); ``"vector"`` (Guo et al. 2017): w ⊙ z + b per class.
  Unlike a temperature, these can change predictions.

The methods live in :mod:`calibrate_cli.calibrators`, one module each; this module is the API of
the command on top of them (and keeps the names it has always exported).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import OBJECTIVES, SEARCHES, Calibrator, calibrator_for_search, from_dict, probabilities_to_logits
from .temperature import (
    DEFAULT_GRID,
    NLL_TEMPERATURE_BOUNDS,
    apply_temperature,
    check_temperature,
    parse_grid,
    scale_scores,
    temperature_grid,
)
from ..metrics.functional import DEFAULT_N_BINS
from ..data.predictions import InputKind
from ..engine.summary import check_compat

__all__ = [
    "DEFAULT_GRID",
    "SEARCHES",
    "OBJECTIVES",
    "NLL_TEMPERATURE_BOUNDS",
    "apply_temperature",
    "check_temperature",
    "scale_scores",
    "probabilities_to_logits",
    "parse_grid",
    "temperature_grid",
    "fit_temperature",
    "TemperatureFit",
]

Progress = Callable[[int, "int | None"], None]



@dataclass(frozen=True)
class TemperatureFit:
    """The result of :func:`fit_temperature`.

    temperature      the fitted T (None for Platt and vector scaling, which are not one temperature)
    search           "grid", "nll", "platt" or "vector"
    objective        what was minimised: "ece", "adaece" or "nll" (always "nll" unless grid)
    objective_value  the objective on the fitting set at the fitted parameters
    objective_at_one the objective on the fitting set at T = 1 (the uncalibrated model)
    grid             (start, stop, step) of a grid search, else None
    curve            ((T, objective), …) over the grid, else None
    parameters       platt: {"a", "b"} (p = σ(a·s + b)); vector: {"w": [K], "b": [K]}; nll: solver calls
    warnings         e.g. the optimum on the grid's boundary
    calibrator       the fitted :class:`~calibrate_cli.calibrators.Calibrator` (``transform`` applies it)
    """

    temperature: float | None
    search: str
    objective: str
    objective_value: float
    objective_at_one: float
    n: int
    k: int
    n_bins: int
    compat: str | None
    grid: tuple[float, float, float] | None = None
    curve: tuple[tuple[float, float], ...] | None = None
    parameters: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    calibrator: Calibrator | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.calibrator is None:  # built by hand: the map from the fields, as a saved file is read
            saved = {"search": self.search, "k": self.k, "temperature": self.temperature, self.search: self.parameters}
            object.__setattr__(self, "calibrator", from_dict(saved))

    @classmethod
    def from_calibrator(cls, calibrator: Calibrator, search: str, n_bins: int, compat: str | None) -> "TemperatureFit":
        """The report of a fitted calibrator (its ``fit_info_``): the parameters and solver details."""
        info = calibrator.fit_info_
        params = calibrator.get_params()
        return cls(
            temperature=calibrator.temperature,
            search=search,
            objective=info.objective,
            objective_value=float(info.value),
            objective_at_one=float(info.at_identity),
            n=info.n,
            k=info.k,
            n_bins=n_bins,
            compat=compat,
            grid=info.grid,
            curve=info.curve,
            parameters={**params, **info.solver} if isinstance(params, dict) else dict(info.solver),
            warnings=tuple(info.warnings),
            calibrator=calibrator,
        )

    @property
    def label(self) -> str:
        """Short name of the calibration map, e.g. ``T = 0.8689`` or ``Platt (a = 1.2, b = 0.1)``."""
        return self.calibrator.label

    def transform(self, logits: np.ndarray, *, input_kind: InputKind | None = None, scores_name: str = "logits") -> np.ndarray:
        """Calibrated logits (float64): ``logits / T``; Platt: log-odds a·s + b; vector: w ⊙ z + b.

        A 1-D vector of log-odds gives a 1-D result for T and Platt; (N, K) gives (N, K). K must be
        the fitted K; ``input_kind`` by default the fitted kind (probabilities go through log p).
        """
        return self.calibrator.transform(logits, input_kind=input_kind, scores_name=scores_name)

    def apply(self, scores: np.ndarray, input_kind: InputKind | None = None, *, scores_name: str = "scores") -> np.ndarray:
        """``scores`` after calibration, of the same kind: logits in, logits out; probabilities in,
        probabilities out (through log p, zeros staying exactly 0). T = 1 returns them unchanged.
        ``input_kind``: by default the kind the map was fitted on (see :meth:`Calibrator.apply
        <calibrate_cli.calibrators.Calibrator.apply>`)."""
        return self.calibrator.apply(scores, input_kind, scores_name=scores_name, validate=False)

    def to_dict(self) -> dict:
        out = {
            "temperature": self.temperature,
            "search": self.search,
            "objective": self.objective,
            "objective_value": self.objective_value,
            "objective_at_one": self.objective_at_one,
            "n": self.n,
            "k": self.k,
            "n_bins": self.n_bins,
            "compat": self.compat,
            "warnings": list(self.warnings),
        }
        if self.calibrator.input_kind is not None:
            out["input_kind"] = self.calibrator.input_kind  # what it was fitted on (read back by load_calibrator)
        if self.grid is not None:
            out["grid"] = {"start": self.grid[0], "stop": self.grid[1], "step": self.grid[2]}
            out["curve"] = [{"temperature": t, "objective": v} for t, v in self.curve]
        if self.parameters:
            # a method's parameters (with its solver's details) under its name; a temperature's under "solver"
            own = isinstance(self.calibrator.get_params(), dict)
            out[self.calibrator.name if own else "solver"] = dict(self.parameters)
        return out


def fit_temperature(
    logits,
    labels,
    search: str = "grid",
    objective: str | None = None,
    grid=DEFAULT_GRID,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    progress: Progress | None = None,
    *,
    input_kind: InputKind = "logits",
    scores_name: str = "logits",
    labels_name: str = "labels",
    device: str | None = None,
    weights=None,
    weights_name: str = "weights",
) -> TemperatureFit:
    """Fit a temperature (or Platt / vector scaling) on a validation set (docs/temperature.md).

    ``search``: "grid" (the paper: T on ``grid`` = (start, stop, step), default 0.1..10.0 by 0.1,
    minimising ``objective`` = "ece" (default), "adaece" or "nll"; ties → smallest T), "nll" (the
    exact NLL-optimal T, |ΔT| < 1e-6), "platt" (binary) or "vector" (any method of
    :data:`~calibrate_cli.calibrators.CALIBRATORS` by one of its searches). ``objective`` defaults to
    "ece" for the grid and is "nll" otherwise. ``n_bins``/``compat`` as :func:`~calibrate_cli.evaluate`:
    the objective at T equals what ``evaluate(logits / T, labels, n_bins=, compat=)`` reports.
    ``input_kind="probs"`` fits on log-probabilities. ``progress(done, total)`` is called after each
    chunk of rows (grid) or solver evaluation (total None). ``device`` ("cuda", "torch-cpu", "auto";
    None: the CPU) runs a temperature's passes (the grid by ECE or NLL, the exact NLL fit) with torch
    there (:mod:`calibrate_cli.engine.torch_pass`), the same values to rounding. ``weights``: (N,) sample
    weights (the weighted objective; whole numbers fit as repeated rows; docs/weights.md).

    >>> import numpy as np
    >>> fit = fit_temperature(np.array([[4.0, 0.0], [0.0, 4.0], [4.0, 0.0]]), [0, 1, 1], search="nll")
    >>> round(fit.temperature, 5), fit.objective  # 4 / ln 2: σ(4/T) = 2/3
    (5.77078, 'nll')
    """
    calibrator = calibrator_for_search(search, objective=objective, grid=grid, n_bins=n_bins, compat=compat,
                                       device=device)
    calibrator.fit(
        logits, labels, input_kind=input_kind, progress=progress, scores_name=scores_name, labels_name=labels_name,
        weights=weights, weights_name=weights_name,
    )
    return TemperatureFit.from_calibrator(calibrator, search, n_bins, check_compat(compat))
