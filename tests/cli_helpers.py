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


def after_eval_in_a_fresh_interpreter(tmp_path, expression: str, *args: str) -> str:
    """The value of ``expression`` (printed in a fresh Python) after ``calib eval`` of a 3 × 3 set with
    ``args``: what a command imports, without the test's imports. ``expression`` sees ``imported``,
    the set of modules that calib's import and the command added to ``sys.modules``. Modules the
    interpreter loaded before (a site-packages ``.pth`` file may import certifi, and with it zipfile)
    are not calib's doing and are left out."""
    import subprocess
    import sys

    import numpy as np

    np.save(tmp_path / "s.npy", 2 * np.eye(3))  # logits (np.eye(3) would look like probabilities)
    np.save(tmp_path / "y.npy", np.arange(3))
    argv = ["eval", str(tmp_path / "s.npy"), str(tmp_path / "y.npy"), *args]
    code = (
        "import sys; started_with = set(sys.modules)\n"
        "from calibrate_cli.cli import cli\n"
        f"try: cli({argv!r})\n"
        "except SystemExit: pass\n"
        "imported = set(sys.modules) - started_with\n"
        f"print('VALUE', {expression})"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1].removeprefix("VALUE ")
