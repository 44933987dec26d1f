"""--device on calib eval / temperature / plot (issue 15): the metrics pass on a torch device.

torch-cpu runs the GPU code on the CPU; "cuda" without a GPU, and a torch device without torch,
are one-line errors (exit 2). The CUDA test runs only where torch sees a GPU.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from calibrate_cli.cli import cli


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(3)
    n, k = 500, 7
    labels = rng.integers(0, k, n)
    logits = (rng.normal(size=(n, k)) * 2.0).astype(np.float32)
    logits[np.arange(n), labels] += 2.0
    logits[:40] = np.round(logits[:40])  # ties
    np.save(tmp_path / "x.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    return str(tmp_path / "x.npy"), str(tmp_path / "y.npy")


def _json(result):
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _close(a: dict, b: dict, tol=1e-9):
    assert a.keys() == b.keys()
    for name, value in a.items():
        assert (b[name] == value) if value is None else b[name] == pytest.approx(value, abs=tol), name


def test_eval_on_torch_cpu_equals_cpu_and_records_the_device(runner, files):
    pytest.importorskip("torch")
    cpu = _json(runner.invoke(cli, ["eval", *files, "--format", "json"]))
    dev = _json(runner.invoke(cli, ["eval", *files, "--format", "json", "--device", "torch-cpu"]))
    assert cpu["device"] == "cpu" and dev["device"] == "torch-cpu"
    _close(cpu["metrics"], dev["metrics"])
    assert [b["count"] for b in cpu["bins"]["ece"]] == [b["count"] for b in dev["bins"]["ece"]]
    # with a bootstrap: it runs on the device over a CPU summary, so the draws and intervals are the CPU's
    args = ["eval", *files, "--format", "json", "--bootstrap", "50"]
    a, b = _json(runner.invoke(cli, args)), _json(runner.invoke(cli, args + ["--device", "torch-cpu"]))
    assert b["device"] == "cpu" and b["bootstrap"]["device"] == "torch-cpu"
    for name, ci in a["intervals"].items():
        assert b["intervals"][name]["low"] == pytest.approx(ci["low"], abs=1e-9), name
        assert b["intervals"][name]["high"] == pytest.approx(ci["high"], abs=1e-9), name


def test_eval_device_auto_falls_back_to_the_cpu_without_a_gpu(runner, files):
    torch = pytest.importorskip("torch")
    doc = _json(runner.invoke(cli, ["eval", *files, "--format", "json", "--device", "auto"]))
    assert doc["device"] == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("command", ["eval", "temperature", "plot"])
def test_cuda_without_a_gpu_is_one_line_exit_2(runner, files, tmp_path, command):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    extra = ["-o", str(tmp_path / "r.png")] if command == "plot" else []
    result = runner.invoke(cli, [command, *files, "--device", "cuda", *extra])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "CUDA" in lines[0], result.stderr
    assert not (tmp_path / "r.png").exists()


@pytest.mark.parametrize("command", ["eval", "temperature", "plot"])
def test_missing_torch_names_the_pinned_install(runner, files, tmp_path, monkeypatch, command):
    monkeypatch.setitem(sys.modules, "torch", None)
    extra = ["-o", str(tmp_path / "r.png")] if command == "plot" else []
    for device in ("cuda", "torch-cpu"):
        result = runner.invoke(cli, [command, *files, "--device", device, *extra])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "pip install torch==2.13.0" in lines[0], result.stderr


def test_temperature_on_torch_cpu_equals_cpu(runner, files):
    pytest.importorskip("torch")
    for search in ("grid", "nll"):
        args = ["temperature", *files, "--search", search, "--format", "json"]
        cpu = _json(runner.invoke(cli, args))
        dev = _json(runner.invoke(cli, args + ["--device", "torch-cpu"]))
        assert cpu["device"] == "cpu" and dev["device"] == "torch-cpu"
        assert dev["temperature"] == pytest.approx(cpu["temperature"], rel=1e-9)
        _close(cpu["fit"]["before"], dev["fit"]["before"])
        _close(cpu["fit"]["after"], dev["fit"]["after"])


def test_plot_on_torch_cpu(runner, files, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "r.svg"
    result = runner.invoke(cli, ["plot", *files, "-o", str(out), "--device", "torch-cpu"])
    assert result.exit_code == 0, result.stderr
    assert out.exists()


def test_eval_on_cuda(runner, files):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cpu = _json(runner.invoke(cli, ["eval", *files, "--format", "json"]))
    dev = _json(runner.invoke(cli, ["eval", *files, "--format", "json", "--device", "cuda"]))
    assert dev["device"] == "cuda"
    _close(cpu["metrics"], dev["metrics"])


def test_shards_on_torch_cpu_equal_one_file_on_the_cpu(runner, files, tmp_path):
    pytest.importorskip("torch")
    x, y = np.load(files[0]), np.load(files[1])
    (tmp_path / "xs").mkdir()
    (tmp_path / "ys").mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(y)), 3)):
        np.save(tmp_path / "xs" / f"x_{i}.npy", x[rows])
        np.save(tmp_path / "ys" / f"y_{i}.npy", y[rows])
    one = _json(runner.invoke(cli, ["eval", *files, "--format", "json"]))
    sharded = _json(runner.invoke(cli, ["eval", str(tmp_path / "xs"), str(tmp_path / "ys"), "--format", "json",
                                        "--device", "torch-cpu"]))
    assert sharded["device"] == "torch-cpu"
    _close(one["metrics"], sharded["metrics"])
