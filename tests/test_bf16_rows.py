"""bfloat16 (N, K) scores read a row chunk at a time (issue 35): safetensors and .pt files give a
:class:`~calibrate_cli.data.arrays.BFloat16Rows`, whose rows are the exact float32 widening, and
``evaluate`` / ``calib eval`` on them equal the float32-widened reference without ever widening the
whole array."""

from __future__ import annotations

import json

import numpy as np
import pytest

import calibrate_cli as calib
from calibrate_cli.cli import cli
from calibrate_cli.data import arrays, io
from calibrate_cli.data.arrays import BFloat16Rows
from calibrate_cli.data.io import load_array
from libm import assert_agree

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")


@pytest.fixture()
def bf16(tmp_path):
    """(N, K) bfloat16 logits as a torch tensor, labels, and their float32 widening by torch (the
    reference: independent of calib's reader), saved as .safetensors, .pt, and float32 .npy."""
    rng = np.random.default_rng(35)
    n, k = 700, 40
    logits = rng.standard_normal((n, k)).astype(np.float32) * 3.0
    labels = rng.integers(0, k, n)
    logits[np.arange(n), labels] += rng.uniform(0.0, 6.0, n).astype(np.float32)
    t = torch.from_numpy(logits).to(torch.bfloat16)
    reference = t.float().numpy()
    st.save_file({"logits": t}, str(tmp_path / "b.safetensors"))
    torch.save({"outputs": {"logits": t}}, tmp_path / "b.pt")
    np.save(tmp_path / "ref.npy", reference)
    np.save(tmp_path / "y.npy", labels)
    return t, labels, reference


def test_rows_are_the_exact_widening_of_every_bit_pattern():
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).reshape(256, 256)
    want = torch.from_numpy(patterns.view(np.int16).copy()).view(torch.bfloat16).float().numpy()
    rows = BFloat16Rows(patterns)
    assert rows.shape == (256, 256) and rows.ndim == 2 and rows.dtype == np.float32 and len(rows) == 256
    got = np.concatenate([rows[a:a + 37] for a in range(0, 256, 37)])
    finite = ~np.isnan(want)
    assert np.array_equal(np.isnan(got), ~finite)
    assert np.array_equal(got[finite].view(np.uint32), want[finite].view(np.uint32))  # bit for bit (±0 too)
    out = np.empty((10, 256), dtype=np.float32)
    assert rows.read_into(slice(100, 110), out) is out
    assert np.array_equal(out.view(np.uint32), rows[100:110].view(np.uint32))
    assert float(rows[1, 0x80]) == float(want[1, 0x80])  # a single value
    whole = np.asarray(rows)  # asked for explicitly: the whole float32 array
    assert np.array_equal(np.isnan(whole), ~finite) and np.array_equal(whole[finite], want[finite])


def test_safetensors_and_pt_give_a_row_reader_of_the_stored_values(tmp_path, bf16, monkeypatch):
    t, _, reference = bf16
    monkeypatch.setattr(io, "MMAP_THRESHOLD_BYTES", 0)  # .pt memory-mapped by torch.load, as a large file is
    for source in (f"{tmp_path / 'b.safetensors'}:logits", f"{tmp_path / 'b.pt'}:outputs.logits"):
        got = load_array(source)
        assert isinstance(got, BFloat16Rows), source
        assert got.shape == reference.shape and got.stored_eps == 2.0 ** -7
        assert np.array_equal(got[0:reference.shape[0]], reference), source
        assert np.array_equal(np.asarray(got), reference) and np.array_equal(got * 2, reference * 2)


def test_a_1d_bf16_tensor_is_still_widened_at_load(tmp_path):
    t = torch.tensor([0.25, -3.5, 7.0]).to(torch.bfloat16)
    st.save_file({"s": t}, str(tmp_path / "s.safetensors"))
    got = load_array(tmp_path / "s.safetensors")
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    assert np.array_equal(got, np.array([0.25, -3.5, 7.0], dtype=np.float32))


@pytest.mark.parametrize("name", ["b.safetensors", "b.pt"])
def test_evaluate_equals_the_widened_reference_without_widening_whole(tmp_path, bf16, monkeypatch, no_whole_widening,
                                                                       name):
    _, labels, reference = bf16
    monkeypatch.setattr(io, "MMAP_THRESHOLD_BYTES", 0)
    scores = load_array(tmp_path / name)
    want = calib.evaluate(reference, labels)
    got = calib.evaluate(scores, labels)
    assert_agree(got.metrics, want.metrics)
    assert (got.n, got.k) == reference.shape


@pytest.mark.parametrize("name", ["b.safetensors", "b.pt"])
@pytest.mark.parametrize("engine", ["fused", "numpy"])
def test_calib_eval_equals_the_widened_reference(runner, tmp_path, bf16, monkeypatch, no_whole_widening, name, engine):
    monkeypatch.setattr(io, "MMAP_THRESHOLD_BYTES", 0)
    monkeypatch.setenv("CALIB_ENGINE", engine)

    def metrics(path) -> dict:
        result = runner.invoke(cli, ["eval", str(path), str(tmp_path / "y.npy"), "-f", "json"])
        assert result.exit_code == 0, result.output + getattr(result, "stderr", "")
        return json.loads(result.stdout)["metrics"]

    assert_agree(metrics(tmp_path / name), metrics(tmp_path / "ref.npy"))


def test_bf16_probabilities_are_checked_chunk_by_chunk(runner, tmp_path, no_whole_widening):
    p = torch.softmax(torch.randn(300, 6, generator=torch.Generator().manual_seed(3)), dim=1).to(torch.bfloat16)
    p[123, 2] = float("nan")
    st.save_file({"p": p}, str(tmp_path / "p.safetensors"))
    np.save(tmp_path / "y.npy", np.zeros(300, dtype=np.int64))
    result = runner.invoke(cli, ["eval", str(tmp_path / "p.safetensors"), str(tmp_path / "y.npy"), "--probs"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "p.safetensors" in lines[0] and "NaN" in lines[0] and "row 123" in lines[0]


def test_widen_bf16_is_the_high_half():
    bits = np.array([0x3F80, 0xBF80, 0x7F80, 0x0001], dtype=np.uint16)  # 1, -1, inf, the least subnormal
    want = np.array([1.0, -1.0, np.inf, 2.0 ** -133], dtype=np.float32)
    assert np.array_equal(arrays.widen_bf16(bits), want)
