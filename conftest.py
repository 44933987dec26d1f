"""Doctests of the package run with the tests (``--doctest-modules`` in pyproject.toml)."""
