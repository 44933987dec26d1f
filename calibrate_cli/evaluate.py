"""``evaluate``: every metric of docs/metrics.md from one pass over the data — what ``calib eval`` reports."""

from __future__ import annotations

import dataclasses

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .engine.binning import BinStats, uniform_edges
from .engine.class_samples import check_class_sorted_size
from .errors import Advice, InputError
from .metrics.registry import METRIC_NAMES, METRICS, metric_spec, metric_values, sums_needed
from .engine.parallel import run_together, together
from .metrics.functional import (DEFAULT_N_BINS, summary_has, equal_mass_bins, metrics_from_summary,
                                 with_class_sorted)
from .data.predictions import InputKind, Predictions, as_predictions
from .engine.sorting import sort_by_confidence, sort_packed
from .engine.summary import PredictionSummary, SummaryRequest, check_compat, summarize, with_pass_sums

__all__ = [
    "EvalReport", "SummarizedData", "evaluate", "conventions", "device_report", "report_from_summary", "summarize_data",
    "with_optional_sums",
]


@dataclass(frozen=True)
class SummarizedData:
    """Validated predictions and their one-pass summary: where every computation over a data set
    starts (``evaluate``, the bootstrap, the jackknife), so the data are read and validated once."""

    predictions: Predictions
    summary: PredictionSummary

    def point(self, n_bins: int = DEFAULT_N_BINS) -> dict[str, float | None]:
        """Every metric's point value (:func:`~calibrate_cli.metrics.functional.metrics_from_summary`)."""
        return metrics_from_summary(self.summary, n_bins)


def summarize_data(
    scores,
    labels,
    *,
    input_kind: InputKind | None = None,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    scores_name: str = "scores",
    labels_name: str = "labels",
    metrics=None,
    columns: bool = True,
    device: str | None = None,
    classwise_max_k: int | None = None,
) -> SummarizedData:
    """Validate ``scores``/``labels`` (:func:`~calibrate_cli.data.predictions.as_predictions`) and make the one
    summary pass (:func:`~calibrate_cli.engine.summary.summarize`) on ``device``, asked for the sums of
    every metric (:func:`~calibrate_cli.metrics.registry.sums_needed`); ``columns`` False: the caller
    reads the metrics only (no resampling), so NLL, Brier and top-5 are kept as sums and the pass packs
    the keys of the one sort where the steps after it run at once.

    ``metrics``: names of metrics wanted besides the default ones (or "all"); each class's
    probabilities are sorted (ACE, classwise RMS/KS) only when one of them is among them.
    ``classwise_max_k``: beyond this many classes the classwise cells are made only when ``metrics``
    names a metric built from them (:func:`classwise_left_out`; :func:`evaluate` passes
    :data:`CLASSWISE_DEFAULT_MAX_K`); None: always made (the shards, the bootstrap's own callers)."""
    compat = check_compat(compat)
    predictions = as_predictions(scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name,
                                 check_values=False)  # checked by the summary pass, which reads the chunks anyway
    asked = _asked_names(metrics)
    if "class_samples" in sums_needed(METRIC_NAMES if asked == "all" else asked):  # before any work
        check_class_sorted_size(predictions.n, predictions.k)
    # classwise cells cost K·M per chunk: at large K only when asked (evaluate's default report)
    left_out = () if classwise_max_k is None else classwise_left_out(predictions.k, metrics, max_k=classwise_max_k)
    request = SummaryRequest(sums=sums_needed([name for name in METRIC_NAMES if name not in left_out]), columns=columns)
    summary = summarize(predictions, n_bins=n_bins, compat=compat, request=request, scores_name=scores_name,
                        device=device)
    predictions = dataclasses.replace(predictions, pending=None)
    return SummarizedData(predictions, with_optional_sums(summary, predictions, n_bins, metrics))

#: the most classes at which ``calib eval`` and :func:`evaluate` compute the classwise metrics of the
#: default set (classwise-ECE) unasked. Beyond, they are left out (with a note in ``warnings``) unless
#: named: their (K, M) cells cost K·M per row chunk, more than the chunk's own rows at K in the 10^5,
#: and a mean over K classes most of which have a handful of positives (or none) says little there.
#: 1024 keeps every image benchmark (ImageNet-1k: K = 1000) in the default report.
CLASSWISE_DEFAULT_MAX_K = 1024


