"""Top-k log-probabilities (calibrate_cli.data.topk, calibrate_cli.metrics.topk, `calib eval --topk`):
the top-label metrics equal the dense input's (evaluate on the full logits) within the numeric
contract when the top k holds the label or its log-probability is given; top-j accuracy against a
naive float64 loop; what is not available says so; bad files give one-line errors naming file and row."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from cli_helpers import one_line_error
from libm import assert_agree

import calibrate_cli as calib
from calibrate_cli.cli import cli
from calibrate_cli.data.topk import read_topk, topk_predictions
from calibrate_cli.errors import InputError
from calibrate_cli.metrics.topk import TOPK_METRICS, evaluate_topk


def _dense(n, k, seed=0, integer=False):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(scale=2.0, size=(n, k))
    logits[np.arange(n), labels] += 1.0
    if integer:  # many ties, at the top too
        logits = np.round(logits / 2)
    return logits, labels


def _log_softmax(logits):
    """Float64 log-softmax by a plain formula (independent of calib's)."""
    m = logits.max(axis=1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))


def _topk(logits, k):
    """The top k of each row: descending log-probability, lowest id first among ties."""
    lp = _log_softmax(logits)
    order = np.argsort(-lp, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(lp, order, axis=1), lp


def _naive_rank(lp_row, y):
    """calib's top-5 rank rule, by a loop: #{k : lp_k > lp_y} + #{k < y : lp_k = lp_y}."""
    return sum(1 for j, v in enumerate(lp_row) if v > lp_row[y] or (v == lp_row[y] and j < y))


@pytest.mark.parametrize("k", [1, 5, 20])
@pytest.mark.parametrize("integer", [False, True])
def test_equals_dense_metrics_with_label_logprob(k, integer):
    logits, labels = _dense(300, 40, seed=k, integer=integer)
    ids, lps, lp = _topk(logits, k)
    preds = topk_predictions(ids, lps, labels, lp[np.arange(300), labels])
    report = evaluate_topk(preds, n_bins=12)
    dense = calib.evaluate(logits, labels, n_bins=12).metrics
    assert_agree({m: report.metrics[m] for m in (*TOPK_METRICS, "nll")},
                 {m: dense[m] for m in (*TOPK_METRICS, "nll")})
    assert report.metrics["classwise_ece"] is None and report.metrics["brier"] is None
    assert "classwise_ece" in report.unavailable and "brier" in report.unavailable
    if k >= 5:
        assert report.metrics["top5_accuracy"] == dense["top5_accuracy"]
    else:
        assert report.metrics["top5_accuracy"] is None
    for j in range(1, k + 1):  # top-j accuracy against a naive loop over the dense log-probabilities
        want = sum(_naive_rank(list(lp[i]), labels[i]) < j for i in range(300)) / 300
        assert report.topk_accuracy[j] == want


def test_labels_outside_the_top_k_without_their_logprob():
    logits, labels = _dense(200, 30, seed=4)
    ids, lps, lp = _topk(logits, 3)
    report = evaluate_topk(topk_predictions(ids, lps, labels))
    outside = int(sum(labels[i] not in ids[i] for i in range(200)))
    assert 0 < outside < 200
    assert report.labels_outside == outside
    assert report.metrics["nll"] is None
    assert f"{outside} of 200" in report.unavailable["nll"]
    # the top-label metrics need no label log-probability
    dense = calib.evaluate(logits, labels).metrics
    assert_agree({m: report.metrics[m] for m in TOPK_METRICS}, {m: dense[m] for m in TOPK_METRICS})
    # given only where outside: NLL known for all
    given = np.where([labels[i] not in ids[i] for i in range(200)], lp[np.arange(200), labels], np.nan)
    report = evaluate_topk(topk_predictions(ids, lps, labels, given))
    assert_agree(report.metrics["nll"], dense["nll"])


def test_ties_pick_the_lowest_id_whatever_the_listed_order():
    # ids 9 and 2 tie at the top (listed 9 first): the prediction is 2; N = 1 each
    lp = np.log([[0.4, 0.4, 0.1]])
    assert evaluate_topk(topk_predictions([[9, 2, 5]], lp, [2])).metrics["accuracy"] == 1.0
    assert evaluate_topk(topk_predictions([[9, 2, 5]], lp, [9])).metrics["accuracy"] == 0.0
    report = evaluate_topk(topk_predictions([[9, 2, 5]], lp, [9]))
    # rank of 9 among the ties: 2 < 9 ranks above it, so 9 is 2nd
    assert report.topk_accuracy == {1: 0.0, 2: 1.0, 3: 1.0}
    assert report.metrics["mean_confidence"] == pytest.approx(0.4, rel=1e-15)
    assert report.metrics["ece"] == pytest.approx(0.4, rel=1e-15)  # one sample, conf 0.4, wrong


def test_n_equals_one_hand_computed():
    report = evaluate_topk(topk_predictions([[3, 1]], np.log([[0.7, 0.2]]), [1]), n_bins=10)
    assert report.metrics["accuracy"] == 0.0
    assert report.metrics["ece"] == pytest.approx(0.7, rel=1e-15)
    assert report.metrics["nll"] == pytest.approx(-math.log(0.2), rel=1e-15)
    assert report.topk_accuracy == {1: 0.0, 2: 1.0}


@pytest.mark.parametrize("ids, lps, labels, given, match", [
    ([[1, 1]], [[-0.1, -2.0]], [1], None, "row 1: an id listed twice"),
    ([[1, 2]], [[-2.0, -0.1]], [1], None, "row 1: log-probabilities not in descending order"),
    ([[1, 2]], [[0.5, -3.0]], [1], None, "above 0"),
    ([[1, 2]], [[-0.1, -0.2]], [1], None, "sum to"),
    ([[1, 2]], [[-0.5, -2.0]], [-1], None, "negative label"),
    ([[1, 2]], [[-0.5, -2.0]], [1.5], None, "whole number"),
    ([[1, 2]], [[-0.5, -2.0]], [7], [-1.0], "exceeds the k-th"),
    ([[1, 2]], [[-0.5, -2.0]], [1], [-0.7], "differs"),
    ([[1, 2]], [[np.nan, -2.0]], [1], None, "NaN"),
])
def test_validation(ids, lps, labels, given, match):
    with pytest.raises(InputError, match=match):
        topk_predictions(ids, lps, labels, given, name="p.jsonl")


def _write_jsonl(path, ids, lps, labels, given=None, names=("topk_ids", "topk_logprobs", "label", "label_logprob")):
    with open(path, "w") as f:
        for i in range(len(labels)):
            record = {names[0]: [int(x) for x in ids[i]], names[1]: [float(x) for x in lps[i]], names[2]: int(labels[i])}
            if given is not None and not np.isnan(given[i]):
                record[names[3]] = float(given[i])
            f.write(json.dumps(record) + "\n")


def _write_parquet(path, ids, lps, labels, given=None, names=("topk_ids", "topk_logprobs", "label", "label_logprob")):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    columns = {names[0]: [list(map(int, r)) for r in ids], names[1]: [list(map(float, r)) for r in lps],
               names[2]: [int(y) for y in labels]}
    if given is not None:
        columns[names[3]] = [None if np.isnan(g) else float(g) for g in given]
    pq.write_table(pa.table(columns), path)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_readers_give_the_arrays(tmp_path, suffix):
    logits, labels = _dense(50, 12, seed=7)
    ids, lps, lp = _topk(logits, 4)
    given = np.where(np.arange(50) % 2 == 0, lp[np.arange(50), labels], np.nan)
    path = tmp_path / f"p{suffix}"
    names = ("ids", "lps", "y", "ylp")
    (_write_jsonl if suffix == ".jsonl" else _write_parquet)(path, ids, lps, labels, given, names)
    got = read_topk(path, ids="ids", logprobs="lps", labels="y", label_logprob="ylp")
    want = topk_predictions(ids, lps, labels, given)
    np.testing.assert_array_equal(got.ids, want.ids)
    np.testing.assert_array_equal(got.logprobs, want.logprobs)
    np.testing.assert_array_equal(got.label_logprob, want.label_logprob)


def test_reader_errors_name_the_file_and_row(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"topk_ids": [1, 2], "topk_logprobs": [-0.1, -3], "label": 1}\n'
                    '{"topk_ids": [1], "topk_logprobs": [-0.1], "label": 1}\n')
    with pytest.raises(InputError, match=r"p\.jsonl: row 2: 'topk_ids' holds 1 values"):
        read_topk(path)
    path.write_text('{"topk_ids": [1, 2], "label": 1}\n')
    with pytest.raises(InputError, match=r"p\.jsonl: line 1: no 'topk_logprobs'"):
        read_topk(path)
    (tmp_path / "x.npy").write_bytes(b"")
    with pytest.raises(InputError, match="not .npy"):
        read_topk(tmp_path / "x.npy")
    with pytest.raises(InputError, match="no such file"):
        read_topk(tmp_path / "missing.parquet")


