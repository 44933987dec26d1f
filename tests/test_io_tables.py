"""Parquet / Arrow IPC / Feather, safetensors, HDF5 and Zarr inputs (issue 21): each gives the metrics
of the .npy of the same values (files written with the format's own library), in every command; bad
and hostile files are one line naming the file, exit 2.

`calib eval TABLE --labels COL` streams the table's blocks into the summary pass: another path than the
.npy's whole array, so its metrics agree within the numeric contract of tests/libm.py (None = None).
A table read whole (keys: FILE:COLUMN, a labels file) gives the .npy's arrays to the same path: equal."""

from __future__ import annotations

import json

import numpy as np
import pytest
from libm import assert_agree

from calibrate_cli.cli import cli
from cli_helpers import one_line_error  # noqa: E402

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 3, 90)
    logits = rng.normal(size=(90, 3))
    logits[np.arange(90), labels] += 1.0
    np.save(tmp_path / "z.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    return logits, labels


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


def metrics(result) -> dict:
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)["metrics"]


def npy_metrics(runner, tmp_path, *extra) -> dict:
    return metrics(run(runner, "eval", tmp_path / "z.npy", tmp_path / "y.npy", "-f", "json", *extra))


def columns_table(logits, labels, prefix="logit_"):
    return pa.table({"id": [f"r{i}" for i in range(len(labels))], "label": labels,
                     **{f"{prefix}{j}": logits[:, j] for j in range(logits.shape[1])}})


# ------------------------------------------------------------------------------------ tables
@pytest.mark.parametrize("options", [("--scores", "logit_*", "--labels", "label"),
                                     ("--score-cols", "logit_0,logit_1,logit_2", "--label-col", "label"),
                                     ("--scores", "2,3,4", "--labels", "1")])
def test_parquet_columns_give_the_npy_metrics(runner, tmp_path, data, options):
    logits, labels = data
    pq.write_table(columns_table(logits, labels), tmp_path / "p.parquet", row_group_size=16)  # 6 row groups
    got = metrics(run(runner, "eval", tmp_path / "p.parquet", *options, "-f", "json"))
    assert_agree(got, npy_metrics(runner, tmp_path))  # streamed and whole: two paths


@pytest.mark.parametrize("kind", ["list", "large_list", "fixed"])
def test_a_list_column_holds_the_k_scores(runner, tmp_path, data, kind):
    logits, labels = data
    flat = pa.array(logits.ravel())
    if kind == "fixed":
        column = pa.FixedSizeListArray.from_arrays(flat, 3)
    else:
        offsets = pa.array(np.arange(0, logits.size + 1, 3, dtype=np.int32 if kind == "list" else np.int64))
        column = (pa.ListArray if kind == "list" else pa.LargeListArray).from_arrays(offsets, flat)
    pq.write_table(pa.table({"logits": column, "label": labels}), tmp_path / "p.parquet", row_group_size=20)
    got = metrics(run(runner, "eval", tmp_path / "p.parquet", "--scores", "logits", "--labels", "label", "-f", "json"))
    assert_agree(got, npy_metrics(runner, tmp_path))  # streamed and whole: two paths


@pytest.mark.parametrize("suffix", [".feather", "v1.feather", ".arrow", "stream.arrow"])
def test_arrow_ipc_and_feather(runner, tmp_path, data, suffix):
    import warnings

    import pyarrow.feather as feather

    logits, labels = data
    table = columns_table(logits, labels)
    path = tmp_path / f"p{suffix}"
    if suffix == ".feather":
        feather.write_feather(table, path, chunksize=25)  # lz4-compressed record batches
    elif suffix == "v1.feather":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            feather.write_feather(table, path, version=1)  # the legacy format old pandas wrote
        assert path.read_bytes()[:4] == b"FEA1"
    else:
        with pa.OSFile(str(path), "wb") as sink:
            new = pa.ipc.new_stream if suffix.startswith("stream") else pa.ipc.new_file
            with new(sink, table.schema) as writer:
                for batch in table.to_batches(max_chunksize=25):
                    writer.write_batch(batch)
    got = metrics(run(runner, "eval", path, "--scores", "logit_*", "--labels", "label", "-f", "json"))
    assert_agree(got, npy_metrics(runner, tmp_path))  # streamed and whole: two paths


