"""Helpers shared by the tests of calib's commands (tests/ is on sys.path: see tests/conftest.py)."""


def one_line_error(result, *fragments, absent=()) -> str:
    """Assert that a CliRunner ``result`` is calib's bad-input error: exit code 2, exactly one non-empty
    line on stderr, starting with "Error:", no traceback anywhere, holding every one of ``fragments``
    and none of ``absent``. Returns the line."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr  # nothing printed before or after the error
    assert lines[0].startswith("Error:"), lines[0]
    assert "Traceback" not in result.output and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    for fragment in absent:
        assert fragment not in lines[0], lines[0]
    return lines[0]
