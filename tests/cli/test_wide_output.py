"""Reports in a pipe or a CI log come out whole; numbers never break across lines (issue 33, item 6)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from calibrate_cli.cli import cli
from calibrate_cli.metrics.registry import METRIC_DEFINITIONS


def run(runner, args, **kwargs):
    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False, **kwargs)


@pytest.fixture()
def models(tmp_path):
    """Two 10-class models (logits, not probabilities) on the same samples: the second over-confident."""
    rng = np.random.default_rng(5)
    n, k = 2000, 10
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * 1.5
    logits[np.arange(n), labels] += 2.0
    np.save(tmp_path / "a.npy", logits)
    np.save(tmp_path / "b.npy", logits * 3.0)
    np.save(tmp_path / "y.npy", labels)
    return tmp_path


def table_rows(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("━")) + 1
    end = next((i for i in range(start, len(lines)) if "│" not in lines[i]), len(lines))
    return lines[start:end]


def test_a_pipe_gets_every_definition_whole_and_no_wrapped_cell(runner, models):
    # CliRunner's stdout is not a terminal; without COLUMNS Rich assumed 80 columns: definitions
    # ended in "…" and the bins table's "over" wrapped onto a line of its own
    result = run(runner, ["eval", models / "b.npy", models / "y.npy"], env={"COLUMNS": None})
    assert result.exit_code == 0, result.stderr
    assert "…" not in result.stdout
    for name in ("ece", "adaece", "classwise_ece", "debiased_l2_ce", "rms_ce", "smooth_ece", "ks_ce"):
        assert METRIC_DEFINITIONS[name] in result.stdout, name
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 1:
            assert cells[0], f"a wrapped row: {line!r}"  # every row's first cell is filled


def test_columns_is_honoured_when_set(runner, models):
    result = run(runner, ["eval", models / "b.npy", models / "y.npy"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    assert all(len(line) <= 80 for line in result.stdout.splitlines()[1:])


INTERVAL = re.compile(r"\[[-+]?\d+(\.\d+)?( %)?, [-+]?\d+(\.\d+)?( %)?\][†‡]*")


@pytest.mark.parametrize("columns", [None, "80", "100"])
def test_compare_never_breaks_an_interval(runner, models, columns):
    result = run(runner, ["compare", models / "a.npy", models / "y.npy", models / "b.npy", models / "y.npy",
                          "--bootstrap", "20", "--seed", "0"], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.stderr
    rows = table_rows(result.stdout)
    intervals = [row.split("│")[4].strip() for row in rows]
    filled = [cell for cell in intervals if cell]
    assert len(filled) >= 10
    for cell in filled:
        assert INTERVAL.fullmatch(cell), (cell, result.stdout)
    for row in rows:  # a line holds a whole row or only the rest of a metric's name, never a number's tail
        cells = [c.strip() for c in row.split("│")]
        assert all(cells[1:4]) or not any(cells[1:]), row
    if columns:
        assert all(len(line) <= int(columns) for line in result.stdout.splitlines()[1:] if "│" in line)
