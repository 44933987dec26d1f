"""``calib eval``'s selective prediction and conformal sets (docs/selective.md, docs/conformal.md):
--selective, --risk-coverage FILE and --conformal FIT.json. Options, the core calls and their
rendering; the maths is in :mod:`calibrate_cli.diagnostics.selective` and :mod:`calibrate_cli.conformal`."""

from __future__ import annotations

from dataclasses import dataclass

import click

from .options import read_inputs


def selective_options(func):
    """--selective, --risk-coverage FILE and --conformal FIT.json."""
    func = click.option(
        "--conformal", "conformal_path", metavar="FIT.json",
        help="Apply a conformal fit saved by `calib conformal --save FIT.json` to these samples: the coverage "
        "of its prediction sets (overall and per class) and their sizes.",
    )(func)
    func = click.option(
        "--risk-coverage", "risk_coverage_path", metavar="FILE",
        help="Draw the risk–coverage curve to FILE (.png, .svg, .pdf; --force overwrites it); implies --selective.",
    )(func)
    func = click.option(
        "--selective", is_flag=True,
        help="Selective prediction, ranking by the confidence max_k p_k: AURC, E-AURC, AUGRC (Traub et al. "
        "2024), the risk at 50/80/90/95% coverage and the coverage at 1/2/5% risk.",
    )(func)
    return func


@dataclass
class SelectiveExtras:
    """What --selective / --conformal computed (None where not asked)."""

    selective: object = None
    conformal_fit: object = None
    conformal_coverage: object = None
    conformal_path: str | None = None

    @property
    def wanted(self) -> bool:
        return self.selective is not None or self.conformal_fit is not None

    def payload(self) -> dict:
        """The JSON keys ``selective`` and ``conformal`` (docs/selective.md, docs/conformal.md)."""
        out = {}
        if self.selective is not None:
            out["selective"] = self.selective.to_dict()
        if self.conformal_fit is not None:
            low, high = self.conformal_fit.coverage_bounds
            out["conformal"] = {"file": self.conformal_path, "fit": self.conformal_fit.to_dict(),
                                "guarantee": {"low": low, "high": high}, **self.conformal_coverage.to_dict()}
        return out


def check_selective(selective, risk_coverage_path, conformal_path, *, fmt, sharded, calibrator, force):
    """Usage errors and the figure's path before any work; the conformal fit, read (or None)."""
    if not (selective or risk_coverage_path or conformal_path):
        return None
    if sharded:
        raise click.UsageError("--selective, --risk-coverage and --conformal read every sample: evaluate one file, "
                               "not shards")
    if fmt == "csv":
        raise click.UsageError("--selective and --conformal show in the table, Markdown and JSON formats "
                               "(a CSV holds one table)")
    if conformal_path and calibrator is not None:
        raise click.UsageError("--conformal applies its threshold to the scores it was fitted on: drop "
                               "--temperature/--calibrator, or fit `calib conformal` on calibrated scores")
    if risk_coverage_path:
        from .options import Outputs

        Outputs(force).figure("--risk-coverage", risk_coverage_path).check()
    if not conformal_path:
        return None
    from ..conformal import ConformalFit
    from ..data.outputs import read_json

    return ConformalFit.from_dict(read_json(conformal_path, what="a conformal fit (JSON)"), source=conformal_path)


def compute_selective(*, selective, risk_coverage_path, conformal_fit, conformal_path, scores, labels, label_col,
                      calibrator, input_kind) -> SelectiveExtras:
    """Read the samples again (calibrated as the report's were) and compute what was asked."""
    out = SelectiveExtras(conformal_path=conformal_path)
    if not (selective or risk_coverage_path or conformal_fit is not None):
        return out
    from ..data.predictions import as_predictions, resolve_input_kind

    found, label_array, labels_name = read_inputs(scores, labels, label_col)
    score_array = found.scores
    if calibrator is not None:
        input_kind = resolve_input_kind(score_array, input_kind, scores)
        score_array = calibrator.apply(score_array, input_kind, scores_name=scores)
        input_kind = calibrator.result_kind(input_kind)
    predictions = as_predictions(score_array, label_array, input_kind, scores_name=scores, labels_name=labels_name)
    if selective or risk_coverage_path:
        from ..diagnostics.selective import confidence_and_correct, selective_report

        out.selective = selective_report(*confidence_and_correct(predictions, None))
    if conformal_fit is not None:
        from ..conformal import coverage_report, prediction_sets

        sets = prediction_sets(conformal_fit, predictions.scores, input_kind=predictions.input_kind,
                               scores_name=scores)
        out.conformal_fit, out.conformal_coverage = conformal_fit, coverage_report(sets, predictions.labels)
    return out


