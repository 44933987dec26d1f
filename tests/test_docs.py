"""The documentation site: the CLI reference is not stale, and `mkdocs build --strict` passes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_up_to_date():
    """docs/cli-reference.md is what scripts/gen_cli_reference.py writes from the commands' --help."""
    gen = _load("gen_cli_reference", ROOT / "scripts" / "gen_cli_reference.py")
    committed = (ROOT / "docs" / "cli-reference.md").read_text(encoding="utf-8")
    assert committed == gen.reference(), "docs/cli-reference.md is stale: run python scripts/gen_cli_reference.py"
    from calibrate_cli.cli import cli

    for name in cli.load_all():  # every command has its section
        assert f"\n## calib {name}\n" in committed


def test_optional_command_pages_join_the_nav_when_present(tmp_path):
    hooks = _load("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    nav = [{"Home": "index.md"}, {"Commands": [{"calib eval": "eval.md"}]}]
    hooks.on_config({"docs_dir": str(tmp_path), "nav": nav})
    assert nav[1]["Commands"] == [{"calib eval": "eval.md"}]  # absent: not listed (strict stays green)
    (tmp_path / "ood.md").write_text("# calib ood\n")
    hooks.on_config({"docs_dir": str(tmp_path), "nav": nav})
    hooks.on_config({"docs_dir": str(tmp_path), "nav": nav})  # once only
    assert nav[1]["Commands"] == [{"calib eval": "eval.md"}, {"calib ood": "ood.md"}]


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install '.[docs]'")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed: pip install '.[docs]'")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(site)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for page in ("index.html", "getting-started/index.html", "report/index.html", "api/index.html",
                 "cli-reference/index.html", "reproduce/index.html", "ci/index.html"):
        assert (site / page).is_file(), page
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert "build_report" in api and "fit_temperature" in api  # the docstrings made it in
    # as Markdown (scripts/mkdocs_hooks.py CalibDocstrings): no Sphinx role printed, no >>> blockquote
    for role in (":func:", ":class:", ":mod:", ":data:", ":meth:"):
        assert role not in api, role
    assert "<blockquote" not in api and 'class="language-pycon"' in api
    assert "<li><code>metrics</code>: name → value" in api  # EvalReport's attributes as a list


def test_docstrings_become_markdown_for_the_api_page():
    # issue 33 item 7: >>> examples rendered as nested blockquotes with their lines run together,
    # Sphinx roles printed literally, EvalReport's attribute list was one paragraph
    hooks = _load("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    text = hooks.markdown_docstring(
        "The result of :func:`evaluate` (see :class:`~calibrate_cli.bootstrap.ConfidenceInterval`,\n"
        ":mod:`calibrate_cli.engine.torch_pass`, :data:`~calibrate_cli.metrics.registry.DEFAULT_METRICS`).\n"
        "\n"
        "metrics        name → value\n"
        "bins           equal-width bins\n"
        "               of the top-label confidence\n"
        "objective_at_one the objective at T = 1\n"
        "\n"
        "It composes::\n"
        "\n"
        "    d.plot()\n"
        "\n"
        ">>> import numpy as np\n"
        ">>> evaluate(p, y)  # doctest: +ELLIPSIS\n"
        "EvalReport: N = 2\n"
        "...\n"
    )
    assert ":func:" not in text and ":class:" not in text and ":mod:" not in text and ":data:" not in text
    assert "`evaluate()`" in text and "`ConfidenceInterval`" in text and "`calibrate_cli.engine.torch_pass`" in text
    assert "`DEFAULT_METRICS`" in text
    assert "- `metrics`: name → value" in text
    assert "- `bins`: equal-width bins of the top-label confidence" in text
    assert "- `objective_at_one`: the objective at T = 1" in text
    assert "It composes:\n" in text and "::" not in text
    assert "```pycon\n>>> import numpy as np\n>>> evaluate(p, y)\nEvalReport: N = 2\n...\n```" in text