def test_class_name_labels_in_a_table(runner, tmp_path, data):
    logits, labels = data
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    names = np.array(["cat", "dog", "owl"])
    table = pa.table({"label": pa.array(names[labels]).dictionary_encode(),
                      **{f"p_{n}": probs[:, j] for j, n in enumerate(names)}})
    pq.write_table(table, tmp_path / "p.parquet")
    np.save(tmp_path / "pz.npy", probs)
    got = metrics(run(runner, "eval", tmp_path / "p.parquet", "--scores", "p_*", "--labels", "label", "--probs", "-f", "json"))
    want = metrics(run(runner, "eval", tmp_path / "pz.npy", tmp_path / "y.npy", "--probs", "-f", "json"))
    assert_agree(got, want)  # streamed and whole: two paths


@pytest.mark.parametrize("command", ["temperature", "fit", "plot", "compare"])
def test_every_command_reads_tables_through_keys(runner, tmp_path, data, command):
    logits, labels = data
    pq.write_table(columns_table(logits, labels), tmp_path / "p.parquet", row_group_size=32)
    t, y = f"{tmp_path / 'p.parquet'}:logit_*", f"{tmp_path / 'p.parquet'}:label"
    z, yn = tmp_path / "z.npy", tmp_path / "y.npy"
    if command == "plot":
        got = run(runner, "plot", t, y, "-o", tmp_path / "a.png")
        assert got.exit_code == 0, got.stderr
        return
    args = {"temperature": [t, y], "fit": [t, y], "compare": [t, y, z, yn]}[command]
    want_args = {"temperature": [z, yn], "fit": [z, yn], "compare": [z, yn, z, yn]}[command]
    got = run(runner, command, *args, "-f", "json")
    want = run(runner, command, *want_args, "-f", "json")
    assert got.exit_code == 0, got.stderr
    strip = lambda doc: json.dumps({k: v for k, v in json.loads(doc).items() if k not in ("inputs", "models", "scores", "labels")}, sort_keys=True)
    assert strip(got.stdout) == strip(want.stdout)  # read whole: the .npy's arrays, the same path


def test_a_labels_table_file_as_labels(runner, tmp_path, data):
    logits, labels = data
    pq.write_table(pa.table({"y": labels}), tmp_path / "y.parquet")
    got = metrics(run(runner, "eval", tmp_path / "z.npy", tmp_path / "y.parquet", "-f", "json"))
    assert got == npy_metrics(runner, tmp_path)


# ------------------------------------------------------------------------ bad and hostile tables
def _parquet(tmp_path, data, **columns):
    logits, labels = data
    table = columns_table(logits, labels)
    for name, column in columns.items():
        table = table.append_column(name, column)
    pq.write_table(table, tmp_path / "p.parquet")
    return tmp_path / "p.parquet"


