"""The torch path of the bootstrap equals the numpy path on the same draws (device="torch-cpu"/"cuda")."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calibrate_cli.bootstrap import bootstrap, bootstrap_values, compare  # noqa: E402
from calibrate_cli.errors import InputError  # noqa: E402
from calibrate_cli.metrics.functional import METRIC_NAMES  # noqa: E402

HAS_CUDA = torch.cuda.is_available()


def _data(n=300, k=7, seed=0, scale=2.0):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(n, k)) * scale).astype(np.float32)
    labels = rng.integers(0, k, n)
    return logits, labels


def _assert_values_equal(ref: dict, got: dict, tol: float = 1e-10):
    for name in METRIC_NAMES:
        a, b = ref[name], got[name]
        assert a.shape == b.shape, name
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=name)
        np.testing.assert_array_equal(np.isinf(a), np.isinf(b), err_msg=name)
        ok = np.isfinite(a)
        np.testing.assert_allclose(b[ok], a[ok], rtol=0, atol=tol, err_msg=name)


@pytest.mark.parametrize("compat", [None, "focal-calibration"])
@pytest.mark.parametrize("n,k", [(300, 7), (1, 2), (9, 10), (700, 2)])
def test_torch_cpu_equals_numpy_for_the_same_seed(n, k, compat):
    logits, labels = _data(n, k, seed=n + k)
    _, ref = bootstrap_values(logits, labels, n_resamples=23, seed=4, compat=compat, batch_size=5)
    _, got = bootstrap_values(logits, labels, n_resamples=23, seed=4, compat=compat, batch_size=5, device="torch-cpu")
    _assert_values_equal(ref, got)
    assert not np.isnan(got["classwise_ece"]).all() and not np.isnan(got["adaece"]).all()


def test_torch_cpu_equals_numpy_for_explicit_indices_large_blocks():
    """N > 2^17 uses blocks of 1024; explicit resample indices."""
    logits, labels = _data(140_000, 4, seed=2)
    idx = np.random.default_rng(9).integers(0, len(labels), size=(3, len(labels)))
    _, ref = bootstrap_values(logits, labels, indices=idx)
    _, got = bootstrap_values(logits, labels, indices=idx, device="torch-cpu")
    _assert_values_equal(ref, got)


def test_torch_cpu_equals_numpy_with_ties_and_infinite_nll():
    rng = np.random.default_rng(5)
    n = 120
    p1 = rng.choice([0.0, 0.2, 0.5, 0.6, 0.8, 0.99, 1.0], size=n)
    probs = np.stack([1 - p1, p1], axis=1)
    labels = rng.integers(0, 2, n)
    idx = rng.integers(0, n, size=(8, n))
    _, ref = bootstrap_values(probs, labels, input_kind="probs", indices=idx)
    _, got = bootstrap_values(probs, labels, input_kind="probs", indices=idx, device="torch-cpu")
    assert np.isinf(ref["nll"]).any()
    _assert_values_equal(ref, got)


def test_torch_cpu_subset_of_metrics_and_intervals():
    logits, labels = _data(400, 5)
    for metrics in (["ece"], ["adaece", "classwise_ece"], None):
        a = bootstrap(logits, labels, n_resamples=50, metrics=metrics)
        b = bootstrap(logits, labels, n_resamples=50, metrics=metrics, device="torch-cpu")
        assert a.keys() == b.keys()
        for name in a:
            assert b[name].low == pytest.approx(a[name].low, abs=1e-10)
            assert b[name].high == pytest.approx(a[name].high, abs=1e-10)
            assert b[name].point == a[name].point  # the point: the same CPU summary on both, one path


def test_torch_cpu_compare_equals_numpy():
    logits, labels = _data(300, 4)
    a = compare(logits, labels, logits * 1.7, labels, n_resamples=40, seed=2)
    b = compare(logits, labels, logits * 1.7, labels, n_resamples=40, seed=2, device="torch-cpu")
    for name, d in a.differences.items():
        e = b.differences[name]
        assert e.difference == d.difference  # the points' difference: the CPU summaries on both, one path
        if d.interval is None:
            assert e.interval is None
        else:
            assert e.interval.low == pytest.approx(d.interval.low, abs=1e-10)
            assert e.interval.high == pytest.approx(d.interval.high, abs=1e-10)


@pytest.mark.skipif(HAS_CUDA, reason="checks the error without a GPU")
def test_cuda_without_a_gpu_is_a_one_line_input_error():
    logits, labels = _data(50, 3)
    for call in (bootstrap, bootstrap_values):
        with pytest.raises(InputError, match="CUDA") as err:
            call(logits, labels, n_resamples=5, device="cuda")
        assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="CUDA"):
        compare(logits, labels, logits, labels, n_resamples=5, device="cuda")


def test_unknown_device_is_an_input_error():
    logits, labels = _data(50, 3)
    with pytest.raises(InputError, match="device"):
        bootstrap(logits, labels, n_resamples=5, device="tpu")


@pytest.mark.skipif(HAS_CUDA, reason="auto picks the GPU when there is one")
def test_auto_without_a_gpu_is_the_numpy_path_exactly():
    logits, labels = _data(300, 6)
    _, ref = bootstrap_values(logits, labels, n_resamples=20, seed=1)
    _, got = bootstrap_values(logits, labels, n_resamples=20, seed=1, device="auto")
    for name in METRIC_NAMES:
        np.testing.assert_array_equal(got[name], ref[name])


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("compat", [None, "focal-calibration"])
def test_cuda_equals_numpy(compat):
    logits, labels = _data(3000, 10, seed=3)
    _, ref = bootstrap_values(logits, labels, n_resamples=30, seed=6, compat=compat, batch_size=7)
    _, got = bootstrap_values(logits, labels, n_resamples=30, seed=6, compat=compat, batch_size=7, device="cuda")
    _assert_values_equal(ref, got)
    _, auto = bootstrap_values(logits, labels, n_resamples=30, seed=6, compat=compat, batch_size=7, device="auto")
    _assert_values_equal(ref, auto)


def test_importing_calib_does_not_import_torch():
    code = "import sys, calibrate_cli, calibrate_cli.cli, calibrate_cli.bootstrap; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ---------------------------------------------------------------- the CLI


@pytest.fixture
def paths(tmp_path):
    logits, labels = _data(300, 5, seed=8)
    p = {"logits": tmp_path / "logits.npy", "labels": tmp_path / "labels.npy", "sharp": tmp_path / "sharp.npy"}
    np.save(p["logits"], logits)
    np.save(p["labels"], labels)
    np.save(p["sharp"], logits * 2)
    return {k: str(v) for k, v in p.items()}


def _cli_json(runner, args):
    import json

    from calibrate_cli.cli import cli

    result = runner.invoke(cli, args + ["--format", "json"])
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("command", ["eval", "compare"])
def test_cli_torch_cpu_equals_cpu(runner, paths, command):
    args = [command, paths["logits"], paths["labels"]]
    args += [paths["sharp"], paths["labels"]] if command == "compare" else []
    args += ["--bootstrap", "30", "--seed", "2"]
    cpu = _cli_json(runner, args + ["--device", "cpu"])
    tc = _cli_json(runner, args + ["--device", "torch-cpu"])
    if command == "eval":
        assert cpu["intervals"].keys() == tc["intervals"].keys() and cpu["intervals"]
        for name, ci in cpu["intervals"].items():
            assert tc["intervals"][name]["low"] == pytest.approx(ci["low"], abs=1e-10)
            assert tc["intervals"][name]["high"] == pytest.approx(ci["high"], abs=1e-10)
    else:
        for name, d in cpu["differences"].items():
            if d["interval"] is not None:
                assert tc["differences"][name]["interval"]["low"] == pytest.approx(d["interval"]["low"], abs=1e-10)
                assert tc["differences"][name]["interval"]["high"] == pytest.approx(d["interval"]["high"], abs=1e-10)


@pytest.mark.skipif(HAS_CUDA, reason="checks the error without a GPU")
@pytest.mark.parametrize("command", ["eval", "compare"])
def test_cli_cuda_without_a_gpu_exits_2_with_one_line(runner, paths, command):
    from calibrate_cli.cli import cli

    args = [command, paths["logits"], paths["labels"]]
    args += [paths["sharp"], paths["labels"]] if command == "compare" else []
    result = runner.invoke(cli, args + ["--bootstrap", "10", "--device", "cuda"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:") and "CUDA" in lines[0]


def test_custom_metric_on_the_torch_path_sees_the_same_draws():
    logits, labels = _data(400, 5, seed=8)

    def mean_label(scores, labels):
        return float(np.mean(labels))

    _, ref = bootstrap_values(logits, labels, n_resamples=12, seed=3, metrics=["ece", mean_label])
    _, got = bootstrap_values(logits, labels, n_resamples=12, seed=3, metrics=["ece", mean_label], device="torch-cpu")
    np.testing.assert_array_equal(ref["mean_label"], got["mean_label"])  # the same function on the same draws
    np.testing.assert_allclose(got["ece"], ref["ece"], rtol=0, atol=1e-12)
