"""The uncertainty drawn on a reliability diagram (calibrate_cli.plots.uncertainty) and `calib plot
--bin-intervals / --consistency-bands / --corp`: asserts on the artists' data, not on pixels."""

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from calibrate_cli.cli import cli  # noqa: E402
from calibrate_cli.diagnostics import clopper_pearson, consistency_bands, corp_reliability, top_label  # noqa: E402
from calibrate_cli.plots.uncertainty import uncertainty_figure  # noqa: E402


@pytest.fixture()
def data():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 200)
    logits = rng.normal(size=(200, 3)) * 2
    logits[np.arange(200), labels] += 1
    return logits, labels


def test_artists_hold_the_numbers(data):
    logits, labels = data
    fig, diagram, what = uncertainty_figure(logits, labels, n_bins=10, interval_level=0.9, band_resamples=50,
                                            corp=True, seed=2)
    conf, correct = top_label(logits, labels)
    # error bars: one per non-empty bin, from the Clopper–Pearson ends
    segments = diagram.interval_bars_.lines[2][0].get_segments()
    nonempty = np.flatnonzero(diagram.bins.count > 0)
    assert len(segments) == nonempty.size
    for seg, b in zip(segments, nonempty):
        members = correct[(conf > b / 10) & (conf <= (b + 1) / 10)]
        low, high = clopper_pearson(int(members.sum()), members.size, 0.9)
        assert seg[0][1] == pytest.approx(float(low)) and seg[1][1] == pytest.approx(float(high))
        assert seg[0][0] == pytest.approx((b + 0.5) / 10)
    # bands: the seeded library call, one patch per bin some resample filled
    bands = consistency_bands(conf, 10, n_resamples=50, seed=2)
    assert np.array_equal(what.bands.low, bands.low, equal_nan=True)
    assert len(diagram.band_patches_) == int(np.sum(np.isfinite(bands.low)))
    # CORP: the PAV curve at the distinct confidences
    curve = corp_reliability(conf, correct)
    assert np.array_equal(diagram.corp_line_.get_xdata(), curve.x)
    assert np.array_equal(diagram.corp_line_.get_ydata(), curve.recalibrated)
    key = [t.get_text() for t in fig.legends[-1].get_texts()]
    assert "90% Clopper–Pearson interval" in key and "CORP (PAV) curve" in key
    assert "90% consistency band (calibrated)" in key and "Accuracy" in key


def test_binary_scores_start_at_one_half():
    rng = np.random.default_rng(1)
    p = rng.uniform(0, 1, 100)
    y = (rng.random(100) < p).astype(int)
    fig, diagram, what = uncertainty_figure(p, y, input_kind="probs", n_bins=4, band_resamples=30)
    for patch in diagram.band_patches_:
        assert patch.get_paths()[0].vertices[:, 0].min() >= 0.5
    assert diagram.interval_bars_ is None and diagram.corp_line_ is None


def test_n_equals_one():
    fig, diagram, what = uncertainty_figure(np.array([[0.2, 0.8]]), np.array([1]), input_kind="probs", n_bins=5,
                                            interval_level=0.95, corp=True)
    assert what.corp.x.tolist() == [0.8] and what.corp.recalibrated.tolist() == [1.0]
    assert len(diagram.interval_bars_.lines[2][0].get_segments()) == 1


def test_cli_draws_the_picture(runner, tmp_path, data):
    logits, labels = data
    np.save(tmp_path / "s.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    out = tmp_path / "sure.png"
    result = runner.invoke(cli, ["plot", str(tmp_path / "s.npy"), str(tmp_path / "y.npy"), "-o", str(out),
                                 "--bin-intervals", "0.95", "--consistency-bands", "40", "--corp"])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    bad = runner.invoke(cli, ["plot", str(tmp_path / "s.npy"), str(tmp_path / "y.npy"), "-o", str(tmp_path / "b.png"),
                              "--corp", "--strategy", "quantile"])
    assert bad.exit_code == 2 and "--corp" in bad.stderr
    assert "--consistency-bands" in runner.invoke(cli, ["plot", "--help"]).stdout
