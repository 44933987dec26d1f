"""Shared fixtures. The tests mirror the package: tests/cli/ for the commands, tests/bootstrap/ for
calibrate_cli/bootstrap/, the rest beside the module they test. pytest imports test modules by path
(``--import-mode=importlib`` in pyproject.toml: cli/test_temperature.py and test_temperature.py can
coexist), so tests/ is put on sys.path here for the shared helpers (``from naive_reference import ...``)."""

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


@pytest.fixture
def runner():
    """A click CliRunner that keeps stderr apart from stdout (`result.stderr`)."""
    from click.testing import CliRunner

    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # click ≥ 8.2 keeps stderr apart by default
        return CliRunner()


@pytest.fixture()
def no_whole_widening(monkeypatch):
    """Make the bfloat16 row reader refuse to be widened whole (np.asarray, astype): what a pass that
    reads it a row chunk at a time must never ask."""
    from calibrate_cli.data.arrays import BFloat16Rows

    def whole(self, *args, **kwargs):
        raise AssertionError(f"{self!r} widened whole")

    monkeypatch.setattr(BFloat16Rows, "__array__", whole)
    monkeypatch.setattr(BFloat16Rows, "astype", whole)
