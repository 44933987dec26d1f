"""The :class:`Calibrator` interface every calibration method implements, and what they share.

A calibrator is a map g from a model's logits z (N, K) to calibrated logits g(z), fitted on a
validation set by minimising an objective (the NLL unless a method says otherwise):

- ``fit(scores, labels, input_kind=...)`` learns the parameters and returns the calibrator itself,
  with ``fit_info_`` (a :class:`FitInfo`: the objective before and after, solver details, warnings),
  ``k`` and ``input_kind`` (what it was fitted on). A fit whose parameters are not finite, or whose
  map is degenerate on the fitting set (probabilities that are not finite; the same probabilities
  for every sample where the scores differ), raises :class:`~calibrate_cli.errors.FitError` and
  leaves the calibrator as it was: it is never returned;
- ``transform(scores)`` gives calibrated logits, ``predict_proba(scores)`` = softmax of them, and
  ``apply(scores)`` keeps the kind (probabilities in, probabilities out). Each takes
  ``input_kind=``: by default the kind it was fitted on; another kind is refused unless the map is
  the same on both (``shift_invariant``), and another K always;
- ``to_dict()`` / ``from_dict(d)`` save and restore it as JSON-ready data, never pickle:
  ``{"method": name, "k": K, "input_kind": kind, name: parameters}`` (a file without
  ``"input_kind"``, written before it was saved, is read as fitted on logits).

Probabilities are handled through their logarithms: log p is a valid logit vector
(softmax(log p) = p) and a probability of exactly 0 becomes −inf, never clipped — except by the
methods whose maps are not defined at −inf (``clips_zeros``: Platt, beta, vector, matrix, Dirichlet,
ensemble temperature scaling), which take log max(p, ε) with ε = :data:`PROB_EPS` (2.2e-16, float64's
machine epsilon, as the reference beta calibration package ``betacal`` clips to [ε, 1 − ε]); a fit
that clips, or a map that clips what it is applied to, says so (a
:class:`~calibrate_cli.errors.CalibWarning`).

Scores are read a row chunk at a time, never widened whole (bfloat16 and float16 files, memory maps):
probabilities become log p as each chunk is read (:class:`LogProbabilityRows`), and every map is
applied chunk by chunk (:meth:`Calibrator.apply`, :meth:`Calibrator.apply_by_rows`). What a method
holds beyond that is said in its module (docs/eval.md, "Vocabulary-scale K").
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np

from ..errors import CalibError, CalibWarning, FitError, InputError
from ..data.predictions import (INPUT_KINDS, InputKind, Predictions, RowSlices, as_predictions, check_scores,
                                largest_magnitude, row_array, row_chunks)
from ..data.probabilities import softmax
from ..engine.class_samples import probabilities_by_rows

__all__ = ["Calibrator", "CLASS_COLUMNS_MAX_VALUES", "FitData", "FitInfo", "LOG_PROBS_IN_MEMORY", "LogProbabilityRows",
           "OBJECTIVES", "PROB_EPS", "ProbabilitiesClipped", "Search", "class_probabilities", "nll_by_rows",
           "probabilities_to_logits"]

#: what ``clips_zeros`` methods put in place of a probability of exactly 0 (so 1 − ε for one of exactly
#: 1 in a binary problem): float64's machine epsilon, as ``betacal`` (Kull et al.'s beta calibration) does
PROB_EPS = float(np.finfo(np.float64).eps)
_LOG_PROB_EPS = float(np.log(PROB_EPS))

#: what a fit can minimise on the fitting set, each computed exactly as ``evaluate`` reports it
OBJECTIVES = ("ece", "nll", "adaece")
#: the most (N × K) log-probabilities a fit keeps as one float64 array (32 MB); beyond, log p is
#: computed from the probabilities as each row chunk is read (:class:`LogProbabilityRows`)
LOG_PROBS_IN_MEMORY = 1 << 22
#: the most probabilities (N × K) that a one-vs-rest method sorting each class's N values (isotonic,
#: BBQ, equal-mass histogram binning) holds at once, as one float64 array (2.1 GB at the limit)
CLASS_COLUMNS_MAX_VALUES = 1 << 28

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


class LogProbabilityRows(RowSlices):
    """log p of probabilities ``probs`` ((N, K), or (N,) p(class 1); an array or a row reader such as
    bfloat16's), computed as each row chunk is read (:func:`probabilities_to_logits` per chunk: the
    same values as on the whole array), raised to ``floor`` (log ε) when given: no (N, K) float64 copy
    of the scores is held."""

    dtype = np.dtype(np.float64)

    def __init__(self, probs, floor: float | None = None) -> None:
        self.probs, self.floor = probs, floor
        self.shape = (int(probs.shape[0]), 2 if probs.ndim == 1 else int(probs.shape[1]))

    def read(self, rows: slice) -> np.ndarray:
        z = probabilities_to_logits(self.probs[rows])
        return z if self.floor is None else np.maximum(z, self.floor, out=z)

    def held(self):
        """These log-probabilities as one float64 array when that is small (:data:`LOG_PROBS_IN_MEMORY`:
        read once, not at every pass of a solver), else themselves."""
        n, k = self.shape
        return self[0:n] if n * k <= LOG_PROBS_IN_MEMORY else self


def _by_chunks(scores):
    """``scores`` as an array read by row chunks: a row reader (bfloat16, log p, …) stays one."""
    return scores if isinstance(scores, RowSlices) else row_array(scores)


def _has_zeros(probs) -> bool:
    """Whether probabilities ``probs`` (an array or row reader, checked ≥ 0) hold an exact 0, by row chunks."""
    k = probs.shape[1] if probs.ndim == 2 else 1
    for rows in row_chunks(probs.shape[0], k):
        chunk = probs[rows]
        if not (chunk > 0).all() or (chunk.ndim == 1 and not (chunk < 1).all()):  # 1-D: 1 − p = 0 too
            return True
    return False


# ---------------------------------------------------------------------------------------------
# The fitting data


@dataclass(frozen=True)
class FitData:
    """Validated fitting data: (N, K) logits (any float dtype; −inf allowed for log-probabilities)."""

    logits: np.ndarray
    labels: np.ndarray
    scores_name: str
    has_zeros: bool = False  # −inf entries (log-probabilities of exactly 0; logits are checked finite)
    input_kind: InputKind = "logits"  # what the scores were: logits, or probabilities (then logits = log p)
    #: (N,) float64 sample weights (checked: ≥ 0, finite, not all 0), or None: every row counts once
    weights: np.ndarray | None = None

    @property
    def total_weight(self) -> float:
        """Σw (N without weights): what the objective's means divide by."""
        return float(self.n) if self.weights is None else float(np.sum(self.weights))

    @property
    def n(self) -> int:
        return int(self.logits.shape[0])

    @property
    def k(self) -> int:
        return int(self.logits.shape[1])

    def rows(self, rows: slice) -> np.ndarray:
        return np.asarray(self.logits[rows], dtype=np.float64)

    def mean(self, values, axis: int | None = None):
        """The mean over the samples (axis 0 of ``values``, (N, …); ``axis=None``: of an (N,) vector):
        ``np.mean`` without weights, else (1/W) Σ_i w_i values_i (rows of weight 0 left out)."""
        if self.weights is None:
            return np.mean(values, axis=axis)
        values = np.asarray(values)
        w = self.weights.reshape((-1,) + (1,) * (values.ndim - 1))
        axis = 0 if axis is None and values.ndim > 1 else axis
        return np.sum(np.where(w > 0, w * values, 0.0), axis=axis) / self.total_weight

    @classmethod
    def prepare(cls, scores, labels, input_kind: InputKind, scores_name: str, labels_name: str) -> "FitData":
        """Validate once (:func:`~calibrate_cli.data.predictions.as_predictions`); probabilities → log p."""
        predictions = as_predictions(
            scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name
        )
        logits = predictions.scores
        if predictions.input_kind == "probs":  # as validated (the kind stated, or that of validated Predictions)
            return cls(LogProbabilityRows(logits).held(), predictions.labels, scores_name,
                       has_zeros=_has_zeros(logits), input_kind="probs")
        return cls(logits=logits, labels=predictions.labels, scores_name=scores_name)

    def row_chunks(self):
        """The row slices of the fitting set's passes."""
        return row_chunks(self.n, self.k)

    def range_scores(self) -> np.ndarray:
        """The logits as the range checks read them (:func:`~calibrate_cli.data.predictions.check_nll_range`,
        ``check_scaled_range``): themselves, or for log-probabilities computed by row chunks an (N, K)
        view of one value, their largest finite magnitude (no copy: those checks would read them whole)."""
        if not isinstance(self.logits, RowSlices):
            return self.logits
        peak = max(largest_magnitude(self.rows(rows)) for rows in self.row_chunks())
        return np.broadcast_to(np.float64(peak), self.logits.shape)

    def log_odds(self) -> np.ndarray:
        """s = z₁ − z₀ of each row (K = 2), float64 (N,), read a row chunk at a time."""
        s = np.empty(self.n)
        for rows in self.row_chunks():
            z = self.rows(rows)
            s[rows] = z[:, 1] - z[:, 0]
        return s

    def clipped(self) -> tuple["FitData", int]:
        """These data with log-probabilities of exactly 0 (−inf) raised to log ε (:data:`PROB_EPS`), and
        how many were raised (the data themselves, 0, when none)."""
        if not self.has_zeros:
            return self, 0
        count = sum(int(np.count_nonzero(np.isneginf(self.rows(rows)))) for rows in self.row_chunks())
        if isinstance(self.logits, LogProbabilityRows):  # read by row chunks: raised as they are read
            logits = LogProbabilityRows(self.logits.probs, _LOG_PROB_EPS)
        else:
            logits = np.maximum(np.asarray(self.logits, dtype=np.float64), _LOG_PROB_EPS)
        return FitData(logits, self.labels, self.scores_name, has_zeros=False, input_kind=self.input_kind,
                       weights=self.weights), count

    def require_finite(self, what: str) -> None:
        """Refuse log-probabilities of exactly 0 (methods whose maps are not defined at −inf)."""
        if not self.has_zeros:  # logits are checked finite: only log p holds −inf
            return
        for rows in self.row_chunks():
            bad = np.isneginf(self.rows(rows)).any(axis=1)
            if bad.any():
                row = rows.start + int(np.flatnonzero(bad)[0])
                raise InputError(
                    f"{self.scores_name}: {what} needs finite logits, but row {row} has a probability of exactly 0"
                )

    def require_finite_true_class(self, what: str) -> None:
        """Refuse a true class of probability 0: its NLL is infinite whatever the map (a row of
        weight 0 is left out: it is not in the objective)."""
        if not self.has_zeros:
            return
        for rows in row_chunks(self.n, self.k):
            z_y = self.rows(rows)[np.arange(rows.stop - rows.start), self.labels[rows]]
            bad = np.isneginf(z_y)
            if self.weights is not None:
                bad &= self.weights[rows] > 0
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


