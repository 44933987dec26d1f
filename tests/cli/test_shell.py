"""The thin shell (issue 14): options defined once, one progress bar, one table renderer, and core
messages that name no flags while the CLI still gives the flag hints."""

from __future__ import annotations

import ast
import contextlib
import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from rich.text import Text

from calibrate_cli.cli import cli
from calibrate_cli.errors import InputError
from calibrate_cli.metrics.gates import Gate, check_gates
from calibrate_cli.calibrators.temperature_fit import fit_temperature

PACKAGE = Path(__file__).resolve().parents[2] / "calibrate_cli"
#: core modules other branches are converting right now (their flag-naming messages are listed there)
PENDING = {"io.py", "outputs.py", "predictions.py", "bootstrap.py"}


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, 300)
    logits = rng.normal(0, 1, (300, 4))
    logits[np.arange(300), labels] += 1.0
    np.save(tmp_path / "s.npy", logits)
    np.save(tmp_path / "s2.npy", 1.7 * logits)
    np.save(tmp_path / "y.npy", labels)
    return tmp_path, logits, labels


# ------------------------------------------------------------------------------ neutral core messages
def _message_strings(path: Path):
    """String constants of a module (f-string parts included), docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_core_messages_name_no_flags():
    core = [p for p in PACKAGE.rglob("*.py") if "cli" not in p.relative_to(PACKAGE).parts[:1]]
    found = [
        f"{p.relative_to(PACKAGE)}:{line}: {text!r}"
        for p in core
        if p.name not in PENDING
        for line, text in _message_strings(p)
        if re.search(r"(^|[\s(])--[a-z]", text)
    ]
    assert not found, "\n".join(found)


def test_every_remedy_has_a_cli_wording():
    from calibrate_cli.cli.hints import CLI_REMEDIES, cli_text
    from calibrate_cli.errors import REMEDIES

    assert set(CLI_REMEDIES) == set(REMEDIES)
    for code in REMEDIES:
        error = InputError("x", remedy=code)
        assert "--" not in str(error) and str(error) == f"x; {REMEDIES[code]}"
        assert cli_text(error) == f"x; {CLI_REMEDIES[code]}" and "--" in cli_text(error)
    with pytest.raises(KeyError):
        InputError("x", remedy="no-such-remedy")


def test_platt_error_is_neutral_in_the_core_and_names_flags_in_the_cli(runner, files):
    folder, logits, labels = files
    with pytest.raises(InputError) as info:
        fit_temperature(logits, labels, search="platt")
    assert "Platt scaling is for binary" in str(info.value) and "--" not in str(info.value)
    result = run(runner, "temperature", folder / "s.npy", folder / "y.npy", "--search", "platt")
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("got K = 4; use --search nll or --search vector"), result.stderr


def test_compat_error_names_the_flag_in_the_cli_only(runner, files):
    folder, logits, labels = files
    with pytest.raises(InputError, match="compat mode applies") as info:
        fit_temperature(logits, labels, search="nll", compat="focal-calibration")
    assert "--" not in str(info.value)
    result = run(runner, "temperature", folder / "s.npy", folder / "y.npy", "--search", "nll",
                 "--compat", "focal-calibration")
    assert result.exit_code == 2 and "; drop --compat" in result.stderr


def test_grid_boundary_warning_neutral_in_the_core_flags_in_the_cli(runner, files):
    folder, logits, labels = files
    fit = fit_temperature(logits, labels, grid=("0.1", "0.3", "0.1"))
    assert len(fit.warnings) == 1 and "widen the grid" in fit.warnings[0] and "--" not in fit.warnings[0]
    result = run(runner, "temperature", folder / "s.npy", folder / "y.npy", "--grid", "0.1:0.3:0.1", "-f", "json")
    assert result.exit_code == 0, result.stderr
    hinted = fit.warnings[0].replace("widen the grid (START:STOP:STEP)", "widen --grid START:STOP:STEP")
    assert result.stderr.strip() == f"Warning: {hinted}"
    assert json.loads(result.stdout)["warnings"] == [hinted]  # the JSON says it as the CLI does


def test_bad_grid_names_the_option_in_the_cli(runner, files):
    folder, _, _ = files
    result = run(runner, "temperature", folder / "s.npy", folder / "y.npy", "--grid", "abc")
    assert result.exit_code == 2 and "START:STOP:STEP" in result.stderr and "--grid 0.1:10:0.1" in result.stderr


def test_a_failed_gate_is_shown_as_its_option_in_the_cli_only(runner, files):
    folder, _, _ = files
    [result] = check_gates({"ece": 0.5}, [Gate.parse("ece=0.02", "above")])
    assert result.describe() == "gate failed: ece = 0.5 > 0.02 (ece above 0.02)"
    cli_result = run(runner, "eval", folder / "s.npy", folder / "y.npy", "--fail-above", "ece=0.0001")
    assert cli_result.exit_code == 1
    assert re.search(r"gate failed: ece = \S+ > 0\.0001 \(--fail-above ece=0\.0001\)", cli_result.stderr)


# ------------------------------------------------------------------------------ options defined once
@pytest.mark.parametrize("flag", ['"--probs"', '"--force"', '"-o"', '"--output"', '"--n-bins"', '"--plot"',
                                  '"--temperature"', '"--name"', '"--title"', '"--compat"'])
def test_each_shared_option_is_defined_once(flag):
    places = [p.name for p in (PACKAGE / "cli").glob("*.py") for _ in re.finditer(
        r"click\.option\([^)]*" + re.escape(flag), p.read_text())]
    assert places == ["options.py"], places


# ------------------------------------------------------------------------------ one progress bar
def test_temperature_fit_uses_the_shared_progress_bar(runner, files, monkeypatch):
    from calibrate_cli.cli import render

    used = []

    @contextlib.contextmanager
    def recording(description, *, enabled=True):
        used.append(description)
        yield lambda done, total: used.append((done, total))

    monkeypatch.setattr(render, "progress_bar", recording)
    folder, _, _ = files
    result = run(runner, "temperature", folder / "s.npy", folder / "y.npy", "--grid", "0.5:2:0.5")
    assert result.exit_code == 0, result.stderr
    assert used[0] == "grid search" and len(used) > 1  # the callback reached the core


# ------------------------------------------------------------------------------ one table renderer
def test_render_rows_one_set_of_rows_three_formats():
    from calibrate_cli.cli.render import Column, render_rows, tables_to_text

    columns = [Column("name", justify="left"), Column("a|b"), Column("bar", markdown=False)]
    rows = [["[bold]x[/bold]", Text("1.5", style="red"), "██"], ["y", "", "█"]]
    assert render_rows("markdown", columns, rows, title="T") == (
        "**T**\n\n| name | a\\|b |\n|---|---:|\n| [bold]x[/bold] | 1.5 |\n| y |  |\n"
    )
    assert render_rows("csv", columns, [["x", 1.5, ""]]) == "name,a|b,bar\nx,1.5,\n"
    text = tables_to_text([render_rows("table", columns, rows, title="[T]")])
    assert text.splitlines()[0] == "[T]"  # title and cells shown literally, never as Rich markup
    assert "[bold]x[/bold]" in text and "1.5" in text and "██" in text
    Console(file=io.StringIO()).print(render_rows("table", columns, rows))


def test_compare_and_temperature_csv_numbers_have_15_significant_digits(runner, files):
    from calibrate_cli.bootstrap import compare

    folder, logits, labels = files
    result = run(runner, "compare", folder / "s.npy", folder / "y.npy", folder / "s2.npy", folder / "y.npy",
                 "--bootstrap", "0", "-f", "csv")
    assert result.exit_code == 0, result.stderr
    rows = {r["metric"]: r for r in csv.DictReader(io.StringIO(result.stdout))}
    d = compare(logits, labels, 1.7 * logits, labels, n_resamples=0).differences["ece"]
    assert rows["ece"]["a"] == f"{d.a:.15g}" and rows["ece"]["difference"] == f"{d.difference:.15g}"
    assert rows["ece"]["low"] == "" and rows["ece"]["excludes_zero"] == ""

    result = run(runner, "temperature", folder / "s.npy", folder / "y.npy", "--search", "nll", "-f", "csv")
    rows = {r[0]: r[1:] for r in csv.reader(io.StringIO(result.stdout))}
    fit = fit_temperature(logits, labels, search="nll")
    from calibrate_cli import evaluate

    before = evaluate(logits, labels).metrics["nll"]
    assert rows["nll"][0] == f"{before:.15g}"
    assert rows["temperature"] == ["1.0", repr(fit.temperature)]  # parameters exact (repr)


def test_the_cli_turns_numpy_huge_page_advice_off_unless_asked(runner, monkeypatch):
    """Huge pages cost more to touch than they save on calib's write-once arrays (docs/performance.md);
    NUMPY_MADVISE_HUGEPAGE, when set, is the user's choice and is kept."""
    import numpy as np

    from calibrate_cli.cli import HUGEPAGE_ENV, cli

    switch = np._core.multiarray._set_madvise_hugepage
    monkeypatch.delenv(HUGEPAGE_ENV, raising=False)
    switch(True)
    runner.invoke(cli, ["--version"])
    assert switch(True) is False  # returns the setting it replaces
    monkeypatch.setenv(HUGEPAGE_ENV, "1")
    runner.invoke(cli, ["--version"])
    assert switch(True) is True
