"""The risk–coverage curve of selective prediction (Display pattern; matplotlib imported lazily).

``RiskCoverageDisplay.from_predictions(confidence, correct).plot(ax=None)`` draws the selective risk
against coverage (one point per distinct confidence, straight lines between them, as
:func:`~calibrate_cli.diagnostics.selective.aurc` integrates), the curve of a perfect ranking of the
same predictions (dotted) and the generalized risk (dashed, Traub et al. 2024); AURC and AUGRC in
the legend.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..diagnostics.selective import RiskCoverageCurve, aurc, augrc, e_aurc, risk_coverage

__all__ = ["RiskCoverageDisplay", "risk_coverage_figure"]

RISK_COLOR = "#d62728"
OPTIMAL_COLOR = "#5c5c5c"
GENERALIZED_COLOR = "#1f77b4"


def _optimal_points(n: int, errors: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(1, n + 1, dtype=np.float64)
    return i / n, np.maximum(0.0, i - (n - errors)) / i


@dataclass
class RiskCoverageDisplay:
    """A risk–coverage curve ready to draw; :meth:`plot` sets ``ax_`` and ``figure_`` and returns self."""

    curve: RiskCoverageCurve
    aurc: float
    e_aurc: float
    augrc: float
    label: str | None = None

    @classmethod
    def from_curve(cls, curve: RiskCoverageCurve, *, label: str | None = None) -> "RiskCoverageDisplay":
        return cls(curve=curve, aurc=aurc(curve), e_aurc=e_aurc(curve), augrc=augrc(curve), label=label)

    @classmethod
    def from_predictions(cls, confidence, correct, *, label: str | None = None) -> "RiskCoverageDisplay":
        return cls.from_curve(risk_coverage(confidence, correct), label=label)

    def plot(self, ax=None, *, generalized: bool = True, optimal: bool = True) -> "RiskCoverageDisplay":
        if ax is None:
            ax = _new_axes()
        c = self.curve
        x = np.r_[0.0, c.coverage]
        ax.plot(x, np.r_[c.risk[0], c.risk], color=RISK_COLOR, lw=1.8,
                label=f"selective risk (AURC {self.aurc:.4f}, E-AURC {self.e_aurc:.4f})")
        if optimal:
            ox, oy = _optimal_points(c.n, int(c.errors[-1]))
            ax.plot(np.r_[0.0, ox], np.r_[oy[0], oy], color=OPTIMAL_COLOR, lw=1.2, ls=":",
                    label="perfect ranking, same errors")
        if generalized:
            ax.plot(x, np.r_[0.0, c.generalized_risk], color=GENERALIZED_COLOR, lw=1.4, ls="--",
                    label=f"generalized risk (AUGRC {self.augrc:.4f})")
        top = max(float(c.risk.max()), 1e-3)
        ax.set_xlim(0.0, 1.0)
        ax.set_ylim(0.0, min(1.0, top * 1.1))
        ax.set_xlabel("Coverage (share of samples accepted, most confident first)")
        ax.set_ylabel("Risk (error)")
        from matplotlib.ticker import PercentFormatter

        ax.xaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=1 if top < 0.1 else 0))
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize="small", frameon=False)
        if self.label:
            ax.set_title(self.label, fontsize="medium")
        self.ax_, self.figure_ = ax, ax.figure
        return self


def _new_axes():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    return fig.add_subplot()


def risk_coverage_figure(display: RiskCoverageDisplay, *, title: str | None = None):
    """A figure with one risk–coverage panel (save with :func:`~calibrate_cli.plots.diagram.save_figure`)."""
    display.plot()
    if title:
        display.figure_.suptitle(title)
    return display.figure_
