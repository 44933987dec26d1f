"""Conformal prediction sets: sets of classes that hold the true label with probability ≥ 1 − α
(split conformal; LAC, APS and RAPS scores: :mod:`.sets`, docs/conformal.md)."""

from . import sets
from .sets import (
    CONFORMAL_METHODS,
    DEFAULT_ALPHA,
    DEFAULT_K_REG,
    DEFAULT_LAMBDA,
    ConformalCoverage,
    ConformalFit,
    conformal_quantile_rank,
    coverage_report,
    fit_conformal,
    label_scores,
    prediction_sets,
)

__all__ = list(sets.__all__)
