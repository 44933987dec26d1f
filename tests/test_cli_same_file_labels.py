"""Issue #33 item 2: labels in the same file as the scores, named one way in every command that reads them.

`--labels NAME` (scores file with a labels column, LABELS arguments left out) and `FILE:COLUMN` keys, for
CSV and Parquet, in temperature, fit (fitting and --test sets), compare, report, table, ood and plot. The
expected numbers are those of the same data saved as separate .npy arrays (and one hand check of the
accuracy): the two ways of naming the labels must read the very same samples.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from calibrate_cli.cli import cli
from cli_helpers import one_line_error

NAMES = ("cat", "dog", "owl")


def run(runner, args):
    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _probs(rng, n):
    logits = rng.normal(size=(n, 3)) * 2
    labels = rng.integers(0, 3, n)
    logits[np.arange(n), labels] += 1.5
    p = np.exp(logits - logits.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True), labels


def _write_csv(path, p, labels):
    rows = ["id,label," + ",".join(f"p_{c}" for c in NAMES)]
    rows += [f"{i},{NAMES[y]}," + ",".join(repr(float(v)) for v in row) for i, (row, y) in enumerate(zip(p, labels))]
    path.write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """val and test sets as CSV (id, class-name labels, p_cat, p_dog, p_owl), as Parquet when pyarrow is
    there, and as .npy arrays (p_val.npy, y_val.npy, ...)."""
    d = tmp_path_factory.mktemp("same_file")
    rng = np.random.default_rng(33)
    for name, n in (("val", 240), ("test", 180)):
        p, y = _probs(rng, n)
        np.save(d / f"p_{name}.npy", p)
        np.save(d / f"y_{name}.npy", y)
        _write_csv(d / f"{name}.csv", p, y)
        try:
            import pandas as pd

            frame = pd.DataFrame({"id": np.arange(n), "label": [NAMES[k] for k in y],
                                  **{f"p_{c}": p[:, j] for j, c in enumerate(NAMES)}})
            frame.to_parquet(d / f"{name}.parquet")
        except ImportError:  # no pyarrow: the Parquet cases skip
            pass
    return d


def _table(data, ext):
    if ext == "parquet" and not (data / "val.parquet").exists():
        pytest.skip("pyarrow is not installed")
    return {s: data / f"{s}.{ext}" for s in ("val", "test")}


def _json(result):
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    doc.pop("inputs", None)
    return doc


def _arrays(data):
    return {k: data / f"{k}.npy" for k in ("p_val", "y_val", "p_test", "y_test")}


EXTS = ["csv", "parquet"]


def test_the_arrays_hold_what_the_tables_hold(data):
    """The reference run reads the .npy arrays; check them by hand against the CSV once (accuracy)."""
    p, y = np.load(data / "p_test.npy"), np.load(data / "y_test.npy")
    lines = (data / "test.csv").read_text().splitlines()[1:]
    from_csv = np.array([[float(v) for v in line.split(",")[2:]] for line in lines])
    labels = np.array([NAMES.index(line.split(",")[1]) for line in lines])
    assert np.array_equal(from_csv, p) and np.array_equal(labels, y)
    correct = sum(int(np.argmax(row) == label) for row, label in zip(from_csv, labels))
    assert correct / len(labels) == pytest.approx(float(np.mean(p.argmax(1) == y)), abs=0)


@pytest.mark.parametrize("ext", EXTS)
def test_temperature_labels_column_for_fitting_and_test_sets(runner, data, ext):
    """`calib temperature val.csv --labels label --test test.csv` (no --labels before: 'No such option')."""
    t, a = _table(data, ext), _arrays(data)
    got = run(runner, ["temperature", t["val"], "--labels", "label", "--scores", "p_*", "--test", t["test"],
                       "--probs", "-f", "json"])
    want = run(runner, ["temperature", a["p_val"], a["y_val"], "--test", a["p_test"], a["y_test"], "--probs", "-f",
                        "json"])
    inputs = json.loads(got.stdout)["inputs"]
    assert inputs["fit"]["labels"] == f"{t['val']}[label]" and inputs["test"]["labels"] == f"{t['test']}[label]"
    assert _json(got) == _json(want)
    # --test before --labels, and the keys, give the same
    keyed = run(runner, ["temperature", f"{t['val']}:p_*", f"{t['val']}:label", "--test", f"{t['test']}:p_*",
                         f"{t['test']}:label", "--probs", "-f", "json"])
    assert _json(keyed) == _json(want)


@pytest.mark.parametrize("ext", EXTS)
def test_fit_labels_column_for_fitting_and_test_sets(runner, data, ext):
    t, a = _table(data, ext), _arrays(data)
    got = run(runner, ["fit", t["val"], "--test", t["test"], "--labels", "label", "--scores", "p_*",
                       "--method", "isotonic", "--probs", "-f", "json"])
    want = run(runner, ["fit", a["p_val"], a["y_val"], "--test", a["p_test"], a["y_test"], "--method", "isotonic",
                        "--probs", "-f", "json"])
    assert _json(got) == _json(want)


@pytest.mark.parametrize("ext", EXTS)
def test_compare_labels_column(runner, data, ext):
    t, a = _table(data, ext), _arrays(data)
    got = run(runner, ["compare", t["val"], t["val"], "--labels", "label", "--scores", "p_*", "--probs",
                       "--bootstrap", "0", "-f", "json"])
    want = run(runner, ["compare", a["p_val"], a["y_val"], a["p_val"], a["y_val"], "--probs", "--bootstrap", "0",
                        "-f", "json"])
    g, w = _json(got), _json(want)
    for doc in (g, w):
        doc.pop("paths", None)
    assert g == w
    keyed = run(runner, ["compare", f"{t['val']}:p_*", f"{t['val']}:label", f"{t['val']}:p_*", f"{t['val']}:label",
                         "--probs", "--bootstrap", "0", "-f", "json"])
    k = _json(keyed)
    k.pop("paths", None)
    assert k == w


@pytest.mark.parametrize("ext", EXTS)
def test_table_labels_column_groups_two_files(runner, data, ext):
    t, a = _table(data, ext), _arrays(data)
    got = run(runner, ["table", t["val"], t["test"], "--labels", "label", "--scores", "p_*", "--probs", "-f", "json"])
    want = run(runner, ["table", a["p_val"], a["y_val"], a["p_test"], a["y_test"], "--probs", "-f", "json"])
    g, w = _json(got), _json(want)
    assert g["models"][0]["inputs"]["test_labels"] == f"{t['test']}[label]"
    for doc in (g, w):
        for model in doc["models"]:
            model.pop("inputs")
            model.pop("name", None)
    assert g == w
    one_line_error(run(runner, ["table", t["val"], t["test"], t["val"], "--labels", "label", "--scores", "p_*",
                                "--probs"]), "two files VAL_SCORES TEST_SCORES")


@pytest.mark.parametrize("ext", EXTS)
def test_report_labels_column(runner, data, ext, tmp_path):
    t, a = _table(data, ext), _arrays(data)
    got = run(runner, ["report", t["val"], t["test"], "--labels", "label", "--scores", "p_*", "--probs",
                       "--bootstrap", "0", "-o", tmp_path / "a.html"])
    want = run(runner, ["report", a["p_val"], a["y_val"], a["p_test"], a["y_test"], "--probs", "--bootstrap", "0",
                        "-o", tmp_path / "b.html"])
    assert got.exit_code == 0 and want.exit_code == 0, (got.stderr, want.stderr)
    summary = re.compile(r"\(T = .*\)")
    assert summary.search(got.stderr).group(0) == summary.search(want.stderr).group(0)
    assert f"{t['test']}[label]" in (tmp_path / "a.html").read_text()


@pytest.mark.parametrize("ext", EXTS)
def test_ood_labels_column_is_not_read_as_scores(runner, data, ext, tmp_path):
    """Without --labels (and --scores) a numeric labels column would be a fourth score column."""
    t, a = _table(data, ext), _arrays(data)
    got = run(runner, ["ood", t["val"], t["test"], "--labels", "label", "--scores", "p_*", "--probs", "-f", "json"])
    want = run(runner, ["ood", a["p_val"], a["p_test"], "--probs", "-f", "json"])
    assert _json(got) == _json(want)
    # numeric labels, no id column, no --scores: the column is left out of the scores only with --labels
    for name in ("val", "test"):
        p, y = np.load(a[f"p_{name}"]), np.load(a[f"y_{name}"])
        lines = ["label,p_cat,p_dog,p_owl"] + [f"{k}," + ",".join(repr(float(v)) for v in row) for row, k in zip(p, y)]
        (tmp_path / f"{name}.csv").write_text("\n".join(lines) + "\n")
    alone = run(runner, ["ood", tmp_path / "val.csv", tmp_path / "test.csv", "--labels", "label", "--probs", "-f",
                         "json"])
    assert _json(alone) == _json(want)
    as_scores = run(runner, ["ood", tmp_path / "val.csv", tmp_path / "test.csv", "--logits", "-f", "json"])
    assert json.loads(as_scores.stdout)["k"] == 4  # what --labels prevents: the labels read as a fourth class


@pytest.mark.parametrize("ext", EXTS)
def test_conformal_labels_column_for_fitting_and_test_sets(runner, data, ext):
    t, a = _table(data, ext), _arrays(data)
    got = run(runner, ["conformal", t["val"], t["test"], "--labels", "label", "--scores", "p_*", "--probs",
                       "--method", "aps", "-f", "json"])
    want = run(runner, ["conformal", a["p_val"], a["y_val"], a["p_test"], a["y_test"], "--probs", "--method", "aps",
                        "-f", "json"])
    assert _json(got) == _json(want)
    assert json.loads(got.stdout)["inputs"]["fit"]["labels"] == f"{t['val']}[label]"
    alone = run(runner, ["conformal", t["val"], "--labels", "label", "--scores", "p_*", "--probs", "-f", "json"])
    assert alone.exit_code == 0, alone.stderr
    three = run(runner, ["conformal", t["val"], t["test"], t["val"], "--labels", "label", "--probs"])
    usage_error(three, "3 scores files with --labels")
    unpaired = run(runner, ["conformal", a["p_val"], "--probs"])
    usage_error(unpaired, "do not pair up")


@pytest.mark.parametrize("ext", EXTS)
def test_plot_labels_column_for_every_model(runner, data, ext, tmp_path):
    t = _table(data, ext)
    result = run(runner, ["plot", t["val"], "--labels", "label", "--scores", "p_*", "--compare", t["test"], "--probs",
                          "-o", tmp_path / "p.png"])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "p.png").stat().st_size > 0


@pytest.mark.parametrize("command", ["temperature", "fit", "compare", "report", "table", "ood", "eval", "plot",
                                     "conformal"])
def test_every_command_offers_the_same_labels_option(runner, command):
    result = run(runner, [command, "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "--labels, --label-col NAME" in text and "this column of each scores file" in text


def usage_error(result, fragment: str) -> None:
    """A usage mistake: exit 2, the usage line and one error line naming it, no traceback."""
    assert result.exit_code == 2, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and fragment in errors[0], result.stderr
    assert "Traceback" not in result.stderr


def test_labels_mistakes_are_usage_errors(runner, data):
    t, a = _table(data, "csv"), _arrays(data)
    common = ["--scores", "p_*", "--probs"]
    # LABELS and --labels together
    usage_error(run(runner, ["temperature", t["val"], a["y_val"], "--labels", "label", *common]), "not both")
    # --test with a labels file and --labels: which one is meant is not guessed
    usage_error(run(runner, ["fit", t["val"], "--labels", "label", "--test", t["test"], a["y_test"], *common]),
                   "--test takes a scores file alone")
    # a test set without labels and without --labels
    usage_error(run(runner, ["temperature", a["p_val"], a["y_val"], "--test", a["p_test"], "--probs"]),
                   "--labels NAME")
    # no labels at all
    usage_error(run(runner, ["temperature", t["val"], *common]), "missing LABELS")
    # compare: two models, whichever way their labels are named
    usage_error(run(runner, ["compare", t["val"], t["val"], t["val"], "--labels", "label", *common]),
                   "two models")
    usage_error(run(runner, ["compare", t["val"], t["val"], *common]), "--labels NAME")
    usage_error(run(runner, ["report", a["p_val"], a["y_val"], a["p_test"], "--probs", "-o", "r.html"]),
                   "TEST_SCORES and TEST_LABELS")


@pytest.mark.parametrize("ext", EXTS)
def test_a_label_that_names_no_class_is_one_line_naming_its_place(runner, tmp_path, ext):
    """A class-name label that is no score column's class: one line naming the file, the label's place
    (CSV: its line; Parquet: its column and row) and the classes, exit 2."""
    rng = np.random.default_rng(4)
    p, y = _probs(rng, 6)
    names = [NAMES[k] for k in y]
    names[4] = "emu"
    if ext == "csv":
        path, where = tmp_path / "x.csv", "line 6"  # the header is line 1
        _write_csv(path, p, y)
        path.write_text(path.read_text().replace(f"4,{NAMES[y[4]]},", "4,emu,"))
    else:
        pd = pytest.importorskip("pandas")
        pytest.importorskip("pyarrow")
        path, where = tmp_path / "x.parquet", "column 'label', row 4"
        pd.DataFrame({"label": names, **{f"p_{c}": p[:, j] for j, c in enumerate(NAMES)}}).to_parquet(path)
    result = runner.invoke(cli, ["eval", str(path), "--labels", "label", "--scores", "p_*", "--probs"])
    message = one_line_error(result)
    assert result.exit_code == 2
    assert f"{path}: {where}: label 'emu' is not a class (classes: cat, dog, owl" in message, message
