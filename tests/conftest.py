# Its presence (with no tests/__init__.py) makes pytest's default "prepend" import mode put tests/ on
# sys.path, so test modules can `from naive_reference import ...`.

import pytest


@pytest.fixture
def runner():
    """A click CliRunner that keeps stderr apart from stdout (`result.stderr`)."""
    from click.testing import CliRunner

    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # click ≥ 8.2 keeps stderr apart by default
        return CliRunner()
