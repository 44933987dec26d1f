"""One sort of the top-label confidences that serves AdaECE, KS-CE and SmoothECE, and a streaming
sum equal to ``np.sum`` of an array that is never held whole.

:func:`sort_by_confidence` sorts the N (conf_i, correct_i) pairs by confidence with one unstable
int64 sort of packed keys: a confidence in [0, 2) is a non-negative float64 whose two top bits
(sign and exponent MSB) are 0, so its bit pattern read as an integer is monotone in its value and
``key = bits << 1 | correct`` holds both, sorted by confidence (ties: incorrect before correct).
numpy sorts int64 with SIMD (x86-simd-sort): far faster than the stable ``argsort`` it replaces,
and no (N,) index array or gathered copies are made. The order within a run of equal confidences
is irrelevant to every consumer: AdaECE's edges read order statistics (values only), KS-CE is
evaluated at the end of each run of ties, SmoothECE adds each sample's share to grid nodes. With
``in_place=True`` the keys are made in the confidences' own buffer (no (N,) int64 copy).

:func:`order_statistics` gives the few order statistics AdaECE's edges read (``np.sort(v)[r]`` for
given ranks r) without sorting or copying the N values: bucket counts over the values' range, then
only the values of the buckets that hold a wanted rank (exact, O(N), memory ∝ those buckets). The
one definition for numpy arrays and torch tensors (a GPU's confidences stay there).

:class:`PairwiseSum` reproduces numpy's pairwise summation (``pairwise_sum`` in
numpy/_core/src/umath/loops_utils.h.src: blocks of ≤ 128 values summed with 8 accumulators, longer
ranges split at n2 = ⌊n/2⌋ − (⌊n/2⌋ mod 8)) for a length-N array fed in consecutive pieces of any
size: the result is bit-identical to ``np.sum`` of the whole array (which for a contiguous float64
array is one pairwise sum over all N values), whatever the pieces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernels

__all__ = [
    "order_statistics",
    "sort_by_confidence",
    "pack_checked",
    "pack_keys",
    "packable",
    "sort_packed",
    "ks_from_sorted",
    "TIE_SLACK",
    "tie_tolerant",
    "run_ends",
    "PairwiseSum",
    "PairwisePieces",
    "distinct",
]

#: samples per piece in the chunked passes over sorted samples (bounded temporaries)
PIECE = 1 << 18
#: confidences this close to one another, relative, are one tie (:func:`tie_tolerant`)
TIE_SLACK = 2.0**-40


def tie_tolerant(values):
    """v + |v| · 2^-40 for each value v (numpy or torch): the largest a confidence may be and still tie with v.

    The confidences of one tie in exact arithmetic (rows equal but for the order of their classes, or
    computed by another engine) differ by rounding alone, a few ulps. The metrics that compare samples
    with one another take such values as equal, so that rounding cannot move them: an equal-mass edge,
    which stands on a sample's confidence, is compared as raised by this (the whole tie in the bin
    below it), and KS-CE's runs of ties are cut only where the next value lies beyond it
    (:func:`run_ends`). 2^-40 is below the numeric contract's 1e-12."""
    return values + abs(values) * TIE_SLACK


