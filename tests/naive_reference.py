"""Deliberately naive float64 reference implementation of the metrics of docs/metrics.md.

Written straight from the specification with plain Python loops (per sample, per bin) and the
``math`` module, so that it is an *independent* check of the vectorised package.  numpy is used
only to load/convert arrays to Python lists, plus the single ``np.interp`` line that *is* the
definition of the AdaECE edges, and the float32 arithmetic that the compat variants must emulate.

Conventions (docs/metrics.md):
  * ``probs``: list-of-lists or 2-D array of probabilities (N, K); ``labels``: ints of shape (N,).
  * Equal-width bins B_b = (b/M, (b+1)/M], edges computed as ``b / M`` in float64; a value of
    exactly 0 goes to bin 0, a value above 1 (float rounding) goes to the last bin.
  * AdaECE edges: ``np.interp(np.linspace(0, N, M+1), np.arange(N), np.sort(conf))``; bin 0 is the
    closed [e_0, e_1], bin b > 0 is (e_b, e_{b+1}]; a sample goes to the first bin containing it.

Compat variants (``*_compat``) reproduce torrvision/focal_calibration (Metrics/metrics.py) run
verbatim: float32 softmax, float32 confidences compared with float32 edges of
``torch.linspace(0, 1, M+1)``; AdaECE edges from np.interp over float32 confidences, rounded to
float32 and used as (lower, upper] for EVERY bin (so the minimum-confidence sample(s) fall in no bin,
while the denominator stays N); Classwise-ECE averages over classes 0..max(label) and a probability
of exactly 0 falls in no bin.  The compat functions take LOGITS (they include the float32 softmax).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "softmax_rows",
    "top_label",
    "equal_width_bin",
    "ece",
    "mce",
    "adaece",
    "adaece_edges",
    "classwise_ece",
    "nll",
    "nll_probs",
    "brier",
    "accuracy",
    "top5_accuracy",
    "mean_confidence",
    "s99",
    "softmax_f32",
    "torch_linspace_f32",
    "ece_compat",
    "adaece_compat",
    "classwise_ece_compat",
    "nll_compat",
    "entropy",
    "auroc_pairs",
]


# --------------------------------------------------------------------------- conversion helpers
def _rows(x):
    """2-D input -> list of lists of Python floats (float64)."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError("expected a 2-D (N, K) array, got ndim=%d" % arr.ndim)
    return arr.tolist()


def _labels(labels):
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError("expected 1-D labels")
    return [int(v) for v in arr.tolist()]


# --------------------------------------------------------------------------- basics
def softmax_rows(logits):
    """Stable float64 softmax, row by row, with plain loops."""
    out = []
    for row in _rows(logits):
        m = row[0]
        for v in row:
            if v > m:
                m = v
        exps = [math.exp(v - m) for v in row]
        s = 0.0
        for e in exps:
            s += e
        out.append([e / s for e in exps])
    return out


def top_label(probs):
    """(conf list, pred list); argmax takes the lowest index on ties."""
    confs, preds = [], []
    for row in _rows(probs):
        best_k, best = 0, row[0]
        for k in range(1, len(row)):
            if row[k] > best:  # strict: ties keep the lower index
                best_k, best = k, row[k]
        confs.append(best)
        preds.append(best_k)
    return confs, preds


def equal_width_bin(value, n_bins=15):
    """Index of the equal-width bin (b/M, (b+1)/M] that holds ``value``."""
    M = n_bins
    for b in range(M):
        lower = b / M
        upper = (b + 1) / M
        if lower < value <= upper:
            return b
    if value <= 0.0:
        return 0  # exactly 0 (only possible for class-wise scores) -> bin 0
    return M - 1  # above 1 by float rounding -> last bin


def _weighted_gap_sum(assign, values, targets, n_bins, n_total):
    """Σ_b |B_b|/N · |mean target − mean value| over non-empty bins, plus per-bin gaps."""
    count = [0] * n_bins
    sum_v = [0.0] * n_bins
    sum_t = [0.0] * n_bins
    for b, v, t in zip(assign, values, targets):
        count[b] += 1
        sum_v[b] += v
        sum_t[b] += t
    total = 0.0
    gaps = []
    for b in range(n_bins):
        if count[b] == 0:
            continue
        gap = abs(sum_t[b] / count[b] - sum_v[b] / count[b])
        gaps.append(gap)
        total += count[b] / n_total * gap
    return total, gaps


def _conf_correct(probs, labels):
    confs, preds = top_label(probs)
    labs = _labels(labels)
    if len(labs) != len(confs):
        raise ValueError("N mismatch")
    correct = [1.0 if p == y else 0.0 for p, y in zip(preds, labs)]
    return confs, correct


