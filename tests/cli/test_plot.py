"""``calib plot`` and ``calib eval --plot`` through Click's CliRunner."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrate_cli.cli import cli
from cli_helpers import one_line_error  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(0)
    n, k = 400, 4
    logits = rng.normal(size=(n, k)) * 3
    labels = rng.integers(0, k, n)
    logits[np.arange(n), labels] += 2.0
    np.save(tmp_path / "model_a.npy", logits)
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "model_b.npy", logits * 0.5)
    return tmp_path


def run(runner, args):
    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize("ext,magic", [("png", PNG), ("pdf", b"%PDF-"), ("svg", b"<?xml")])
def test_plot_writes_each_format(runner, data, ext, magic):
    out = data / f"fig.{ext}"
    result = run(runner, ["plot", data / "model_a.npy", data / "labels.npy", "-o", out])
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes().startswith(magic)
    assert str(out) in result.stderr


def test_force_rule(runner, data):
    out = data / "fig.png"
    out.write_bytes(b"keep me")
    result = run(runner, ["plot", data / "model_a.npy", data / "labels.npy", "-o", out])
    one_line_error(result, str(out), "already exists", "--force")
    assert out.read_bytes() == b"keep me"
    result = run(runner, ["plot", data / "model_a.npy", data / "labels.npy", "-o", out, "--force"])
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes().startswith(PNG)


def test_errors_are_one_line_exit_2(runner, data):
    a, y = data / "model_a.npy", data / "labels.npy"
    one_line_error(run(runner, ["plot", a, y, "-o", data / "fig.gif"]), "fig.gif", ".png, .svg or .pdf")
    one_line_error(run(runner, ["plot", data / "missing.npy", y, "-o", data / "f.png"]), "missing.npy")
    one_line_error(run(runner, ["plot", a, y, "-o", data / "nofolder" / "f.png"]), "does not exist")
    one_line_error(run(runner, ["plot", a, y, "-o", data / "f.png", "--temperature", "-1"]), "temperature")
    one_line_error(
        run(runner, ["plot", a, y, "-o", data / "f.png", "--compare", data / "model_b.npy", data / "nolabels.npy"]),
        "nolabels.npy",
    )
    assert not (data / "f.png").exists()


def test_usage_errors(runner, data):
    a, y = data / "model_a.npy", data / "labels.npy"
    r = run(runner, ["plot", a, y, "-o", data / "f.png", "--temperature", "2", "--compare", a, y])
    assert r.exit_code == 2 and "cannot be combined" in r.stderr
    r = run(runner, ["plot", a, y, "-o", data / "f.png", "--name", "x", "--name", "y"])
    assert r.exit_code == 2 and "--name" in r.stderr
    r = run(runner, ["plot", a, y, "-o", data / "f.png", "--overlay"])
    assert r.exit_code == 2 and "--overlay" in r.stderr
    r = run(runner, ["plot", a, y, "-o", data / "f.png", "--classwise", "--strategy", "quantile"])
    assert r.exit_code == 2 and "--classwise" in r.stderr
    r = run(runner, ["plot", a, y])
    assert r.exit_code == 2 and "--output" in r.stderr


def test_compare_temperature_classwise_quantile(runner, data):
    a, b, y = data / "model_a.npy", data / "model_b.npy", data / "labels.npy"
    (data / "t.json").write_text(json.dumps({"temperature": 1.7}))
    cases = {
        "cmp.png": ["--compare", b, y, "--name", "A", "--name", "B", "--title", "two"],
        "ba.svg": ["--temperature", data / "t.json"],
        "cw.pdf": ["--classwise"],
        "q.png": ["--strategy", "quantile", "--n-bins", "5", "--dpi", "72"],
        "ov.png": ["--temperature", "2", "--overlay"],
        "ov2.svg": ["--compare", b, y, "--overlay"],
    }
    for name, extra in cases.items():
        result = run(runner, ["plot", a, y, "-o", data / name, *extra])
        assert result.exit_code == 0, (name, result.stderr)
        assert (data / name).stat().st_size > 1000
    assert b"After: T = 1.7" in (data / "ba.svg").read_bytes()
    svg = (data / "ov2.svg").read_bytes()
    assert b"model_a \xe2\x80\x94 ECE" in svg and b"model_b \xe2\x80\x94 ECE" in svg


def test_probs_input(runner, data):
    logits = np.load(data / "model_a.npy")
    p = np.exp(logits - logits.max(1, keepdims=True))
    np.save(data / "probs.npy", p / p.sum(1, keepdims=True))
    result = run(runner, ["plot", data / "probs.npy", data / "labels.npy", "--probs", "-o", data / "p.png"])
    assert result.exit_code == 0, result.stderr
    result = run(runner, ["plot", data / "model_a.npy", data / "labels.npy", "--probs", "-o", data / "q.png"])
    one_line_error(result, "model_a.npy")


def test_probs_with_any_calibrator(runner, data):
    """Issue #33 item 1: `plot --probs --calibrator` was refused ("--temperature scales logits") for
    every calibrator; now T scales log p (p^(1/T), renormalised), as `eval --probs` does."""
    import naive_reference as ref  # noqa: E402

    logits, y = np.load(data / "model_a.npy"), np.load(data / "labels.npy")
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.save(data / "probs.npy", p)
    (data / "t.json").write_text(json.dumps({"temperature": 2.0}))
    q = p ** 0.5
    q /= q.sum(1, keepdims=True)
    cases = {"t.svg": ["--calibrator", data / "t.json"], "t15.svg": ["--temperature", "1.5", "--overlay"]}
    for name, extra in cases.items():
        result = run(runner, ["plot", data / "probs.npy", data / "labels.npy", "--probs", "-o", data / name, *extra])
        assert result.exit_code == 0, result.stderr
    svg = (data / "t.svg").read_bytes()
    assert b"After: T = 2" in svg
    assert f"ECE = {100 * ref.ece(p, y):.2f}%".encode() in svg
    assert f"ECE = {100 * ref.ece(q, y):.2f}%".encode() in svg
    result = run(runner, ["fit", data / "probs.npy", data / "labels.npy", "--probs", "--method", "isotonic",
                          "-o", data / "iso.json"])
    assert result.exit_code == 0, result.stderr
    result = run(runner, ["plot", data / "probs.npy", data / "labels.npy", "--probs", "--calibrator",
                          data / "iso.json", "-o", data / "iso.png"])
    assert result.exit_code == 0, result.stderr
    assert (data / "iso.png").read_bytes().startswith(PNG)


def test_model_names_from_files():
    from calibrate_cli.cli.plot import model_names

    assert model_names(["runs/ce.npy", "runs/focal.npz:logits"], ()) == ["ce", "focal:logits"]
    assert model_names(["a/test.npy", "b/test.npy"], ()) == ["a/test.npy", "b/test.npy"]
    assert model_names(["a.npy"], ("Mine",)) == ["Mine"]


def test_eval_plot(runner, data):
    out = data / "eval.png"
    args = ["eval", data / "model_a.npy", data / "labels.npy", "--format", "json", "--plot", out]
    result = run(runner, args)
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes().startswith(PNG)
    assert json.loads(result.stdout)["metrics"]["ece"] > 0
    # the same --force rule, checked before any work
    result = run(runner, args)
    one_line_error(result, "already exists")
    assert result.stdout == ""
    assert run(runner, [*args, "--force"]).exit_code == 0
    one_line_error(run(runner, [*args[:-1], data / "eval.bmp"]), "eval.bmp")


@pytest.mark.parametrize("ext", ["svg", "pdf", "png"])
@pytest.mark.parametrize("command", ["plot", "eval"])
def test_two_runs_write_the_same_bytes(runner, data, ext, command):
    """Issue #32 item 14: matplotlib names SVG clip paths and glyphs with random ids unless
    svg.hashsalt is set, and dates SVG and PDF files: the same inputs must give the same bytes."""
    import matplotlib

    written = []
    for name in ("a", "b"):
        out = data / f"{name}.{ext}"
        args = ["plot", data / "model_a.npy", data / "labels.npy", "--temperature", "1.5", "-o", out]
        if command == "eval":
            args = ["eval", data / "model_a.npy", data / "labels.npy", "--plot", out, "-f", "json"]
        result = run(runner, args)
        assert result.exit_code == 0, result.stderr
        written.append(out.read_bytes())
    assert written[0] == written[1]
    assert b"CreationDate" not in written[0] and b"<dc:date>" not in written[0]
    assert matplotlib.rcParams["svg.hashsalt"] is None  # set while writing only, never globally
