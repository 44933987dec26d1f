"""Vocabulary-scale inputs beyond ``evaluate`` (issue 35): the temperature fit, the bootstrap and the
opt-in classwise metrics read bfloat16 and float16 scores a row chunk at a time, and give what they
give on the float32-widened array (float16/bfloat16 → float32 is exact) within the numeric contract.

A bfloat16 :class:`~calibrate_cli.data.arrays.BFloat16Rows` whose ``__array__``/``astype`` raise
proves that nothing reads it whole; tracemalloc bounds the memory of a float16 fit.
"""

from __future__ import annotations

import json
import math
import tracemalloc

import numpy as np
import pytest

import calibrate_cli as calib
from calibrate_cli.bootstrap import bootstrap, jackknife_values
from calibrate_cli.bootstrap.jackknife import KeptRows
from calibrate_cli.calibrators import temperature as temperature_module
from calibrate_cli.calibrators.temperature_fit import fit_temperature
from calibrate_cli.cli import cli
from calibrate_cli.data import predictions as predictions_module
from calibrate_cli.data.arrays import BFloat16Rows, widen_bf16
from calibrate_cli.data.probabilities import to_probabilities
from calibrate_cli.engine import class_samples, kernels
from calibrate_cli.engine.class_samples import probabilities_by_rows, sort_classes, sort_classes_of
from calibrate_cli.errors import InputError
from libm import assert_agree

REL, ABS = 1e-12, 1e-15  # docs/conventions.md