# --------------------------------------------------------------------------- calibration errors
def ece(probs, labels, n_bins=15):
    confs, correct = _conf_correct(probs, labels)
    assign = [equal_width_bin(c, n_bins) for c in confs]
    return _weighted_gap_sum(assign, confs, correct, n_bins, len(confs))[0]


def mce(probs, labels, n_bins=15):
    confs, correct = _conf_correct(probs, labels)
    assign = [equal_width_bin(c, n_bins) for c in confs]
    gaps = _weighted_gap_sum(assign, confs, correct, n_bins, len(confs))[1]
    worst = 0.0
    for g in gaps:
        if g > worst:
            worst = g
    return worst


def adaece_edges(confs, n_bins=15):
    n = len(confs)
    # The definition (docs/metrics.md / reference code), the one numpy line allowed here.
    edges = np.interp(np.linspace(0, n, n_bins + 1), np.arange(n), np.sort(np.asarray(confs, dtype=np.float64)))
    return [float(e) for e in edges.tolist()]


#: a confidence at most this far above another, relative to it, ties with it (docs/metrics.md)
TIE_SLACK = 2.0**-40


def adaece(probs, labels, n_bins=15):
    confs, correct = _conf_correct(probs, labels)
    # each edge compared as raised by 2^-40 of itself: a tie split by rounding stays in the bin below
    e = [edge + abs(edge) * TIE_SLACK for edge in adaece_edges(confs, n_bins)]
    assign = []
    for c in confs:
        found = None
        for b in range(n_bins):
            if b == 0:
                inside = c <= e[1]  # closed first bin (e_0 is the minimum): the minimum IS counted
            else:
                inside = e[b] < c <= e[b + 1]
            if inside:
                found = b
                break
        if found is None:  # cannot happen: e_0 = min, e_M = max
            raise AssertionError("confidence %r outside the equal-mass edges" % c)
        assign.append(found)
    return _weighted_gap_sum(assign, confs, correct, n_bins, len(confs))[0]


def classwise_ece(probs, labels, n_bins=15):
    rows = _rows(probs)
    labs = _labels(labels)
    n = len(rows)
    k_cols = len(rows[0])
    total = 0.0
    for k in range(k_cols):
        values = [row[k] for row in rows]
        targets = [1.0 if y == k else 0.0 for y in labs]
        assign = [equal_width_bin(v, n_bins) for v in values]
        total += _weighted_gap_sum(assign, values, targets, n_bins, n)[0]
    return total / k_cols


# --------------------------------------------------------------------------- other metrics
def nll(logits, labels):
    """Mean of −log_softmax(logits)[y] in float64 via log-sum-exp."""
    rows = _rows(logits)
    labs = _labels(labels)
    total = 0.0
    for row, y in zip(rows, labs):
        m = max(row)
        s = 0.0
        for v in row:
            s += math.exp(v - m)
        total += m + math.log(s) - row[y]
    return total / len(rows)


def nll_probs(probs, labels):
    """Mean of −log p_{i,y_i}; a true-class probability of exactly 0 gives inf."""
    rows = _rows(probs)
    labs = _labels(labels)
    total = 0.0
    for row, y in zip(rows, labs):
        p = row[y]
        if p <= 0.0:
            return math.inf
        total += -math.log(p)
    return total / len(rows)


def brier(probs, labels):
    rows = _rows(probs)
    labs = _labels(labels)
    total = 0.0
    for row, y in zip(rows, labs):
        s = 0.0
        for k, p in enumerate(row):
            d = p - (1.0 if k == y else 0.0)
            s += d * d
        total += s
    return total / len(rows)


def accuracy(probs, labels):
    confs, correct = _conf_correct(probs, labels)
    return sum(correct) / len(correct)


def top5_accuracy(probs, labels):
    rows = _rows(probs)
    labs = _labels(labels)
    hits = 0
    for row, y in zip(rows, labs):
        py = row[y]
        rank = 0
        for k, p in enumerate(row):
            if p > py or (k < y and p == py):
                rank += 1
        if rank < 5:
            hits += 1
    return hits / len(rows)


def mean_confidence(probs):
    confs, _ = top_label(probs)
    s = 0.0
    for c in confs:
        s += c
    return s / len(confs)


def s99(probs, labels):
    """(share of samples with conf >= 0.99, accuracy within that share or nan if none)."""
    confs, correct = _conf_correct(probs, labels)
    n_hi, n_hi_correct = 0, 0.0
    for c, ok in zip(confs, correct):
        if c >= 0.99:
            n_hi += 1
            n_hi_correct += ok
    share = n_hi / len(confs)
    acc = n_hi_correct / n_hi if n_hi else math.nan
    return share, acc


