"""Newton fits of vector, matrix and Dirichlet scaling: their exact Hessians against finite
differences of the analytic gradients, the same optimum as L-BFGS-B, and the iteration counts that
make `calib fit --method all` run in seconds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from calibrate_cli.calibrators import matrix, vector
from calibrate_cli.calibrators._solve import newton_affordable
from calibrate_cli.calibrators.base import FitData
from calibrate_cli.calibrators.matrix import DirichletCalibration, MatrixScaling, odir_hessian, odir_objective
from calibrate_cli.calibrators.vector import VectorScaling, _vector_hessian, _vector_pass

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"


def synthetic(n=300, k=4, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), labels] += 1.5
    return scale * logits, labels


def finite_difference_hessian(grad, theta, h=1e-5):
    """Central differences of an analytic gradient, column by column."""
    cols = []
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        cols.append((grad(theta + e) - grad(theta - e)) / (2 * h))
    return np.array(cols).T


def test_odir_hessian_equals_finite_differences_of_the_gradient():
    logits, labels = synthetic(n=60, k=3, seed=4)
    x = logits / 3.0
    k = 3
    rng = np.random.default_rng(5)
    theta = np.concatenate([(np.eye(k) + 0.3 * rng.normal(size=(k, k))).ravel(), rng.normal(size=k)])

    def grad(t):
        _, dw, db = odir_objective(x, labels, t[: k * k].reshape(k, k), t[k * k:], 0.3, 0.2)
        return np.concatenate([dw.ravel(), db])

    h = odir_hessian(x, labels, theta[: k * k].reshape(k, k), theta[k * k:], 0.3, 0.2)
    assert h.shape == (k * k + k, k * k + k)
    np.testing.assert_allclose(h, finite_difference_hessian(grad, theta), atol=1e-8)
    np.testing.assert_allclose(h, h.T, atol=1e-15)


def test_vector_hessian_equals_finite_differences_of_the_gradient():
    logits, labels = synthetic(n=80, k=4, seed=6)
    data = FitData(logits, labels, "x")
    k = 4
    theta = np.concatenate([np.linspace(0.5, 1.5, k), np.linspace(-0.3, 0.4, k)])

    def grad(t):
        _, gw, gb = _vector_pass(data, t[:k], t[k:])
        return np.concatenate([gw, gb])

    np.testing.assert_allclose(_vector_hessian(data, theta[:k], theta[k:]), finite_difference_hessian(grad, theta), atol=1e-8)


@pytest.mark.parametrize("cls", [VectorScaling, MatrixScaling, DirichletCalibration])
@pytest.mark.parametrize("seed", [0, 1])
def test_newton_and_lbfgs_reach_the_same_optimum(monkeypatch, cls, seed):
    logits, labels = synthetic(n=250, k=4, seed=seed)
    newton = cls().fit(logits, labels)
    assert newton.fit_info_.warnings == ()
    monkeypatch.setattr(matrix, "newton_affordable", lambda n, p: False)
    monkeypatch.setattr(vector, "newton_affordable", lambda n, p: False)
    lbfgs = cls().fit(logits, labels)
    assert newton.fit_info_.value == pytest.approx(lbfgs.fit_info_.value, rel=1e-10)
    assert newton.fit_info_.value <= lbfgs.fit_info_.value + 1e-13
    np.testing.assert_allclose(newton.predict_proba(logits), lbfgs.predict_proba(logits), atol=1e-5)  # L-BFGS-B stops at gtol 1e-7


@pytest.mark.parametrize("cls, most", [(VectorScaling, 30), (MatrixScaling, 50), (DirichletCalibration, 50)])
def test_sample_model_fits_in_few_iterations(cls, most):
    # before: L-BFGS-B took 555 (vector), 554 (matrix) and 5410 (Dirichlet) iterations, ~30 s in all
    logits = np.load(SAMPLE / "val_logits.npy")
    labels = np.load(SAMPLE / "val_labels.npy")
    cal = cls().fit(logits, labels)
    assert cal.fit_info_.solver["iterations"] <= most
    assert cal.fit_info_.warnings == ()
    assert cal.fit_info_.value < cal.fit_info_.at_identity


def test_newton_budget():
    assert newton_affordable(719, 110)
    assert not newton_affordable(10**6, 110)  # 1.2e10 multiply-adds per Hessian: L-BFGS-B instead
    assert not newton_affordable(10, 2001)


def test_a_newton_fit_that_stops_early_says_so(monkeypatch):
    import scipy.optimize

    real = scipy.optimize.minimize

    def capped(*args, **kwargs):
        kwargs["options"] = {**kwargs.get("options", {}), "maxiter": 1}
        return real(*args, **kwargs)

    monkeypatch.setattr(scipy.optimize, "minimize", capped)
    logits, labels = synthetic(n=250, k=4, seed=2)
    for cls in (VectorScaling, DirichletCalibration):
        cal = cls().fit(logits, labels)
        assert any("did not converge" in w for w in cal.fit_info_.warnings), cls
