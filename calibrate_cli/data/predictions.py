"""Validated model outputs: scores (logits or probabilities) and integer labels (docs/conventions.md).

:func:`as_predictions` is the single entry point that checks every limit before any work starts
and turns the accepted input shapes into one canonical form:

- scores ``(N, K)`` logits or probabilities, or a 1-D binary score vector (log-odds, or p(class 1)
  with ``input_kind="probs"``), which becomes the two columns ``[0, s]`` (logits: softmax gives
  ``[1 − σ(s), σ(s)]``) or ``[1 − p, p]``;
- labels ``(N,)`` integers in [0, K), or one-hot ``(N, K)``; float labels must be whole numbers.

Scores keep their dtype (a memory-mapped float32 file is not copied); computations convert chunks.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from typing import Iterator, Literal

import numpy as np

from ..errors import Advice, CalibWarning, InputError
from .pages import release_rows

InputKind = Literal["logits", "probs"]
INPUT_KINDS = ("logits", "probs")
#: probability rows must sum to 1 within max(PROBS_SUM_TOLERANCE, 2·ε of the dtype the file stored)
PROBS_SUM_TOLERANCE = 1e-3
_CHUNK_ELEMENTS = 1 << 20  # ~8 MB of float64 per chunk (cache-friendly; chunks run in threads)


@dataclass(frozen=True)
class Predictions:
    """Scores ``(N, K)`` of kind ``input_kind`` and labels ``(N,)`` int64, already validated.

    ``pending``: the scores' values are still to be checked, row chunk by row chunk, by the one pass
    that reads them (:func:`~calibrate_cli.engine.summary.summarize`; ``as_predictions(check_values=False)``):
    a pass over the file fewer. None once checked."""

    scores: np.ndarray
    labels: np.ndarray
    input_kind: InputKind = "logits"
    pending: "ScoreCheck | None" = None

    @property
    def n(self) -> int:
        return int(self.scores.shape[0])

    @property
    def k(self) -> int:
        return int(self.scores.shape[1])

    def row_chunks(self, elements: int | None = None) -> Iterator[slice]:
        """Row slices of at most ``elements`` score values each (at least one row)."""
        yield from row_chunks(self.n, self.k, elements)

    def with_scores(self, scores: np.ndarray, *, scores_name: str = "scores") -> "Predictions":
        """The same (validated) labels with new scores of the same kind and shape as the original input,
        e.g. calibrated ones: only the new scores are checked (a 1-D binary vector becomes two columns)."""
        scores = scores if isinstance(scores, np.ndarray) else np.asarray(scores)
        check_scores(scores, scores_name, self.input_kind)
        if scores.ndim == 1:
            scores = _binary_columns(scores, self.input_kind)
        if scores.shape != self.scores.shape:
            raise InputError(f"{scores_name}: shape {scores.shape} does not match the labels' data {self.scores.shape}")
        return Predictions(scores=scores, labels=self.labels, input_kind=self.input_kind)

    def divided(self, t: float) -> "Predictions":
        """The same samples with logits ``scores / t`` (float64), divided as each row chunk is read
        (:class:`ScaledRows`): what evaluating ``with_scores(apply_temperature(scores, t))`` gives,
        bit for bit, without the (N, K) float64 array or its check. The caller has made sure that
        the quotients stay finite (:func:`check_scaled_range`)."""
        if self.input_kind != "logits":
            raise ValueError("only logits are divided by a temperature")
        if self.pending is not None:
            raise ValueError("these scores are not checked yet: summarize them first")
        return Predictions(scores=ScaledRows(self.scores, t), labels=self.labels, input_kind=self.input_kind)


class RowSlices:
    """An (N, K) array read a row slice at a time: ``rows[a:b]`` is :meth:`read` of that slice, and
    ``np.asarray(rows)`` reads it whole. Subclasses set ``shape`` and ``dtype`` and define ``read``."""

    ndim = 2

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        if not isinstance(rows, slice):
            raise TypeError(f"{type(self).__name__} is read by row slices")
        return self.read(rows)

    def read(self, rows: slice) -> np.ndarray:
        raise NotImplementedError

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self[0 : self.shape[0]]
        return whole if dtype is None else whole.astype(dtype, copy=False)


class ScaledRows(RowSlices):
    """``np.divide(base, t, dtype=float64)`` read a row chunk at a time: ``scaled[rows]`` is that
    quotient's rows bit for bit (the same float64 division per value), and no (N, K) float64 array
    is ever held. The scores of a temperature-scaled set, evaluated as they are read
    (:meth:`Predictions.divided`)."""

    dtype = np.dtype(np.float64)

    def __init__(self, base: np.ndarray, t: float) -> None:
        if base.ndim != 2:
            raise ValueError("ScaledRows needs (N, K) scores")
        self.base, self.t = base, float(t)
        self.shape = base.shape

    def read(self, rows: slice) -> np.ndarray:
        return np.divide(self.base[rows], self.t, dtype=np.float64)


class KeptRows(RowSlices):
    """The rows ``index`` (increasing) of ``base`` (an (N, K) array or row reader), read a row chunk at
    a time: ``kept[a:b]`` is ``base[index[a:b]]``, so a subset (a jackknife sample, the training folds
    of a cross-validation) holds no copy of the scores. ``dtype`` and ``stored_eps`` are the base's: its
    chunks are what it gives (float32 for bfloat16), and the probability-sum tolerance is unchanged."""

    def __init__(self, base, index: np.ndarray) -> None:
        self.base, self.index = base, index
        self.shape = (int(index.shape[0]), int(base.shape[1]))
        self.dtype = base.dtype
        self.stored_eps = getattr(base, "stored_eps", 0.0)

    def read(self, rows: slice) -> np.ndarray:
        index = self.index[rows]
        if index.shape[0] == 0:
            return np.asarray(self.base[0:0])
        first = int(index[0])  # the span of base rows that holds them, read by a slice (any row reader)
        return np.asarray(self.base[first : int(index[-1]) + 1])[index - first]


def row_array(scores):
    """``scores`` as an array read by row chunks: itself when it is an ndarray or a 2-D row reader
    (an object with ``dtype``, ``shape``, ``ndim``, row-slice indexing and ``read_into(rows, out)``:
    :class:`~calibrate_cli.data.arrays.BFloat16Rows`, whose values are widened a chunk at a time),
    else ``np.asarray(scores)``."""
    if isinstance(scores, np.ndarray) or (hasattr(scores, "read_into") and getattr(scores, "ndim", None) == 2):
        return scores
    return np.asarray(scores)


def row_chunks(n: int, k: int, elements: int | None = None) -> Iterator[slice]:
    """Row slices of at most ``elements`` (default ``_CHUNK_ELEMENTS``) values each, at least one row."""
    step = max(1, (_CHUNK_ELEMENTS if elements is None else elements) // max(k, 1))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


class _StoredPrecision(np.ndarray):
    """An array widened from a narrower float dtype numpy lacks (bfloat16): remembers that
    dtype's machine epsilon, so the probability-sum tolerance follows the stored precision."""

    stored_eps: float = 0.0

    def __array_finalize__(self, obj) -> None:
        self.stored_eps = getattr(obj, "stored_eps", 0.0)


