"""`calib report`: one self-contained HTML page whose numbers are the core's, read back from the page,
and rendered by a real browser (Debian's chromium, headless) into a screenshot that is not blank."""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from calibrate_cli import evaluate, fit_temperature
from calibrate_cli.cli import cli
from calibrate_cli.metrics.registry import METRICS
from calibrate_cli.calibrators.temperature_fit import apply_temperature
from report_page import read_page

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
FILES = ["val_logits.npy", "val_labels.npy", "test_logits.npy", "test_labels.npy"]
PERCENT = {spec.name for spec in METRICS if spec.percent}
B = 200  # resamples: enough to test the intervals, quick


def _shown(name, value):
    """How the page must show a value (written here from the conventions, not imported)."""
    if value is None:
        return "—"
    if math.isinf(value):
        return "inf"
    return f"{100 * value:.2f} %" if name in PERCENT else f"{value:.4f}"


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory):
    """The report of the sample model (validation → test), made once for the module."""
    from click.testing import CliRunner

    folder = tmp_path_factory.mktemp("report")
    out = folder / "report.html"
    paths = [str(SAMPLE / f) for f in FILES]
    result = CliRunner().invoke(cli, ["report", *paths, "-o", str(out), "--bootstrap", str(B)])
    assert result.exit_code == 0, result.output
    return out, out.read_text(encoding="utf-8"), paths


def test_report_numbers_are_those_of_evaluate_on_the_same_arrays(sample_report):
    _, text, paths = sample_report
    page = read_page(text)
    val, val_y, test, test_y = (np.load(p) for p in paths)
    t = fit_temperature(val, val_y).temperature  # the paper's grid by ECE, on the validation set
    assert page.temperature == t
    before = evaluate(test, test_y, bootstrap=B)
    after = evaluate(apply_temperature(test, t), test_y, bootstrap=B)
    checked = 0
    for when, report in (("before", before), ("after", after)):
        for name, value in report.metrics.items():
            if value is None and (when, name) not in page.metrics:
                continue  # e.g. a row the registry hides when undefined
            exact, shown = page.metrics[(when, name)]
            assert exact == value, (when, name)
            assert shown == _shown(name, value), (when, name)
            checked += 1
        for k, value in enumerate(report.classwise_ece_per_class):
            assert page.per_class[(when, k)] == value
    assert checked == 2 * len(before.metrics)
    # no row for a metric that was not computed (the opt-in classwise ones): no "—" rows
    assert {name for _, name in page.metrics} <= set(before.metrics)
    assert "Classwise RMS-CE" not in page.text
    # the intervals: the same resamples as `calib eval --bootstrap`
    lows = {(m, lo, hi) for m, lo, hi in page.intervals}
    for report in (before, after):
        for name, ci in report.intervals.items():
            assert (name, ci.low, ci.high) in lows, name
    # the headline numbers are in the text a reader sees
    assert f"{100 * before.metrics['ece']:.2f} % → {100 * after.metrics['ece']:.2f} %" in page.text


def test_report_has_its_four_figures_with_unique_ids_and_is_self_contained(sample_report):
    _, text, _ = sample_report
    page = read_page(text)
    assert page.figures == [
        "Reliability diagrams before and after T", "ECE and NLL against T", "Per-class ECE", "Confidence histogram",
        "Risk–coverage curves before and after T",  # the section "Beyond one number" (on by default)
    ]
    # matplotlib names clip paths and glyphs by content: unprefixed, two figures would share ids
    assert len(page.ids) == len(set(page.ids))
    assert "interval-notes" in page.ids  # the bootstrap's notes (e.g. an interval below 0), folded
    assert not page.tags & {"script", "link", "img", "iframe", "object", "embed"}
    for needle in ("https://", "src=", "@import", "url(http"):
        assert needle not in text
    assert text.replace("http://www.w3.org/", "").count("http://") == 0


