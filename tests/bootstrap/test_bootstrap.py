"""Bootstrap intervals: reference procedure, weighted == explicit resampling, seeds, coverage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libm import METRIC_ABS, METRIC_REL

from calibrate_cli.engine.binning import equal_mass_edges
from calibrate_cli.bootstrap import (
    ConfidenceInterval,
    bootstrap,
    bootstrap_values,
    compare,
    confidence_interval,
    end_noise,
    jackknife_acceleration,
    jackknife_values,
    min_resamples,
)
from calibrate_cli.bootstrap.resampler import resampler_for
from calibrate_cli.errors import InputError
from calibrate_cli.metrics.registry import BOOTSTRAP_DEFAULT
from calibrate_cli.evaluate import summarize_data
from calibrate_cli.metrics.functional import METRIC_NAMES, metrics_from_summary
from calibrate_cli.data.predictions import as_predictions
from calibrate_cli.engine.summary import summarize

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"


def _engine(scores, labels, input_kind, n_bins):
    """The summary and the resampling engine of one data set (the package's internal set-up)."""
    data = summarize_data(scores, labels, input_kind=input_kind, n_bins=n_bins)
    return data.summary, resampler_for(data, n_bins)


def _data(n=300, k=7, seed=0, scale=2.0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(n, k)) * scale).astype(dtype)
    labels = rng.integers(0, k, n)
    return logits, labels


def _explicit(scores, labels, idx, input_kind="logits", compat=None, n_bins=15):
    """Metrics recomputed from scratch on the explicitly resampled arrays (every one, ACE included)."""
    return summarize_data(scores[idx], labels[idx], input_kind=input_kind, n_bins=n_bins, compat=compat,
                          metrics="all").point(n_bins)


# ---------------------------------------------------------------- the reference procedure


def test_reference_ece_interval_basic_200_legacy_resamples():
    """reference/README.md: legacy np.random.seed(0), np.random.choice(n, n) per resample, 200 resamples."""
    if not (REFERENCE / "logits_N2000_K10.npy").exists():
        pytest.skip("../shared/reference is not available")
    logits = np.load(REFERENCE / "logits_N2000_K10.npy")
    labels = np.load(REFERENCE / "labels_N2000_K10.npy")
    np.random.seed(0)
    idx = np.stack([np.random.choice(len(labels), len(labels)) for _ in range(200)])
    ci = bootstrap(logits, labels, indices=idx, metrics=["ece"])["ece"]
    assert ci.method == "basic" and ci.level == 0.9 and ci.n_resamples == 200
    assert ci.point == pytest.approx(0.0873361425, abs=1e-9)
    assert ci.low == pytest.approx(0.0738434, abs=1e-7)
    assert ci.high == pytest.approx(0.0980946, abs=1e-7)
    # "mid" is the basic method's reflected median: 2θ̂ − q_50 (not the interval's midpoint)
    point, values = bootstrap_values(logits, labels, indices=idx, metrics="all")
    assert 2 * point["ece"] - np.median(values["ece"]) == pytest.approx(0.0850420, abs=1e-7)
    assert (ci.low + ci.high) / 2 != pytest.approx(0.0850420, abs=1e-4)


# ---------------------------------------------------------------- weighted == explicit resampling


@pytest.mark.parametrize("compat", [None, "focal-calibration"])
@pytest.mark.parametrize("n,k", [(300, 7), (40, 3), (1, 2), (9, 10), (200, 2)])
def test_weighted_resamples_equal_explicit_resampling(n, k, compat):
    logits, labels = _data(n, k, seed=n + k)
    idx = np.random.default_rng(1).integers(0, n, size=(4, n))
    _, values = bootstrap_values(logits, labels, indices=idx, compat=compat, batch_size=3, metrics="all")
    for r in range(idx.shape[0]):
        ref = _explicit(logits, labels, idx[r], compat=compat)
        for name in METRIC_NAMES:
            if ref[name] is None:
                assert np.isnan(values[name][r]), name
            else:
                assert values[name][r] == pytest.approx(ref[name], abs=1e-10), (name, r)


