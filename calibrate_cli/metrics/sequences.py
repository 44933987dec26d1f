"""Sequence-level confidence of generated answers (docs/topk.md, "Generated answers"): the tokens'
log-probabilities ℓ_1..ℓ_T of each answer, grouped by a sequence id, make the answer's confidence by a
rule, and the answers' correctness is then calibrated as a binary top-label problem.

Rules: ``product`` c = Π_t p_t = exp(Σ_t ℓ_t) (the sequence probability); ``mean`` c = (1/T) Σ_t p_t
(mean token probability); ``geomean`` c = exp((1/T) Σ_t ℓ_t) (length-normalised); ``min``
c = min_t p_t (the weakest token). Sums accumulate in float64.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from .functional import DEFAULT_N_BINS, brier, nll
from .topk import top_label_metrics

__all__ = ["SEQUENCE_RULES", "SequenceConfidence", "AnswerReport", "sequence_confidence", "evaluate_answers"]

SEQUENCE_RULES = ("product", "mean", "geomean", "min")


@dataclass(frozen=True)
class SequenceConfidence:
    """Per sequence (in order of the sorted ids): ``ids``, ``confidence`` in [0, 1], ``n_tokens``,
    and ``correct`` (when per-token correctness was given, constant within each sequence)."""

    ids: np.ndarray
    confidence: np.ndarray
    n_tokens: np.ndarray
    rule: str
    correct: np.ndarray | None = None


def sequence_confidence(token_logprobs, sequence_ids, rule: str = "product", *, correct=None,
                        name: str = "input") -> SequenceConfidence:
    """Each sequence's confidence by ``rule`` (:data:`SEQUENCE_RULES`, module docstring) from its
    tokens' log-probabilities (≤ 0; −inf allowed: a token of probability 0). ``correct`` (per token,
    0/1, optional) must be constant within a sequence; it becomes the sequence's correctness.

    >>> s = sequence_confidence([np.log(0.5), np.log(0.8), np.log(0.9)], [7, 7, 3], rule="product")
    >>> s.ids.tolist(), [round(float(c), 12) for c in s.confidence]
    ([3, 7], [0.9, 0.4])
    """
    if rule not in SEQUENCE_RULES:
        raise InputError(f"Expected `rule` to be one of {SEQUENCE_RULES}, but got {rule!r}")
    lp = np.asarray(token_logprobs, dtype=np.float64)
    ids = np.asarray(sequence_ids)
    if lp.ndim != 1 or ids.shape != lp.shape:
        raise InputError(f"{name}: token log-probabilities {lp.shape} and sequence ids {ids.shape} must be two "
                         "vectors of the same length")
    if lp.shape[0] == 0:
        raise InputError(f"{name}: no tokens")
    bad = np.isnan(lp) | (lp > 1e-6)
    if bad.any():
        raise InputError(f"{name}: row {int(np.flatnonzero(bad)[0]) + 1}: token log-probability {lp[bad][0]!r} "
                         "is not a log-probability (NaN or above 0)")
    lp = np.minimum(lp, 0.0)
    unique, inverse = np.unique(ids, return_inverse=True)
    order = np.argsort(inverse, kind="stable")  # tokens grouped by sequence, in their order within it
    starts = np.flatnonzero(np.r_[True, np.diff(inverse[order]) != 0])
    grouped = lp[order]
    counts = np.diff(np.r_[starts, grouped.shape[0]])
    if rule == "product":
        conf = np.exp(np.add.reduceat(grouped, starts))
    elif rule == "geomean":
        conf = np.exp(np.add.reduceat(grouped, starts) / counts)
    elif rule == "mean":
        conf = np.add.reduceat(np.exp(grouped), starts) / counts
    else:
        conf = np.exp(np.minimum.reduceat(grouped, starts))
    seq_correct = None
    if correct is not None:
        c = np.asarray(correct)
        if c.shape != lp.shape:
            raise InputError(f"{name}: {c.shape[0] if c.ndim else 0} correctness values for {lp.shape[0]} tokens")
        if c.dtype != bool:
            if not np.isin(c, (0, 1)).all():
                raise InputError(f"{name}: row {int(np.flatnonzero(~np.isin(c, (0, 1)))[0]) + 1}: correctness "
                                 "must be 0/1 or true/false")
            c = c.astype(bool)
        grouped_c = c[order]
        first = grouped_c[starts]
        mixed = np.add.reduceat(grouped_c.astype(np.int64), starts) % counts != 0
        if mixed.any():
            raise InputError(f"{name}: sequence {unique[mixed][0].item()!r}: its tokens disagree on the correctness")
        seq_correct = first
    return SequenceConfidence(ids=unique, confidence=np.minimum(conf, 1.0), n_tokens=counts, rule=rule,
                              correct=seq_correct)


@dataclass(frozen=True)
class AnswerReport:
    """The calibration of answers' correctness against their confidence: the top-label metrics
    (``accuracy`` is the share of correct answers), binary NLL −mean[y log c + (1 − y) log(1 − c)]
    and Brier mean 2(c − y)² (calib's definitions, the outcome as a two-class problem)."""

    n: int
    n_bins: int
    rule: str
    metrics: dict[str, float | None]
    bins: object
    adaptive_bins: object
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"n": self.n, "n_bins": self.n_bins, "input_kind": "sequences", "rule": self.rule,
                "metrics": dict(self.metrics),
                "bins": {"ece": self.bins.to_rows(), "adaece": self.adaptive_bins.to_rows()},
                "warnings": list(self.warnings)}


def evaluate_answers(confidence, correct, *, n_bins: int = DEFAULT_N_BINS, rule: str = "product",
                     name: str = "input") -> AnswerReport:
    """:class:`AnswerReport` of answer confidences c_i ∈ [0, 1] and correctness y_i ∈ {0, 1}."""
    c = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct).astype(bool)
    if c.ndim != 1 or y.shape != c.shape or c.shape[0] == 0:
        raise InputError(f"{name}: {c.shape} confidences and {y.shape} correctness values")
    if np.isnan(c).any() or (c < 0).any() or (c > 1).any():
        raise InputError(f"{name}: confidences must lie in [0, 1]")
    metrics, width, mass = top_label_metrics(c, y, n_bins)
    p_outcome = np.where(y, c, 1.0 - c)
    warnings = ()
    if (p_outcome == 0).any():
        warnings = (f"{name}: {int(np.count_nonzero(p_outcome == 0))} answer(s) got probability 0 for their "
                    "outcome: NLL is inf (not clipped)",)
    # the outcome as a two-class problem (p(wrong), p(right)): NLL and Brier as calib reports them for any
    # binary problem (the registry's definitions; Brier Σ over both outcomes, 2(c − y)², in [0, 2])
    outcomes = np.stack([1.0 - c, c], axis=1)
    labels = y.astype(np.int64)
    metrics = {**metrics, "nll": nll(outcomes, labels, input_kind="probs"),
               "brier": brier(outcomes, labels, input_kind="probs")}
    return AnswerReport(n=int(c.shape[0]), n_bins=n_bins, rule=rule, metrics=metrics, bins=width,
                        adaptive_bins=mass, warnings=warnings)
