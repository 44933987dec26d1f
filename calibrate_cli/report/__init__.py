"""The HTML calibration report of ``calib report`` (docs/report.md).

:func:`build_report` computes (arrays in, a :class:`CalibrationReport` out: a temperature fitted
on the validation set, the metrics of the test set before and after it, the curves of ECE and NLL
against T); :func:`render_html` (in :mod:`calibrate_cli.report.html`, which imports matplotlib for
the figures) writes it as one self-contained HTML page::

    from calibrate_cli.report import build_report, render_html

    report = build_report(val_logits, val_labels, test_logits, test_labels, bootstrap=1000)
    report.temperature, report.after.metrics["ece"], report.after.intervals["ece"]
    page = render_html(report)          # a str: write it to report.html
"""

from .core import CalibrationReport, InputFile, build_report

__all__ = ["CalibrationReport", "InputFile", "build_report", "render_html"]


def render_html(report, **kwargs) -> str:
    """The report as one self-contained HTML page (:func:`calibrate_cli.report.html.render_html`)."""
    from .html import render_html as _render

    return _render(report, **kwargs)