def bf16_logits(n: int, k: int, seed: int = 35, scale: float = 3.0):
    """(reader, its exact float32 widening, labels): bfloat16 logits (the high halves of float32
    ones) of a model right about half the time."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, k)) * scale).astype(np.float32)
    y = rng.integers(0, k, n)
    x[np.arange(n), y] += rng.uniform(0.0, 2 * scale, n).astype(np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    return BFloat16Rows(bits), widen_bf16(bits), y


def engines():
    return ["numpy", "fused"] if kernels.HAVE_CKERNEL else ["numpy"]


def independent_nll_slope(z: np.ndarray, y: np.ndarray, t: float) -> float:
    """d/dβ of the mean NLL of softmax(β z) at β = 1/T: a plain float64 loop over the rows."""
    total = 0.0
    for row, label in zip(z.astype(np.float64), y):
        d = row - row.max()
        e = np.exp(d / t)
        total += float(np.dot(e, d) / e.sum() - d[label])
    return total / len(y)


# ------------------------------------------------------------------------------ temperature fit


@pytest.mark.parametrize("engine", engines())
@pytest.mark.parametrize("n,k", [(300, 50), (1, 2), (40, 2)])
def test_nll_fit_on_bf16_rows_equals_the_widened_fit(monkeypatch, no_whole_widening, engine, n, k):
    monkeypatch.setenv("CALIB_ENGINE", engine)
    reader, wide, y = bf16_logits(n, k)
    got = fit_temperature(reader, y, search="nll")
    want = fit_temperature(wide, y, search="nll")
    assert got.temperature == pytest.approx(want.temperature, rel=REL, abs=ABS)
    assert got.objective_value == pytest.approx(want.objective_value, rel=REL, abs=ABS)
    assert got.objective_at_one == pytest.approx(want.objective_at_one, rel=REL, abs=ABS)
    if n > 1 and not got.warnings:  # an interior optimum: the independent float64 slope vanishes there
        assert abs(independent_nll_slope(wide, y, got.temperature)) < 1e-9


@pytest.mark.parametrize("objective", ["ece", "nll", "adaece"])
def test_grid_fit_on_bf16_rows_equals_the_widened_fit(no_whole_widening, objective):
    reader, wide, y = bf16_logits(200, 30, seed=2)
    grid = (0.5, 3.0, 0.25)
    got = fit_temperature(reader, y, search="grid", objective=objective, grid=grid)
    want = fit_temperature(wide, y, search="grid", objective=objective, grid=grid)
    assert got.temperature == want.temperature
    assert_agree([v for _, v in got.curve], [v for _, v in want.curve], rel=REL, abs=ABS)


def test_grid_fit_with_ties_and_k2(no_whole_widening):
    # rows with tied maxima (argmax: the lowest index) and K = 2
    bits = (np.array([[1.0, 1.0], [2.0, 0.5], [0.0, 0.0], [-1.0, 3.0]], dtype=np.float32).view(np.uint32)
            >> 16).astype(np.uint16)
    y = np.array([1, 0, 0, 1])
    got = fit_temperature(BFloat16Rows(bits), y, search="grid", grid=(0.5, 2.0, 0.5))
    want = fit_temperature(widen_bf16(bits), y, search="grid", grid=(0.5, 2.0, 0.5))
    assert got.temperature == want.temperature
    assert_agree([v for _, v in got.curve], [v for _, v in want.curve])
    # by hand at T = 1: confidences 1/2, σ(1.5), 1/2, σ(4); correct: no, yes, yes, yes; 15 bins
    s15, s4 = 1 / (1 + math.exp(-1.5)), 1 / (1 + math.exp(-4.0))
    by_hand = (abs(0.5 - 0.5) * 2 + abs(1 - s15) + abs(1 - s4)) / 4  # both 1/2 in bin 7: 1 of 2 right
    assert dict(got.curve)[1.0] == pytest.approx(by_hand, rel=REL, abs=ABS)


@pytest.mark.skipif(not kernels.HAVE_CKERNEL, reason="the compiled NLL pass is not built")
def test_float16_nll_fit_holds_no_widened_copy(monkeypatch):
    monkeypatch.setenv("CALIB_ENGINE", "fused")
    rng = np.random.default_rng(7)
    n, k = 128, 65536
    x = (rng.standard_normal((n, k), dtype=np.float32) * 2).astype(np.float16)
    y = rng.integers(0, k, n)
    want = fit_temperature(x.astype(np.float32), y, search="nll")
    tracemalloc.start()
    try:
        got = fit_temperature(x, y, search="nll")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got.temperature == pytest.approx(want.temperature, rel=REL, abs=ABS)
    # a float32 copy would be 32 MB, a float64 one 64 MB, an (N, K) boolean mask 8 MB
    assert peak < x.size * 4 // 3, peak


def test_grid_temperatures_in_groups_give_the_same_values(monkeypatch):
    rng = np.random.default_rng(1)
    z, y = rng.standard_normal((5, 300)) * 4, rng.integers(0, 300, 5)
    temps = temperature_module.temperature_grid(0.1, 3.0, 0.1)
    whole = {obj: temperature_module._grid_chunk(z, y, temps, obj, None) for obj in ("nll", "ece")}
    monkeypatch.setattr(temperature_module, "_GRID_CHUNK_ELEMENTS", 7 * 300 * 5)  # groups of 7 of 30
    assert np.array_equal(temperature_module._grid_chunk(z, y, temps, "nll", None), whole["nll"])
    conf, correct = temperature_module._grid_chunk(z, y, temps, "ece", None)
    assert np.array_equal(conf, whole["ece"][0]) and np.array_equal(correct, whole["ece"][1])


def test_torch_grid_temperatures_in_groups_give_the_same_sums(monkeypatch):
    pytest.importorskip("torch")
    from calibrate_cli.engine import torch_pass
    from calibrate_cli.engine.devices import array_ops

    ops = array_ops("torch-cpu")
    rng = np.random.default_rng(3)
    z, y = rng.standard_normal((4, 300)) * 3, rng.integers(0, 300, 4)
    temps = temperature_module.temperature_grid(0.2, 3.0, 0.1)
    bins, nll = torch_pass.grid_sums(ops, z, y, temps, True, 15), torch_pass.grid_sums(ops, z, y, temps, False, 15)
    monkeypatch.setattr(torch_pass, "TORCH_CHUNK_ELEMENTS", 4 * 300 * 5)  # groups of 5 temperatures
    grouped = torch_pass.grid_sums(ops, z, y, temps, True, 15)
    assert all(np.array_equal(a, b) for a, b in zip(grouped, bins)) and grouped[0].shape == (temps.shape[0], 15)
    assert np.array_equal(torch_pass.grid_sums(ops, z, y, temps, False, 15), nll)


def test_calib_temperature_on_a_bf16_safetensors_file(runner, tmp_path, no_whole_widening):
    pytest.importorskip("safetensors")
    reader, wide, y = bf16_logits(150, 20, seed=4)
    header = {"logits": {"dtype": "BF16", "shape": list(wide.shape), "data_offsets": [0, reader.raw.nbytes]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (tmp_path / "b.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + reader.raw.tobytes())
    np.save(tmp_path / "y.npy", y)
    result = runner.invoke(cli, ["temperature", str(tmp_path / "b.safetensors"), str(tmp_path / "y.npy"),
                                 "--search", "nll", "-f", "json"])
    assert result.exit_code == 0, result.output + getattr(result, "stderr", "")
    doc = json.loads(result.stdout)
    want = fit_temperature(wide, y, search="nll")
    assert doc["temperature"] == pytest.approx(want.temperature, rel=REL, abs=ABS)
    after = calib.evaluate(wide.astype(np.float64) / want.temperature, y).metrics
    for name in ("ece", "nll", "brier", "accuracy"):
        assert doc["fit"]["after"][name] == pytest.approx(after[name], rel=1e-9, abs=1e-12), name


# ------------------------------------------------------------------------------------ bootstrap


@pytest.mark.parametrize("k", [8, 1100])  # with the classwise ECE resampled; beyond 1024 classes without it
def test_bootstrap_on_bf16_rows_equals_the_widened_bootstrap(no_whole_widening, k):
    reader, wide, y = bf16_logits(60, k, seed=k)
    got = calib.evaluate(reader, y, bootstrap=40, seed=3)
    want = calib.evaluate(wide, y, bootstrap=40, seed=3)
    assert sorted(got.intervals) == sorted(want.intervals)
    assert ("classwise_ece" in got.intervals) == (k <= 1024)
    for name, ci in want.intervals.items():
        assert_agree([got.intervals[name].low, got.intervals[name].high], [ci.low, ci.high], where=name)


def test_bootstrap_function_on_bf16_rows(no_whole_widening):
    reader, wide, y = bf16_logits(50, 6, seed=5)
    got = bootstrap(reader, y, n_resamples=30, metrics=["ece", "nll", "classwise_ece"])
    want = bootstrap(wide, y, n_resamples=30, metrics=["ece", "nll", "classwise_ece"])
    assert_agree({k: [v.low, v.high] for k, v in got.items()}, {k: [v.low, v.high] for k, v in want.items()})


def test_jackknife_reads_kept_rows_and_equals_evaluate_on_each_subset(no_whole_widening):
    from calibrate_cli.bootstrap.jackknife import jackknife_groups

    reader, wide, y = bf16_logits(45, 5, seed=6)
    values = jackknife_values(reader, y, n_groups=4, metrics=["ece", "nll", "brier", "classwise_ece"])
    for g, group in enumerate(jackknife_groups(45, 4)):
        keep = np.ones(45, dtype=bool)
        keep[group] = False
        want = calib.evaluate(wide[keep], y[keep]).metrics
        for name in ("ece", "nll", "brier", "classwise_ece"):
            assert values[name][g] == pytest.approx(want[name], rel=REL, abs=ABS), name


def test_kept_rows_reads_the_rows_it_keeps():
    base = np.arange(40.0).reshape(10, 4)
    index = np.array([0, 2, 3, 7, 9])
    kept = KeptRows(base, index)
    assert kept.shape == (5, 4) and len(kept) == 5
    assert np.array_equal(np.concatenate([kept[0:2], kept[2:5]]), base[index])
    assert kept[3:3].shape == (0, 4)


def test_bca_interval_on_bf16_rows(no_whole_widening):
    reader, wide, y = bf16_logits(40, 4, seed=8)
    got = bootstrap(reader, y, n_resamples=30, method="bca", metrics=["ece", "accuracy"])
    want = bootstrap(wide, y, n_resamples=30, method="bca", metrics=["ece", "accuracy"])
    assert_agree({k: [v.low, v.high] for k, v in got.items()}, {k: [v.low, v.high] for k, v in want.items()})


# ------------------------------------------------------------------------ classwise (opt-in)

CLASS_SORTED_METRICS = ["ace", "classwise_rms_ce", "classwise_ks_ce"]


def test_class_sorted_metrics_on_bf16_rows(no_whole_widening):
    reader, wide, y = bf16_logits(80, 7, seed=9)
    got = calib.evaluate(reader, y, metrics=CLASS_SORTED_METRICS).metrics
    want = calib.evaluate(wide, y, metrics=CLASS_SORTED_METRICS).metrics
    assert_agree({m: got[m] for m in CLASS_SORTED_METRICS}, {m: want[m] for m in CLASS_SORTED_METRICS})


@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_classes_sorted_by_row_chunks_are_those_of_the_whole_array(monkeypatch, kind):
    rng = np.random.default_rng(10)
    x = rng.standard_normal((37, 5))
    x[:, 3] = x[:, 1]  # ties within a class's column and across classes
    x[5:9, 2] = 0.25
    if kind == "probs":
        x = to_probabilities(x, "logits")
    y = rng.integers(0, 5, 37)
    whole = to_probabilities(x, kind)
    monkeypatch.setattr(predictions_module, "_CHUNK_ELEMENTS", 5 * 4)  # chunks of 4 rows
    assert np.array_equal(probabilities_by_rows(x, kind), whole)
    assert np.array_equal(probabilities_by_rows(x, kind, dtype=np.float32), to_probabilities(x, kind, dtype=np.float32))
    a, b = sort_classes_of(x, y, kind), sort_classes(whole, y)
    # the definition: each class's column sorted stably, with [y = k] alongside
    for c in range(5):
        order = np.argsort(whole[:, c], kind="stable")
        assert np.array_equal(a.order[c], order) and np.array_equal(b.order[c], order)
        assert np.array_equal(a.p[c], whole[order, c]) and np.array_equal(b.p[c], whole[order, c])
        assert np.array_equal(a.hit[c], (y[order] == c).astype(float))


def test_class_sorted_metrics_beyond_the_limit_are_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(class_samples, "CLASS_SORTED_MAX_VALUES", 100)
    reader, wide, y = bf16_logits(30, 4, seed=11)  # 120 values
    with pytest.raises(InputError) as info:
        calib.evaluate(reader, y, metrics=["ace"])
    text = str(info.value)
    assert "\n" not in text and "30 × 4" in text and "fewer samples" in text
    assert calib.evaluate(reader[:25], y[:25], metrics=["ace"]).metrics["ace"] >= 0  # 100 values: allowed


# ------------------------------------------------------------------------------ safetensors


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_2d_float_safetensors_are_memory_mapped(tmp_path, dtype):
    st = pytest.importorskip("safetensors.numpy")
    from calibrate_cli.data.io import load_array

    x = np.random.default_rng(12).standard_normal((30, 7)).astype(dtype)
    st.save_file({"a": np.arange(3, dtype=np.int8), "logits": x}, str(tmp_path / "m.safetensors"))
    got = load_array(f"{tmp_path / 'm.safetensors'}:logits")
    assert got.dtype == dtype and np.array_equal(got, x)
    base = got
    while isinstance(base, np.ndarray) and not isinstance(base, np.memmap):
        base = base.base
    assert isinstance(base, np.memmap) and not got.flags.writeable


def test_unaligned_safetensors_data_are_copied(tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    header = {"pad": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
              "logits": {"dtype": "F32", "shape": [3, 4], "data_offsets": [1, 49]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (tmp_path / "u.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + b"\0" + x.tobytes())
    pytest.importorskip("safetensors")
    from calibrate_cli.data.io import load_array

    got = load_array(f"{tmp_path / 'u.safetensors'}:logits")
    assert np.array_equal(got, x) and got.flags.writeable and got.flags.aligned