def draw_risk_coverage(extras: SelectiveExtras, path: str, *, label: str, force: bool) -> None:
    from ..plots.diagram import escape_mathtext, save_figure
    from ..plots.selective import RiskCoverageDisplay, risk_coverage_figure
    from . import render
    from .plot import model_names

    display = RiskCoverageDisplay.from_curve(extras.selective.curve, label=escape_mathtext(model_names([label], ())[0]))
    written = save_figure(risk_coverage_figure(display), path, force=force)
    render.stderr_console().print(f"Wrote {written}", soft_wrap=True, markup=False)


def _pct(value) -> str:
    return "—" if value is None else f"{100 * value:.2f}%"


def selective_rows(report) -> list[list[str]]:
    rows = [["AURC", f"{report.aurc:.5f}", "∫ selective risk d coverage (Geifman et al. 2019)"],
            ["E-AURC", f"{report.e_aurc:.5f}", "AURC − AURC of a perfect ranking, same errors"],
            ["AUGRC", f"{report.augrc:.5f}", "∫ P(accepted and wrong) d coverage (Traub et al. 2024)"]]
    for c, p in report.at_coverage.items():
        rows.append([f"risk at {100 * c:g}% coverage", _pct(p.risk),
                     f"coverage {_pct(p.coverage)}, accept confidence ≥ {p.threshold:.6g}"])
    for r, p in report.at_risk.items():
        accept = "accept nothing" if p.threshold is None else f"risk {_pct(p.risk)}, confidence ≥ {p.threshold:.6g}"
        rows.append([f"coverage at {100 * r:g}% risk", _pct(p.coverage), accept])
    return rows


def conformal_rows(fit, coverage) -> list[list[str]]:
    low, high = fit.coverage_bounds
    worst = coverage.min_class_coverage
    method = fit.method + (f" (λ = {fit.lam:g}, k_reg = {fit.k_reg})" if fit.method == "raps" else "")
    return [
        ["method", method + (", randomized" if fit.randomized else "")],
        ["alpha", f"{fit.alpha:g} (guarantee [{_pct(low)}, {_pct(high)}], mean over draws)"],
        ["threshold", "+∞ (full sets)" if fit.full_sets else f"{fit.threshold:.6g}"],
        ["coverage", _pct(coverage.coverage)],
        ["min class coverage", "—" if worst is None else
         f"{_pct(worst)} (class {coverage.class_coverage.index(worst)})"],
        ["mean set size", f"{coverage.mean_size:.3f}"],
        ["empty sets", _pct(coverage.empty_share)],
    ]


def rendered_with_selective(rendered, extras: SelectiveExtras, fmt: str):
    """The rendered report (Rich tables or Markdown text) with the selective / conformal tables after it."""
    if not extras.wanted or fmt in ("json", "csv"):
        return rendered
    from . import render

    kind = fmt if fmt == "markdown" else "table"
    tables = []
    if extras.selective is not None:
        cols = [render.Column("selective prediction", justify="left", style="bold"), render.Column("value"),
                render.Column("definition", justify="left", style="dim", optional=True)]
        tables.append(render.render_rows(kind, cols, selective_rows(extras.selective),
                                         title="Selective prediction: accept the most confident samples"))
    if extras.conformal_fit is not None:
        cols = [render.Column("conformal sets", justify="left", style="bold"), render.Column("value", justify="left")]
        tables.append(render.render_rows(kind, cols, conformal_rows(extras.conformal_fit, extras.conformal_coverage),
                                         title=f"Conformal prediction sets from {extras.conformal_path}"))
    if fmt == "markdown":
        return rendered + "".join("\n" + t for t in tables)
    return [*(rendered if isinstance(rendered, list) else [rendered]), *tables]
