"""Output files of every command (issue 19 items 3 and 5, issue 20 items 2 and 5).

Every output is checked before any work (suffix, folder, name length, existence, two options naming
one file); the format of a report follows its suffix unless --format is given; a file is placed so
that it never replaces one that appeared meanwhile (without --force); --force replaces regular files
only (through a symbolic link, its target); ``-o -`` is stdout; temporaries are recognisable,
removed on SIGTERM/SIGINT and, when a run was killed, by the next run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from calibrate_cli.data import outputs as calib_io
from calibrate_cli.cli import cli
from calibrate_cli.errors import OutputError
from cli_helpers import one_line_error  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"
#: the console script, run by this interpreter (so that PYTHONPATH applies)
CALIB = [sys.executable, "-c", "import sys; sys.argv[0] = 'calib'; from calibrate_cli.cli import main; main()"]


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(0)
    n, k = 300, 4
    logits = rng.normal(size=(n, k)) * 2
    labels = rng.integers(0, k, n)
    logits[np.arange(n), labels] += 1.5
    np.save(tmp_path / "s.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    return tmp_path


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture()
def no_work(monkeypatch):
    """Make loading any input fail loudly: a command that gets there did work before checking."""

    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the outputs were checked")

    import calibrate_cli.cli.options as options
    import calibrate_cli.cli.plot as plot
    import calibrate_cli.cli.temperature as temperature

    for module in (options, plot, temperature):
        for loader in ("load_scores", "read_scores", "load_labels"):  # whichever the module reads with
            if hasattr(module, loader):
                monkeypatch.setattr(module, loader, forbidden)


# ----------------------------------------------------------------- 19.5: checked before any work
def _commands(d):
    s, y = d / "s.npy", d / "y.npy"
    return {
        "eval -o": lambda out: ["eval", s, y, "-o", out],
        "eval --plot": lambda out: ["eval", s, y, "--plot", out],
        "temperature -o": lambda out: ["temperature", s, y, "-o", out],
        "temperature --save-logits": lambda out: ["temperature", s, y, "--save-logits", out],
        "temperature --plot": lambda out: ["temperature", s, y, "--plot", out],
        "plot -o": lambda out: ["plot", s, y, "-o", out],
        "compare -o": lambda out: ["compare", s, y, s, y, "--bootstrap", "0", "-o", out],
    }


def _suffix(which: str) -> str:
    return ".npy" if "save-logits" in which else ".png" if ("plot" in which) else ".json"


COMMANDS = ["eval -o", "eval --plot", "temperature -o", "temperature --save-logits", "temperature --plot",
            "plot -o", "compare -o"]


@pytest.mark.parametrize("which", COMMANDS)
def test_an_existing_output_is_refused_before_any_work(runner, data, no_work, which):
    out = data / f"out{_suffix(which)}"
    out.write_bytes(b"keep")
    one_line_error(run(runner, *_commands(data)[which](out)), str(out), "already exists", "--force")
    assert out.read_bytes() == b"keep"


@pytest.mark.parametrize("which", COMMANDS)
def test_a_missing_folder_is_refused_before_any_work(runner, data, no_work, which):
    out = data / "nowhere" / f"out{_suffix(which)}"
    one_line_error(run(runner, *_commands(data)[which](out)), str(out), "does not exist")


@pytest.mark.parametrize("which", COMMANDS)
def test_a_name_too_long_is_refused_before_any_work(runner, data, no_work, which):
    out = data / ("n" * 300 + _suffix(which))
    one_line_error(run(runner, *_commands(data)[which](out)), "file name too long")


def test_save_logits_suffix_is_checked_before_the_fit(runner, data, monkeypatch):
    import calibrate_cli.cli.temperature as temperature

    def forbidden(*args, **kwargs):
        raise AssertionError("fitted before checking --save-logits")

    monkeypatch.setattr(temperature, "fit_temperature", forbidden)
    result = run(runner, "temperature", data / "s.npy", data / "y.npy", "--save-logits", data / "out.txt")
    one_line_error(result, "out.txt", ".npy")
    assert not (data / "out.txt").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "{s}", "{y}", "--plot", "{d}/same.png", "-o", "{d}/same.png"],
        ["eval", "{s}", "{y}", "--plot", "{d}/same.png", "-o", "{d}/./same.png", "--force"],
        ["temperature", "{s}", "{y}", "--plot", "{d}/same.png", "-o", "{d}/same.png", "--force"],
        ["temperature", "{s}", "{y}", "--save-logits", "{d}/same.npy", "-o", "{d}/same.npy"],
    ],
)
def test_two_outputs_naming_one_file_are_refused_before_any_work(runner, data, no_work, args):
    args = [a.format(s=data / "s.npy", y=data / "y.npy", d=data) for a in args]
    one_line_error(run(runner, *args), "same file")
    assert not (data / "same.png").exists() and not (data / "same.npy").exists()


def test_two_outputs_through_a_link_are_one_file(runner, data, no_work):
    (data / "real.png").write_bytes(b"keep")
    (data / "alias.png").symlink_to(data / "real.png")
    args = ["eval", data / "s.npy", data / "y.npy", "--plot", data / "real.png", "-o", data / "alias.png", "--force"]
    one_line_error(run(runner, *args), "same file")
    assert (data / "real.png").read_bytes() == b"keep"


# ------------------------------------------------------------- 20.2: never replace what appeared
def test_a_file_that_appears_while_the_figure_is_written_is_not_replaced(runner, data, monkeypatch):
    out = data / "race.png"
    from matplotlib.figure import Figure

    real = Figure.savefig

    def savefig_while_another_run_finishes(self, *args, **kwargs):
        out.write_bytes(b"the other run's figure")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig_while_another_run_finishes)
    result = run(runner, "plot", data / "s.npy", data / "y.npy", "-o", out)
    one_line_error(result, str(out), "appeared while calib was working")
    assert out.read_bytes() == b"the other run's figure"
    assert leftovers(data) == []


def test_atomic_write_places_with_a_link_not_a_rename(tmp_path):
    target = tmp_path / "r.bin"

    def slow_write(f):
        target.write_bytes(b"first")  # another process finished first
        f.write(b"second")

    with pytest.raises(OutputError, match="appeared"):
        calib_io.atomic_write(target, slow_write)
    assert target.read_bytes() == b"first" and leftovers(tmp_path) == []
    calib_io.atomic_write(target, slow_write, force=True)  # --force: the last one wins
    assert target.read_bytes() == b"second" and leftovers(tmp_path) == []


def test_two_concurrent_plots_never_both_succeed(data):
    out = data / "race.png"
    args = [*CALIB, "plot", str(data / "s.npy"), str(data / "y.npy"), "-o", str(out)]
    first = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    second = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    codes = sorted([first.wait(timeout=120), second.wait(timeout=120)])
    errors = first.stderr.read() + second.stderr.read()
    assert codes == [0, 2], (codes, errors)
    assert "race.png" in errors and "Traceback" not in errors
    assert out.read_bytes().startswith(PNG) and leftovers(data) == []


# ------------------------------------------------------------------ 20.2: what --force replaces
def test_force_through_a_symlink_replaces_its_target_and_keeps_the_link(runner, data):
    (data / "target.json").write_text("old")
    link = data / "link.json"
    link.symlink_to("target.json")
    assert run(runner, "eval", data / "s.npy", data / "y.npy", "-o", link, "--force").exit_code == 0
    assert link.is_symlink() and os.readlink(link) == "target.json"
    assert json.loads((data / "target.json").read_text())["n"] == 300


@pytest.mark.parametrize("where", ["/proc/self/fd/1", "/dev/stdout"])
def test_force_never_writes_through_a_link_to_a_descriptor(runner, data, no_work, where):
    if not os.path.exists(where):
        pytest.skip(f"no {where} here")
    link = data / "out.txt"
    link.symlink_to(where)
    one_line_error(run(runner, "eval", data / "s.npy", data / "y.npy", "-o", link, "--force"), "-o -")
    assert link.is_symlink() and os.readlink(link) == where


def test_force_never_replaces_a_fifo_or_a_directory(runner, data, no_work):
    fifo = data / "pipe.json"
    os.mkfifo(fifo)
    one_line_error(run(runner, "eval", data / "s.npy", data / "y.npy", "-o", fifo, "--force"), "FIFO")
    assert fifo.is_fifo()
    (data / "d.png").mkdir()
    one_line_error(run(runner, "plot", data / "s.npy", data / "y.npy", "-o", data / "d.png", "--force"), "directory")


def test_a_dangling_symlink_is_refused_even_with_force(runner, data, no_work):
    (data / "gone.json").symlink_to("missing.json")
    one_line_error(run(runner, "eval", data / "s.npy", data / "y.npy", "-o", data / "gone.json", "--force"), "missing")


def test_dash_is_stdout(runner, data, monkeypatch):
    monkeypatch.chdir(data)
    result = run(runner, "eval", "s.npy", "y.npy", "-o", "-", "-f", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["n"] == 300
    temperature = run(runner, "temperature", "s.npy", "y.npy", "-o", "-", "-f", "csv")
    assert temperature.exit_code == 0 and temperature.stdout.startswith("metric,")
    compare = run(runner, "compare", "s.npy", "y.npy", "s.npy", "y.npy", "--bootstrap", "0", "-o", "-")
    assert compare.exit_code == 0 and "B − A" in compare.stdout
    assert not (data / "-").exists()
    one_line_error(run(runner, "plot", "s.npy", "y.npy", "-o", "-"), "figure")
    one_line_error(run(runner, "temperature", "s.npy", "y.npy", "--save-logits", "-"), ".npy")


# --------------------------------------------------------------------- 19.3: format from suffix
@pytest.mark.parametrize("command", ["eval", "compare", "temperature"])
@pytest.mark.parametrize(
    "suffix, check",
    [
        (".json", lambda text: isinstance(json.loads(text), dict)),
        (".csv", lambda text: text.startswith("metric,")),
        (".md", lambda text: "| metric |" in text),
        (".markdown", lambda text: "| metric |" in text),
        (".txt", lambda text: "━" in text),
        (".JSON", lambda text: isinstance(json.loads(text), dict)),
    ],
)
def test_the_report_format_follows_the_suffix(runner, data, command, suffix, check):
    out = data / f"report{suffix}"
    s, y = data / "s.npy", data / "y.npy"
    args = {"eval": [s, y], "compare": [s, y, s, y, "--bootstrap", "0"], "temperature": [s, y]}[command]
    result = run(runner, command, *args, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert check(out.read_text(encoding="utf-8")), out.read_text(encoding="utf-8")[:200]


def test_an_explicit_format_wins_over_the_suffix(runner, data):
    out = data / "m.json"
    assert run(runner, "eval", data / "s.npy", data / "y.npy", "-o", out, "--format", "csv").exit_code == 0
    assert out.read_text().startswith("metric,")


# ------------------------------------------------------------------------- 20.5: temporaries
def test_a_253_byte_output_name_is_written(runner, data):
    out = data / ("m" * 248 + ".json")
    assert len(out.name) == 253
    result = run(runner, "eval", data / "s.npy", data / "y.npy", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text())["n"] == 300 and leftovers(data) == []


@pytest.mark.parametrize("name", ["a" * 255, "é" * 127 + "x.json", "short.png"])
def test_temporary_names_fit_name_max_and_are_recognisable(name):
    tmp = calib_io.temporary_name(name, 4194304)
    assert len(os.fsencode(tmp)) <= 255 and tmp.startswith(".") and tmp.endswith(".calib-tmp-4194304")
    assert tmp == calib_io.temporary_name(name, 4194304)  # deterministic: a later run finds it


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_later_run_removes_stale_temporaries_of_dead_runs(runner, data):
    out = data / "r.png"
    stale = data / calib_io.temporary_name(out.name, _dead_pid())
    stale.write_bytes(b"half a png")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = data / calib_io.temporary_name(out.name, alive.pid)
        live.write_bytes(b"being written")
        other = data / calib_io.temporary_name("other.png", _dead_pid())
        other.write_bytes(b"not ours to judge")
        result = run(runner, "plot", data / "s.npy", data / "y.npy", "-o", out)
        assert result.exit_code == 0, result.stderr
        assert not stale.exists() and live.exists() and other.exists()
    finally:
        alive.kill()
        alive.wait()


def _wait_for_temporary(process, folder, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if leftovers(folder):
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.002)
    return False


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_writing_removes_the_temporary(data, signum, code):
    out = data / "x.png"
    args = [*CALIB, "plot", str(data / "s.npy"), str(data / "y.npy"), "--dpi", "2400", "-o", str(out)]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert _wait_for_temporary(process, data), process.communicate()
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == code, (process.returncode, stderr)
    assert "Traceback" not in stderr and "Aborted" not in stderr
    assert leftovers(data) == [] and not out.exists()


def test_sigkill_leaves_a_recognisable_temporary_that_the_next_run_removes(data):
    out = data / "x.png"
    args = [*CALIB, "plot", str(data / "s.npy"), str(data / "y.npy"), "--dpi", "2400", "-o", str(out)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert _wait_for_temporary(process, data)
    process.kill()
    process.wait()
    assert leftovers(data) == [calib_io.temporary_name("x.png", process.pid)]
    quick = [*CALIB, "plot", str(data / "s.npy"), str(data / "y.npy"), "-o", str(out)]
    again = subprocess.run(quick, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert leftovers(data) == [] and out.read_bytes().startswith(PNG)
