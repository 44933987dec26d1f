"""The data of an HTML calibration report, from arrays (no files, no HTML, no matplotlib).

:func:`build_report` fits a temperature on the validation set (the paper's grid by ECE, or the
exact NLL optimum: :func:`~calibrate_cli.calibrators.temperature_fit.fit_temperature`), applies it to the test set
when there is one (else the numbers are those of the validation set itself, and say so), and
evaluates that set before and after with :func:`~calibrate_cli.evaluate.evaluate` (bootstrap
intervals with ``bootstrap=B``). Every number of the report comes from those two calls and from
the grid curves of ECE and NLL against T on the validation set; nothing is recomputed here.
The section "Beyond one number" (:class:`BeyondOneNumber`, ``beyond=True``) holds the results of
the functions of :mod:`calibrate_cli.diagnostics` on the same set before and after T, as they return them.
"""

from __future__ import annotations

import datetime as _datetime
import os
import warnings as _warnings
from dataclasses import dataclass, field

import numpy as np

from .._version import __version__
from ..errors import InputError
from ..evaluate import EvalReport, conventions, evaluate
from ..metrics.functional import DEFAULT_N_BINS
from ..data.predictions import InputKind, Predictions, as_predictions
from ..calibrators.temperature_fit import DEFAULT_GRID, TemperatureFit, fit_temperature
from ..diagnostics.decomposition import SCORES, corp_decomposition, top_label
from ..diagnostics.reliability_stats import CalibrationTest, calibration_test
from ..diagnostics.selective import SelectiveReport, selective_report

__all__ = [
    "InputFile", "CalibrationReport", "BeyondOneNumber", "SetDiagnostics", "build_report", "report_time",
    "REPORT_SEARCHES", "BEYOND_RESAMPLES", "BEYOND_COVERAGE",
]

#: the temperature searches a report fits (a temperature: one number, the curve's x axis)
REPORT_SEARCHES = ("grid", "nll")


@dataclass(frozen=True)
class InputFile:
    """Provenance of one input file: its role ("validation scores", ...), the path as given, its
    size in bytes and the SHA-256 of its content (None when not known, e.g. arrays from Python)."""

    role: str
    path: str
    size: int | None = None
    sha256: str | None = None


#: resamples of the report's calibration test (the smallest p-value is 1 / (B + 1) = 0.002)
BEYOND_RESAMPLES = 499
#: the coverage whose selective risk the report shows
BEYOND_COVERAGE = 0.9


@dataclass(frozen=True)
class SetDiagnostics:
    """The diagnostics of one set's top-label problem (conf_i = max_k p_ik, correct_i), each as its
    function returns it: ``decompositions`` {score: :class:`ScoreDecomposition`} for the Brier and log
    scores (:func:`corp_decomposition`), ``test`` (:func:`calibration_test`: B resamples, the report's
    seed) and ``selective`` (:func:`selective_report` with the coverage ``BEYOND_COVERAGE``)."""

    decompositions: dict
    test: CalibrationTest
    selective: SelectiveReport

    def to_dict(self) -> dict:
        return {
            "decompositions": {name: d.to_dict() for name, d in self.decompositions.items()},
            "calibration_test": self.test.to_dict(),
            "selective": self.selective.to_dict(),
        }


@dataclass(frozen=True)
class BeyondOneNumber:
    """The section "Beyond one number": :class:`SetDiagnostics` of the evaluated set before and after T."""

    before: SetDiagnostics
    after: SetDiagnostics

    def to_dict(self) -> dict:
        return {"before": self.before.to_dict(), "after": self.after.to_dict()}


def set_diagnostics(predictions: Predictions, *, n_bins: int, n_resamples: int, seed, scores_name: str):
    """(:class:`SetDiagnostics`, warnings) of validated predictions: CORP decompositions of the
    top-label Brier and log scores, the calibration test (``n_resamples``, ``seed``) and the selective
    report; the warnings the functions raise (e.g. an infinite log score) are returned as text."""
    conf, correct = top_label(predictions, None, scores_name=scores_name)
    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        decompositions = {score: corp_decomposition(conf, correct, score) for score in SCORES}
    test = calibration_test(conf, correct, n_bins=n_bins, n_resamples=n_resamples, seed=seed)
    selective = selective_report(conf, correct, coverages=(BEYOND_COVERAGE,), risks=())
    texts = [str(w.message) for w in caught]
    return SetDiagnostics(decompositions, test, selective), texts


