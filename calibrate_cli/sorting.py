"""One sort of the top-label confidences that serves AdaECE, KS-CE and SmoothECE, and a streaming
sum equal to ``np.sum`` of an array that is never held whole.

:func:`sort_by_confidence` sorts the N (conf_i, correct_i) pairs by confidence with one unstable
int64 sort of packed keys: a confidence in [0, 2) is a non-negative float64 whose two top bits
(sign and exponent MSB) are 0, so its bit pattern read as an integer is monotone in its value and
``key = bits << 1 | correct`` holds both, sorted by confidence (ties: incorrect before correct).
numpy sorts int64 with SIMD (x86-simd-sort): ~10× faster than the stable ``argsort`` it replaces,
and no (N,) index array or gathered copies are made. The order within a run of equal confidences
is irrelevant to every consumer: AdaECE's edges read order statistics (values only), KS-CE is
evaluated at the end of each run of ties, SmoothECE adds each sample's share to grid nodes.

:class:`PairwiseSum` reproduces numpy's pairwise summation (``pairwise_sum`` in
numpy/_core/src/umath/loops_utils.h.src: blocks of ≤ 128 values summed with 8 accumulators, longer
ranges split at n2 = ⌊n/2⌋ − (⌊n/2⌋ mod 8)) for a length-N array fed in consecutive pieces of any
size: the result is bit-identical to ``np.sum`` of the whole array (which for a contiguous float64
array is one pairwise sum over all N values), whatever the pieces.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sort_by_confidence", "ks_from_sorted", "PairwiseSum"]

#: samples per piece in the chunked passes over sorted samples (bounded temporaries)
PIECE = 1 << 18


def sort_by_confidence(conf: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(conf ascending as float64, correct in the same order as bool): one packed int64 sort.

    Confidences outside [0, 2) (never the case for probabilities; kept for safety) fall back to a
    stable argsort."""
    conf64 = np.asarray(conf, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    if conf64.shape[0] == 0 or not (conf64.min() >= 0.0 and conf64.max() < 2.0):
        order = np.argsort(conf64, kind="stable")
        return conf64[order], correct[order]
    keys = conf64.view(np.int64) << 1  # a new array: conf is untouched
    keys |= correct
    keys.sort()
    low_bytes = keys.view(np.uint8)[:: keys.itemsize]  # a strided view of each key's least significant byte
    if keys.dtype.byteorder == ">" or (keys.dtype.byteorder == "=" and np.little_endian is False):
        low_bytes = keys.view(np.uint8)[keys.itemsize - 1 :: keys.itemsize]  # pragma: no cover - big-endian
    correct_sorted = (low_bytes & 1).view(bool)  # (N,) bytes, no (N,) int64 temporary
    keys >>= 1
    return keys.view(np.float64), correct_sorted


def ks_from_sorted(conf: np.ndarray, correct: np.ndarray) -> float:
    """max_t |Σ_{conf_i ≤ t} (conf_i − correct_i)| / N over the sorted samples, evaluated at the end
    of each run of equal confidences. The prefix sum is ``np.cumsum`` (sequential) taken piece by
    piece with the carry added to each piece's first term, so it equals one cumsum over all N."""
    n = conf.shape[0]
    best, carry = 0.0, 0.0
    for start in range(0, n, PIECE):
        stop = min(n, start + PIECE)
        d = conf[start:stop] - correct[start:stop]
        d[0] += carry
        np.cumsum(d, out=d)
        carry = float(d[-1])
        last = np.empty(stop - start, dtype=bool)
        np.not_equal(conf[start : stop - 1], conf[start + 1 : stop], out=last[:-1])
        last[-1] = stop == n or conf[stop - 1] != conf[stop]
        if last.any():
            best = max(best, float(np.abs(d[last]).max()))
    return best / n


# ------------------------------------------------------------------ numpy's pairwise sum, streamed

#: subtrees of at most this many values are summed by ``np.sum`` of their range (the same pairwise
#: recursion, in C); only the few levels above them are combined here
_SUBTREE = 1 << 16


def _split(m: int) -> int:
    """numpy's split of a range of m > 128 values: n2 = ⌊m/2⌋ − (⌊m/2⌋ mod 8)."""
    n2 = m // 2
    return n2 - n2 % 8


def _leaves(n: int) -> list[int]:
    """The lengths, in order, of the ranges of ≤ :data:`_SUBTREE` values at which numpy's recursion
    over n values stops being split here."""
    out: list[int] = []
    stack = [n]
    while stack:
        m = stack.pop()
        if m <= _SUBTREE:
            out.append(m)
            continue
        n2 = _split(m)
        stack.append(m - n2)
        stack.append(n2)
    return out


class PairwiseSum:
    """``np.sum`` (float64) of an n-value array that arrives in consecutive pieces (:meth:`add`):
    bit-identical to summing the whole array, independent of the pieces' sizes.

    numpy sums a contiguous float64 array as pw(n) = pw(n2) + pw(n − n2) down to blocks of 128; a
    range of m ≤ 2¹⁶ values is summed here by ``np.sum`` of that range (which is pw(m)), and those
    partial sums are combined along the same recursion."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._lengths = _leaves(n) if n > 0 else []
        self._sums: list[float] = []
        self._pending: list[np.ndarray] = []
        self._pending_size = 0
        self._seen = 0

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64).ravel()
        self._seen += values.shape[0]
        pos = 0
        while pos < values.shape[0]:
            need = self._lengths[len(self._sums)] - self._pending_size
            take = values[pos : pos + need]
            pos += take.shape[0]
            if take.shape[0] == need and not self._pending:
                with np.errstate(over="ignore"):  # an overflow to inf is the sum's value, as np.sum's
                    self._sums.append(float(np.sum(take)))
                continue
            self._pending.append(take.copy())
            self._pending_size += take.shape[0]
            if take.shape[0] == need:
                with np.errstate(over="ignore"):
                    self._sums.append(float(np.sum(np.concatenate(self._pending))))
                self._pending, self._pending_size = [], 0

    def total(self) -> float:
        """The sum of all n values (every value must have been added)."""
        if self._seen != self.n or self._pending:
            raise ValueError(f"PairwiseSum: {self._seen} of {self.n} values added")
        if self.n == 0:
            return 0.0
        leaves = iter(self._sums)
        stack: list[list] = [[self.n, 0, 0.0]]  # [m, stage, left sum]: numpy's recursion, unrolled
        ret = 0.0
        while stack:
            top = stack[-1]
            m, stage = top[0], top[1]
            if m <= _SUBTREE:
                ret = next(leaves)
                stack.pop()
            elif stage == 0:
                top[1] = 1
                stack.append([_split(m), 0, 0.0])
            elif stage == 1:
                top[1], top[2] = 2, ret
                stack.append([m - _split(m), 0, 0.0])
            else:
                with np.errstate(over="ignore"):
                    ret = float(np.float64(top[2]) + np.float64(ret))
                stack.pop()
        return float(ret)