@pytest.mark.parametrize("compat", [None, "focal-calibration"])
@pytest.mark.parametrize(
    "share",
    [
        None,  # spread out
        [0.6, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05, 0.025, 0.025],  # p1 mostly 0: lowest slot (or none)
        [0.05, 0.05, 0.05, 0.05, 0.1, 0.6, 0.05, 0.025, 0.025],  # mostly 0.6, with its bin's lower edge 8/15
    ],
)
def test_weighted_equals_explicit_with_ties_and_probabilities(share, compat):
    """Many tied confidences (values on bin edges) and a zero true-class probability (NLL = inf);
    the commonest classwise slot of a class at the bottom, in no bin (compat) or inside."""
    rng = np.random.default_rng(5)
    n = 120
    p1 = rng.choice([0.0, 1 / 15, 0.2, 0.5, 8 / 15, 0.6, 0.8, 0.99, 1.0], size=n, p=share)
    probs = np.stack([1 - p1, p1], axis=1)
    labels = rng.integers(0, 2, n)
    labels[np.isin(p1, [1 / 15, 8 / 15])] = 1  # on-edge classwise bins of the opposite sign to their neighbours
    idx = rng.integers(0, n, size=(6, n))
    _, values = bootstrap_values(probs, labels, input_kind="probs", indices=idx, compat=compat, metrics="all")
    for r in range(idx.shape[0]):
        ref = _explicit(probs, labels, idx[r], input_kind="probs", compat=compat)
        for name in METRIC_NAMES:
            if ref[name] is None:
                assert np.isnan(values[name][r])
            elif np.isinf(ref[name]):
                assert np.isinf(values[name][r])
            else:
                assert values[name][r] == pytest.approx(ref[name], abs=1e-10), name


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    n_bins=st.integers(1, 20),
    seed=st.integers(0, 2**16),
    levels=st.integers(1, 6),
)
def test_equal_mass_edges_of_weights_equal_those_of_the_resampled_array(n, n_bins, seed, levels):
    """The per-resample edges are those of equal_mass_edges of the explicit resample. Two paths: the
    engine repeats np.interp's formula in array operations, np.interp's C loop may fuse its multiply-add
    (an FMA where the platform has one), so within the numeric contract (tests/libm.py), not bits."""
    rng = np.random.default_rng(seed)
    conf = rng.integers(0, levels, n) / levels * 0.5 + 0.5  # ties on purpose
    probs = np.stack([1 - conf, conf], axis=1)
    labels = rng.integers(0, 2, n)
    summary, engine = _engine(probs, labels, "probs", n_bins)
    idx = rng.integers(0, n, size=(3, n))
    edges = engine.equal_mass_edges_of(engine.weights(engine.rank[idx]))
    for r in range(3):
        expected = equal_mass_edges(summary.confidences[idx[r]], n_bins)
        np.testing.assert_allclose(edges[r], expected, rtol=METRIC_REL, atol=METRIC_ABS)


# ---------------------------------------------------------------- seeds and batches


def test_same_seed_same_intervals_and_different_seed_different():
    logits, labels = _data(400, 5)
    a = bootstrap(logits, labels, n_resamples=100, seed=7)
    b = bootstrap(logits, labels, n_resamples=100, seed=7)
    c = bootstrap(logits, labels, n_resamples=100, seed=8)
    assert a == b  # the same path twice: determinism, equal bits
    assert a["ece"] != c["ece"] and a["nll"] != c["nll"]


def test_results_do_not_depend_on_the_batch_size():
    logits, labels = _data(250, 6)
    _, ref = bootstrap_values(logits, labels, n_resamples=37, seed=3, batch_size=37)
    for batch in (1, 4, 10, 100):
        _, got = bootstrap_values(logits, labels, n_resamples=37, seed=3, batch_size=batch)
        for name in METRIC_NAMES:
            np.testing.assert_allclose(got[name], ref[name], rtol=0, atol=1e-12, err_msg=name)


def test_default_metrics_are_the_defined_ones_and_intervals_hold_the_point():
    logits, labels = _data(300, 4)  # K ≤ 5: no top-5 accuracy
    cis = bootstrap(logits, labels, n_resamples=50)
    assert "top5_accuracy" not in cis
    assert set(cis) <= set(METRIC_NAMES) and "ece" in cis and "classwise_ece" in cis
    for name, ci in cis.items():
        assert isinstance(ci, ConfidenceInterval)
        assert ci.low <= ci.high
        assert set(ci.to_dict()) >= {"low", "high", "level", "method", "n_resamples"}


def test_progress_callback_reports_every_batch():
    logits, labels = _data(50, 3)
    calls = []
    bootstrap(logits, labels, n_resamples=10, batch_size=4, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(0, 10), (4, 10), (8, 10), (10, 10)]


# ---------------------------------------------------------------- interval formulas


