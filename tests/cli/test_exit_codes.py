"""The exit-code contract (issue 20 item 3; docs/cli-contract.md).

0 ok, 1 a gate failed, 2 bad input or usage (one line naming the problem), 3 a bug in calib,
130 Ctrl-C, 141 the reader of stdout went away (quietly), 143 SIGTERM. User text (file names,
--title, --name) reaches Rich and matplotlib escaped. Signals, pipes and encodings run the real
console script in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from calibrate_cli.cli import cli

CALIB = [sys.executable, "-c", "import sys; sys.argv[0] = 'calib'; from calibrate_cli.cli import main; main()"]


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(1)
    n, k = 200, 3
    logits = rng.normal(size=(n, k)) * 2
    labels = rng.integers(0, k, n)
    np.save(tmp_path / "s.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    return tmp_path


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


def calib(*args, **kwargs):
    kwargs.setdefault("capture_output", True)
    return subprocess.run([*CALIB, *map(str, args)], timeout=120, **kwargs)


def one_line(stderr: str, code_result, code: int):
    text = stderr.strip()
    assert code_result == code, (code_result, stderr)
    assert text.count("\n") == 0 and text.startswith("Error: ") and "Traceback" not in text, stderr
    return text


# ----------------------------------------------------------------------------- bugs: exit 3
def test_an_unexpected_exception_exits_3_never_1(runner, data, monkeypatch):
    import calibrate_cli.cli.eval as eval_module

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug\nover two lines")

    monkeypatch.setattr(eval_module, "evaluate", broken)
    result = run(runner, "eval", data / "s.npy", data / "y.npy")
    text = one_line(result.stderr, result.exit_code, 3)
    assert "internal error: ZeroDivisionError: a bug over two lines" in text and "CALIB_DEBUG=1" in text


# ------------------------------------------------------------------- bad input/usage: exit 2
def test_an_absurd_number_of_bins_is_a_usage_error(runner, data):
    for command in (["eval", data / "s.npy", data / "y.npy"], ["plot", data / "s.npy", data / "y.npy", "-o", data / "p.png"]):
        result = run(runner, *command, "--n-bins", "99999999999999999999999")
        assert result.exit_code == 2 and "--n-bins" in result.stderr and "internal error" not in result.stderr


def test_a_grid_with_too_many_values_for_decimal_is_exit_2(runner, data):
    result = run(runner, "temperature", data / "s.npy", data / "y.npy", "--grid", "1e-300:1:1e-305")
    text = one_line(result.stderr, result.exit_code, 2)
    assert "1e-300:1:1e-305" in text and "internal error" not in text


# ---------------------------------------------------------------- user text is shown literally
@pytest.mark.parametrize("name", ["mk[/x].npy", "[bold]b.npy", "[red]r[/red].npy"])
def test_rich_markup_in_a_file_name_is_shown_literally(runner, data, name):
    (data / name).parent.mkdir(exist_ok=True)  # "mk[/x].npy" is x].npy in the folder mk[
    shutil.copy(data / "s.npy", data / name)
    result = run(runner, "eval", data / name, data / "y.npy")
    assert result.exit_code == 0, result.stderr
    assert name in result.stdout
    compare = run(runner, "compare", data / name, data / "y.npy", data / "s.npy", data / "y.npy", "--bootstrap", "0")
    assert compare.exit_code == 0 and name in compare.stdout


def test_rich_markup_in_a_saved_file_name_is_shown_literally(runner, data):
    out = data / "[bold]t.npy"
    result = run(runner, "temperature", data / "s.npy", data / "y.npy", "--save-logits", out)
    assert result.exit_code == 0, result.stderr
    assert "[bold]t.npy" in result.stderr


@pytest.mark.parametrize("name", ["tex$\\foo$.npy", "$a$b$.npy", "cost$5.npy"])
def test_mathtext_in_a_file_name_is_drawn_literally(runner, data, name):
    shutil.copy(data / "s.npy", data / name)
    assert run(runner, "plot", data / name, data / "y.npy", "-o", data / "a.png").exit_code == 0
    assert run(runner, "eval", data / name, data / "y.npy", "--plot", data / "b.png").exit_code == 0
    result = run(runner, "temperature", data / name, data / "y.npy", "--plot", data / "c.svg")
    assert result.exit_code == 0, result.stderr
    assert "\\foo" in (data / "c.svg").read_text() or "\\foo" not in name


def test_mathtext_in_title_and_names_is_drawn_literally(runner, data):
    args = ["plot", data / "s.npy", data / "y.npy", "--compare", data / "s.npy", data / "y.npy"]
    result = run(runner, *args, "--title", "T$\\foo$", "--name", "a$\\bar$", "--name", "$x", "-o", data / "t.png")
    assert result.exit_code == 0, result.stderr
    result = run(runner, *args[:3], "--classwise", "--title", "$\\frac{$", "-o", data / "c.png")
    assert result.exit_code == 0, result.stderr


def test_mathtext_escaping_keeps_the_text():
    from calibrate_cli.plots.diagram import escape_mathtext
    from matplotlib.figure import Figure

    fig = Figure()
    text = fig.text(0, 0, escape_mathtext("tex$\\foo$.npy"))
    fig.canvas.draw()  # would raise ParseFatalException unescaped
    assert text.get_text() == "tex\\$\\foo\\$.npy"


# ------------------------------------------------------------------ encodings, pipes, streams
def test_an_ascii_terminal_gets_the_report(data):
    result = calib("eval", data / "s.npy", data / "y.npy", env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0, result.stderr
    assert b"ECE" in result.stdout and b"Traceback" not in result.stderr
    result.stdout.decode("ascii")  # nothing the terminal cannot show


def test_a_closed_pipe_ends_quietly_with_141(data):
    process = subprocess.Popen(
        [*CALIB, "eval", str(data / "s.npy"), str(data / "y.npy")], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.close()  # `| head -c 0`: the reader is gone before calib writes
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 141, stderr
    assert stderr == b""


def test_help_into_a_closed_pipe_ends_quietly_with_141():
    process = subprocess.Popen([*CALIB, "eval", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 141 and stderr == b""


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_closed_stdout_is_exit_2(data, fmt):
    result = calib("eval", data / "s.npy", data / "y.npy", "-f", fmt, preexec_fn=lambda: os.close(1))
    text = one_line(result.stderr.decode(), result.returncode, 2)
    assert "standard output" in text


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_stdout_on_a_full_disk_is_exit_2(data, fmt):
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [*CALIB, "eval", str(data / "s.npy"), str(data / "y.npy"), "-f", fmt],
            stdout=full, stderr=subprocess.PIPE, timeout=120, text=True,
        )
    text = one_line(result.stderr, result.returncode, 2)
    assert "standard output" in text and "No space left" in text


def test_a_gate_failure_is_still_1(runner, data):
    result = run(runner, "eval", data / "s.npy", data / "y.npy", "--fail-above", "ece=0.0001", "-f", "json")
    assert result.exit_code == 1 and json.loads(result.stdout)["gates"][0]["passed"] is False


# ------------------------------------------------------------ issue 32: exit codes and messages
@pytest.mark.parametrize("level", ["nan", "1e-300"])
def test_a_ci_level_of_nan_or_too_small_is_a_usage_error(runner, data, level):
    result = run(runner, "eval", data / "s.npy", data / "y.npy", "--bootstrap", "100", "--ci-level", level)
    assert result.exit_code == 2, (result.exit_code, result.stderr)  # before: 3 (ValueError, ZeroDivisionError)
    assert "--ci-level" in result.stderr and "internal error" not in result.stderr


def test_calib_debug_shows_the_traceback_but_keeps_exit_2(runner, data):
    result = runner.invoke(cli, ["eval", str(data / "s.npy"), str(data / "missing.npy")], env={"CALIB_DEBUG": "1"})
    assert result.exit_code == 2, (result.exit_code, result.stderr)  # before: 1, as if a gate had failed
    assert "Traceback" in result.stderr and "missing.npy: no such file" in result.stderr.splitlines()[-1]


def test_calib_debug_keeps_exit_3_for_a_bug(runner, data, monkeypatch):
    import calibrate_cli.cli.eval as eval_module

    monkeypatch.setattr(eval_module, "evaluate", lambda *a, **k: 1 / 0)
    result = runner.invoke(cli, ["eval", str(data / "s.npy"), str(data / "y.npy")], env={"CALIB_DEBUG": "1"})
    assert result.exit_code == 3 and "ZeroDivisionError" in result.stderr  # before: 1


def test_an_output_name_ending_in_a_slash_is_refused(runner, data):
    result = run(runner, "eval", data / "s.npy", data / "y.npy", "-o", f"{data / 'x.json'}/")
    assert result.exit_code == 2 and "trailing '/'" in result.stderr, result.stderr  # before: 0, wrote x.json
    assert not (data / "x.json").exists()


def test_a_thread_that_cannot_start_is_exit_2(runner, data, monkeypatch):
    import threading

    def refuse(self):
        raise RuntimeError("can't start new thread")  # what a tight `ulimit -v` gives

    monkeypatch.setattr(threading.Thread, "start", refuse)
    monkeypatch.setenv("CALIB_THREADS", "2")
    result = run(runner, "eval", data / "s.npy", data / "y.npy", "--bootstrap", "200")
    text = one_line(result.stderr, result.exit_code, 2)  # before: 3, "internal error: RuntimeError"
    assert "cannot start a thread" in text and "ulimit" in text


def test_out_of_memory_names_the_inputs(runner, data, monkeypatch):
    import calibrate_cli.cli.eval as eval_module

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(eval_module, "evaluate", exhausted)
    result = run(runner, "eval", data / "s.npy", data / "y.npy")
    text = one_line(result.stderr, result.exit_code, 2)
    assert "out of memory" in text and "s.npy" in text and "y.npy" in text  # before: no file named


def test_an_ascii_terminal_gets_an_ascii_error_line(data):
    result = calib("eval", data / "s.npy", data / "nonexistent_é−.npy", env={**os.environ, "PYTHONIOENCODING": "ascii"})
    text = one_line(result.stderr.decode("ascii"), result.returncode, 2)  # before: raw UTF-8 bytes
    assert "nonexistent_??.npy: no such file" in text
    usage = calib("eval", data / "s.npy", data / "y.npy", "--n-bins", "١٥", env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert usage.returncode == 2 and "'??' is not a whole number" in usage.stderr.decode("ascii")


#: Ctrl-C while `calib` imports its modules (its first 50-150 ms): SIGINT arrives during the import
#: of calibrate_cli.engine.binning, the package's first heavy import (numpy)
INTERRUPTED_WHILE_IMPORTING = """
import os, signal, sys
sys.argv[0] = "calib"

class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "calibrate_cli.engine.binning":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupt())
from calibrate_cli.cli import main
main()
"""


def _sigint_as_a_terminal_sends_it():
    """In the child: SIGINT's default action, as in a shell's foreground job (a background job of a
    script inherits SIGINT ignored, and calib then rightly leaves it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_while_importing_exits_130_quietly(data):
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_WHILE_IMPORTING, "eval", str(data / "s.npy")],
                          capture_output=True, text=True, timeout=120, preexec_fn=_sigint_as_a_terminal_sends_it)
    assert done.returncode == 130 and done.stderr == "", (done.returncode, done.stderr)  # before: a traceback
    debug = subprocess.run([sys.executable, "-c", INTERRUPTED_WHILE_IMPORTING, "eval", str(data / "s.npy")],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "CALIB_DEBUG": "1"},
                           preexec_fn=_sigint_as_a_terminal_sends_it)
    assert "KeyboardInterrupt" in debug.stderr  # CALIB_DEBUG keeps Python's traceback