def with_stored_precision(array: np.ndarray, *, eps: float) -> np.ndarray:
    """``array`` marked as stored with machine epsilon ``eps`` (e.g. bfloat16's 2⁻⁷ = 0.0078)."""
    out = np.asarray(array).view(_StoredPrecision)
    out.stored_eps = float(eps)
    return out


def probs_sum_tolerance(scores) -> float:
    """How far from 1 a probability row may sum: max(1e-3, 2·ε) with ε the machine epsilon of
    the stored dtype (float16: 2⁻¹⁰, bfloat16: 2⁻⁷), of a numpy array or a torch tensor. Rounding
    each of p_1..p_K to that dtype moves the sum by at most ε/2 · Σ p_k = ε/2; the factor 4 over
    that leaves room for the model's own rounding."""
    eps = float(getattr(scores, "stored_eps", 0.0))
    dtype = scores.dtype
    if isinstance(dtype, np.dtype):
        if dtype.kind == "f":
            eps = max(eps, float(np.finfo(dtype).eps))
    elif getattr(dtype, "is_floating_point", False):  # a torch dtype
        eps = max(eps, float(sys.modules["torch"].finfo(dtype).eps))
    return max(PROBS_SUM_TOLERANCE, 2.0 * eps)


def looks_like_probabilities(chunk, tolerance: float) -> bool:
    """Whether every value of a (rows, K) or (rows,) ``chunk`` (numpy array or torch tensor, on its
    device) lies in [0, 1 + tolerance] (False for NaN) and, for (rows, K), every row sums to 1 within
    ``tolerance`` (the sums in float64)."""
    if not (bool(chunk.min() >= 0) and bool(chunk.max() <= 1 + tolerance)):
        return False
    if chunk.ndim == 1:
        return True
    f64 = np.float64 if isinstance(chunk, np.ndarray) else sys.modules["torch"].float64
    return bool((abs(chunk.sum(1, dtype=f64) - 1.0) <= tolerance).all())


