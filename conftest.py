"""Test-session set-up shared by the doctests and tests/.

- **Optional packages**: without torch, the modules that import it at the top (the training
  losses, the training room calibrate_cli/training/, the tests' torch helpers and transcriptions of the
  reference losses) are left out of collection, so ``python -m pytest`` passes on a core-only install;
  the tests that need an optional package skip with a reason (``pytest.importorskip``).
- ``CALIB_TEST_HIDE=torch,pyarrow,...``: those top-level modules cannot be imported in this pytest
  process, as if they were not installed (``_ckernel`` hides calib's C extension), to check that every
  test skips, never errors, without them.
- ``CALIB_TEST_PERTURB_LIBM=0.05``: numpy's float64 exp and log are 1 ulp off on that share of
  arguments (tests/perturbed_libm.py), a stand-in for an AVX-512 CPU: tests that compare two code paths
  must hold within the numeric contract's tolerance, not by equal bits.
- ``CALIB_TEST_SKIPPED=FILE``: the ids of every test and module that skipped are written to FILE, one
  per line, for ``python -m pytest @FILE`` once the missing package is installed (.ci/run's phase 2).
"""

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

HIDDEN = frozenset(name for name in os.environ.get("CALIB_TEST_HIDE", "").split(",") if name)


class _HiddenModules(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if top in HIDDEN or (fullname.startswith("calibrate_cli.") and fullname.rsplit(".", 1)[1] in HIDDEN):
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden by CALIB_TEST_HIDE)", name=fullname)
        return None


if HIDDEN:
    sys.meta_path.insert(0, _HiddenModules())

if os.environ.get("CALIB_TEST_PERTURB_LIBM"):
    sys.path.insert(0, str(Path(__file__).parent / "tests"))
    import perturbed_libm

    perturbed_libm.install(float(os.environ["CALIB_TEST_PERTURB_LIBM"]))


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[module] is None (import blocked)
        return False


collect_ignore = [] if _has("torch") else [
    "calibrate_cli/training/losses.py", "tests/reference_losses", "tests/train_helpers.py"]
#: the training room imports torch at module level: without torch its modules are not collected
collect_ignore_glob = [] if _has("torch") else ["calibrate_cli/training/*.py"]

_SKIPPED_FILE = os.environ.get("CALIB_TEST_SKIPPED")


def _record_skip(nodeid: str) -> None:
    with open(_SKIPPED_FILE, "a", encoding="utf-8") as out:
        out.write(nodeid + "\n")


def pytest_collectreport(report):
    if _SKIPPED_FILE and report.skipped:
        _record_skip(report.nodeid)


def pytest_runtest_logreport(report):
    if _SKIPPED_FILE and report.skipped and report.when in ("setup", "call"):
        _record_skip(report.nodeid)
