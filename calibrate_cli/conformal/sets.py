"""Split conformal prediction sets for classifiers (docs/conformal.md).

Fit on n calibration samples: the conformity score s(x, y) of each sample's true label, then the
threshold q̂ = the ⌈(n + 1)(1 − α)⌉-th smallest score (the empirical quantile at level
⌈(n + 1)(1 − α)⌉ / n). The prediction set of a new x is C(x) = {y : s(x, y) ≤ q̂}. For exchangeable
calibration and test samples, P(y ∈ C(x)) ≥ 1 − α, and ≤ 1 − α + 1/(n + 1) when the scores have
no ties (Vovk et al. 2005; Angelopoulos & Bates 2021). When ⌈(n + 1)(1 − α)⌉ > n (α < 1/(n + 1))
no finite threshold is valid: q̂ = +∞, every set is the full label set, with a warning.

Scores, from p = softmax(logits) (or the given probabilities), with the classes sorted by
decreasing p (ties: lower index first, as argmax) and o(x, y) the 1-based rank of y:

- ``lac`` (Sadinle et al. 2019): s = 1 − p_y. Smallest sets on average; may be empty.
- ``aps`` (Romano et al. 2020): s = ρ(x, y) + u · p_y, ρ = the mass of the classes ranked above y.
  Deterministic (u = 1: the cumulative mass down to y) by default; ``randomized=True`` draws
  u ~ U(0, 1) once per sample, which makes the coverage exact (1 − α in expectation) at the cost
  of a random set.
- ``raps`` (Angelopoulos et al. 2021): the APS score + λ · max(0, o(x, y) − k_reg), penalising
  long tails of unlikely classes (``lam`` = λ, ``k_reg``).

Sums run in float64, class by class in rank order, identically for the fit and for new samples.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..errors import CalibWarning, InputError

__all__ = [
    "CONFORMAL_METHODS",
    "DEFAULT_ALPHA",
    "DEFAULT_K_REG",
    "DEFAULT_LAMBDA",
    "ConformalCoverage",
    "ConformalFit",
    "conformal_quantile_rank",
    "coverage_report",
    "fit_conformal",
    "label_scores",
    "prediction_sets",
]

CONFORMAL_METHODS = ("lac", "aps", "raps")
DEFAULT_ALPHA = 0.1
#: RAPS' penalty and its free ranks (the defaults of Angelopoulos et al. 2021's reference code)
DEFAULT_LAMBDA = 0.01
DEFAULT_K_REG = 5
#: what a saved fit says it is (``ConformalFit.to_dict``)
FORMAT = "calib.conformal"
FORMAT_VERSION = 1


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)) \
            or not 0.0 < float(alpha) < 1.0:
        raise InputError(f"Expected `alpha` to be a number in (0, 1), but got {alpha!r}")
    return float(alpha)


def conformal_quantile_rank(n: int, alpha: float) -> int:
    """⌈(n + 1)(1 − α)⌉, computed exactly on α as written in decimal (α = 0.1, n = 9: 9, not the
    10 that (9 + 1) · (1 − 0.1) in floating point could give). Above n: no finite threshold."""
    a = Fraction(repr(_check_alpha(alpha)))
    return math.ceil((n + 1) * (1 - a))


def _check_method(method: str, lam, k_reg, randomized) -> tuple[float, int]:
    if method not in CONFORMAL_METHODS:
        raise InputError(f"Expected `method` to be one of {CONFORMAL_METHODS}, but got {method!r}")
    if isinstance(lam, bool) or not isinstance(lam, (int, float, np.integer, np.floating)) \
            or not (math.isfinite(lam) and lam >= 0):
        raise InputError(f"Expected `lam` to be a finite number ≥ 0, but got {lam!r}")
    if isinstance(k_reg, bool) or not isinstance(k_reg, (int, np.integer)) or k_reg < 0:
        raise InputError(f"Expected `k_reg` to be an integer ≥ 0, but got {k_reg!r}")
    if randomized and method == "lac":
        raise InputError("`randomized` applies to the aps and raps scores; lac has no random part")
    return (float(lam), int(k_reg)) if method == "raps" else (0.0, 0)


def label_scores(probs: np.ndarray, method: str, *, lam: float = 0.0, k_reg: int = 0, u=None) -> np.ndarray:
    """The conformity score s(x, y) of every label of every row of ``probs`` (N, K), float64 (see the
    module). ``u`` (N,): the uniform draws of the randomized aps/raps scores (None: u = 1)."""
    p = np.asarray(probs, dtype=np.float64)
    if method == "lac":
        return 1.0 - p
    order = np.argsort(-p, axis=1, kind="stable")  # decreasing p, ties: lower class index first
    ranked = np.take_along_axis(p, order, axis=1)
    above = np.zeros_like(ranked)
    np.cumsum(ranked[:, :-1], axis=1, out=above[:, 1:])  # ρ: the mass ranked above, summed in rank order
    scores = above + (ranked if u is None else np.asarray(u, dtype=np.float64)[:, None] * ranked)
    if method == "raps" and lam > 0:
        scores += lam * np.maximum(0, np.arange(1, p.shape[1] + 1) - k_reg)
    out = np.empty_like(scores)
    np.put_along_axis(out, order, scores, axis=1)
    return out


def _uniforms(seed, n: int, which: int) -> np.ndarray:
    """u ~ U(0, 1) for n samples: stream ``which`` (0 the fit, 1 new samples) of ``seed``."""
    stream = np.random.SeedSequence(seed).spawn(2)[which]
    return np.random.default_rng(stream).random(n)


def _probabilities(scores, labels, input_kind, scores_name: str, labels_name: str):
    """(probabilities (N, K) float64, labels (N,) or None), validated as every command does."""
    from ..data.predictions import as_predictions
    from ..data.probabilities import to_probabilities

    array = scores if isinstance(scores, np.ndarray) else np.asarray(scores)
    if array.ndim == 0:
        raise InputError(f"{scores_name}: expected scores of shape (N, K) or (N,) for binary scores, got a scalar")
    placeholder = labels is None
    if placeholder:
        labels = np.zeros(array.shape[0], dtype=np.int64)
    predictions = as_predictions(array, labels, input_kind, scores_name=scores_name, labels_name=labels_name)
    p = to_probabilities(predictions.scores, predictions.input_kind)
    return p, None if placeholder else predictions.labels


@dataclass(frozen=True)
class ConformalFit:
    """A fitted split-conformal predictor (JSON: :meth:`to_dict` / :meth:`from_dict`, never pickle).

    method      lac, aps or raps; ``lam``, ``k_reg`` the RAPS penalty (0 otherwise)
    alpha       the miscoverage level α: sets cover the true label with probability ≥ 1 − α
    threshold   q̂; None when α < 1/(n + 1) (q̂ = +∞: every set is the full set)
    rank        ⌈(n + 1)(1 − α)⌉, the rank of q̂ among the n sorted calibration scores
    n, k        calibration samples and classes
    randomized  u ~ U(0, 1) in the aps/raps scores; ``seed`` their seed
    """

    method: str
    alpha: float
    threshold: float | None
    rank: int
    n: int
    k: int
    lam: float = 0.0
    k_reg: int = 0
    randomized: bool = False
    seed: int | None = None

    @property
    def full_sets(self) -> bool:
        return self.threshold is None

    @property
    def coverage_bounds(self) -> tuple[float, float]:
        """[1 − α, 1 − α + 1/(n + 1)]: the guaranteed range of the marginal coverage (the upper end
        for scores without ties), over draws of calibration and test data."""
        if self.full_sets:
            return 1.0, 1.0
        return 1.0 - self.alpha, min(1.0, 1.0 - self.alpha + 1.0 / (self.n + 1))

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "method": self.method,
            "alpha": self.alpha,
            "threshold": self.threshold,
            "rank": self.rank,
            "n": self.n,
            "k": self.k,
            "lam": self.lam,
            "k_reg": self.k_reg,
            "randomized": self.randomized,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, data, *, source: str = "the conformal fit") -> "ConformalFit":
        """Read back :meth:`to_dict`; anything else is an InputError naming ``source``."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"{source}: not a conformal fit (expected \"format\": \"{FORMAT}\")",
                             remedy="conformal-fit")
        if data.get("version") != FORMAT_VERSION:
            raise InputError(f"{source}: conformal fit version {data.get('version')!r}; this calib reads "
                             f"version {FORMAT_VERSION}")
        try:
            method = data["method"]
            lam, k_reg = _check_method(method, data["lam"], data["k_reg"], bool(data["randomized"]))
            threshold = data["threshold"]
            if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                          or not math.isfinite(threshold)):
                raise InputError("`threshold` must be a finite number or null")
            n, k, rank = data["n"], data["k"], data["rank"]
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, k, rank)) or n < 1 or k < 2:
                raise InputError("`n`, `k` and `rank` must be integers, n ≥ 1 and k ≥ 2")
            seed = data["seed"]
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
                raise InputError("`seed` must be an integer ≥ 0 or null")
            return cls(method=method, alpha=_check_alpha(data["alpha"]),
                       threshold=None if threshold is None else float(threshold), rank=rank, n=n, k=k,
                       lam=lam, k_reg=k_reg, randomized=bool(data["randomized"]), seed=seed)
        except KeyError as exc:
            raise InputError(f"{source}: the conformal fit has no {exc.args[0]!r}") from None
        except InputError as exc:
            raise InputError(f"{source}: {exc.message}") from None

    def scores(self, probs: np.ndarray, *, seed=None) -> np.ndarray:
        """s(x, y) of every label of new samples' probabilities (N, K); randomized scores draw u from
        stream 1 of ``seed`` (default: the fit's seed; the fit used stream 0)."""
        u = _uniforms(self.seed if seed is None else seed, probs.shape[0], 1) if self.randomized else None
        return label_scores(probs, self.method, lam=self.lam, k_reg=self.k_reg, u=u)


