"""The :class:`Calibrator` interface every calibration method implements, and what they share.

A calibrator is a map g from a model's logits z (N, K) to calibrated logits g(z), fitted on a
validation set by minimising an objective (the NLL unless a method says otherwise):

- ``fit(scores, labels, input_kind=...)`` learns the parameters and returns the calibrator itself,
  with ``fit_info_`` (a :class:`FitInfo`: the objective before and after, solver details, warnings);
- ``transform(logits)`` gives calibrated logits, ``predict_proba(logits)`` = softmax of them, and
  ``apply(scores, input_kind)`` keeps the kind (probabilities in, probabilities out);
- ``to_dict()`` / ``from_dict(d)`` save and restore it as JSON-ready data, never pickle:
  ``{"method": name, "k": K, name: parameters}``.

Probabilities are handled through their logarithms: log p is a valid logit vector
(softmax(log p) = p) and a probability of exactly 0 becomes −inf, never clipped.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np

from ..errors import InputError
from ..predictions import InputKind, Predictions, _check_scores, as_predictions, row_chunks
from ..probabilities import softmax

__all__ = ["Calibrator", "FitData", "FitInfo", "OBJECTIVES", "Search", "probabilities_to_logits"]

#: what a fit can minimise on the fitting set, each computed exactly as ``evaluate`` reports it
OBJECTIVES = ("ece", "nll", "adaece")

Progress = Callable[[int, "int | None"], None]


class Search(NamedTuple):
    """One way to fit a method, as ``calib temperature --search NAME`` offers it."""

    help: str  # one line for --help
    title: str  # what a figure calls the result, e.g. "temperature scaling (grid search)"


def probabilities_to_logits(probs: np.ndarray) -> np.ndarray:
    """log p in float64: logits whose softmax is ``probs`` (rows renormalised).

    A probability of exactly 0 becomes −inf, which softmax maps back to exactly 0 at every
    temperature; nothing is clipped. A 1-D vector p(class 1) becomes the two columns log(1 − p), log p.
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim == 1:
        p = np.stack([1.0 - p, p], axis=1)
    with np.errstate(divide="ignore"):
        return np.log(p)


# ---------------------------------------------------------------------------------------------
# The fitting data


@dataclass(frozen=True)
class FitData:
    """Validated fitting data: (N, K) logits (any float dtype; −inf allowed for log-probabilities)."""

    logits: np.ndarray
    labels: np.ndarray
    scores_name: str
    has_zeros: bool = False  # −inf entries: log-probabilities of exactly 0

    @property
    def n(self) -> int:
        return int(self.logits.shape[0])

    @property
    def k(self) -> int:
        return int(self.logits.shape[1])

    def rows(self, rows: slice) -> np.ndarray:
        return np.asarray(self.logits[rows], dtype=np.float64)

    @classmethod
    def prepare(cls, scores, labels, input_kind: InputKind, scores_name: str, labels_name: str) -> "FitData":
        """Validate once (:func:`~calibrate_cli.predictions.as_predictions`); probabilities → log p."""
        predictions = as_predictions(
            scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name
        )
        logits = predictions.scores
        if input_kind == "probs":
            logits = probabilities_to_logits(logits)
            return cls(logits, predictions.labels, scores_name, has_zeros=bool(np.isneginf(logits).any()))
        return cls(logits=logits, labels=predictions.labels, scores_name=scores_name)

    def require_finite(self, what: str) -> None:
        """Refuse log-probabilities of exactly 0 (methods whose maps are not defined at −inf)."""
        if np.isneginf(self.logits).any():
            row = int(np.flatnonzero(np.isneginf(self.logits).any(axis=1))[0])
            raise InputError(
                f"{self.scores_name}: {what} needs finite logits, but row {row} has a probability of exactly 0"
            )

    def require_finite_true_class(self, what: str) -> None:
        """Refuse a true class of probability 0: its NLL is infinite whatever the map."""
        if not np.isneginf(self.logits).any():
            return
        for rows in row_chunks(self.n, self.k):
            z_y = self.rows(rows)[np.arange(rows.stop - rows.start), self.labels[rows]]
            bad = np.isneginf(z_y)
            if bad.any():
                row = rows.start + int(np.flatnonzero(bad)[0])
                raise InputError(
                    f"{self.scores_name}: the true class has probability 0 at row {row}, so the NLL is infinite "
                    f"at every temperature; {what} is impossible",
                    remedy="grid-search-ece",
                )