def _first_bad_row(mask_rows: np.ndarray) -> int:
    return int(np.flatnonzero(mask_rows)[0])


def _check_score_shape(scores: np.ndarray, name: str) -> None:
    if scores.dtype.kind not in "iuf":
        raise InputError(f"{name}: scores must be numbers, got dtype {scores.dtype}")
    if scores.ndim not in (1, 2):
        raise InputError(
            f"{name}: expected scores of shape (N, K) or (N,) for binary scores, got shape {scores.shape}"
        )
    if scores.shape[0] == 0:
        raise InputError(f"{name}: no samples (N = 0)")
    if scores.ndim == 2 and scores.shape[1] < 2:
        raise InputError(
            f"{name}: {scores.shape[1]} score column(s); need K ≥ 2 classes "
            "(give binary scores as a 1-D vector of log-odds, or of p(class 1) with --probs)"
        )


@dataclass(frozen=True)
class ScoreCheck:
    """The checks of the score values (finite; probabilities in [0, 1 + tolerance] with rows summing
    to 1 ± tolerance), made one row chunk at a time: by :func:`as_predictions`, or by the pass that
    reads the chunks anyway (``Predictions.pending``), which then reads the file once."""

    name: str
    input_kind: str
    tolerance: float

    def rows(self, chunk: np.ndarray, first_row: int) -> None:
        """Raise :class:`~calibrate_cli.errors.InputError` naming the first bad row (``first_row`` is
        the chunk's first row in the whole set) if ``chunk`` holds a bad value."""
        name, tolerance = self.name, self.tolerance
        # a first look says whether the chunk needs the exact per-row checks below: one min/max
        # reduction (numpy's SIMD loops, no temporaries; NaN propagates into both): ~10× cheaper than
        # isfinite + any
        lo, hi = (chunk.min(), chunk.max()) if chunk.size else (0, 0)
        suspect = not (np.isfinite(lo) and np.isfinite(hi))
        if self.input_kind == "probs":
            suspect = suspect or lo < 0 or hi > 1 + tolerance
        if chunk.dtype.kind == "f" and suspect:
            bad = ~np.isfinite(chunk)
            if bad.any():
                bad_rows = bad if chunk.ndim == 1 else bad.any(axis=1)
                row = first_row + _first_bad_row(bad_rows)
                what = "NaN" if np.isnan(chunk).any() else "Inf"
                raise InputError(f"{name}: scores contain {what} (first at row {row})")
        if self.input_kind == "probs":
            if suspect and ((chunk < 0).any() or (chunk > 1 + tolerance).any()):
                bad_rows = (chunk < 0) | (chunk > 1 + tolerance)
                bad_rows = bad_rows if chunk.ndim == 1 else bad_rows.any(axis=1)
                row = first_row + _first_bad_row(bad_rows)
                raise InputError(
                    f"{name}: probabilities outside [0, 1] (first at row {row}); "
                    "if these are logits, drop --probs"
                )
            if chunk.ndim == 2:
                sums = chunk.sum(axis=1, dtype=np.float64)
                off = np.abs(sums - 1.0) > tolerance
                if off.any():
                    row = first_row + _first_bad_row(off)
                    raise InputError(
                        f"{name}: probability rows must sum to 1 (±{tolerance:.3g}); row {row} sums to "
                        f"{sums[off][0]:.6g}; if these are logits, drop --probs"
                    )


def check_scores(scores: np.ndarray, name: str, input_kind: str, *, values: bool = True) -> ScoreCheck:
    """Check the scores' dtype and shape, then (``values``) their values in row chunks; returns the
    value check (for the caller to make later when ``values`` is False)."""
    _check_score_shape(scores, name)
    check = ScoreCheck(name, input_kind, probs_sum_tolerance(scores))
    if not values:
        return check
    k = scores.shape[1] if scores.ndim == 2 else 1
    previous = None
    for rows in row_chunks(scores.shape[0], k):
        if previous is not None:  # memory-mapped input: the pages of checked rows leave memory
            release_rows(scores, previous)
        previous = rows
        check.rows(scores[rows], rows.start)
    if previous is not None:
        release_rows(scores, previous)
    return check