def fit_conformal(
    scores,
    labels,
    *,
    alpha: float = DEFAULT_ALPHA,
    method: str = "lac",
    input_kind=None,
    lam: float = DEFAULT_LAMBDA,
    k_reg: int = DEFAULT_K_REG,
    randomized: bool = False,
    seed: int | None = 0,
    scores_name: str = "scores",
    labels_name: str = "labels",
) -> ConformalFit:
    """Fit split conformal prediction on a calibration set: ``scores`` (N, K) logits (default) or
    probabilities (``input_kind="probs"``), or 1-D binary scores, and ``labels`` (N,) (see the module).

    >>> fit = fit_conformal([[0.7, 0.3], [0.4, 0.6], [0.9, 0.1], [0.2, 0.8]], [0, 0, 1, 1],
    ...                     alpha=0.4, input_kind="probs")     # LAC scores 0.3, 0.6, 0.9, 0.2
    >>> fit.rank, fit.threshold                                # ⌈5 · 0.6⌉ = 3rd smallest
    (3, 0.6)
    """
    alpha = _check_alpha(alpha)
    lam, k_reg = _check_method(method, lam, k_reg, randomized)
    if randomized and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise InputError(f"Expected `seed` to be an integer ≥ 0 for randomized scores, but got {seed!r}")
    p, y = _probabilities(scores, labels, input_kind, scores_name, labels_name)
    n, k = p.shape
    u = _uniforms(seed, n, 0) if randomized else None
    true_scores = np.take_along_axis(label_scores(p, method, lam=lam, k_reg=k_reg, u=u), y[:, None], axis=1)[:, 0]
    rank = conformal_quantile_rank(n, alpha)
    if rank > n:
        warnings.warn(CalibWarning(
            f"alpha = {alpha:g} is too small for {n} calibration samples (⌈(n + 1)(1 − α)⌉ = {rank} > n; "
            f"α ≥ 1/(n + 1) = {1 / (n + 1):.3g} is needed): every prediction set is the full set of {k} classes"
        ), stacklevel=2)
        threshold = None
    else:
        threshold = float(np.partition(true_scores, rank - 1)[rank - 1])
    return ConformalFit(method=method, alpha=alpha, threshold=threshold, rank=rank, n=n, k=k, lam=lam, k_reg=k_reg,
                        randomized=bool(randomized), seed=int(seed) if randomized else None)


