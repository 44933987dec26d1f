"""Inputs above io.MMAP_THRESHOLD_BYTES are memory-mapped (read-only) and their pages given back as
passes read them (issue 15): every command must work on such arrays exactly as on arrays in memory,
and the evaluation's own memory savings (labels' pages released, confidences sorted in their own
buffer, AdaECE's edges selected) must not change a single number or touch the caller's arrays.

A mapped array and the same array in memory take the same path (the engine depends on the input's
size only; the same values are read chunk by chunk): their outputs are compared bit for bit. The
metric functions (calib.ece, …) take passes of their own: compared with `evaluate` within the numeric
contract of tests/libm.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from libm import METRIC_ABS, METRIC_REL

import calibrate_cli.data.io as io
from calibrate_cli.engine import sorting
from calibrate_cli.cli import cli
from calibrate_cli.evaluate import evaluate, report_from_summary, summarize_data
from calibrate_cli.data.pages import mapped_file
from calibrate_cli.engine.sorting import order_statistics


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(11)
    paths = {}
    for split, n in (("val", 3000), ("test", 2000)):
        labels = rng.integers(0, 5, n)
        logits = rng.normal(size=(n, 5)) * 2
        logits[np.arange(n), labels] += 2.0
        logits[:50] = 0.0  # ties: confidence 1/K for 50 rows
        np.save(tmp_path / f"{split}.npy", logits)
        np.save(tmp_path / f"{split}_y.npy", labels)
        paths[split] = (str(tmp_path / f"{split}.npy"), str(tmp_path / f"{split}_y.npy"))
    return tmp_path, paths


COMMANDS = {
    "eval": lambda d, p: ["eval", *p["test"], "-f", "json"],
    "eval --bootstrap": lambda d, p: ["eval", *p["test"], "-f", "json", "--bootstrap", "50", "--seed", "1"],
    "temperature": lambda d, p: ["temperature", *p["val"], "--test", *p["test"], "-f", "json"],
    "temperature nll": lambda d, p: ["temperature", *p["val"], "--search", "nll", "-f", "json"],
    "fit": lambda d, p: ["fit", *p["val"], "--method", "all", "--test", *p["test"], "-f", "json"],
    "compare": lambda d, p: ["compare", *p["val"], *p["val"], "--bootstrap", "20", "-f", "json"],
    "plot": lambda d, p: ["plot", *p["test"], "-o", str(d / "r.png"), "--force"],
    "report": lambda d, p: ["report", *p["val"], *p["test"], "-o", str(d / "r.html"), "--bootstrap", "0", "--force"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_gives_the_same_output_on_memory_mapped_inputs(runner, files, monkeypatch, command):
    directory, paths = files
    args = COMMANDS[command](directory, paths)
    in_memory = runner.invoke(cli, args)
    assert in_memory.exit_code == 0, in_memory.output + in_memory.stderr
    monkeypatch.setattr(io, "MMAP_THRESHOLD_BYTES", 0)
    assert mapped_file(io.load_array(paths["test"][0])) is not None  # mapped now, read-only
    mapped = runner.invoke(cli, args)
    assert mapped.exit_code == 0, mapped.output + mapped.stderr
    if "-f" in args:  # the same path over the same values (module docstring): equal bits
        assert json.loads(mapped.stdout) == json.loads(in_memory.stdout)


def test_evaluate_leaves_the_callers_arrays_untouched_and_equals_the_unconsumed_summary(files, monkeypatch):
    """evaluate() sorts its own summary's confidences in place (consume; where the sort does not run
    beside the binnings): the caller's arrays are not touched, and every number equals the report of
    a summary that is sorted on a copy."""
    _, paths = files
    x, y = np.load(paths["test"][0]), np.load(paths["test"][1])
    x0, y0 = x.copy(), y.copy()
    report = evaluate(x, y)
    assert np.array_equal(x, x0) and np.array_equal(y, y0)
    import calibrate_cli as calib

    # the metric functions' own passes (top-label rows, width-only bins): two paths, within the contract
    close = dict(rel=METRIC_REL, abs=METRIC_ABS)
    assert calib.adaece(x, y) == pytest.approx(report.metrics["adaece"], **close)
    assert calib.ece(x, y) == pytest.approx(report.metrics["ece"], **close)
    assert np.array_equal(x, x0) and np.array_equal(y, y0)
    summary = summarize_data(x, y, columns=False).summary
    kept = summary.confidences.copy()
    assert report_from_summary(summary).to_dict() == report.to_dict()
    assert np.array_equal(summary.confidences, kept)  # not consumed unless asked
    monkeypatch.setenv("CALIB_THREADS", "1")  # (from TOGETHER_SAMPLES on more threads: a sorted copy)
    consumed = report_from_summary(summary, consume=True)
    assert consumed.to_dict() == report.to_dict()
    assert np.array_equal(summary.confidences, np.sort(kept))  # consumed: sorted in its own buffer


def test_memory_mapped_labels_give_back_their_pages(tmp_path):
    """Labels checked and summarised from a memory map: the same report, and the pass ends with the
    labels' pages released (the map still reads the same values back from the file)."""
    rng = np.random.default_rng(2)
    y = rng.integers(0, 3, 200_000)
    x = rng.normal(size=(200_000, 3))
    np.save(tmp_path / "y.npy", y)
    mapped = np.load(tmp_path / "y.npy", mmap_mode="r")
    assert evaluate(x, mapped).to_dict() == evaluate(x, y).to_dict()
    assert np.array_equal(mapped, y)


