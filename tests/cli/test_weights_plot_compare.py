"""`calib plot --weights`: the diagram of the weighted bins, equal to the diagram of repeated rows."""

import numpy as np
import pytest
from click.testing import CliRunner

from calibrate_cli.cli import cli as main
from calibrate_cli.evaluate import evaluate
from calibrate_cli.plots.diagram import ReliabilityDiagram


def data(n=400, k=4, seed=2):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    x = rng.standard_normal((n, k)) * 2
    x[np.arange(n), y] += 1.5
    return x, y, rng.integers(0, 4, n).astype(float)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_whole_number_weights_draw_the_bins_of_repeated_rows(strategy):
    x, y, w = data()
    weighted = ReliabilityDiagram.from_report(evaluate(x, y, weights=w), strategy=strategy)
    rows = np.repeat(np.arange(len(y)), w.astype(int))
    repeated = ReliabilityDiagram.from_predictions(x[rows], y[rows], strategy=strategy)
    np.testing.assert_allclose(weighted.bins.count, repeated.bins.count, rtol=0, atol=1e-9)
    np.testing.assert_allclose(weighted.bins.sum_conf, repeated.bins.sum_conf, rtol=1e-12)
    np.testing.assert_allclose(weighted.bins.sum_correct, repeated.bins.sum_correct, rtol=1e-12)
    np.testing.assert_allclose(weighted.bins.edges, repeated.bins.edges, rtol=1e-12)
    assert weighted.ece == pytest.approx(repeated.ece, rel=1e-12)


def test_cli_draws_weighted_and_refuses_what_takes_no_weights(tmp_path):
    x, y, w = data()
    for name, array in (("x.npy", x), ("y.npy", y), ("w.npy", w)):
        np.save(tmp_path / name, array)
    args = [str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--weights", str(tmp_path / "w.npy")]
    out = tmp_path / "d.png"
    result = CliRunner().invoke(main, ["plot", *args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    refused = CliRunner().invoke(main, ["plot", *args, "-o", str(tmp_path / "c.png"), "--classwise"])
    assert refused.exit_code == 2 and "--weights draws one model's diagram" in refused.output
    np.save(tmp_path / "bad.npy", -w)
    bad = CliRunner().invoke(main, ["plot", *args[:2], "--weights", str(tmp_path / "bad.npy"), "-o",
                                    str(tmp_path / "b.png")])
    assert bad.exit_code == 2 and "bad.npy" in bad.output and "Traceback" not in bad.output


def test_compare_with_whole_number_weights_equals_repeated_rows(tmp_path):
    import json

    x, y, w = data(seed=5)
    rows = np.repeat(np.arange(len(y)), w.astype(int))
    files = {"a.npy": x, "b.npy": 0.6 * x, "y.npy": y, "w.npy": w,
             "ra.npy": x[rows], "rb.npy": 0.6 * x[rows], "ry.npy": y[rows]}
    for name, array in files.items():
        np.save(tmp_path / name, array)
    p = lambda name: str(tmp_path / name)  # noqa: E731
    weighted = CliRunner().invoke(main, ["compare", p("a.npy"), p("y.npy"), p("b.npy"), p("y.npy"), "--weights",
                                         p("w.npy"), "--bootstrap", "0", "--format", "json"])
    repeated = CliRunner().invoke(main, ["compare", p("ra.npy"), p("ry.npy"), p("rb.npy"), p("ry.npy"),
                                         "--bootstrap", "0", "--format", "json"])
    assert weighted.exit_code == 0 and repeated.exit_code == 0, weighted.output + repeated.output
    got, want = json.loads(weighted.output), json.loads(repeated.output)
    assert got["inputs"]["weights"] == p("w.npy")
    names = [m for m in want["differences"] if m != "ace"]
    assert names
    for name in names:
        for side in ("a", "b", "difference"):
            g, e = got["differences"][name][side], want["differences"][name][side]
            assert (g is None) == (e is None), (name, side)
            if e is not None:
                assert g == pytest.approx(e, rel=1e-9, abs=1e-12), (name, side)
    np.save(tmp_path / "bad.npy", np.r_[w[:-1], np.nan])
    bad = CliRunner().invoke(main, ["compare", p("a.npy"), p("y.npy"), p("b.npy"), p("y.npy"), "--weights",
                                    p("bad.npy")])
    assert bad.exit_code == 2 and "bad.npy" in bad.output and "finite" in bad.output