def prediction_sets(fit: ConformalFit, scores, *, input_kind=None, seed=None,
                    scores_name: str = "scores") -> np.ndarray:
    """The prediction sets of new samples as a boolean mask (N, K): ``[i, y]`` is True when class y is
    in sample i's set, s(x_i, y) ≤ q̂. ``scores`` as for :func:`fit_conformal`, with the fit's K."""
    p, _ = _probabilities(scores, None, input_kind, scores_name, "labels")
    if p.shape[1] != fit.k:
        raise InputError(f"{scores_name}: K = {p.shape[1]} classes, but the conformal fit has K = {fit.k}")
    if fit.full_sets:
        return np.ones(p.shape, dtype=bool)
    return fit.scores(p, seed=seed) <= fit.threshold


@dataclass(frozen=True)
class ConformalCoverage:
    """How prediction sets did on labelled samples.

    coverage         share of samples whose set holds the true label (marginal coverage)
    class_coverage   per class y, the coverage among the samples of class y (None: no such sample)
    class_counts     samples per class
    mean_size        mean set size; ``size_histogram[s]`` the number of sets of size s, s = 0 … K
    """

    n: int
    k: int
    coverage: float
    class_coverage: tuple
    class_counts: tuple
    mean_size: float
    size_histogram: tuple

    @property
    def min_class_coverage(self) -> float | None:
        seen = [c for c in self.class_coverage if c is not None]
        return min(seen) if seen else None

    @property
    def empty_share(self) -> float:
        return self.size_histogram[0] / self.n

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "k": self.k,
            "coverage": self.coverage,
            "mean_size": self.mean_size,
            "empty_share": self.empty_share,
            "min_class_coverage": self.min_class_coverage,
            "class_coverage": list(self.class_coverage),
            "class_counts": list(self.class_counts),
            "size_histogram": list(self.size_histogram),
        }


