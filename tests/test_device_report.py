"""calibrate_cli.evaluate on a torch device for host arrays (evaluate.device_report, engine.device_eval's
host_metric_sums): the rows stream to the device in blocks and only sums come back. Checked against the
independent float64 loops of tests/naive_reference.py and tests/naive_metrics.py (the CPU torch device
here; the GPU where there is one)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import naive_metrics  # noqa: E402
import naive_reference as naive  # noqa: E402

from calibrate_cli import evaluate  # noqa: E402
from calibrate_cli.engine import device_eval  # noqa: E402
from calibrate_cli.errors import InputError  # noqa: E402

from test_device_eval import reference_metrics, synthetic  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["torch-cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU"))]


def reference(scores, labels, input_kind="logits", n_bins=15) -> dict:
    """The default report's metrics by the independent float64 loops (SmoothECE: against the CPU's)."""
    out = reference_metrics(scores, labels, input_kind, n_bins)
    scores = np.asarray(scores, dtype=np.float64)
    probs = scores if input_kind == "probs" else np.array(naive.softmax_rows(scores))
    out["classwise_ece"] = naive.classwise_ece(probs, labels, n_bins)
    out["ks_ce"] = naive_metrics.ks_ce(probs, labels)
    return out


def assert_reference(report, scores, labels, input_kind="logits", n_bins=15):
    expected = reference(scores, labels, input_kind, n_bins)
    for name, value in expected.items():
        got = report.metrics[name]
        if value is None:
            assert got is None, name
        else:
            assert got == pytest.approx(value, rel=1e-12, abs=1e-15), name


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few rows: the streaming over blocks, not one block holding everything."""
    monkeypatch.setattr(device_eval, "EAGER_CHUNK_VALUES", 53)
    monkeypatch.setattr(device_eval, "COMPILED_CHUNK_VALUES", 4099)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n, k", [(997, 10), (400, 2), (1, 3), (300, 37)])
def test_memory_mapped_logits_match_the_independent_loops(tmp_path, small_blocks, device, n, k):
    x, y = synthetic(n, k, seed=n + k)
    np.save(tmp_path / "x.npy", x)
    report = evaluate(np.load(tmp_path / "x.npy", mmap_mode="r"), y, device=device)
    assert report.device == device
    assert_reference(report, x, y)
    cpu = evaluate(x, y)
    assert set(report.metrics) == set(cpu.metrics)
    for name, value in cpu.metrics.items():  # SmoothECE too, which the loops above leave out
        if value is None:
            assert report.metrics[name] is None
        else:
            assert report.metrics[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name
    np.testing.assert_array_equal(report.bins.count, cpu.bins.count)
    np.testing.assert_allclose(report.adaptive_bins.edges, cpu.adaptive_bins.edges, rtol=1e-12)
    np.testing.assert_allclose(report.classwise_ece_per_class, cpu.classwise_ece_per_class, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("device", DEVICES)
def test_probabilities_ties_and_float64(small_blocks, device):
    x, y = synthetic(500, 4, seed=3, dtype=np.float64)
    x[:50] = 0.0  # rows of equal logits: p = 1/4 each, argmax the first
    x[50:60] = x[40:50]
    p = np.exp(x - x.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    assert_reference(evaluate(x, y, device=device), x, y)
    assert_reference(evaluate(p, y, device=device, input_kind="probs"), p, y, "probs")


@pytest.mark.parametrize("device", DEVICES)
def test_bad_values_are_one_line_errors_naming_the_row(small_blocks, device):
    x, y = synthetic(300, 5, seed=4)
    x[123, 2] = np.nan
    with pytest.raises(InputError, match=r"^logits.npy: scores contain NaN \(first at row 123\)$"):
        evaluate(x, y, device=device, scores_name="logits.npy")
    x[123, 2] = np.inf
    with pytest.raises(InputError, match=r"Inf \(first at row 123\)"):
        evaluate(x, y, device=device)
    p = np.full((10, 3), 0.3)
    with pytest.raises(InputError, match="10 rows do not"):
        evaluate(p, np.zeros(10, dtype=int), device=device, input_kind="probs")


def test_metrics_the_device_pass_does_not_make_take_the_summary_pass():
    x, y = synthetic(200, 6, seed=5)
    report = evaluate(x, y, device="torch-cpu", metrics=["ace"])
    assert report.metrics["ace"] == pytest.approx(evaluate(x, y, metrics=["ace"]).metrics["ace"], rel=1e-12)
    assert report.device == "torch-cpu"
