"""`calib eval FILE --labels COL` streams CSV and Parquet blocks into the summary pass
(calibrate_cli.engine.stream, issue 21): the numbers of the whole-array path with many blocks and chunks;
errors still name the row counted over the whole file; no (N, K) array is held.

The streamed pass and the whole array are two paths (the stream picks its engine from the announced
or first block's size, and keeps its sums as it goes): their metrics agree within the numeric
contract of tests/libm.py, not by equal bits. Within the streamed pass, sub-chunks of another size
give the same bits (determinism: the same path, other chunks)."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from libm import assert_agree

import calibrate_cli.data.predictions as predictions
from calibrate_cli.cli import cli
from calibrate_cli.cli import eval as eval_cli
from calibrate_cli.evaluate import evaluate, report_from_summary, summarize_data
from calibrate_cli.data import csvfast
from calibrate_cli.data.io import read_scores, stream_scores
from calibrate_cli.engine import stream
from calibrate_cli.engine.stream import rechunk, summarize_blocks
from naive_reference import ece as naive_ece
from naive_reference import softmax_rows

N, K = 2000, 4


@pytest.fixture()
def small_chunks(monkeypatch):
    """Chunks of 250 rows (each computed in 10 sub-chunks of 25 rows) and CSV text blocks of 4 kB: a
    2000-row file is 8 chunks, ~30 blocks."""
    monkeypatch.setattr(predictions, "_CHUNK_ELEMENTS", 1000)
    monkeypatch.setattr(stream, "SUB_ELEMENTS", 100)
    monkeypatch.setattr(csvfast, "TEXT_BLOCK", 4096)


def _data(n=N, k=K, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * 2
    logits[np.arange(n), labels] += 1.5
    return logits, labels


def _write_csv(path, logits, labels, fmt="%.17g"):
    with open(path, "w") as f:
        f.write(",".join([f"logit_{j}" for j in range(logits.shape[1])] + ["label"]) + "\n")
        np.savetxt(f, np.column_stack([logits, labels]), delimiter=",", fmt=fmt)


def _write_parquet(path, logits, labels, row_group=300):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    columns = {"label": labels, **{f"logit_{j}": logits[:, j] for j in range(logits.shape[1])}}
    pq.write_table(pa.table(columns), path, row_group_size=row_group)


def _streamed(path):
    n_hint, exact, blocks = stream_scores(path, label_col="label")
    return report_from_summary(summarize_blocks(blocks, n_hint=n_hint, sums_only=exact))


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_streamed_metrics_equal_the_whole_array(tmp_path, small_chunks, suffix):
    logits, labels = _data()
    path = tmp_path / f"preds{suffix}"
    (_write_csv if suffix == ".csv" else _write_parquet)(path, logits, labels)
    n_hint, exact, blocks = stream_scores(path, label_col="label")
    assert exact == (suffix == ".parquet")  # a Parquet file's metadata gives N: the sums are kept as sums
    blocks = list(blocks)
    assert len(blocks) > 3 and len({b[0].shape[0] for b in blocks[:-1]} - {250}) > 0  # blocks cut across chunks
    summary = summarize_blocks(iter(blocks), n_hint=n_hint, sums_only=exact)
    assert (summary.totals is not None) == exact and (summary.nll is None) == exact
    streamed = report_from_summary(summary).metrics
    whole = read_scores(path, label_col="label")
    expected = evaluate(whole.scores, whole.labels).metrics
    assert np.array_equal(whole.scores, logits) and np.array_equal(whole.labels, labels)
    assert streamed.keys() == expected.keys()
    assert_agree(streamed, expected)  # two paths: every metric, classwise-ECE included, within the contract
    # and independently: ECE from a float64 loop
    assert streamed["ece"] == pytest.approx(naive_ece(softmax_rows(logits), labels, 15), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_sub_chunks_give_the_single_pass_classwise_sums_bit_for_bit(small_chunks, kind):
    logits, labels = _data(1999, 7, seed=4)
    scores = logits if kind == "logits" else np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    blocks = ((scores[i:i + 333], labels[i:i + 333]) for i in range(0, 1999, 333))
    summary = summarize_blocks(blocks, input_kind=kind, n_hint=1999, sums_only=True)
    whole = summarize_data(scores, labels, input_kind=kind, columns=False).summary
    assert np.array_equal(summary.classwise.sum_conf, whole.classwise.sum_conf)
    assert np.array_equal(summary.classwise.count, whole.classwise.count)
    assert np.array_equal(summary.classwise.sum_correct, whole.classwise.sum_correct)
    assert summary.totals == whole.totals and np.array_equal(summary.confidences, whole.confidences)
    # (above: the same engine for both — chosen from n_hint = N — in sub-chunks of another size:
    # determinism, equal bits; below: the streamed report and evaluate, two paths)
    streamed = report_from_summary(summary, input_kind=kind).metrics
    assert_agree(streamed, evaluate(scores, labels, input_kind=kind).metrics)


def test_rechunk_cuts_rows_into_the_single_pass_chunks():
    blocks = [(np.arange(n * 2, dtype=float).reshape(n, 2), np.zeros(n, dtype=int)) for n in (3, 7, 1, 6)]
    pieces = list(rechunk(iter(blocks), rows=4))
    assert [p[0].shape[0] for p in pieces] == [4, 4, 4, 4, 1]
    assert np.array_equal(np.concatenate([p[0] for p in pieces]), np.concatenate([b[0] for b in blocks]))
    assert all(p[0].flags.c_contiguous for p in pieces)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_cli_eval_streams_and_prints_the_whole_array_numbers(tmp_path, runner, small_chunks, monkeypatch, suffix):
    logits, labels = _data()
    path = tmp_path / f"preds{suffix}"
    (_write_csv if suffix == ".csv" else _write_parquet)(path, logits, labels)
    np.save(tmp_path / "z.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    calls = []
    real = eval_cli._streamed
    monkeypatch.setattr(eval_cli, "_streamed", lambda *a, **k: calls.append(1) or real(*a, **k))
    result = runner.invoke(cli, ["eval", str(path), "--labels", "label", "-f", "json"])
    assert result.exit_code == 0, result.output + result.stderr
    reference = runner.invoke(cli, ["eval", str(tmp_path / "z.npy"), str(tmp_path / "y.npy"), "-f", "json"])
    assert calls == [1]
    assert_agree(json.loads(result.stdout)["metrics"], json.loads(reference.stdout)["metrics"])  # two paths


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_bad_label_late_in_the_file_names_its_row_in_the_whole_file(tmp_path, runner, small_chunks, monkeypatch,
                                                                      suffix):
    logits, labels = _data()
    labels = labels.copy()
    labels[1234] = 9  # out of range, in the 5th chunk: the message counts rows over the whole file
    path = tmp_path / f"preds{suffix}"
    (_write_csv if suffix == ".csv" else _write_parquet)(path, logits, labels)
    result = runner.invoke(cli, ["eval", str(path), "--labels", "label"])
    monkeypatch.setattr(eval_cli, "_streamed", lambda *a, **k: None)  # the whole-file path
    streamed_off = runner.invoke(cli, ["eval", str(path), "--labels", "label"])
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "1234" in result.stderr
    assert result.stderr == streamed_off.stderr


def test_streamed_pass_holds_no_whole_array(tmp_path, monkeypatch):
    """Peak traced memory of the streamed summary of a 100,000 × 10 CSV stays below that of reading
    the file whole and summarising the array (the same per-sample columns, sums_only=False) by at
    least half the N·K·8 bytes of the scores (it saves them all, less a chunk's worth)."""
    monkeypatch.setattr(predictions, "_CHUNK_ELEMENTS", 1 << 16)
    monkeypatch.setattr(csvfast, "TEXT_BLOCK", 1 << 18)
    logits, labels = _data(100_000, 10, seed=1)
    path = tmp_path / "big.csv"
    _write_csv(path, logits, labels, fmt="%.4f")
    size = logits.nbytes
    tracemalloc.start()
    try:
        n_hint, _, blocks = stream_scores(path, label_col="label")
        streamed = summarize_blocks(blocks, n_hint=n_hint)
        streamed_peak = tracemalloc.get_traced_memory()[1]
        del streamed
        tracemalloc.reset_peak()
        found = read_scores(path, label_col="label")
        whole = summarize_data(found.scores, found.labels).summary
        whole_peak = tracemalloc.get_traced_memory()[1]
        del whole, found
    finally:
        tracemalloc.stop()
    assert whole_peak >= size
    assert streamed_peak < whole_peak - 0.5 * size, (streamed_peak, whole_peak, size)


def test_a_single_chunk_runs_without_a_thread_pool(monkeypatch):
    """The streamed pass summarises one chunk per call: no thread pool (threads, malloc arenas) per chunk."""
    import calibrate_cli.engine.parallel as parallel

    def no_pool(*args, **kwargs):
        raise AssertionError("a thread pool for one chunk")

    monkeypatch.setenv("CALIB_THREADS", "4")
    monkeypatch.setattr(parallel, "ThreadPoolExecutor", no_pool)
    logits, labels = _data(500, 4)
    assert evaluate(logits, labels).n == 500
    monkeypatch.setattr(predictions, "_CHUNK_ELEMENTS", 1000)  # several chunks: the pool runs them
    with pytest.raises(AssertionError, match="thread pool"):
        evaluate(logits, labels)


@pytest.mark.parametrize(
    "text, header, rows",
    [
        ("a,b\n1,2\n3,4\n", True, 2),
        ("a,b\n1,2\n3,4", True, 2),  # no newline after the last row
        ("1,2\r\n3,4\r\n", False, 2),  # CRLF
        ("\n\r\na,b\n1,2\n3,4\n\n\r\n\n", True, 2),  # empty lines before the first row and after the last
        ("a,b\n1,2\n\n3,4\n", True, 3),  # an empty line between rows: missed (the summary pass finds it)
        ("", False, 0),
        ("\n\n", False, 0),
    ],
)
def test_count_data_rows_counts_lines_less_empty_ones_at_the_ends_and_the_header(tmp_path, text, header, rows):
    path = tmp_path / "f.csv"
    path.write_bytes(text.encode())
    assert csvfast.count_data_rows(path, header) == rows


def test_count_data_rows_of_a_file_of_many_read_blocks(tmp_path):
    row = b"0.5,0.25\n"
    text = b"a,b\n" + row * 300_000 + b"\n\n"  # 2.7 MB: three 1 MiB reads
    path = tmp_path / "big.csv"
    path.write_bytes(text)
    assert csvfast.count_data_rows(path, True) == 300_000


def test_a_csv_streams_with_n_known_in_advance_its_columns_in_place(tmp_path, small_chunks):
    """The CSV's line count gives N: NLL, Brier and top-5 are kept as sums, the other columns written
    into arrays of N (labels narrowed to uint8): the same totals and confidences as the whole array's
    pass (the same engine, other chunks), and every metric within the contract of evaluate's."""
    logits, labels = _data(2000, 7, seed=5)
    path = tmp_path / "p.csv"
    _write_csv(path, logits, labels)
    n_hint, exact, blocks = stream_scores(path, label_col="label")
    assert (n_hint, exact) == (2000, False)
    summary = summarize_blocks(blocks, n_hint=n_hint, sums_only=True)
    assert summary.nll is None and summary.totals is not None and summary.labels.dtype == np.uint8
    assert np.array_equal(summary.labels, labels)
    whole = summarize_data(logits, labels, columns=False).summary
    assert summary.totals == whole.totals and np.array_equal(summary.confidences, whole.confidences)
    assert_agree(report_from_summary(summary).metrics, evaluate(logits, labels).metrics)


@pytest.mark.parametrize("n_hint", [1999, 2001])
def test_a_wrong_row_count_is_found_before_a_row_is_written_out_of_place(small_chunks, n_hint):
    logits, labels = _data(2000, 4)
    blocks = ((logits[i:i + 300], labels[i:i + 300]) for i in range(0, 2000, 300))
    with pytest.raises(stream.RowCountMismatch, match="announced"):
        summarize_blocks(blocks, n_hint=n_hint, sums_only=True)


def test_cli_eval_of_a_csv_whose_line_count_misses_streams_again_and_gives_the_same_numbers(
    tmp_path, runner, small_chunks, monkeypatch
):
    """Empty lines between rows: the line count guesses too many rows; the exact-N pass finds it and
    the file is streamed again keeping the columns: the .npy's numbers."""
    logits, labels = _data()
    path = tmp_path / "gaps.csv"
    _write_csv(path, logits, labels)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:700] + ["\n\n\n"] + lines[700:]))
    assert csvfast.count_data_rows(path, True) == N + 3
    np.save(tmp_path / "z.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    modes = []
    real = stream.summarize_blocks
    monkeypatch.setattr(stream, "summarize_blocks", lambda *a, **k: modes.append(k["sums_only"]) or real(*a, **k))
    result = runner.invoke(cli, ["eval", str(path), "--labels", "label", "-f", "json"])
    assert result.exit_code == 0, result.output + result.stderr
    assert modes == [True, False]
    reference = runner.invoke(cli, ["eval", str(tmp_path / "z.npy"), str(tmp_path / "y.npy"), "-f", "json"])
    assert_agree(json.loads(result.stdout)["metrics"], json.loads(reference.stdout)["metrics"])  # two paths
