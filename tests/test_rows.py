"""The row pass written once (calibrate_cli.engine.rows) on numpy and torch: each value against an
independent float64 loop (tests/naive_reference.py), and torch against numpy within the contract of
tests/libm.py, from the summary pass to the reports and the temperature fits. ``torch-cpu`` runs the
very code a GPU runs; the CUDA tests run only where torch sees one."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import naive_reference as naive  # noqa: E402
from cases import logits_with_ties  # noqa: E402
from libm import assert_agree, assert_bins_agree  # noqa: E402

from calibrate_cli import evaluate  # noqa: E402
from calibrate_cli.evaluate import report_from_summary  # noqa: E402
from calibrate_cli.data.predictions import as_predictions  # noqa: E402
from calibrate_cli.engine import torch_pass  # noqa: E402
from calibrate_cli.engine.binning import uniform_edges  # noqa: E402
from calibrate_cli.engine.devices import array_ops  # noqa: E402
from calibrate_cli.engine.rows import grid_rows, nll_newton_sums, row_stats  # noqa: E402
from calibrate_cli.engine.summary import summarize  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
OPS = ["cpu", "torch-cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU"))]


def _probs_on_edges(n, seed):
    """Binary probabilities on the bin edges b/15 and b/10, exactly 0 and 1 (an infinite NLL)."""
    rng = np.random.default_rng(seed)
    p1 = rng.choice(np.concatenate([np.arange(16) / 15, np.arange(11) / 10]), size=n)
    return np.stack([1 - p1, p1], axis=1), rng.integers(0, 2, n)


CASES = {  # name: (scores, labels, input kind)
    "logits-ties": (*logits_with_ties(300, 7, 0), "logits"),
    "K=2": (*logits_with_ties(200, 2, 1), "logits"),
    "N=1": (*logits_with_ties(1, 3, 2), "logits"),
    "K=12": (*logits_with_ties(257, 12, 3), "logits"),
    "probs-on-edges": (*_probs_on_edges(400, 4), "probs"),
    "binary-1d": (np.linspace(-3, 3, 101), np.arange(101) % 2, "logits"),
}


@pytest.mark.parametrize("device", OPS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_row_stats_equal_a_float64_loop(case, device):
    pred = as_predictions(*CASES[case])
    x, y, n_bins = pred.scores, pred.labels, 10
    probs = naive.softmax_rows(x) if pred.input_kind == "logits" else np.asarray(x, dtype=np.float64).tolist()
    ops = array_ops(device)
    s = row_stats(ops, ops.asarray(x), ops.asarray(y.astype(np.int64)), uniform_edges(n_bins),
                  is_logits=pred.input_kind == "logits", top5=True)
    conf, top = naive.top_label(probs)
    np.testing.assert_allclose(ops.to_numpy(s.conf), conf, rtol=1e-15, atol=0)
    assert ops.to_numpy(s.correct).tolist() == [p == t for p, t in zip(top, y.tolist())]
    for i, (row, label) in enumerate(zip(probs, y.tolist())):  # one sample at a time: NLL, Brier, top-5
        expected_nll = naive.nll(x[i:i + 1], [label]) if pred.input_kind == "logits" else naive.nll_probs([row], [label])
        assert ops.to_numpy(s.nll)[i] == pytest.approx(expected_nll, rel=1e-14, abs=1e-15)
        assert ops.to_numpy(s.brier)[i] == pytest.approx(naive.brier([row], [label]), rel=1e-14, abs=1e-15)
        assert ops.to_numpy(s.top5)[i] == (naive.top5_accuracy([row], [label]) == 1.0)
    count, sum_p, sum_y = (np.zeros((len(probs[0]), n_bins)) for _ in range(3))
    for row, label in zip(probs, y.tolist()):
        for k, p in enumerate(row):
            b = naive.equal_width_bin(p, n_bins)
            count[k, b] += 1
            sum_p[k, b] += p
            sum_y[k, b] += k == label
    np.testing.assert_array_equal(s.classwise[0], count)
    np.testing.assert_array_equal(s.classwise[2], sum_y)
    np.testing.assert_allclose(s.classwise[1], sum_p, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("device", OPS)
def test_temperature_passes_equal_a_float64_loop(device):
    z, y = np.array([[0.0, math.log(3.0), -1.0], [2.0, 2.0, -np.inf]]), np.array([0, 1])
    ops = array_ops(device)
    d, beta = z - z.max(axis=1, keepdims=True), 0.5
    total = grad = var = 0.0
    for row, label in zip(d, y):
        w = [math.exp(beta * v) for v in row]
        s = sum(w)
        m1 = sum(wk * (v if np.isfinite(v) else 0.0) for wk, v in zip(w, row)) / s
        m2 = sum(wk * (v * v if np.isfinite(v) else 0.0) for wk, v in zip(w, row)) / s
        total, grad, var = total + math.log(s) - beta * row[label], grad + m1 - row[label], var + m2 - m1 * m1
    got = nll_newton_sums(ops, ops.asarray(z), ops.asarray(y), beta)
    np.testing.assert_allclose(got, [total, grad, var], rtol=1e-14, atol=1e-15)
    temps = np.array([0.5, 1.0, 4.0])
    conf, correct = (ops.to_numpy(a) for a in grid_rows(ops, ops.asarray(z), ops.asarray(y), temps, nll=False))
    for j, t in enumerate(temps):
        confs, top = naive.top_label(naive.softmax_rows(np.where(np.isinf(z), -1e300, z) / t))
        np.testing.assert_allclose(conf[:, j], confs, rtol=1e-15)
        assert correct[:, j].tolist() == [p == label for p, label in zip(top, y)]


def _assert_summaries_agree(a, b, rel, abs_):
    assert (a.n, a.k, a.compat) == (b.n, b.k, b.compat) and a.confidences.dtype == b.confidences.dtype
    for name in ("correct", "top5"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    for name in ("confidences", "nll", "brier"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=rel, atol=abs_)
    assert_bins_agree(b.classwise, a.classwise, rel=rel, abs=abs_ * a.n)


@pytest.mark.parametrize("case", sorted(CASES))
def test_torch_cpu_agrees_with_numpy_in_the_compat_mode(case):
    """The compat mode's float32 arithmetic (the reference code's) on torch and numpy: summary and report
    within 1e-6 (tests/test_engines.py compares every engine in float64)."""
    scores, labels, kind = CASES[case]
    pred = as_predictions(scores, labels, kind)
    _assert_summaries_agree(summarize(pred, compat="focal-calibration", engine="numpy"),
                            summarize(pred, compat="focal-calibration", device="torch-cpu"), 1e-6, 1e-6)
    a = evaluate(scores, labels, input_kind=kind, compat="focal-calibration")
    b = evaluate(scores, labels, input_kind=kind, compat="focal-calibration", device="torch-cpu")
    assert_agree(b.metrics, a.metrics, rel=1e-6, abs=1e-6)
    assert_bins_agree(b.bins, a.bins, rel=1e-6, abs=1e-6 * a.n)


def test_chunks_sparse_cells_and_memory_mapped_input(monkeypatch, tmp_path):
    """Rows moved to the device a few at a time, K·M far beyond a chunk's values (sparse classwise
    cells), a read-only memory-mapped input (no torch warning): the numpy numbers."""
    import warnings

    x, y = logits_with_ties(1001, 9, 11)
    seen, original = [], torch_pass.torch_chunk
    monkeypatch.setattr(torch_pass, "torch_chunk", lambda ops, s, *a, **kw: seen.append(len(s)) or original(ops, s, *a, **kw))
    monkeypatch.setattr(torch_pass, "TORCH_CHUNK_ELEMENTS", 9 * 64)
    np.save(tmp_path / "x.npy", x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predictions = as_predictions(np.load(tmp_path / "x.npy", mmap_mode="r"), y)
        report = report_from_summary(summarize(predictions, device="torch-cpu"), predictions=predictions)
    assert_agree(report.metrics, evaluate(x, y).metrics)
    assert len(seen) == 16 and max(seen) == 64 and sum(seen) == 1001
    wide, labels = logits_with_ties(4, 3000, 12)
    a = summarize(as_predictions(wide, labels, "logits"), n_bins=1000, engine="numpy").classwise
    b = summarize(as_predictions(wide, labels, "logits"), n_bins=1000, device="torch-cpu").classwise
    assert type(a).__name__ == type(b).__name__ == "SparseBinStats"
    np.testing.assert_array_equal(a.keys, b.keys)
    np.testing.assert_allclose(b.sums_conf, a.sums_conf, rtol=1e-12)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_cuda_repeats_bit_for_bit(monkeypatch):
    """No float atomics: a GPU run repeats bit for bit (tests/test_engines.py: it agrees with numpy)."""
    monkeypatch.setattr(torch_pass, "TORCH_CHUNK_ELEMENTS", 1 << 12)
    x, y = logits_with_ties(20_000, 10, 22)
    assert evaluate(x, y, device="cuda").metrics == evaluate(x, y, device="cuda").metrics