def _asked_names(metrics) -> list[str] | str:
    """The metric names of a selection (None, "all", a name, a list or a {label: name} mapping)."""
    if metrics is None:
        return []
    if isinstance(metrics, str):
        return "all" if metrics == "all" else [metrics]
    items = metrics.values() if isinstance(metrics, Mapping) else metrics
    return [m for m in items if isinstance(m, str)]


def classwise_left_out(k: int, metrics=None, *, max_k: int | None = None) -> tuple[str, ...]:
    """The default metrics left out at ``k`` classes: those built from the classwise cells
    (classwise-ECE), when K > ``max_k`` (None: :data:`CLASSWISE_DEFAULT_MAX_K`) and ``metrics`` (the
    metrics asked for besides the defaults, or "all") does not name them; else ()."""
    max_k = CLASSWISE_DEFAULT_MAX_K if max_k is None else max_k
    asked = _asked_names(metrics)
    if k <= max_k or asked == "all":
        return ()
    return tuple(spec.name for spec in METRICS
                 if spec.by_default and "classwise_gap" in spec.needs and spec.name not in asked)


def left_out_note(k: int, names, *, asked: bool = False) -> str:
    """The one line saying which default metrics were left out at ``k`` classes and how to ask for them
    (``asked``: they were asked for, or K is small, but the summary has no classwise cells)."""
    shown = ", ".join(metric_spec(name).display_name for name in names)
    if asked or k <= CLASSWISE_DEFAULT_MAX_K:  # a summary made without its classwise cells (not by this module)
        return f"{shown} not computed: the summary holds no classwise statistics"
    return Advice(f"{shown} left out at K = {k} (> {CLASSWISE_DEFAULT_MAX_K} classes, where it costs K·M cells "
                  "and averages classes with few samples)", "classwise-metrics")


def with_optional_sums(summary: PredictionSummary, predictions: Predictions, n_bins: int, metrics) -> PredictionSummary:
    """``summary`` with what the wanted metrics that are not in the default pass need (each class's
    probabilities sorted, for ACE and the classwise RMS/KS errors)."""
    if metrics is None:
        return summary
    if isinstance(metrics, str):
        names = METRIC_NAMES if metrics == "all" else [metrics]
    else:
        items = metrics.values() if isinstance(metrics, Mapping) else metrics
        names = [m for m in items if isinstance(m, str)]
    if "class_samples" in sums_needed(names):
        summary = with_class_sorted(summary, predictions)
    return summary


def conventions(compat: str | None) -> dict[str, str]:
    """The binning and arithmetic conventions behind the numbers, for reports and JSON."""
    if compat:
        return {
            "compat": compat,
            "arithmetic": "float32 softmax and bin comparisons (reference code of Mukhoti et al. 2020)",
            "ece_bins": "equal-width (e_b, e_{b+1}] with float32 torch.linspace edges",
            "adaece_bins": "equal-mass, every bin open below: the minimum-confidence sample is dropped",
            "classwise_ece_classes": "mean over classes 0..max(label)",
        }
    return {
        "compat": None,
        "arithmetic": "float64 softmax and accumulation",
        "ece_bins": "equal-width (b/M, (b+1)/M], confidence 1.0 in the last bin",
        "adaece_bins": "equal-mass via np.interp over sorted confidences; bin 0 closed [e_0, e_1]; a confidence "
                       "within 2^-40 (relative) above an edge is on it (a tie split by rounding)",
        "classwise_ece_classes": "mean over all K score columns",
    }


