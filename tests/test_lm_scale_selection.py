"""Vocabulary-scale inputs in the cross-validation that chooses a method (``calib fit --method all``):
the training folds are read as a row reader of the kept rows, and the out-of-fold predictions are
computed a row chunk at a time as the metric's pass reads them, never written as one (N, K) array.

The reference is the computation as it was: each fold's calibrator fitted on a float32-widened copy of
the other folds' rows, applied to the held-out fold's rows, the N predictions written into one float64
array and evaluated. The same per-row maps on the same float32 values (bfloat16 → float32 is exact) and
the same row chunks in every fit and pass: the same bits.
"""

from __future__ import annotations

import json
import tracemalloc
import warnings

import numpy as np
import pytest

import calibrate_cli as calib
from calibrate_cli.calibrators import selection as selection_module
from calibrate_cli.calibrators.registry import fit
from calibrate_cli.calibrators.selection import cross_validate, stratified_folds
from calibrate_cli.cli import cli
from calibrate_cli.data import predictions as predictions_module
from calibrate_cli.data.arrays import BFloat16Rows
from calibrate_cli.data.predictions import KeptRows
from test_lm_scale_calibrators import bf16_logits
from test_lm_scale_fit import bf16_probs, write_bf16_safetensors

METHODS = [("temperature", {"search": "nll"}), ("temperature", {"search": "grid"}), ("vector", {}),
           ("histogram", {"n_bins": 5}), ("isotonic", {})]


@pytest.fixture
def no_whole_reads(monkeypatch, no_whole_widening):
    """``no_whole_widening``; the bfloat16 reader read by row slices only (a boolean mask of the
    training folds would widen ~80 % of it at once); the kept rows and the out-of-fold predictions
    refuse to be read whole."""
    def whole(self, *args, **kwargs):
        raise AssertionError(f"{type(self).__name__} read whole")

    by_slices = BFloat16Rows.__getitem__

    def slices_only(self, key):
        assert isinstance(key, slice), f"BFloat16Rows read by {type(key).__name__}"
        return by_slices(self, key)

    monkeypatch.setattr(BFloat16Rows, "__getitem__", slices_only)
    for reader in (KeptRows, selection_module.OutOfFoldRows):
        monkeypatch.setattr(reader, "__array__", whole)


def small_chunks(monkeypatch, rows: int, k: int) -> None:
    """Row chunks of ``rows`` rows for every pass (the default chunk holds the whole test array)."""
    monkeypatch.setattr(predictions_module, "_CHUNK_ELEMENTS", rows * k)


def whole_array_value(method, wide, y, folds, *, metric="ece", input_kind="logits", options=None, weights=None):
    """The cross-validated value as it was computed: each fold's fit on a widened copy of the other
    folds, its map applied to the held-out fold, every prediction written into one (N, K) float64 array."""
    out, out_kind = np.empty(wide.shape), None
    for f in range(int(folds.max()) + 1):
        held = folds == f
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # wide[mask] copies the rows, and keeps bfloat16's probability-sum tolerance (stored_eps)
            cal = fit(method, wide[~held], y[~held], input_kind=input_kind,
                      weights=None if weights is None else weights[~held], **(options or {}))
            out[held] = cal.apply(wide[held], input_kind, validate=False)
        out_kind = cal.result_kind(input_kind)
    return calib.evaluate(out, y, input_kind=out_kind, metrics=[metric], weights=weights).metrics[metric]


