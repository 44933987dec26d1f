"""scripts/fuzz_paths.py, the differential fuzz of the numeric contract: a fixed draw of hostile cases
on every path this machine runs agrees with the numpy definition, and the harness does flag what
breaks the contract (a fuzz that cannot fail would prove nothing)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fuzz_paths.py"


def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_paths", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_path_agrees_on_a_draw_of_hostile_cases():
    fuzz = _fuzz_module()
    engine_before = os.environ.get("CALIB_ENGINE")
    lines = []
    paths = fuzz.available(fuzz.PATHS)
    done, bad = fuzz.fuzz(seed=0, cases=12 * len(paths), seconds=None, paths=paths, out=None, echo=lines.append)
    assert done == 12 * len(paths)
    assert bad == 0, "\n".join(lines)
    assert os.environ.get("CALIB_ENGINE") == engine_before  # the caller's engine, restored


def test_the_harness_flags_a_broken_contract():
    fuzz = _fuzz_module()
    assert fuzz.disagreement({"ece": 0.1, "nll": None}, {"ece": 0.1 * (1 + 1e-13), "nll": None}) is None
    assert "ece" in fuzz.disagreement({"ece": 0.1 * (1 + 1e-11)}, {"ece": 0.1})
    assert "nll" in fuzz.disagreement({"ece": 0.1, "nll": None}, {"ece": 0.1, "nll": 2.0})
    assert "mce" in fuzz.disagreement({}, {"mce": 0.5})
    assert fuzz.main(["--cases", "2", "--paths", "mmap"]) == 0
