"""Vocabulary-scale inputs (issue #35): the classwise metrics only when asked beyond
CLASSWISE_DEFAULT_MAX_K classes, float16 scores read chunk by chunk (widened exactly to float32),
and the compiled pass's chunks of at least MIN_CHUNK_ROWS rows at large K. Expected values come from
a float64 numpy reference written here (softmax, bins (b/M, (b+1)/M] with bin 0 closed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrate_cli.cli import cli
from calibrate_cli.data import io
from calibrate_cli.data import predictions as _predictions
from calibrate_cli.engine import parallel
from calibrate_cli.engine.kernels import HAVE_CKERNEL
from calibrate_cli.evaluate import CLASSWISE_DEFAULT_MAX_K, classwise_left_out, evaluate

from libm import assert_agree

M = 15


def reference(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """accuracy, ECE, NLL, Brier and classwise-ECE of logits ``x`` in float64, written from the
    definitions of docs/metrics.md (not from calib's code)."""
    x = np.asarray(x, dtype=np.float64)
    n, k = x.shape
    z = x - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    total = e.sum(axis=1)
    p = e / total[:, None]
    pred = p.argmax(axis=1)
    conf = p[np.arange(n), pred]
    correct = (pred == y).astype(np.float64)
    onehot = np.zeros_like(p)
    onehot[np.arange(n), y] = 1.0

    def ece_of(values, hits):
        bins = np.clip(np.ceil(values * M).astype(np.int64) - 1, 0, M - 1)
        gap = np.zeros(M)
        np.add.at(gap, bins, hits - values)
        return np.abs(gap).sum() / n

    classwise = np.mean([ece_of(p[:, c], onehot[:, c]) for c in range(k)])
    return {
        "accuracy": float(correct.mean()),
        "ece": float(ece_of(conf, correct)),
        "nll": float(np.mean(np.log(total) - z[np.arange(n), y])),
        "brier": float(np.mean(((p - onehot) ** 2).sum(axis=1))),
        "classwise_ece": float(classwise),
    }


def logits(n: int, k: int, seed: int = 0, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    x = rng.standard_normal((n, k)) * 2.0
    hit = rng.uniform(size=n) < 0.6
    x[np.arange(n), np.where(hit, y, rng.integers(0, k, n))] += 9.0
    return x.astype(dtype), y


def picked(metrics: dict, names) -> dict:
    return {name: metrics[name] for name in names}


K_WIDE = 2 * CLASSWISE_DEFAULT_MAX_K  # beyond the threshold, with few rows (cheap)


def test_the_threshold_is_on_the_number_of_classes_and_asking_keeps_the_metric():
    assert classwise_left_out(CLASSWISE_DEFAULT_MAX_K) == ()
    assert classwise_left_out(CLASSWISE_DEFAULT_MAX_K + 1) == ("classwise_ece",)
    assert classwise_left_out(K_WIDE, ["classwise_ece"]) == ()
    assert classwise_left_out(K_WIDE, "all") == ()
    assert classwise_left_out(K_WIDE, ["ace"]) == ("classwise_ece",)
    assert classwise_left_out(50, max_k=10) == ("classwise_ece",)


def test_default_evaluate_at_large_k_leaves_classwise_out_with_a_note_and_gives_it_when_asked():
    x, y = logits(40, K_WIDE)
    want = reference(x, y)
    default = evaluate(x, y)
    assert "classwise_ece" not in default.metrics
    assert default.classwise_ece_per_class == ()
    assert len(default.warnings) == 1
    note = default.warnings[0]
    assert f"K = {K_WIDE}" in note and "metrics=['classwise_ece']" in note  # the Python wording (the CLI words it as --metrics)
    assert_agree(picked(default.metrics, ["accuracy", "ece", "nll", "brier"]),
                 picked(want, ["accuracy", "ece", "nll", "brier"]))
    asked = evaluate(x, y, metrics=["classwise_ece"])
    assert asked.warnings == ()
    assert len(asked.classwise_ece_per_class) == K_WIDE
    assert_agree(picked(asked.metrics, want), want)
    # the other metrics are those of the default report, bit for bit
    assert {n: v for n, v in asked.metrics.items() if n != "classwise_ece"} == default.metrics


def test_at_the_threshold_classwise_stays_in_the_default_report():
    x, y = logits(30, CLASSWISE_DEFAULT_MAX_K, seed=1)
    report = evaluate(x, y)
    assert report.warnings == ()
    assert_agree(report.metrics["classwise_ece"], reference(x, y)["classwise_ece"])


def test_calib_eval_prints_the_note_and_the_json_has_classwise_when_asked(runner, tmp_path):
    x, y = logits(30, K_WIDE, seed=2, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    args = ["eval", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--format", "json"]
    plain = runner.invoke(cli, args)
    assert plain.exit_code == 0, plain.output + plain.stderr
    doc = json.loads(plain.stdout)
    assert "classwise_ece" not in doc["metrics"]
    assert any("classwise_ece" in w and f"K = {K_WIDE}" in w for w in doc["warnings"])
    assert "--metrics classwise_ece" in plain.stderr
    asked = runner.invoke(cli, [*args, "--metrics", "classwise_ece"])
    assert asked.exit_code == 0, asked.output + asked.stderr
    got = json.loads(asked.stdout)
    assert got["warnings"] == []
    want = reference(x, y)
    assert_agree(picked(got["metrics"], want), want)


def test_the_bootstrap_at_large_k_resamples_without_the_classwise_cells():
    x, y = logits(40, K_WIDE, seed=3)
    report = evaluate(x, y, bootstrap=10, seed=0)
    assert "classwise_ece" not in report.metrics and "classwise_ece" not in report.intervals
    assert "ece" in report.intervals


@pytest.mark.parametrize("engine", ["numpy", "fused"])
def test_float16_scores_equal_their_float32_widening(monkeypatch, engine):
    if engine == "fused" and not HAVE_CKERNEL:
        pytest.skip("the C extension is not built")
    monkeypatch.setenv("CALIB_ENGINE", engine)
    x, y = logits(300, 37, seed=4, dtype=np.float16)
    monkeypatch.setattr(_predictions, "_CHUNK_ELEMENTS", 37 * 16)  # several chunks
    half = evaluate(x, y, metrics=["classwise_ece"])
    widened = evaluate(x.astype(np.float32), y, metrics=["classwise_ece"])
    if engine == "fused":  # the same float32 values through the same loops: the same bits
        assert half.metrics == widened.metrics
    assert_agree(half.metrics, widened.metrics)
    want = reference(x.astype(np.float32), y)
    assert_agree(picked(half.metrics, want), want)


def test_float16_npy_memory_mapped_and_torch_file_equal_the_reference(runner, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(io, "MMAP_THRESHOLD_BYTES", 0)  # memory-mapped whatever the size
    x, y = logits(64, 300, seed=5, dtype=np.float16)
    np.save(tmp_path / "x.npy", x)
    torch.save(torch.from_numpy(x), tmp_path / "x.pt")
    np.save(tmp_path / "y.npy", y)
    loaded = io.load_array(str(tmp_path / "x.npy"))
    assert loaded.dtype == np.float16 and isinstance(loaded, np.memmap)  # not widened
    from_pt = io.load_array(str(tmp_path / "x.pt"))
    assert from_pt.dtype == np.float16
    want = reference(x.astype(np.float32), y)
    for name in ("x.npy", "x.pt"):
        done = runner.invoke(cli, ["eval", str(tmp_path / name), str(tmp_path / "y.npy"), "--format", "json"])
        assert done.exit_code == 0, done.output + done.stderr
        assert_agree(picked(json.loads(done.stdout)["metrics"], want), want, where=name)


def test_a_legacy_torch_file_that_torch_cannot_map_is_read_whole(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(io, "MMAP_THRESHOLD_BYTES", 0)
    x = np.arange(12, dtype=np.float16).reshape(3, 4)
    torch.save(torch.from_numpy(x), tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    np.testing.assert_array_equal(io.load_array(str(tmp_path / "old.pt")), x)


def test_compiled_chunks_keep_a_minimum_of_rows_at_large_k_only():
    e = 1 << 20
    assert parallel.chunk_rows(128256, e) == e // 128256  # numpy's float64 temporaries grow with rows
    assert parallel.chunk_rows(128256, e, compiled=True) == parallel.MIN_CHUNK_ROWS
    assert parallel.chunk_rows(262144, e, compiled=True) == parallel.MAX_CHUNK_ELEMENTS // 262144
    assert parallel.chunk_rows(1000, e, compiled=True) == e // 1000
    assert parallel.chunk_rows(10, 7, compiled=True) == 1 == parallel.chunk_rows(10, 7)


@pytest.mark.skipif(not HAVE_CKERNEL, reason="the C extension is not built")
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_raised_chunks_give_the_same_bits_on_any_thread_count(monkeypatch, dtype):
    # scaled down: K = 40 counts as large, one row of values per chunk unless raised to 8 rows
    monkeypatch.setattr(parallel, "WIDE_K", 32)
    monkeypatch.setattr(parallel, "MIN_CHUNK_ROWS", 8)
    monkeypatch.setattr(parallel, "MAX_CHUNK_ELEMENTS", 1000)
    monkeypatch.setattr(_predictions, "_CHUNK_ELEMENTS", 64)
    monkeypatch.setenv("CALIB_ENGINE", "fused")
    x, y = logits(203, 40, seed=6, dtype=dtype)
    runs = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("CALIB_THREADS", threads)
        runs.append(evaluate(x, y, metrics=["classwise_ece"]))
    assert runs[0].metrics == runs[1].metrics == runs[2].metrics
    assert runs[0].classwise_ece_per_class == runs[2].classwise_ece_per_class
    want = reference(x.astype(np.float32), y)
    assert_agree(picked(runs[0].metrics, want), want)
