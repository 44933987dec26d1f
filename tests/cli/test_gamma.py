"""``calib gamma`` (γ*(p0) of Proposition 2) through Click's CliRunner, and the core function against
a bisection of g(p0, γ) = 1 (tests/naive_losses.py: no Lambert W) and the reference's get_gamma."""

from __future__ import annotations

import json
import math

import pytest

import naive_losses as naive
from calibrate_cli.cli import cli
from calibrate_cli.errors import InputError
from calibrate_cli.training.focal_gamma import focal_gamma


def test_paper_values():
    assert round(focal_gamma(0.2), 4) == 4.8506
    assert round(focal_gamma(0.25), 4) == 3.0702
    assert focal_gamma(0.5) == 0.0
    assert focal_gamma(0.9) == 0.0


@pytest.mark.parametrize("p0", [1e-6, 0.01, 0.05, 0.1, 0.2, 0.25, 0.3, 0.4, 0.45, 0.49, 0.499])
def test_equals_bisection_of_the_gradient_factor(p0):
    gamma = focal_gamma(p0)
    assert gamma == pytest.approx(naive.gamma_star(p0), rel=1e-9)
    # and it is where the focal gradient factor comes back to 1
    g = (1 - p0) ** gamma - gamma * p0 * math.log(p0) * (1 - p0) ** (gamma - 1)
    assert g == pytest.approx(1.0, abs=1e-9)


#: γ*(p0) of the closed form evaluated with mpmath at 50 digits (for the double nearest each p0)
MPMATH = {
    0.05: 37.844779351004207, 0.3: 1.9571698066385569, 0.45: 0.29265708346602443,
    0.499: 0.0051226555481178183, 0.4999: 0.00051107152793880258, 0.49999: 5.1095238703970921e-5,
    0.499999: 5.1094047554785215e-6, 0.4999999: 5.1093928445456482e-7,
}


@pytest.mark.parametrize("p0", sorted(MPMATH))
def test_high_precision_values_up_to_the_branch_point(p0):
    """Near p0 = 0.5 Lambert W's argument nears its branch point and SciPy's W₋₁ loses digits (a
    factor 2 at 0.49999 before the Newton polish): every value to 1e-12 relative."""
    assert focal_gamma(p0) == pytest.approx(MPMATH[p0], rel=1e-12)


def test_continuous_to_zero_at_one_half():
    assert 0 <= focal_gamma(math.nextafter(0.5, 0)) < 1e-14


def test_reference_get_gamma():
    pytest.importorskip("torch")  # the reference module imports torch
    from reference_losses.focal_calibration import get_gamma

    for p0 in (0.1, 0.2, 0.25, 0.4):
        # the reference adds 1e-12 to W's argument: a difference far below the printed digits
        assert focal_gamma(p0) == pytest.approx(get_gamma(p0), abs=1e-6)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5, float("nan"), float("inf"), "x"])
def test_out_of_range_is_an_input_error(bad):
    with pytest.raises(InputError, match="p0 must be"):
        focal_gamma(bad)


def test_cli_table(runner):
    result = runner.invoke(cli, ["gamma", "0.2", "0.25", "0.5"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any("0.2" in line and "4.8506" in line for line in lines)
    assert any("0.25" in line and "3.0702" in line for line in lines)
    assert any("0.5" in line and "0.0000" in line for line in lines)


def test_cli_json_equals_library(runner):
    result = runner.invoke(cli, ["gamma", "0.2", "0.3", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["command"] == "gamma"
    assert doc["gammas"] == [{"p0": 0.2, "gamma": focal_gamma(0.2)}, {"p0": 0.3, "gamma": focal_gamma(0.3)}]


def test_cli_csv_and_markdown(runner):
    result = runner.invoke(cli, ["gamma", "0.25", "-f", "csv"])
    assert result.stdout.splitlines() == ["p0,gamma", f"0.25,{focal_gamma(0.25):.15g}"]
    result = runner.invoke(cli, ["gamma", "0.25", "-f", "markdown"])
    assert "| 0.25 | 3.0702 |" in result.stdout


def test_cli_writes_a_file_and_refuses_to_overwrite(runner, tmp_path):
    out = tmp_path / "g.json"
    assert runner.invoke(cli, ["gamma", "0.2", "-o", str(out)]).exit_code == 0
    assert json.loads(out.read_text())["gammas"][0]["p0"] == 0.2
    result = runner.invoke(cli, ["gamma", "0.2", "-o", str(out)])
    assert result.exit_code == 2 and "exists" in result.stderr


@pytest.mark.parametrize("arg, shown", [("1.5", "1.5"), ("-0.1", "-0.1"), ("0", "0.0"), ("nan", "nan")])
def test_cli_out_of_range_is_one_line_exit_2(runner, arg, shown):
    result = runner.invoke(cli, ["gamma", "0.2", arg])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: p0 must be in (0, 1), got {shown}"
    assert result.stdout == ""


def test_cli_needs_a_p0(runner):
    result = runner.invoke(cli, ["gamma"])
    assert result.exit_code == 2 and "Missing argument" in result.stderr