def test_report_provenance_names_the_inputs_sizes_and_checksums(sample_report):
    _, text, paths = sample_report
    page = read_page(text)
    for path in paths:
        data = Path(path).read_bytes()
        assert hashlib.sha256(data).hexdigest() in text
        assert f"{len(data):,} bytes" in text
        assert path in page.text
    from calibrate_cli import __version__

    assert f"calib {__version__}" in page.text
    assert "N (validation) 719" in " ".join(page.text.split()) and "K (classes) 10" in " ".join(page.text.split())


def _save(folder, **arrays):
    out = {}
    for name, array in arrays.items():
        out[name] = str(folder / f"{name}.npy")
        np.save(out[name], array)
    return out


def _data(n=300, k=3, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k)) * 3
    logits[np.arange(n), labels] += 2
    return logits, labels


def test_report_without_a_test_set_is_judged_on_the_validation_set_and_says_so(runner, tmp_path):
    logits, labels = _data()
    p = _save(tmp_path, v=logits, y=labels)
    out = tmp_path / "r.html"
    result = runner.invoke(cli, ["report", p["v"], p["y"], "-o", str(out), "--bootstrap", "0"])
    assert result.exit_code == 0, result.stderr
    page = read_page(out.read_text())
    t = fit_temperature(logits, labels).temperature
    after = evaluate(apply_temperature(logits, t), labels)
    assert page.metrics[("after", "ece")][0] == after.metrics["ece"]
    assert page.intervals == []  # --bootstrap 0: no intervals
    assert "no test set" in result.stderr and "optimistic" in page.text


def test_report_escapes_file_names_and_titles(runner, tmp_path):
    logits, labels = _data()
    folder = tmp_path / "<b>&x"
    folder.mkdir()
    p = _save(folder, v=logits, y=labels)
    out = tmp_path / "r.html"
    title = "<script>alert('x')</script> & co"
    result = runner.invoke(cli, ["report", p["v"], p["y"], "-o", str(out), "--bootstrap", "0", "--title", title])
    assert result.exit_code == 0, result.stderr
    text = out.read_text()
    assert "<script>" not in text and "<b>&x" not in text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; co" in text
    page = read_page(text)
    assert p["v"] in page.text  # shown as written, once unescaped


def test_report_never_overwrites_without_force(runner, tmp_path):
    logits, labels = _data()
    p = _save(tmp_path, v=logits, y=labels)
    out = tmp_path / "r.html"
    out.write_text("mine")
    result = runner.invoke(cli, ["report", p["v"], p["y"], "-o", str(out), "--bootstrap", "0"])
    assert result.exit_code == 2 and "--force" in result.stderr
    assert out.read_text() == "mine"
    result = runner.invoke(cli, ["report", p["v"], p["y"], "-o", str(out), "--bootstrap", "0", "--force"])
    assert result.exit_code == 0, result.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    "args, message",
    [
        (["v", "y", "t"], "TEST_SCORES and TEST_LABELS"),
        (["v", "y", "-o", "r.txt"], "ending in .html"),
        (["v", "y", "t4", "y", "-o", "r.html"], "K = 4 classes"),
        (["v", "missing.npy", "-o", "r.html"], "missing.npy"),
        (["v", "y", "-o", "r.html", "--bootstrap", "5"], "too few resamples"),
    ],
)
def test_report_bad_input_is_one_line_and_exit_2(runner, tmp_path, args, message):
    logits, labels = _data()
    p = _save(tmp_path, v=logits, y=labels, t=logits[:, :2].copy(), t4=np.hstack([logits, logits[:, :1]]))
    argv = [p.get(a, str(tmp_path / a) if a.endswith((".npy", ".html", ".txt")) else a) for a in args]
    if "-o" not in argv:
        argv += ["-o", str(tmp_path / "r.html")]
    result = runner.invoke(cli, ["report", *argv])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "r.html").exists()


# -- issue #32 item 14: the same inputs give the same bytes ------------------------------------------------

#: 1700000000 s after 1970-01-01 UTC, by hand: 19675 days (2023-11-14) + 22:13:20
EPOCH, EPOCH_TIME = "1700000000", "2023-11-14T22:13:20+00:00"


