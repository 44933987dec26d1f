"""Split conformal prediction sets (calibrate_cli.conformal) against brute-force loops written here
from the definitions (Angelopoulos & Bates 2021; Romano et al. 2020; Angelopoulos et al. 2021), a
coverage test over many seeds within the finite-sample guarantee, and held-out real models."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from calibrate_cli.conformal import (
    ConformalFit,
    conformal_quantile_rank,
    coverage_report,
    fit_conformal,
    label_scores,
    prediction_sets,
)
from calibrate_cli.errors import CalibWarning, InputError

REFERENCE = Path("/work/shared/reference")


# ------------------------------------------------------------------ naive loops (independent)
def naive_softmax(row):
    m = max(row)
    e = [math.exp(x - m) for x in row]
    s = sum(e)
    return [v / s for v in e]


def naive_rank(n, alpha_text):
    """⌈(n + 1)(1 − α)⌉ in integers: α = a/b given as decimal text."""
    a = Fraction(alpha_text)
    num = (n + 1) * (a.denominator - a.numerator)
    return -(-num // a.denominator)


def naive_row_scores(p, method, lam=0.0, k_reg=0, u=1.0):
    """s(x, y) for every y of one row, with plain Python: rank classes by decreasing p (ties: lower
    index first), add the masses above y one by one."""
    k = len(p)
    if method == "lac":
        return [1.0 - v for v in p]
    order = sorted(range(k), key=lambda j: (-p[j], j))
    out = [0.0] * k
    above = 0.0
    for rank, j in enumerate(order, start=1):
        score = above + u * p[j]
        if method == "raps" and lam > 0:
            score += lam * max(0, rank - k_reg)
        out[j] = score
        above += p[j]
    return out


def naive_threshold(probs, labels, method, alpha_text, lam=0.0, k_reg=0, u=None):
    scores = sorted(
        naive_row_scores(list(p), method, lam, k_reg, 1.0 if u is None else u[i])[y]
        for i, (p, y) in enumerate(zip(probs, labels))
    )
    r = naive_rank(len(scores), alpha_text)
    return None if r > len(scores) else scores[r - 1]


def naive_sets(probs, threshold, method, lam=0.0, k_reg=0, u=None):
    rows = []
    for i, p in enumerate(probs):
        s = naive_row_scores(list(p), method, lam, k_reg, 1.0 if u is None else u[i])
        rows.append([threshold is None or v <= threshold for v in s])
    return np.array(rows, dtype=bool)


def dirichlet_data(seed, n, k, concentration=0.5):
    """Calibrated by construction: p ~ Dirichlet, y ~ Categorical(p)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(k, concentration), size=n)
    y = (rng.uniform(size=(n, 1)) > np.cumsum(p, axis=1)).sum(axis=1).clip(max=k - 1)
    return p, y


METHODS = [("lac", {}), ("aps", {}), ("raps", {"lam": 0.05, "k_reg": 2}), ("raps", {"lam": 0.5, "k_reg": 0})]


# ------------------------------------------------------------------ the quantile
@pytest.mark.parametrize("alpha_text", ["0.1", "0.05", "0.2", "0.5", "0.01", "0.3"])
@pytest.mark.parametrize("n", [1, 2, 9, 10, 19, 99, 100, 1000])
def test_quantile_rank_is_exact(n, alpha_text):
    assert conformal_quantile_rank(n, float(alpha_text)) == naive_rank(n, alpha_text)


def test_quantile_rank_hand_values():
    assert conformal_quantile_rank(9, 0.1) == 9      # 10 · 0.9 = 9 exactly
    assert conformal_quantile_rank(10, 0.1) == 10    # ⌈9.9⌉
    assert conformal_quantile_rank(100, 0.1) == 91   # ⌈90.9⌉
    assert conformal_quantile_rank(8, 0.1) == 9      # > n: no finite threshold