def test_basic_and_percentile_intervals_by_hand():
    values = np.arange(11, dtype=float)  # q_5 = 0.5, q_95 = 9.5 (linear interpolation)
    basic = confidence_interval(4.0, values, level=0.9, method="basic")
    assert (basic.low, basic.high) == pytest.approx((8.0 - 9.5, 8.0 - 0.5))
    pct = confidence_interval(4.0, values, level=0.9, method="percentile")
    assert (pct.low, pct.high) == pytest.approx((0.5, 9.5))
    assert basic.low < 0  # never clipped


def test_undefined_resamples_are_left_out_and_infinite_points_get_none():
    ci = confidence_interval(0.5, np.array([0.4, np.nan, 0.6]), method="percentile")
    assert ci.n_resamples == 2
    assert confidence_interval(float("inf"), np.array([1.0, np.inf])) is None


@pytest.mark.parametrize(
    "kwargs",
    [{"n_resamples": 0}, {"level": 1.0}, {"level": 0}, {"method": "studentized"}, {"batch_size": 0}, {"metrics": ["nope"]}],
)
def test_bad_settings_raise_input_error(kwargs):
    logits, labels = _data(20, 3)
    with pytest.raises(InputError):
        bootstrap(logits, labels, **kwargs)


def test_bad_indices_raise_input_error():
    logits, labels = _data(20, 3)
    with pytest.raises(InputError):
        bootstrap(logits, labels, indices=np.zeros((2, 19), dtype=int))
    with pytest.raises(InputError):
        bootstrap(logits, labels, indices=np.full((2, 20), 20))


# ---------------------------------------------------------------- coverage


def _true_ece_model(n, rng):
    """conf ~ U(0.6, 1), P(correct | conf) = conf − 0.2: the population ECE is exactly 0.2.

    Two classes, class 0 predicted with probability conf. In every bin the expected accuracy is
    the mean confidence − 0.2, so the population ECE is 0.2 whatever the bins. (The gap is large
    against the per-bin noise at N = 400, so the |·| bias of the finite-sample ECE is small.)
    """
    conf = rng.uniform(0.6, 1.0, n)
    correct = rng.random(n) < conf - 0.2
    probs = np.stack([conf, 1 - conf], axis=1)
    labels = np.where(correct, 0, 1)
    return probs, labels


def test_coverage_of_the_90_percent_interval_on_a_known_true_ece():
    rng = np.random.default_rng(2024)
    hits = 0
    reps = 100
    for rep in range(reps):
        probs, labels = _true_ece_model(400, rng)
        ci = bootstrap(probs, labels, input_kind="probs", n_resamples=200, seed=rep, metrics=["ece"])["ece"]
        hits += ci.low <= 0.2 <= ci.high
    assert 75 <= hits <= 98, hits


# ---------------------------------------------------------------- paired comparison


def test_compare_identical_models_gives_exact_zeros():
    logits, labels = _data(200, 6)
    cmp = compare(logits, labels, logits.copy(), labels.copy(), n_resamples=50)
    for name, d in cmp.differences.items():
        assert d.difference == 0.0, name
        if name not in BOOTSTRAP_DEFAULT:  # per-sample metrics (KS, SmoothECE) are not resampled by default
            assert d.interval is None, name
            continue
        assert (d.interval.low, d.interval.high) == (0.0, 0.0), name
        assert d.significant is False


def test_compare_pairs_the_resamples_and_matches_two_bootstraps_of_the_same_indices():
    logits, labels = _data(150, 4)
    sharper = logits * 2.0
    idx = np.random.default_rng(3).integers(0, 150, size=(20, 150))
    cmp = compare(logits, labels, sharper, labels, indices=idx, method="percentile")
    _, va = bootstrap_values(logits, labels, indices=idx, metrics="all")
    _, vb = bootstrap_values(sharper, labels, indices=idx, metrics="all")
    diff = vb["ece"] - va["ece"]
    q = np.percentile(diff, [5, 95])
    d = cmp.differences["ece"]
    assert (d.interval.low, d.interval.high) == pytest.approx(tuple(q), abs=1e-12)
    assert d.difference == pytest.approx(cmp.differences["ece"].b - cmp.differences["ece"].a)
    assert cmp.differences["accuracy"].difference == 0.0  # scaling logits keeps the argmax


def test_compare_rejects_different_labels():
    logits, labels = _data(30, 3)
    other = labels.copy()
    other[0] = (other[0] + 1) % 3
    with pytest.raises(InputError, match="labels"):
        compare(logits, labels, logits, other, n_resamples=5)


