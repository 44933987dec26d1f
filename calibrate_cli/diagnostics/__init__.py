"""Diagnostics beyond one number: score decompositions and the uncertainty of reliability diagrams.

- :mod:`.decomposition`: CORP decompositions (Dimitriadis, Gneiting & Jordan 2021) of the Brier and
  log scores, top-label and per class, and Murphy's binned Brier decomposition (made exact).
- :mod:`.reliability_stats`: per-bin Clopper–Pearson intervals, consistency bands under the calibrated
  null (Bröcker & Smith 2007) and a resampling test of calibration (a p-value).
- :mod:`.selective`: selective prediction: risk–coverage curves, AURC, E-AURC, AUGRC (Traub et al.
  2024), the risk at a coverage and the coverage at a risk.
"""

from .decomposition import (
    ClasswiseDecomposition,
    Decompositions,
    MurphyDecomposition,
    ScoreDecomposition,
    classwise_corp_decomposition,
    corp_decomposition,
    decompose,
    murphy_decomposition,
    pav_recalibrate,
    top_label,
)
from .reliability_stats import (
    BinIntervals,
    CalibrationTest,
    ConsistencyBands,
    CorpReliability,
    bin_intervals,
    calibration_test,
    clopper_pearson,
    consistency_bands,
    corp_reliability,
    reliability_intervals,
)
from .selective import (
    RiskCoverageCurve,
    SelectiveReport,
    WorkingPoint,
    aurc,
    augrc,
    coverage_at_risk,
    e_aurc,
    risk_at_coverage,
    risk_coverage,
    selective_report,
)

__all__ = [
    "RiskCoverageCurve",
    "SelectiveReport",
    "WorkingPoint",
    "aurc",
    "augrc",
    "coverage_at_risk",
    "e_aurc",
    "risk_at_coverage",
    "risk_coverage",
    "selective_report",
    "BinIntervals",
    "CalibrationTest",
    "ClasswiseDecomposition",
    "ConsistencyBands",
    "CorpReliability",
    "Decompositions",
    "MurphyDecomposition",
    "ScoreDecomposition",
    "bin_intervals",
    "calibration_test",
    "classwise_corp_decomposition",
    "clopper_pearson",
    "consistency_bands",
    "corp_decomposition",
    "corp_reliability",
    "decompose",
    "murphy_decomposition",
    "pav_recalibrate",
    "reliability_intervals",
    "top_label",
]
