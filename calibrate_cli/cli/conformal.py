"""``calib conformal``: split conformal prediction sets fitted on a validation set (docs/conformal.md)."""

from __future__ import annotations

import click

from .._version import __version__
from ..conformal import (
    CONFORMAL_METHODS,
    DEFAULT_ALPHA,
    DEFAULT_K_REG,
    DEFAULT_LAMBDA,
    ConformalFit,
    coverage_report,
    fit_conformal,
    prediction_sets,
)
from . import render
from .options import (
    Outputs,
    PlainFloatRange,
    PlainIntRange,
    csv_options,
    labels_option,
    load_inputs,
    output_options,
    pair_inputs,
    probs_option,
)

#: set sizes shown one by one in the table; larger ones are merged into one row (the JSON has all)
SHOWN_SIZES = 10


def conformal_payload(fit: ConformalFit, coverage, inputs: dict, input_kind: str | None, warnings: list[str]) -> dict:
    """The JSON document of ``calib conformal`` (keys documented in docs/conformal.md)."""
    low, high = fit.coverage_bounds
    return {
        "calib_version": __version__,
        "command": "conformal",
        "inputs": {**inputs, "input_kind": input_kind or "logits"},
        "method": fit.method,
        "alpha": fit.alpha,
        "threshold": fit.threshold,
        "guarantee": {"low": low, "high": high},
        "fit": fit.to_dict(),
        "test": None if coverage is None else coverage.to_dict(),
        "warnings": warnings,
    }


def _percent(value) -> str:
    return "—" if value is None else f"{100 * value:.2f} %"


def fit_rows(fit: ConformalFit) -> list[tuple[str, str, object]]:
    """(name, shown, exact) of the fit's numbers."""
    low, high = fit.coverage_bounds
    method = fit.method + (f" (λ = {fit.lam:g}, k_reg = {fit.k_reg})" if fit.method == "raps" else "")
    method += f", randomized (seed {fit.seed})" if fit.randomized else ""
    return [
        ("method", method, fit.method),
        ("alpha", f"{fit.alpha:g}", fit.alpha),
        ("threshold", "+∞ (full sets)" if fit.full_sets else f"{fit.threshold:.6g}",
         float("inf") if fit.full_sets else fit.threshold),
        ("rank", f"{fit.rank} of n = {fit.n}", fit.rank),
        ("guarantee", f"[{_percent(low)}, {_percent(high)}] (mean coverage over draws)", None),
        ("guarantee_low", None, low),
        ("guarantee_high", None, high),
    ]


def coverage_rows(coverage) -> list[tuple[str, str, object]]:
    worst = coverage.min_class_coverage
    worst_class = None if worst is None else coverage.class_coverage.index(worst)
    return [
        ("coverage", _percent(coverage.coverage), coverage.coverage),
        ("min_class_coverage", f"{_percent(worst)} (class {worst_class})" if worst is not None else "—", worst),
        ("mean_size", f"{coverage.mean_size:.3f}", coverage.mean_size),
        ("empty_share", _percent(coverage.empty_share), coverage.empty_share),
    ]


def size_rows(coverage) -> list[list[str]]:
    """Set size → count and share; sizes above :data:`SHOWN_SIZES` merged into one row."""
    hist = coverage.size_histogram
    rows = [[str(s), str(c), _percent(c / coverage.n)] for s, c in enumerate(hist[: SHOWN_SIZES + 1]) if c]
    rest = sum(hist[SHOWN_SIZES + 1:])
    if rest:
        rows.append([f"> {SHOWN_SIZES}", str(rest), _percent(rest / coverage.n)])
    return rows


def render_conformal(fmt: str, fit: ConformalFit, coverage, title: str):
    """The report in ``fmt`` (table, markdown, csv): the fit, the test set's coverage and set sizes."""
    rows = fit_rows(fit) + (coverage_rows(coverage) if coverage is not None else [])
    if fmt == "csv":
        exact = [[name, "" if value is None else (render.csv_number(value) if isinstance(value, float) else value)]
                 for name, _, value in rows if name != "guarantee"]
        return render.render_rows("csv", [render.Column("quantity"), render.Column("value")], exact)
    columns = [render.Column("quantity", justify="left", style="bold"), render.Column("value", justify="left")]
    shown = [[name, text] for name, text, _ in rows if text is not None]
    tables = [render.render_rows(fmt, columns, shown, title=title)]
    if coverage is not None:
        sizes = [render.Column("set size"), render.Column("sets"), render.Column("share")]
        tables.append(render.render_rows(fmt, sizes, size_rows(coverage), title="Prediction set sizes (test set)"))
    return "\n".join(tables) if fmt == "markdown" else tables


@click.command("conformal")
@click.argument("val_scores", metavar="VAL_LOGITS")
@click.argument("val_labels", metavar="VAL_LABELS", required=False)
@click.argument("test_scores", metavar="[TEST_LOGITS", required=False)
@click.argument("test_labels", metavar="TEST_LABELS]", required=False)
@click.option("--alpha", type=PlainFloatRange(min=0, max=1, min_open=True, max_open=True), default=DEFAULT_ALPHA,
              show_default=True, help="Miscoverage α: each set holds the true label with probability ≥ 1 − α.")
@click.option("--method", type=click.Choice(CONFORMAL_METHODS), default="lac", show_default=True,
              help="Conformity score: lac = 1 − p_y (smallest sets); aps = the probability mass down to y "
              "(adaptive sets); raps = aps + λ · max(0, rank − k_reg) (shorter tails).")
@click.option("--lambda", "lam", type=PlainFloatRange(min=0), default=DEFAULT_LAMBDA, show_default=True,
              help="RAPS: the penalty λ per rank beyond --k-reg.")
