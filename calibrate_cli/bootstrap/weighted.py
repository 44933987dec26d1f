"""The bootstrap of weighted samples: each drawn row carries its weight.

A resample draws N of the N rows with replacement (the same draws as the unweighted bootstrap:
positions in the stable order of increasing confidence); row i drawn c_i times counts c_i·w_i in
every sum, so the resample's metrics are those of the weights c·w
(:meth:`~calibrate_cli.metrics.weighted.WeightedColumns.sums`, N replaced by Σ c_i w_i). A resample
that draws only rows of weight 0 has no metric (NaN). With every weight 1 the multiplicities are
the unweighted bootstrap's, and so are the values (within the numeric contract).

The BCa interval's jackknife (:func:`weighted_jackknife`) leaves out the groups of
:func:`~calibrate_cli.bootstrap.jackknife.jackknife_groups` by setting their weights to 0 (a weight of
0 removes a row), so with every weight 1 it is the unweighted jackknife.
"""

from __future__ import annotations

import numpy as np

from ..metrics.registry import METRIC_NAMES
from ..metrics.weighted import WeightedColumns
from .jackknife import DEFAULT_JACKKNIFE_GROUPS, jackknife_groups

__all__ = ["WeightedResampler", "weighted_jackknife"]


class WeightedResampler:
    """An engine of :func:`~calibrate_cli.bootstrap.draws.run_resamples` for weighted samples:
    multiplicity rows times the weights, each row's metrics from its weighted sums."""

    n_side = 0

    def __init__(self, columns: WeightedColumns, w_sorted: np.ndarray, wanted):
        self.columns, self.w = columns, np.asarray(w_sorted, dtype=np.float64)
        self.wanted = list(wanted)
        self.n = self.n_padded = columns.n
        self.order, self.rank = columns.order, columns.rank

    def count(self, drawn: np.ndarray, w_row: np.ndarray, side_row: np.ndarray) -> None:
        """Row ← (times each sorted position was drawn) × its weight."""
        w_row[:] = np.bincount(drawn, minlength=self.n) * self.w

    def metrics(self, w: np.ndarray, side: np.ndarray) -> dict[str, np.ndarray]:
        """Every metric (NaN for those not wanted) of each row of weights ``w`` (b, N)."""
        out = {name: np.full(w.shape[0], np.nan) for name in METRIC_NAMES}
        for r in range(w.shape[0]):
            for name, value in self.columns.values(w[r], self.wanted).items():
                out[name][r] = value
        return out


def weighted_jackknife(columns: WeightedColumns, w_sorted: np.ndarray, wanted,
                       n_groups: int = DEFAULT_JACKKNIFE_GROUPS) -> dict[str, np.ndarray]:
    """{metric: (G,) values}, value g every metric of ``wanted`` with the weights of group g set to 0
    (``w_sorted``: the weights in the columns' confidence order); empty below two samples."""
    n = columns.n
    groups = jackknife_groups(n, n_groups) if n >= 2 else []
    out = {name: np.full(len(groups), np.nan) for name in wanted}
    for g, group in enumerate(groups):
        w = np.array(w_sorted, dtype=np.float64)
        w[columns.rank[group]] = 0.0
        for name, value in columns.values(w, list(wanted)).items():
            out[name][g] = value
    return out