def test_a_bad_label_in_a_late_chunk_is_named_by_its_row(tmp_path):
    from calibrate_cli.errors import InputError
    from calibrate_cli.data import predictions

    y = np.zeros(3_000_000, dtype=np.int64)
    y[2_500_001] = 7
    with pytest.raises(InputError, match="label 7 at row 2500001"):
        predictions.as_predictions(np.zeros((3_000_000, 2), dtype=np.float32), y, "logits")
    yf = np.zeros(3_000_000)
    yf[2_999_999] = 0.5
    with pytest.raises(InputError, match="row 2999999 is 0.5"):
        predictions.as_predictions(np.zeros((3_000_000, 2), dtype=np.float32), yf, "logits")


values_strategy = st.lists(
    st.one_of(
        st.floats(0, 1, allow_nan=False),
        st.sampled_from([0.0, 0.5, 1.0, 1 - 2**-52, 0.5 + 2**-53, 1e-300, 5e-324]),
    ),
    min_size=1, max_size=300,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=values_strategy, data=st.data(), buckets=st.sampled_from([2, 4, 16]), gather=st.integers(1, 40))
def test_order_statistics_equal_a_full_sort(values, data, buckets, gather):
    """Exact k-th smallest values for any ranks, with tiny buckets and gathers so that every path
    (one-value sets, gathered buckets, buckets split again, ranges too narrow to split) is taken."""
    v = np.array(values, dtype=np.float64)
    ranks = np.array(data.draw(st.lists(st.integers(0, v.shape[0] - 1), min_size=1, max_size=12)))
    old = sorting.SELECT_BUCKETS, sorting.SELECT_GATHER
    sorting.SELECT_BUCKETS, sorting.SELECT_GATHER = buckets, gather
    try:
        got = order_statistics(v, ranks)
    finally:
        sorting.SELECT_BUCKETS, sorting.SELECT_GATHER = old
    assert np.array_equal(got, np.sort(v)[ranks])


def test_order_statistics_of_clustered_confidences_at_the_default_sizes():
    """Half the values exactly 1.0, the rest within 1e-6 of it (an over-confident model), and a
    spread set: the selection splits buckets several times; equal to np.sort."""
    rng = np.random.default_rng(4)
    n = 3_000_000
    clustered = np.where(rng.random(n) < 0.5, 1.0, 1 - rng.random(n) * 1e-6)
    spread = rng.random(n) ** 0.1
    ranks = np.unique(np.r_[0, n - 1, rng.integers(0, n, 30)])
    for v in (clustered, spread):
        assert np.array_equal(order_statistics(v, ranks), np.sort(v)[ranks])


def test_order_statistics_refuses_ranks_out_of_range():
    with pytest.raises(ValueError):
        order_statistics(np.array([0.5]), [1])
    assert order_statistics(np.array([0.5]), []).shape == (0,)