def check_input_kind(value: Any) -> InputKind:
    """A saved ``"input_kind"``: "logits" or "probs"; absent (None: a file written before calib saved
    it) is "logits", as such files were always read."""
    if value is None:
        return "logits"
    if value not in INPUT_KINDS:
        raise InputError(f"\"input_kind\" must be one of {INPUT_KINDS}, got {json.dumps(value)[:40]}")
    return value


def _first_non_finite(value: Any, path: str) -> tuple[str, Any] | None:
    """(where, value) of the first parameter that is not a finite number (NaN, ±inf, null, text), or None."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple, np.ndarray)):
        items = enumerate(value)
    else:
        ok = not isinstance(value, bool) and isinstance(value, (int, float, np.number)) and math.isfinite(float(value))
        return None if ok else (path, value)
    for key, item in items:
        found = _first_non_finite(item, f"{path}[{key}]" if not isinstance(key, str) else f"{path} {key}")
        if found is not None:
            return found
    return None


def _solver_met_non_finite(exc: BaseException) -> bool:
    """Whether ``exc`` is a solver's (scipy's) refusal of NaN or ±inf, as logits near ±1e308 give
    it (``ValueError: array must not contain infs or NaNs``): the data's doing, not a bug."""
    if isinstance(exc, CalibError) or not isinstance(exc, (ValueError, ArithmeticError)):
        return False
    text = str(exc).lower()
    return isinstance(exc, (OverflowError, FloatingPointError)) or any(
        word in text for word in ("infs or nans", "inf or nan", "must be finite", "not finite", "overflow")
    )


