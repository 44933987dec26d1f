"""Doctests of the package run with the tests (``--doctest-modules`` in pyproject.toml).

torch is optional: without it, the modules that import it at the top (the training losses, the
training room calibrate_cli/training/ and the tests' transcriptions of the reference losses) are left
out of the doctest collection, so ``pytest`` passes on a core-only install (their tests skip through
``pytest.importorskip``)."""

import importlib.util

collect_ignore = []
collect_ignore_glob = []
if importlib.util.find_spec("torch") is None:
    collect_ignore += ["calibrate_cli/losses.py", "tests/reference_losses"]
    collect_ignore_glob += ["calibrate_cli/training/*.py"]