# ------------------------------------------------------------------------------------------- the CLI


def test_cli_json_equals_the_library(tmp_path):
    logits, labels = _dense(120, 25, seed=2)
    ids, lps, lp = _topk(logits, 5)
    path = tmp_path / "preds.parquet"
    _write_parquet(path, ids, lps, labels)
    result = CliRunner().invoke(cli, ["eval", str(path), "--topk", "--format", "json", "--n-bins", "10"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    want = json.loads(json.dumps(evaluate_topk(read_topk(path), n_bins=10).to_dict()))
    for key in ("metrics", "topk_accuracy", "not_available", "bins", "n", "k"):
        assert_agree(doc[key], want[key], where=key)
    assert doc["metrics"]["nll"] is None and "nll" in doc["not_available"]
    assert doc["inputs"]["input_kind"] == "topk_logprobs"


def test_cli_table_renames_and_gates(tmp_path):
    logits, labels = _dense(80, 10, seed=3)
    ids, lps, lp = _topk(logits, 3)
    path = tmp_path / "preds.jsonl"
    _write_jsonl(path, ids, lps, labels, lp[np.arange(80), labels], names=("i", "l", "y", "yl"))
    args = ["eval", str(path), "--topk", "--topk-ids", "i", "--topk-logprobs", "l", "--labels", "y",
            "--label-logprob", "yl"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "top-3 accuracy" in result.stdout and "not available" in result.stdout
    result = CliRunner().invoke(cli, [*args, "--fail-above", "ece=0.0001"])
    assert result.exit_code == 1 and "ece" in result.stderr
    result = CliRunner().invoke(cli, [*args, "--format", "markdown"])
    assert result.exit_code == 0 and "| top-1 accuracy |" in result.stdout


def test_cli_errors(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"topk_ids": [1, 2], "topk_logprobs": [-3.0, -0.1], "label": 1}\n')
    one_line_error(CliRunner().invoke(cli, ["eval", str(path), "--topk"]), "bad.jsonl", "row 1", "descending")
    result = CliRunner().invoke(cli, ["eval", str(path), "--topk", "--probs"])
    assert result.exit_code == 2 and "--probs does not apply to --topk" in result.stderr
    result = CliRunner().invoke(cli, ["eval", str(path), "y.npy", "--topk"])
    assert result.exit_code == 2 and "does not apply to --topk" in result.stderr
    result = CliRunner().invoke(cli, ["eval", str(path), "y.npy", "--topk-ids", "x"])
    assert result.exit_code == 2 and "needs --topk" in result.stderr


@pytest.mark.parametrize("command", ["temperature", "fit"])
def test_calibrators_refuse_topk_with_the_reason(command):
    result = CliRunner().invoke(cli, [command, "preds.parquet", "--topk"])
    assert result.exit_code == 2
    assert "--topk: calibrators are fitted on the full scores" in result.stderr
    assert "Traceback" not in result.output


def test_a_label_of_probability_zero_gives_an_infinite_nll_with_a_warning():
    preds = topk_predictions([[1, 2], [3, 2]], [[-0.1, -3.0], [-0.2, -2.0]], [5, 7], [-5.0, -np.inf])
    report = evaluate_topk(preds, name="p.jsonl")
    assert report.metrics["nll"] == math.inf
    assert report.warnings and "NLL is inf" in report.warnings[0] and "p.jsonl" in report.warnings[0]
    assert report.labels_outside == 2 and report.topk_accuracy == {1: 0.0, 2: 0.0}


def test_parquet_ragged_and_null_rows_are_named(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"topk_ids": [[1, 2], [3]], "topk_logprobs": [[-0.1, -3.0], [-0.2]], "label": [1, 3]}), path)
    with pytest.raises(InputError, match=r"p\.parquet: row 2: 'topk_ids' holds 1 values"):
        read_topk(path)
    pq.write_table(pa.table({"topk_ids": [[1, 2], [3, 4]], "topk_logprobs": [[-0.1, -3.0], [-0.2, None]],
                             "label": [1, 3]}), path)
    with pytest.raises(InputError, match=r"p\.parquet: row 2: a null value in 'topk_logprobs'"):
        read_topk(path)
    pq.write_table(pa.table({"topk_ids": [1, 2], "topk_logprobs": [[-0.1], [-0.2]], "label": [1, 3]}), path)
    with pytest.raises(InputError, match=r"'topk_ids' is not a list column"):
        read_topk(path)
    pq.write_table(pa.table({"topk_ids": [[1, 2]], "topk_logprobs": [[-0.1, -3.0]]}), path)
    with pytest.raises(InputError, match=r"no column 'label'"):
        read_topk(path)
