"""docs/contributing.md's walkthroughs: each exists, a test runs its code, and the device one runs here.

The metric, calibrator and input-format walkthroughs are run by tests/test_metric_registry.py,
tests/test_calibrators.py and tests/test_io_formats.py; the device one below, on a copy of the package
(nothing of this process's calibrate_cli is changed), with the CPU standing in for the Intel GPU.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "calibrate_cli"
GUIDE = ROOT / "docs" / "contributing.md"

#: each walkthrough's section and the test file that executes its code
WALKTHROUGHS = {
    "## Adding a metric": "test_metric_registry.py",
    "## Adding a calibrator": "test_calibrators.py",
    "## Adding an input format": "test_io_formats.py",
    "## Adding a device": "test_contributing.py",
}


def _section(title: str) -> str:
    text = GUIDE.read_text()
    assert text.count(f"\n{title}\n") == 1, title
    return text.split(f"\n{title}\n", 1)[1].split("\n## ", 1)[0]


def _python_blocks(title: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", _section(title), flags=re.S)


@pytest.mark.parametrize("title", list(WALKTHROUGHS))
def test_every_walkthrough_has_code_that_a_test_reads(title):
    assert _python_blocks(title), f"{title}: no python block"
    runner = (ROOT / "tests" / WALKTHROUGHS[title]).read_text()
    assert title in runner, f"{WALKTHROUGHS[title]} does not read the section {title!r}"


# ------------------------------------------------------------------------------------ the device

_DEVICES_LINE = 'DEVICES = ("cpu", "cuda", "auto", "torch-cpu")\n'
_ANCHOR = "    if not torch.cuda.is_available():\n"  # the walkthrough's branch goes before the CUDA check


def _package_with_the_walkthrough(tmp_path: Path, *, stand_in: bool) -> Path:
    """A copy of calibrate_cli with the two blocks of the device walkthrough in engine/devices.py;
    ``stand_in``: the torch device is the CPU and it counts as available (no Intel GPU here)."""
    names, branch = _python_blocks("## Adding a device")
    root = tmp_path / ("stand_in" if stand_in else "as_written")
    copy = root / "calibrate_cli"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    devices = copy / "engine" / "devices.py"
    source = devices.read_text()
    assert source.count(_DEVICES_LINE) == 1 and names.startswith("DEVICES = ")
    assert source.count(_ANCHOR) == 1 and source.index(_ANCHOR) > source.index("def _torch_device(")
    source = source.replace(_DEVICES_LINE, names).replace(_ANCHOR, branch + _ANCHOR)
    if stand_in:
        for real, fake in (('torch.device("xpu")', 'torch.device("cpu")'),
                           ('not (hasattr(torch, "xpu") and torch.xpu.is_available())', "False")):
            assert branch.count(real) == 1, real
            source = source.replace(real, fake)
    devices.write_text(source)
    return root


_RUN = r"""
import json, sys
from click.testing import CliRunner
from calibrate_cli.cli import cli
import calibrate_cli as calib
import numpy as np

f = sys.argv[1]
runner = CliRunner()
def run(*args):
    r = runner.invoke(cli, [str(a) for a in args])
    return {"code": r.exit_code, "out": r.stdout, "err": r.stderr}
data = (f"{f}/z.npy", f"{f}/y.npy")
out = {}
for device in sys.argv[2:]:
    out[device] = {
        "eval": run("eval", *data, "--device", device, "-f", "json"),
        "bootstrap": run("eval", *data, "--bootstrap", "40", "--device", device, "-f", "json"),
        "temperature": run("temperature", *data, "--search", "nll", "--device", device, "-f", "json"),
    }
    if out[device]["eval"]["code"] == 0:
        report = calib.evaluate(np.load(data[0]), np.load(data[1]), device=device)
        out[device]["api"] = {"device": report.device, "metrics": report.metrics}
print(json.dumps(out))
"""


def _run(root: Path, folder: Path, *devices: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, str(folder), *devices], capture_output=True, text=True, cwd=folder,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _close(a, b) -> bool:
    """The numeric contract of docs/conventions.md: 1e-12 relative or 1e-15 absolute (None: both)."""
    if a is None or b is None:
        return a is b
    return abs(a - b) <= max(1e-12 * abs(b), 1e-15)


def test_adding_the_walkthrough_device_is_the_whole_change(tmp_path):
    """The docs' two blocks in a copy of engine/devices.py, nothing else changed: every command takes
    --device xpu, runs there (the CPU standing in) and says so, with the numbers of --device cpu; as
    written, on a machine without an Intel GPU, each command refuses it in one line."""
    torch = pytest.importorskip("torch", reason="a torch device needs torch")
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 5, 2000)
    logits = rng.normal(size=(2000, 5)) * 2
    logits[np.arange(2000), labels] += 1.5
    np.save(tmp_path / "z.npy", logits)
    np.save(tmp_path / "y.npy", labels)

    got = _run(_package_with_the_walkthrough(tmp_path, stand_in=True), tmp_path, "xpu", "cpu")
    xpu, cpu = got["xpu"], got["cpu"]
    for what in ("eval", "bootstrap", "temperature"):
        assert xpu[what]["code"] == 0, (what, xpu[what]["err"])
    report, reference = json.loads(xpu["eval"]["out"]), json.loads(cpu["eval"]["out"])
    assert report["device"] == "xpu" and reference["device"] == "cpu"
    assert report["metrics"].keys() == reference["metrics"].keys()
    assert all(_close(report["metrics"][m], v) for m, v in reference["metrics"].items()), report["metrics"]
    boot, boot_cpu = json.loads(xpu["bootstrap"]["out"]), json.loads(cpu["bootstrap"]["out"])
    assert boot["bootstrap"]["device"] == "xpu" and boot_cpu["bootstrap"]["device"] == "cpu"
    for name, interval in boot_cpu["intervals"].items():  # the same draws on every device
        assert _close(boot["intervals"][name]["low"], interval["low"]), name
        assert _close(boot["intervals"][name]["high"], interval["high"]), name
    fit, fit_cpu = json.loads(xpu["temperature"]["out"]), json.loads(cpu["temperature"]["out"])
    assert abs(fit["temperature"] - fit_cpu["temperature"]) <= 1e-9 * fit_cpu["temperature"]
    assert xpu["api"]["device"] == "xpu"
    assert all(_close(xpu["api"]["metrics"][m], v) for m, v in cpu["api"]["metrics"].items())

    if hasattr(torch, "xpu") and torch.xpu.is_available():  # pragma: no cover - an Intel GPU is here
        return
    refused = _run(_package_with_the_walkthrough(tmp_path, stand_in=False), tmp_path, "xpu")["xpu"]
    for what in ("eval", "bootstrap", "temperature"):
        r = refused[what]
        assert r["code"] == 2 and "device 'xpu' needs an Intel GPU" in r["err"] and "Traceback" not in r["err"], r
