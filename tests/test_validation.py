"""The checks of the scores (calibrate_cli.data.predictions): a cheap min/max per chunk decides whether the
exact per-row search runs; the error must name the first bad row wherever it is, in any chunk."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import calibrate_cli.data.predictions as predictions
from calibrate_cli import as_predictions
from calibrate_cli.errors import InputError


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(1, 60),
    k=st.integers(2, 5),
    bad=st.sampled_from([np.nan, np.inf, -np.inf]),
    dtype=st.sampled_from([np.float32, np.float64, np.float16]),
    data=st.data(),
)
def test_the_first_non_finite_row_is_named_in_any_chunk(n, k, bad, dtype, data):
    """The first look (numpy's min and max) sends the chunk to the exact per-row search."""
    rng = np.random.default_rng(n * 7 + k)
    scores = rng.normal(size=(n, k)).astype(dtype)
    rows = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3)))
    for r in rows:
        scores[r, data.draw(st.integers(0, k - 1))] = bad
    old = predictions._CHUNK_ELEMENTS
    predictions._CHUNK_ELEMENTS = 7  # chunks of one to three rows
    try:
        with pytest.raises(InputError, match=rf"contain {'NaN' if np.isnan(bad) else 'Inf'} \(first at row {rows[0]}\)"):
            as_predictions(scores, np.zeros(n, dtype=np.int64), "logits")
    finally:
        predictions._CHUNK_ELEMENTS = old


@pytest.mark.parametrize("value,message", [(-0.01, "outside"), (1.5, "outside"), (0.7, "sum to 1")])
def test_probabilities_out_of_range_or_not_summing_to_one_name_their_row(value, message, monkeypatch):
    monkeypatch.setattr(predictions, "_CHUNK_ELEMENTS", 8)
    probs = np.full((30, 4), 0.25)
    probs[17] = [value, 1.0 - value, 0.0, 0.0] if message == "outside" else [value, 0.1, 0.1, 0.2]
    with pytest.raises(InputError, match=rf"{message}.*row 17|row 17.*{message}"):
        as_predictions(probs, np.zeros(30, dtype=np.int64), "probs")
    probs[17] = [0.25] * 4
    as_predictions(probs, np.zeros(30, dtype=np.int64), "probs")  # valid again: no error


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 40),
    k=st.integers(1, 4),
    dtype=st.sampled_from([np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8]),
    specials=st.lists(st.sampled_from([np.nan, np.inf, -np.inf, -1e30, 1e30, 0.0]), max_size=4),
    data=st.data(),
)
def test_largest_magnitude_is_the_largest_finite_absolute_value(n, k, dtype, specials, data):
    """max(|min|, |max|) per chunk, the slow path only where a chunk holds NaN/inf: equal to a plain loop
    over the finite entries (0 when there are none), chunks of one to three rows."""
    rng = np.random.default_rng(n * 11 + k)
    scores = (rng.normal(size=(n, k)) * 50).astype(dtype) if np.dtype(dtype).kind == "f" else \
        rng.integers(0 if dtype == np.uint8 else -100, 100, size=(n, k)).astype(dtype)
    if np.dtype(dtype).kind == "f" and n:
        for value in specials:
            with np.errstate(over="ignore"):
                scores[data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, k - 1))] = value
    expected = 0.0
    for value in scores.ravel().tolist():
        if np.isfinite(value):
            expected = max(expected, abs(float(value)))
    old = predictions._CHUNK_ELEMENTS
    predictions._CHUNK_ELEMENTS = 7  # chunks of one to three rows
    try:
        assert predictions.largest_magnitude(scores) == expected
    finally:
        predictions._CHUNK_ELEMENTS = old


@settings(max_examples=150, deadline=None)
@given(
    dtype=st.sampled_from(["<i8", ">i8", "<i4", "i2", "i1", "u1", "<u8", ">u4", "?"]),
    k=st.integers(1, 300),
    data=st.data(),
)
def test_one_max_says_whether_every_integer_label_is_a_class_index(dtype, k, data):
    """_below (one max over the labels read as unsigned) agrees with the two comparisons 0 ≤ y < k, for
    every integer width, signedness and byte order, negative labels and the extremes included."""
    dt = np.dtype(dtype)
    info = np.iinfo(dt) if dt.kind != "b" else None
    lo, hi = (0, 1) if info is None else (int(info.min), int(info.max))
    pick = st.one_of(st.integers(lo, hi), st.sampled_from([v for v in (lo, hi, -1, 0, k - 1, k, k + 1) if lo <= v <= hi]))
    labels = np.array(data.draw(st.lists(pick, min_size=1, max_size=20)), dtype=dt)
    exact = bool(((labels.astype(object) >= 0) & (labels.astype(object) < k)).all())
    assert predictions._below(labels, k) == exact
