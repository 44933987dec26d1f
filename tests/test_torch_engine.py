"""The torch engine of the summary pass (calibrate_cli.engine.torch_pass) equals the numpy engine.

``device="torch-cpu"`` runs the very code that runs on a GPU, on the CPU; the CUDA tests at the end
run only where torch sees a GPU. Expected values come from the numpy engine (itself checked against
tests/naive_reference.py elsewhere) — what is asserted here is that the devices agree.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calibrate_cli.engine import torch_pass as torch_engine  # noqa: E402
from calibrate_cli.errors import InputError  # noqa: E402
from calibrate_cli.evaluate import evaluate  # noqa: E402
from calibrate_cli.data.predictions import as_predictions  # noqa: E402
from calibrate_cli.engine.summary import summarize  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


def _logits(n, k, seed, ties=True):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, k)) * 3).astype(np.float32)
    if ties:
        x[: n // 3] = np.round(x[: n // 3])  # many exact ties, also of the maximum
        x[n // 3 : n // 3 + 5] = 0.0  # all classes equal: p = 1/K, argmax 0
    return x, rng.integers(0, k, n)


def _probs_on_edges(n, seed):
    """Binary probabilities on the bin edges b/M (M = 15, 10), exactly 1.0 and 0.0 (infinite NLL)."""
    rng = np.random.default_rng(seed)
    p1 = rng.choice(np.concatenate([np.arange(16) / 15, np.arange(11) / 10, [0.0, 1.0, 0.5]]), size=n)
    return np.stack([1 - p1, p1], axis=1), rng.integers(0, 2, n)


def _assert_summaries_agree(a, b, tol):
    assert (a.n, a.k, a.compat) == (b.n, b.k, b.compat)
    np.testing.assert_array_equal(a.correct, b.correct)
    if a.top5 is None:
        assert b.top5 is None
    else:
        np.testing.assert_array_equal(a.top5, b.top5)
    assert a.confidences.dtype == b.confidences.dtype
    np.testing.assert_allclose(b.confidences, a.confidences, rtol=0, atol=tol)
    np.testing.assert_array_equal(np.isinf(a.nll), np.isinf(b.nll))
    finite = np.isfinite(a.nll)
    np.testing.assert_allclose(b.nll[finite], a.nll[finite], rtol=0, atol=tol)
    np.testing.assert_allclose(b.brier, a.brier, rtol=0, atol=tol)
    np.testing.assert_array_equal(a.classwise.count, b.classwise.count)
    np.testing.assert_array_equal(a.classwise.sum_correct, b.classwise.sum_correct)
    np.testing.assert_allclose(b.classwise.sum_conf, a.classwise.sum_conf, rtol=0, atol=tol * a.n)


def _assert_reports_agree(a, b, tol=1e-9):
    assert a.metrics.keys() == b.metrics.keys()
    for name, value in a.metrics.items():
        if value is None or not np.isfinite(value):
            assert b.metrics[name] == value, name
        else:
            assert b.metrics[name] == pytest.approx(value, abs=tol), name
    np.testing.assert_allclose(b.classwise_ece_per_class, a.classwise_ece_per_class, rtol=0, atol=tol)
    np.testing.assert_array_equal(a.bins.count, b.bins.count)
    # (equal-mass edges are interpolated between confidences that may differ in the last bit: an
    # edge sample can change bins, which moves AdaECE by far less than the tolerance)


@pytest.mark.parametrize("compat", [None, "focal-calibration"])
@pytest.mark.parametrize("n,k,seed", [(400, 7, 0), (300, 2, 1), (1, 3, 2), (257, 12, 3), (64, 100, 4)])
def test_torch_cpu_equals_numpy_on_logits_with_ties(n, k, seed, compat):
    x, y = _logits(n, k, seed)
    pred = as_predictions(x, y, "logits")
    a = summarize(pred, compat=compat, engine="numpy")
    b = summarize(pred, compat=compat, device="torch-cpu")
    # float32 arithmetic in the compat mode (the reference code's): exp may differ in the last float32 bit
    _assert_summaries_agree(a, b, 1e-12 if compat is None else 1e-6)
    _assert_reports_agree(
        evaluate(x, y, compat=compat), evaluate(x, y, compat=compat, device="torch-cpu"), 1e-9 if compat is None else 1e-6
    )


def test_ties_take_the_lowest_index_on_torch():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [0.0, 5.0, 5.0]])
    y = np.array([2, 0, 1])
    s = summarize(as_predictions(x, y, "logits"), device="torch-cpu")
    assert s.correct.tolist() == [False, True, True]


@pytest.mark.parametrize("compat", [None, "focal-calibration"])
def test_probabilities_on_bin_edges_and_confidence_one(compat):
    p, y = _probs_on_edges(500, 5)
    for n_bins in (15, 10):
        pred = as_predictions(p, y, "probs")
        a = summarize(pred, n_bins=n_bins, compat=compat, engine="numpy")
        b = summarize(pred, n_bins=n_bins, compat=compat, device="torch-cpu")
        # probabilities are only cast: every value, bin and sum is the numpy engine's
        _assert_summaries_agree(a, b, 1e-15 if compat is None else 1e-7)
        assert np.isinf(a.nll).any() and (a.confidences == 1.0).any()
        _assert_reports_agree(
            evaluate(p, y, input_kind="probs", n_bins=n_bins, compat=compat),
            evaluate(p, y, input_kind="probs", n_bins=n_bins, compat=compat, device="torch-cpu"),
        )


@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_one_dimensional_binary_scores(kind):
    rng = np.random.default_rng(7)
    s = rng.normal(size=300) * 2 if kind == "logits" else rng.random(300)
    s[:20] = 0.0 if kind == "logits" else 0.5
    y = rng.integers(0, 2, 300)
    _assert_reports_agree(evaluate(s, y, input_kind=kind), evaluate(s, y, input_kind=kind, device="torch-cpu"))


def test_chunked_transfer_with_tiny_chunks(monkeypatch):
    """Rows moved to the device a few at a time (as an input larger than the GPU's memory): same numbers."""
    x, y = _logits(1001, 9, 11)
    reference = evaluate(x, y)
    seen = []
    original = torch_engine.torch_chunk

    def spy(ops, scores, *args, **kwargs):
        seen.append(scores.shape[0])
        return original(ops, scores, *args, **kwargs)

    monkeypatch.setattr(torch_engine, "torch_chunk", spy)
    monkeypatch.setattr(torch_engine, "TORCH_CHUNK_ELEMENTS", 9 * 64)
    _assert_reports_agree(reference, evaluate(x, y, device="torch-cpu"))
    assert len(seen) == 16 and max(seen) == 64 and sum(seen) == 1001


def test_many_bins_take_sparse_cells():
    """K·M far beyond the chunk's values: the classwise cells stay sparse, as the numpy engine's."""
    x, y = _logits(4, 3000, 12)
    a, b = evaluate(x, y, n_bins=1000), evaluate(x, y, n_bins=1000, device="torch-cpu")
    _assert_reports_agree(a, b)
    sa = summarize(as_predictions(x, y, "logits"), n_bins=1000, engine="numpy").classwise
    sb = summarize(as_predictions(x, y, "logits"), n_bins=1000, device="torch-cpu").classwise
    assert type(sa).__name__ == type(sb).__name__ == "SparseBinStats"
    np.testing.assert_array_equal(sa.keys, sb.keys)
    np.testing.assert_array_equal(sa.counts, sb.counts)


def test_memory_mapped_input(tmp_path):
    """A read-only memory-mapped chunk goes to the device without torch's non-writable warning."""
    import warnings

    x, y = _logits(500, 6, 13)
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = evaluate(mapped, y, device="torch-cpu")
    _assert_reports_agree(evaluate(x, y), report)


def test_report_records_the_device():
    x, y = _logits(50, 4, 14)
    assert evaluate(x, y).device == "cpu" and evaluate(x, y).to_dict()["device"] == "cpu"
    report = evaluate(x, y, device="torch-cpu")
    assert report.device == "torch-cpu" and report.to_dict()["device"] == "torch-cpu"
    assert evaluate(x, y, device="auto").device == ("cuda" if HAS_CUDA else "cpu")


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal on a machine without a GPU")
def test_cuda_without_a_gpu_is_an_input_error():
    x, y = _logits(10, 3, 15)
    with pytest.raises(InputError, match="CUDA"):
        evaluate(x, y, device="cuda")


def test_missing_torch_is_one_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    x, y = _logits(10, 3, 16)
    with pytest.raises(InputError, match=r"needs torch.*pip install torch==2\.13\.0"):
        evaluate(x, y, device="torch-cpu")
    assert evaluate(x, y, device="auto").device == "cpu"  # auto falls back to numpy


# ------------------------------------------------------------------------------------- on a GPU


@cuda_only
@pytest.mark.parametrize("compat", [None, "focal-calibration"])
def test_cuda_equals_numpy(compat):
    x, y = _logits(3000, 10, 20)
    tol = 1e-9 if compat is None else 1e-6
    _assert_reports_agree(evaluate(x, y, compat=compat), evaluate(x, y, compat=compat, device="cuda"), tol)
    p, t = _probs_on_edges(2000, 21)
    _assert_reports_agree(evaluate(p, t, input_kind="probs"), evaluate(p, t, input_kind="probs", device="cuda"))


@cuda_only
def test_cuda_chunked_transfer_and_repeatability(monkeypatch):
    monkeypatch.setattr(torch_engine, "TORCH_CHUNK_ELEMENTS", 1 << 12)
    x, y = _logits(20_000, 10, 22)
    a, b = evaluate(x, y, device="cuda"), evaluate(x, y, device="cuda")
    assert a.metrics == b.metrics  # no atomics in the float sums: a GPU run repeats bit for bit
    _assert_reports_agree(evaluate(x, y), a)


# ------------------------------------------------------------------------------- temperature fits


@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_temperature_fits_on_torch_cpu_equal_the_cpu(monkeypatch, kind):
    from calibrate_cli import fit_temperature

    x, y = _logits(600, 6, 30, ties=True)
    if kind == "probs":  # probabilities with zeros: log p = −inf, which stays 0 at every T
        e = np.exp(x.astype(np.float64))
        x = e / e.sum(axis=1, keepdims=True)
        x[x < 0.02] = 0.0
        x /= x.sum(axis=1, keepdims=True)
        y = x.argmax(axis=1)
    monkeypatch.setattr(torch_engine, "TORCH_CHUNK_ELEMENTS", 6 * 100 * 7)  # several chunks (7 rows at 100 T)
    for kwargs in ({"objective": "ece"}, {"objective": "nll"}, {"search": "nll"}):
        if kind == "probs" and kwargs != {"objective": "ece"}:
            continue
        a = fit_temperature(x, y, input_kind=kind, **kwargs)
        b = fit_temperature(x, y, input_kind=kind, device="torch-cpu", **kwargs)
        assert b.temperature == pytest.approx(a.temperature, rel=1e-10), kwargs
        assert b.objective_value == pytest.approx(a.objective_value, abs=1e-12), kwargs
        assert b.objective_at_one == pytest.approx(a.objective_at_one, abs=1e-12), kwargs
        if a.curve:
            np.testing.assert_allclose([v for _, v in b.curve], [v for _, v in a.curve], rtol=0, atol=1e-12)


@cuda_only
def test_cuda_temperature_fits_equal_the_cpu():
    from calibrate_cli import fit_temperature

    x, y = _logits(5000, 10, 31, ties=True)
    for kwargs in ({"objective": "ece"}, {"objective": "nll"}, {"search": "nll"}):
        a, b = fit_temperature(x, y, **kwargs), fit_temperature(x, y, device="cuda", **kwargs)
        assert b.temperature == pytest.approx(a.temperature, rel=1e-10)
        assert b.objective_value == pytest.approx(a.objective_value, abs=1e-12)