def test_many_blocks_weighted_equals_explicit():
    """N spanning many 256-sample blocks, with bin boundaries falling inside blocks."""
    logits, labels = _data(3001, 12, seed=11, dtype=np.float64)
    idx = np.random.default_rng(2).integers(0, 3001, size=(2, 3001))
    _, values = bootstrap_values(logits, labels, indices=idx, metrics="all")
    for r in range(2):
        ref = _explicit(logits, labels, idx[r])
        for name in METRIC_NAMES:
            assert values[name][r] == pytest.approx(ref[name], abs=1e-10), name


def test_seeded_draws_are_positions_in_confidence_order():
    """The seeded path equals explicit indices: row r = order[rng_r.integers(0, N, N)], where
    rng_r is seeded by the r-th child of SeedSequence(seed)."""
    logits, labels = _data(120, 4)
    _, seeded = bootstrap_values(logits, labels, n_resamples=5, seed=9, metrics="all")
    summary, engine = _engine(logits, labels, "logits", 15)
    children = np.random.SeedSequence(9).spawn(5)
    idx = np.stack([engine.order[np.random.default_rng(c).integers(0, 120, 120)] for c in children])
    _, explicit = bootstrap_values(logits, labels, indices=idx, metrics="all")
    for name in METRIC_NAMES:
        np.testing.assert_allclose(seeded[name], explicit[name], rtol=0, atol=1e-12)


def test_a_subset_of_metrics_gives_the_same_intervals():
    """The same draws and the same computation of each metric whatever else is asked for (determinism of
    one path, as for thread counts): equal bits."""
    logits, labels = _data(300, 8)
    full = bootstrap(logits, labels, n_resamples=40, seed=1)
    for names in (["ece"], ["adaece", "mce"], ["classwise_ece"], ["nll", "s99_share"]):
        part = bootstrap(logits, labels, n_resamples=40, seed=1, metrics=names)
        assert set(part) == set(names)
        for name in names:
            assert part[name] == full[name]


