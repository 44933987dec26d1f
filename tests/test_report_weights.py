"""The HTML report with sample weights (``build_report(weights=...)``, ``calib report --weights``):
whole-number weights give the report of the repeated rows (docs/weights.md); the section "Beyond one
number", which takes no weights, is left out and the page says so."""

from __future__ import annotations

import numpy as np
import pytest
from libm import assert_agree

from calibrate_cli.cli import cli
from calibrate_cli.errors import InputError
from calibrate_cli.report import build_report


def _sets(seed=3):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(700, 5)) * 3).astype(np.float64)
    y = rng.integers(0, 5, 700)
    x[np.arange(700), y] += 2.0
    w = rng.integers(0, 4, 400).astype(np.float64)
    return x[:400], y[:400], x[400:], y[400:], w


@pytest.mark.parametrize("search", ["grid", "nll"])
def test_whole_number_weights_give_the_report_of_the_repeated_rows(search):
    vx, vy, _, _, w = _sets()
    rows = np.repeat(np.arange(400), w.astype(int))
    weighted = build_report(vx, vy, weights=w, search=search, beyond=False)
    repeated = build_report(vx[rows], vy[rows], search=search, beyond=False)
    assert weighted.temperature == pytest.approx(repeated.temperature, rel=1e-9)
    for side in ("before", "after"):
        got, want = getattr(weighted, side).metrics, getattr(repeated, side).metrics
        # the weighted metrics (N the rows, Σw the weight) against those of the repeated rows
        assert_agree({k: got[k] for k in ("ece", "nll", "brier", "accuracy", "mce")},
                     {k: want[k] for k in ("ece", "nll", "brier", "accuracy", "mce")}, rel=1e-9, abs=1e-12)
    assert_agree([v for _, v in weighted.ece_curve], [v for _, v in repeated.ece_curve], rel=1e-9, abs=1e-12)
    assert weighted.weights == ("weights", float(w.sum())) and repeated.weights is None


def test_the_test_set_is_not_weighted_and_beyond_is_left_out():
    vx, vy, tx, ty, w = _sets()
    rows = np.repeat(np.arange(400), w.astype(int))
    weighted = build_report(vx, vy, tx, ty, weights=w, weights_name="w.npy")
    repeated = build_report(vx[rows], vy[rows], tx, ty, beyond=False)
    assert weighted.beyond is None
    assert any("Beyond one number" in text and "w.npy" in text for text in weighted.warnings)
    assert weighted.after.metrics["ece"] == pytest.approx(repeated.after.metrics["ece"], rel=1e-9)
    assert weighted.before.metrics == repeated.before.metrics  # the test set at T = 1: the same numbers
    assert weighted.before.total_weight is None


def test_bad_weights_are_refused():
    vx, vy, _, _, w = _sets()
    with pytest.raises(InputError, match="weights"):
        build_report(vx, vy, weights=-w)
    with pytest.raises(InputError, match="weights"):
        build_report(vx, vy, weights=w[:10])


def test_calib_report_weights(runner, tmp_path):
    vx, vy, tx, ty, w = _sets()
    for name, array in (("v.npy", vx), ("vy.npy", vy), ("t.npy", tx), ("ty.npy", ty), ("w.npy", w)):
        np.save(tmp_path / name, array)
    paths = [str(tmp_path / n) for n in ("v.npy", "vy.npy")]
    out = tmp_path / "r.html"
    result = runner.invoke(cli, ["report", *paths, "-o", str(out), "--weights", str(tmp_path / "w.npy"),
                                 "--bootstrap", "0"])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert f"weighted by {tmp_path / 'w.npy'} (Σw = {w.sum():,.6g}): the fit, the curves and the metrics" in page
    assert "validation weights" in page and "left out" in page
    bad = tmp_path / "bad.npy"
    np.save(bad, -w)
    result = runner.invoke(cli, ["report", *paths, "-o", str(tmp_path / "r2.html"), "--weights", str(bad)])
    assert result.exit_code == 2 and "Traceback" not in result.output and not (tmp_path / "r2.html").exists()
