"""The report's section "Beyond one number": its numbers are those the diagnostics functions return for
the same arrays (themselves tested against independent loops in test_decomposition.py,
test_reliability_stats.py and test_selective.py), read back from the page; it renders with its figure,
reproducibly, and --no-beyond leaves it out."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from calibrate_cli import fit_temperature
from calibrate_cli.calibrators.temperature_fit import apply_temperature
from calibrate_cli.cli import cli
from calibrate_cli.diagnostics import calibration_test, corp_decomposition, selective_report, top_label
from calibrate_cli.report import build_report, render_html
from report_page import read_page

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
FILES = ["val_logits.npy", "val_labels.npy", "test_logits.npy", "test_labels.npy"]
RESAMPLES = 499  # the report's calibration test (docs/report.md)
SEED = 0  # the report's default --seed


class _Beyond(HTMLParser):
    """(data-beyond, data-set) -> (exact value, shown text) of the section's cells; its figures' labels."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.cells, self.figures, self.section = {}, [], False
        self._cell, self._text = None, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.section = a.get("id") == "beyond-section"
        if self.section and tag == "svg" and "figure" in (a.get("class") or ""):
            self.figures.append(a.get("aria-label"))
        if tag == "td" and "data-beyond" in a:
            self._cell, self._text = a, []

    def handle_data(self, data):
        if self._cell is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "section":
            self.section = False
        if tag == "td" and self._cell is not None:
            a = self._cell
            self.cells[(a["data-beyond"], a["data-set"])] = (float(a["data-value"]), "".join(self._text).strip())
            self._cell = None


def _beyond(text: str) -> _Beyond:
    reader = _Beyond()
    reader.feed(text)
    reader.close()
    return reader


def _expected(scores, labels, seed=SEED):
    """The diagnostics functions on the top-label problem of these scores, called here directly."""
    conf, correct = top_label(scores, labels)
    out = {}
    for score in ("brier", "log"):
        d = corp_decomposition(conf, correct, score)
        out[f"{score}_score"] = d.score
        out[f"{score}_mcb"] = d.miscalibration
        out[f"{score}_dsc"] = d.discrimination
        out[f"{score}_unc"] = d.uncertainty
    out["calibration_p"] = calibration_test(conf, correct, n_bins=15, n_resamples=RESAMPLES, seed=seed).p_value
    sel = selective_report(conf, correct)
    out["aurc"], out["e_aurc"] = sel.aurc, sel.e_aurc
    out["risk_at_coverage"] = sel.at_coverage[0.9].risk
    return out


@pytest.fixture(scope="module")
def sample_page(tmp_path_factory):
    from click.testing import CliRunner

    folder = tmp_path_factory.mktemp("beyond")
    paths = [str(SAMPLE / f) for f in FILES]
    pages = []
    for name in ("a.html", "b.html"):
        out = folder / name
        result = CliRunner().invoke(cli, ["report", *paths, "-o", str(out), "--bootstrap", "0"],
                                    env={"SOURCE_DATE_EPOCH": "1700000000"})
        assert result.exit_code == 0, result.output
        pages.append(out.read_text(encoding="utf-8"))
    return pages, paths, folder


def test_the_section_numbers_are_the_diagnostics_of_the_same_arrays(sample_page):
    (text, _), paths, _ = sample_page
    val, val_y, test, test_y = (np.load(p) for p in paths)
    t = fit_temperature(val, val_y).temperature
    section = _beyond(text)
    checked = 0
    for when, scores in (("before", test), ("after", apply_temperature(test, t))):
        for key, value in _expected(scores, test_y).items():
            exact, shown = section.cells[(key, when)]
            assert exact == value, (key, when)
            checked += 1
        # what the reader sees: 4 decimals, the p-value to 3 digits, the risk in percent
        assert section.cells[("brier_mcb", when)][1] == f"{_expected(scores, test_y)['brier_mcb']:.4f}"
    assert checked == 2 * 12 and len(section.cells) == checked
    # the sample model is over-confident: recalibration removes most of the miscalibration
    assert section.cells[("brier_mcb", "after")][0] < section.cells[("brier_mcb", "before")][0]
    for when in ("before", "after"):
        p, shown = section.cells[("calibration_p", when)]
        assert shown == f"{p:.3g}" and p >= 1 / (RESAMPLES + 1)
        risk, shown = section.cells[("risk_at_coverage", when)]
        assert shown == f"{100 * risk:.2f} %"


