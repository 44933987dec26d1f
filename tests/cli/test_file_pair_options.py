"""``--test SCORES [LABELS]`` and ``--compare SCORES2 [LABELS2]``: one option, one file or two, parsed
through Click's public ``Command.parse_args`` (calibrate_cli/cli/options.py: FilePairCommand)."""

from __future__ import annotations

import json

import click
import pytest

from calibrate_cli.cli.options import FilePairCommand, ScoresThenLabels


@click.command(cls=FilePairCommand)
@click.argument("files", nargs=-1)
@click.option("--test", cls=ScoresThenLabels, default=None)
@click.option("--compare", cls=ScoresThenLabels, multiple=True)
@click.option("--probs", is_flag=True)
@click.option("--labels", default=None)
def show(files, test, compare, probs, labels):
    click.echo(json.dumps({"files": files, "test": test, "compare": compare, "probs": probs, "labels": labels}))


@pytest.mark.parametrize("words,expected", [
    (["a", "b", "--test", "t", "ty"], {"files": ["a", "b"], "test": ["t", "ty"]}),
    (["--test", "t", "ty", "a", "b"], {"files": ["a", "b"], "test": ["t", "ty"]}),  # the next word is LABELS
    (["a", "--test", "t", "--probs"], {"files": ["a"], "test": ["t"], "probs": True}),
    (["a", "--test=t", "ty"], {"files": ["a"], "test": ["t", "ty"]}),
    (["a", "--test", "t", "--", "b"], {"files": ["a", "b"], "test": ["t"]}),
    (["--test", "t", "-"], {"test": ["t"], "files": ["-"]}),  # "-" (stdin) is never taken as LABELS
    (["a", "--compare", "c", "cy", "--compare", "d", "--compare", "e", "ey"],
     {"files": ["a"], "compare": [["c", "cy"], ["d"], ["e", "ey"]]}),
    (["a", "--labels", "--test"], {"files": ["a"], "labels": "--test"}),  # a value, not the option
    (["--labels", "--test", "a", "b"], {"files": ["a", "b"], "labels": "--test"}),
])
def test_one_file_or_two(runner, words, expected):
    result = runner.invoke(show, words)
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    want = {"files": [], "test": None, "compare": [], "probs": False, "labels": None, **expected}
    assert got == want


def test_a_missing_value_is_clicks_usage_error(runner):
    result = runner.invoke(show, ["a", "--test"])
    assert result.exit_code == 2 and "--test" in result.stderr
