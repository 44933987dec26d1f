"""The calibration methods by name, fitting by name, and the one loader of saved calibrations.

Adding a method is one new module with a :class:`~.base.Calibrator` subclass and one line in
``CALIBRATORS`` (see docs/contributing.md): ``fit``, ``load_calibrator``, ``calib temperature
--search`` and ``calib eval/plot --calibrator`` all read this table.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import InputError
from ..data.number_text import parse_float
from .base import Calibrator
from .bbq import BBQCalibration
from .beta import BetaCalibration
from .ensemble import EnsembleTemperatureScaling
from .histogram import EqualMassHistogramBinning, HistogramBinning
from .isotonic import IsotonicCalibration
from .matrix import DirichletCalibration, MatrixScaling
from .platt import PlattScaling
from .temperature import TemperatureScaling, check_temperature
from .top_label import TopLabelHistogramBinning
from .vector import VectorScaling

__all__ = ["CALIBRATORS", "SEARCHES", "calibrator_for_search", "fit", "from_dict", "load_calibrator"]

#: every calibration method, by the name its saved parameters carry ("method")
CALIBRATORS: dict[str, type[Calibrator]] = {
    cls.name: cls for cls in (TemperatureScaling, PlattScaling, VectorScaling)
}
#: the methods that `calib fit` added (one line each: the class)
CALIBRATORS.update({
    cls.name: cls for cls in (
        HistogramBinning,
        EqualMassHistogramBinning,
        IsotonicCalibration,
        BBQCalibration,
        BetaCalibration,
        MatrixScaling,
        DirichletCalibration,
        EnsembleTemperatureScaling,
        TopLabelHistogramBinning,
    )
})

#: ``calib temperature --search`` values → the method that fits them
_SEARCH_METHODS = {search: cls for cls in CALIBRATORS.values() for search in cls.searches}
SEARCHES = tuple(_SEARCH_METHODS)


def _method(name: str) -> type[Calibrator]:
    if name not in CALIBRATORS:
        raise InputError(f"Expected `method` to be one of {tuple(CALIBRATORS)}, but got {name!r}")
    return CALIBRATORS[name]


def calibrator_for_search(search: str, **options) -> Calibrator:
    """An unfitted calibrator for ``calib temperature --search SEARCH`` (options: objective, grid,
    n_bins, compat; each method takes what applies to it and refuses what it cannot honour)."""
    if search not in _SEARCH_METHODS:
        raise InputError(f"Expected `search` to be one of {SEARCHES}, but got {search!r}")
    return _SEARCH_METHODS[search].for_search(search, **options)


def fit(method: str, scores, labels, *, input_kind="logits", progress=None, scores_name="scores",
        labels_name="labels", weights=None, **options) -> Calibrator:
    """Fit calibration method ``method`` ("temperature", "platt", "vector") on validation
    ``scores``/``labels``; ``options`` go to the method (e.g. ``search="nll"`` for a temperature).

    >>> import numpy as np
    >>> fitted = fit("temperature", np.array([[4.0, 0.0], [0.0, 4.0], [4.0, 0.0]]), [0, 1, 1], search="nll")
    >>> round(fitted.temperature, 5)  # 4 / ln 2
    5.77078
    """
    return _method(method)(**options).fit(
        scores, labels, input_kind=input_kind, progress=progress, scores_name=scores_name, labels_name=labels_name,
        weights=weights,
    )


def from_dict(document: Any, *, source: str | None = None) -> Calibrator:
    """The calibrator saved in ``document``: a :meth:`Calibrator.to_dict`, the JSON document of
    ``calib temperature`` (its ``"calibration"``), or an old file with only ``"temperature"``.

    The method is the ``"method"`` key, else the one that ``"search"`` fits, else a temperature
    when there is a ``"temperature"`` key. The kind of scores it was fitted on is its
    ``"input_kind"``, else the report's ``"inputs"``' one, else logits (files older than the key).
    """
    where = f"{source}: " if source else ""
    if not isinstance(document, dict):
        raise InputError(f"{where}expected a JSON object holding a calibration, got {type(document).__name__}")
    section = document["calibration"] if isinstance(document.get("calibration"), dict) else document
    inputs = document.get("inputs")
    if "input_kind" not in section and isinstance(inputs, dict) and inputs.get("input_kind") in ("logits", "probs"):
        # a report of calib temperature / fit written before the calibration carried its input kind
        section = {**section, "input_kind": inputs["input_kind"]}
    method = section.get("method")
    if method is None and section.get("search") is not None:
        search = section["search"]
        if search not in _SEARCH_METHODS:
            raise InputError(f"{where}unknown search {search!r} (known: {', '.join(SEARCHES)})")
        method = _SEARCH_METHODS[search].name
    if method is None:
        if "temperature" not in section:
            raise InputError(
                f"{where}no saved calibration: expected a \"temperature\" key (or \"method\" and its parameters), "
                "as written by calib temperature -o FILE.json"
            )
        method = "temperature"
    if method not in CALIBRATORS:
        raise InputError(f"{where}unknown calibration method {method!r} (known: {', '.join(CALIBRATORS)})")
    return CALIBRATORS[method].from_dict(section, source=source)


def load_calibrator(source: Any) -> Calibrator:
    """Any saved calibration: a fitted :class:`Calibrator` (returned as is), a dict (see
    :func:`from_dict`), a number or numeric string (a temperature), or the path of a JSON file
    (what ``calib temperature -o t.json`` writes, or a saved ``to_dict()``).

    >>> load_calibrator("1.5").temperature
    1.5
    >>> load_calibrator({"method": "platt", "k": 2, "platt": {"a": 1.2, "b": 0.1}}).label
    'Platt (a = 1.2, b = 0.1)'
    """
    if isinstance(source, Calibrator):
        return source
    if isinstance(source, dict):
        return from_dict(source)
    if isinstance(source, bool):
        raise InputError(f"temperature must be a number, got {source!r}")
    if isinstance(source, (int, float)):
        return TemperatureScaling(check_temperature(source))
    text = os.fspath(source)
    try:
        number = parse_float(text)  # ASCII numbers only: "1_5" is not 15
    except ValueError:
        number = None
    if number is not None:
        return TemperatureScaling(check_temperature(number))
    from ..data.outputs import read_json

    return from_dict(read_json(text, what="a number nor a readable JSON file"), source=text)