def largest_magnitude(scores: np.ndarray) -> float:
    """max |x| over the finite entries of ``scores`` (0 when there are none), in row chunks.

    Each chunk costs one ``min()`` and one ``max()`` (SIMD reductions, no temporaries): max |x| =
    max(|min x|, |max x|) exactly when both are finite (and, for integers, after the same float64
    conversion, which is monotone). Only a chunk holding NaN or ±inf takes the slower path that
    drops its non-finite entries."""
    scores = row_array(scores)
    if scores.size == 0 or scores.dtype.kind not in "iuf":
        return 0.0
    k = scores.shape[1] if scores.ndim == 2 else 1
    peak = 0.0
    for rows in row_chunks(scores.shape[0], k):
        chunk = scores[rows]
        if chunk.size == 0:
            continue
        low, high = abs(float(chunk.min())), abs(float(chunk.max()))
        if np.isfinite(low) and np.isfinite(high):
            peak = max(peak, low, high)
            continue
        chunk = np.abs(np.asarray(chunk, dtype=np.float64))
        chunk = chunk[np.isfinite(chunk)]
        if chunk.size:
            peak = max(peak, float(chunk.max()))
    return peak


def check_scaled_range(
    scores: np.ndarray, temperature: float, *, scores_name: str = "logits", dtype=np.float64, why: str = ""
) -> None:
    """Refuse a temperature at which ``scores / T`` leaves the range of ``dtype``.

    An overflow to ±inf would make softmax NaN (inf − inf) and every metric meaningless, so the
    temperature is refused with the smallest usable T = max |x| / max(dtype). Dividing by T ≥ 1
    cannot overflow float64, so that case costs nothing.
    """
    limit = float(np.finfo(dtype).max)
    if temperature >= 1.0 and limit >= float(np.finfo(np.float64).max):
        return
    peak = largest_magnitude(scores)
    with np.errstate(over="ignore"):
        scaled = peak / temperature
    if scaled > limit:
        raise InputError(
            f"{scores_name}: at T = {temperature:.3g} the logits overflow: the largest |logit| {peak:.3g} becomes "
            f"{scaled:.3g}, beyond the {np.dtype(dtype).name} range (±{limit:.3g}){why}; the smallest usable T "
            f"is {peak / limit:.3g}"
        )


def check_nll_range(scores: np.ndarray, min_temperature: float, *, scores_name: str = "logits") -> None:
    """Refuse logits so large that the summed NLL of softmax(x / T) could overflow float64.

    Per sample, NLL = log Σ_k exp((x_k − x_y)/T) ≤ 2·max|x|/T + log K, so the sum over N samples
    stays finite when N·(2·max|x|/T + log K) < max(float64) (≈ 1.8e308): any real model passes.
    """
    scores = row_array(scores)
    n, k = scores.shape[0], (scores.shape[1] if scores.ndim == 2 else 2)
    peak = largest_magnitude(scores)
    limit = float(np.finfo(np.float64).max)
    with np.errstate(over="ignore"):
        bound = n * (2.0 * peak / min_temperature + float(np.log(k)))
    if not bound < limit:
        raise InputError(
            f"{scores_name}: logits as large as {peak:.3g} make the NLL overflow float64 at T = {min_temperature:.3g} "
            f"(N · 2·max|logit| / T ≈ {bound:.3g}); these cannot be a model's logits, or rescale them"
        )


def _binary_columns(scores: np.ndarray, input_kind: str) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    if input_kind == "probs":
        return np.stack([1.0 - s, s], axis=1)
    return np.stack([np.zeros_like(s), s], axis=1)