# --------------------------------------------------------------------------- compat (focal_calibration)
def softmax_f32(logits):
    """float32 softmax as F.softmax on float32 logits: exp(x − rowmax) / rowsum, all in float32."""
    x = np.asarray(logits, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError("expected 2-D logits")
    e = np.exp(x - x.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    assert p.dtype == np.float32
    return p.tolist()  # Python floats holding float32 values exactly


def torch_linspace_f32(start, end, steps):
    """torch.linspace(start, end, steps) in float32 (torch's CPU algorithm), as Python floats."""
    f = np.float32
    start, end = f(start), f(end)
    step = (end - start) / f(steps - 1)
    halfway = steps // 2
    out = []
    for i in range(steps):
        if i < halfway:
            v = start + step * f(i)
        else:
            v = end - step * f(steps - i - 1)
        out.append(float(f(v)))
    return out


def _compat_binned(values, targets, lowers, uppers, n_total):
    """Reference loop: for each (lower, upper], in_bin = v > lower and v <= upper; weight |B|/N."""
    total = 0.0
    for lo, hi in zip(lowers, uppers):
        cnt, sv, st = 0, 0.0, 0.0
        for v, t in zip(values, targets):
            if v > lo and v <= hi:
                cnt += 1
                sv += v
                st += t
        if cnt > 0:
            total += abs(sv / cnt - st / cnt) * (cnt / n_total)
    return total


def _compat_conf_correct(logits, labels):
    p32 = softmax_f32(logits)
    confs, preds = top_label(p32)
    labs = _labels(labels)
    correct = [1.0 if p == y else 0.0 for p, y in zip(preds, labs)]
    return p32, confs, correct, labs


def ece_compat(logits, labels, n_bins=15):
    _, confs, correct, _ = _compat_conf_correct(logits, labels)
    edges = torch_linspace_f32(0.0, 1.0, n_bins + 1)
    return _compat_binned(confs, correct, edges[:-1], edges[1:], len(confs))


def adaece_compat(logits, labels, n_bins=15):
    _, confs, correct, _ = _compat_conf_correct(logits, labels)
    n = len(confs)
    conf32 = np.asarray(confs, dtype=np.float32)
    edges64 = np.interp(np.linspace(0, n, n_bins + 1), np.arange(n), np.sort(conf32))
    # torch compares a float32 tensor with a Python-float scalar in float32: round the edges.
    edges = [float(np.float32(e)) for e in edges64.tolist()]
    return _compat_binned(confs, correct, edges[:-1], edges[1:], n)


def classwise_ece_compat(logits, labels, n_bins=15):
    p32, _, _, labs = _compat_conf_correct(logits, labels)
    n = len(p32)
    num_classes = max(labs) + 1
    edges = torch_linspace_f32(0.0, 1.0, n_bins + 1)
    total = 0.0
    for k in range(num_classes):
        values = [row[k] for row in p32]
        targets = [1.0 if y == k else 0.0 for y in labs]
        total += _compat_binned(values, targets, edges[:-1], edges[1:], n)
    return total / num_classes


def nll_compat(logits, labels):
    """nn.CrossEntropyLoss() on float32 logits: float32 log-softmax, mean over samples."""
    x = np.asarray(logits, dtype=np.float32)
    labs = _labels(labels)
    total = 0.0
    for row, y in zip(x, labs):
        m = row.max()
        lse = np.log(np.exp(row - m).sum(dtype=np.float32))
        logp = (row[y] - m) - lse
        assert logp.dtype == np.float32
        total += -float(logp)
    return total / len(labs)


def entropy(probs):
    """H(p) = −Σ_k p_k log p_k per row, natural log, a 0 contributing 0 (plain loop)."""
    out = []
    for row in _rows(probs):
        out.append(-sum(p * math.log(p) for p in row if p > 0.0))
    return out


def auroc_pairs(in_scores, out_scores):
    """Mann–Whitney AUROC by the O(n_in · n_out) double loop: over every pair (i in, j out),
    1 when out_j > in_i, ½ when equal, 0 otherwise; the count over n_in · n_out, in float64."""
    a = [float(v) for v in np.asarray(in_scores, dtype=np.float64).ravel()]
    b = [float(v) for v in np.asarray(out_scores, dtype=np.float64).ravel()]
    wins = 0.0
    for x in a:
        for y in b:
            if y > x:
                wins += 1.0
            elif y == x:
                wins += 0.5
    return wins / (len(a) * len(b))
