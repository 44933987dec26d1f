"""Vocabulary-scale inputs in the calibrators other than temperature scaling: each reads bfloat16
scores (and probabilities) a row chunk at a time, at fit and at apply, and gives what it gives on the
float32-widened array (float16/bfloat16 → float32 is exact); the K × K maps, and the one-vs-rest maps
that sort each class's N values, refuse beyond a stated size in one line.

A bfloat16 :class:`~calibrate_cli.data.arrays.BFloat16Rows` whose ``__array__``/``astype`` raise (the
``no_whole_widening`` fixture) proves that nothing reads it whole. The reference is the float32-widened
array through the same public calls, and, where the fit is a count, a plain numpy computation here.
"""

from __future__ import annotations

import json
import tracemalloc
import warnings

import numpy as np
import pytest

import calibrate_cli as calib
from calibrate_cli.calibrators import base as base_module
from calibrate_cli.calibrators import matrix as matrix_module
from calibrate_cli.calibrators.registry import CALIBRATORS, fit
from calibrate_cli.cli import cli
from calibrate_cli.data import predictions as predictions_module
from calibrate_cli.data.arrays import BF16_EPS, BFloat16Rows, widen_bf16
from calibrate_cli.data.predictions import as_predictions, with_stored_precision
from calibrate_cli.errors import InputError
from libm import assert_agree
from test_lm_scale_calibrators import bf16_logits

REL, ABS = 1e-12, 1e-15  # docs/conventions.md
#: the smooth fits (L-BFGS-B, trust-region Newton, SLSQP) on row chunks of another size: their sums
#: are added in another grouping (float64 rounding, ~1e-16 relative per sum), and an optimiser stopped
#: by a gradient tolerance of 1e-9…1e-10 may then stop at a point that differs by up to that much
SOLVER_REL, SOLVER_ABS = 1e-6, 1e-8

MULTICLASS = ["vector", "histogram", "histogram_mass", "isotonic", "bbq", "matrix", "dirichlet", "ensemble_ts",
              "top_label"]
BINARY = ["platt", "beta"]
SMOOTH = {"vector", "matrix", "dirichlet", "ensemble_ts", "platt", "beta"}


def options(method: str) -> dict:
    return {"points_per_bin": 20} if method == "top_label" else {}


def bf16_probs(n: int, k: int, seed: int = 36, zeros: bool = False):
    """(reader, its exact float32 widening, labels): bfloat16 probabilities (the high halves of the
    float32 softmax of logits; rows sum to 1 within bfloat16's tolerance)."""
    _, wide, y = bf16_logits(n, k, seed=seed, scale=1.0)
    p = calib.calibrators.base.softmax(wide).astype(np.float32)
    if zeros:  # a probability of exactly 0, not at the label (its mass moved to the label)
        p[0, y[0]] += p[0, (y[0] + 1) % k]
        p[0, (y[0] + 1) % k] = 0.0
    bits = (p.view(np.uint32) >> 16).astype(np.uint16)
    # the widened array keeps bfloat16's tolerance on the sums, as a reader of the file would
    return BFloat16Rows(bits), with_stored_precision(widen_bf16(bits), eps=BF16_EPS), y


@pytest.fixture
def no_whole_reads(monkeypatch, no_whole_widening):
    """``no_whole_widening``, and the row readers of the calibrators (log p, calibrated scores) refuse to
    be read whole too."""
    def whole(self, *args, **kwargs):
        raise AssertionError(f"{type(self).__name__} read whole")

    for reader in (base_module.LogProbabilityRows, base_module.CalibratedRows, matrix_module.FeatureRows):
        monkeypatch.setattr(reader, "__array__", whole)


def small_chunks(monkeypatch, rows: int, k: int) -> None:
    """Row chunks of ``rows`` rows for every pass (the default chunk holds the whole test array)."""
    monkeypatch.setattr(predictions_module, "_CHUNK_ELEMENTS", rows * k)


