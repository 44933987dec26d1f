"""What a new user trips over in the first hour (issue #33, items 8 and 9): through the CLI."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from calibrate_cli.cli import cli
from cli_helpers import one_line_error  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: references to documents a user does not have: the project's SPEC and its issue tracker
PRIVATE_REFERENCE = re.compile(r"\bSPEC\b|\b[Ii]ssues? #?\d")


def run(runner, args, **kwargs):
    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False, **kwargs)


# ------------------------------------------------------------------------------ 33.8 references
def test_help_and_docs_point_to_pages_users_have(runner):
    """`calib train --help` said "SPEC §7", docs/json-schema.md "added with issue 16": the docs/ pages instead."""
    helps = {"calib": run(runner, ["--help"]).stdout}
    for name in cli.commands:
        helps[name] = run(runner, [name, "--help"]).stdout
    for name, text in helps.items():
        assert text and not PRIVATE_REFERENCE.search(text), (name, PRIVATE_REFERENCE.search(text))
    assert "docs/losses.md" in " ".join(helps["train"].split())
    # what users read: the help pages above, the docs and the READMEs (comments in the code are for its authors)
    files = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "sample_data" / "README.md"]
    found = [f"{path.relative_to(ROOT)}: {match[0]!r}" for path in files
             for match in PRIVATE_REFERENCE.finditer(path.read_text(encoding="utf-8"))]
    assert not found, found


# ------------------------------------------------------------------------------ 33.9a one rule for -o
@pytest.fixture()
def sample():
    s = ROOT / "sample_data"
    return {"val": s / "val_logits.npy", "val_y": s / "val_labels.npy", "test": s / "test_logits.npy",
            "test_y": s / "test_labels.npy", "ood": s / "ood_noise_logits.npy"}


@pytest.mark.parametrize("command", ["eval", "temperature", "fit", "compare", "ood", "table", "gamma"])
def test_output_file_means_nothing_on_stdout(runner, sample, tmp_path, command):
    """`temperature` and `fit` also printed their table with -o; `eval`, `ood`, `compare` did not:
    every command now follows docs/cli-contract.md (the report goes to FILE only)."""
    args = {
        "eval": ["eval", sample["test"], sample["test_y"]],
        "temperature": ["temperature", sample["val"], sample["val_y"]],
        "fit": ["fit", sample["val"], sample["val_y"], "--method", "vector"],
        "compare": ["compare", sample["test"], sample["test_y"], sample["test"], sample["test_y"]],
        "ood": ["ood", sample["test"], sample["ood"]],
        "table": ["table", sample["val"], sample["val_y"], sample["test"], sample["test_y"]],
        "gamma": ["gamma", "0.5"],
    }[command]
    out = tmp_path / "report.json"
    result = run(runner, [*args, "-o", out])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert out.read_text().startswith("{")


# ------------------------------------------------------------------------------ 33.9b table: no such file
def test_table_names_a_missing_path(runner, sample, tmp_path):
    """`calib table /nonexistent` said the path does "not make a model"."""
    one_line_error(run(runner, ["table", tmp_path / "nonexistent"]), "nonexistent: no such file or run folder",
                   absent=["make a model"])
    four = [sample["val"], sample["val_y"], sample["test"], sample["test_y"]]
    one_line_error(run(runner, ["table", *four, tmp_path / "run2"]), "run2: no such file or run folder")
    one_line_error(run(runner, ["table", *four[:2]]), "2 file(s) at the end", "do not make a model")  # existing files


# ------------------------------------------------------------------------------ 33.9c top-level help
def test_top_level_help_summarises_train_whole_and_names_every_input_type(runner):
    """`calib --help` cut train's summary at "Mukhoti et al." and named 4 input types of 9."""
    text = " ".join(run(runner, ["--help"]).stdout.split())
    train = text[text.index(" train "):]
    assert "Mukhoti et" not in train and "then measure it." in train
    for suffix in (".npy", ".npz", ".pt", ".csv", ".parquet", ".arrow", ".feather", ".safetensors", ".h5", ".zarr"):
        assert suffix in text, suffix
    assert "docs/inputs.md" in text