class _ShapeDependentBlas:
    """numpy, except that ``matmul`` sums in an order that depends on the product's shape.

    This is what OpenBLAS does on an AVX-512 CPU (its SkylakeX kernels are chosen by shape): a
    product over more columns sums the same terms in another order. Forward over the inner index
    for 3 columns, backward otherwise: a different rounding, as on such a CPU."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def matmul(a, b):
        a, b = np.asarray(a), np.asarray(b)
        inner = range(a.shape[-1]) if b.shape[-1] == 3 else reversed(range(a.shape[-1]))
        out = np.zeros(a.shape[:-1] + b.shape[-1:])
        for j in inner:
            out += a[..., j, None] * b[..., j, None, :]
        return out


def test_a_metric_subset_is_bit_identical_whatever_blas_kernel_the_shape_picks(monkeypatch):
    """A metric's value must not come from a product whose shape depends on the other metrics asked
    for: with a shape-dependent BLAS, a subset still gives the intervals of the full set bit for bit."""
    import calibrate_cli.engine.devices as devices  # the numpy engine's array operations live there

    monkeypatch.setattr(devices, "np", _ShapeDependentBlas())
    logits, labels = _data(300, 8)
    full = bootstrap(logits, labels, n_resamples=20, seed=1)
    for names in (["ece"], ["adaece", "mce"], ["classwise_ece"], ["nll", "brier", "s99_share"], ["accuracy"]):
        part = bootstrap(logits, labels, n_resamples=20, seed=1, metrics=names)
        for name in names:
            assert part[name] == full[name], name


def test_seed_forms_and_thread_independence(monkeypatch):
    """An int seed and SeedSequence(seed) give the same values; one drawing thread or many, the same."""
    from calibrate_cli.bootstrap import draws  # (calibrate_cli.bootstrap as an attribute is the function)

    logits, labels = _data(500, 5)
    _, ref = bootstrap_values(logits, labels, n_resamples=30, seed=4, batch_size=7)
    _, seq = bootstrap_values(logits, labels, n_resamples=30, seed=np.random.SeedSequence(4), batch_size=7)
    monkeypatch.setattr(draws, "cpu_threads", lambda: 1)
    _, one = bootstrap_values(logits, labels, n_resamples=30, seed=4, batch_size=7)
    for name in METRIC_NAMES:
        np.testing.assert_array_equal(ref[name], seq[name])
        np.testing.assert_array_equal(ref[name], one[name])


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_bad_seed_is_an_input_error(seed):
    logits, labels = _data(50, 3)
    with pytest.raises(InputError, match="seed"):
        bootstrap(logits, labels, n_resamples=5, seed=seed)


# ---------------------------------------------------------------- custom metric functions


def _top1(scores, labels):
    return float(np.mean(np.argmax(scores, axis=1) == labels))


def test_custom_metric_sees_the_same_resamples_as_the_builtin_ones():
    """A hand-written accuracy resampled alongside the built-in one: the same values, resample by resample."""
    logits, labels = _data(700, 6)
    point, values = bootstrap_values(logits, labels, n_resamples=40, seed=2, batch_size=9, metrics=["accuracy", _top1])
    assert point["_top1"] == pytest.approx(point["accuracy"], abs=1e-15)
    np.testing.assert_allclose(values["_top1"], values["accuracy"], rtol=0, atol=1e-12)


def test_custom_metric_on_explicit_indices_and_mapping_names():
    logits, labels = _data(50, 3)
    idx = np.random.default_rng(0).integers(0, 50, size=(5, 50))

    def first_label(scores, labels):
        return float(labels[0])

    point, values = bootstrap_values(logits, labels, indices=idx, metrics={"first": first_label})
    assert point["first"] == labels[0]
    np.testing.assert_array_equal(values["first"], labels[idx[:, 0]])


def test_custom_metric_interval_leaves_out_nan_resamples():
    logits, labels = _data(200, 4)
    calls = []

    def sometimes(scores, labels):
        calls.append(1)
        return float("nan") if len(calls) % 2 == 0 else float(np.mean(labels))

    ci = bootstrap(logits, labels, n_resamples=20, metrics=[sometimes])["sometimes"]
    assert ci.n_resamples == 10 and len(calls) == 21  # the point value, then 20 resamples


@pytest.mark.parametrize(
    "metrics, message",
    [
        ([lambda s, y: 0.0], "needs a name"),
        ({"ece": _top1}, "already taken"),
        ([_top1, {"x": 1}], "metric name or a function"),
        ("ece", "string"),
        ([lambda s, y: "high"], "needs a name"),
        ({"text": lambda s, y: "high"}, "not a number"),
        (["ecee"], "unknown metric"),
    ],
)
def test_bad_custom_metrics_are_input_errors(metrics, message):
    logits, labels = _data(30, 3)
    with pytest.raises(InputError, match=message):
        bootstrap(logits, labels, n_resamples=3, metrics=metrics)


# ---------------------------------------------------------------- BCa, jackknife, and what an interval warns about


def test_bca_levels_by_hand():
    """z0 = Φ⁻¹(share below θ̂); a1,2 = Φ(z0 + (z0 + z)/(1 − a(z0 + z))); ends = those quantiles."""
    from scipy.stats import norm

    values = np.arange(1000, dtype=float) / 1000  # 300 values below 0.2995
    for a in (0.0, 0.05, -0.03):
        ci = confidence_interval(0.2995, values, level=0.9, method="bca", acceleration=a)
        z0 = norm.ppf(0.3)
        levels = [norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))) for z in (norm.ppf(0.05), norm.ppf(0.95))]
        expected = np.percentile(values, [100 * levels[0], 100 * levels[1]])
        assert (ci.low, ci.high) == pytest.approx(tuple(expected), abs=1e-12)
    # θ̂ at the median and a = 0: BCa is the percentile interval
    values = np.random.default_rng(0).normal(size=999)
    med = float(np.median(values))
    bca = confidence_interval(med, values, method="bca")
    pct = confidence_interval(med, values, method="percentile")
    assert (bca.low, bca.high) == pytest.approx((pct.low, pct.high), abs=1e-12)


def test_bca_counts_ties_with_the_estimate_as_half_below():
    values = np.array([0.0] * 4 + [1.0] * 92 + [2.0] * 4)  # θ̂ = 1: 4 below, 92 tied → share 0.5
    ci = confidence_interval(1.0, values, method="bca")
    assert (ci.low, ci.high) == (1.0, 1.0)  # z0 = 0: the 5 % and 95 % quantiles
    # counting only the values strictly below (share 0.04, z0 = −1.75) would give Φ(−5.1), Φ(−1.86): [0, 0]


def test_jackknife_acceleration_by_hand():
    # u = mean − θ_(i) = 7/3 − (1, 2, 4) = (4/3, 1/3, −5/3): Σu³ = −60/27, Σu² = 42/9
    assert jackknife_acceleration(np.array([1.0, 2.0, 4.0])) == pytest.approx((-60 / 27) / (6 * (42 / 9) ** 1.5))
    assert jackknife_acceleration(np.array([2.0, 2.0, 2.0])) == 0.0
    assert jackknife_acceleration(np.array([1.0, np.nan])) == 0.0


def test_leave_one_out_jackknife_of_accuracy_and_its_acceleration():
    """G = N is the ordinary jackknife: accuracy without sample i is (S − c_i)/(N − 1), and for a
    mean the acceleration is the skewness formula Σ(c − c̄)³ / (6 (Σ(c − c̄)²)^{3/2})."""
    logits, labels = _data(60, 3, seed=4)
    correct = (np.argmax(logits, axis=1) == labels).astype(float)
    jack = jackknife_values(logits, labels, metrics=["accuracy", "ece"], n_groups=1000)
    loo = (correct.sum() - correct) / (len(correct) - 1)
    np.testing.assert_allclose(np.sort(jack["accuracy"]), np.sort(loo), rtol=0, atol=1e-15)
    d = correct - correct.mean()
    assert jackknife_acceleration(jack["accuracy"]) == pytest.approx(np.sum(d**3) / (6 * np.sum(d**2) ** 1.5))
    assert jack["ece"].shape == (60,) and np.isfinite(jack["ece"]).all()


def test_grouped_jackknife_removes_each_sample_once():
    logits, labels = _data(250, 4, seed=2)
    correct = (np.argmax(logits, axis=1) == labels).astype(float)
    jack = jackknife_values(logits, labels, metrics=["accuracy"], n_groups=10)["accuracy"]
    # groups of 25: each value is (S − Σ_g c)/225, and the removed sums add up to S
    removed = correct.sum() - jack * 225
    assert jack.shape == (10,) and removed.sum() == pytest.approx(correct.sum())
    np.testing.assert_allclose(removed, np.rint(removed), atol=1e-9)


def test_interval_warnings_say_what_is_wrong():
    values = np.linspace(0.05, 0.09, 1000)  # every resample above θ̂ = 0.04: an upward-biased estimator
    basic = confidence_interval(0.04, values, method="basic", bounds=(0.0, 1.0))
    assert (basic.low, basic.high) == pytest.approx((0.08 - 0.088, 0.08 - 0.052))  # the formula, unclipped
    assert not basic.contains_point and basic.bias == pytest.approx(0.03)
    text = " | ".join(basic.warnings)
    assert "excludes the point estimate 0.04" in text and "100% of the resampled values lie above it" in text
    assert "biased upward" in text and "reaches below 0" in text
    assert basic.to_dict()["contains_point"] is False and basic.to_dict()["warnings"] == list(basic.warnings)
    bca = confidence_interval(0.04, values, method="bca", bounds=(0.0, 1.0))
    assert any("at its limit" in w for w in bca.warnings) and bca.low == pytest.approx(0.05)
    fine = confidence_interval(0.07, values, method="basic", bounds=(0.0, 1.0))
    assert fine.warnings == () and fine.contains_point


def test_too_few_resamples_warn():
    assert min_resamples(0.9) == 20 and min_resamples(0.95) == 40 and min_resamples(0.5) == 4
    assert end_noise(0.9, 100) > 0.1 > end_noise(0.9, 200) and end_noise(0.9, 1000) < 0.05
    one = confidence_interval(0.95, np.array([0.9506]), method="basic")
    assert any("only 1 resample: a 90% interval needs at least 20" in w for w in one.warnings)
    assert any("only 100 resamples" in w for w in confidence_interval(0.5, np.linspace(0, 1, 100)).warnings)
    assert confidence_interval(0.5, np.linspace(0, 1, 200)).warnings == ()


def test_bootstrap_flags_biased_metrics_and_bca_runs_end_to_end():
    rng = np.random.default_rng(0)
    n, k = 150, 10
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * 0.5
    logits[np.arange(n), labels] += 0.3
    basic = bootstrap(logits, labels, n_resamples=200, method="basic", metrics=["adaece", "classwise_ece", "accuracy"])
    assert not basic["classwise_ece"].contains_point and basic["classwise_ece"].warnings
    assert basic["adaece"].low < 0 and any("below 0" in w for w in basic["adaece"].warnings)
    assert basic["accuracy"].warnings == ()
    bca = bootstrap(logits, labels, n_resamples=200, method="bca", metrics=["adaece", "accuracy"])
    assert bca["adaece"].low >= 0 and bca["adaece"].method == "bca"
    assert bca["accuracy"].low <= bca["accuracy"].point <= bca["accuracy"].high
