"""The C-speed CSV path (calibrate_cli/data/csvfast.py, issue 21): it reads clean files without the
full Python reader, block by block, bit-identical to it; every file it is unsure of goes to the full
reader (same values, same errors)."""

from __future__ import annotations

import numpy as np
import pytest

import calibrate_cli.data.io as io
from calibrate_cli.data import csvfast, csvfile


@pytest.fixture()
def table():
    rng = np.random.default_rng(11)
    labels = rng.integers(0, 4, 500)
    logits = rng.normal(size=(500, 4)) * 10.0 ** rng.integers(-5, 5, size=(500, 4))
    return logits, labels


def write_csv(path, logits, labels, *, header=True, blank_every=0, newline="\n", bom=False, fmt=repr):
    lines = (["label,id_num,p_a,p_b,p_c,p_d"] if header else [])
    for i, (row, y) in enumerate(zip(logits, labels)):
        lines.append(",".join([str(int(y)), str(i)] + [fmt(float(v)) for v in row]))
        if blank_every and i % blank_every == 0:
            lines.append("")
    text = newline.join(lines) + newline
    path.write_bytes(("\ufeff" if bom else "").encode() + text.encode())
    return path


def full_reader(path, **kw):
    """The full (Python) reader alone: the fast path switched off."""
    original = csvfast.read_numeric_csv
    try:
        csvfast.read_numeric_csv = lambda *a, **k: None
        return io.read_scores(path, **kw)
    finally:
        csvfast.read_numeric_csv = original