@click.option("--k-reg", type=PlainIntRange(min=0), default=DEFAULT_K_REG, show_default=True,
              help="RAPS: the ranks free of penalty.")
@click.option("--randomized", is_flag=True,
              help="aps/raps: draw u ~ U(0, 1) per sample (score = mass above y + u · p_y): coverage "
              "closer to 1 − α, sets that depend on the draw (--seed).")
@click.option("--seed", type=PlainIntRange(min=0), default=0, show_default=True,
              help="With --randomized: the seed of the draws (the fit's and the test set's streams).")
@click.option("--save", "save_path", metavar="FIT.json",
              help="Save the fit as JSON (--force overwrites it): apply it with `calib eval --conformal FIT.json`.")
@probs_option()
@labels_option()
@csv_options
@output_options
def conformal_command(val_scores, val_labels, test_scores, test_labels, alpha, method, lam, k_reg, randomized, seed,
                      save_path, input_kind, label_col, fmt, output, force):
    """Fit conformal prediction sets on a validation set and measure their coverage on a test set.

    Split conformal prediction (Angelopoulos & Bates 2021): every validation sample gets a
    conformity score s(x, y) of its true label; the threshold q̂ is the ⌈(n + 1)(1 − α)⌉-th
    smallest of the n scores. A new sample's prediction set holds every class y with
    s(x, y) ≤ q̂, and contains the true label with probability ≥ 1 − α (and ≤ 1 − α + 1/(n + 1)
    for scores without ties) when validation and test samples are exchangeable. Below
    α = 1/(n + 1) no finite threshold exists: every set is the full set, with a warning.

    On TEST_LOGITS TEST_LABELS it reports the marginal coverage, the worst class's coverage
    (class-conditional coverage is not guaranteed), the mean set size, the share of empty sets
    and the histogram of set sizes. Files as in `calib eval`; logits go through the softmax.

    \b
    Examples:
      calib conformal val_logits.npy val_labels.npy test_logits.npy test_labels.npy
      calib conformal val.npy val_y.npy test.npy test_y.npy --alpha 0.05 --method aps
      calib conformal val.npy val_y.npy test.npy test_y.npy --method raps --lambda 0.01 --k-reg 5
      calib conformal val.npy val_y.npy test.npy test_y.npy --method aps --randomized --seed 1
      calib conformal val.npy val_y.npy --save sets.json   # then: calib eval test.npy test_y.npy --conformal sets.json
      calib conformal val_probs.npy val_y.npy test_probs.npy test_y.npy --probs --format json
      calib conformal val.parquet test.parquet --labels label   # the labels: a column of each file
    """
    pairs = pair_inputs([val_scores, val_labels, test_scores, test_labels], label_col,
                        "VAL_LOGITS VAL_LABELS [TEST_LOGITS TEST_LABELS]")
    if len(pairs) > 2:
        raise click.UsageError(f"{len(pairs)} scores files with --labels: give VAL_SCORES and at most TEST_SCORES")
    (val_scores, val_labels), (test_scores, test_labels) = pairs[0], pairs[1] if len(pairs) == 2 else (None, None)
    if method != "raps" and (lam != DEFAULT_LAMBDA or k_reg != DEFAULT_K_REG):
        raise click.UsageError(f"--lambda and --k-reg apply to --method raps, not {method}")
    if randomized and method == "lac":
        raise click.UsageError("--randomized applies to --method aps or raps (lac has no random part)")
    if seed != 0 and not randomized:
        raise click.UsageError("--seed seeds the draws of --randomized; add --randomized or drop --seed")
    Outputs(force).report("--output", output).report("--save", save_path).check()  # before any work
    import warnings as python_warnings

    from ..errors import CalibWarning

    val_array, val_y, val_labels_name = load_inputs(val_scores, val_labels, label_col)
    with python_warnings.catch_warnings(record=True) as caught:
        python_warnings.simplefilter("always", CalibWarning)
        fit = fit_conformal(val_array, val_y, alpha=alpha, method=method, input_kind=input_kind, lam=lam,
                            k_reg=k_reg, randomized=randomized, seed=seed, scores_name=val_scores,
                            labels_name=val_labels_name)
    warnings = [str(w.message) for w in caught if issubclass(w.category, CalibWarning)]
    inputs = {"fit": {"scores": val_scores, "labels": val_labels_name, "n": fit.n, "k": fit.k}}
    coverage = None
    if test_scores is not None:
        from ..data.predictions import as_predictions

        test_array, test_y, test_labels_name = load_inputs(test_scores, test_labels, label_col)
        test = as_predictions(test_array, test_y, input_kind, scores_name=test_scores, labels_name=test_labels_name)
        sets = prediction_sets(fit, test.scores, input_kind=test.input_kind, scores_name=test_scores)
        coverage = coverage_report(sets, test.labels)
        inputs["test"] = {"scores": test_scores, "labels": test_labels_name, "n": coverage.n, "k": coverage.k}

    render.warn(warnings)
    if save_path:
        from ..data.outputs import write_text

        write_text(save_path, render.to_json(fit.to_dict()), force=force)
        render.stderr_console().print(f"Saved the conformal fit to {save_path}", soft_wrap=True, markup=False)
    if fmt == "json":
        payload = conformal_payload(fit, coverage, inputs, input_kind, warnings)
        render.write_report(render.to_json(payload), output, force)
        return
    where = f"; test {test_scores} (N = {coverage.n})" if coverage is not None else ""
    title = f"Conformal prediction sets: fit on {val_scores} (n = {fit.n}, K = {fit.k}){where}"
    render.write_report(render_conformal(fmt, fit, coverage, title), output, force)