# ------------------------------------------------------------------------------ 33.9d -o /dev/null
@pytest.mark.skipif(not Path("/dev/null").exists(), reason="needs /dev/null")
def test_dev_null_is_a_sink_for_every_output(runner, sample, tmp_path):
    """`-o /dev/null` was refused ("is a character device"): a script's sink is accepted, written
    straight into (no temporary beside it), without --force; /dev/stdout (a link into /proc) is not."""
    import stat

    evaluate = ["eval", sample["test"], sample["test_y"]]
    result = run(runner, [*evaluate, "-o", "/dev/null", "--fail-above", "ece=0.9"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    result = run(runner, ["plot", sample["test"], sample["test_y"], "-o", "/dev/null"])
    assert result.exit_code == 0, result.stderr
    result = run(runner, ["temperature", sample["val"], sample["val_y"], "--test", sample["test"], sample["test_y"],
                          "-o", "/dev/null", "--plot", "/dev/null", "--save-logits", "/dev/null"])
    assert result.exit_code == 0, result.stderr
    assert stat.S_ISCHR(Path("/dev/null").lstat().st_mode)  # still the device
    one_line_error(run(runner, [*evaluate, "-o", "/dev/stdout"]), "/dev/stdout", "-o -")
    fifo = tmp_path / "pipe"
    if hasattr(os, "mkfifo"):
        os.mkfifo(fifo)
        one_line_error(run(runner, [*evaluate, "-o", fifo, "--force"]), "FIFO")


# ------------------------------------------------------------------------------ 33.9e torchrun: rank 0 prints
@pytest.mark.parametrize("env", [{"RANK": "1"}, {"LOCAL_RANK": "2"}, {"RANK": "0", "LOCAL_RANK": "0"}])
def test_train_prints_on_rank_0_only(runner, tmp_path, monkeypatch, env):
    """Under torchrun every rank printed the progress and the final table."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    monkeypatch.setenv("CALIB_THREADS", "1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    result = run(runner, ["train", "--loss", "ce", "--data", "digits", "--recipe", "fast", "--epochs", "1",
                          "--device", "cpu", "--out", out])
    assert result.exit_code == 0, result.stderr
    assert (out / "summary.json").is_file()  # the ranks still train (WORLD_SIZE unset: each writes its run)
    if env.get("RANK", "0") == "0" and env.get("LOCAL_RANK", "0") == "0":
        assert "epoch 1/1" in result.stderr and "Post T" in result.stdout
    else:
        assert result.stdout == "" and "epoch" not in result.stderr and "Post T" not in result.stdout


# ------------------------------------------------------------------------------ 33.2 file:COLUMN keys in CSV
@pytest.fixture()
def csv_model(tmp_path):
    """One model's probabilities and class-name labels in a CSV with an id column, and the same as .npy."""
    rng = np.random.default_rng(5)
    n, names = 240, ["cat", "dog", "owl"]
    logits = rng.normal(size=(n, 3)) * 2
    labels = rng.integers(0, 3, n)
    logits[np.arange(n), labels] += 1.5
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    rows = ["id,label," + ",".join(f"p_{c}" for c in names)]
    rows += [f"{i},{names[y]}," + ",".join(repr(float(v)) for v in row) for i, (row, y) in enumerate(zip(p, labels))]
    (tmp_path / "val.csv").write_text("\n".join(rows) + "\n")
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "y.npy", labels)
    return tmp_path


def test_csv_columns_as_keys_in_every_command(runner, csv_model):
    """`calib temperature 'val.csv:p_*' val.csv:label` said "val.csv:p_*: no such file" (keys worked for
    Parquet only): the same numbers as the arrays saved with numpy."""
    import json

    d = csv_model
    keyed, arrays = [f"{d / 'val.csv'}:p_*", f"{d / 'val.csv'}:label"], [d / "p.npy", d / "y.npy"]
    for command in (["temperature"], ["fit", "--method", "isotonic"], ["eval"]):
        got = run(runner, [*command[:1], *keyed, *command[1:], "--probs", "-f", "json"])
        want = run(runner, [*command[:1], *arrays, *command[1:], "--probs", "-f", "json"])
        assert got.exit_code == 0 and want.exit_code == 0, (got.stderr, want.stderr)
        g, w = json.loads(got.stdout), json.loads(want.stdout)
        for doc in (g, w):
            doc.pop("inputs")
        assert g == w, command
    compare = run(runner, ["compare", *keyed, *keyed, "--probs", "-f", "json"])
    assert compare.exit_code == 0, compare.stderr
    table = run(runner, ["table", *keyed, *keyed, "--probs", "-f", "json"])
    assert table.exit_code == 0, table.stderr
    # the labels column of the scores' own file, and mistakes named in one line
    one_line_error(run(runner, ["eval", keyed[0], f"{d / 'val.csv'}:nope", "--probs"]), "val.csv:nope", "'nope'")
    one_line_error(run(runner, ["eval", f"{d / 'val.csv'}:", keyed[1], "--probs"]), "no columns after ':'")
    one_line_error(run(runner, ["eval", *keyed, "--scores", "p_cat", "--probs"]), "columns given twice")