@dataclass(frozen=True)
class EvalReport:
    """The result of :func:`evaluate`.

    metrics        name → value (fractions; None where undefined, e.g. top-5 with K ≤ 5)
    bins           equal-width per-bin statistics of the top-label confidence (ECE, MCE, diagrams)
    adaptive_bins  equal-mass per-bin statistics (AdaECE)
    classwise_ece_per_class  ECE_k for each class k
    warnings       things the user must know (e.g. an infinite NLL)
    intervals      metric → :class:`~calibrate_cli.bootstrap.ConfidenceInterval` (with ``bootstrap=B``)
    bootstrap      the bootstrap's settings (n_resamples, level, method, seed, device), or None
    device         where the summary pass ran: "cpu" (numpy), "cuda" or "torch-cpu"
    total_weight   Σw with sample weights (``evaluate(weights=...)``; N of the means), else None
    """

    n: int
    k: int
    n_bins: int
    input_kind: str
    compat: str | None
    metrics: dict[str, float | None]
    bins: BinStats
    adaptive_bins: BinStats
    classwise_ece_per_class: tuple[float, ...]
    warnings: tuple[str, ...] = field(default=())
    intervals: dict = field(default_factory=dict)
    bootstrap: dict | None = None
    device: str = "cpu"
    total_weight: float | None = None

    def to_dict(self) -> dict:
        """JSON-ready dict with the stable keys of docs/json-schema.md."""
        return {
            "n": self.n,
            "k": self.k,
            "n_bins": self.n_bins,
            "input_kind": self.input_kind,
            "conventions": conventions(self.compat),
            "metrics": dict(self.metrics),
            "intervals": {name: ci.to_dict() for name, ci in self.intervals.items()},
            "bins": {"ece": self.bins.to_rows(), "adaece": self.adaptive_bins.to_rows()},
            "classwise_ece_per_class": list(self.classwise_ece_per_class),
            "warnings": list(self.warnings),
            "bootstrap": self.bootstrap,
            "device": self.device,
        } | ({} if self.total_weight is None else {"total_weight": self.total_weight})

    # -- for people: a DataFrame, and the report in a terminal, a notebook or a Rich console ---------
    def _rows(self) -> list[tuple[str, str, str, str]]:
        """(name, display name, value as shown, interval as shown) of every metric worth a row
        (top-5 accuracy only when defined), fractions as percentages (the tables of ``calib eval``)."""
        rows = []
        for spec in METRICS:
            if spec.name not in self.metrics:  # an opt-in metric that was not asked for
                continue
            value = self.metrics[spec.name]
            if value is None and not spec.shown_when_undefined:
                continue
            ci = self.intervals.get(spec.name)
            interval = "" if ci is None else f"[{_shown(spec, ci.clipped_low)}, {_shown(spec, ci.clipped_high)}]{ci.marks}"
            rows.append((spec.name, spec.display_name, _shown(spec, value), interval))
        return rows

    def _notes(self) -> list[str]:
        """What the marks of the shown intervals mean (clipped to the metric's range, excludes its
        estimate), and which method each metric got when they differ."""
        from .bootstrap.intervals import interval_notes

        return interval_notes({n: ci for n, ci in self.intervals.items() if n in self.metrics})

    def _heading(self) -> str:
        heading = f"EvalReport: N = {self.n}, K = {self.k}, {self.n_bins} bins, {self.input_kind}"
        if self.total_weight is not None:
            heading += f", weights summing to {self.total_weight:g}"
        if self.compat:
            heading += f", compat {self.compat}"
        if self.bootstrap:
            from .bootstrap.intervals import method_label

            heading += (
                f"; {100 * self.bootstrap['level']:g}% {method_label(self.bootstrap['method'])} bootstrap intervals, "
                f"{self.bootstrap['n_resamples']} resamples"
            )
        return heading

    def __repr__(self) -> str:
        """The metrics as an aligned text table (the values of ``calib eval``; exact ones: ``metrics``).

        >>> import numpy as np
        >>> p = np.array([[0.75, 0.25], [0.25, 0.75]])   # 75 % sure of both, right once: ECE 25 %
        >>> evaluate(p, np.array([0, 0]), input_kind="probs", n_bins=4)  # doctest: +ELLIPSIS
        EvalReport: N = 2, K = 2, 4 bins, probs
          accuracy         50.00 %
          error            50.00 %
          ece              25.00 %
        ...
          nll               0.8370
          brier             0.6250
        ...
          warnings: 0
        """
        rows = self._rows()
        name_width = max(len(r[0]) for r in rows)
        value_width = max(len(r[2]) for r in rows)
        lines = [self._heading()]
        for name, _, value, interval in rows:
            lines.append(f"  {name:<{name_width}}  {value:>{value_width}}" + (f"  {interval}" if interval else ""))
        lines += [f"  {note}" for note in self._notes()]
        lines.append(f"  warnings: {len(self.warnings)}")
        lines += [f"    {w}" for w in self.warnings]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The metrics as an HTML table, for Jupyter notebooks."""
        from html import escape

        interval = bool(self.intervals)
        head = "<tr><th>metric</th><th>value</th>" + ("<th>interval</th>" if interval else "") + "<th></th></tr>"
        body = "".join(
            f"<tr><td>{escape(display)}</td><td style='text-align:right'>{escape(value)}</td>"
            + (f"<td>{escape(shown_interval)}</td>" if interval else "")
            + f"<td><code>{escape(name)}</code></td></tr>"
            for name, display, value, shown_interval in self._rows()
        )
        warnings = "".join(f"<li>{escape(w)}</li>" for w in self.warnings)
        notes = "".join(f"<br><small>{escape(n)}</small>" for n in self._notes())
        return (
            f"<div><strong>{escape(self._heading())}</strong><table>{head}{body}</table>{notes}"
            + (f"<ul>{warnings}</ul>" if warnings else "")
            + "</div>"
        )

    def __rich__(self):
        """The metrics as a Rich table (``rich.print(report)``, Rich's Jupyter display); rich is
        imported only here, when Rich itself asks for the table."""
        from rich.table import Table
        from rich.text import Text

        interval = bool(self.intervals)
        notes = self._notes()
        table = Table(title=self._heading(), title_justify="left", show_edge=False,
                      caption=Text("\n".join(notes)) if notes else None, caption_justify="left")
        table.add_column("metric", style="bold")
        table.add_column("value", justify="right")
        if interval:
            table.add_column("interval", justify="right")
        table.add_column("name", style="dim")
        for name, display, value, shown_interval in self._rows():
            cells = [display, value, *([shown_interval] if interval else []), name]
            table.add_row(*(Text(c) for c in cells))
        return table

    def to_frame(self):
        """The metrics as a pandas DataFrame: one row per metric (index ``metric``, every metric of
        ``metrics``), column ``value`` (fractions as fractions), and ``low``/``high`` with intervals.
        Needs pandas (``pip install pandas``, or the ``[pandas]`` extra); an ImportError saying so otherwise.

        >>> import numpy as np
        >>> frame = evaluate(np.array([[2.0, 0.0], [0.0, 1.0]]), np.array([0, 0])).to_frame()
        >>> frame.loc[["accuracy", "error"], "value"].tolist()
        [0.5, 0.5]
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "EvalReport.to_frame() needs pandas, which is not installed: pip install pandas "
                "(in a checkout of calib: pip install '.[pandas]'), or use report.to_dict()"
            ) from None
        names = list(self.metrics)
        data = {"value": [np.nan if self.metrics[n] is None else float(self.metrics[n]) for n in names]}
        if self.intervals:
            for end in ("low", "high"):
                data[end] = [getattr(self.intervals[n], end) if self.intervals.get(n) is not None else np.nan
                             for n in names]
        return pd.DataFrame(data, index=pd.Index(names, name="metric"))