def coverage_report(sets, labels) -> ConformalCoverage:
    """Marginal and class-conditional coverage and set sizes of ``sets`` (N, K) boolean against
    ``labels`` (N,) integers in [0, K)."""
    mask = np.asarray(sets)
    y = np.asarray(labels)
    if mask.ndim != 2 or mask.dtype != bool:
        raise InputError(f"Expected `sets` to be an (N, K) boolean mask, but got {mask.dtype} of shape {mask.shape}")
    n, k = mask.shape
    if n == 0:
        raise InputError("Expected at least one sample, but got N = 0")
    if y.shape != (n,) or y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= k:
        raise InputError(f"Expected `labels` to be {n} integers in [0, {k}), but got {y.dtype} of shape {y.shape}")
    covered = mask[np.arange(n), y]
    counts = np.bincount(y, minlength=k)
    hits = np.bincount(y, weights=covered.astype(np.float64), minlength=k)
    sizes = mask.sum(axis=1)
    return ConformalCoverage(
        n=n,
        k=k,
        coverage=float(np.count_nonzero(covered) / n),
        class_coverage=tuple(float(h / c) if c else None for h, c in zip(hits, counts)),
        class_counts=tuple(int(c) for c in counts),
        mean_size=float(sizes.sum(dtype=np.int64) / n),
        size_histogram=tuple(int(c) for c in np.bincount(sizes, minlength=k + 1)),
    )
