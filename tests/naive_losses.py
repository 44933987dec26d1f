"""Independent float64 per-sample loops for the training losses (calibrate_cli/training/losses.py), written
from the formulas in docs/losses.md with plain Python floats (math), no torch: the tests compare
make_loss(...) with these and, separately, with the reference code (tests/reference_losses/)."""

from __future__ import annotations

import math


def softmax_row(row):
    m = max(row)
    e = [math.exp(v - m) for v in row]
    s = sum(e)
    return [v / s for v in e]


def log_softmax_row(row):
    m = max(row)
    lse = m + math.log(sum(math.exp(v - m) for v in row))
    return [v - lse for v in row]


def _rows(logits, labels):
    return [[float(v) for v in row] for row in logits], [int(y) for y in labels]


def focal_sum(logits, labels, gamma_of_p, alpha=None):
    """Σ_i −α_{y_i} (1 − p_i)^γ(p_i) log p_i; ``gamma_of_p`` maps p to γ."""
    rows, ys = _rows(logits, labels)
    total = 0.0
    for row, y in zip(rows, ys):
        logp = log_softmax_row(row)[y]
        p = math.exp(logp)
        weight = 1.0 if alpha is None else alpha[y]
        total += -weight * (1.0 - p) ** gamma_of_p(p) * logp
    return total


def ce(logits, labels):
    return focal_sum(logits, labels, lambda p: 0.0)


def flsd53_gamma(p):
    return 5.0 if p < 0.2 else 3.0


def flsd532_gamma(p):
    return 5.0 if p < 0.2 else (3.0 if p < 0.5 else 2.0)


def label_smoothing(logits, labels, eps):
    rows, ys = _rows(logits, labels)
    total = 0.0
    for row, y in zip(rows, ys):
        logp = log_softmax_row(row)
        k = len(row)
        for j in range(k):
            q = (1.0 - eps) if j == y else eps / (k - 1)
            total -= q * logp[j]
    return total


def brier(logits, labels):
    rows, ys = _rows(logits, labels)
    total = 0.0
    for row, y in zip(rows, ys):
        probs = softmax_row(row)
        total += sum((probs[j] - (1.0 if j == y else 0.0)) ** 2 for j in range(len(row)))
    return total / len(rows)


def mmce_weighted(logits, labels):
    """The reference's normalisation: each block's mean of k·w, divided again by count² + 1e-5."""
    rows, ys = _rows(logits, labels)
    conf, correct = [], []
    for row, y in zip(rows, ys):
        probs = softmax_row(row)
        top = max(range(len(row)), key=lambda j: probs[j])
        conf.append(probs[top])
        correct.append(top == y)
    r_c = [r for r, c in zip(conf, correct) if c]
    r_i = [r for r, c in zip(conf, correct) if not c]
    m, n = len(r_c), len(r_i)
    if m == 0 or n == 0:
        return 0.0

    def k(a, b):
        return math.exp(-abs(a - b) / 0.4)

    cc = sum(k(a, b) * (1 - a) * (1 - b) for a in r_c for b in r_c) / (m * m)
    ii = sum(k(a, b) * a * b for a in r_i for b in r_i) / (n * n)
    ci = sum(k(a, b) * (1 - a) * b for a in r_c for b in r_i) / (m * n)
    mmd = cc / (m * m + 1e-5) + ii / (n * n + 1e-5) - 2 * ci / (m * n + 1e-5)
    return math.sqrt(mmd + 1e-10)


def mmce_objective(logits, labels, lam):
    n = len(labels)
    return n * (ce(logits, labels) / n + lam * mmce_weighted(logits, labels))


def adafocal_sum(logits, labels, inner_edges, gammas):
    """Σ_i −(1 − sign(γ_b) p_i)^|γ_b| log p_i with b = #(inner edges ≤ p_i)."""
    rows, ys = _rows(logits, labels)
    total = 0.0
    for row, y in zip(rows, ys):
        logp = log_softmax_row(row)[y]
        p = math.exp(logp)
        b = sum(1 for e in inner_edges if e <= p)
        g = gammas[b]
        base = 1.0 + p if g < 0 else (1.0 - p if g > 0 else 1.0)
        total += -(base ** abs(g)) * logp
    return total


def gamma_star(p0):
    """γ*(p0) of Proposition 2 without Lambert W: the γ > 0 where the focal loss's gradient factor
    g(p, γ) = (1 − p)^γ − γ p (1 − p)^(γ − 1) log p (Mukhoti et al. 2020, eq. for ∂L_f/∂w) comes
    back to 1 at p = p0, by bisection (g > 1 just above 0 and < 1 beyond the root when p0 < 0.5)."""
    if p0 >= 0.5:
        return 0.0

    def h(gamma):
        return (1 - p0) ** gamma - gamma * p0 * math.log(p0) * (1 - p0) ** (gamma - 1) - 1

    lo, hi = 1e-9, 1.0
    while h(hi) > 0:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if h(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