def fitted(method: str, scores, labels, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. a solver stopped short: the same on both paths
        return fit(method, scores, labels, **options(method), **kwargs)


# ------------------------------------------------------------------------------------ fitting


@pytest.mark.parametrize("method", MULTICLASS)
def test_fit_on_bf16_rows_equals_the_widened_fit(no_whole_reads, method):
    reader, wide, y = bf16_logits(300, 6, seed=1)
    got, want = fitted(method, reader, y), fitted(method, wide, y)
    assert_agree(got.get_params(), want.get_params(), rel=REL, abs=ABS, where=method)
    assert_agree([got.fit_info_.value, got.fit_info_.at_identity], [want.fit_info_.value, want.fit_info_.at_identity])
    # applied to bfloat16 test scores, read by row chunks: what the widened fit gives on the widened scores
    test, test_wide, _ = bf16_logits(50, 6, seed=2)
    assert_agree(got.predict_proba(test), want.predict_proba(test_wide), where=method)
    assert_agree(got.apply(test), want.apply(test_wide), where=method)
    assert_agree(got.transform(test), want.transform(test_wide), where=method)


@pytest.mark.parametrize("method", BINARY)
def test_binary_fit_on_bf16_rows_equals_the_widened_fit(no_whole_reads, method):
    reader, wide, y = bf16_logits(400, 2, seed=3)
    got, want = fitted(method, reader, y), fitted(method, wide, y)
    assert_agree(got.get_params(), want.get_params(), where=method)
    assert_agree(got.apply(reader), want.apply(wide), where=method)


@pytest.mark.parametrize("method", MULTICLASS + BINARY)
def test_fit_in_many_row_chunks_equals_the_fit_in_one(monkeypatch, no_whole_reads, method):
    k = 2 if method in BINARY else 5
    reader, wide, y = bf16_logits(240, k, seed=4)
    want = fitted(method, wide, y)  # the whole array in one chunk
    small_chunks(monkeypatch, 7, k)  # 35 chunks, the last one short
    got = fitted(method, reader, y)
    rel, abs_ = (SOLVER_REL, SOLVER_ABS) if method in SMOOTH else (REL, ABS)
    assert_agree(got.get_params(), want.get_params(), rel=rel, abs=abs_, where=method)
    assert_agree(got.apply(reader), want.apply(wide), rel=rel, abs=abs_, where=method)


@pytest.mark.parametrize("method", ["histogram", "top_label", "bbq", "isotonic"])
def test_weighted_fit_on_bf16_rows_in_row_chunks(monkeypatch, no_whole_reads, method):
    reader, wide, y = bf16_logits(200, 4, seed=5)
    w = np.random.default_rng(5).integers(0, 4, 200).astype(np.float64)  # whole numbers: top-label's rule
    want = fitted(method, wide, y, weights=w)
    small_chunks(monkeypatch, 9, 4)
    got = fitted(method, reader, y, weights=w)
    assert_agree(got.get_params(), want.get_params(), where=method)


def test_histogram_counts_by_row_chunks_are_those_of_a_plain_loop(monkeypatch, no_whole_widening):
    reader, wide, y = bf16_logits(180, 4, seed=6)
    small_chunks(monkeypatch, 11, 4)
    got = fit("histogram", reader, y, n_bins=5)
    # by hand: each class's share of [y = k] in the bins (b/5, (b+1)/5] of its softmax probability
    z = wide.astype(np.float64)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    for c in range(4):
        for b in range(5):
            inside = (p[:, c] > b / 5 if b else p[:, c] >= 0) & (p[:, c] <= (b + 1) / 5)
            want = np.mean(y[inside] == c) if inside.any() else (b + 0.5) / 5
            assert got.values_[c, b] == pytest.approx(want, rel=REL, abs=ABS), (c, b)


def test_top_label_bins_by_row_chunks_are_those_of_the_confidences(monkeypatch, no_whole_widening):
    from calibrate_cli.calibrators.top_label import equal_mass_binning

    reader, wide, y = bf16_logits(300, 3, seed=7)
    small_chunks(monkeypatch, 13, 3)
    got = fit("top_label", reader, y, points_per_bin=30)
    z = wide.astype(np.float64)
    pred = np.argmax(z, axis=1)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    conf = 1.0 / e.sum(axis=1)  # the top class's exponent is 1
    edges, values = equal_mass_binning(conf, pred == y, 300 // 30)
    assert_agree(list(got.shared_), [edges, values])


# ------------------------------------------------------------------------------ probabilities


@pytest.mark.parametrize("method", ["vector", "dirichlet", "histogram", "isotonic", "ensemble_ts", "top_label", "temperature"])
def test_probs_fit_on_bf16_rows_equals_the_widened_fit(no_whole_reads, method):
    reader, wide, y = bf16_probs(200, 5)
    kwargs = {"search": "nll"} if method == "temperature" else {}
    got = fitted(method, reader, y, input_kind="probs", **kwargs)
    want = fitted(method, wide, y, input_kind="probs", **kwargs)
    assert_agree(got.get_params(), want.get_params(), where=method)
    assert_agree(got.apply(reader, "probs"), want.apply(wide, "probs"), where=method)


@pytest.mark.parametrize("method,kwargs", [("vector", {}), ("histogram", {}), ("ensemble_ts", {}),
                                           ("temperature", {"search": "nll"}), ("temperature", {"search": "grid"})])
def test_log_probabilities_read_by_row_chunks_give_the_held_fit(monkeypatch, no_whole_reads, method, kwargs):
    # beyond LOG_PROBS_IN_MEMORY, log p is computed as each row chunk is read, at every pass (and the
    # temperature's range checks read it so too): the same values
    reader, wide, y = bf16_probs(150, 4, seed=8, zeros=True)
    clips = CALIBRATORS[method].clips_zeros
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        want = fit(method, wide, y, input_kind="probs", **kwargs)
        monkeypatch.setattr(base_module, "LOG_PROBS_IN_MEMORY", 0)
        got = fit(method, reader, y, input_kind="probs", **kwargs)
    clipped = [w for w in said if issubclass(w.category, calib.calibrators.ProbabilitiesClipped)]
    assert len(clipped) == (2 if clips else 0)  # each fit says it once, when its map clips
    assert_agree(got.get_params(), want.get_params(), where=method)


def test_a_probability_of_zero_at_the_label_is_refused_by_row_chunks(monkeypatch):
    reader, wide, y = bf16_probs(40, 3, seed=9)
    wide = wide.copy()
    wide[17] = [0.5, 0.5, 0.5]
    wide[17, y[17]] = 0.0
    wide[17, (y[17] + 1) % 3] = 1.0
    wide[17, (y[17] + 2) % 3] = 0.0
    monkeypatch.setattr(base_module, "LOG_PROBS_IN_MEMORY", 0)
    small_chunks(monkeypatch, 4, 3)
    with pytest.raises(InputError, match="row 17"):
        fit("temperature", wide, y, input_kind="probs", search="nll")


# -------------------------------------------------------------------------------- application


def write_bf16_safetensors(path, reader) -> None:
    header = {"logits": {"dtype": "BF16", "shape": list(reader.shape), "data_offsets": [0, reader.raw.nbytes]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + reader.raw.tobytes())


@pytest.mark.parametrize("method", ["vector", "histogram", "isotonic", "top_label", "dirichlet"])
def test_calib_fit_with_a_test_set_on_bf16_safetensors(runner, tmp_path, no_whole_reads, method):
    pytest.importorskip("safetensors")
    val, val_wide, val_y = bf16_logits(200, 8, seed=10)
    test, test_wide, test_y = bf16_logits(120, 8, seed=11)
    write_bf16_safetensors(tmp_path / "val.safetensors", val)
    write_bf16_safetensors(tmp_path / "test.safetensors", test)
    np.save(tmp_path / "val_y.npy", val_y)
    np.save(tmp_path / "test_y.npy", test_y)
    args = ["fit", str(tmp_path / "val.safetensors"), str(tmp_path / "val_y.npy"), "--method", method,
            "--test", str(tmp_path / "test.safetensors"), str(tmp_path / "test_y.npy"), "-f", "json"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output + result.stderr
    doc = json.loads(result.stdout)
    cal = calib.calibrators.load_calibrator(doc["calibration"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = fit(method, val_wide, val_y)  # the CLI's defaults are the library's
    assert_agree(cal.get_params(), want.get_params(), rel=1e-9, abs=1e-12, where=method)  # through JSON text
    after = calib.evaluate(want.apply(test_wide), test_y, input_kind=want.result_kind("logits")).metrics
    for name in ("ece", "nll", "brier", "accuracy"):
        assert float(doc["test"]["after"][name]) == pytest.approx(after[name], rel=1e-9, abs=1e-12), name  # "inf"


@pytest.mark.parametrize("method", ["vector", "histogram", "bbq", "ensemble_ts"])
def test_apply_by_rows_is_apply(no_whole_reads, method):
    reader, wide, y = bf16_logits(90, 5, seed=12)
    cal = fitted(method, wide, y)
    view = cal.apply_by_rows(as_predictions(reader, y, "logits"))
    assert view is not None and view.input_kind == cal.result_kind("logits")
    assert np.array_equal(np.concatenate([view.scores[0:40], view.scores[40:90]]), cal.apply(wide))
    got = calib.evaluate(view, None).metrics
    want = calib.evaluate(cal.apply(wide), y, input_kind=view.input_kind).metrics
    assert_agree({m: got[m] for m in ("ece", "nll", "brier")}, {m: want[m] for m in ("ece", "nll", "brier")})


def test_apply_by_rows_refuses_a_map_that_overflows_as_it_is_read():
    x, y = np.full((6, 3), 2.0), np.array([0, 1, 2, 0, 1, 2])
    x[4] = [1e300, 0.0, -1e300]
    cal = calib.calibrators.VectorScaling(w=[1e10, 1.0, 1e10], b=[0.0, 0.0, 0.0])
    view = cal.apply_by_rows(as_predictions(x, y, "logits"))
    with pytest.raises(InputError, match="first at row 4"):
        calib.evaluate(view, None)


def test_a_float16_histogram_fit_holds_no_widened_copy(monkeypatch):
    rng = np.random.default_rng(13)
    n, k = 512, 8192
    x = (rng.standard_normal((n, k), dtype=np.float32) * 2).astype(np.float16)
    y = rng.integers(0, k, n)
    x[np.arange(n), y] += np.float16(20.0)  # right and sure: p_y > 1/2, a fit that is not degenerate
    small_chunks(monkeypatch, 2, k)
    want = fit("histogram", x.astype(np.float32), y, n_bins=2)
    tracemalloc.start()
    try:
        got = fit("histogram", x, y, n_bins=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_agree(got.get_params(), want.get_params())
    # a float32 copy of the scores would be 16 MB, a float64 one 32 MB: the fit holds (K, 2) sums and a chunk
    assert peak < x.nbytes, peak


# ----------------------------------------------------------------------------------- refusals


def one_line_refusal(result) -> str:
    assert result.exit_code == 2, result.output + result.stderr
    text = result.stderr.strip()
    assert text.startswith("Error: ") and "\n" not in text and "Traceback" not in text, text
    return text


@pytest.mark.parametrize("method", ["matrix", "dirichlet"])
def test_matrix_maps_beyond_the_parameter_limit_are_refused_in_one_line(runner, tmp_path, method):
    k = 2048  # K² + K = 4,196,352 > 2²² = 4,194,304
    assert k * k + k > matrix_module.MAX_MATRIX_PARAMETERS >= (k - 1) ** 2 + k - 1
    rng = np.random.default_rng(14)
    np.save(tmp_path / "x.npy", rng.standard_normal((3, k)).astype(np.float32))
    np.save(tmp_path / "y.npy", np.array([0, 1, 2]))
    result = runner.invoke(cli, ["fit", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--method", method])
    text = one_line_refusal(result)
    assert f"{k * k + k:,} parameters" in text and f"{matrix_module.MAX_MATRIX_PARAMETERS:,}" in text, text
    with pytest.raises(InputError) as info:  # the core's message names no flag
        fit(method, np.load(tmp_path / "x.npy"), [0, 1, 2])
    assert "--" not in info.value.message and "\n" not in str(info.value)


@pytest.mark.parametrize("method", ["isotonic", "bbq", "histogram_mass"])
def test_one_vs_rest_sorts_beyond_the_size_limit_are_refused_in_one_line(runner, tmp_path, monkeypatch, method):
    monkeypatch.setattr(base_module, "CLASS_COLUMNS_MAX_VALUES", 100 * 4 - 1)
    _, wide, y = bf16_logits(100, 4, seed=15)
    np.save(tmp_path / "x.npy", wide)
    np.save(tmp_path / "y.npy", y)
    text = one_line_refusal(runner.invoke(cli, ["fit", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"),
                                                "--method", method]))
    assert "100 × 4" in text and f"{100 * 4 - 1:,}" in text, text
    monkeypatch.setattr(base_module, "CLASS_COLUMNS_MAX_VALUES", 100 * 4)  # at the limit: fitted
    assert fit(method, wide, y).is_fitted


def test_one_vs_rest_with_equal_width_bins_is_not_limited(monkeypatch, no_whole_widening):
    monkeypatch.setattr(base_module, "CLASS_COLUMNS_MAX_VALUES", 10)
    reader, wide, y = bf16_logits(100, 4, seed=16)
    assert_agree(fit("histogram", reader, y).get_params(), fit("histogram", wide, y).get_params())


def test_every_calibrator_is_covered_here():
    covered = set(MULTICLASS + BINARY) | {"temperature"}  # temperature: tests/test_lm_scale_calibrators.py
    assert covered == set(CALIBRATORS), set(CALIBRATORS) ^ covered


@pytest.mark.parametrize("method", ["vector", "histogram"])
def test_calib_eval_with_a_calibrator_on_bf16_safetensors(runner, tmp_path, monkeypatch, no_whole_reads, method):
    """``calib eval FILE --calibrator FIT.json``: the scores are calibrated a row chunk at a time as the
    pass reads them (no widened copy, no (N, K) calibrated array), with the metrics of the widened
    array calibrated whole."""
    pytest.importorskip("safetensors")
    val, val_wide, val_y = bf16_logits(200, 8, seed=12)
    test, test_wide, test_y = bf16_logits(150, 8, seed=13)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = fit(method, val_wide, val_y)
    (tmp_path / "fit.json").write_text(json.dumps(cal.to_dict()))
    write_bf16_safetensors(tmp_path / "test.safetensors", test)
    np.save(tmp_path / "test_y.npy", test_y)
    want = calib.evaluate(cal.apply(test_wide), test_y, input_kind=cal.result_kind("logits")).metrics
    monkeypatch.setattr(type(cal), "apply", lambda *a, **k: pytest.fail("an (N, K) calibrated array was written"))
    result = runner.invoke(cli, ["eval", str(tmp_path / "test.safetensors"), str(tmp_path / "test_y.npy"),
                                 "--calibrator", str(tmp_path / "fit.json"), "-f", "json"])
    assert result.exit_code == 0, result.output + result.stderr
    got = json.loads(result.stdout)["metrics"]
    for name in ("ece", "nll", "brier", "accuracy", "classwise_ece"):
        assert float(got[name]) == pytest.approx(want[name], rel=1e-12, abs=1e-15), name
