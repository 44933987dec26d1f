"""Doctests of the package run with the tests (``--doctest-modules`` in pyproject.toml)."""

import importlib.util

#: the training room imports torch at module level: without torch its modules are not collected
collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["calibrate_cli/training/*.py"]
