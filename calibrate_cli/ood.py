"""Out-of-distribution detection by the softmax (the paper's Table 3; Mukhoti et al. 2020, §6).

A classifier trained on one distribution sees samples of another (SVHN for a CIFAR-10 model). The
less sure it is of a sample, the likelier that sample is out of distribution; how well one
uncertainty score tells the two sets apart is the area under its ROC curve (AUROC):

    AUROC = (1 / (n_in · n_out)) Σ_{i ∈ in} Σ_{j ∈ out} ( [u_j > u_i] + ½ [u_j = u_i] )

for an uncertainty u where out-of-distribution samples should score higher: the probability that a
random out-of-distribution sample is more uncertain than a random in-distribution one, ties
counted half. This is the Mann–Whitney U statistic of the two sets divided by n_in · n_out (and
what ``sklearn.metrics.roc_auc_score`` gives with the out-of-distribution samples as positives).
Two scores, as in the reference code of Mukhoti et al. 2020 (``ood_test.py``):

- ``entropy``: u = H(p) = −Σ_k p_k log p_k (natural log, 0 · log 0 = 0);
- ``confidence``: u = −max_k p_k (the in-distribution samples as positives with score max_k p_k,
  which is the same number).

p = softmax(logits), or the given probabilities, at temperature 1 or after a calibration map. 0.5
is chance, 1 perfect separation, below 0.5 the score points the wrong way.

Beside the AUROC, for each score (Hendrycks & Gimpel 2017, "A Baseline for Detecting Misclassified and
Out-of-Distribution Examples"; :func:`fpr_at_tpr`, :func:`average_precision`):

- FPR95: the share of out-of-distribution samples accepted (u ≤ t) at the threshold t that accepts
  95 % of the in-distribution ones: t is the ⌈0.95 n_in⌉-th smallest in-distribution u, and every
  sample tied with t is accepted with it (its whole tie group: the TPR reached may exceed 95 %), as
  ``sklearn.metrics.roc_curve``'s first point with TPR ≥ 0.95;
- AUPR-in: the average precision with the in-distribution samples as positives scored −u (for the
  confidence: max_k p_k); AUPR-out: the out-of-distribution samples as positives scored u. Average
  precision AP = Σ_t (R_t − R_{t−1}) P_t over the distinct scores t, from the highest, a tie group
  entering at once (``sklearn.metrics.average_precision_score``; no interpolation).

Computed from the ranks of the pooled scores (ties get their average rank), in O(N log N):
U = R_out − n_out (n_out + 1) / 2 with R_out the sum of the out-of-distribution samples' ranks.
Average ranks are multiples of ½ and every partial sum is exact in float64 below 2⁵³, so the
AUROC is the exact count divided by n_in · n_out, one rounding.

The bootstrap (:func:`ood_bootstrap`) resamples each set on its own (n_in from the in-distribution
samples, n_out from the out-of-distribution ones, with replacement: stratified), one random stream
per resample (:func:`~calibrate_cli.bootstrap.resample_streams`), and puts the project's intervals
(:func:`~calibrate_cli.bootstrap.confidence_interval`) on both AUROCs from the same draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError
from .data.predictions import InputKind, as_predictions
from .data.probabilities import to_probabilities

__all__ = [
    "OOD_SCORES",
    "OodResult",
    "auroc",
    "average_precision",
    "fpr_at_tpr",
    "ood_auroc",
    "ood_bootstrap",
    "ood_scores",
    "softmax_entropy",
]

#: the uncertainty scores, in the order of tables and JSON keys (``auroc_<name>``)
OOD_SCORES = ("entropy", "confidence")


def softmax_entropy(probs: np.ndarray) -> np.ndarray:
    """H(p) = −Σ_k p_k log p_k per row of (N, K) probabilities, natural log, 0 · log 0 = 0, float64.

    >>> softmax_entropy(np.array([[0.5, 0.5], [1.0, 0.0]]))  # log 2, and a sure prediction
    array([0.69314718, 0.        ])
    """
    from scipy.special import entr  # imported here: scipy.special/stats cost ~0.5 s at every `calib` start

    return entr(np.asarray(probs, dtype=np.float64)).sum(axis=1)


def auroc(in_scores, out_scores) -> float:
    """P(out > in) + ½ P(out = in) over all (in, out) pairs: the Mann–Whitney U / (n_in · n_out).

    ``in_scores`` (n_in,), ``out_scores`` (n_out,): a score that should be larger out of distribution.
    From the average ranks of the pooled scores (:func:`scipy.stats.rankdata`), exact in float64.

    >>> auroc([0.1, 0.2], [0.3, 0.2])   # pairs: (0.1,0.3) 1, (0.1,0.2) 1, (0.2,0.3) 1, (0.2,0.2) ½
    0.875
    """
    a = np.asarray(in_scores, dtype=np.float64).ravel()
    b = np.asarray(out_scores, dtype=np.float64).ravel()
    if a.size == 0 or b.size == 0:
        raise InputError("the AUROC needs at least one sample in each set")
    if np.isnan(a).any() or np.isnan(b).any():
        raise InputError("the AUROC's scores contain NaN")
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([a, b]))  # average ranks: multiples of ½, sums exact in float64
    u = float(ranks[a.size:].sum()) - b.size * (b.size + 1) / 2.0
    return u / (float(a.size) * float(b.size))


def _pair(in_scores, out_scores, what: str) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(in_scores, dtype=np.float64).ravel()
    b = np.asarray(out_scores, dtype=np.float64).ravel()
    if a.size == 0 or b.size == 0:
        raise InputError(f"the {what} needs at least one sample in each set")
    if np.isnan(a).any() or np.isnan(b).any():
        raise InputError(f"the {what}'s scores contain NaN")
    return a, b


def fpr_at_tpr(in_scores, out_scores, tpr: float = 0.95) -> float:
    """The share of ``out_scores`` ≤ t, t the ⌈tpr · n_in⌉-th smallest of ``in_scores`` (the threshold
    accepting a share ``tpr`` of the in-distribution samples, u ≤ t; ties with t accepted with it).

    A score should be larger out of distribution (an uncertainty). FPR95 at ``tpr=0.95``.

    >>> fpr_at_tpr([0.1, 0.2, 0.3, 0.4], [0.3, 0.5], tpr=0.75)   # t = 0.3 accepts 3 of 4; out: 0.3 ≤ t
    0.5
    """
    a, b = _pair(in_scores, out_scores, "FPR at a TPR")
    if not 0.0 < tpr <= 1.0:
        raise InputError(f"the TPR must be in (0, 1], got {tpr!r}")
    need = max(1, math.ceil(round(tpr * a.size, 9)))  # rounded first: no float excess adds a sample
    t = np.partition(a, need - 1)[need - 1]
    return float(np.count_nonzero(b <= t)) / b.size


def average_precision(positive_scores, negative_scores) -> float:
    """AP = Σ_t (R_t − R_{t−1}) P_t of telling ``positive_scores`` (larger) from ``negative_scores``:
    thresholds t at the distinct pooled scores from the highest, precision P_t and recall R_t of
    "score ≥ t", a tie group entering at once (``sklearn.metrics.average_precision_score``).

    >>> average_precision([0.9, 0.5], [0.7, 0.5])   # t = 0.9: R ½ P 1; 0.7: no recall; 0.5: R 1 P ½
    0.75
    """
    pos, neg = _pair(positive_scores, negative_scores, "average precision")
    scores = np.concatenate([pos, neg])
    is_pos = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    order = np.argsort(-scores, kind="stable")
    scores, is_pos = scores[order], is_pos[order]
    ends = np.r_[np.flatnonzero(np.diff(scores) != 0), scores.size - 1]  # the last of each tie group
    tp = np.cumsum(is_pos)[ends]
    precision = tp / (ends + 1.0)
    recall_step = np.diff(np.r_[0.0, tp]) / pos.size
    return float(np.dot(recall_step, precision))


def ood_scores(scores, input_kind: InputKind | None = None, *, scores_name: str = "scores") -> dict[str, np.ndarray]:
    """The uncertainty of every sample, larger = likelier out of distribution: ``{"entropy": H(p),
    "confidence": −max_k p_k}``, from validated ``scores`` ((N, K) logits or probabilities, or a 1-D
    binary score vector; as :func:`~calibrate_cli.data.predictions.as_predictions`)."""
    p = to_probabilities(_validated(scores, input_kind, scores_name).scores, input_kind)
    return {"entropy": softmax_entropy(p), "confidence": -p.max(axis=1)}


def _validated(scores, input_kind: InputKind, scores_name: str):
    """Scores checked as every command checks them (no labels here: a placeholder of class 0)."""
    array = scores if isinstance(scores, np.ndarray) else np.asarray(scores)
    n = array.shape[0] if array.ndim >= 1 else 0
    if array.ndim == 0:
        raise InputError(f"{scores_name}: expected scores of shape (N, K) or (N,) for binary scores, got a scalar")
    return as_predictions(array, np.zeros(n, dtype=np.int64), input_kind, scores_name=scores_name)


@dataclass(frozen=True)
class OodResult:
    """AUROCs of telling out-of-distribution samples from in-distribution ones (see the module).

    auroc         score name → AUROC (``OOD_SCORES``: entropy, confidence)
    n_in, n_out   the sizes of the two sets; k the number of classes
    mean_entropy, mean_confidence   (in, out) means of H(p) and max_k p_k, for the reader
    intervals     score name → :class:`~calibrate_cli.bootstrap.ConfidenceInterval` (with a bootstrap, AUROC only)
    bootstrap     the bootstrap's settings, or None
    fpr95, aupr_in, aupr_out   score name → FPR at 95 % TPR, AUPR-in, AUPR-out (see the module)
    """

    auroc: dict[str, float]
    n_in: int
    n_out: int
    k: int
    mean_entropy: tuple[float, float]
    mean_confidence: tuple[float, float]
    intervals: dict = field(default_factory=dict)
    bootstrap: dict | None = None
    fpr95: dict[str, float] = field(default_factory=dict)
    aupr_in: dict[str, float] = field(default_factory=dict)
    aupr_out: dict[str, float] = field(default_factory=dict)

    @property
    def auroc_entropy(self) -> float:
        return self.auroc["entropy"]

    @property
    def auroc_confidence(self) -> float:
        return self.auroc["confidence"]

    def detection_dict(self) -> dict:
        """``auroc_<score>``, ``fpr95_<score>``, ``aupr_in_<score>``, ``aupr_out_<score>`` for each score."""
        out = {}
        for key, values in (("auroc", self.auroc), ("fpr95", self.fpr95), ("aupr_in", self.aupr_in),
                            ("aupr_out", self.aupr_out)):
            out.update({f"{key}_{name}": value for name, value in values.items()})
        return out

    def to_dict(self) -> dict:
        """JSON-ready: ``auroc_entropy``, ``auroc_confidence``, ``fpr95_…``, ``aupr_in_…``,
        ``aupr_out_…``, the sizes, the means, the intervals."""
        return {
            **self.detection_dict(),
            "n_in": self.n_in,
            "n_out": self.n_out,
            "k": self.k,
            "mean_entropy": {"in": self.mean_entropy[0], "out": self.mean_entropy[1]},
            "mean_confidence": {"in": self.mean_confidence[0], "out": self.mean_confidence[1]},
            "intervals": {f"auroc_{name}": ci.to_dict() for name, ci in self.intervals.items()},
            "bootstrap": self.bootstrap,
        }


def ood_auroc(
    in_scores,
    out_scores,
    *,
    input_kind: InputKind | None = None,
    in_name: str = "in-distribution scores",
    out_name: str = "out-of-distribution scores",
    bootstrap: int = 0,
    ci_level: float | None = None,
    ci_method: str | None = None,
    seed=None,
) -> OodResult:
    """AUROC (and FPR95, AUPR-in, AUPR-out) of separating ``out_scores`` from ``in_scores`` by softmax
    entropy and by max probability.

    Both are (N, K) logits (default) or probabilities (``input_kind="probs"``) of the same model (same
    K), or 1-D binary scores. A calibration map is applied by the caller (e.g.
    ``calibrator.apply(scores)``). ``bootstrap=B`` adds intervals (:func:`ood_bootstrap`).

    >>> import numpy as np
    >>> sure = np.array([[4.0, 0.0], [0.0, 5.0]])        # in distribution: confident
    >>> unsure = np.array([[0.1, 0.0], [0.0, 4.0]])      # out: one unsure, one as sure as an in sample
    >>> r = ood_auroc(sure, unsure)
    >>> r.auroc_entropy, r.auroc_confidence              # 4 pairs: 1 + 1 + 1 + ½ ([4, 0] vs [0, 4]: a tie)
    (0.875, 0.875)
    """
    in_u = ood_scores(in_scores, input_kind, scores_name=in_name)
    out_u = ood_scores(out_scores, input_kind, scores_name=out_name)
    k_in, k_out = _k(in_scores), _k(out_scores)
    if k_in != k_out:
        raise InputError(
            f"{out_name}: K = {k_out} classes but {in_name} has K = {k_in}; both must be the outputs of one model"
        )
    n_in, n_out = in_u["entropy"].size, out_u["entropy"].size
    result = OodResult(
        auroc={name: auroc(in_u[name], out_u[name]) for name in OOD_SCORES},
        fpr95={name: fpr_at_tpr(in_u[name], out_u[name], 0.95) for name in OOD_SCORES},
        aupr_in={name: average_precision(-in_u[name], -out_u[name]) for name in OOD_SCORES},
        aupr_out={name: average_precision(out_u[name], in_u[name]) for name in OOD_SCORES},
        n_in=n_in,
        n_out=n_out,
        k=k_in,
        mean_entropy=(float(in_u["entropy"].mean()), float(out_u["entropy"].mean())),
        mean_confidence=(float(-in_u["confidence"].mean()), float(-out_u["confidence"].mean())),
    )
    if not bootstrap:
        return result
    intervals, settings = ood_bootstrap(in_u, out_u, bootstrap, level=ci_level, method=ci_method, seed=seed)
    return OodResult(**{**result.__dict__, "intervals": intervals, "bootstrap": settings})


def _k(scores) -> int:
    shape = np.shape(scores)
    return 2 if len(shape) == 1 else int(shape[1])


class _TiedGroups:
    """The pooled scores of both sets sorted once into groups of equal values: a resample's AUROC is
    then Σ_g b_g (A_{<g} + ½ a_g) / (n_in · n_out), with a_g, b_g the group's resampled in / out
    counts and A_{<g} the in count of the groups below, O(N) per resample."""

    def __init__(self, in_u: np.ndarray, out_u: np.ndarray):
        values, inverse = np.unique(np.concatenate([in_u, out_u]), return_inverse=True)
        self.n_groups = values.size
        self.in_group, self.out_group = inverse[: in_u.size], inverse[in_u.size:]

    def auroc(self, in_counts: np.ndarray, out_counts: np.ndarray) -> float:
        """The AUROC with sample i counted ``in_counts[i]`` / ``out_counts[j]`` times (integers)."""
        a = np.bincount(self.in_group, weights=in_counts, minlength=self.n_groups)
        b = np.bincount(self.out_group, weights=out_counts, minlength=self.n_groups)
        below = np.cumsum(a) - a
        u = float(np.dot(b, below + 0.5 * a))  # integers and halves: exact in float64
        return u / (float(in_counts.sum()) * float(out_counts.sum()))


def _leave_one_out(in_u: np.ndarray, out_u: np.ndarray) -> np.ndarray:
    """The AUROC without each sample in turn (in-distribution ones first), exactly, from the
    placements c_i = #{out > u_i} + ½ #{out = u_i}: U − c_i over (n_in − 1) n_out, and alike for
    an out-of-distribution sample; a set left empty gives NaN (left out by the acceleration)."""
    n_in, n_out = in_u.size, out_u.size
    out_sorted, in_sorted = np.sort(out_u), np.sort(in_u)
    lo = np.searchsorted(out_sorted, in_u, "left")
    hi = np.searchsorted(out_sorted, in_u, "right")
    c_in = (n_out - hi) + 0.5 * (hi - lo)  # pairs (i, ·) won by the out samples
    lo = np.searchsorted(in_sorted, out_u, "left")
    hi = np.searchsorted(in_sorted, out_u, "right")
    c_out = lo + 0.5 * (hi - lo)  # pairs (·, j) won by out sample j
    u = float(c_in.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        drop_in = (u - c_in) / ((n_in - 1.0) * n_out) if n_in > 1 else np.full(n_in, np.nan)
        drop_out = (u - c_out) / (n_in * (n_out - 1.0)) if n_out > 1 else np.full(n_out, np.nan)
    return np.concatenate([drop_in, drop_out])


def ood_bootstrap(
    in_u: dict[str, np.ndarray],
    out_u: dict[str, np.ndarray],
    n_resamples: int,
    *,
    level: float | None = None,
    method: str | None = None,
    seed=None,
) -> tuple[dict, dict]:
    """Stratified bootstrap intervals of the AUROCs, and the settings used.

    ``in_u``/``out_u``: the uncertainties of :func:`ood_scores`. Resample r draws, from its own
    stream (``resample_streams(seed, B)[r]``), n_in indices of the in-distribution set and then n_out
    of the out-of-distribution set, with replacement; every score is measured on the same draws,
    so a result depends on (seed, r) only. Intervals: :func:`~calibrate_cli.bootstrap.confidence_interval`
    (basic by default, percentile, or BCa with the exact leave-one-out jackknife's acceleration),
    range [0, 1].
    """
    from .bootstrap import DEFAULT_CI_LEVEL, DEFAULT_CI_METHOD, DEFAULT_SEED, confidence_interval, resample_streams
    from .bootstrap.intervals import check_settings, method_for
    from .bootstrap.jackknife import jackknife_acceleration

    level = DEFAULT_CI_LEVEL if level is None else level
    method = DEFAULT_CI_METHOD if method is None else method
    seed = DEFAULT_SEED if seed is None else seed
    check_settings(n_resamples, level, method)
    method = method_for("auroc", method)  # an AUROC is no registry metric: "auto" is basic, as before
    names = list(in_u)
    n_in, n_out = in_u[names[0]].size, out_u[names[0]].size
    groups = {name: _TiedGroups(in_u[name], out_u[name]) for name in names}
    values = {name: np.empty(n_resamples) for name in names}
    for r, stream in enumerate(resample_streams(seed, n_resamples)):
        rng = np.random.default_rng(stream)
        in_counts = np.bincount(rng.integers(0, n_in, n_in), minlength=n_in).astype(np.float64)
        out_counts = np.bincount(rng.integers(0, n_out, n_out), minlength=n_out).astype(np.float64)
        for name in names:
            values[name][r] = groups[name].auroc(in_counts, out_counts)
    intervals = {}
    for name in names:
        point = auroc(in_u[name], out_u[name])
        acceleration = jackknife_acceleration(_leave_one_out(in_u[name], out_u[name])) if method == "bca" else 0.0
        intervals[name] = confidence_interval(
            point, values[name], level=level, method=method, acceleration=acceleration, bounds=(0.0, 1.0)
        )
    settings = {"n_resamples": n_resamples, "level": level, "method": method, "seed": seed, "stratified": True}
    return intervals, settings