def no_full_reader(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the full CSV reader ran")

    monkeypatch.setattr(csvfile, "_read_csv_table", refuse)


@pytest.mark.parametrize("layout", [dict(), dict(blank_every=37), dict(newline="\r\n", bom=True),
                                    dict(fmt=lambda v: f"{v:.6e}")])
def test_clean_files_take_the_fast_path_bit_identical(tmp_path, table, monkeypatch, layout):
    logits, labels = table
    path = write_csv(tmp_path / "s.csv", logits, labels, **layout)
    want = full_reader(path, label_col="label", score_cols="p_*")
    monkeypatch.setattr(csvfast, "TEXT_BLOCK", 997)  # many blocks, cut mid-line
    no_full_reader(monkeypatch)
    got = io.read_scores(path, label_col="label", score_cols="p_*")
    assert got.scores.dtype == np.float64 and got.scores.shape == (500, 4)
    assert np.array_equal(got.scores, want.scores) and np.array_equal(got.labels, want.labels)
    assert got.class_names == want.class_names == ("p_a", "p_b", "p_c", "p_d")
    if layout.get("fmt") is None:
        assert np.array_equal(got.scores, logits)  # repr round-trips exactly


def test_headerless_files_and_whole_table_loads(tmp_path, table, monkeypatch):
    logits, labels = table
    path = write_csv(tmp_path / "s.csv", logits, labels, header=False)
    want = full_reader(path, label_col="0", score_cols="2,3,4,5")
    monkeypatch.setattr(csvfast, "TEXT_BLOCK", 4096)
    no_full_reader(monkeypatch)
    got = io.read_scores(path, label_col="0", score_cols="2,3,4,5")
    assert np.array_equal(got.scores, want.scores) and np.array_equal(got.labels, want.labels)
    assert got.class_names is None
    whole = io.load_array(path)
    assert whole.shape == (500, 6) and np.array_equal(whole[:, 2:], logits)
    ys = tmp_path / "y.csv"
    ys.write_text("\n".join(str(int(v)) for v in labels) + "\n")
    assert labels[0] == 0  # a first row "0": pandas' header of a Series, or class 0 (settled by N)
    assert np.array_equal(io.load_labels(ys, header=False), labels.astype(np.float64))
    assert np.array_equal(io.load_labels(ys, expected_rows=500), labels.astype(np.float64))
    assert np.array_equal(io.load_labels(ys, expected_rows=499), labels[1:].astype(np.float64))


@pytest.mark.parametrize("damage", ["quoted", "id_text", "class_names", "short_row", "blank_cells_row"])
def test_unsure_files_go_to_the_full_reader(tmp_path, table, damage):
    logits, labels = table
    path = write_csv(tmp_path / "s.csv", logits, labels)
    lines = path.read_text().splitlines()
    if damage == "quoted":
        lines[3] = lines[3].replace(",", ',"', 1) .replace(",", '",', 2).replace('",', ",", 1)
        lines[0] = '"label",id_num,p_a,p_b,p_c,p_d'
    elif damage == "id_text":
        lines[5] = lines[5].replace(",4,", ",x4,", 1)
    elif damage == "class_names":
        lines = [lines[0]] + [("abcd"[int(l.split(",")[0])] + l[l.index(","):]) for l in lines[1:]]
    elif damage == "short_row":
        lines[7] = lines[7].rsplit(",", 1)[0]
    else:
        lines.insert(9, ",,,,,")
    path.write_text("\n".join(lines) + "\n")
    assert csvfast.read_numeric_csv(
        path, "s.csv", None, lambda cells, line, n: True, lambda names, width: (list(range(2, 6)), 0)
    ) is None or damage in ("id_text", "class_names")  # those parse all columns: also refused below
    try:
        want = full_reader(path, label_col="label", score_cols="p_*")
    except io.InputError as exc:
        with pytest.raises(io.InputError) as got:
            io.read_scores(path, label_col="label", score_cols="p_*")
        assert str(got.value) == str(exc)
        return
    got = io.read_scores(path, label_col="label", score_cols="p_*")
    assert np.array_equal(got.scores, want.scores) and np.array_equal(got.labels, want.labels)


def write_named(path, logits, labels, *, label_of=lambda y: "abcd"[y]):
    lines = ["id,label,p_a,p_b,p_c,p_d"]
    lines += [",".join([f"img_{i:05d}.jpg", label_of(int(y))] + [repr(float(v)) for v in row])
              for i, (row, y) in enumerate(zip(logits, labels))]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_id_columns_and_class_name_labels_take_the_fast_path(tmp_path, table, monkeypatch):
    logits, labels = table
    path = write_named(tmp_path / "s.csv", logits, labels, label_of=lambda y: f" {'abcd'[y]}" if y == 2 else "abcd"[y])
    want = full_reader(path, label_col="label", score_cols="p_*")
    assert np.array_equal(want.labels, labels)
    numeric = write_named(tmp_path / "n.csv", logits, labels, label_of=str)  # ids as text, labels numbers
    want_numeric = full_reader(numeric, label_col="label", score_cols="p_*")
    monkeypatch.setattr(csvfast, "TEXT_BLOCK", 1500)
    no_full_reader(monkeypatch)
    got = io.read_scores(path, label_col="label", score_cols="p_*")
    assert got.labels.dtype == want.labels.dtype == np.int64
    assert np.array_equal(got.labels, want.labels) and np.array_equal(got.scores, want.scores)
    assert got.class_names == want.class_names
    got = io.read_scores(numeric, label_col="label", score_cols="p_*")
    assert got.labels.dtype == want_numeric.labels.dtype == np.float64
    assert np.array_equal(got.labels, want_numeric.labels) and np.array_equal(got.scores, want_numeric.scores)


@pytest.mark.parametrize("bad", ["bird", "", "3", "a" * 80])
def test_a_label_that_is_not_a_class_far_down_gets_the_full_readers_error(tmp_path, table, monkeypatch, bad):
    logits, labels = table
    path = write_named(tmp_path / "s.csv", logits, labels)
    lines = path.read_text().splitlines()
    cells = lines[400].split(",")
    cells[1] = bad
    lines[400] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(io.InputError) as want:
        full_reader(path, label_col="label", score_cols="p_*")
    monkeypatch.setattr(csvfast, "TEXT_BLOCK", 1500)
    with pytest.raises(io.InputError) as got:
        io.read_scores(path, label_col="label", score_cols="p_*")
    assert str(got.value) == str(want.value) and "line 401" in str(got.value)
