"""End-to-end: the installed `calib` command, and what importing the CLI pulls in."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data"


def test_importing_the_cli_imports_neither_torch_nor_matplotlib():
    code = (
        "import sys, calibrate_cli, calibrate_cli.cli; "
        "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.skipif(shutil.which("calib") is None, reason="calib is not installed on PATH")
def test_installed_calib_on_sample_data(tmp_path):
    logits, labels = SAMPLE / "test_logits.npy", SAMPLE / "test_labels.npy"
    table = subprocess.run(["calib", "eval", str(logits), str(labels)], capture_output=True, text=True)
    assert table.returncode == 0, table.stderr
    assert "ECE" in table.stdout and "AdaECE" in table.stdout
    out = tmp_path / "m.json"
    subprocess.run(["calib", "eval", str(logits), str(labels), "-f", "json", "-o", str(out)], check=True)
    doc = json.loads(out.read_text())
    assert doc["n"] == 719 and doc["k"] == 10
    gate = subprocess.run(["calib", "eval", str(logits), str(labels), "--fail-above", "ece=0.001"], capture_output=True, text=True)
    assert gate.returncode == 1 and "gate failed: ece" in gate.stderr
    bad = subprocess.run(["calib", "eval", str(tmp_path / "missing.npy"), str(labels)], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "missing.npy" in bad.stderr and "Traceback" not in bad.stderr
    version = subprocess.run(["calib", "--version"], capture_output=True, text=True, check=True).stdout
    assert "calib" in version
