"""Issue 32, item 5: a row-index column is never read as a score.

Without --scores every column but the labels was a score, so `id,logit_0..logit_9,label` gave K = 11
and an accuracy of 9.9 % (exit 0). A column that looks like a row index — named id, idx, index or
row (any case; pandas' unnamed index column too), or holding the integers 0..N−1 or 1..N in order —
is now refused unless --scores names the score columns, with one line naming the column and the
--scores that fixes it; the report names the score columns it read (JSON ``inputs.score_columns``
and the table's title). CSV (fast, full and streamed readers) and Parquet (whole and streamed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrate_cli.cli import cli
from cli_helpers import one_line_error  # noqa: E402

N, K = 120, 4


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(32)
    labels = rng.integers(0, K, N)
    logits = rng.normal(scale=2.0, size=(N, K))
    logits[np.arange(N), labels] += 1.5
    np.save(tmp_path / "x.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    return logits, labels


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


def as_json(result) -> dict:
    assert result.exit_code == 0, (result.output, result.stderr)
    return json.loads(result.stdout)


def write_csv(path, logits, labels, *, first=None, first_values=None, header=True, label_name="label"):
    """logit_0..logit_{K-1} and the labels, after an optional first column (name, values)."""
    names = ([first] if first is not None else []) + [f"logit_{j}" for j in range(logits.shape[1])] + [label_name]
    rows = []
    for i, (row, y) in enumerate(zip(logits, labels)):
        cells = ([str(first_values[i])] if first is not None else []) + [repr(float(v)) for v in row] + [str(int(y))]
        rows.append(",".join(cells))
    path.write_text("\n".join(([",".join(names)] if header else []) + rows) + "\n")
    return path


def npy_metrics(runner, tmp_path) -> dict:
    return as_json(run(runner, "eval", tmp_path / "x.npy", tmp_path / "y.npy", "-f", "json"))["metrics"]


@pytest.mark.parametrize("name", ["id", "ID", "Index", "idx", "row", "Unnamed: 0"])
@pytest.mark.parametrize("labels_from", ["column", "file"])
def test_a_column_named_as_a_row_index_is_refused(runner, tmp_path, data, name, labels_from):
    logits, labels = data
    ids = np.random.default_rng(1).permutation(N) + 1000  # not 0..N−1: refused by its name alone
    path = write_csv(tmp_path / "preds.csv", logits, labels, first=name, first_values=ids)
    args = ["--labels", "label"] if labels_from == "column" else [tmp_path / "y.npy"]
    one_line_error(run(runner, "eval", path, *args), "preds.csv", f"column {name!r}", "row index",
                   "--scores 'logit_*'" if labels_from == "column" else "--scores")


@pytest.mark.parametrize("start", [0, 1])
def test_a_column_counting_the_rows_is_refused_whatever_its_name(runner, tmp_path, data, start):
    logits, labels = data
    path = write_csv(tmp_path / "preds.csv", logits, labels, first="rank", first_values=np.arange(start, start + N))
    line = one_line_error(run(runner, "eval", path, "--labels", "label"), "preds.csv", "column 'rank'", "row index",
                          f"{start}, {start + 1}, {start + 2}, …, {start + N - 1}", "--scores 'logit_*'")
    assert "K = " not in line


def test_the_issue_case_is_refused_and_the_fix_gives_the_npy_metrics(runner, tmp_path, data):
    """id,logit_0..,label: refused (it was K = 11, a silent wrong accuracy); the --scores it names works."""
    logits, labels = data
    path = write_csv(tmp_path / "preds.csv", logits, labels, first="id", first_values=np.arange(N))
    line = one_line_error(run(runner, "eval", path, "--labels", "label"), "column 'id'", "--scores 'logit_*'")
    fix = line.rsplit("--scores ", 1)[1].strip("'")
    doc = as_json(run(runner, "eval", path, "--labels", "label", "--scores", fix, "-f", "json"))
    assert doc["k"] == K
    assert doc["metrics"]["accuracy"] == npy_metrics(runner, tmp_path)["accuracy"]
    assert doc["inputs"]["score_columns"] == [f"logit_{j}" for j in range(K)]


def test_the_report_names_the_score_columns(runner, tmp_path, data):
    logits, labels = data
    path = write_csv(tmp_path / "preds.csv", logits, labels)
    for extra in ([], ["--bootstrap", "50"]):  # streamed (--labels, no bootstrap) and read whole
        doc = as_json(run(runner, "eval", path, "--labels", "label", *extra, "-f", "json"))
        assert doc["inputs"]["score_columns"] == [f"logit_{j}" for j in range(K)]
    table = run(runner, "eval", path, "--labels", "label")
    assert table.exit_code == 0, table.stderr
    assert "(scores: logit_0, logit_1, logit_2, logit_3): N = 120" in table.stdout.splitlines()[0]
    # a file without columns has none to name
    npy = as_json(run(runner, "eval", tmp_path / "x.npy", tmp_path / "y.npy", "-f", "json"))
    assert "score_columns" not in npy["inputs"]


def test_without_a_header_the_fix_names_column_indices(runner, tmp_path, data):
    logits, labels = data
    path = write_csv(tmp_path / "preds.csv", logits, labels, first="", first_values=np.arange(N), header=False)
    one_line_error(run(runner, "eval", path, "--labels", str(K + 1)), "column 0 ", "row index", "--scores 1,2,3,4")
    doc = as_json(run(runner, "eval", path, "--labels", str(K + 1), "--scores", "1,2,3,4", "-f", "json"))
    assert doc["inputs"]["score_columns"] == [1, 2, 3, 4]
    assert doc["metrics"]["accuracy"] == npy_metrics(runner, tmp_path)["accuracy"]


def test_every_reader_refuses_it(runner, tmp_path, data):
    """The fast reader and the full reader (a quoted cell sends a file there), streamed (eval with
    --labels) and whole (temperature with a labels file)."""
    logits, labels = data
    path = write_csv(tmp_path / "preds.csv", logits, labels, first="n", first_values=np.arange(N))
    lines = path.read_text().splitlines()
    first, rest = lines[1].split(",", 1)
    lines[1] = f'"{first}",{rest}'  # quotes: only the full reader reads this file
    quoted = tmp_path / "quoted.csv"
    quoted.write_text("\n".join(lines) + "\n")
    for source in (path, quoted):
        one_line_error(run(runner, "eval", source, "--labels", "label"), "column 'n'", "row index",
                       "--scores 'logit_*'")
        one_line_error(run(runner, "temperature", source, tmp_path / "y.npy"), "column 'n'", "row index")


def test_what_is_not_an_index_is_read_as_before(runner, tmp_path, data):
    logits, labels = data
    # a labels column counting 0..K−1 in its first rows is labels, whatever it holds
    counting = labels.copy()
    counting[:K] = np.arange(K)
    path = write_csv(tmp_path / "preds.csv", logits, counting)
    assert as_json(run(runner, "eval", path, "--labels", "label", "-f", "json"))["k"] == K
    # 0, 1 in two rows can be scores (two one-hot rows of probabilities): N < 3 is never an index
    two = tmp_path / "two.csv"
    two.write_text("a,b,label\n1,0,0\n0,1,1\n")
    assert as_json(run(runner, "eval", two, "--labels", "label", "--probs", "-f", "json"))["k"] == 2
    # the integers 0..N−1 out of order, or a column that only starts like an index, are scores
    shuffled = write_csv(tmp_path / "shuffled.csv", logits, labels, first="s",
                         first_values=np.random.default_rng(2).permutation(N))
    assert as_json(run(runner, "eval", shuffled, "--labels", "label", "-f", "json"))["k"] == K + 1
    almost = np.arange(N)
    almost[-1] = N + 5
    late = write_csv(tmp_path / "late.csv", logits, labels, first="s", first_values=almost)
    assert as_json(run(runner, "eval", late, "--labels", "label", "-f", "json"))["k"] == K + 1


def test_csv_shards_with_an_index_column_are_refused(runner, tmp_path, data):
    logits, labels = data
    (tmp_path / "parts").mkdir()
    for i, (a, b) in enumerate([(0, 60), (60, N)]):
        write_csv(tmp_path / "parts" / f"p_{i}.csv", logits[a:b], labels[a:b], first="id", first_values=np.arange(a, b))
    one_line_error(run(runner, "eval", tmp_path / "parts" / "p_*.csv", "--labels", "label"), "p_0.csv",
                   "column 'id'", "--scores 'logit_*'")
    doc = as_json(run(runner, "eval", tmp_path / "parts" / "p_*.csv", "--labels", "label", "--scores", "logit_*",
                      "-f", "json"))
    assert doc["n"] == N and doc["k"] == K


# --------------------------------------------------------------------------------------- tables
@pytest.mark.parametrize("first,values", [("id", "ids"), ("sample", "count")])
def test_parquet_index_columns_are_refused(runner, tmp_path, data, first, values):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    logits, labels = data
    column = np.arange(1, N + 1) if values == "count" else np.random.default_rng(3).permutation(N) + 500
    table = pa.table({first: column, **{f"logit_{j}": logits[:, j] for j in range(K)}, "label": labels})
    path = tmp_path / "p.parquet"
    pq.write_table(table, path, row_group_size=25)  # 5 row groups: the streamed reader sees them one by one
    one_line_error(run(runner, "eval", path, "--labels", "label"), "p.parquet", f"column {first!r}", "row index",
                   "--scores 'logit_*'")  # streamed
    one_line_error(run(runner, "eval", path, tmp_path / "y.npy"), "p.parquet", f"column {first!r}",
                   "row index")  # read whole
    doc = as_json(run(runner, "eval", path, "--labels", "label", "--scores", "logit_*", "-f", "json"))
    assert doc["k"] == K and doc["inputs"]["score_columns"] == [f"logit_{j}" for j in range(K)]
    assert doc["metrics"]["accuracy"] == npy_metrics(runner, tmp_path)["accuracy"]
