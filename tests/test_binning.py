"""Bin edges, bin assignment and sufficient statistics, on hand-computed cases."""

import numpy as np
import pytest

from calibrate_cli.engine.binning import (
    add_bin_sums,
    assign_bins,
    bin_statistics,
    equal_mass_edges,
    torch_linspace_edges,
    uniform_edges,
)
from calibrate_cli.errors import InputError


def test_uniform_edges_are_correctly_rounded_b_over_m():
    # b / M as a Python float is the correctly rounded value; np.linspace misses some for M = 10.
    for m in (1, 2, 10, 15, 20, 100):
        edges = uniform_edges(m)
        assert edges.dtype == np.float64
        assert [float(e) for e in edges] == [b / m for b in range(m + 1)]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "15"])
def test_n_bins_must_be_a_positive_integer(bad):
    with pytest.raises(InputError, match="n_bins"):
        uniform_edges(bad)


def test_value_on_an_edge_goes_to_the_lower_bin():
    # Bins (b/M, (b+1)/M]: 0.3 with M = 10 is the upper edge of bin 2 (0.2, 0.3].
    edges = uniform_edges(10)
    assert assign_bins(np.array([0.3]), edges).tolist() == [2]
    assert assign_bins(np.array([np.nextafter(0.3, 1)]), edges).tolist() == [3]
    assert assign_bins(np.array([0.1, 0.2, 0.5, 0.7]), edges).tolist() == [0, 1, 4, 6]


def test_confidence_one_is_in_the_last_bin_and_zero_in_the_first():
    edges = uniform_edges(15)
    assert assign_bins(np.array([1.0, 0.0]), edges).tolist() == [14, 0]
    # values just above 1 (float rounding of probabilities) stay in the last bin
    assert assign_bins(np.array([1.0 + 1e-12]), edges).tolist() == [14]


def test_open_lowest_bin_drops_values_on_the_lowest_edge():
    edges = np.array([0.2, 0.5, 1.0])
    idx = assign_bins(np.array([0.2, 0.3, 0.5, 0.9]), edges, lowest_closed=False)
    assert idx.tolist() == [-1, 0, 0, 1]
    closed = assign_bins(np.array([0.2, 0.3, 0.5, 0.9]), edges)
    assert closed.tolist() == [0, 0, 0, 1]


def test_bin_statistics_by_hand_with_an_empty_bin():
    # M = 4: bins (0, .25], (.25, .5], (.5, .75], (.75, 1]
    conf = np.array([0.3, 0.4, 0.8, 0.9, 1.0])
    correct = np.array([1, 0, 1, 1, 0])
    stats = bin_statistics(conf, correct, uniform_edges(4))
    assert stats.count.tolist() == [0, 2, 0, 3]
    assert stats.sum_conf.tolist() == pytest.approx([0, 0.7, 0, 2.7])
    assert stats.sum_correct.tolist() == [0, 1, 0, 2]
    assert np.isnan(stats.accuracy[0]) and np.isnan(stats.gap[2])
    # ECE = (2/5)|0.5 - 0.35| + (3/5)|2/3 - 0.9| = 0.06 + 0.14 = 0.2
    assert stats.calibration_error() == pytest.approx(0.2, abs=1e-15)
    # MCE = max(0.15, 0.2333...)
    assert stats.max_calibration_error() == pytest.approx(0.9 - 2 / 3, abs=1e-15)
    rows = stats.to_rows()
    assert rows[0] == {"lower": 0.0, "upper": 0.25, "count": 0, "mean_confidence": None, "accuracy": None, "gap": None}
    assert rows[1]["accuracy"] == 0.5 and rows[1]["mean_confidence"] == pytest.approx(0.35)


def test_merge_of_chunks_equals_the_whole():
    rng = np.random.default_rng(1)
    conf = rng.uniform(0.1, 1, 1001)
    correct = rng.uniform(size=1001) < conf
    edges = uniform_edges(15)
    whole = bin_statistics(conf, correct, edges)
    merged = bin_statistics(conf[:400], correct[:400], edges).merge(bin_statistics(conf[400:], correct[400:], edges))
    assert merged.count.tolist() == whole.count.tolist()
    assert merged.n == whole.n == 1001
    np.testing.assert_allclose(merged.sum_conf, whole.sum_conf, rtol=1e-14)
    assert merged.calibration_error() == pytest.approx(whole.calibration_error(), abs=1e-15)
    with pytest.raises(ValueError):
        whole.merge(bin_statistics(conf, correct, uniform_edges(10)))


