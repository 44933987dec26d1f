"""FPR at 95 % TPR, AUPR-in and AUPR-out of `calibrate_cli.ood`: against scikit-learn's
``roc_curve`` / ``average_precision_score`` (when installed), an independent float64 loop, hand
cases, ties and one sample per side."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calibrate_cli.errors import InputError
from calibrate_cli.ood import OOD_SCORES, average_precision, fpr_at_tpr, ood_auroc
from naive_reference import entropy, softmax_rows

metrics = pytest.importorskip("sklearn.metrics")


def fpr_loop(in_u, out_u, tpr=0.95):
    """Sweep every threshold t from the smallest: the first accepting ≥ tpr of the in set (u ≤ t)."""
    for t in sorted(set(in_u) | set(out_u)):
        accepted_in = sum(1 for u in in_u if u <= t)
        if accepted_in * 100 >= round(tpr * 100) * len(in_u):
            return sum(1 for u in out_u if u <= t) / len(out_u)
    raise AssertionError("unreachable")


def ap_loop(pos, neg):
    """Σ over distinct thresholds, from the top, of (recall step) × precision at "score ≥ t"."""
    total, last_recall = 0.0, 0.0
    for t in sorted(set(pos) | set(neg), reverse=True):
        tp = sum(1 for s in pos if s >= t)
        fp = sum(1 for s in neg if s >= t)
        recall = tp / len(pos)
        total += (recall - last_recall) * tp / (tp + fp)
        last_recall = recall
    return total


def sk_fpr95(in_u, out_u):
    y = np.r_[np.ones(len(in_u)), np.zeros(len(out_u))]
    fpr, tpr, _ = metrics.roc_curve(y, -np.r_[in_u, out_u], drop_intermediate=False)  # in = positive, −u
    return fpr[np.argmax(tpr >= 0.95)]


def sk_ap(pos, neg):
    return metrics.average_precision_score(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg])


@pytest.mark.parametrize("seed, n_in, n_out, decimals", [(0, 200, 150, None), (1, 20, 7, 1), (2, 57, 300, 2),
                                                          (3, 100, 100, 0), (4, 3, 2, None)])
def test_against_sklearn_and_the_loop_with_and_without_ties(seed, n_in, n_out, decimals):
    rng = np.random.default_rng(seed)
    in_u, out_u = rng.normal(0, 1, n_in), rng.normal(0.8, 1.2, n_out)
    if decimals is not None:  # rounded: many ties, within and across the sets
        in_u, out_u = np.round(in_u, decimals), np.round(out_u, decimals)
    assert fpr_at_tpr(in_u, out_u) == pytest.approx(sk_fpr95(in_u, out_u), abs=1e-15)
    assert fpr_at_tpr(in_u, out_u) == pytest.approx(fpr_loop(in_u.tolist(), out_u.tolist()), abs=1e-15)
    for pos, neg in ((-in_u, -out_u), (out_u, in_u)):  # AUPR-in and AUPR-out
        assert average_precision(pos, neg) == pytest.approx(sk_ap(pos, neg), abs=1e-12)
        assert average_precision(pos, neg) == pytest.approx(ap_loop(pos.tolist(), neg.tolist()), abs=1e-12)


def test_hand_cases():
    # t = 0.3 accepts 3 of 4 in-distribution samples (75 %); the tied out sample 0.3 is accepted too
    assert fpr_at_tpr([0.1, 0.2, 0.3, 0.4], [0.3, 0.5], tpr=0.75) == 0.5
    # 95 % of 20 is 19 samples: t = the 19th smallest, 19 (not the 20th)
    assert fpr_at_tpr(np.arange(1.0, 21.0), [18.5, 19.0, 19.5]) == pytest.approx(2 / 3, abs=1e-15)
    # 95 % of 21 is 19.95: 20 samples
    assert fpr_at_tpr(np.arange(1.0, 22.0), [19.5, 20.0, 20.5]) == pytest.approx(2 / 3, abs=1e-15)
    # the tie group of t accepted whole: 96 of 100 in samples at t, TPR 100 %
    assert fpr_at_tpr(np.r_[np.zeros(4), np.ones(96)], [1.0, 2.0]) == 0.5
    # AP: t = 0.9: R ½ P 1; t = 0.7: no recall; t = 0.5 (a tie group of both): R 1, P ½
    assert average_precision([0.9, 0.5], [0.7, 0.5]) == 0.75
    assert average_precision([2.0, 3.0], [1.0]) == 1.0  # perfect
    assert average_precision([1.0], [2.0, 3.0]) == pytest.approx(1 / 3, abs=1e-15)  # last


def test_one_sample_per_side():
    assert fpr_at_tpr([0.1], [0.2]) == 0.0 and fpr_at_tpr([0.2], [0.1]) == 1.0 and fpr_at_tpr([0.1], [0.1]) == 1.0
    assert average_precision([0.1], [0.1]) == 0.5 == sk_ap([0.1], [0.1])
    assert average_precision([0.2], [0.1]) == 1.0 and average_precision([0.1], [0.2]) == 0.5
    r = ood_auroc(np.array([[3.0, 0.0]]), np.array([[0.5, 0.0]]))  # in: surer
    for name in OOD_SCORES:
        assert r.fpr95[name] == 0.0 and r.aupr_in[name] == 1.0 and r.aupr_out[name] == 1.0


def test_empty_or_nan_is_an_error():
    with pytest.raises(InputError, match="at least one sample"):
        fpr_at_tpr([], [0.1])
    with pytest.raises(InputError, match="at least one sample"):
        average_precision([0.1], [])
    with pytest.raises(InputError, match="NaN"):
        average_precision([0.1, math.nan], [0.2])
    with pytest.raises(InputError, match="TPR"):
        fpr_at_tpr([0.1], [0.2], tpr=0.0)


@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_ood_auroc_reports_them_for_both_scores(kind):
    rng = np.random.default_rng(8)
    inside = rng.normal(0, 1, (120, 4))
    inside[np.arange(120), rng.integers(0, 4, 120)] += 3.0
    outside = rng.normal(0, 1, (90, 4))
    p_in, p_out = softmax_rows(inside), softmax_rows(outside)
    given = (inside, outside) if kind == "logits" else (p_in, p_out)
    r = ood_auroc(*given, input_kind=kind)
    conf_in, conf_out = np.max(p_in, axis=1), np.max(p_out, axis=1)
    # the usual definitions: AUPR-in, in positive scored by the max probability; AUPR-out, OOD positive by −it
    assert r.aupr_in["confidence"] == pytest.approx(sk_ap(conf_in, conf_out), abs=1e-12)
    assert r.aupr_out["confidence"] == pytest.approx(sk_ap(-conf_out, -conf_in), abs=1e-12)
    assert r.fpr95["confidence"] == pytest.approx(sk_fpr95(-conf_in, -conf_out), abs=1e-15)
    h_in, h_out = np.array(entropy(p_in)), np.array(entropy(p_out))
    assert r.aupr_in["entropy"] == pytest.approx(sk_ap(-h_in, -h_out), abs=1e-9)
    assert r.aupr_out["entropy"] == pytest.approx(sk_ap(h_out, h_in), abs=1e-9)
    assert r.fpr95["entropy"] == pytest.approx(sk_fpr95(h_in, h_out), abs=1e-15)
    d = r.to_dict()
    for name in OOD_SCORES:
        assert d[f"fpr95_{name}"] == r.fpr95[name] and d[f"aupr_in_{name}"] == r.aupr_in[name]
        assert d[f"aupr_out_{name}"] == r.aupr_out[name]


def test_binary_vectors_and_the_bootstrap_keep_them():
    rng = np.random.default_rng(5)
    p_in, p_out = rng.uniform(0.8, 1.0, 30), rng.uniform(0.3, 0.95, 20)
    r = ood_auroc(p_in, p_out, input_kind="probs", bootstrap=50, seed=1)
    c_in, c_out = np.maximum(p_in, 1 - p_in), np.maximum(p_out, 1 - p_out)
    assert r.aupr_in["confidence"] == pytest.approx(sk_ap(c_in, c_out), abs=1e-12)
    assert r.fpr95["confidence"] == pytest.approx(sk_fpr95(-c_in, -c_out), abs=1e-15)
    assert set(r.intervals) == set(OOD_SCORES)  # intervals: the AUROCs only
