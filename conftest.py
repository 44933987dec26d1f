"""Doctests of the package run with the tests (``--doctest-modules`` in pyproject.toml).

The torch side of the bootstrap imports torch at module level; without torch it is not collected.
"""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("torch") else ["calibrate_cli/_torch_bootstrap.py"]
