"""``calib train``: the digits demo end to end (read back by calib eval and calib temperature),
resume through the command, one-line errors with exit 2, and torch kept out of the other commands."""

import json
import subprocess
import sys

import numpy as np
import pytest

from calibrate_cli.cli import cli
from cli_helpers import after_eval_in_a_fresh_interpreter  # noqa: E402


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


@pytest.fixture
def train_env(monkeypatch):
    """torch and scikit-learn present; one torch thread (a busy 2-core CI machine)."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    monkeypatch.setenv("CALIB_THREADS", "1")


def test_digits_demo_trains_and_is_read_by_eval_and_temperature(runner, train_env, tmp_path):
    out = tmp_path / "D"
    result = run(runner, "train", "--loss", "ce", "--data", "digits", "--epochs", "5", "--device", "cpu", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert "epoch 5/5" in result.stderr and "Post T" in result.stdout
    logits, labels = np.load(out / "test_logits.npy"), np.load(out / "test_labels.npy")
    accuracy = float(np.mean(logits.argmax(axis=1) == labels))  # numpy, not calib
    assert accuracy > 0.8 and len(labels) == 449
    assert len((out / "history.csv").read_text().splitlines()) == 6
    ev = run(runner, "eval", out / "test_logits.npy", out / "test_labels.npy", "--format", "json")
    assert ev.exit_code == 0, ev.stderr
    assert json.loads(ev.stdout)["metrics"]["accuracy"] == pytest.approx(accuracy)
    t = run(runner, "temperature", out / "val_logits.npy", out / "val_labels.npy",
            "--test", out / "test_logits.npy", out / "test_labels.npy", "--format", "json")
    assert t.exit_code == 0, t.stderr
    # the summary's temperature is calib temperature's (the paper's grid by ECE on the validation set)
    assert json.loads(t.stdout)["temperature"] == json.loads((out / "summary.json").read_text())["temperature"]
    table = run(runner, "table", out, "--format", "csv")  # a run folder is one model of calib table
    assert table.exit_code == 0, table.stderr
    assert out.name in table.stdout


@pytest.mark.parametrize("loss", ["flsd53", "adafocal"])
def test_digits_demo_with_the_papers_losses(runner, train_env, tmp_path, loss):
    out = tmp_path / loss
    result = run(runner, "train", "--loss", loss, "--data", "digits", "--epochs", "5", "--device", "cpu", "--out", out)
    assert result.exit_code == 0, result.stderr
    logits, labels = np.load(out / "test_logits.npy"), np.load(out / "test_labels.npy")
    assert float(np.mean(logits.argmax(axis=1) == labels)) > 0.8
    assert run(runner, "eval", out / "test_logits.npy", out / "test_labels.npy").exit_code == 0


def test_loss_parameters_reach_the_loss(runner, train_env, tmp_path):
    result = run(runner, "train", "--loss", "ce", "--gamma", "2", "--data", "digits", "--out", tmp_path / "o")
    assert result.exit_code == 2 and "takes no parameters; got gamma" in result.stderr


def test_resume_through_the_command(runner, train_env, tmp_path):
    out = tmp_path / "R"
    first = run(runner, "train", "--loss", "ce", "--data", "digits", "--recipe", "fast", "--epochs", "2", "--out", out)
    assert first.exit_code == 0, first.stderr
    again = run(runner, "train", "--loss", "ce", "--data", "digits", "--epochs", "2", "--recipe", "fast", "--out", out)
    assert again.exit_code == 2
    assert again.stderr.strip().count("\n") == 0
    assert "not empty" in again.stderr and "--resume" in again.stderr and "--force" in again.stderr
    resumed = run(runner, "train", "--out", out, "--resume")  # the settings come from the run folder
    assert resumed.exit_code == 0, resumed.stderr
    assert "epoch" not in resumed.stderr  # nothing left to train: the outputs are written again
    other = run(runner, "train", "--out", out, "--resume", "--epochs", "9")
    assert other.exit_code == 2 and "started with epochs 2, not 9" in other.stderr


@pytest.mark.parametrize("args, message", [
    (["--loss", "ce", "--data", "mnist"], "unknown data source 'mnist'"),
    (["--loss", "ce", "--data", "imagefolder:{tmp}/nowhere"], "nowhere: no such folder"),
    (["--loss", "ce", "--data", "digits", "--model", "resnet9"], "unknown model 'resnet9'"),
    (["--loss", "ce", "--data", "digits", "--amp", "--device", "cpu"], "needs a CUDA device"),
    (["--data", "digits"], "give --loss"),
    (["--loss", "ce", "--data", "digits", "--val-size", "2.5"], "--val-size"),
    (["--loss", "ce", "--data", "digits", "--epochs", "0"], "--epochs"),
])
def test_bad_options_are_one_line_exit_2(runner, train_env, tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = run(runner, "train", *args, "--out", tmp_path / "o")
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_broken_image_folder_names_the_file(runner, train_env, tmp_path):
    from PIL import Image

    for split in ("train", "test"):
        for c in ("a", "b"):
            (tmp_path / "d" / split / c).mkdir(parents=True)
            Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(tmp_path / "d" / split / c / "0.png")
    (tmp_path / "d" / "train" / "b" / "1.jpg").write_bytes(b"\xff\xd8 truncated")
    result = run(runner, "train", "--loss", "ce", "--data", f"imagefolder:{tmp_path / 'd'}", "--out", tmp_path / "o")
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ") and result.stderr.strip().count("\n") == 0
    assert "1.jpg: not an image" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--seed", "-1"], "the seed must be a whole number from 0 to 2**64"),          # before: exit 3, ValueError
    (["--seed", str(2**64)], "the seed must be a whole number from 0 to 2**64"),
    (["--lr", "1e308"], "the learning rate must be at most 3.403e+38"),             # before: exit 3, RuntimeError
])
def test_seeds_and_learning_rates_out_of_range_are_refused_before_the_run_folder(runner, train_env, tmp_path,
                                                                                  args, message):
    result = run(runner, "train", "--loss", "ce", "--data", "digits", "--epochs", "1", *args, "--out", tmp_path / "o")
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stderr.strip().count("\n") == 0, result.stderr
    assert not (tmp_path / "o").exists()  # before: an empty (or config.json-only) run folder was left


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width × height grey pixels (Pillow checks the size when it opens it)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) + chunk(b"IEND", b"")


def test_a_decompression_bomb_in_an_image_folder_names_the_file(runner, train_env, tmp_path):
    pytest.importorskip("PIL")
    from PIL import Image

    for split in ("train", "test"):
        for c in ("a", "b"):
            (tmp_path / "d" / split / c).mkdir(parents=True)
            Image.fromarray(np.zeros((4, 4), dtype=np.uint8)).save(tmp_path / "d" / split / c / "0.png")
    (tmp_path / "d" / "train" / "b" / "bomb.png").write_bytes(_png_header(20_000, 20_000))
    result = run(runner, "train", "--loss", "ce", "--data", f"imagefolder:{tmp_path / 'd'}", "--out", tmp_path / "o")
    assert result.exit_code == 2, result.stderr  # before: exit 3, "DecompressionBombError"
    assert "bomb.png: an image of more than" in result.stderr and result.stderr.strip().count("\n") == 0


def test_a_huge_training_label_is_refused_naming_the_file(runner, train_env, tmp_path):
    rng = np.random.default_rng(0)
    y_train = np.array([0, 1] * 10)
    y_train[7] = 2**40  # would make a 2**40-class output layer
    np.savez(tmp_path / "d.npz", x_train=rng.normal(size=(20, 4)).astype(np.float32), y_train=y_train,
             x_test=rng.normal(size=(6, 4)).astype(np.float32), y_test=np.array([0, 1] * 3))
    result = run(runner, "train", "--loss", "ce", "--data", f"npz:{tmp_path / 'd.npz'}", "--out", tmp_path / "o")
    assert result.exit_code == 2, result.stderr
    assert "d.npz: y_train holds the label 1099511627776 (row 7)" in result.stderr and "at most 100000" in result.stderr


def test_without_torch_one_line_with_the_install_command(runner, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch → ImportError
    result = run(runner, "train", "--loss", "ce", "--data", "digits", "--out", tmp_path / "o")
    assert result.exit_code == 2
    assert "pip install torch==2.13.0" in result.stderr and result.stderr.strip().count("\n") == 0


def test_model_names_of_the_shell_are_the_rooms():
    pytest.importorskip("torch")
    from calibrate_cli.cli import train as shell
    from calibrate_cli.training import MODEL_NAMES, RECIPES

    assert shell.MODEL_NAMES == MODEL_NAMES and shell.RECIPES == RECIPES


def test_eval_never_imports_the_training_room(tmp_path):
    expression = "sorted(m for m in imported if m.startswith('calibrate_cli.training') or m == 'torch')"
    assert after_eval_in_a_fresh_interpreter(tmp_path, expression) == "[]"


def test_a_real_sigkill_mid_run_resumes_to_a_complete_run_folder(train_env, tmp_path):
    """The installed command, killed with SIGKILL (no cleanup, no exception) while it trains, then
    `--resume`: the atomically written checkpoint is whole, the run finishes, every epoch is in the
    history exactly once, and no temporary is left behind."""
    import os
    import shutil
    import signal
    import time

    calib = shutil.which("calib")
    if calib is None:
        pytest.skip("the calib command is not installed")
    out, epochs = tmp_path / "K", 60
    env = {**os.environ, "CALIB_THREADS": "1"}
    args = [calib, "train", "--loss", "ce", "--data", "digits", "--device", "cpu", "--epochs", str(epochs),
            "--out", str(out)]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    history = out / "history.csv"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if history.exists() and len(history.read_text().splitlines()) > 3:  # ≥ 3 epochs checkpointed
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the run ended before it could be killed (make it longer)"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "summary.json").exists()  # it really stopped before the end
    done_before = len(history.read_text().splitlines()) - 1
    assert 3 <= done_before < epochs
    resumed = subprocess.run([calib, "train", "--out", str(out), "--resume"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    rows = history.read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == list(range(1, epochs + 1))
    assert json.loads((out / "summary.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == sorted([
        "checkpoint.pt", "config.json", "history.csv", "summary.json",
        "test_labels.npy", "test_logits.npy", "val_labels.npy", "val_logits.npy",
    ])
