"""``calib eval``'s diagnostics beyond one number (docs/diagnostics.md): --decompose, --bin-intervals,
--calibration-test and its gate --fail-p-below. Options, the core calls and their rendering; the maths is
in :mod:`calibrate_cli.diagnostics`."""

from __future__ import annotations

from dataclasses import dataclass

import click

from ..data.predictions import resolve_input_kind
from .options import PlainFloatRange, PlainIntRange, read_inputs

#: the most resamples --calibration-test draws (each is a pass over the N confidences)
MAX_TEST_RESAMPLES = 100_000


def diagnostics_options(func):
    """--decompose, --bin-intervals LEVEL, --calibration-test B and --fail-p-below ALPHA."""
    func = click.option(
        "--fail-p-below", "fail_p_below", metavar="ALPHA", default=None,
        type=PlainFloatRange(min=0, max=1, min_open=True, max_open=True),
        help="With --calibration-test: exit 1 when its p-value is below ALPHA (e.g. 0.05): the model is "
        "significantly miscalibrated.",
    )(func)
    func = click.option(
        "--calibration-test", "calibration_test", metavar="B", default=None, type=PlainIntRange(1, MAX_TEST_RESAMPLES),
        help="Test calibration: the p-value of the ECE under the calibrated null (outcomes drawn as "
        "Bernoulli(confidence), B resamples, seeded by --seed): p = (1 + #{ECE* ≥ ECE}) / (B + 1).",
    )(func)
    func = click.option(
        "--bin-intervals", "bin_intervals", metavar="LEVEL", default=None,
        type=PlainFloatRange(min=0, max=1, min_open=True, max_open=True),
        help="Clopper–Pearson intervals at LEVEL (e.g. 0.95) of each bin's accuracy: in the table, the JSON "
        "(bin_intervals) and the --bins CSV (accuracy_low, accuracy_high).",
    )(func)
    func = click.option(
        "--decompose", is_flag=True,
        help="Decompose the Brier and log scores: score = miscalibration − discrimination + uncertainty "
        "(CORP: PAV recalibration; top label and per class), and Murphy's binned Brier decomposition.",
    )(func)
    return func


@dataclass
class Diagnostics:
    """What the diagnostics options asked for and computed (None where not asked)."""

    decompositions: object = None
    calibration_test: object = None
    bin_intervals: object = None
    fail_p_below: float | None = None

    @property
    def wanted(self) -> bool:
        return any(v is not None for v in (self.decompositions, self.calibration_test, self.bin_intervals))

    def payload(self) -> dict:
        """The JSON keys (docs/diagnostics.md)."""
        out = {}
        if self.decompositions is not None:
            out["decompositions"] = self.decompositions.to_dict()
        if self.calibration_test is not None:
            test = self.calibration_test.to_dict()
            if self.fail_p_below is not None:
                test["gate"] = {"fail_p_below": self.fail_p_below, "passed": self.passed}
            out["calibration_test"] = test
        if self.bin_intervals is not None:
            out["bin_intervals"] = self.bin_intervals.to_dict()
        return out

    @property
    def passed(self) -> bool:
        return self.fail_p_below is None or self.calibration_test is None \
            or self.calibration_test.p_value >= self.fail_p_below

    def failure(self) -> str | None:
        """The failed gate's line for stderr, or None."""
        if self.passed:
            return None
        t = self.calibration_test
        return (f"calibration test failed: p = {t.p_value:.4g} < {self.fail_p_below:g} "
                f"(ECE {t.statistic:.4f}, {t.n_resamples} resamples; --fail-p-below {self.fail_p_below:g})")


def check_diagnostics(decompose, calibration_test, fail_p_below, bin_intervals, *, fmt, sharded, bins_csv) -> None:
    """Usage errors before any work."""
    if fail_p_below is not None and calibration_test is None:
        raise click.UsageError("--fail-p-below needs --calibration-test B")
    if sharded and (decompose or calibration_test):
        raise click.UsageError("--decompose and --calibration-test read every sample: evaluate one file, not shards")
    if fmt == "csv" and decompose:
        raise click.UsageError("--decompose shows in the table, Markdown and JSON formats (a CSV holds one table)")
    if fmt == "csv" and bin_intervals and not bins_csv:
        raise click.UsageError("--bin-intervals with --format csv needs --bins (the per-bin table)")


