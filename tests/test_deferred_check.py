"""The score values of `evaluate` and the one-metric functions (calib.ece, ...) are checked by the summary
pass, chunk by chunk, instead of by a pass of their own (``as_predictions(check_values=False)``,
``Predictions.pending``): a memory-mapped file is read once. The errors are the eager check's, word for
word, naming the first bad row even when a later chunk (on another thread) fails first."""

from __future__ import annotations

import numpy as np
import pytest

import calibrate_cli as calib
from calibrate_cli.data import predictions as predictions_module
from calibrate_cli.errors import InputError
from calibrate_cli.evaluate import summarize_data
from calibrate_cli.data.predictions import ScoreCheck, as_predictions


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 64 values (16 rows of K = 4) on two threads: many chunks in flight."""
    monkeypatch.setattr(predictions_module, "_CHUNK_ELEMENTS", 64)
    monkeypatch.setenv("CALIB_THREADS", "2")


def _logits(n=400, k=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, k)) * 2, rng.integers(0, k, n)


def _probs(n=400, k=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(k), n), rng.integers(0, k, n)


def _bad_sets():
    """(name, scores, labels, input_kind): a bad value in two neighbouring chunks (rows 203 and 210), in flight together."""
    out = []
    for what, value in (("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf)):
        x, y = _logits()
        x[203, 1] = x[210, 2] = value
        out.append((what, x, y, "logits"))
    p, y = _probs()
    p[203, 0] = -0.25
    p[210, 0] = -0.5
    out.append(("negative probability", p, y, "probs"))
    p, y = _probs()
    p[203] *= 1.5
    p[210] *= 2.0
    out.append(("row sum", p, y, "probs"))
    return out


@pytest.mark.parametrize("case", range(5), ids=[c[0] for c in _bad_sets()])
def test_the_pass_raises_the_eager_checks_error(case, small_chunks):
    _, x, y, kind = _bad_sets()[case]
    with pytest.raises(InputError) as eager:
        as_predictions(x, y, kind, scores_name="x.npy")
    assert "203" in str(eager.value)
    with pytest.raises(InputError) as in_pass:
        calib.evaluate(x, y, input_kind=kind, scores_name="x.npy")
    assert str(in_pass.value) == str(eager.value)
    for metric in (calib.ece, calib.nll, calib.classwise_ece):
        with pytest.raises(InputError) as one:
            metric(x, y, input_kind=kind)
        with pytest.raises(InputError) as eager_default_name:
            as_predictions(x, y, kind)
        assert str(one.value) == str(eager_default_name.value)


def test_a_bad_value_only_in_a_late_chunk_is_found(small_chunks):
    x, y = _logits()
    x[-1, -1] = np.nan
    with pytest.raises(InputError, match=r"scores contain NaN \(first at row 399\)"):
        calib.ece(x, y)


def test_the_values_are_read_once(small_chunks, monkeypatch):
    """Each chunk's values are checked once, by the summary pass: no pass of their own first."""
    x, y = _logits()
    calls = []
    original = ScoreCheck.rows
    monkeypatch.setattr(ScoreCheck, "rows", lambda self, chunk, first: (calls.append(first), original(self, chunk, first)))
    data = summarize_data(x, y)
    assert sorted(calls) == list(range(0, 400, 16))  # each chunk of 16 rows once
    assert data.predictions.pending is None  # checked: usable by the bootstrap and the rest
    calls.clear()
    calib.ece(x, y)
    assert sorted(calls) == list(range(0, 400, 16))
    calls.clear()
    as_predictions(x, y)  # the eager check: the same chunks
    assert sorted(calls) == list(range(0, 400, 16))


def test_values_are_the_same_with_the_check_in_the_pass():
    x, y = _logits(3000, 10, seed=3)
    deferred = calib.evaluate(x, y).metrics
    eager = calib.evaluate(as_predictions(x, y), None).metrics
    assert deferred == eager


def test_binary_scores_are_checked_eagerly():
    """1-D scores become float64 columns: their check stays eager (with the stored dtype's tolerance)."""
    s = np.array([0.2, 0.9, 1.0015, 0.4], dtype=np.float16)  # within float16's rounding of 1
    p = as_predictions(s, np.array([0, 1, 1, 0]), "probs", check_values=False)
    assert p.pending is None
    with pytest.raises(InputError, match="outside"):
        as_predictions(np.array([0.2, 1.5]), np.array([0, 1]), "probs", check_values=False)


def test_unchecked_predictions_are_not_divided():
    x, y = _logits()
    p = as_predictions(x, y, check_values=False)
    with pytest.raises(ValueError, match="not checked"):
        p.divided(2.0)
