"""Calibration maps fitted on a validation set: temperature, Platt and vector scaling.

Every method is a :class:`Calibrator` (``base.py``) in a module of its own and one entry of
``CALIBRATORS`` (``registry.py``)::

    from calibrate_cli import calibrators

    cal = calibrators.fit("vector", val_logits, val_labels)        # or TemperatureScaling(search="nll").fit(...)
    cal.transform(test_logits)       # calibrated logits;  cal.predict_proba(test_logits): probabilities
    saved = cal.to_dict()            # JSON-ready, never pickle
    calibrators.load_calibrator(saved)          # or a number, or the JSON file of `calib temperature -o`

``calib temperature`` and :func:`calibrate_cli.fit_temperature` fit any of them (``--search grid|nll``
for a temperature, ``platt``, ``vector``) and ``calib eval/plot --calibrator FILE.json`` applies any.
"""

from .base import OBJECTIVES, PROB_EPS, Calibrator, FitData, FitInfo, ProbabilitiesClipped, Search, probabilities_to_logits
from .platt import PlattScaling
from .registry import CALIBRATORS, SEARCHES, calibrator_for_search, fit, from_dict, load_calibrator
from .temperature import TemperatureScaling
from .top_label import TopLabelHistogramBinning
from .vector import VectorScaling

__all__ = [
    "CALIBRATORS",
    "Calibrator",
    "FitData",
    "FitInfo",
    "OBJECTIVES",
    "PlattScaling",
    "SEARCHES",
    "Search",
    "TemperatureScaling",
    "TopLabelHistogramBinning",
    "VectorScaling",
    "calibrator_for_search",
    "fit",
    "from_dict",
    "load_calibrator",
    "PROB_EPS",
    "ProbabilitiesClipped",
    "probabilities_to_logits",
]