class ProbabilitiesClipped(CalibWarning):
    """Probabilities of exactly 0 were clipped to ε (:data:`PROB_EPS`) for a ``clips_zeros`` map."""


def _warn_clipped(scores_name: str) -> None:
    """The one :class:`~calibrate_cli.errors.CalibWarning` of a ``clips_zeros`` map meeting
    probabilities of exactly 0 (one text per scores file, whichever map, fit or apply: the CLI
    shows each text once)."""
    warnings.warn(ProbabilitiesClipped(
        f"{scores_name}: probabilities of exactly 0 clipped to ε = {PROB_EPS:.3g} (a p(class 1) of 1 to 1 − ε) "
        "for the maps that need finite log p (Platt, beta, vector, matrix, Dirichlet, ensemble_ts; "
        "docs/calibrators.md)"
    ), stacklevel=4)


def _kind_words(kind: str) -> str:
    return "probabilities" if kind == "probs" else "logits"


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
    #: True when the map sees the scores only through softmax (adding a constant to a row of logits
    #: changes nothing: a temperature, binning, isotonic, Dirichlet, …): logits and log-probabilities
    #: of one model then give the same result, so it applies to either kind, whatever it was fitted
    #: on. False (vector and matrix scaling: w ⊙ z + b depends on the logits' offsets): scores of
    #: another kind than the fitted one are refused.
    shift_invariant: ClassVar[bool] = False
    #: True when the map is not defined at log p = −inf (Platt, beta, vector, matrix, Dirichlet, ensemble
    #: temperature scaling): probabilities of exactly 0 are clipped to ε (:data:`PROB_EPS`) first
    clips_zeros: ClassVar[bool] = False
    #: True when ``_fit`` honours ``FitData.weights`` (a weighted objective or weighted bin counts); a
    #: method that does not refuses weights (docs/weights.md), never ignores them
    takes_weights: ClassVar[bool] = False

    k: int | None = None  # the number of classes it was fitted on (None: any)
    input_kind: InputKind | None = None  # what it was fitted on: "logits" or "probs" (None: not known, any)
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
        weights=None,
        weights_name: str = "weights",
    ) -> "Calibrator":
        """Fit on validation ``scores`` (logits, or probabilities with ``input_kind="probs"``) and
        ``labels``; sets the parameters, ``k`` and ``fit_info_``; returns self. ``progress(done,
        total)`` is called as the solver goes (total None when unknown). ``weights``: (N,) sample
        weights ≥ 0, not all 0 (named ``weights_name`` in errors): row i counts w_i times in the
        objective or the bin counts, so whole-number weights fit as repeated rows (docs/weights.md)."""
        data = FitData.prepare(scores, labels, input_kind, scores_name, labels_name)
        if weights is not None:
            from ..metrics.weighted import check_weights

            if not self.takes_weights:
                raise InputError(f"{weights_name}: the {self.name} fit takes no sample weights")
            data = dataclasses.replace(data, weights=check_weights(weights, data.n, name=weights_name))
        clipped = 0
        if self.clips_zeros:
            data, clipped = data.clipped()
            if clipped:
                _warn_clipped(data.scores_name)
        before = dict(self.__dict__)
        try:
            # numpy's floating-point warnings stay inside: what they would signal (NaN or ±inf
            # parameters or probabilities) is refused by check_fit, in one clear error
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                self.fit_info_ = self._fit(data, progress)
                self.k = data.k
                self.input_kind = data.input_kind
                self.check_fit(data)
        except BaseException as exc:
            self.__dict__.clear()  # a fit that failed leaves nothing behind: the calibrator is as it was
            self.__dict__.update(before)
            if _solver_met_non_finite(exc):
                raise FitError(
                    f"{data.scores_name}: the {self.name} fit failed: its solver met values that are not finite "
                    f"({str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}); scores "
                    "this large overflow its arithmetic: fit a temperature, or rescale the scores"
                ) from None
            raise
        return self

    def check_fit(self, data: FitData) -> None:
        """Refuse (:class:`~calibrate_cli.errors.FitError`) a fit whose parameters are not finite, or
        whose map on the fitting set gives probabilities that are not finite, or the same
        probabilities to every sample where the scores' probabilities differ (a collapse to a
        constant: the ranking and the accuracy destroyed), naming the method and why."""
        params = self.get_params()
        bad = _first_non_finite(params, self.name) if params is not None else (self.name, None)
        if bad is not None:
            where, value = bad
            raise FitError(f"{data.scores_name}: the {self.name} fit failed: its parameter {where} is "
                           f"{json.dumps(value) if value is None or isinstance(value, str) else value}, not a finite number")
        self.check_fitted_map(data)

    def check_fitted_map(self, data: FitData) -> None:
        """The map part of :meth:`check_fit`: one pass over the fitting set in row chunks. A map known
        to keep the order of every row (one temperature T > 0) overrides it with nothing."""
        first_in = first_out = None
        spread_in = spread_out = 0.0
        hits_before = hits_after = 0
        for rows in row_chunks(data.n, data.k):
            z = data.rows(rows)
            q = self._proba(z)
            if not np.isfinite(q).all() or (q < 0).any():
                bad = ~np.isfinite(q).all(axis=1) | (q < 0).any(axis=1)
                first = int(np.flatnonzero(bad)[0])
                what = "not finite" if not np.isfinite(q[first]).all() else "negative"
                raise FitError(
                    f"{data.scores_name}: the {self.name} fit failed: its probabilities on the fitting set are {what} "
                    f"(row {rows.start + first}: {np.array2string(q[first], precision=4, threshold=6)})"
                )
            p = probabilities_of(z)
            if first_in is None:
                first_in, first_out = p[0].copy(), q[0].copy()
            spread_in = max(spread_in, float(np.abs(p - first_in).max()))
            spread_out = max(spread_out, float(np.abs(q - first_out).max()))
            y = data.labels[rows]
            hits_before += int(np.count_nonzero(np.argmax(z, axis=1) == y))
            hits_after += int(np.count_nonzero(np.argmax(q, axis=1) == y))
        if spread_out <= _CONSTANT and spread_in > _CONSTANT:
            before, after = hits_before / data.n, hits_after / data.n
            raise FitError(
                f"{data.scores_name}: the {self.name} fit is degenerate: it gives every sample the same probabilities "
                f"({np.array2string(first_out, precision=4, threshold=6)}) where the scores differ; the fitting set's "
                f"accuracy would go from {100 * before:.2f} % to {100 * after:.2f} %"
            )

    @abstractmethod
    def _fit(self, data: FitData, progress: Progress | None) -> FitInfo:
        """Learn the parameters from validated data; return how it went."""

    # -- the kind of the scores ---------------------------------------------------------------------
    def _kind(self, input_kind: InputKind | None, scores_name: str) -> InputKind:
        """The kind of scores given to ``transform``/``predict_proba``/``apply``: ``input_kind``, or
        (None) the kind it was fitted on; another kind than the fitted one is refused unless the map
        is the same on both (``shift_invariant``)."""
        if input_kind is None:
            return self.input_kind or "logits"
        if isinstance(input_kind, bool) or input_kind not in INPUT_KINDS:
            raise InputError(f"Expected `input_kind` to be one of {INPUT_KINDS}, but got {input_kind!r}")
        if self.input_kind is not None and input_kind != self.input_kind and not self.shift_invariant:
            raise InputError(
                f"{scores_name}: {_kind_words(input_kind)} given, but the {self.name} calibration was fitted on "
                f"{_kind_words(self.input_kind)}, and its map of logits is not its map of log-probabilities",
                remedy="logits" if self.input_kind == "logits" else "probs",
            )
        return input_kind

    def _as_logits(self, scores, input_kind: InputKind | None, scores_name: str):
        """``scores`` as logits for the map: probabilities (checked: rows summing to 1) become log p,
        a row chunk at a time as they are read (:meth:`_log_probs`)."""
        if self._kind(input_kind, scores_name) != "probs":
            return scores
        scores = _by_chunks(scores)
        check_scores(scores, scores_name, "probs")
        return self._log_probs(scores, scores_name)

    def _log_probs(self, probs, scores_name: str) -> LogProbabilityRows:
        """log p, as :func:`probabilities_to_logits`, read by row chunks; log max(p, ε) for a
        ``clips_zeros`` map, with a :class:`ProbabilitiesClipped` warning when there is a 0 to clip."""
        if not self.clips_zeros:
            return LogProbabilityRows(probs)
        if _has_zeros(probs):
            _warn_clipped(scores_name)
        return LogProbabilityRows(probs, _LOG_PROB_EPS)

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

    def transform(self, scores, *, input_kind: InputKind | None = None, scores_name: str = "logits") -> np.ndarray:
        """Calibrated logits (float64) of ``scores`` of ``input_kind`` (default: the fitted kind;
        probabilities go through log p). A 1-D vector of log-odds is a binary problem (K = 2)."""
        return self._transform_logits(self._as_logits(scores, input_kind, scores_name), scores_name)

    def _transform_logits(self, z, scores_name: str) -> np.ndarray:
        """Calibrated logits of logits ``z`` (or log p), of the fitted K, a row chunk at a time."""
        return self._by_rows(z, self._transform, scores_name)

    def _check_k(self, shape: tuple, scores_name: str) -> None:
        """Refuse an unfitted map, or scores of ``shape`` with another K than the fitted one."""
        if not self.is_fitted:
            raise InputError(f"this {type(self).__name__} is not fitted yet; call fit(scores, labels) first")
        k = 2 if len(shape) == 1 else (shape[1] if len(shape) == 2 else -1)
        if self.k is not None and k != self.k:
            raise InputError(
                f"{scores_name}: {k if k > 0 else 'unknown'} classes (shape {tuple(shape)}) but the calibration "
                f"was fitted on K = {self.k}"
            )

    def _checked(self, logits, scores_name: str, *, widen: bool = True) -> np.ndarray:
        """``logits`` as a float64 array of the fitted K (``widen=False``: float32 and integer arrays
        as they are, for a map that widens them itself, without a float64 copy first)."""
        z = np.asarray(logits)
        if widen or z.dtype.kind not in "iuf":
            z = np.asarray(z, dtype=np.float64)
        self._check_k(z.shape, scores_name)
        return z

    def _by_rows(self, scores, fn, scores_name: str, *, finite: bool = False) -> np.ndarray:
        """``fn`` (a map of float64 logits, row by row) of ``scores`` (an array or a row reader, of the
        fitted K), one row chunk at a time into one float64 array: the values of ``fn`` on the whole
        array, with no widened copy of the scores. ``finite``: refuse a result that is not finite."""
        scores = _by_chunks(scores)
        self._check_k(scores.shape, scores_name)
        n = scores.shape[0]
        out = None
        for rows in row_chunks(n, scores.shape[1] if scores.ndim == 2 else 1):
            part = fn(np.asarray(scores[rows], dtype=np.float64))
            if finite:
                self._check_finite(part, rows.start, scores_name)
            if out is None:
                out = np.empty((n, *part.shape[1:]), dtype=part.dtype)
            out[rows] = part
        return out if out is not None else fn(np.asarray(scores[0:0], dtype=np.float64))

    def _check_finite(self, out: np.ndarray, first_row: int, scores_name: str) -> None:
        """Refuse calibrated scores ``out`` (rows from ``first_row``) that are not finite."""
        if not np.isfinite(out).all():
            row = first_row + int(np.flatnonzero(~np.isfinite(out).reshape(out.shape[0], -1).all(axis=1))[0])
            raise InputError(
                f"{scores_name}: the {self.name} calibration gives scores that are not finite (first at row {row}): "
                "its parameters are too large for these scores (a tampered or foreign calibration file?)"
            )

    def predict_proba(self, scores, *, input_kind: InputKind | None = None, scores_name: str = "logits") -> np.ndarray:
        """Calibrated probabilities ((N, K), float64) of ``scores`` of ``input_kind`` (default: the
        kind it was fitted on): softmax of :meth:`transform`."""
        return self._by_rows(self._as_logits(scores, input_kind, scores_name), self._proba, scores_name)

    def result_kind(self, input_kind: InputKind) -> InputKind:
        """The kind of ``apply``'s result for scores of ``input_kind``: the same kind for a map that
        gives logits, always "probs" for a method whose output is probabilities (``output_kind``)."""
        return "probs" if self.output_kind == "probs" else input_kind

    def _apply_rows(self, input_kind: InputKind, scores_name: str):
        """The map of :meth:`apply` on one float64 row chunk of scores of ``input_kind`` (log p already
        taken for probabilities)."""
        if self.output_kind == "probs":
            return self._proba
        if input_kind == "probs":
            return lambda z: softmax(self._transform_logits(z, scores_name))
        return lambda z: self._transform_logits(z, scores_name)

    def apply(
        self, scores, input_kind: InputKind | None = None, *, scores_name: str = "scores", validate: bool = True
    ) -> np.ndarray:
        """``scores`` after calibration, of the kind :meth:`result_kind` says: logits in, logits out;
        probabilities in, probabilities out (through log p, zeros staying exactly 0) — except that a
        method whose output is probabilities (``output_kind == "probs"``: histogram binning,
        isotonic, …) always returns probabilities (N, K), whose zeros would be −inf as logits.
        The identity returns ``scores`` unchanged. ``validate``: check the scores first (the same
        errors as ``evaluate``). ``input_kind``: by default the kind it was fitted on; another kind
        is refused unless the map is the same on both (``shift_invariant``). The scores are read a
        row chunk at a time (an array or a row reader: bfloat16 is never widened whole)."""
        input_kind = self._kind(input_kind, scores_name)
        scores = _by_chunks(scores)
        if validate:
            check_scores(scores, scores_name, input_kind)
        if self.is_identity:
            return scores
        z = self._log_probs(scores, scores_name) if input_kind == "probs" else scores
        # parameters too large for these scores (a saved file's W = 1e308) overflow: one error,
        # naming the map, not numpy's RuntimeWarning and then "scores contain Inf"
        with np.errstate(over="ignore", invalid="ignore"):
            return self._by_rows(z, self._apply_rows(input_kind, scores_name), scores_name, finite=validate)

    def apply_as_read(self, predictions: Predictions, *, scores_name: str = "scores") -> Predictions | None:
        """The calibrated samples as validated :class:`~calibrate_cli.data.predictions.Predictions` whose
        scores are computed a row chunk at a time as a pass reads them (no (N, K) array is written),
        equal bit for bit to ``with_scores(apply(scores))``, with no check of them (a map known to keep
        finite scores finite: one temperature); or None where this map has none. The base class has
        none: :meth:`apply_by_rows` is the view of every map, checked as it is read."""
        return None

    def apply_by_rows(self, predictions: Predictions, *, scores_name: str = "scores") -> Predictions | None:
        """:meth:`apply_as_read` where the map has it, else the calibrated samples computed a row chunk at
        a time as a pass reads them (:class:`CalibratedRows`: the same map per chunk as :meth:`apply`, so
        the same values bit for bit, each chunk refused there when not finite), with no (N, K) array
        written and no widened copy of the scores; None where :meth:`apply` is to say what is wrong
        (another kind or K than the fitted one, scores not checked yet)."""
        view = self.apply_as_read(predictions, scores_name=scores_name)
        if view is not None:
            return view
        if not self.is_fitted or self.k not in (None, predictions.k) or predictions.pending is not None:
            return None
        if self.input_kind is not None and predictions.input_kind != self.input_kind and not self.shift_invariant:
            return None
        if self.is_identity:
            return predictions
        rows = CalibratedRows(self, predictions.scores, predictions.input_kind, scores_name)
        return Predictions(scores=rows, labels=predictions.labels, input_kind=self.result_kind(predictions.input_kind))

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
        """``{"method": name, "k": K, "input_kind": kind, name: parameters}``: JSON-ready, read back by
        ``from_dict`` (``"input_kind"`` only when known: a calibrator built from its parameters has none)."""
        if not self.is_fitted:
            raise InputError(f"this {type(self).__name__} is not fitted yet; nothing to save")
        kind = {"input_kind": self.input_kind} if self.input_kind is not None else {}
        return {"method": self.name, "k": self.k, **kind, self.name: self.get_params()}

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
            kind = check_input_kind(d.get("input_kind"))
            out = cls._from_params(d[cls.name], k)
        except InputError as exc:
            raise InputError(f"{where}{exc}") from None
        out.input_kind = kind
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label if self.is_fitted else 'not fitted'})"


