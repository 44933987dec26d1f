"""CSV input through the CLI: header detection never drops or invents a row, line numbers count
blank lines, score columns can be picked, and labels may be class names (issues 19.11 and 20.1)."""

import json

import numpy as np
import pytest

import calibrate_cli as calib
from calibrate_cli.cli import cli
from cli_helpers import one_line_error  # noqa: E402


@pytest.fixture()
def logits_labels():
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 10, 200)
    labels[0] = 0  # a headerless labels file that starts with class 0
    logits = rng.normal(size=(200, 10))
    logits[np.arange(200), labels] += 1.5
    return logits, labels


def rows_text(array) -> list[str]:
    return [",".join(repr(float(v)) for v in np.atleast_1d(row)) for row in array]


def write(path, lines) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


def n_of(result) -> int:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["n"]


# ------------------------------------------------------------------------------ header detection
@pytest.mark.parametrize("bad_cell", ["", "0.3x"])
def test_a_damaged_first_row_is_not_silently_taken_as_a_header(runner, tmp_path, logits_labels, bad_cell):
    logits, labels = logits_labels
    np.save(tmp_path / "y.npy", labels)
    lines = rows_text(logits)
    cells = lines[0].split(",")
    cells[3] = bad_cell
    scores = write(tmp_path / "s.csv", [",".join(cells)] + lines[1:])
    # before: N = 199 with exit 0 (the first sample dropped as a "header")
    one_line_error(run(runner, "eval", scores, tmp_path / "y.npy"), "s.csv", "line 1", "header", "--no-header")
    # said to be data, the damaged cell is named with its line and column
    one_line_error(
        run(runner, "eval", scores, tmp_path / "y.npy", "--no-header"), "s.csv", "line 1", "column 3", repr(bad_cell)
    )


def test_pandas_numeric_headers_are_never_taken_as_a_sample(runner, tmp_path, logits_labels):
    logits, labels = logits_labels
    # what DataFrame(logits).to_csv(index=False) and Series(labels).to_csv(index=False) write
    scores = write(tmp_path / "s.csv", [",".join(str(i) for i in range(10))] + rows_text(logits))
    ys = write(tmp_path / "y.csv", ["0"] + [str(int(v)) for v in labels])
    # before: N = 201, exit 0 (a made-up sample "0,1,...,9" with label 0)
    one_line_error(run(runner, "eval", scores, ys), "s.csv", "0,1,2", "--header or --no-header")
    doc = run(runner, "eval", scores, ys, "--header", "-f", "json")
    assert n_of(doc) == 200
    assert json.loads(doc.stdout)["metrics"]["ece"] == pytest.approx(calib.evaluate(logits, labels).metrics["ece"], abs=1e-12)
    assert n_of(run(runner, "eval", scores, ys, "--no-header", "-f", "json")) == 201  # said so: taken as data