def _shown(spec, value) -> str:
    """A metric's value as tables show it: a percentage with 2 decimals, else 4 decimals; — when undefined."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "—"
    if np.isinf(value):
        return "inf"
    return f"{100 * value:.2f} %" if spec.percent else f"{value:.4f}"


def evaluate(
    scores,
    labels,
    *,
    input_kind: InputKind | None = None,
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    scores_name: str = "scores",
    labels_name: str = "labels",
    bootstrap: int = 0,
    ci_level: float | None = None,
    ci_method: str | None = None,
    seed=None,
    device: str | None = None,
    progress=None,
    bootstrap_metrics=None,
    metrics=None,
    weights=None,
    weights_name: str = "weights",
) -> EvalReport:
    """Validate ``scores``/``labels`` and compute every calibration metric in one pass.

    ``scores``: (N, K) logits (default) or probabilities (``input_kind="probs"``), or a 1-D vector
    of binary scores. ``labels``: (N,) integers in [0, K) or one-hot (N, K). ``compat``: None
    (float64, the conventions of docs/metrics.md) or ``"focal-calibration"`` (the reference code's
    numbers). ``scores_name``/``labels_name`` name the inputs in error messages (e.g. file paths).

    ``bootstrap=B`` (B > 0) also puts a bootstrap interval on every metric (``report.intervals``),
    from the same validated data and summary pass: ``ci_level``, ``ci_method``, ``seed``,
    ``device`` and ``progress`` as in :func:`calibrate_cli.bootstrap.bootstrap` (None: its defaults);
    ``bootstrap_metrics``: its ``metrics`` (None: all but the per-sample KS-CE and SmoothECE, plus the
    ``metrics`` asked for; "all").
    ``metrics``: metrics wanted besides :data:`~calibrate_cli.metrics.registry.DEFAULT_METRICS` (e.g.
    ``["ace"]``, or "all"); ``report.metrics`` holds the defaults and these. Beyond
    :data:`CLASSWISE_DEFAULT_MAX_K` classes the defaults leave out classwise-ECE unless it is named
    here (its (K, M) cells are not even made); a line in ``report.warnings`` says so.
    ``device`` ("cpu", "cuda", "auto", "torch-cpu"; None: "cpu") also runs the summary pass (softmax,
    NLL, Brier, top-5, bins) there with torch, in float64, equal to the CPU's numbers to rounding
    (:mod:`calibrate_cli.engine.torch_pass`); ``report.device`` says where it ran. With a bootstrap the
    summary pass stays on the CPU: the resamples are drawn over the samples in confidence order, and
    confidences equal to rounding only could order ties differently — on the CPU every device draws
    the very same samples, so the intervals are the same on every device.
    ``weights``: (N,) sample weights ≥ 0, not all 0 (``weights_name`` names them in errors): sample i
    counts w_i times in every sum, N becomes Σw (:mod:`calibrate_cli.metrics.weighted`; whole-number
    weights equal repeated rows); a plain numpy path on the CPU, without the compat mode; the
    bootstrap then draws rows that carry their weights. ``report.total_weight`` is Σw.

    >>> import numpy as np
    >>> report = evaluate(np.array([[2.0, 0.0], [0.0, 1.0]]), np.array([0, 0]))
    >>> report.metrics["accuracy"], report.n, report.k
    (0.5, 2, 2)
    """
    if weights is not None:
        return _weighted_report(
            scores, labels, weights, input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=scores_name,
            labels_name=labels_name, weights_name=weights_name, bootstrap=bootstrap, ci_level=ci_level,
            ci_method=ci_method, seed=seed, device=device, progress=progress, bootstrap_metrics=bootstrap_metrics,
            metrics=metrics)
    if device not in (None, "cpu") and not bootstrap and check_compat(compat) is None:
        scores = as_predictions(scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name,
                                check_values=False)
        labels = None
        report = device_report(scores, device=device, n_bins=n_bins, metrics=metrics, scores_name=scores_name)
        if report is not None:
            return report
    data = summarize_data(
        scores, labels, input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=scores_name,
        labels_name=labels_name, metrics=_union(metrics, bootstrap_metrics if bootstrap else None),
        columns=bool(bootstrap),  # the bootstrap resamples the per-sample columns
        device=None if bootstrap else device, classwise_max_k=CLASSWISE_DEFAULT_MAX_K,
    )
    return report_from_summary(
        data.summary, input_kind=input_kind, n_bins=n_bins, scores_name=scores_name, predictions=data.predictions,
        bootstrap=bootstrap, ci_level=ci_level, ci_method=ci_method, seed=seed, device=device, progress=progress,
        bootstrap_metrics=bootstrap_metrics, metrics=metrics, summary_device=None if bootstrap else device,
        consume=True,  # the summary was made here and is dropped
    )


def device_report(predictions: Predictions, *, device: str, n_bins: int = DEFAULT_N_BINS, metrics=None,
                  scores_name: str = "scores") -> EvalReport | None:
    """The :class:`EvalReport` of validated (N, K) ``predictions`` held on the host (a memory-mapped
    file's too) from one pass on the torch ``device``
    (:func:`~calibrate_cli.engine.device_eval.host_metric_sums`: the rows stream there, only the sums
    come back), or None where that pass cannot make what is asked (a metric outside
    :data:`~calibrate_cli.engine.device_eval.DEVICE_METRICS` and ``DEVICE_EXTRAS``, a row reader,
    numpy's "cpu"): the summary pass then runs."""
    from .engine.device_eval import DEVICE_EXTRAS, DEVICE_METRICS, host_metric_sums
    from .engine.devices import array_ops, resolve_device

    resolved = resolve_device(device)
    scores = predictions.scores
    if resolved == "cpu" or not isinstance(scores, np.ndarray) or scores.dtype.kind != "f" or scores.ndim != 2:
        return None
    k = predictions.k
    left_out = classwise_left_out(k, metrics)
    asked = _asked_names(metrics)
    if asked == "all":
        return None
    names = [spec.name for spec in METRICS if (spec.by_default and spec.name not in left_out) or spec.name in asked]
    if any(name not in DEVICE_METRICS + DEVICE_EXTRAS for name in names):
        return None
    try:
        sums, mass_edges = host_metric_sums(scores, predictions.labels, device=array_ops(resolved).device,
                                            is_logits=predictions.input_kind == "logits", n_bins=n_bins, names=names)
    except InputError as exc:
        raise InputError(f"{scores_name}: {exc}") from None
    values = metric_values(sums, names)
    n, m = predictions.n, int(n_bins)
    width = BinStats(uniform_edges(m), sums.width.count[0], sums.width.sum_conf[0], sums.width.sum_correct[0], n)
    mass = None if sums.mass is None else BinStats(mass_edges, sums.mass.count[0], sums.mass.sum_conf[0],
                                                   sums.mass.sum_correct[0], n)
    warnings = [left_out_note(k, left_out)] if left_out else []
    n_inf = int(sums.nll_inf[0])
    if n_inf:
        warnings.append(f"{scores_name}: {n_inf} sample(s) give probability 0 to the true class: NLL is inf (not clipped)")
    per_class = () if sums.classwise_gap is None else np.abs(sums.classwise_gap[0]).sum(axis=-1) / n
    return EvalReport(
        n=n, k=k, n_bins=n_bins, input_kind=predictions.input_kind, compat=None,
        metrics={name: None if np.isnan(v[0]) else float(v[0]) for name, v in values.items()},
        bins=width, adaptive_bins=mass, classwise_ece_per_class=tuple(float(x) for x in per_class),
        warnings=tuple(warnings), intervals={}, bootstrap=None, device=resolved,
    )


def report_from_summary(
    summary: PredictionSummary,
    *,
    input_kind: InputKind | None = None,
    n_bins: int = DEFAULT_N_BINS,
    scores_name: str = "scores",
    predictions: Predictions | None = None,
    bootstrap: int = 0,
    ci_level: float | None = None,
    ci_method: str | None = None,
    seed=None,
    device: str | None = None,
    progress=None,
    bootstrap_metrics=None,
    metrics=None,
    summary_device: str | None = None,
    consume: bool = False,
) -> EvalReport:
    """The :class:`EvalReport` of one summary pass (of one data set, or of merged shards:
    :mod:`calibrate_cli.engine.shards`). ``bootstrap=B`` also needs the validated ``predictions``;
    ``metrics`` as :func:`evaluate`'s (the opt-in classwise metrics need the ``predictions``, or a
    summary that holds their sorted classes). ``summary_device``: where the summary pass ran
    (recorded; None: "cpu"). ``consume`` (no bootstrap): the caller drops ``summary`` afterwards, so
    its confidences may be sorted in place (:func:`~calibrate_cli.metrics.functional.summary_sums`): one (N,)
    float64 array less at the peak, the same numbers."""
    compat = summary.compat
    if bootstrap and bootstrap_metrics is None and metrics is not None:  # the metrics asked for get intervals
        from .bootstrap.selection import with_asked

        bootstrap_metrics = with_asked(metrics)
    # what the scores were taken as: the validated predictions say; else stated, or logits (scores that
    # looked like probabilities were refused when unstated)
    input_kind = predictions.input_kind if predictions is not None else (input_kind or "logits")
    if predictions is not None:
        summary = with_optional_sums(summary, predictions, n_bins, _union(metrics, bootstrap_metrics if bootstrap else None))
    # one path: the equal-width bins and in-order sums the pass made (else from the columns of a merged
    # summary); AdaECE's edges selected (no sort); the one sort (KS-CE, SmoothECE) of the keys the pass
    # packed, beside the bins where the machine runs both at once, or, for a summary dropped after
    # (``consume``), of its own confidences in place by the metrics (no (N,) copy)
    consume = consume and not bootstrap
    conf, correct, keys = summary.confidences, summary.correct, summary.sort_keys
    if keys is not None and consume:  # sorted in place: only a summary dropped after
        sort = lambda: sort_packed(keys)  # noqa: E731
    else:
        sort = lambda: None if consume else sort_by_confidence(conf, correct)  # noqa: E731
    # the bins and in-order sums read the confidences in sample order, beside the sort (of the keys, or
    # of a copy): nothing is sorted in place before the metrics below
    ordered, mass, summary = run_together(sort, lambda: equal_mass_bins(conf, correct, n_bins, compat=compat),
                                          lambda: with_pass_sums(summary, n_bins),
                                          threads=None if together(summary.n) else 1)
    width = summary.width
    # the default metrics built from the classwise cells: left out unasked at K > CLASSWISE_DEFAULT_MAX_K
    # (whether or not the pass made the cells: shards and streams make them), and wherever they are absent
    asked = _union(metrics, bootstrap_metrics if bootstrap else None)
    left_out = classwise_left_out(summary.k, asked) if summary.classwise is not None else tuple(
        spec.name for spec in METRICS if spec.by_default and "classwise_gap" in spec.needs)
    names = None if not left_out else [
        spec.name for spec in METRICS if spec.name not in left_out
        and (spec.by_default or all(summary_has(summary, f) for f in spec.needs))]
    metrics = metrics_from_summary(summary, n_bins, width=width, mass=mass, ordered=ordered,
                                   in_order=summary.in_order, consume=consume, names=names)
    del ordered
    warnings = [left_out_note(summary.k, left_out, asked=not classwise_left_out(summary.k, asked))] if left_out else []
    if summary.totals is not None:
        n_inf = summary.totals.nll_inf
    else:
        n_inf = int(np.isinf(summary.nll).sum())
    if n_inf:
        warnings.append(
            f"{scores_name}: {n_inf} sample(s) give probability 0 to the true class: NLL is inf (not clipped)"
        )
    intervals, settings = {}, None
    if bootstrap:
        if predictions is None:
            raise InputError("the bootstrap needs the samples themselves, not only their summary")
        data = SummarizedData(predictions, summary)
        intervals, settings = _bootstrap(
            data, metrics, n_bins, bootstrap, ci_level, ci_method, seed, device, progress, bootstrap_metrics
        )
    per_class = () if left_out else summary.classwise.calibration_error()
    return EvalReport(
        n=summary.n,
        k=summary.k,
        n_bins=n_bins,
        input_kind=input_kind,
        compat=compat,
        metrics=metrics,
        bins=width,
        adaptive_bins=mass,
        classwise_ece_per_class=tuple(float(x) for x in per_class),
        warnings=tuple(warnings),
        intervals=intervals,
        bootstrap=settings,
        device=_resolved(summary_device),
    )


def _union(a, b):
    """The metric names of two selections (None: none besides the defaults; "all"; lists)."""
    if a is None or b is None:
        return b if a is None else a
    if "all" in (a, b):
        return "all"
    return [*a, *b]


def _resolved(device: str | None) -> str:
    if device is None or device == "cpu":
        return "cpu"
    from .engine.devices import resolve_device

    return resolve_device(device)


def _bootstrap(data, point, n_bins, n_resamples, level, method, seed, device, progress, metrics=None):
    """Intervals of every metric on the already summarised data, and the settings used."""
    from .bootstrap import DEFAULT_CI_LEVEL, DEFAULT_CI_METHOD, DEFAULT_SEED, bootstrap_prepared
    from .engine.devices import DEFAULT_DEVICE, resolve_device

    settings = {
        "n_resamples": n_resamples,
        "level": DEFAULT_CI_LEVEL if level is None else level,
        "method": DEFAULT_CI_METHOD if method is None else method,
        "seed": DEFAULT_SEED if seed is None else seed,
        "device": DEFAULT_DEVICE if device is None else device,
    }
    intervals = bootstrap_prepared(data, point, n_bins=n_bins, progress=progress, metrics=metrics, **settings)
    return intervals, settings | {"device": resolve_device(settings["device"])}


def _weighted_report(scores, labels, weights, *, input_kind, n_bins, compat, scores_name, labels_name, weights_name,
                     bootstrap, ci_level, ci_method, seed, device, progress, bootstrap_metrics, metrics) -> EvalReport:
    """:func:`evaluate` with sample weights: the summary pass's per-sample columns, then the weighted
    sums of :class:`~calibrate_cli.metrics.weighted.WeightedColumns` (a numpy path on the CPU)."""
    from .metrics.registry import BOOTSTRAP_DEFAULT
    from .metrics.weighted import check_names, check_weights, weighted_columns

    if check_compat(compat):
        raise InputError(f"{weights_name}: the compat mode reproduces the reference code, which has no sample weights",
                         remedy="no-compat")
    if device not in (None, "cpu", "auto"):
        raise InputError(f"{weights_name}: sample weights are summed with numpy on the CPU, not on {device}",
                         remedy="cpu-device")
    predictions = as_predictions(scores, labels, input_kind, scores_name=scores_name, labels_name=labels_name,
                                 check_values=False)  # checked by the summary pass
    w = check_weights(weights, predictions.n, name=weights_name)
    asked = _union(metrics, bootstrap_metrics if bootstrap else None)
    left_out = classwise_left_out(predictions.k, asked)
    asked_names = _asked_names(asked)
    names = [spec.name for spec in METRICS if spec.name not in left_out and (
        spec.by_default or asked_names == "all" or spec.name in asked_names)]
    boot_names = []
    if bootstrap:
        from .bootstrap.selection import split_metrics, with_asked

        chosen = bootstrap_metrics if bootstrap_metrics is not None else (
            with_asked(_asked_names(metrics)) if metrics is not None else list(BOOTSTRAP_DEFAULT))
        builtin, custom = split_metrics(chosen)
        if custom:
            raise InputError(f"{weights_name}: custom metric functions take no sample weights; "
                             "name built-in metrics for the bootstrap")
        boot_names = [n for n in builtin if n not in left_out]
    check_names([*names, *boot_names], w, weights_name)
    predictions, summary, columns = weighted_columns(predictions, n_bins, sums_needed([*names, *boot_names]),
                                                     scores_name=scores_name)
    w_sorted = w[columns.order]
    point = columns.values(w_sorted, names)
    point = {name: None if np.isnan(v) else v for name, v in point.items()}
    total = float(np.sum(w_sorted))
    sums = columns.sums(w_sorted)
    width = columns.bin_stats(w_sorted)
    mass = columns.bin_stats(w_sorted, columns.mass_edges(w_sorted, total))
    warnings = [left_out_note(predictions.k, left_out)] if left_out else []
    n_inf = int(np.count_nonzero(columns.nll_inf & (w_sorted > 0)))
    if n_inf:
        warnings.append(f"{scores_name}: {n_inf} sample(s) of weight > 0 give probability 0 to the true class: "
                        "NLL is inf (not clipped)")
    per_class = () if sums.classwise_gap is None else np.abs(sums.classwise_gap[0]).sum(axis=-1) / total
    intervals, settings = {}, None
    if bootstrap:
        from .bootstrap import DEFAULT_CI_LEVEL, DEFAULT_CI_METHOD, DEFAULT_SEED, bootstrap_prepared

        settings = {
            "n_resamples": bootstrap,
            "level": DEFAULT_CI_LEVEL if ci_level is None else ci_level,
            "method": DEFAULT_CI_METHOD if ci_method is None else ci_method,
            "seed": DEFAULT_SEED if seed is None else seed,
        }
        full_point = point | {n: None if np.isnan(v) else v
                              for n, v in columns.values(w_sorted, boot_names).items() if n not in point}
        intervals = bootstrap_prepared(SummarizedData(predictions, summary), full_point, n_bins=n_bins,
                                       progress=progress, metrics=boot_names, weighted=(columns, w_sorted),
                                       **settings)
        settings |= {"device": "cpu"}
    return EvalReport(
        n=summary.n, k=summary.k, n_bins=n_bins, input_kind=predictions.input_kind, compat=None, metrics=point,
        bins=width, adaptive_bins=mass, classwise_ece_per_class=tuple(float(x) for x in per_class),
        warnings=tuple(warnings), intervals=intervals, bootstrap=settings, device="cpu", total_weight=total,
    )
