"""Doctests of the package run with the tests (``--doctest-modules`` in pyproject.toml).

torch is optional: without it, the modules that import it at the top (the training losses, the
training room calibrate_cli/training/ and the tests' transcriptions of the reference losses) are left
out of the doctest collection, so ``pytest`` passes on a core-only install (their tests skip through
``pytest.importorskip``). Likewise without triton for the Triton kernels of ``device_eval``."""

import importlib.util


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[module] is None (import blocked)
        return False


collect_ignore = [] if _has("torch") else ["calibrate_cli/losses.py", "tests/reference_losses"]
#: the Triton kernels of calibrate_cli.device_eval import triton (CUDA machines) at module level
collect_ignore += [] if _has("triton") else ["calibrate_cli/_triton_pass.py"]
#: the training room imports torch at module level: without torch its modules are not collected
collect_ignore_glob = [] if _has("torch") else ["calibrate_cli/training/*.py"]