def _check_labels(labels: np.ndarray, name: str, k: int) -> np.ndarray:
    if labels.dtype.kind not in "iufb":
        raise InputError(f"{name}: labels must be integers, got dtype {labels.dtype}")
    if labels.ndim == 2:
        if labels.shape[1] != k:
            raise InputError(
                f"{name}: one-hot labels have {labels.shape[1]} columns but the scores have K = {k}"
            )
        onehot = labels.astype(np.float64)
        if not np.isin(onehot, (0.0, 1.0)).all() or not (onehot.sum(axis=1) == 1).all():
            bad = ~(np.isin(onehot, (0.0, 1.0)).all(axis=1) & (onehot.sum(axis=1) == 1))
            raise InputError(
                f"{name}: 2-D labels must be one-hot (one 1 per row, zeros elsewhere); "
                f"row {_first_bad_row(bad)} is not"
            )
        return onehot.argmax(axis=1).astype(np.int64)
    if labels.ndim != 1:
        raise InputError(f"{name}: expected labels of shape (N,) or one-hot (N, K), got shape {labels.shape}")
    # in row chunks (small temporaries; the pages of a memory-mapped file leave memory once checked)
    for rows in row_chunks(labels.shape[0], 1):
        chunk = labels[rows]
        if labels.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                bad = ~np.isfinite(chunk) | (chunk != np.round(chunk))
            if bad.any():
                row = rows.start + _first_bad_row(bad)
                raise InputError(f"{name}: labels must be whole numbers; row {row} is {float(labels[row])!r}")
        if _below(chunk, k):  # one reduction; the rows below only when a label is out of range
            release_rows(labels, rows)
            continue
        # compare in the labels' own dtype: a cast first would wrap 1e20 or 2**63 to a negative integer
        bad = (chunk < 0) | (chunk >= k)
        if bad.any():
            row = rows.start + _first_bad_row(bad)
            value = labels[row]
            shown = f"{value:g}" if labels.dtype.kind == "f" else str(value)
            raise InputError(
                f"{name}: label {shown} at row {row} is not a class index: out of range for K = {k} classes "
                f"(expected 0..{k - 1})"
            )
        release_rows(labels, rows)
    # int64 labels are used as given (no copy: at N = 10^7 a copy is 80 MB more at the peak)
    return labels.astype(np.int64, copy=False)


def _below(chunk: np.ndarray, k: int) -> bool:
    """Whether every integer label of ``chunk`` lies in [0, k), by one max: b-bit signed labels read as
    the unsigned integers of their size, where a negative one is ≥ 2^(b−1) (two's complement), so
    ≥ k when k ≤ 2^(b−1) (for a larger k, a min as well)."""
    if chunk.dtype.kind not in "iub" or chunk.size == 0:
        return False
    if chunk.dtype.kind == "i":
        if k > 2 ** (8 * chunk.dtype.itemsize - 1):
            return int(chunk.min()) >= 0 and int(chunk.max()) < k
        chunk = chunk.view(np.dtype(f"{chunk.dtype.byteorder}u{chunk.dtype.itemsize}"))
    return int(chunk.max()) < k


#: rows of a 2-D labels array looked at to tell scores from one-hot labels (enough, and cheap on a memmap)
_SWAP_PROBE_ROWS = 1024


def _check_not_swapped(scores: np.ndarray, labels: np.ndarray, scores_name: str, labels_name: str) -> None:
    """Refuse the likely swap of the two inputs: 1-D whole-number "scores" and 2-D float "labels" that are
    not one-hot (a label vector and a score matrix given in the wrong order).

    Without this check the label vector would be read as binary log-odds (K = 2) and the error would
    be about the labels' column count, which misleads. Only the first rows of the labels are looked at.
    """
    if scores.ndim != 1 or labels.ndim != 2 or labels.shape[1] < 2 or labels.dtype.kind != "f":
        return
    if scores.dtype.kind == "f":
        finite = np.isfinite(scores)
        if not finite.all() or (scores != np.round(scores)).any():
            return
    elif scores.dtype.kind not in "iu":
        return
    head = np.asarray(labels[:_SWAP_PROBE_ROWS], dtype=np.float64)
    if np.isin(head, (0.0, 1.0)).all():
        return  # one-hot rows: genuinely labels
    raise InputError(
        f"{scores_name} looks like labels (a vector of whole numbers) and {labels_name} like scores "
        f"(a {labels.shape[0]} × {labels.shape[1]} array of non-integer values): "
        "are the scores and the labels given in the wrong order?"
    )