@dataclass(frozen=True)
class CalibrationReport:
    """Everything an HTML report shows (:func:`build_report`).

    fit           the temperature fitted on the validation set (``fit.temperature``)
    evaluated_on  "test" (T fitted on the validation set, applied to the test set) or "validation"
    before/after  :class:`~calibrate_cli.evaluate.EvalReport` of that set at T = 1 and at the fitted T
                  (bins, per-class ECE, intervals with ``bootstrap``)
    ece_curve, nll_curve  ((T, value), ...): ECE and NLL of the validation set at each T of the grid
                  (None where undefined, e.g. the NLL of probabilities with a 0 on the true class)
    n_validation, n_test  sample counts (n_test None without a test set); k the number of classes
    inputs        provenance of the input files (:class:`InputFile`), as the caller gives them
    created       ISO 8601 time (UTC) the report was made (``$SOURCE_DATE_EPOCH`` when set); calib_version the version that made it
    warnings      what the reader must know (fit on the grid's boundary, infinite NLL, ...)
    beyond        :class:`BeyondOneNumber`: decompositions, calibration test, selective prediction of
                  that set before and after T (None with ``beyond=False`` or with weights)
    weights       (the name of the validation set's sample weights, their Σw), or None
    """

    title: str
    fit: TemperatureFit
    evaluated_on: str
    before: EvalReport
    after: EvalReport
    ece_curve: tuple[tuple[float, float], ...] | None
    nll_curve: tuple[tuple[float, float], ...] | None
    n_validation: int
    n_test: int | None
    k: int
    n_bins: int
    input_kind: str
    compat: str | None
    inputs: tuple[InputFile, ...] = ()
    created: str = ""
    calib_version: str = __version__
    warnings: tuple[str, ...] = field(default=())
    beyond: BeyondOneNumber | None = None
    weights: tuple[str, float] | None = None

    @property
    def temperature(self) -> float:
        return float(self.fit.temperature)

    def to_dict(self) -> dict:
        """JSON-ready summary: the metrics before/after with their intervals, the fit, provenance."""
        return {
            "calib_version": self.calib_version,
            "created": self.created,
            "title": self.title,
            "evaluated_on": self.evaluated_on,
            "n_validation": self.n_validation,
            "n_test": self.n_test,
            "k": self.k,
            "n_bins": self.n_bins,
            "input_kind": self.input_kind,
            "conventions": conventions(self.compat),
            "temperature": self.temperature,
            "calibration": self.fit.to_dict(),
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "ece_curve": None if self.ece_curve is None else [list(p) for p in self.ece_curve],
            "nll_curve": None if self.nll_curve is None else [list(p) for p in self.nll_curve],
            "inputs": [vars(f).copy() for f in self.inputs],
            "warnings": list(self.warnings),
            "beyond": None if self.beyond is None else self.beyond.to_dict(),
        }


#: the reproducible-builds variable (reproducible-builds.org/specs/source-date-epoch): when set, the time a report shows
SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"


def report_time(environ=None) -> str:
    """The time a report shows, ISO 8601 in UTC to the second: ``$SOURCE_DATE_EPOCH`` (seconds since
    1970-01-01 UTC) when it is set and not empty, so that the same inputs give the same bytes (the
    reproducible-builds convention), else now. A malformed value is an InputError, as the
    convention asks (never silently the current time). ``environ``: default ``os.environ``.

    >>> report_time({"SOURCE_DATE_EPOCH": "1700000000"})
    '2023-11-14T22:13:20+00:00'
    """
    value = (os.environ if environ is None else environ).get(SOURCE_DATE_EPOCH, "")
    if value == "":
        return _datetime.datetime.now(_datetime.timezone.utc).replace(microsecond=0).isoformat()
    if not (value.isascii() and value.isdigit()):
        raise InputError(f"{SOURCE_DATE_EPOCH}={value!r} is not a whole number of seconds since 1970-01-01 UTC")
    try:
        return _datetime.datetime.fromtimestamp(int(value), _datetime.timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):
        raise InputError(f"{SOURCE_DATE_EPOCH}={value} is beyond the dates a report can show") from None