def cv(method, scores, y, folds, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. a solver stopped short: the same on every path
        return cross_validate(method, scores, y, folds=folds, **kwargs)


@pytest.mark.parametrize("method,options", METHODS)
@pytest.mark.parametrize("metric", ["ece", "nll"])
def test_cross_validation_on_bf16_rows_is_the_whole_array_computation(monkeypatch, no_whole_reads, method, options,
                                                                      metric):
    reader, wide, y = bf16_logits(240, 6, seed=1)
    folds = stratified_folds(y, 5, seed=0)
    small_chunks(monkeypatch, 17, 6)  # the out-of-fold chunks cut through every fold, the last chunk short
    got = cv(method, reader, y, folds, metric=metric, options=options)
    assert got.failure is None and got.value is not None
    # the same float32 rows in the same row chunks, fitted and mapped by the same code: equal bits,
    # the smooth solvers included (they add the same sums in the same order)
    assert got == cv(method, wide, y, folds, metric=metric, options=options)
    assert got.value == whole_array_value(method, wide, y, folds, metric=metric, options=options)


@pytest.mark.parametrize("method", ["platt", "beta", "histogram"])
def test_binary_cross_validation_on_bf16_rows(monkeypatch, no_whole_reads, method):
    reader, wide, y = bf16_logits(300, 2, seed=2)
    folds = stratified_folds(y, 4, seed=3)
    small_chunks(monkeypatch, 23, 2)
    got = cv(method, reader, y, folds, metric="ece")
    assert got.failure is None
    assert got == cv(method, wide, y, folds, metric="ece")
    assert got.value == whole_array_value(method, wide, y, folds)


@pytest.mark.parametrize("method,options", [("temperature", {"search": "nll"}), ("histogram", {}), ("vector", {})])
def test_cross_validation_of_bf16_probabilities(monkeypatch, no_whole_reads, method, options):
    reader, wide, y = bf16_probs(200, 5, seed=4, zeros=True)  # a 0 that vector scaling clips (said by its own fit)
    folds = stratified_folds(y, 5, seed=0)
    small_chunks(monkeypatch, 13, 5)
    got = cv(method, reader, y, folds, metric="ece", input_kind="probs", options=options)
    assert got.failure is None
    assert got == cv(method, wide, y, folds, metric="ece", input_kind="probs", options=options)
    assert got.value == whole_array_value(method, wide, y, folds, input_kind="probs", options=options)


def test_weighted_cross_validation_on_bf16_rows(monkeypatch, no_whole_reads):
    reader, wide, y = bf16_logits(200, 4, seed=5)
    w = np.random.default_rng(5).integers(0, 4, 200).astype(np.float64)
    folds = stratified_folds(y, 5, seed=0)
    small_chunks(monkeypatch, 9, 4)
    got = cv("histogram", reader, y, folds, metric="ece", weights=w)
    assert got.failure is None
    assert got.value == whole_array_value("histogram", wide, y, folds, weights=w)


def test_out_of_fold_predictions_that_are_not_finite_have_no_value(monkeypatch):
    # checked by the pass that reads them, as evaluate checked the (N, K) array
    reader, _, y = bf16_logits(60, 3, seed=6)

    class Overflowing(calib.calibrators.VectorScaling):
        def _transform(self, z):
            return z + np.inf

        def check_fit(self, data):
            pass

    monkeypatch.setitem(calib.calibrators.registry.CALIBRATORS, "vector", Overflowing)
    got = cv("vector", reader, y, stratified_folds(y, 3, seed=0), metric="ece")
    assert got.value is None and got.failure.startswith("its out-of-fold predictions: ") and "Inf" in got.failure


def test_out_of_fold_evaluation_holds_no_n_by_k_float64_array(tmp_path):
    n, k = 5000, 4096  # N·K·8 = 164 MB as one float64 array; the float32 file (82 MB) is read from a memory map
    rng = np.random.default_rng(7)
    y = rng.integers(0, k, n)
    x = rng.standard_normal((n, k), dtype=np.float32)
    x[np.arange(n), y] += 3.0
    np.save(tmp_path / "x.npy", x)
    del x
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    folds = stratified_folds(y, 5, seed=0)
    tracemalloc.start()
    try:
        got = cv("temperature", mapped, y, folds, metric="ece", options={"search": "nll"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.failure is None and got.value is not None
    # neither the training folds' float32 copy (0.8·N·K·4 = 66 MB) nor the (N, K) float64 predictions
    # (164 MB): a few row chunks of float64 (8 MB each) at a time, whatever N
    assert peak < n * k * 8 / 4, peak


def test_calib_fit_method_all_on_bf16_safetensors(runner, tmp_path, no_whole_reads):
    pytest.importorskip("safetensors", reason="reading .safetensors files needs the safetensors package")
    reader, wide, y = bf16_logits(150, 6, seed=8)
    write_bf16_safetensors(tmp_path / "x.safetensors", reader)
    np.save(tmp_path / "x.npy", wide)
    np.save(tmp_path / "y.npy", y)
    docs = []
    for scores in ("x.safetensors", "x.npy"):
        result = runner.invoke(cli, ["fit", str(tmp_path / scores), str(tmp_path / "y.npy"), "--method", "all",
                                     "-f", "json"])
        assert result.exit_code == 0, result.output + result.stderr
        docs.append(json.loads(result.stdout))
    got, want = docs
    assert got["selected"] == want["selected"]
    assert got["selection"]["values"] == want["selection"]["values"]  # the same bits as the widened file
    folds = stratified_folds(y, 5, seed=0)
    for method in ("temperature", "histogram"):
        options = {"n_bins": 15} if method == "histogram" else {}
        # JSON writes a float by its shortest repr, which reads back to the same bits
        assert got["methods"][method]["cv"] == whole_array_value(method, wide, y, folds, options=options), method