@pytest.mark.parametrize("method, kw", METHODS)
@pytest.mark.parametrize("n", [1, 2, 10, 57, 400])
@pytest.mark.parametrize("alpha_text", ["0.1", "0.5", "0.25"])
def test_threshold_and_sets_equal_the_brute_force(method, kw, n, alpha_text):
    p, y = dirichlet_data(n, n, 6)
    expected = naive_threshold(p, y, method, alpha_text, kw.get("lam", 0), kw.get("k_reg", 0))
    with pytest.warns(CalibWarning, match="too small") if expected is None else _nothing():
        fit = fit_conformal(p, y, alpha=float(alpha_text), method=method, input_kind="probs", **kw)
    assert fit.threshold == expected  # the same float: same sums in the same order
    assert fit.rank == naive_rank(n, alpha_text) and fit.n == n and fit.k == 6
    test_p, _ = dirichlet_data(1000 + n, 300, 6)
    sets = prediction_sets(fit, test_p, input_kind="probs")
    assert sets.dtype == bool and sets.shape == (300, 6)
    np.testing.assert_array_equal(sets, naive_sets(test_p, expected, method, kw.get("lam", 0), kw.get("k_reg", 0)))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_lac_by_hand():
    probs = np.array([[0.7, 0.3], [0.4, 0.6], [0.9, 0.1], [0.2, 0.8]])
    fit = fit_conformal(probs, [0, 0, 1, 1], alpha=0.4, input_kind="probs")  # scores 0.3, 0.6, 0.9, 0.2
    assert (fit.rank, fit.threshold) == (3, 0.6)                              # ⌈5 · 0.6⌉ = 3
    sets = prediction_sets(fit, np.array([[0.5, 0.5], [0.3, 0.7], [0.35, 0.65]]), input_kind="probs")
    # 1 − p ≤ 0.6 ⇔ p ≥ 0.4: both; class 1 only; class 1 only (1 − 0.35 = 0.65 > 0.6)
    assert sets.tolist() == [[True, True], [False, True], [False, True]]


def test_aps_and_raps_by_hand():
    p = np.array([[0.5, 0.2, 0.3]])
    # ranks: class 0 (1st), class 2 (2nd), class 1 (3rd); cumulative masses 0.5, 0.8, 1.0
    assert label_scores(p, "aps")[0].tolist() == pytest.approx([0.5, 1.0, 0.8])
    # RAPS λ = 0.1, k_reg = 1: + 0, + 0.1 (rank 2), + 0.2 (rank 3)
    assert label_scores(p, "raps", lam=0.1, k_reg=1)[0].tolist() == pytest.approx([0.5, 1.2, 0.9])
    # randomized u = 0.25: ρ + u · p
    assert label_scores(p, "aps", u=np.array([0.25]))[0].tolist() == pytest.approx([0.125, 0.8 + 0.05, 0.5 + 0.075])
    # ties: [0.4, 0.4, 0.2]: class 0 ranks above class 1 (lower index first)
    assert label_scores(np.array([[0.4, 0.4, 0.2]]), "aps")[0].tolist() == pytest.approx([0.4, 0.8, 1.0])


def test_randomized_scores_equal_the_brute_force_and_are_seeded():
    p, y = dirichlet_data(5, 200, 4)
    fit = fit_conformal(p, y, alpha=0.1, method="aps", input_kind="probs", randomized=True, seed=7)
    u_fit = np.random.default_rng(np.random.SeedSequence(7).spawn(2)[0]).random(200)
    assert fit.threshold == naive_threshold(p, y, "aps", "0.1", u=u_fit)
    assert fit.randomized and fit.seed == 7
    test_p, _ = dirichlet_data(6, 100, 4)
    u_test = np.random.default_rng(np.random.SeedSequence(7).spawn(2)[1]).random(100)
    sets = prediction_sets(fit, test_p, input_kind="probs")
    np.testing.assert_array_equal(sets, naive_sets(test_p, fit.threshold, "aps", u=u_test))
    np.testing.assert_array_equal(sets, prediction_sets(fit, test_p, input_kind="probs"))  # reproducible
    other = prediction_sets(fit, test_p, input_kind="probs", seed=8)
    assert not np.array_equal(sets, other)


# ------------------------------------------------------------------ inputs: logits, K = 2, 1-D, N = 1, ties
def test_logits_go_through_softmax():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(80, 5)) * 3
    y = rng.integers(0, 5, 80)
    probs = np.array([naive_softmax(list(r)) for r in logits])
    for method, kw in METHODS:
        fit = fit_conformal(logits, y, alpha=0.2, method=method, **kw)
        assert fit.threshold == pytest.approx(naive_threshold(probs, y, method, "0.2", kw.get("lam", 0),
                                                              kw.get("k_reg", 0)), abs=1e-12)


def test_binary_one_dimensional_scores():
    rng = np.random.default_rng(1)
    p1 = rng.uniform(size=60)
    y = (rng.uniform(size=60) < p1).astype(int)
    two = np.column_stack([1 - p1, p1])
    for method, kw in METHODS:
        fit1 = fit_conformal(p1, y, alpha=0.2, method=method, input_kind="probs", **kw)
        assert fit1.k == 2
        assert fit1.threshold == naive_threshold(two, y, method, "0.2", kw.get("lam", 0), kw.get("k_reg", 0))
        np.testing.assert_array_equal(prediction_sets(fit1, p1, input_kind="probs"),
                                      naive_sets(two, fit1.threshold, method, kw.get("lam", 0), kw.get("k_reg", 0)))
    log_odds = np.log(p1 / (1 - p1))
    fit = fit_conformal(log_odds, y, alpha=0.2, method="lac", input_kind="logits")
    assert fit.threshold == pytest.approx(naive_threshold(two, y, "lac", "0.2"), abs=1e-12)