def _curve(fit: TemperatureFit, validation: Predictions, objective: str, grid, n_bins, compat, input_kind, names,
           weighted: dict):
    """((T, objective) over ``grid`` on the validation set, None) — the fit's own curve when it is
    that grid search, else a grid search by ``objective`` (:func:`fit_temperature`; its T is not
    used) — or (None, why) when the objective cannot be computed over the grid."""
    if fit.search == "grid" and fit.objective == objective and fit.curve is not None:
        return fit.curve, None
    try:
        other = fit_temperature(
            validation, None, search="grid", objective=objective, grid=grid, n_bins=n_bins,
            compat=compat, input_kind=input_kind, scores_name=names[0], labels_name=names[1], **weighted,
        )
    except InputError as exc:  # e.g. the NLL of probabilities with a 0 on the true class: no curve
        return None, exc.message
    return other.curve, None


def build_report(
    val_scores,
    val_labels,
    test_scores=None,
    test_labels=None,
    *,
    input_kind: InputKind | None = None,
    n_bins: int = DEFAULT_N_BINS,
    search: str = "grid",
    objective: str | None = None,
    grid=DEFAULT_GRID,
    compat: str | None = None,
    bootstrap: int = 0,
    ci_level: float | None = None,
    ci_method: str | None = None,
    seed=None,
    device: str | None = None,
    bootstrap_metrics=None,
    title: str | None = None,
    inputs=(),
    created: str | None = None,
    names: tuple[str, str, str, str] = ("validation scores", "validation labels", "test scores", "test labels"),
    progress=None,
    beyond: bool = True,
    beyond_resamples: int = BEYOND_RESAMPLES,
    weights=None,
    weights_name: str = "weights",
) -> CalibrationReport:
    """The data of a calibration report: a temperature fitted on the validation set, and the metrics
    of the test set (else of the validation set) before and after it.

    ``val_scores``/``val_labels`` (and optional ``test_scores``/``test_labels``): arrays as
    :func:`~calibrate_cli.evaluate.evaluate` takes them (or validated
    :class:`~calibrate_cli.data.predictions.Predictions` with labels None). ``search``: "grid" (the
    paper: T on ``grid`` minimising ``objective``, ECE by default) or "nll" (the exact NLL optimum);
    ``n_bins``, ``compat`` as in ``evaluate``. ``bootstrap=B`` puts intervals on the metrics before
    and after (the same resamples for both: ``ci_level``, ``ci_method``, ``seed``, ``device``,
    ``bootstrap_metrics`` as in ``evaluate``). ``inputs``: :class:`InputFile` provenance to show;
    ``created``: the time to show (default :func:`report_time`: ``$SOURCE_DATE_EPOCH`` when set, else
    now, UTC); ``names``: the four inputs' names in errors.

    The ECE and NLL curves are those of the validation set over ``grid`` whatever the search, with
    the fitted T marked on them by the renderer. ``beyond`` (default True): the section "Beyond one
    number" (:class:`BeyondOneNumber`): the CORP decompositions, a calibration test of
    ``beyond_resamples`` resamples seeded with ``seed`` (the bootstrap's default seed when None) and
    the selective report of the same set before and after T.

    ``weights``: (N,) sample weights of the validation set (docs/weights.md): T is fitted on the
    weighted objective, the curves are weighted, and without a test set so are the metrics before and
    after; the test set's metrics are not. The section "Beyond one number" takes no weights: with
    them it is left out, and the report says so.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> logits = 3 * rng.normal(size=(200, 3)); labels = rng.integers(0, 3, 200)
    >>> report = build_report(logits, labels)
    >>> report.evaluated_on, report.n_validation, report.k, report.temperature > 1
    ('validation', 200, 3, True)
    >>> report.after.metrics["accuracy"] == report.before.metrics["accuracy"]  # T never changes predictions
    True
    """
    if search not in REPORT_SEARCHES:
        raise InputError(f"Expected `search` to be one of {REPORT_SEARCHES} (a temperature), but got {search!r}")
    if (test_scores is None) != (test_labels is None) and not isinstance(test_scores, Predictions):
        raise InputError("a test set needs both its scores and its labels")
    validation = as_predictions(val_scores, val_labels, input_kind, scores_name=names[0], labels_name=names[1])
    test = None
    if test_scores is not None:
        test = as_predictions(test_scores, test_labels, input_kind, scores_name=names[2], labels_name=names[3])
        if test.k != validation.k:
            raise InputError(
                f"{names[2]}: the test set has K = {test.k} classes but the validation set {names[0]} "
                f"has K = {validation.k}"
            )
    weighted = {} if weights is None else dict(weights=weights, weights_name=weights_name)
    fit = fit_temperature(
        validation, None, search=search, objective=objective, grid=grid, n_bins=n_bins, compat=compat,
        input_kind=input_kind, scores_name=names[0], labels_name=names[1], **weighted,
    )
    ece_curve, ece_why = _curve(fit, validation, "ece", grid, n_bins, compat, input_kind, names, weighted)
    nll_curve, nll_why = _curve(fit, validation, "nll", grid, n_bins, compat, input_kind, names, weighted)

    target, scores_name = (test, names[2]) if test is not None else (validation, names[0])
    common = dict(
        input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=scores_name, bootstrap=bootstrap,
        ci_level=ci_level, ci_method=ci_method, seed=seed, device=device, bootstrap_metrics=bootstrap_metrics,
        **(weighted if test is None else {}),
    )
    before = evaluate(target, None, progress=progress, **common)
    scaled = target.with_scores(fit.apply(target.scores, target.input_kind, scores_name=scores_name), scores_name=scores_name)
    after = evaluate(scaled, None, progress=progress, **common)

    warnings: list[str] = list(fit.warnings)
    for report in (before, after):
        warnings += [w for w in report.warnings if w not in warnings]
    diagnostics = None
    if beyond and weights is not None:
        warnings.append(f"the section 'Beyond one number' is left out: its decompositions, calibration test and "
                        f"selective report take no sample weights ({weights_name})")
    elif beyond:
        from ..bootstrap import DEFAULT_SEED

        test_seed = DEFAULT_SEED if seed is None else seed
        found = []
        for when, data in (("before T", target), ("after T", scaled)):
            one, texts = set_diagnostics(data, n_bins=n_bins, n_resamples=beyond_resamples, seed=test_seed,
                                         scores_name=scores_name)
            found.append(one)
            warnings += [f"{when}: {t}" for t in texts if f"{when}: {t}" not in warnings]
        diagnostics = BeyondOneNumber(*found)
    if test is None:
        warnings.append(
            "no test set: T was fitted and is judged on the same samples, so the 'after' numbers are optimistic"
        )
    for name, why in (("ECE", ece_why), ("NLL", nll_why)):
        if why is not None:
            warnings.append(f"the {name} curve against T is left out: {why}")
    return CalibrationReport(
        title=title or "Calibration report",
        fit=fit,
        evaluated_on="test" if test is not None else "validation",
        before=before,
        after=after,
        ece_curve=ece_curve,
        nll_curve=nll_curve,
        n_validation=validation.n,
        n_test=None if test is None else test.n,
        k=validation.k,
        n_bins=n_bins,
        input_kind=validation.input_kind,
        compat=fit.compat,
        inputs=tuple(inputs),
        created=created or report_time(),
        warnings=tuple(warnings),
        beyond=diagnostics,
        weights=None if weights is None else (weights_name, float(np.sum(np.asarray(weights, dtype=np.float64)))),
    )
