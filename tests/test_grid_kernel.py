"""The compiled temperature kernels (calibrate_cli.engine.numba_grid) equal the numpy passes.

The grid kernel computes every T of a row together with a vectorised exp and falls back to numpy's
exact arithmetic wherever rounding could change a bin or an argmax; these tests force both engines
on the same data (including confidences exactly on bin edges, ties, K = 2, probabilities with
zeros) and compare every T's objective, and the exact NLL fit.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

import calibrate_cli.calibrators.temperature as temperature_module  # noqa: E402
from calibrate_cli import fit_temperature  # noqa: E402
from calibrate_cli.engine.numba_grid import _exp_into  # noqa: E402
from calibrate_cli.evaluate import evaluate  # noqa: E402
from calibrate_cli.calibrators.temperature_fit import apply_temperature  # noqa: E402


def _with_engine(monkeypatch, engine):
    monkeypatch.setattr(temperature_module, "default_engine", lambda n_values=None: engine)  # the grid
    monkeypatch.setattr(temperature_module, "nll_engine", lambda n_values=None: engine)  # the NLL fit


def _fits(monkeypatch, *args, **kwargs):
    out = []
    for engine in ("numpy", "fused"):
        _with_engine(monkeypatch, engine)
        out.append(fit_temperature(*args, **kwargs))
    return out


def _data(n, k, seed, ties=True):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, k)) * 2.5).astype(np.float32)
    y = rng.integers(0, k, n)
    boost = rng.random(n) < 0.6
    x[boost, y[boost]] += 5
    if ties:
        x[: n // 4] = np.round(x[: n // 4])  # ties of the maximum: argmax = lowest index at every T
        x[n // 4 : n // 4 + 6] = 0.0  # confidence exactly 1/K at every T (1/3, 1/2: bin edges)
        x[n // 4 + 6 : n // 4 + 9, 0] = 1e4  # confidence exactly 1.0 at every T
    return x, y


def test_vectorised_exp_is_within_two_ulps():
    x = np.concatenate([-np.geomspace(1e-300, 708, 20000), [0.0, -0.5, -np.log(2) / 2, -745.0, -np.inf]])
    out = np.empty_like(x)
    buffers = [np.empty_like(x) for _ in range(3)]
    _exp_into(1.0, x, np.zeros_like(x), out, buffers[0], buffers[0].view(np.int64), buffers[1], buffers[2],
              buffers[2].view(np.int64), False)
    exact = np.exp(np.maximum(x, -708.0))
    assert out[x == 0.0][0] == 1.0
    np.testing.assert_allclose(out, exact, rtol=4.5e-16, atol=0)


@pytest.mark.parametrize("n,k,seed", [(500, 3, 0), (400, 2, 1), (300, 10, 2), (120, 100, 3)])
@pytest.mark.parametrize("objective", ["ece", "nll"])
def test_fused_grid_equals_numpy_grid(monkeypatch, n, k, seed, objective):
    x, y = _data(n, k, seed)
    for n_bins in (15, 10, 6):
        a, b = _fits(monkeypatch, x, y, objective=objective, n_bins=n_bins)
        assert a.temperature == b.temperature
        np.testing.assert_allclose([v for _, v in b.curve], [v for _, v in a.curve], rtol=0, atol=1e-13)
        assert b.objective_at_one == pytest.approx(a.objective_at_one, abs=1e-13)


def test_fused_grid_bins_confidences_on_edges_exactly(monkeypatch):
    """Equal logits: conf = 1/K exactly at every T (an edge for K = 2, 3, 5 with M = 15 or 10):
    the fused grid recomputes those exactly, so every T's ECE equals evaluate's to 1e-15."""
    rng = np.random.default_rng(4)
    for k in (2, 3, 5):
        x = np.zeros((60, k))
        x[::2] += rng.normal(size=(30, k))
        y = rng.integers(0, k, 60)
        _with_engine(monkeypatch, "fused")
        for n_bins in (15, 10):
            fit = fit_temperature(x, y, objective="ece", n_bins=n_bins, grid=(0.5, 3, 0.5))
            for t, value in fit.curve:
                expected = evaluate(apply_temperature(x, t), y, n_bins=n_bins).metrics["ece"]
                assert value == pytest.approx(expected, abs=1e-15)


def test_fused_grid_on_probabilities_with_zeros(monkeypatch):
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.ones(6) * 0.3, size=400)
    p[p < 0.01] = 0.0
    p /= p.sum(axis=1, keepdims=True)
    y = p.argmax(axis=1)
    a, b = _fits(monkeypatch, p, y, objective="ece", input_kind="probs")
    assert a.temperature == b.temperature
    np.testing.assert_allclose([v for _, v in b.curve], [v for _, v in a.curve], rtol=0, atol=1e-13)


@pytest.mark.parametrize("chunk_rows", [None, 7])
def test_fused_grid_does_not_depend_on_chunks_beyond_rounding(monkeypatch, chunk_rows):
    if chunk_rows:
        monkeypatch.setattr(temperature_module, "_GRID_CHUNK_ELEMENTS", 100 * 4 * chunk_rows)
    x, y = _data(300, 4, 6)
    a, b = _fits(monkeypatch, x, y, objective="ece")
    np.testing.assert_allclose([v for _, v in b.curve], [v for _, v in a.curve], rtol=0, atol=1e-13)


@pytest.mark.parametrize("n,k,seed", [(2000, 10, 7), (300, 2, 8), (200, 50, 9)])
def test_fused_exact_nll_fit_equals_numpy(monkeypatch, n, k, seed):
    x, y = _data(n, k, seed)
    a, b = _fits(monkeypatch, x, y, search="nll")
    assert b.temperature == pytest.approx(a.temperature, rel=1e-10)
    assert b.objective_value == pytest.approx(a.objective_value, abs=1e-12)
    assert b.objective_at_one == pytest.approx(a.objective_at_one, abs=1e-12)
    assert a.parameters["passes"] == b.parameters["passes"]


@pytest.mark.parametrize("engine", ["numpy", "fused"])
def test_exact_nll_fit_makes_no_extra_passes(monkeypatch, engine):
    """The NLL at T and at T = 1 come from the Newton passes: one read of the data per pass."""
    x, y = _data(500, 5, 10, ties=False)
    _with_engine(monkeypatch, engine)
    calls = []
    original = temperature_module._nll_pass
    monkeypatch.setattr(temperature_module, "_nll_pass", lambda *a, **kw: calls.append(a[1]) or original(*a, **kw))
    fit = fit_temperature(x, y, search="nll")
    assert len(calls) == fit.parameters["passes"] < 20 and calls[0] == 1.0
    reference = evaluate(apply_temperature(x, fit.temperature), y).metrics["nll"]
    assert fit.objective_value == pytest.approx(reference, abs=1e-12)
    assert fit.objective_at_one == pytest.approx(evaluate(x, y).metrics["nll"], abs=1e-12)
