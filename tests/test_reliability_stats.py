"""Per-bin Clopper–Pearson intervals, consistency bands, the calibration test and the CORP curve
(calibrate_cli.diagnostics.reliability_stats) against independent float64 loops written here:
the interval by root finding on the binomial CDF (scipy.optimize.brentq), the ECE and the bins by
their definitions, the resamples replayed from the documented order of the draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import binom

from calibrate_cli.diagnostics import (
    calibration_test,
    clopper_pearson,
    consistency_bands,
    corp_reliability,
    reliability_intervals,
)
from calibrate_cli.diagnostics.reliability_stats import bin_intervals
from calibrate_cli.errors import InputError


def naive_cp(x, n, level):
    a = (1 - level) / 2
    low = 0.0 if x == 0 else brentq(lambda p: binom.sf(x - 1, n, p) - a, 1e-15, 1 - 1e-15, xtol=1e-15, rtol=1e-14)
    high = 1.0 if x == n else brentq(lambda p: binom.cdf(x, n, p) - a, 1e-15, 1 - 1e-15, xtol=1e-15, rtol=1e-14)
    return low, high


def naive_bin(v, m):
    b = 0
    for j in range(m):
        if v > j / m:
            b = j
    return b


def naive_ece(conf, correct, m):
    sums = [[0.0, 0.0] for _ in range(m)]
    for c, y in zip(conf, correct):
        b = naive_bin(c, m)
        sums[b][0] += float(c)
        sums[b][1] += float(y)
    return sum(abs(s[1] - s[0]) for s in sums) / len(conf)


def naive_pav(x, y):
    groups = {}
    for xi, yi in zip(x, y):
        t, c = groups.get(float(xi), (0.0, 0))
        groups[float(xi)] = (t + float(yi), c + 1)
    blocks = []
    for key in sorted(groups):
        t, c = groups[key]
        blocks.append([t / c, c, [key]])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, k2 = blocks.pop()
            m1, w1, k1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, k1 + k2])
    return {key: mean for mean, _, keys in blocks for key in keys}


# --- Clopper–Pearson ---------------------------------------------------------------------------------

@pytest.mark.parametrize("x,n", [(0, 1), (1, 1), (0, 10), (3, 10), (10, 10), (7, 13), (250, 400)])
@pytest.mark.parametrize("level", [0.9, 0.95])
def test_clopper_pearson_against_root_finding(x, n, level):
    low, high = clopper_pearson(x, n, level)
    want_low, want_high = naive_cp(x, n, level)
    assert float(low) == pytest.approx(want_low, abs=1e-10)
    assert float(high) == pytest.approx(want_high, abs=1e-10)


@pytest.mark.parametrize("x,n", [(0, 1), (1, 1), (0, 7), (3, 10), (7, 7), (123, 456)])
def test_clopper_pearson_equals_scipy_binomtest(x, n):
    from scipy.stats import binomtest

    peer = binomtest(x, n).proportion_ci(confidence_level=0.95, method="exact")
    low, high = clopper_pearson(x, n, 0.95)
    assert float(low) == pytest.approx(peer.low, abs=1e-12) and float(high) == pytest.approx(peer.high, abs=1e-12)


def test_clopper_pearson_closed_forms():
    # x = 0: high = 1 − (α/2)^(1/n); x = n: low = (α/2)^(1/n)
    low, high = clopper_pearson([0, 5], [5, 5], 0.95)
    assert high[0] == pytest.approx(1 - 0.025 ** (1 / 5), rel=1e-12) and low[0] == 0.0
    assert low[1] == pytest.approx(0.025 ** (1 / 5), rel=1e-12) and high[1] == 1.0
    low, high = clopper_pearson(0, 0)
    assert math.isnan(low) and math.isnan(high)


def test_clopper_pearson_bad_input():
    with pytest.raises(InputError):
        clopper_pearson(3, 2)
    with pytest.raises(InputError):
        clopper_pearson(1.5, 3)
    with pytest.raises(InputError, match="level"):
        clopper_pearson(1, 3, level=95)


def test_reliability_intervals_per_bin():
    rng = np.random.default_rng(0)
    conf = np.concatenate([rng.uniform(0.5, 1, 200), [0.5, 1.0, 0.6, 0.6]])  # K = 2 range, an edge, ties
    correct = rng.random(conf.shape[0]) < conf
    r = reliability_intervals(conf, correct, 10, level=0.9)
    rows = r.to_rows()
    for b in range(10):
        members = [int(y) for c, y in zip(conf.tolist(), correct.tolist()) if naive_bin(c, 10) == b]
        assert rows[b]["count"] == len(members)
        if not members:
            assert rows[b]["accuracy_low"] is None and rows[b]["accuracy"] is None
            continue
        low, high = naive_cp(sum(members), len(members), 0.9)
        assert rows[b]["accuracy"] == pytest.approx(sum(members) / len(members))
        assert rows[b]["accuracy_low"] == pytest.approx(low, abs=1e-10)
        assert rows[b]["accuracy_high"] == pytest.approx(high, abs=1e-10)
        assert rows[b]["accuracy_low"] <= rows[b]["accuracy"] <= rows[b]["accuracy_high"]
    assert r.to_dict()["method"] == "clopper-pearson"


def test_bin_intervals_of_eval_bins_n_equals_one():
    from calibrate_cli import evaluate

    report = evaluate(np.array([[0.2, 0.8]]), np.array([1]), input_kind="probs", n_bins=5)
    r = bin_intervals(report.bins, 0.95)
    assert r.count.tolist() == [0, 0, 0, 1, 0]
    assert r.low[3] == pytest.approx(0.025, rel=1e-12) and r.high[3] == 1.0


# --- the calibration test -----------------------------------------------------------------------------

def replay_test(conf, correct, m, b, seed):
    t = naive_ece(conf, correct, m)
    rng = np.random.default_rng(seed)
    u = rng.random((b, len(conf)))
    null = [naive_ece(conf, [int(v < c) for v, c in zip(row, conf)], m) for row in u.tolist()]
    exceed = sum(1 for v in null if v >= t - 1e-12)
    return t, (1 + exceed) / (b + 1), sum(null) / b


@pytest.mark.parametrize("seed", [0, 11])
def test_calibration_test_replayed(seed):
    rng = np.random.default_rng(100 + seed)
    conf = np.round(rng.uniform(0.5, 1, 150), 2)  # K = 2: confidences in [1/2, 1], with ties
    correct = rng.random(150) < conf - 0.05
    res = calibration_test(conf, correct, n_bins=10, n_resamples=199, seed=seed)
    t, p, mean = replay_test(conf.tolist(), correct.tolist(), 10, 199, seed)
    assert res.statistic == pytest.approx(t, rel=1e-12)
    assert res.p_value == p
    assert res.null_mean == pytest.approx(mean, rel=1e-10)


def test_calibration_test_statistic_is_the_ece():
    from calibrate_cli import ece

    rng = np.random.default_rng(4)
    z = rng.normal(size=(300, 5)) * 2
    labels = rng.integers(0, 5, 300)
    from calibrate_cli.diagnostics import top_label

    conf, correct = top_label(z, labels)
    assert calibration_test(conf, correct, n_resamples=9).statistic == pytest.approx(ece(z, labels), rel=1e-12)


def test_calibration_test_of_one_d_logits():
    from calibrate_cli.diagnostics import top_label

    rng = np.random.default_rng(12)
    s = np.round(rng.normal(size=90), 1)  # log-odds of class 1, with ties
    y = (rng.random(90) < 1 / (1 + np.exp(-s))).astype(int)
    conf, correct = top_label(s, y)
    p1 = [1 / (1 + math.exp(-v)) for v in s.tolist()]
    want_conf = [max(p, 1 - p) for p in p1]
    want_correct = [int((1 if p > 0.5 else 0) == t) for p, t in zip(p1, y.tolist())]
    assert conf.tolist() == pytest.approx(want_conf, rel=1e-14)
    res = calibration_test(conf, correct, n_bins=15, n_resamples=49, seed=1)
    t, p, _ = replay_test(want_conf, want_correct, 15, 49, 1)
    assert res.statistic == pytest.approx(t, rel=1e-12) and res.p_value == p


def test_calibration_test_n_equals_one_and_extremes():
    # N = 1: T = |1 − 0.8| = 0.2; each T* is 0.2 (y* = 1) or 0.8 (y* = 0), never below T: p = 1
    res = calibration_test([0.8], [1], n_resamples=50)
    assert res.statistic == pytest.approx(0.2) and res.p_value == 1.0
    # confidence 1.0, always right: T = 0 and T* = 0 exactly (ties count): p = 1
    assert calibration_test([1.0, 1.0], [1, 1], n_resamples=20).p_value == 1.0
    # badly over-confident: no null ECE reaches T
    rng = np.random.default_rng(1)
    conf = rng.uniform(0.9, 1, 500)
    res = calibration_test(conf, rng.random(500) < 0.5, n_resamples=99)
    assert res.p_value == 1 / 100


def test_calibration_test_is_seeded_and_calibrated_data_pass():
    rng = np.random.default_rng(2)
    conf = rng.uniform(0.3, 1, 2000)
    correct = rng.random(2000) < conf
    a = calibration_test(conf, correct, n_resamples=200, seed=5)
    assert a == calibration_test(conf, correct, n_resamples=200, seed=5)
    assert a.p_value > 0.05
    with pytest.raises(InputError, match="n_resamples"):
        calibration_test(conf, correct, n_resamples=0)


# --- consistency bands ----------------------------------------------------------------------------------

def replay_bands(conf, m, b, level, seed, resample):
    rng = np.random.default_rng(seed)
    n = len(conf)
    pick = rng.integers(0, n, size=(b, n)).tolist() if resample else [list(range(n))] * b
    u = rng.random((b, n)).tolist()
    per_bin = [[] for _ in range(m)]
    for r in range(b):
        counts, hits = [0] * m, [0] * m
        for j in range(n):
            x = conf[pick[r][j]]
            k = naive_bin(x, m)
            counts[k] += 1
            hits[k] += int(u[r][j] < x)
        for k in range(m):
            if counts[k]:
                per_bin[k].append(hits[k] / counts[k])
    a = 1 - level
    out = []
    for values in per_bin:
        out.append(tuple(np.quantile(values, [a / 2, 1 - a / 2])) if values else (math.nan, math.nan))
    return out, [len(v) for v in per_bin]


@pytest.mark.parametrize("resample", [True, False])
def test_consistency_bands_replayed(resample):
    rng = np.random.default_rng(9)
    conf = np.concatenate([np.round(rng.uniform(0.5, 1, 60), 2), [0.5, 1.0]])
    bands = consistency_bands(conf, 10, n_resamples=150, level=0.9, seed=3, resample_forecasts=resample)
    want, filled = replay_bands(conf.tolist(), 10, 150, 0.9, 3, resample)
    assert bands.filled.tolist() == filled
    for k in range(10):
        if math.isnan(want[k][0]):
            assert math.isnan(bands.low[k]) and math.isnan(bands.high[k])
        else:
            assert bands.low[k] == pytest.approx(want[k][0], abs=1e-12)
            assert bands.high[k] == pytest.approx(want[k][1], abs=1e-12)
    rows = bands.to_dict()["bins"]
    assert rows[0]["low"] is None and rows[0]["filled"] == 0  # no confidence below 1/2


def test_consistency_bands_n_equals_one():
    bands = consistency_bands([0.8], 5, n_resamples=400, level=0.9, seed=0)
    assert bands.filled.tolist() == [0, 0, 0, 400, 0]
    assert (bands.low[3], bands.high[3]) == (0.0, 1.0)  # the frequency is 0 or 1


def test_consistency_bands_cover_the_diagonal():
    rng = np.random.default_rng(6)
    conf = rng.uniform(0, 1, 3000)
    bands = consistency_bands(conf, 10, n_resamples=300, seed=1)
    mid = (np.arange(10) + 0.5) / 10
    assert np.all(bands.low <= mid + 0.01) and np.all(mid - 0.01 <= bands.high)
    assert np.all(bands.high - bands.low < 0.15)


# --- CORP reliability curve --------------------------------------------------------------------------------

def test_corp_reliability_matches_naive_pav():
    rng = np.random.default_rng(8)
    conf = np.round(rng.uniform(0.5, 1, 100), 2)
    correct = rng.random(100) < conf
    curve = corp_reliability(conf, correct)
    want = naive_pav(conf.tolist(), correct.tolist())
    assert curve.x.tolist() == sorted(want)
    assert curve.recalibrated.tolist() == pytest.approx([want[k] for k in sorted(want)], abs=1e-15)
    assert int(curve.count.sum()) == 100
    assert np.all(np.diff(curve.recalibrated) >= 0)
    one = corp_reliability([0.7], [0])
    assert one.x.tolist() == [0.7] and one.recalibrated.tolist() == [0.0]