@dataclass(frozen=True)
class FitInfo:
    """How a fit went, on the fitting set.

    objective     what was minimised ("nll", or "ece"/"adaece" for a temperature grid)
    value         the objective at the fitted parameters
    at_identity   the objective at the identity map (T = 1: the uncalibrated model)
    n, k          the fitting set's size and number of classes
    solver        the solver's details (passes, iterations), JSON-ready
    grid, curve   a grid search's (start, stop, step) and ((parameter, objective), …); else None
    warnings      e.g. an optimum on the grid's boundary, no convergence
    """

    objective: str
    value: float
    at_identity: float
    n: int
    k: int
    solver: dict
    grid: tuple[float, float, float] | None = None
    curve: tuple[tuple[float, float], ...] | None = None
    warnings: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------
# Checking saved parameters (JSON is read by a person's tools too: nothing is taken on trust)


def json_number(value: Any, what: str, *, positive: bool = False) -> float:
    """A finite JSON number (not a boolean, not a string), else one clear InputError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        shown = json.dumps(value) if isinstance(value, (str, bool, type(None))) else type(value).__name__
        raise InputError(f"{what} must be a number, got {shown}")
    number = float(value)
    if not math.isfinite(number) or (positive and number <= 0):
        raise InputError(f"{what} must be finite{' and > 0' if positive else ''}, got {value!r}")
    return number


def json_numbers(value: Any, what: str) -> list[float]:
    """A non-empty JSON list of finite numbers."""
    if not isinstance(value, list) or not value:
        raise InputError(f"{what} must be a non-empty list of numbers, got {json.dumps(value)[:40]}")
    return [json_number(v, f"{what}[{i}]") for i, v in enumerate(value)]


def check_k(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise InputError(f"\"k\" must be a number of classes ≥ 2, got {json.dumps(value)[:40]}")
    return value


# ---------------------------------------------------------------------------------------------
# The interface


class Calibrator(ABC):
    """A calibration map fitted on (scores, labels); see the module docstring.

    A subclass sets ``name`` (its registry key and the key of its parameters in ``to_dict``),
    ``searches`` (the ``calib temperature --search`` values that fit it, each a :class:`Search`)
    and implements ``_fit``, ``_transform``, ``get_params`` and ``_from_params``.
    """

    name: ClassVar[str]
    searches: ClassVar[dict[str, Search]]
    objectives: ClassVar[tuple[str, ...]] = ("nll",)  # what its searches may minimise (first: default)
    #: "logits": the map gives logits (a temperature, …); "probs": its natural output is probabilities
    #: (histogram binning, isotonic, …), which may be exactly 0: ``apply`` then returns probabilities
    output_kind: ClassVar[str] = "logits"
    title: ClassVar[str] = ""  # a figure's title for it ("" : its searches' title)

    k: int | None = None  # the number of classes it was fitted on (None: any)
    fit_info_: FitInfo | None = None

    # -- construction from `calib temperature` options --------------------------------------------
    @classmethod
    def for_search(cls, search: str, *, objective: str | None = None, compat: str | None = None, **options) -> "Calibrator":
        """An unfitted calibrator for ``calib temperature --search SEARCH``; options it has no use
        for (the grid, ``n_bins``) are ignored, an objective or compat mode it cannot honour is an error."""
        cls.check_objective(search, objective)
        if compat:
            raise InputError("a compat mode applies to the grid search's ECE objective only", remedy="no-compat")
        return cls()

    @classmethod
    def check_objective(cls, search: str, objective: str | None, allowed: tuple[str, ...] | None = None) -> str:
        allowed = cls.objectives if allowed is None else allowed
        if objective is None:
            return allowed[0]
        if objective not in OBJECTIVES:
            raise InputError(f"Expected `objective` to be one of {OBJECTIVES}, but got {objective!r}")
        if objective not in allowed:
            raise InputError(
                f"the {search} search minimises the {allowed[0].upper()}; the {objective} objective works with "
                "the grid search only",
                remedy="grid-search",
            )
        return objective

    # -- fitting ------------------------------------------------------------------------------------
    def fit(
        self,
        scores,
        labels,
        *,
        input_kind: InputKind = "logits",
        progress: Progress | None = None,
        scores_name: str = "scores",
        labels_name: str = "labels",
    ) -> "Calibrator":
        """Fit on validation ``scores`` (logits, or probabilities with ``input_kind="probs"``) and
        ``labels``; sets the parameters, ``k`` and ``fit_info_``; returns self. ``progress(done,
        total)`` is called as the solver goes (total None when unknown)."""
        data = FitData.prepare(scores, labels, input_kind, scores_name, labels_name)
        self.fit_info_ = self._fit(data, progress)
        self.k = data.k
        return self

    @abstractmethod
    def _fit(self, data: FitData, progress: Progress | None) -> FitInfo:
        """Learn the parameters from validated data; return how it went."""

    # -- applying -----------------------------------------------------------------------------------
    @property
    def temperature(self) -> float | None:
        """T when the map is one temperature, else None."""
        return None

    @property
    def is_identity(self) -> bool:
        """True when the map changes nothing (then ``apply`` returns the scores themselves)."""
        return False

    @property
    def label(self) -> str:
        """Short name of the map for titles and legends."""
        return self.name

    @abstractmethod
    def _transform(self, z: np.ndarray) -> np.ndarray:
        """Calibrated logits of float64 logits ``z``: (N, K), or a 1-D vector of binary log-odds."""

    def _proba(self, z: np.ndarray) -> np.ndarray:
        """Calibrated probabilities (N, K) of float64 logits ``z`` (checked); a method whose output is
        probabilities overrides this and defines ``_transform`` as log of it."""
        z = self._transform(z)
        return softmax(np.stack([np.zeros_like(z), z], axis=1) if z.ndim == 1 else z)

    def transform(self, logits, *, scores_name: str = "logits") -> np.ndarray:
        """Calibrated logits (float64). A 1-D vector of log-odds is a binary problem (K = 2)."""
        return self._transform(self._checked(logits, scores_name))

    def _checked(self, logits, scores_name: str, *, widen: bool = True) -> np.ndarray:
        """``logits`` as a float64 array of the fitted K (``widen=False``: float32 and integer arrays
        as they are, for a map that widens them itself, without a float64 copy first)."""
        if not self.is_fitted:
            raise InputError(f"this {type(self).__name__} is not fitted yet; call fit(scores, labels) first")
        z = np.asarray(logits)
        if widen or z.dtype.kind not in "iuf":
            z = np.asarray(z, dtype=np.float64)
        k = 2 if z.ndim == 1 else (z.shape[1] if z.ndim == 2 else -1)
        if self.k is not None and k != self.k:
            raise InputError(
                f"{scores_name}: {k if k > 0 else 'unknown'} classes (shape {z.shape}) but the calibration "
                f"was fitted on K = {self.k}"
            )
        return z

    def predict_proba(self, logits, *, scores_name: str = "logits") -> np.ndarray:
        """Calibrated probabilities: softmax of :meth:`transform` ((N, K), float64)."""
        return self._proba(self._checked(logits, scores_name))

    def result_kind(self, input_kind: InputKind) -> InputKind:
        """The kind of ``apply``'s result for scores of ``input_kind``: the same kind for a map that
        gives logits, always "probs" for a method whose output is probabilities (``output_kind``)."""
        return "probs" if self.output_kind == "probs" else input_kind

    def apply(
        self, scores, input_kind: InputKind = "logits", *, scores_name: str = "scores", validate: bool = True
    ) -> np.ndarray:
        """``scores`` after calibration, of the kind :meth:`result_kind` says: logits in, logits out;
        probabilities in, probabilities out (through log p, zeros staying exactly 0) — except that a
        method whose output is probabilities (``output_kind == "probs"``: histogram binning,
        isotonic, …) always returns probabilities (N, K), whose zeros would be −inf as logits.
        The identity returns ``scores`` unchanged. ``validate``: check the scores first (the same
        errors as ``evaluate``)."""
        scores = scores if isinstance(scores, np.ndarray) else np.asarray(scores)
        if validate:
            _check_scores(scores, scores_name, input_kind)
        if self.is_identity:
            return scores
        if self.output_kind == "probs":
            z = probabilities_to_logits(scores) if input_kind == "probs" else scores
            return self.predict_proba(z, scores_name=scores_name)
        if input_kind == "probs":
            return softmax(self.transform(probabilities_to_logits(scores), scores_name=scores_name))
        return self.transform(scores, scores_name=scores_name)

    def apply_as_read(self, predictions: Predictions, *, scores_name: str = "scores") -> Predictions | None:
        """The calibrated samples as validated :class:`~calibrate_cli.predictions.Predictions` whose
        scores are computed a row chunk at a time as a pass reads them (no (N, K) array is written),
        equal bit for bit to ``with_scores(apply(scores))``; or None where this map has no such view
        (then :meth:`apply`). The base class has none."""
        return None

    # -- saving -------------------------------------------------------------------------------------
    @property
    def is_fitted(self) -> bool:
        return self.get_params() is not None

    @abstractmethod
    def get_params(self) -> Any:
        """The fitted parameters, JSON-ready (None before fitting)."""

    @classmethod
    @abstractmethod
    def _from_params(cls, params: Any, k: int | None) -> "Calibrator":
        """A fitted calibrator from saved parameters, each checked (one-line InputError)."""

    @classmethod
    def identity(cls, k: int | None = None) -> "Calibrator | None":
        """The map that changes nothing (T = 1, a = 1 and b = 0, …), or None if the method has none."""
        return None

    def parameter_rows(self) -> list[tuple[str, float]]:
        """The parameters flattened to (name, value) rows, e.g. for a CSV: ``[("temperature", T)]``."""
        params = self.get_params()
        if not isinstance(params, dict):
            return [(self.name, float(params))]
        rows = []
        for key, value in params.items():  # lists (of lists) get their indices: vector_w_0, histogram_values_2_7
            array = np.asarray(value, dtype=np.float64)
            rows += [
                ("_".join([self.name, key, *map(str, index)]), float(array[index])) for index in np.ndindex(array.shape)
            ]
        return rows

    def to_dict(self) -> dict:
        """``{"method": name, "k": K, name: parameters}``: JSON-ready, read back by ``from_dict``."""
        if not self.is_fitted:
            raise InputError(f"this {type(self).__name__} is not fitted yet; nothing to save")
        return {"method": self.name, "k": self.k, self.name: self.get_params()}

    @classmethod
    def from_dict(cls, d: dict, *, source: str | None = None) -> "Calibrator":
        """The calibrator saved by :meth:`to_dict` (or the ``"calibration"`` of ``calib temperature``'s
        JSON); ``source`` (a file name) prefixes the error messages."""
        where = f"{source}: " if source else ""
        if not isinstance(d, dict):
            raise InputError(f"{where}expected a JSON object for a {cls.name} calibration")
        if cls.name not in d:
            raise InputError(f"{where}a {cls.name} calibration needs its parameters under \"{cls.name}\"")
        try:
            k = check_k(d.get("k"))
            return cls._from_params(d[cls.name], k)
        except InputError as exc:
            raise InputError(f"{where}{exc}") from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label if self.is_fitted else 'not fitted'})"


# ---------------------------------------------------------------------------------------------
# Methods whose output is probabilities (histogram binning, isotonic regression, ensemble TS, …)


def probabilities_of(z: np.ndarray) -> np.ndarray:
    """softmax of float64 logits (N, K), or of the binary logits [0, s] for a 1-D vector s."""
    z = np.asarray(z, dtype=np.float64)
    return softmax(np.stack([np.zeros_like(z), z], axis=1) if z.ndim == 1 else z)


def renormalise(q: np.ndarray) -> np.ndarray:
    """Rows of non-negative ``q`` divided by their sums (one-vs-rest outputs → a distribution);
    a row of zeros (every class judged impossible) becomes the uniform 1/K."""
    total = q.sum(axis=1, keepdims=True)
    return np.where(total > 0, q / np.where(total > 0, total, 1.0), 1.0 / q.shape[1])


class ProbabilityCalibrator(Calibrator):
    """A method whose natural output is probabilities q (N, K): it implements ``_proba(z)``;
    ``transform`` gives log q (a 0 becomes −inf, never clipped) and ``apply`` returns q itself."""

    output_kind: ClassVar[str] = "probs"
    searches: ClassVar[dict[str, Search]] = {}  # fitted by `calib fit --method NAME`, not `calib temperature`

    @abstractmethod
    def _proba(self, z: np.ndarray) -> np.ndarray: ...

    def _transform(self, z: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(self._proba(z))


def nll_of(q: np.ndarray, labels: np.ndarray) -> float:
    """Mean −log q_{i,y_i} of probabilities ``q`` (inf when a true class gets probability 0)."""
    with np.errstate(divide="ignore"):
        return float(-np.mean(np.log(q[np.arange(q.shape[0]), labels])))
