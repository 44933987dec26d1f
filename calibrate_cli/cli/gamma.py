"""``calib gamma``: γ*(p0) of Proposition 2 (Mukhoti et al. 2020), the focal-loss γ from which samples
with true-class probability ≥ p0 get a smaller gradient than under cross-entropy (docs/losses.md)."""

from __future__ import annotations

import click

from .._version import __version__
from . import render
from .options import FLOAT, Outputs, output_options

COLUMNS = [render.Column("p0"), render.Column("γ*(p0)")]
CSV_COLUMNS = [render.Column("p0"), render.Column("gamma")]
TITLE = "Smallest focal-loss γ whose gradient is below cross-entropy's wherever p ≥ p0 (Proposition 2)"


def gamma_payload(rows: list[tuple[float, float]]) -> dict:
    """The JSON document of ``calib gamma`` (docs/json-schema.md)."""
    return {
        "calib_version": __version__,
        "command": "gamma",
        "gammas": [{"p0": p0, "gamma": gamma} for p0, gamma in rows],
    }


def gamma_report(fmt: str, rows: list[tuple[float, float]]):
    if fmt == "json":
        return render.to_json(gamma_payload(rows))
    if fmt == "csv":
        return render.render_rows("csv", CSV_COLUMNS, [[render.csv_number(p), render.csv_number(g)] for p, g in rows])
    cells = [[f"{p:g}", f"{g:.4f}"] for p, g in rows]
    return render.render_rows(fmt, COLUMNS, cells, title=TITLE)


@click.command("gamma", context_settings={"ignore_unknown_options": True})
@click.argument("p0s", metavar="P0 [P0...]", nargs=-1, required=True, type=FLOAT)
@output_options
def gamma_command(p0s, fmt, output, force):
    """γ*(p0) of Proposition 2: the focal-loss γ that shrinks the gradient of every sample with
    true-class probability p ≥ p0 below cross-entropy's.

    The focal loss's gradient is cross-entropy's times g(p, γ) = (1 − p)^γ − γ p (1 − p)^(γ−1) log p;
    γ*(p0) solves g(p0, γ) = 1 with Lambert's W₋₁ and is 0 for p0 ≥ 0.5 (any γ ≥ 0 then). FLSD-53
    (--loss flsd53 in training) uses 5 below p = 0.2, where γ*(0.2) = 4.85, and 3 above
    (γ*(0.25) = 3.07). P0 must lie in (0, 1).

    \b
    Examples:
      calib gamma 0.2                       # 4.8506
      calib gamma 0.1 0.2 0.25 0.5          # one row each
      calib gamma 0.2 0.25 --format json
    """
    from ..training.focal_gamma import focal_gammas

    Outputs(force).report("--output", output).check()
    rows = focal_gammas(p0s)
    render.write_report(gamma_report(fmt, rows), output, force)
