"""Reading a report page back (tests only): the exact values of its cells and its figures, with the
standard library's HTML parser (no dependency on how the page is laid out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Page:
    metrics: dict = field(default_factory=dict)  # (set, metric) -> (exact value or None, shown text)
    intervals: list = field(default_factory=list)  # (metric, low, high)
    per_class: dict = field(default_factory=dict)  # (set, class) -> exact value
    figures: list = field(default_factory=list)  # aria-label of each top-level <svg class="figure">
    ids: list = field(default_factory=list)  # every id attribute in the page
    temperature: float | None = None
    tags: set = field(default_factory=set)
    text: str = ""


def _value(text: str):
    return None if text == "None" else float(text)


class _Reader(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._cell = None
        self._buffer: list[str] = []
        self._chunks: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.page.tags.add(tag)
        if "id" in a:
            self.page.ids.append(a["id"])
        if tag == "svg" and "figure" in (a.get("class") or "").split():
            self.page.figures.append(a.get("aria-label"))
        if "data-temperature" in a:
            self.page.temperature = float(a["data-temperature"])
        if tag == "td" and "data-value" in a:
            self._cell = a
            self._buffer = []
        if tag == "td" and "data-low" in a:
            self.page.intervals.append((a["data-metric"], float(a["data-low"]), float(a["data-high"])))

    def handle_data(self, data):
        self._chunks.append(data)
        if self._cell is not None:
            self._buffer.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            a, text = self._cell, "".join(self._buffer).strip()
            if "data-metric" in a:
                self.page.metrics[(a["data-set"], a["data-metric"])] = (_value(a["data-value"]), text)
            elif "data-class" in a:
                self.page.per_class[(a["data-set"], int(a["data-class"]))] = _value(a["data-value"])
            self._cell = None


def read_page(text: str) -> Page:
    reader = _Reader()
    reader.feed(text)
    reader.close()
    reader.page.text = " ".join(reader._chunks)
    return reader.page