def test_the_other_files_n_settles_a_pandas_header(runner, tmp_path, logits_labels):
    logits, labels = logits_labels
    np.save(tmp_path / "x.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    scores = write(tmp_path / "s.csv", [",".join(str(i) for i in range(10))] + rows_text(logits))
    ys = write(tmp_path / "y.csv", ["0"] + [str(int(v)) for v in labels])
    plain_ys = write(tmp_path / "plain_y.csv", [str(int(v)) for v in labels])  # starts with the label 0
    assert n_of(run(runner, "eval", scores, tmp_path / "y.npy", "-f", "json")) == 200
    assert n_of(run(runner, "eval", tmp_path / "x.npy", ys, "-f", "json")) == 200
    assert n_of(run(runner, "eval", tmp_path / "x.npy", plain_ys, "-f", "json")) == 200


def test_names_only_first_row_is_a_header_and_numbers_only_is_data(runner, tmp_path, logits_labels):
    logits, labels = logits_labels
    np.save(tmp_path / "y.npy", labels)
    named = write(tmp_path / "named.csv", [",".join(f"c{i}" for i in range(10))] + rows_text(logits))
    plain = write(tmp_path / "plain.csv", rows_text(logits))
    assert n_of(run(runner, "eval", named, tmp_path / "y.npy", "-f", "json")) == 200
    assert n_of(run(runner, "eval", plain, tmp_path / "y.npy", "-f", "json")) == 200


def test_line_numbers_count_blank_lines(runner, tmp_path):
    np.save(tmp_path / "y.npy", np.array([0, 1]))
    scores = write(tmp_path / "s.csv", ["a,b", "", "", "0.1,0.9", "", "0.2,oops"])
    one_line_error(run(runner, "eval", scores, tmp_path / "y.npy"), "s.csv", "line 6", "oops")  # before: "line 3"


def test_temperature_and_compare_take_the_csv_options(runner, tmp_path, logits_labels):
    logits, labels = logits_labels
    scores = write(tmp_path / "s.csv", [",".join(str(i) for i in range(10))] + rows_text(logits))
    ys = write(tmp_path / "y.csv", ["0"] + [str(int(v)) for v in labels])
    result = run(runner, "temperature", scores, ys, "--header", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["inputs"]["fit"]["n"] == 200
    one_line_error(run(runner, "compare", scores, ys, scores, ys), "--header or --no-header")


# ------------------------------------------------------------------------ columns and class names
@pytest.fixture()
def named_csv(tmp_path):
    rng = np.random.default_rng(11)
    p_dog = rng.uniform(size=40)
    names = np.array(["cat", "dog"])[(rng.uniform(size=40) < p_dog).astype(int)]
    lines = ["id,label,p_cat,p_dog"] + [
        f"a{i},{name},{repr(float(1 - p))},{repr(float(p))}" for i, (name, p) in enumerate(zip(names, p_dog))
    ]
    path = write(tmp_path / "preds.csv", lines)
    probs = np.stack([1 - p_dog, p_dog], axis=1)
    return path, probs, (names == "dog").astype(int)


@pytest.mark.parametrize("cols", ["p_*", "p_cat,p_dog", "2,3"])
def test_class_name_labels_map_to_the_score_columns(runner, named_csv, cols):
    path, probs, y = named_csv
    result = run(runner, "eval", path, "--label-col", "label", "--score-cols", cols, "--probs", "-f", "json")
    assert result.exit_code == 0, result.output  # before: "'a1' is not a number" / no such option
    doc = json.loads(result.stdout)
    expected = calib.evaluate(probs, y, input_kind="probs").metrics
    assert doc["n"] == 40 and doc["k"] == 2
    for name in ("accuracy", "ece", "nll", "brier"):
        assert doc["metrics"][name] == pytest.approx(expected[name], abs=1e-12)


def test_score_columns_in_another_order_reorder_the_classes(runner, named_csv):
    path, probs, y = named_csv
    result = run(runner, "eval", path, "--label-col", "label", "--score-cols", "p_dog,p_cat", "--probs", "-f", "json")
    expected = calib.evaluate(probs[:, ::-1], 1 - y, input_kind="probs").metrics
    assert json.loads(result.stdout)["metrics"]["ece"] == pytest.approx(expected["ece"], abs=1e-12)


def test_an_id_column_without_score_cols_says_how_to_pick_them(runner, named_csv):
    path, _, _ = named_csv
    # refused by its name before any cell is read (issue 32, item 5), with the --scores that fixes it
    one_line_error(run(runner, "eval", path, "--label-col", "label", "--probs"), "'id'", "row index", "--scores 'p_*'")


def test_unknown_class_names_and_unnamed_columns_are_explained(runner, tmp_path, named_csv):
    path, _, _ = named_csv
    text = open(path).read().replace(",dog,", ",bird,", 1)
    bad = write(tmp_path / "bad.csv", text.splitlines())
    one_line_error(
        run(runner, "eval", bad, "--label-col", "label", "--score-cols", "p_*", "--probs"), "'bird'", "cat, dog"
    )
    headerless = write(tmp_path / "headerless.csv", ["cat,0.2,0.8", "dog,0.6,0.4"])
    one_line_error(
        run(runner, "eval", headerless, "--label-col", "0", "--no-header", "--probs"),
        "'cat'", "no names", "class indices",
    )
    one_line_error(run(runner, "eval", path, "--label-col", "label", "--score-cols", "q_*"), "no column matches 'q_*'")


def test_class_name_labels_in_a_separate_file(runner, tmp_path):
    scores = write(tmp_path / "s.csv", ["cat,dog", "2.0,0.5", "0.1,1.0", "1.0,0.0"])
    ys = write(tmp_path / "y.csv", ["label", "cat", "dog", "dog"])
    result = run(runner, "eval", scores, ys, "-f", "json")
    assert result.exit_code == 0, result.output
    expected = calib.evaluate(np.array([[2.0, 0.5], [0.1, 1.0], [1.0, 0.0]]), np.array([0, 1, 1])).metrics
    assert json.loads(result.stdout)["metrics"]["nll"] == pytest.approx(expected["nll"], abs=1e-12)


def test_class_names_of_strips_a_shared_prefix():
    from calibrate_cli.data.columns import class_names_of

    assert class_names_of(["p_cat", "p_dog"]) == ["cat", "dog"]
    assert class_names_of(["logit_a_b", "logit_c"]) == ["a_b", "c"]
    assert class_names_of(["cat", "dog"]) == ["cat", "dog"]
    assert class_names_of(["p_", "p_x"]) == ["p_", "p_x"]  # nothing left of one name: keep them whole
