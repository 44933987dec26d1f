"""Gate thresholds are checked against the metric's range in the registry (issue 19, item 7)."""

from __future__ import annotations

import numpy as np
import pytest

from calibrate_cli.cli import cli
from calibrate_cli.errors import InputError
from calibrate_cli.metrics.gates import Gate
from calibrate_cli.metrics.registry import METRIC_NAMES


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 7, 200)
    logits = rng.normal(size=(200, 7))
    logits[np.arange(200), labels] += 2.0
    np.save(tmp_path / "logits.npy", logits)
    np.save(tmp_path / "labels.npy", labels)
    return [str(tmp_path / "logits.npy"), str(tmp_path / "labels.npy")]


def _one_line_error(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error:")
    return lines[0]


@pytest.mark.parametrize(
    "option, gate, fragments",
    [
        ("--fail-above", "ece=2", ["ece is a fraction in [0, 1]", "ece=2%"]),  # meant 2 %
        ("--fail-above", "ECE=150%", ["ece is a fraction in [0, 1]", "150%"]),
        ("--fail-below", "accuracy=90", ["accuracy is a fraction in [0, 1]", "accuracy=90%"]),
        ("--fail-above", "ece=-0.01", ["ece is a fraction in [0, 1]"]),
        ("--fail-above", "nll=5%", ["nll is not a fraction", "nll=0.05"]),
        ("--fail-above", "brier=2%", ["brier is not a fraction"]),
        ("--fail-above", "brier=3", ["brier lies in [0, 2]"]),
        ("--fail-above", "nll=-1", ["nll lies in [0, inf)"]),
    ],
)
def test_threshold_outside_the_metric_range_is_one_line_exit_2(runner, files, option, gate, fragments):
    line = _one_line_error(runner.invoke(cli, ["eval", *files, option, gate]))
    assert f"gate '{gate}'" in line
    for fragment in fragments:
        assert fragment in line, line


@pytest.mark.parametrize(
    "option, gate",
    [
        ("--fail-above", "ece=0"),
        ("--fail-above", "ece=1"),
        ("--fail-above", "ece=2%"),
        ("--fail-above", "ece=100%"),
        ("--fail-below", "accuracy=1"),
        ("--fail-above", "brier=2"),
        ("--fail-above", "nll=7.5"),
        ("--fail-above", "nll=inf"),  # fails only on an infinite NLL
    ],
)
def test_thresholds_in_range_are_accepted(runner, files, option, gate):
    result = runner.invoke(cli, ["eval", *files, option, gate])
    assert result.exit_code in (0, 1), result.stderr
    assert "Error" not in result.stderr


def test_the_percent_threshold_is_the_fraction(runner, files):
    assert Gate.parse("ece=2%", "above").threshold == pytest.approx(0.02, abs=1e-17)
    assert Gate.parse("brier=1.5", "above").threshold == 1.5


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_every_registry_metric_can_be_gated_and_has_a_range(name):
    gate = Gate.parse(f"{name.upper().replace('_', '-')}=0.5", "below")
    assert gate.metric == name and gate.threshold == 0.5
    with pytest.raises(InputError, match="range"):
        Gate.parse(f"{name}=-1", "above")