def run_ends(sorted_values: np.ndarray) -> np.ndarray:
    """The last sample of each run of ties (:func:`tie_tolerant`) of ascending ``sorted_values``, as a mask."""
    return np.append(sorted_values[1:] > tie_tolerant(sorted_values[:-1]), True)


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-D array without NaN: its distinct values, ascending. (np.unique's
    first call imports numpy.ma, which a `calib eval` process that needs a few small sets can skip.)"""
    ordered = np.sort(np.asarray(values).ravel())
    if ordered.shape[0] < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def sort_by_confidence(conf: np.ndarray, correct: np.ndarray, *, in_place: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(conf ascending as float64, correct in the same order as bool): one packed int64 sort.

    ``in_place``: the keys are made and sorted in ``conf``'s own buffer (a writeable C-contiguous
    float64 array), which then holds the sorted confidences: no (N,) int64 copy; ``correct`` is
    untouched. Confidences outside [0, 2) (never the case for probabilities; kept for safety) fall
    back to a stable argsort (and a copy)."""
    conf64 = np.asarray(conf, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    if conf64.shape[0] == 0 or not packable(conf64):
        order = np.argsort(conf64, kind="stable")
        return conf64[order], correct[order]
    if in_place:
        if conf64 is not conf or not conf64.flags.c_contiguous or not conf64.flags.writeable:
            raise ValueError("in_place needs a writeable C-contiguous float64 array")
        keys = conf64.view(np.int64)
    else:
        keys = np.empty(conf64.shape[0], dtype=np.int64)  # conf is untouched
    pack_keys(conf64, correct, keys)
    return sort_packed(keys)


def packable(conf: np.ndarray) -> bool:
    """Whether the float64 confidences lie in [0, 2), where :func:`pack_keys` orders them."""
    return bool(conf.min() >= 0.0 and conf.max() < 2.0)


def pack_keys(conf: np.ndarray, correct: np.ndarray, out: np.ndarray) -> None:
    """``out = bits(conf) << 1 | correct`` (int64; ``out`` may be ``conf``'s own buffer): for float64
    confidences in [0, 2) (:func:`packable`) the keys sort as (conf, correct)."""
    np.left_shift(conf.view(np.int64), 1, out=out)
    out |= correct


def pack_checked(conf: np.ndarray, correct: np.ndarray, out: np.ndarray) -> bool:
    """:func:`pack_keys` into ``out`` if every confidence is :func:`packable` (True); else False, with
    ``out`` partly written (numpy's min, max, shift and or)."""
    if conf.shape[0] and not packable(conf):
        return False
    pack_keys(conf, correct, out)
    return True


def sort_packed(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort the keys of :func:`pack_keys` in place; (conf ascending as a float64 view of their buffer,
    correct in that order as bool): numpy's shift and a strided view of each key's low byte."""
    keys.sort()
    low_bytes = keys.view(np.uint8)[:: keys.itemsize]  # a strided view of each key's least significant byte
    if keys.dtype.byteorder == ">" or (keys.dtype.byteorder == "=" and np.little_endian is False):
        low_bytes = keys.view(np.uint8)[keys.itemsize - 1 :: keys.itemsize]  # pragma: no cover - big-endian
    correct_sorted = (low_bytes & 1).view(bool)  # (N,) bytes, no (N,) int64 temporary
    keys >>= 1
    return keys.view(np.float64), correct_sorted


#: buckets per counting pass of :func:`order_statistics`, and the most values it gathers to sort
SELECT_BUCKETS, SELECT_GATHER = 1 << 16, 1 << 20
#: values per piece of a selection pass over a torch tensor (bounded temporaries on the device)
DEVICE_PIECE = 1 << 24


def order_statistics(values, ranks) -> np.ndarray:
    """``np.sort(values)[ranks]`` (finite values; ranks in [0, N)), exactly, without sorting or
    copying the N values: the selection AdaECE's edges need
    (:func:`~calibrate_cli.engine.binning.equal_mass_edges_of`). ``values``: a numpy array, or a torch
    tensor, selected where it lives (only the wanted values come back, as float64 numpy).

    A set of values is kept as the closed range [lo, hi] of its smallest and largest member (every
    value in that range is a member) and the number of values below it. A pass counts the members
    per bucket b = min(⌊(v − lo)·B/(hi − lo)⌋, B − 1) (B = :data:`SELECT_BUCKETS`), non-decreasing in
    v, so each bucket's members are again a closed range of values, all above the previous buckets'.
    A second pass gathers the members of the buckets that hold wanted ranks (up to
    :data:`SELECT_GATHER` values, sorted: sorting them by value orders them by bucket too) and finds
    the smallest and largest member of the others, which become the next sets, until a set holds
    one value. The passes read the values in pieces (:data:`PIECE`; :data:`DEVICE_PIECE` for a
    tensor)."""
    xp = _namespace_of(values)
    values = np.asarray(values, dtype=np.float64) if xp is np else values.to(xp.float64)
    n = values.shape[0]
    ranks = np.asarray(ranks, dtype=np.int64)
    if ranks.shape[0] == 0:
        return np.empty(0, dtype=np.float64)
    if n == 0 or ranks.min() < 0 or ranks.max() >= n:
        raise ValueError(f"ranks must lie in [0, {n})")
    every = distinct(ranks)
    found = np.empty(every.shape[0], dtype=np.float64)  # the value of each distinct wanted rank
    passes = _Passes(xp, values)
    sets = [(*passes.extrema(), 0, n, every)]  # (lo, hi, below, size, wanted ranks)
    while sets:
        lo, hi, below, size, wanted = sets.pop()
        scale = SELECT_BUCKETS / (hi - lo) if hi > lo else np.inf
        if lo == hi:  # one value
            found[np.searchsorted(every, wanted)] = lo
            continue
        if not (np.isfinite(scale) and np.isfinite(hi - lo)):  # too narrow (or wide) to split: sorted whole
            found[np.searchsorted(every, wanted)] = passes.sorted_at(passes.members(lo, hi, size), wanted - below)
            continue
        count = passes.count(lo, hi, scale, size)
        ends = np.cumsum(count)
        buckets = np.searchsorted(ends, wanted - below, side="right")
        chosen = distinct(buckets)
        by_size = chosen[np.argsort(count[chosen], kind="stable")]
        small = by_size[np.cumsum(count[by_size]) <= SELECT_GATHER]  # gathered now
        is_small = np.zeros(SELECT_BUCKETS, dtype=bool)
        is_small[small] = True
        big = chosen[~is_small[chosen]]  # split again: their smallest and largest members found now
        is_big = np.zeros(SELECT_BUCKETS, dtype=bool)
        is_big[big] = True
        gathered, low, high = passes.gather(lo, hi, scale, size, is_small, is_big)
        firsts = below + ends - count  # the rank of each bucket's first member
        if small.shape[0]:
            offset = np.cumsum(np.where(is_small, count, 0)) - count  # gathered members of earlier buckets
            mine = is_small[buckets]
            at = offset[buckets[mine]] + wanted[mine] - firsts[buckets[mine]]
            found[np.searchsorted(every, wanted[mine])] = passes.sorted_at(gathered, at)
        for bk in big:
            sets.append((float(low[bk]), float(high[bk]), int(firsts[bk]), int(count[bk]), wanted[buckets == bk]))
    return found[np.searchsorted(every, ranks)]


def _namespace_of(values):
    """numpy, or torch for a torch tensor (an array with a ``device``, as binning.assign_bins reads it)."""
    if not isinstance(values, np.ndarray) and hasattr(values, "device"):
        import torch

        return torch
    return np


class _Passes:
    """The passes of :func:`order_statistics` over ``values`` in the array module ``xp`` (numpy or
    torch): the same steps for both, a few calls spelled per module."""

    def __init__(self, xp, values) -> None:
        self.xp, self.values = xp, values
        self.piece = PIECE if xp is np else DEVICE_PIECE

    def extrema(self) -> tuple[float, float]:
        if self.xp is np:
            return float(self.values.min()), float(self.values.max())
        lo, hi = self.xp.aminmax(self.values)
        return float(lo), float(hi)

    def pieces(self, lo: float, hi: float, size: int):
        """The members of [lo, hi] of consecutive pieces of the values (every value when the set holds all)."""
        values = self.values
        for start in range(0, values.shape[0], self.piece):
            piece = values[start : start + self.piece]
            yield piece if size == values.shape[0] else piece[(piece >= lo) & (piece <= hi)]

    def buckets(self, piece, lo: float, scale: float):
        """⌊(v − lo)·scale⌋ clipped to the last bucket: non-decreasing in v (each step rounds monotonically)."""
        if self.xp is np:
            b = ((piece - lo) * scale).astype(np.int64)
            return np.minimum(b, SELECT_BUCKETS - 1, out=b)
        return (piece - lo).mul_(scale).to(self.xp.int64).clamp_(max=SELECT_BUCKETS - 1)

    def count(self, lo: float, hi: float, scale: float, size: int) -> np.ndarray:
        """The number of members of [lo, hi] per bucket (int64, on the host)."""
        count = np.zeros(SELECT_BUCKETS, dtype=np.int64)
        for piece in self.pieces(lo, hi, size):
            count += self.host(self.xp.bincount(self.buckets(piece, lo, scale), minlength=SELECT_BUCKETS))
        return count

    def gather(self, lo: float, hi: float, scale: float, size: int, is_small, is_big):
        """(the members of the ``is_small`` buckets, unsorted, in the module's arrays; the smallest and
        the largest member of each ``is_big`` bucket, on the host)."""
        xp = self.xp
        low, high = np.full(SELECT_BUCKETS, np.inf), np.full(SELECT_BUCKETS, -np.inf)
        gather_any, span_any = bool(is_small.any()), bool(is_big.any())
        if xp is not np:
            is_small, is_big, low, high = (xp.as_tensor(a, device=self.values.device) for a in (is_small, is_big, low, high))
        parts = []
        for piece in self.pieces(lo, hi, size):
            b = self.buckets(piece, lo, scale)
            if gather_any:
                parts.append(piece[is_small[b]])
            if span_any:
                hit = is_big[b]
                if xp is np:
                    np.minimum.at(low, b[hit], piece[hit])
                    np.maximum.at(high, b[hit], piece[hit])
                else:
                    low.scatter_reduce_(0, b[hit], piece[hit], reduce="amin")
                    high.scatter_reduce_(0, b[hit], piece[hit], reduce="amax")
        return self.concat(parts) if parts else None, self.host(low), self.host(high)

    def members(self, lo: float, hi: float, size: int):
        """Every member of [lo, hi] (a set too narrow to split)."""
        return self.concat(list(self.pieces(lo, hi, size)))

    def concat(self, parts):
        return np.concatenate(parts) if self.xp is np else self.xp.cat(parts)

    def sorted_at(self, members, positions: np.ndarray) -> np.ndarray:
        """``sort(members)[positions]``, on the host."""
        if self.xp is np:
            return np.sort(members)[positions]
        return self.host(self.xp.sort(members).values[self.xp.as_tensor(positions, device=members.device)])

    def host(self, x) -> np.ndarray:
        return x if self.xp is np else x.cpu().numpy()


def ks_from_sorted(conf: np.ndarray, correct: np.ndarray) -> float:
    """max_t |Σ_{conf_i ≤ t} (conf_i − correct_i)| / N over the sorted samples, evaluated at the end
    of each run of ties (:func:`run_ends`). The prefix sum is ``np.cumsum`` (sequential) taken piece by
    piece with the carry added to each piece's first term, so it equals one cumsum over all N; with the
    C extension, :func:`~calibrate_cli.engine.kernels.ks_sorted` makes the same sum in one pass."""
    n = conf.shape[0]
    if n and kernels.use():
        return kernels.ks_sorted(conf, correct, TIE_SLACK) / n
    best, carry = 0.0, 0.0
    for start in range(0, n, PIECE):
        stop = min(n, start + PIECE)
        d = conf[start:stop] - correct[start:stop]
        d[0] += carry
        np.cumsum(d, out=d)
        carry = float(d[-1])
        last = np.empty(stop - start, dtype=bool)
        np.greater(conf[start + 1 : stop], tie_tolerant(conf[start : stop - 1]), out=last[:-1])
        last[-1] = stop == n or conf[stop] > tie_tolerant(conf[stop - 1])
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


@dataclass(frozen=True)
class PairwisePieces:
    """A piece of the values [start, start + len) made ready for :meth:`PairwiseSum.add_pieces`: ``head``
    continues the block in progress (and ends it when ``closed``), ``sums`` are the sums of the whole
    blocks after it, ``tail`` begins the next block."""

    start: int
    size: int
    head: np.ndarray
    closed: bool
    sums: tuple[float, ...]
    tail: np.ndarray


class PairwiseSum:
    """``np.sum`` (float64) of an n-value array that arrives in consecutive pieces (:meth:`add`):
    bit-identical to summing the whole array, independent of the pieces' sizes.

    numpy sums a contiguous float64 array as pw(n) = pw(n2) + pw(n − n2) down to blocks of 128; a
    range of m ≤ 2¹⁶ values is summed here by ``np.sum`` of that range (which is pw(m)), and those
    partial sums are combined along the same recursion. :meth:`pieces` does the work of a piece
    (the sums of its whole ranges) on any thread, given where it starts; :meth:`add_pieces` then
    takes the pieces in order (cheap)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._lengths = _leaves(n) if n > 0 else []
        self._starts = np.concatenate([[0], np.cumsum(self._lengths, dtype=np.int64)]).astype(np.int64)
        self._sums: list[float] = []
        self._pending: list[np.ndarray] = []
        self._seen = 0

    def add(self, values: np.ndarray) -> None:
        self.add_pieces(self.pieces(values, self._seen))

    def pieces(self, values: np.ndarray, start: int) -> PairwisePieces:
        """``values`` (the values [start, start + len)) made ready: each range of numpy's recursion that
        lies wholly inside summed (``np.sum``), the parts of the ranges it shares with the values
        before or after it copied. Reads nothing but ``values``: any thread may make it."""
        values = np.asarray(values, dtype=np.float64).ravel()
        stop = start + values.shape[0]
        bounds = self._starts
        first = int(np.searchsorted(bounds, start, side="left"))  # the first range start ≥ start
        last = int(np.searchsorted(bounds, stop, side="right")) - 1  # the last range start ≤ stop
        if first > last:  # inside one range: all of it continues the range in progress
            return PairwisePieces(start, values.shape[0], values.copy(), False, (), values[:0])
        with np.errstate(over="ignore"):  # an overflow to inf is the sum's value, as np.sum's
            sums = tuple(float(np.sum(values[bounds[j] - start : bounds[j + 1] - start])) for j in range(first, last))
        return PairwisePieces(start, values.shape[0], values[: bounds[first] - start].copy(), True, sums,
                              values[bounds[last] - start :].copy())

    def add_pieces(self, pieces: PairwisePieces) -> None:
        """Add the next piece (made by :meth:`pieces` for the values right after those added so far)."""
        if pieces.start != self._seen:
            raise ValueError(f"PairwiseSum: a piece at {pieces.start}, but {self._seen} values were added")
        self._seen += pieces.size
        if pieces.head.shape[0]:
            self._pending.append(pieces.head)
        if pieces.closed:
            if self._pending:
                with np.errstate(over="ignore"):
                    self._sums.append(float(np.sum(np.concatenate(self._pending))))
            self._pending = [pieces.tail] if pieces.tail.shape[0] else []
            self._sums.extend(pieces.sums)

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