def test_one_calibration_sample():
    with pytest.warns(CalibWarning, match="too small for 1 calibration"):
        fit = fit_conformal([[0.9, 0.1]], [0], alpha=0.1, input_kind="probs")
    assert fit.full_sets and fit.threshold is None and fit.rank == 2
    assert prediction_sets(fit, [[0.99, 0.01]], input_kind="probs").tolist() == [[True, True]]
    assert fit.coverage_bounds == (1.0, 1.0)
    fit = fit_conformal([[0.9, 0.1]], [0], alpha=0.5, input_kind="probs")  # ⌈2 · 0.5⌉ = 1 ≤ n
    assert fit.threshold == pytest.approx(0.1) and fit.rank == 1


def test_tied_calibration_scores():
    probs = np.array([[0.5, 0.5]] * 5 + [[0.8, 0.2]] * 5)
    y = np.array([0, 1, 0, 1, 0, 0, 0, 1, 0, 0])
    # LAC scores: 0.5 ×5, then 0.2, 0.2, 0.8, 0.2, 0.2 → sorted 0.2×4, 0.5×5, 0.8; rank ⌈11 · 0.8⌉ = 9
    fit = fit_conformal(probs, y, alpha=0.2, input_kind="probs")
    assert (fit.rank, fit.threshold) == (9, 0.5)
    assert prediction_sets(fit, probs, input_kind="probs")[0].tolist() == [True, True]


# ------------------------------------------------------------------ the guarantee
@pytest.mark.parametrize("method, kw", [("lac", {}), ("aps", {}), ("aps", {"randomized": True}),
                                        ("raps", {"lam": 0.05, "k_reg": 1})])
def test_coverage_over_many_seeds_is_within_the_guarantee(method, kw):
    """For continuous scores, the coverage averaged over calibration draws is ⌈(n+1)(1−α)⌉/(n+1),
    in [1 − α, 1 − α + 1/(n + 1)]. n = 50, α = 0.1: 46/51 = 0.9020; an off-by-one rank (45/51 =
    0.882) or the plain empirical quantile fails this test. 1000 seeds: Monte-Carlo SE ≈ 0.0014."""
    n, alpha, seeds = 50, 0.1, 1000
    coverages = []
    for seed in range(seeds):
        p, y = dirichlet_data(seed, n + 400, 5)
        fit = fit_conformal(p[:n], y[:n], alpha=alpha, method=method, input_kind="probs", seed=seed, **kw)
        sets = prediction_sets(fit, p[n:], input_kind="probs")
        coverages.append(sets[np.arange(400), y[n:]].mean())
    mean = float(np.mean(coverages))
    se = float(np.std(coverages)) / math.sqrt(seeds)
    assert 1 - alpha - 3 * se <= mean <= 1 - alpha + 1 / (n + 1) + 3 * se
    assert abs(mean - 46 / 51) < 4 * se


def _reference(name):
    files = [REFERENCE / f"{name}_{part}.npy" for part in ("val_logits", "val_labels", "test_logits", "test_labels")]
    if not all(f.exists() for f in files):
        pytest.skip(f"reference data {name} not here")
    return [np.load(f) for f in files]


@pytest.mark.parametrize("name", ["cifar100_wrn16-4_netcal", "cifar10_cleanlab"])
@pytest.mark.parametrize("method, kw", [("lac", {}), ("aps", {"randomized": True}), ("raps", {"randomized": True})])
def test_real_models_cover_within_the_guarantee(name, method, kw):
    """Held-out real models: 10 random 5000/5000 splits of the 10k test set; the mean test coverage
    lies within the guarantee up to its Monte-Carlo error."""
    val_x, val_y, test_x, test_y = _reference(name)
    x, y = np.concatenate([val_x, test_x]), np.concatenate([val_y, test_y])
    alpha, coverages = 0.1, []
    for seed in range(10):
        perm = np.random.default_rng(seed).permutation(y.size)
        cal, held = perm[:5000], perm[5000:]
        fit = fit_conformal(x[cal], y[cal], alpha=alpha, method=method, seed=seed, **kw)
        report = coverage_report(prediction_sets(fit, x[held]), y[held])
        coverages.append(report.coverage)
        assert sum(report.size_histogram) == 5000
        assert report.class_counts == tuple(np.bincount(y[held], minlength=fit.k))
    se = max(float(np.std(coverages)) / math.sqrt(10), math.sqrt(alpha * (1 - alpha) / 5000 / 10))
    assert 1 - alpha - 3 * se <= float(np.mean(coverages)) <= 1 - alpha + 1 / 5001 + 3 * se