def compute_diagnostics(report, *, decompose, calibration_test, fail_p_below, bin_intervals, scores, labels, label_col,
                        calibrator, input_kind, n_bins, seed) -> Diagnostics:
    """The diagnostics asked for: the per-bin intervals from the report's bins; the decompositions and the
    test from the samples (read again, calibrated as the report's were)."""
    from .. import diagnostics as core

    out = Diagnostics(fail_p_below=fail_p_below)
    if bin_intervals is not None:
        out.bin_intervals = core.reliability_stats.bin_intervals(report.bins, bin_intervals)
    if not (decompose or calibration_test):
        return out
    found, label_array, labels_name = read_inputs(scores, labels, label_col)
    score_array = found.scores
    if calibrator is not None:
        input_kind = resolve_input_kind(score_array, input_kind, scores)
        score_array = calibrator.apply(score_array, input_kind, scores_name=scores)
        input_kind = calibrator.result_kind(input_kind)
    if decompose:
        out.decompositions = core.decompose(score_array, label_array, input_kind=input_kind, n_bins=n_bins,
                                            scores_name=scores, labels_name=labels_name)
    if calibration_test:
        conf, correct = core.top_label(score_array, label_array, input_kind=input_kind, scores_name=scores,
                                       labels_name=labels_name)
        out.calibration_test = core.calibration_test(conf, correct, n_bins=n_bins, n_resamples=calibration_test,
                                                     seed=seed)
    return out


def _num(value: float) -> str:
    return "inf" if value == float("inf") else f"{value:.4f}"


def rendered_with(rendered, diag: Diagnostics, fmt: str, *, report=None, payload=None, bins_csv: bool = False):
    """The rendered report (Rich tables or Markdown text) with the diagnostics' tables after it; the
    --bins CSV with the interval columns (JSON: the payload holds them already)."""
    from . import render
    from .options import calibration_text

    if fmt == "csv" and bins_csv and diag.bin_intervals is not None:
        calibration = (payload or {}).get("calibration")
        constant = {"calibration": calibration_text(calibration, prefix="")} if calibration else None
        return bins_csv_with_intervals(report, diag, constant)
    if not diag.wanted or fmt in ("json", "csv"):
        return rendered
    tables = []
    if diag.bin_intervals is not None:
        b = diag.bin_intervals
        rows = [[f"{'[' if i == 0 else '('}{r['lower']:.3f}, {r['upper']:.3f}]", str(r["count"]),
                 *(("", "", "") if r["accuracy"] is None else
                   (f"{r['accuracy']:.4f}", f"{r['accuracy_low']:.4f}", f"{r['accuracy_high']:.4f}"))]
                for i, r in enumerate(b.to_rows())]
        cols = [render.Column("bin", justify="left"), render.Column("count"), render.Column("accuracy"),
                render.Column("low"), render.Column("high")]
        tables.append(render.render_rows(fmt if fmt == "markdown" else "table", cols, rows,
                                         title=f"Accuracy per bin: {100 * b.level:g}% Clopper–Pearson intervals"))
    if diag.decompositions is not None:
        d = diag.decompositions
        rows = [[r["problem"], r["score"], _num(r["value"]), _num(r["miscalibration"]), _num(r["discrimination"]),
                 _num(r["uncertainty"])] for r in d.rows()]
        cols = [render.Column("problem", justify="left"), render.Column("score", justify="left"),
                render.Column("value"), render.Column("MCB"), render.Column("DSC"), render.Column("UNC")]
        m = d.murphy
        notes = [f"Murphy, top-label Brier on {m.n_bins} bins: {m.brier:.4f} = REL {m.reliability:.4f} − RES "
                 f"{m.resolution:.4f} + UNC {m.uncertainty:.4f} + WBV {m.within_bin_variance:.4f} − WBC "
                 f"{m.within_bin_covariance:.4f}"]
        tables.append(render.render_rows(fmt if fmt == "markdown" else "table", cols, rows, notes=notes,
                                         title="Score decompositions (CORP): value = MCB − DSC + UNC"))
    if diag.calibration_test is not None:
        t = diag.calibration_test
        rows = [["ECE", f"{t.statistic:.4f}", f"{t.null_mean:.4f}", f"{t.p_value:.4g}", str(t.n_resamples)]]
        cols = [render.Column("statistic", justify="left"), render.Column("value"), render.Column("null mean"),
                render.Column("p-value"), render.Column("resamples")]
        tables.append(render.render_rows(fmt if fmt == "markdown" else "table", cols, rows,
                                         title="Calibration test (null: outcomes ~ Bernoulli(confidence))"))
    if fmt == "markdown":
        return rendered + "".join("\n" + t for t in tables)
    return [*(rendered if isinstance(rendered, list) else [rendered]), *tables]


def bins_csv_with_intervals(report, diag: Diagnostics, constant: dict | None = None) -> str:
    """The --bins CSV with the Clopper–Pearson columns accuracy_low and accuracy_high."""
    from . import render

    constant = constant or {}
    names = (*render.BIN_CSV_COLUMNS, "accuracy_low", "accuracy_high")
    rows = []
    for i, (r, ci) in enumerate(zip(report.bins.to_rows(), diag.bin_intervals.to_rows())):
        rows.append([i, render.csv_number(r["lower"]), render.csv_number(r["upper"]), r["count"],
                     *(render.csv_number(r[c]) for c in render.BIN_CSV_COLUMNS[4:]),
                     render.csv_number(ci["accuracy_low"]), render.csv_number(ci["accuracy_high"]),
                     *constant.values()])
    return render.render_rows("csv", [render.Column(c) for c in (*names, *constant)], rows)
