"""MkDocs hook (mkdocs.yml ``hooks:``): pages of commands that may not exist yet join the nav.

``calib ood`` and ``calib table`` are documented in docs/ood.md and docs/table.md; each page that
exists is added to the "Commands" section, so ``mkdocs build --strict`` passes with or without them
(a nav entry to a missing file is a warning, an error under --strict).
"""

from __future__ import annotations

from pathlib import Path

#: (title, file in docs/) of the optional command pages, in nav order
OPTIONAL_COMMAND_PAGES = (("calib ood", "ood.md"), ("calib table", "table.md"))


def on_config(config, **kwargs):
    docs = Path(config["docs_dir"])
    listed = {_file(entry) for entry in _walk(config["nav"] or [])}
    for section in config["nav"] or []:
        if isinstance(section, dict) and "Commands" in section:
            pages = section["Commands"]
            for title, name in OPTIONAL_COMMAND_PAGES:
                if (docs / name).is_file() and name not in listed:
                    pages.append({title: name})
    return config


def _walk(nav):
    for entry in nav:
        if isinstance(entry, dict):
            for value in entry.values():
                if isinstance(value, list):
                    yield from _walk(value)
                else:
                    yield value
        else:
            yield entry


def _file(entry):
    return entry if isinstance(entry, str) else None


# ------------------------------------------------------------------------------ docstrings → Markdown
# calib's docstrings are written for help() and Sphinx habits: roles (:func:`evaluate`), doctest
# examples (>>>), "name  description" attribute lists, "::" before code, ``.. math::``. mkdocstrings
# renders a docstring as Markdown, where ">>>" is a nested blockquote and a role prints literally.
# The griffe extension below (mkdocs.yml: mkdocstrings' ``extensions``) rewrites each docstring once
# the objects are loaded; the code keeps its docstrings as they are.

import re

_ROLE = re.compile(r":(?:py:)?(func|meth|class|mod|data|attr|exc|obj|const):`(~?)([^`<]+?)(?:\s*<([^>]+)>)?`")
_ATTRIBUTE = re.compile(r"^([A-Za-z_][\w.]*)(\s{2,})(\S.*)$")
_ITEM = re.compile(r"^([A-Za-z_][\w.]*)(\s+)(\S.*)$")


def _role(match: re.Match) -> str:
    kind, short, target, explicit = match.groups()
    name = explicit or target
    if explicit:  # :func:`text <target>`
        return f"`{target.strip()}`"
    if short:
        name = name.rsplit(".", 1)[-1]
    if kind in ("func", "meth") and not name.endswith(")"):
        name += "()"
    return f"`{name}`"


def markdown_docstring(text: str) -> str:
    """A calib docstring as Markdown: Sphinx roles as code, doctest examples as ``pycon`` blocks,
    ``name  description`` attribute lists as bullet lists, ``.. math::`` as a ``tex`` block, a
    paragraph's closing ``::`` as ``:`` (the indented block after it is Markdown code already)."""
    lines = _ROLE.sub(_role, text).split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped.startswith(">>> "):  # a doctest example: until the next blank line
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(re.sub(r"\s*# doctest:.*$", "", lines[i][indent:]))
                i += 1
            out += ["", "```pycon", *block, "```", ""]
            continue
        if stripped.startswith(".. math::"):
            formula = stripped[len(".. math::"):].strip()
            i += 1
            body = [formula] if formula else []
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                if lines[i].strip() or body:
                    body.append(lines[i].strip())
                i += 1
            while body and not body[-1]:
                body.pop()
            out += ["", "```tex", *body, "```", ""]
            continue
        in_list = bool(out) and out[-1].startswith("- `")
        # in a list, a name as long as the column leaves one space only ("objective_at_one the ...")
        match = _ATTRIBUTE.match(line) or (_ITEM.match(line) if in_list else None)
        following = _ATTRIBUTE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if match and (following or in_list):
            # "name   description" (continuation lines indented under the description)
            out.append(f"- `{match[1]}`: {match[3]}")
            i += 1
            while i < len(lines) and lines[i].startswith(" ") and lines[i].strip():
                out[-1] += " " + lines[i].strip()
                i += 1
            if i < len(lines) and lines[i].strip() and not _ITEM.match(lines[i]):
                out.append("")  # a list ends before the next paragraph
            continue
        if stripped == "::":
            i += 1
            continue
        if stripped.endswith("::"):
            line = line[: line.rstrip().rfind("::")] + ":"
        out.append(line)
        i += 1
    return "\n".join(out)


try:
    from griffe import Extension as _GriffeExtension
except ImportError:  # mkdocs without mkdocstrings: the nav hook above still works
    _GriffeExtension = object


class CalibDocstrings(_GriffeExtension):
    """griffe extension: every docstring through :func:`markdown_docstring` once loaded."""

    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