class CalibratedRows(RowSlices):
    """The scores ``calibrator.apply(scores, input_kind)`` gives, computed as each row chunk is read
    (the same map per chunk, so the same values bit for bit) and refused there when not finite; a
    probability of exactly 0 that the map clips is said once (:class:`ProbabilitiesClipped`)."""

    dtype = np.dtype(np.float64)

    def __init__(self, calibrator: Calibrator, scores, input_kind: InputKind, scores_name: str) -> None:
        self.calibrator, self.scores, self.input_kind, self.scores_name = calibrator, scores, input_kind, scores_name
        self.shape = (int(scores.shape[0]), int(scores.shape[1]))
        self._map = calibrator._apply_rows(input_kind, scores_name)
        self._clips = input_kind == "probs" and calibrator.clips_zeros
        self._warned = False

    def read(self, rows: slice) -> np.ndarray:
        chunk = self.scores[rows]
        if self.input_kind == "probs":
            if self._clips and not self._warned and _has_zeros(chunk):
                self._warned = True
                _warn_clipped(self.scores_name)
            z = LogProbabilityRows(chunk, _LOG_PROB_EPS if self._clips else None).read(slice(None))
        else:
            z = np.asarray(chunk, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            out = self._map(z)
        self.calibrator._check_finite(out, rows.start, self.scores_name)
        return out


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


#: rows of probabilities that differ by at most this much are the same (a map collapsed to a constant)
_CONSTANT = 1e-12


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


def _log_likelihood(q: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Σ_i w_i log q_{i,y_i} of probabilities ``q`` (w = 1 without weights; −inf when a true class gets
    probability 0; rows of weight 0 left out)."""
    with np.errstate(divide="ignore"):
        logs = np.log(q[np.arange(q.shape[0]), labels])
    return float(np.sum(logs if weights is None else np.where(weights > 0, weights * logs, 0.0)))


def nll_of(q: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Mean −log q_{i,y_i} of probabilities ``q`` (inf when a true class gets probability 0);
    ``weights``: the weighted mean (1/W) Σ_i w_i (−log q_{i,y_i}), rows of weight 0 left out."""
    return -_log_likelihood(q, labels, weights) / (q.shape[0] if weights is None else float(np.sum(weights)))


def nll_by_rows(data: FitData, proba: Callable[[np.ndarray], np.ndarray] = probabilities_of) -> float:
    """:func:`nll_of` of ``proba(z)`` (default: softmax) on the fitting set, a row chunk at a time."""
    total = 0.0
    for rows in data.row_chunks():
        total += _log_likelihood(proba(data.rows(rows)), data.labels[rows],
                                 None if data.weights is None else data.weights[rows])
    return -total / data.total_weight


def class_probabilities(data: FitData, method: str) -> np.ndarray:
    """softmax of the fitting set's logits, (N, K) float64, made a row chunk at a time, for a method
    (``method``, its name in the message) that needs every class's N probabilities at once; refused
    beyond :data:`CLASS_COLUMNS_MAX_VALUES` (one line, not an out-of-memory)."""
    if data.n * data.k > CLASS_COLUMNS_MAX_VALUES:
        raise InputError(
            f"{data.scores_name}: {method} needs every class's probabilities at once: N × K = {data.n:,} × {data.k:,} "
            f"would take {8 * data.n * data.k / 1e9:.1f} GB, beyond calib's limit of {CLASS_COLUMNS_MAX_VALUES:,} "
            "values; fit it on fewer samples, or fit a temperature"
        )
    return probabilities_by_rows(data.logits, "logits")