@pytest.mark.parametrize("engine", ["", "numpy"])
def test_pieces_added_in_order_give_the_sequential_sums_bit_for_bit(engine, monkeypatch):
    """add_bin_sums of consecutive pieces (C extension's loop, or numpy's add.at) = one float64 loop
    over the samples in order (tests/naive_reference's (b/M, (b+1)/M] bins), bit for bit: what a
    pass that bins each chunk as it arrives relies on (its determinism over chunk sizes). The arithmetic
    guarantees the bits: no exp or log, each bin adds the same float64 values in the same order, each
    addition correctly rounded, whichever loop adds them. Values on the edges, 0.0 and 1.0 included."""
    from naive_reference import equal_width_bin

    monkeypatch.setenv("CALIB_ENGINE", engine)
    rng = np.random.default_rng(11)
    m, n = 15, 5000
    conf = rng.uniform(0, 1, n)
    conf[::7] = rng.integers(0, m + 1, conf[::7].shape[0]) / m  # on the edges b/M, 0.0 and 1.0
    correct = rng.uniform(size=n) < conf
    count, sum_conf, sum_correct = [0] * m, [0.0] * m, [0.0] * m
    for v, c in zip(conf.tolist(), correct.tolist()):
        b = equal_width_bin(v, m)
        count[b] += 1
        sum_conf[b] += v
        sum_correct[b] += float(c)
    got = np.zeros(m, dtype=np.int64), np.zeros(m), np.zeros(m)
    cuts = [0, 1, 2, 999, 1000, 3333, n]
    for start, stop in zip(cuts, cuts[1:]):
        add_bin_sums(conf[start:stop], correct[start:stop], uniform_edges(m), *got)
    assert got[0].tolist() == count
    assert got[1].tolist() == sum_conf and got[2].tolist() == sum_correct  # the same floats, not close ones
    whole = bin_statistics(conf, correct, uniform_edges(m))
    assert whole.sum_conf.tolist() == sum_conf


def test_weights_equal_repeated_samples():
    conf = np.array([0.15, 0.55, 0.95, 0.95])
    correct = np.array([0, 1, 1, 0])
    w = np.array([2, 0, 1, 3])
    edges = uniform_edges(10)
    weighted = bin_statistics(conf, correct, edges, weights=w)
    repeated = bin_statistics(np.repeat(conf, w), np.repeat(correct, w), edges)
    assert weighted.count.tolist() == repeated.count.tolist()
    assert weighted.n == repeated.n == 6
    assert weighted.calibration_error() == pytest.approx(repeated.calibration_error(), abs=1e-15)


def test_equal_mass_edges_reference_construction():
    values = np.array([0.9, 0.3, 0.5, 0.7])
    # np.interp(linspace(0, 4, 3) = [0, 2, 4], [0, 1, 2, 3], [0.3, 0.5, 0.7, 0.9]) = [0.3, 0.7, 0.9]
    assert equal_mass_edges(values, 2).tolist() == pytest.approx([0.3, 0.7, 0.9])
    with pytest.raises(InputError):
        equal_mass_edges(np.array([]), 3)


def test_equal_mass_ties_never_depend_on_order():
    values = np.array([0.5] * 6 + [0.9] * 2)
    edges = equal_mass_edges(values, 4)
    idx = assign_bins(values, edges)
    rng = np.random.default_rng(0)
    for _ in range(5):
        perm = rng.permutation(values.size)
        assert assign_bins(values[perm], equal_mass_edges(values[perm], 4)).tolist() == idx[perm].tolist()
    # all the tied 0.5s share one bin (the closed first bin), the 0.9s another
    assert set(idx[:6].tolist()) == {0} and len(set(idx[6:].tolist())) == 1


def test_torch_linspace_edges_float32():
    edges = torch_linspace_edges(15)
    assert edges.dtype == np.float32 and edges[0] == 0 and edges[-1] == 1
    np.testing.assert_allclose(edges, np.arange(16) / 15, atol=1e-7)
    # 1 − 3·float32(1/15) = 0.79999998957… exactly, rounded once to float32: 0.800000011920929
    # (rounding the product 3·step to float32 first would give 0.79999995)
    assert float(edges[12]) == 0.800000011920929


@pytest.mark.parametrize("m", [7, 10, 15, 20, 30, 100])
def test_torch_linspace_edges_equal_torch(m):
    torch = pytest.importorskip("torch")
    assert torch_linspace_edges(m).tolist() == torch.linspace(0, 1, m + 1).tolist()


def test_uniform_fast_path_equals_searchsorted_on_edges_and_neighbours():
    for m in (2, 3, 7, 10, 15, 20, 100):
        edges = uniform_edges(m)
        near = np.concatenate([edges, np.nextafter(edges, 2), np.nextafter(edges, -1), [0.0, 1.0, 1.5, -0.1]])
        rng = np.random.default_rng(m)
        values = np.concatenate([near, rng.uniform(0, 1, 5000), np.arange(0, 1001) / 1000])
        expected = np.searchsorted(edges, values, side="left") - 1
        expected = np.minimum(expected, m - 1)
        got = assign_bins(values, edges, lowest_closed=False)
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("lowest_closed", [True, False])
def test_stacked_statistics_equal_each_column_alone(lowest_closed):
    """(N, S) values give, per column, exactly the 1-D statistics (edge values and 0 included)."""
    rng = np.random.default_rng(4)
    edges = uniform_edges(10)
    values = rng.choice(np.concatenate([edges, rng.random(20)]), size=(50, 3))
    targets = rng.integers(0, 2, size=(50, 3)).astype(bool)
    stacked = bin_statistics(values, targets, edges, lowest_closed=lowest_closed)
    assert stacked.count.shape == (3, 10) and stacked.n == 50
    for j in range(3):
        alone = bin_statistics(values[:, j], targets[:, j], edges, lowest_closed=lowest_closed)
        np.testing.assert_array_equal(stacked.count[j], alone.count)
        np.testing.assert_array_equal(stacked.sum_conf[j], alone.sum_conf)
        np.testing.assert_array_equal(stacked.sum_correct[j], alone.sum_correct)
        assert stacked.calibration_error()[j] == alone.calibration_error()
