"""calib: measure and fix the calibration of classifiers.

The Python API mirrors the ``calib`` command line; it needs numpy and scipy only (no click, rich,
matplotlib or torch are imported here)::

    import numpy as np
    import calibrate_cli as calib

    report = calib.evaluate(logits, labels)            # every metric, per-bin statistics
    report.metrics["ece"], report.bins.to_rows()
    report                                              # a table in a terminal, HTML in a notebook
    report.to_dict(), report.to_frame()                # JSON-ready; a pandas DataFrame (needs pandas)
    calib.ood_auroc(test_logits, ood_logits).auroc_entropy            # out-of-distribution detection
    calib.ece(probs, labels, input_kind="probs", n_bins=15)
    calib.ReliabilityDiagram.from_predictions(logits, labels).plot()   # matplotlib, imported lazily
    fit = calib.fit_temperature(val_logits, val_labels, search="nll")   # fit.temperature, fit.transform(test_logits)
    cal = calib.calibrators.fit("vector", val_logits, val_labels)        # any method; cal.to_dict() is JSON
    calib.load_calibrator("t.json").transform(test_logits)             # any saved fit
"""

from ._console import quiet_interrupts_while_starting

quiet_interrupts_while_starting()  # first: Ctrl-C during the imports below ends `calib` quietly (130)

from ._version import __version__  # noqa: E402
from .engine.binning import BinStats, assign_bins, bin_statistics, equal_mass_edges, uniform_edges
from .bootstrap import Comparison, ConfidenceInterval, bootstrap, compare
from .calibrators import Calibrator, PlattScaling, TemperatureScaling, VectorScaling, load_calibrator
from .errors import CalibError, FitError, InputError, OutputError
from .evaluate import EvalReport, evaluate
from .metrics.gates import Gate, GateResult, check_gates
from .data.io import load_labels, load_scores
from .metrics.registry import METRICS, MetricSpec
from .metrics.functional import (
    DEFAULT_N_BINS,
    METRIC_NAMES,
    accuracy,
    adaece,
    brier,
    classwise_ece,
    ece,
    equal_mass_bins,
    equal_width_bins,
    error,
    mce,
    mean_confidence,
    nll,
    s99,
    top5_accuracy,
)
from .metrics.meter import Meter
from .ood import OodResult, ood_auroc
from .plots.diagram import ReliabilityDiagram
from .data.predictions import Predictions, as_predictions
from .data.probabilities import log_softmax, softmax
from .engine.device_eval import device_metrics
from .calibrators.temperature_fit import TemperatureFit, apply_temperature, fit_temperature

__all__ = [
    "__version__",
    "BinStats",
    "CalibError",
    "Calibrator",
    "Comparison",
    "ConfidenceInterval",
    "DEFAULT_N_BINS",
    "EvalReport",
    "FitError",
    "Gate",
    "GateResult",
    "InputError",
    "METRICS",
    "METRIC_NAMES",
    "Meter",
    "MetricSpec",
    "OodResult",
    "OutputError",
    "PlattScaling",
    "Predictions",
    "ReliabilityDiagram",
    "TemperatureFit",
    "TemperatureScaling",
    "VectorScaling",
    "accuracy",
    "adaece",
    "apply_temperature",
    "as_predictions",
    "assign_bins",
    "bin_statistics",
    "bootstrap",
    "brier",
    "check_gates",
    "classwise_ece",
    "device_metrics",
    "compare",
    "ece",
    "equal_mass_bins",
    "equal_mass_edges",
    "equal_width_bins",
    "error",
    "evaluate",
    "fit_temperature",
    "load_calibrator",
    "load_labels",
    "load_scores",
    "log_softmax",
    "mce",
    "mean_confidence",
    "nll",
    "ood_auroc",
    "s99",
    "softmax",
    "top5_accuracy",
    "uniform_edges",
]


def __getattr__(name: str):
    """``TemperatureScaler`` (before 0.3) was a second fit/transform wrapper of one temperature: it is
    :class:`TemperatureScaling` now, with the same ``fit``, ``transform`` and ``temperature_``."""
    if name == "TemperatureScaler":
        import warnings

        warnings.warn("calibrate_cli.TemperatureScaler is TemperatureScaling now (same fit/transform)",
                      DeprecationWarning, stacklevel=2)
        return TemperatureScaling
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