def test_truncated_and_fake_parquet_files(runner, tmp_path, data):
    path = _parquet(tmp_path, data)
    raw = path.read_bytes()
    (tmp_path / "cut.parquet").write_bytes(raw[: len(raw) // 2])
    one_line_error(run(runner, "eval", tmp_path / "cut.parquet", "--scores", "logit_*", "--labels", "label"), "cut.parquet", "Parquet")
    import pickle

    (tmp_path / "pk.parquet").write_bytes(pickle.dumps({"logits": [1, 2]}))
    one_line_error(run(runner, "eval", tmp_path / "pk.parquet", "--labels", "label"), "pk.parquet", "not a readable Parquet")
    (tmp_path / "pk.feather").write_bytes(pickle.dumps({"logits": [1, 2]}))
    one_line_error(run(runner, "eval", tmp_path / "pk.feather", "--labels", "label"), "pk.feather", "not a readable Feather")


def test_missing_columns_are_named(runner, tmp_path, data):
    path = _parquet(tmp_path, data)
    one_line_error(run(runner, "eval", path, "--scores", "p_*", "--labels", "label"), "p.parquet", "no column matches 'p_*'")
    one_line_error(run(runner, "eval", path, "--scores", "logit_*", "--labels", "y"), "p.parquet", "no column named 'y'")


def test_text_among_the_scores_is_refused(runner, tmp_path, data):
    path = _parquet(tmp_path, data)
    # chosen: without --scores the column named id is refused as a row index first (issue 32, item 5)
    one_line_error(run(runner, "eval", path, "--scores", "id,logit_*", "--labels", "label"), "p.parquet", "'id'", "holds text")


def test_a_pickle_in_a_binary_column_is_never_loaded(runner, tmp_path, data):
    import pickle

    blobs = pa.array([pickle.dumps(np.zeros(3))] * len(data[1]), type=pa.binary())
    path = _parquet(tmp_path, data, blob=blobs)
    one_line_error(run(runner, "eval", path, "--scores", "blob", "--labels", "label"), "p.parquet", "'blob'", "bytes")


def test_ragged_nested_and_null_lists(runner, tmp_path, data):
    logits, labels = data
    rows = [list(r) for r in logits]
    ragged = [r if i != 40 else r[:2] for i, r in enumerate(rows)]
    pq.write_table(pa.table({"s": ragged, "label": labels}), tmp_path / "r.parquet", row_group_size=32)
    one_line_error(run(runner, "eval", tmp_path / "r.parquet", "--scores", "s", "--labels", "label"), "r.parquet", "row 40", "ragged")
    nested = [[[v] for v in r] for r in rows]
    pq.write_table(pa.table({"s": nested, "label": labels}), tmp_path / "n.parquet")
    one_line_error(run(runner, "eval", tmp_path / "n.parquet", "--scores", "s", "--labels", "label"), "n.parquet", "nested lists")
    holes = [r if i != 7 else None for i, r in enumerate(rows)]
    pq.write_table(pa.table({"s": holes, "label": labels}), tmp_path / "h.parquet")
    one_line_error(run(runner, "eval", tmp_path / "h.parquet", "--scores", "s", "--labels", "label"), "h.parquet", "row 7", "null")


def test_a_null_score_or_label_is_named(runner, tmp_path, data):
    logits, labels = data
    y = pa.array([int(v) if i != 13 else None for i, v in enumerate(labels)])
    pq.write_table(pa.table({"label": y, "a": logits[:, 0], "b": logits[:, 1]}), tmp_path / "p.parquet")
    one_line_error(run(runner, "eval", tmp_path / "p.parquet", "--labels", "label"), "p.parquet", "'label'", "row 13", "null")


def test_a_missing_extra_names_the_install_command(runner, tmp_path, data, monkeypatch):
    import sys

    path = _parquet(tmp_path, data)
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.setitem(sys.modules, name, None)
    one_line_error(run(runner, "eval", path, "--labels", "label"), "p.parquet", "pip install 'calibrate-cli[arrow]'")


def test_sharded_tables_merge_to_the_npy_metrics(runner, tmp_path, data):
    """Shards (a quoted glob) of Parquet files with a labels column: the metrics of the whole."""
    logits, labels = data
    (tmp_path / "parts").mkdir()
    for i, rows in enumerate((slice(0, 40), slice(40, 90))):
        pq.write_table(columns_table(logits[rows], labels[rows]), tmp_path / "parts" / f"p_{i}.parquet")
    got = metrics(run(runner, "eval", tmp_path / "parts" / "p_*.parquet", "--scores", "logit_*", "--labels", "label",
                      "-f", "json"))
    want = npy_metrics(runner, tmp_path)
    assert_agree(got, want)  # shards and one file: two paths