# ------------------------------------------------------------------ the report
def test_coverage_report_by_hand():
    sets = np.array([[True, False, False], [True, True, False], [False, False, False], [True, True, True]])
    report = coverage_report(sets, np.array([0, 0, 2, 1]))
    assert report.coverage == 0.75
    assert report.class_coverage == (1.0, 1.0, 0.0) and report.class_counts == (2, 1, 1)
    assert report.mean_size == 1.5 and report.size_histogram == (1, 1, 1, 1)
    assert report.empty_share == 0.25 and report.min_class_coverage == 0.0
    absent = coverage_report(sets[:2], np.array([0, 0]))
    assert absent.class_coverage == (1.0, None, None)
    assert json.loads(json.dumps(absent.to_dict()))["class_coverage"] == [1.0, None, None]


def test_coverage_report_equals_a_loop():
    p, y = dirichlet_data(3, 500, 7)
    fit = fit_conformal(p[:250], y[:250], alpha=0.1, method="aps", input_kind="probs")
    sets = prediction_sets(fit, p[250:], input_kind="probs")
    report = coverage_report(sets, y[250:])
    yt = y[250:]
    for c in range(7):
        rows = [i for i in range(250) if yt[i] == c]
        expected = sum(sets[i, c] for i in rows) / len(rows) if rows else None
        assert report.class_coverage[c] == pytest.approx(expected, abs=1e-15)
    assert report.mean_size == pytest.approx(sum(int(r.sum()) for r in sets) / 250, abs=1e-15)


# ------------------------------------------------------------------ JSON
@pytest.mark.parametrize("method, kw", METHODS + [("aps", {"randomized": True, "seed": 3})])
def test_fit_round_trips_through_json(method, kw):
    p, y = dirichlet_data(2, 100, 4)
    fit = fit_conformal(p, y, alpha=0.1, method=method, input_kind="probs", **kw)
    again = ConformalFit.from_dict(json.loads(json.dumps(fit.to_dict())))
    assert again == fit
    test_p, _ = dirichlet_data(9, 50, 4)
    np.testing.assert_array_equal(prediction_sets(again, test_p, input_kind="probs"),
                                  prediction_sets(fit, test_p, input_kind="probs"))


def test_full_set_fit_is_json():
    with pytest.warns(CalibWarning):
        fit = fit_conformal([[0.9, 0.1], [0.2, 0.8]], [0, 1], alpha=0.1, input_kind="probs")
    text = json.dumps(fit.to_dict(), allow_nan=False)
    assert ConformalFit.from_dict(json.loads(text)).full_sets


@pytest.mark.parametrize("change, match", [
    ({"format": "calib.calibrator"}, "not a conformal fit"),
    ({"version": 2}, "version"),
    ({"method": "thr"}, "method"),
    ({"alpha": 1.5}, "alpha"),
    ({"threshold": "x"}, "threshold"),
    ({"k": 1}, "k"),
    ({"lam": -1}, "lam"),
])
def test_bad_saved_fits_are_refused(change, match):
    data = fit_conformal([[0.9, 0.1], [0.2, 0.8]] * 10, [0, 1] * 10, alpha=0.2, input_kind="probs").to_dict()
    with pytest.raises(InputError, match=match):
        ConformalFit.from_dict({**data, **change}, source="fit.json")
    data.pop("n")
    with pytest.raises(InputError, match="fit.json: .*'n'"):
        ConformalFit.from_dict(data, source="fit.json")


# ------------------------------------------------------------------ bad input
def test_bad_arguments_are_refused():
    p, y = dirichlet_data(0, 20, 3)
    for kw, match in [({"alpha": 0.0}, "alpha"), ({"alpha": 1.0}, "alpha"), ({"method": "naive"}, "method"),
                      ({"method": "raps", "lam": -0.1}, "lam"), ({"method": "raps", "k_reg": -1}, "k_reg"),
                      ({"method": "lac", "randomized": True}, "randomized")]:
        with pytest.raises(InputError, match=match):
            fit_conformal(p, y, input_kind="probs", **kw)
    fit = fit_conformal(p, y, input_kind="probs")
    with pytest.raises(InputError, match="K = 4"):
        prediction_sets(fit, np.full((2, 4), 0.25), input_kind="probs")
    with pytest.raises(InputError):
        fit_conformal(np.array([[0.5, np.nan]]), [0], input_kind="probs")
