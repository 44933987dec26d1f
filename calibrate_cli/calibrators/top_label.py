"""Top-label histogram binning (Gupta & Ramdas 2022, "Top-label calibration and multiclass-to-binary
reductions", ICLR; their ``HB_toplabel``).

With p = softmax(z), c = argmax_k p_k (lowest index on ties) and the top-label confidence p_c, the
fitting samples predicted c are binned on p_c into m_c = ⌊n_c / P⌋ equal-mass bins (P points per bin,
default 50, as the authors' code): the sorted p_c cut into m_c groups as ``numpy.array_split``
(the first n_c mod m_c groups one longer), the upper edge of each group but the last its largest
value, bins (e_{b−1}, e_b] (a tie with an edge is in the lower bin; repeated edges are merged). The
calibrated top-label confidence is the bin's accuracy ĉ = (1/|B|) Σ_{i∈B} [y_i = c]. A class predicted
on fewer than P fitting samples (m_c = 0: the authors leave it uncalibrated) uses the shared,
class-agnostic binning of all N fitting samples' p_c against [y_i = c_i] (⌊N / P⌋ bins; N < P refused).

The output keeps the argmax: row i gets q_c = ĉ and q_j = (1 − ĉ) p_j / Σ_{l≠c} p_l for j ≠ c (the
rest spread in proportion to the original probabilities; uniformly if they are all 0), with ĉ first
raised to s/(1 + s), s = max_{j≠c} p_j / Σ_{l≠c} p_l — where c ties the runner-up — and then by ulps
until c is the argmax of q (lowest index on ties). Saved as ``{"method": "top_label", "k": K,
"top_label": {"points_per_bin": P, "shared": {"edges", "values"}, "classes": [{"edges", "values"} × K]}}``
(M − 1 inner edges and M values; a class on the shared binning has empty lists). The fit needs each
row's prediction and confidence only, read from the scores by row chunks; the map is applied a row
chunk at a time.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from .base import FitData, FitInfo, ProbabilityCalibrator, json_number, json_numbers, nll_by_rows, probabilities_of

__all__ = ["DEFAULT_POINTS_PER_BIN", "TopLabelHistogramBinning", "equal_mass_binning"]

#: fitting samples per bin, as ``HB_toplabel(points_per_bin=50)`` of the authors' code
DEFAULT_POINTS_PER_BIN = 50


def equal_mass_binning(conf: np.ndarray, correct: np.ndarray, n_bins: int,
                       weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(inner edges, bin accuracies) of ``n_bins`` equal-mass bins of ``conf``: the sorted values cut as
    ``numpy.array_split``, edges the groups' maxima (repeats merged), bins (e_{b−1}, e_b]. ``weights``
    (whole numbers): those of the rows repeated by their weights (weighted counts, ranks of the repeats)."""
    if weights is None:
        ordered = np.sort(conf)
        total, at = ordered.size, ordered.__getitem__
        largest = ordered[-1]
    else:
        order = np.argsort(conf, kind="stable")
        ordered, cum = conf[order], np.cumsum(weights[order])
        total = int(round(float(cum[-1])))
        top = int(np.flatnonzero(weights[order] > 0)[-1])
        largest = ordered[top]

        def at(ranks):  # the value at each rank of the repeated rows
            return ordered[np.minimum(np.searchsorted(cum, ranks, side="right"), top)]
    sizes = np.full(n_bins, total // n_bins)
    sizes[: total % n_bins] += 1
    edges = np.unique(at(np.cumsum(sizes)[:-1] - 1))
    if edges.size and edges[-1] >= largest:  # the last group all tied with its edge: no last bin
        edges = edges[:-1]
    bins = np.searchsorted(edges, conf, side="left")
    w = np.ones(conf.shape[0]) if weights is None else weights
    count = np.bincount(bins, minlength=edges.size + 1) if weights is None else np.bincount(
        bins, weights=w, minlength=edges.size + 1)
    hits = np.bincount(bins, weights=correct.astype(np.float64) * (1.0 if weights is None else w),
                       minlength=edges.size + 1)
    return edges, hits / count  # every bin holds its edge's sample: no count is 0


def _check_binning(value, what: str, *, may_be_empty: bool) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(value, dict) or not isinstance(value.get("edges"), list) or not isinstance(value.get("values"), list):
        raise InputError(f'{what} must be an object {{"edges": [M − 1 numbers], "values": [M numbers]}}')
    if may_be_empty and value["values"] == [] and value["edges"] == []:
        return np.zeros(0), np.zeros(0)
    values = json_numbers(value["values"], f"{what} values")
    edges = [json_number(v, f"{what} edges[{i}]") for i, v in enumerate(value["edges"])]
    if len(edges) != len(values) - 1:
        raise InputError(f"{what}: {len(values)} values need {len(values) - 1} edges, got {len(edges)}")
    if any(not 0 <= v <= 1 for v in values):
        raise InputError(f"{what}: values must be probabilities in [0, 1]")
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise InputError(f"{what}: edges must be increasing")
    return np.asarray(edges, dtype=np.float64), np.asarray(values, dtype=np.float64)


class TopLabelHistogramBinning(ProbabilityCalibrator):
    """Top-label histogram binning, per predicted class, argmax kept (see the module docstring)."""

    name = "top_label"
    shift_invariant = True  # a map of softmax(z): the same for logits and log-probabilities
    takes_weights = True  # whole-number weights: the repeated rows' bins

    def __init__(self, shared=None, classes=None, *, points_per_bin: int = DEFAULT_POINTS_PER_BIN):
        if isinstance(points_per_bin, bool) or not isinstance(points_per_bin, (int, np.integer)) or points_per_bin < 1:
            raise InputError(f"Expected `points_per_bin` to be an integer larger than 0, but got {points_per_bin!r}")
        if (shared is None) != (classes is None):
            raise InputError("top-label binning needs both the shared and the per-class binnings (or neither)")
        self.points_per_bin = int(points_per_bin)
        self.shared_ = shared  # (edges, values)
        self.classes_ = classes  # K × (edges, values); empty arrays: the shared binning
        if classes is not None:
            self.k = len(classes)

    def _fit(self, data: FitData, progress) -> FitInfo:
        w = data.weights
        if w is not None and not np.all(w == np.round(w)):
            raise InputError(f"{data.scores_name}: top-label binning takes whole-number sample weights only (its "
                             "bins are groups of points of the repeated rows)")
        n = data.n if w is None else int(round(data.total_weight))  # the points: Σw with weights
        if n < self.points_per_bin:
            raise InputError(
                f"{data.scores_name}: top-label binning with {self.points_per_bin} points per bin needs at least "
                f"{self.points_per_bin} fitting samples, got {n}; use fewer points per bin"
            )
        pred, conf = np.empty(data.n, dtype=np.int64), np.empty(data.n)
        for rows in data.row_chunks():  # per row: the prediction and its confidence, read by row chunks
            p = probabilities_of(data.rows(rows))
            pred[rows] = np.argmax(p, axis=1)
            conf[rows] = p[np.arange(p.shape[0]), pred[rows]]
        correct = pred == data.labels
        shared = equal_mass_binning(conf, correct, n // self.points_per_bin, w)
        classes, fallback = [], []
        by_class = np.argsort(pred, kind="stable")  # each class's rows, in their order: O(N log N), not O(N·K)
        starts = np.searchsorted(pred[by_class], np.arange(data.k + 1))
        for c in range(data.k):
            mine = by_class[starts[c]:starts[c + 1]]
            points = int(mine.shape[0]) if w is None else int(round(float(np.sum(w[mine]))))
            n_bins = points // self.points_per_bin
            if n_bins == 0:
                classes.append((np.zeros(0), np.zeros(0)))
                fallback.append(c)
            else:
                classes.append(equal_mass_binning(conf[mine], correct[mine], n_bins, None if w is None else w[mine]))
            if progress is not None:
                progress(c + 1, data.k)
        self.shared_, self.classes_, self.k = shared, classes, data.k
        warnings = ()
        if fallback:
            warnings = (f"{len(fallback)} of {data.k} classes predicted on fewer than {self.points_per_bin} fitting "
                        f"samples use the shared top-label binning (classes {_ranges(fallback)})",)
        solver = {"points_per_bin": self.points_per_bin, "shared_bins": int(shared[1].size),
                  "bins": [int(values.size) for _, values in classes], "shared_classes": fallback}
        return FitInfo(self.objectives[0], nll_by_rows(data, self._proba), nll_by_rows(data),
                       data.n, data.k, solver, warnings=warnings)

    @property
    def label(self) -> str:
        return f"top-label histogram binning ({self.points_per_bin} points per bin)"

    def top_label_confidence(self, conf: np.ndarray, pred: np.ndarray) -> np.ndarray:
        """ĉ of top-label confidences ``conf`` predicted ``pred``: the bin's accuracy, before the floor."""
        out = np.empty(conf.shape[0])
        for c in np.unique(pred):  # the classes predicted here, not all K
            mine = pred == c
            edges, values = self.classes_[c]
            if values.size == 0:
                edges, values = self.shared_
            out[mine] = values[np.searchsorted(edges, conf[mine], side="left")]
        return out

    def _proba(self, z: np.ndarray) -> np.ndarray:
        p = probabilities_of(z)
        n, k = p.shape
        rows = np.arange(n)
        pred = np.argmax(p, axis=1)
        c_hat = self.top_label_confidence(p[rows, pred], pred)
        share = p.copy()
        share[rows, pred] = 0.0
        rest = share.sum(axis=1, keepdims=True)
        share = np.where(rest > 0, share / np.where(rest > 0, rest, 1.0), 1.0 / (k - 1))
        share[rows, pred] = 0.0
        top_share = share.max(axis=1)
        c_hat = np.maximum(c_hat, top_share / (1.0 + top_share))  # where c ties the runner-up
        q = (1.0 - c_hat)[:, None] * share
        q[rows, pred] = c_hat
        bad = np.argmax(q, axis=1) != pred
        while bad.any():  # rounding, or a tie lost to a lower index: raise ĉ by one ulp
            c_hat[bad] = np.nextafter(c_hat[bad], 2.0)
            q[bad] = (1.0 - c_hat[bad])[:, None] * share[bad]
            q[bad, pred[bad]] = c_hat[bad]
            bad = np.argmax(q, axis=1) != pred
        return q

    def get_params(self):
        if self.classes_ is None:
            return None
        as_dict = lambda b: {"edges": b[0].tolist(), "values": b[1].tolist()}  # noqa: E731
        return {"points_per_bin": self.points_per_bin, "shared": as_dict(self.shared_),
                "classes": [as_dict(b) for b in self.classes_]}

    def parameter_rows(self) -> list[tuple[str, float]]:
        """(name, value) rows: ``top_label_points_per_bin``, ``top_label_shared_edges_0``, …,
        ``top_label_class_2_values_1``, … (a class on the shared binning has none)."""
        if self.classes_ is None:
            return []
        rows = [(f"{self.name}_points_per_bin", float(self.points_per_bin))]
        for prefix, (edges, values) in [("shared", self.shared_),
                                        *((f"class_{c}", b) for c, b in enumerate(self.classes_))]:
            rows += [(f"{self.name}_{prefix}_edges_{i}", float(v)) for i, v in enumerate(edges)]
            rows += [(f"{self.name}_{prefix}_values_{i}", float(v)) for i, v in enumerate(values)]
        return rows

    @classmethod
    def _from_params(cls, params, k):
        if not isinstance(params, dict) or not isinstance(params.get("classes"), list):
            raise InputError(f'"{cls.name}" must be an object {{"points_per_bin": P, "shared": {{…}}, "classes": [K × {{…}}]}}')
        points = json_number(params.get("points_per_bin"), f"{cls.name} points_per_bin", positive=True)
        if points != math.floor(points):
            raise InputError(f"{cls.name} points_per_bin must be a whole number, got {points!r}")
        shared = _check_binning(params.get("shared"), f"{cls.name} shared", may_be_empty=False)
        classes = [_check_binning(b, f"{cls.name} classes[{c}]", may_be_empty=True)
                   for c, b in enumerate(params["classes"])]
        if len(classes) < 2 or (k is not None and k != len(classes)):
            raise InputError(f"{cls.name} has {len(classes)} classes but \"k\" is {k} (K ≥ 2)")
        return cls(shared, classes, points_per_bin=int(points))


def _ranges(values: list[int]) -> str:
    """0, 1, 2, 5 → "0–2, 5"."""
    parts, start = [], values[0]
    for a, b in zip(values, [*values[1:], None]):
        if b != a + 1:
            parts.append(str(start) if start == a else f"{start}–{a}")
            start = b
    return ", ".join(parts)