def resolve_input_kind(scores, input_kind: InputKind | None, scores_name: str = "scores") -> InputKind:
    """``input_kind`` when stated; else "logits", after refusing (N, K) scores (numpy, a row reader or
    a torch tensor on its device) that look like probabilities (:func:`looks_like_probabilities`:
    softmax of them would be a silent wrong number) and warning (:class:`~calibrate_cli.errors.CalibWarning`)
    about 1-D scores in [0, 1].

    The scan stops at the first row chunk that cannot be probabilities (for logits, nearly always the
    first)."""
    if input_kind is not None:
        return input_kind
    on_device = type(scores).__module__.startswith("torch")  # a torch tensor, read where it lies
    scores = scores if on_device else row_array(scores)
    if scores.ndim not in (1, 2) or scores.shape[0] == 0 or (not on_device and scores.dtype.kind not in "iufb"):
        return "logits"  # the shape checks say what is wrong
    tolerance = probs_sum_tolerance(scores)
    k = scores.shape[1] if scores.ndim == 2 else 1
    for rows in row_chunks(scores.shape[0], k):
        if not looks_like_probabilities(scores[rows], tolerance):
            return "logits"
    if scores.ndim == 2:
        raise InputError(f"{scores_name}: every row lies in [0, 1] and sums to 1: these look like probabilities, not "
                         "logits (softmax would be taken of them)", remedy="probs-or-logits")
    warnings.warn(CalibWarning(Advice(f"{scores_name}: every score lies in [0, 1]; taken as log-odds of class 1; "
                                      "if they are p(class 1)", remedy="probs")), stacklevel=2)
    return "logits"


def as_predictions(
    scores: np.ndarray,
    labels: np.ndarray,
    input_kind: InputKind | None = None,
    *,
    scores_name: str = "scores",
    labels_name: str = "labels",
    check_values: bool = True,
) -> Predictions:
    """Validate ``scores`` and ``labels`` (docs/conventions.md) and return them in canonical form.

    Raises :class:`~calibrate_cli.errors.InputError` with a one-line message naming the input
    (``scores_name`` / ``labels_name``, e.g. the file paths) for every problem: wrong ndim, N = 0,
    K < 2, NaN/Inf, probabilities that are negative or whose rows don't sum to 1, labels that are
    not whole numbers, out of range or of a different N than the scores, and scores and labels that
    look given in the wrong order (1-D whole numbers as scores, a 2-D float non-one-hot array as labels).

    ``input_kind``: ``"logits"`` or ``"probs"``. None (not stated) takes the scores as logits, but
    refuses (N, K) scores that look like probabilities (every value in [0, 1], every row summing to 1)
    and warns (:class:`~calibrate_cli.errors.CalibWarning`) about 1-D scores in [0, 1].

    Already validated :class:`Predictions` (with ``labels`` None) are returned as they are: data are
    validated once, however many computations use them.

    ``check_values=False``: the values of (N, K) scores are left to the pass that reads them next
    (``Predictions.pending``, checked by :func:`~calibrate_cli.engine.summary.summarize` chunk by chunk, with
    the same errors): for a caller that summarizes right away, so a memory-mapped file is read once.
    """
    if isinstance(input_kind, bool) or (input_kind is not None and input_kind not in INPUT_KINDS):
        raise InputError(f"Expected `input_kind` to be one of {INPUT_KINDS}, but got {input_kind!r}")
    if isinstance(scores, Predictions) and labels is None:
        if input_kind is not None and scores.input_kind != input_kind:
            raise InputError(f"{scores_name}: validated as {scores.input_kind}, but used as {input_kind}")
        return scores
    scores = row_array(scores)  # a row reader (bfloat16) stays one: read chunk by chunk
    labels = labels if isinstance(labels, np.ndarray) else np.asarray(labels)
    _check_not_swapped(scores, labels, scores_name, labels_name)
    stated, input_kind = input_kind, input_kind or "logits"
    defer = not check_values and scores.ndim == 2  # binary scores (N,) become float64 columns: checked now
    check = check_scores(scores, scores_name, input_kind, values=not defer)
    if labels.ndim >= 1 and labels.shape[0] != scores.shape[0]:
        raise InputError(
            f"{labels_name}: {labels.shape[0]} labels but {scores_name} has {scores.shape[0]} rows of scores"
        )
    labels = _check_labels(labels, labels_name, scores.shape[1] if scores.ndim == 2 else 2)
    input_kind = resolve_input_kind(scores, stated, scores_name)  # the input is sound: what is it?
    if isinstance(scores, _StoredPrecision):
        scores = scores.view(np.ndarray)  # checked: downstream code sees a plain array
    if scores.ndim == 1:
        scores = _binary_columns(scores, input_kind)
    return Predictions(scores=scores, labels=labels, input_kind=input_kind, pending=check if defer else None)