def test_two_report_runs_give_the_same_bytes_and_the_epochs_time(runner, tmp_path, monkeypatch):
    import re

    logits, labels = _data()
    p = _save(tmp_path, v=logits, y=labels, t=logits[::-1].copy(), ty=labels[::-1].copy())
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    pages = []
    for name in ("a.html", "b.html"):
        result = runner.invoke(cli, ["report", p["v"], p["y"], p["t"], p["ty"], "-o", str(tmp_path / name),
                                     "--bootstrap", "20"])
        assert result.exit_code == 0, result.stderr
        pages.append((tmp_path / name).read_bytes())
    assert pages[0] == pages[1]  # random SVG ids and the clock made every run differ
    text = pages[0].decode("utf-8")
    assert set(re.findall(r"\d{4}-\d\d-\d\dT[\d:]+\+00:00", text)) == {EPOCH_TIME}
    assert text.count(EPOCH_TIME) == 2  # the provenance table and the footer
    import matplotlib

    assert matplotlib.rcParams["svg.hashsalt"] is None  # set while writing only, never globally


@pytest.mark.parametrize("value", ["abc", "1.5", "-1", "１７"])
def test_report_refuses_a_malformed_source_date_epoch(runner, tmp_path, monkeypatch, value):
    from cli_helpers import one_line_error

    logits, labels = _data()
    p = _save(tmp_path, v=logits, y=labels)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    result = runner.invoke(cli, ["report", p["v"], p["y"], "-o", str(tmp_path / "r.html"), "--bootstrap", "0"])
    one_line_error(result, "SOURCE_DATE_EPOCH", "not a whole number of seconds")
    assert not (tmp_path / "r.html").exists()


def test_report_time_without_source_date_epoch_is_now():
    import datetime

    from calibrate_cli.report.core import report_time

    assert report_time({"SOURCE_DATE_EPOCH": EPOCH}) == EPOCH_TIME
    assert report_time({"SOURCE_DATE_EPOCH": "0"}) == "1970-01-01T00:00:00+00:00"
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    for env in ({}, {"SOURCE_DATE_EPOCH": ""}):
        got = datetime.datetime.fromisoformat(report_time(env))
        assert before <= got <= datetime.datetime.now(datetime.timezone.utc) and got.utcoffset().total_seconds() == 0


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def test_report_renders_in_headless_chromium(sample_report, tmp_path):
    """Debian's chromium draws the page: the screenshot is no blank page, and the figures' colours
    (the over-confidence red, the after-T blue) are in it — the inline SVGs were drawn."""
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium); .ci/run installs it on Debian")
    from PIL import Image

    out, _, _ = sample_report
    shot = tmp_path / "shot.png"
    profile = tmp_path / "profile"
    command = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
        f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1200,4600", out.as_uri(),
    ]
    subprocess.run(command, capture_output=True, timeout=180, env={**os.environ, "HOME": str(tmp_path)})
    assert shot.exists(), "chromium wrote no screenshot"
    image = np.asarray(Image.open(shot).convert("RGB")).astype(np.int16)
    assert image.shape[:2] == (4600, 1200)
    assert image.std() > 20  # not one flat colour
    not_white = (image < 235).any(axis=-1)
    assert not_white.mean() > 0.05  # text, tables and figures cover the page
    rows = np.flatnonzero(not_white.any(axis=1))
    assert rows.max() - rows.min() > 3000  # the whole report, not only its top

    def near(rgb, tol=30):
        return (np.abs(image - np.array(rgb)).max(axis=-1) <= tol).sum()

    assert near((0xD6, 0x27, 0x28)) > 500  # over-confidence hatching, the ECE curve
    assert near((0x1F, 0x77, 0xB4)) > 2000  # the after-T bars and the NLL curve
    assert near((0x5C, 0x5C, 0x5C), 6) > 2000  # the reliability diagrams' accuracy bars
