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