def test_the_section_renders_with_its_figure_and_reproducibly(sample_page):
    (a, b), _, _ = sample_page
    assert a == b  # the test is seeded from --seed: the same bytes (SOURCE_DATE_EPOCH set)
    section = _beyond(a)
    assert section.figures == ["Risk–coverage curves before and after T"]
    page = read_page(a)
    assert len(page.figures) == 5 and len(page.ids) == len(set(page.ids))
    assert "Beyond one number" in page.text and "what it means" in page.text
    assert a.index('id="beyond-section"') < a.index('id="provenance"')
    # the section's cells stay out of the metric table's keys
    assert not any(key.startswith(("brier_", "log_")) for _, key in page.metrics)


def test_no_beyond_leaves_the_section_out(sample_page, tmp_path):
    from click.testing import CliRunner

    _, paths, _ = sample_page
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", *paths, "-o", str(out), "--bootstrap", "0", "--no-beyond"])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert "beyond-section" not in text and len(read_page(text).figures) == 4


def test_build_report_seed_and_to_dict():
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 3, 300)
    logits = rng.normal(0, 3, (300, 3))
    logits[np.arange(300), labels] += 1.5
    report = build_report(logits, labels, seed=5)
    assert report.beyond.before.test.seed == 5
    assert report.beyond.before.test.p_value == _expected(logits, labels, seed=5)["calibration_p"]
    t = report.temperature
    assert report.beyond.after.test.p_value == _expected(apply_temperature(logits, t), labels, seed=5)["calibration_p"]
    data = json.loads(json.dumps(report.to_dict()))
    assert data["beyond"]["after"]["selective"]["aurc"] == _expected(apply_temperature(logits, t), labels)["aurc"]
    assert build_report(logits, labels, beyond=False).beyond is None
    assert len(read_page(render_html(report)).figures) == 5


def test_an_infinite_log_score_is_shown_as_inf_with_a_warning():
    rng = np.random.default_rng(8)
    probs = rng.dirichlet([2.0, 2.0, 2.0], 200)
    labels = rng.integers(0, 3, 200)
    probs[0], labels[0] = [1.0, 0.0, 0.0], 1  # a sure forecast that misses
    report = build_report(probs, labels, input_kind="probs")
    section = _beyond(render_html(report))
    assert section.cells[("log_score", "before")] == (float("inf"), "inf")
    assert any(w.startswith("before T: ") and "infinite" in w for w in report.warnings), report.warnings


def test_the_section_renders_in_headless_chromium(sample_page, tmp_path):
    """The section alone (the page's style sheet, its tables and figure) drawn by Debian's chromium:
    no blank page, and both curves' colours (before grey, after blue) are drawn."""
    import os
    import shutil
    import subprocess

    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium); .ci/run installs it on Debian")
    from PIL import Image

    (text, _), _, _ = sample_page
    start, end = text.index('<section id="beyond-section">'), text.index('<section id="provenance">')
    page = tmp_path / "beyond.html"
    page.write_text(text[:text.index("<main>") + 6] + text[start:end] + "</main></body></html>", encoding="utf-8")
    shot = tmp_path / "shot.png"
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,1400",
               page.as_uri()]
    subprocess.run(command, capture_output=True, timeout=180, env={**os.environ, "HOME": str(tmp_path)})
    assert shot.exists(), "chromium wrote no screenshot"
    image = np.asarray(Image.open(shot).convert("RGB")).astype(np.int16)
    not_white = (image < 235).any(axis=-1)
    rows = np.flatnonzero(not_white.any(axis=1))
    assert not_white.mean() > 0.03 and rows.max() - rows.min() > 900  # tables, then the figure under them

    def near(rgb, tol=12):
        return int((np.abs(image - np.array(rgb)).max(axis=-1) <= tol).sum())

    assert near((0x1F, 0x77, 0xB4)) > 300  # the after-T curve
    assert near((0x9A, 0x9A, 0x9A)) > 150  # the before-T curve
