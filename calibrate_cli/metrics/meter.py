"""``Meter``: the metrics of :func:`~calibrate_cli.evaluate.evaluate`, accumulated batch by batch in an
evaluation loop (docs/meter.md: a PyTorch loop, Lightning, the Hugging Face Trainer).

Each :meth:`Meter.update` makes one pass over its batch and keeps only the batch's sufficient sums
(:class:`~calibrate_cli.metrics.registry.MetricSums`, batch of one: the equal-width bins, #correct,
Σconf, Σ NLL, #infinite NLL, Σ Brier, #top-5, the s99 counts), added in float64 to the running ones:

- torch tensors on a GPU stay there: :func:`~calibrate_cli.engine.device_eval.device_batch` reduces
  the batch there and only those sums (a few dozen floats) come to the host;
- numpy arrays and CPU tensors (a view; on the CPU the compiled loops beat torch's eager pass), and
  tensors in the compat mode (copied to the host) take the summary pass of
  :func:`~calibrate_cli.evaluate.evaluate` (:func:`~calibrate_cli.engine.summary.summarize`).

What is not a sum is kept only when a metric asked for needs it: the per-sample top-label confidence
and correctness (9 bytes a sample, device tensors for device batches, concatenated at :meth:`compute`)
for AdaECE (equal-mass edges of all N confidences), KS-CE and SmoothECE (the sorted samples); the
classwise (K, M) cells (Σ over batches) for classwise-ECE. On a device both come from the same pass
as the sums; the classwise cells are copied to the host per batch (K × M floats). At :meth:`compute` AdaECE's edges are selected on the device
(:func:`~calibrate_cli.engine.sorting.order_statistics`) unless KS-CE or SmoothECE is
asked for too, whose sort runs on the host (the confidences copied there once).

Memory: O(M) for the sums, K × M classwise cells, and 9 bytes a sample when AdaECE, KS-CE or
SmoothECE is asked for (the default: every metric of :func:`~calibrate_cli.evaluate.evaluate`).
:meth:`Meter.compute` gives the :class:`~calibrate_cli.evaluate.EvalReport` of the concatenated
batches within the numeric contract (docs/conventions.md: the batches' sums are added in batch order).

:meth:`Meter.all_reduce` (``torch.distributed``): the sums and dense classwise cells all-reduced, the
kept confidences all-gathered in rank order, so every rank then holds the meter of all ranks' samples.
"""

from __future__ import annotations

import math

import numpy as np

from ..data.predictions import as_predictions
from ..engine.binning import BinStats, SparseBinStats, assign_bins, equal_mass_edges_of, torch_bin_sums, uniform_edges
from ..engine.sorting import sort_by_confidence, tie_tolerant
from ..engine.summary import SummaryRequest, check_compat, merge_classwise, summarize
from ..errors import InputError
from ..evaluate import EvalReport, classwise_left_out, left_out_note
from .functional import DEFAULT_N_BINS, equal_mass_bins, summary_sums
from .registry import (DEFAULT_METRICS, METRICS, BinSums, MetricSums, WeightedSamples, metric_spec, metric_values,
                       sums_needed)

__all__ = ["Meter"]

#: the scalar sums of :class:`MetricSums` a meter adds up (each a float; None where not computed)
_SCALARS = ("correct", "conf", "nll_inf", "brier", "top5", "s99", "s99_correct")
#: the sums every batch's pass makes, whatever is asked (cheap: the equal-width bins, the in-order sums)
_PASS_SUMS = frozenset({"width", "correct", "conf", "s99", "s99_correct"})
#: the sums a metric may need to be computed from each batch's sums alone
_PLAIN_SUMS = _PASS_SUMS | {"nll", "nll_inf", "brier", "top5"}
#: Σ NLL is also kept times 2^-64 (exact scaling): its mean stays finite where the plain sum overflows
_NLL_SMALL = 2.0 ** -64


def _is_tensor(x) -> bool:
    return type(x).__module__.startswith("torch")


def _host_array(x) -> np.ndarray:
    """A numpy view or copy of ``x``: a torch tensor is detached and copied to the host (float16 and
    bfloat16 upcast to float32, exactly); anything else through ``np.asarray``."""
    if _is_tensor(x):
        x = x.detach()
        if x.is_floating_point() and x.element_size() < 4:
            x = x.float()  # numpy has no bfloat16; the upcast is exact
        return x.cpu().numpy()
    return x if isinstance(x, np.ndarray) else np.asarray(x)


def _integer_vector(labels) -> bool:
    """Whether ``labels`` are a 1-D vector of integers (a tensor, or what numpy reads as one)."""
    if _is_tensor(labels):
        return labels.ndim == 1 and not (labels.is_floating_point() or labels.is_complex()) \
            and str(labels.dtype) != "torch.bool"
    array = labels if isinstance(labels, np.ndarray) else np.asarray(labels)
    return array.ndim == 1 and array.dtype.kind in "iu"


def _totals(sums: MetricSums) -> dict:
    """The running-total form of one batch's sums: the equal-width bins, the scalars as floats."""
    out = {"count": np.asarray(sums.width.count[0], dtype=np.int64),
           "sum_conf": np.asarray(sums.width.sum_conf[0], dtype=np.float64),
           "sum_correct": np.asarray(sums.width.sum_correct[0], dtype=np.float64)}
    for name in _SCALARS:
        value = getattr(sums, name)
        out[name] = None if value is None else float(value[0])
    if sums.nll is None:
        out["nll"] = out["nll_small"] = None
    else:  # Σ −log p_iy, and the same × 2^-64 (a float product: inf, not an error, where it overflows)
        out["nll"] = float(sums.nll[0]) * sums.nll_scale
        out["nll_small"] = float(sums.nll[0]) * (sums.nll_scale * _NLL_SMALL)
    return out


def _added(a: dict, b: dict) -> dict:
    return {name: None if a[name] is None or b[name] is None else a[name] + b[name] for name in a}


class Meter:
    """Calibration metrics over many batches: ``update(scores, labels)`` per batch, ``compute()`` for
    the :class:`~calibrate_cli.evaluate.EvalReport` that :func:`~calibrate_cli.evaluate.evaluate` gives on
    the concatenated batches.

    ``scores``/``labels`` as :func:`~calibrate_cli.evaluate.evaluate` takes them, numpy arrays or torch
    tensors: float scores and integer labels as tensors are reduced on the scores' device in float64
    (labels given elsewhere are moved there; only the sums come back). ``input_kind``: "logits" or
    "probs" for every batch; None: the first batch's, as :func:`~calibrate_cli.evaluate.evaluate`
    resolves it (logits, refusing scores that look like probabilities). ``metrics``: the metrics to
    report (names of :data:`~calibrate_cli.metrics.registry.DEFAULT_METRICS`); None: those of
    :func:`~calibrate_cli.evaluate.evaluate`. Only what they need is kept (e.g. ``["error", "ece",
    "nll"]``: O(M) sums, no per-sample data); the report then holds those metrics, and its
    ``adaptive_bins`` (no bins) and ``classwise_ece_per_class`` (empty) only when AdaECE and
    classwise-ECE are among them. ``compat="focal-calibration"`` computes on the host. Tensors on the
    CPU take the host pass too (a view, no copy: the compiled CPU loops), unless ``device="torch-cpu"``
    (the torch pass a GPU runs, on the CPU: for tests, as :func:`~calibrate_cli.evaluate.evaluate`'s).

    >>> import numpy as np
    >>> meter = Meter(n_bins=4)
    >>> meter.update(np.array([[2.0, 0.0]]), np.array([0])).update(np.array([[0.0, 1.0]]), np.array([0]))
    Meter(n_bins=4, n=2)
    >>> meter.compute().metrics["accuracy"]
    0.5
    """

    def __init__(self, n_bins: int = DEFAULT_N_BINS, *, input_kind: str | None = None,
                 compat: str | None = None, metrics=None, device: str | None = None) -> None:
        self.n_bins = int(uniform_edges(n_bins).shape[0] - 1)  # checks n_bins
        if input_kind not in (None, "logits", "probs"):
            raise InputError(f"Expected `input_kind` to be 'logits' or 'probs', but got {input_kind!r}")
        self.input_kind = input_kind
        self.compat = check_compat(compat)
        if metrics is not None:
            metrics = [metrics] if isinstance(metrics, str) else list(metrics)
            unknown = [m for m in metrics if m not in DEFAULT_METRICS]
            if unknown or not metrics:
                raise InputError(f"a meter reports {', '.join(DEFAULT_METRICS)}; not {', '.join(map(str, unknown))}"
                                 if unknown else "a meter needs at least one metric")
            metrics = tuple(spec.name for spec in METRICS if spec.name in metrics)
        self.metrics = metrics
        if device not in (None, "torch-cpu"):
            raise InputError(f"Expected `device` to be None or 'torch-cpu', but got {device!r} (a batch is reduced "
                             "on the device its tensors are on)")
        self.device = device
        self.reset()

    def __repr__(self) -> str:
        return f"Meter(n_bins={self.n_bins}, n={self.n})"

    @property
    def n(self) -> int:
        """The number of samples seen so far."""
        return self._n

    def reset(self) -> "Meter":
        """Forget every batch (e.g. at the start of an epoch)."""
        self._n, self._k, self._kind, self._batches = 0, None, None, 0
        self._names: tuple[str, ...] | None = None  # the metrics reported (known with K)
        self._sums: dict | None = None  # the running totals (:func:`_totals`)
        self._edges: np.ndarray | None = None  # the equal-width edges
        self._classwise: BinStats | SparseBinStats | None = None
        self._columns: list = []  # (confidences, correctness) per batch: numpy arrays or device tensors
        self._max_label = -1  # the compat mode averages classwise-ECE over classes 0..max label
        self._device = "cpu"
        return self

    # ------------------------------------------------------------------------------------- updates

    def _names_at(self, k: int) -> tuple[str, ...]:
        """The metrics reported at K = ``k`` classes (fixed by the first batch: evaluate's defaults leave
        classwise-ECE out at large K)."""
        if self._names is not None:
            return self._names
        left_out = classwise_left_out(k) if self.metrics is None else ()
        return tuple(n for n in (self.metrics or DEFAULT_METRICS) if n not in left_out)

    def update(self, scores, labels) -> "Meter":
        """Summarise one batch: (B, K) logits or probabilities (or (B,) binary scores) and (B,) labels."""
        where = f"batch {self._batches + 1}"
        kind = self.input_kind or self._kind
        k = (int(scores.shape[1]) if scores.ndim == 2 else 2) if hasattr(scores, "ndim") else None
        if k is not None and self._k is not None and k != self._k:
            raise InputError(f"{where}: K = {k} classes, earlier batches K = {self._k}")
        if self._on_device(scores, labels):
            sums, columns, classwise, kind, device = self._device_batch(scores, labels, kind, where)
            max_label = -1
        else:
            sums, columns, classwise, kind, k, max_label = self._host_batch(scores, labels, kind, where)
            device = "cpu"
        if self._k is not None and k != self._k:  # (scores that are no array: known after the pass)
            raise InputError(f"{where}: K = {k} classes, earlier batches K = {self._k}")
        if self._kind is not None and kind != self._kind:
            raise InputError(f"{where}: scores read as {kind}, earlier batches as {self._kind}: give "
                             "Meter(input_kind=...)")
        self._add(sums, columns, classwise, kind, k, max_label, device)
        return self

    def _on_device(self, scores, labels) -> bool:
        """Whether the batch takes the device pass: float tensors off the CPU (on the CPU too with
        ``device="torch-cpu"``) with integer labels, outside the compat mode."""
        return (_is_tensor(scores) and (scores.device.type != "cpu" or self.device == "torch-cpu")
                and self.compat is None and scores.is_floating_point() and _integer_vector(labels))

    def _host_batch(self, scores, labels, kind, where):
        """The summary pass of :func:`~calibrate_cli.evaluate.evaluate` on the host, asked for the sums."""
        predictions = as_predictions(_host_array(scores), _host_array(labels), kind, scores_name=f"{where} scores",
                                     labels_name=f"{where} labels", check_values=False)
        needed = sums_needed(self._names_at(predictions.k))
        keep = bool(needed & {"mass", "samples"})
        # "mass" for "samples": the confidences kept, no sort keys packed (the sort runs at compute())
        wanted = _PASS_SUMS | (needed - {"samples"}) | ({"mass"} if keep else set())
        summary = summarize(predictions, n_bins=self.n_bins, compat=self.compat,
                            request=SummaryRequest(sums=wanted, columns=False), scores_name=f"{where} scores")
        # the batch's sums alone (no sort, no classwise gap): the metrics that need nothing else
        sums = summary_sums(summary, self.n_bins, [spec.name for spec in METRICS if spec.needs <= wanted & _PLAIN_SUMS])
        columns = (summary.confidences, summary.correct) if keep else None
        max_label = int(predictions.labels.max()) if self.compat else -1
        self._edges = summary.width.edges if self._edges is None else self._edges
        return sums, columns, summary.classwise, predictions.input_kind, predictions.k, max_label

    def _device_batch(self, scores, labels, kind, where):
        """The device pass (:func:`~calibrate_cli.engine.device_eval.device_batch`) on the scores' device:
        the sums, and from the same pass the confidences and classwise cells when asked for."""
        import torch

        from ..engine.device_eval import device_batch
        from ..engine.devices import TorchOps

        x = scores.detach()
        y = labels.detach().to(x.device) if _is_tensor(labels) else torch.as_tensor(np.asarray(labels), device=x.device)
        k = int(x.shape[1]) if x.ndim == 2 else 2
        asked = self._names_at(k)
        needed = sums_needed(asked)
        # asked for the sums alone: the confidences and classwise cells are this meter's to keep (below)
        names = [n for n in asked if metric_spec(n).needs <= _PLAIN_SUMS]
        keep, classwise_wanted = bool(needed & {"mass", "samples"}), "classwise_gap" in needed
        try:
            sums, columns, cells = device_batch(x, y, input_kind=kind, n_bins=self.n_bins, names=names, rows=keep,
                                                cells=classwise_wanted)
        except InputError as error:
            raise InputError(f"{where}: {error.message}", remedy=error.remedy) from None
        kind = kind or "logits"  # unstated: logits (scores that look like probabilities were refused)
        edges = uniform_edges(self.n_bins)
        classwise = _class_stats(cells, edges, sums.n, k) if classwise_wanted else None
        self._edges = edges if self._edges is None else self._edges
        return sums, columns, classwise, kind, TorchOps(x.device).name

    def _add(self, sums: MetricSums, columns, classwise, kind, k, max_label, device) -> None:
        totals = _totals(sums)
        self._sums = totals if self._sums is None else _added(self._sums, totals)
        if columns is not None:
            self._columns.append(columns)
        if classwise is not None:
            self._classwise = classwise if self._classwise is None else merge_classwise(
                [self._classwise, classwise], self._n + sums.n, k)
        if self._n == 0:
            self._device = device
        self._n += sums.n
        self._names = self._names_at(k)
        self._k, self._kind, self._batches = k, kind, self._batches + 1
        self._max_label = max(self._max_label, max_label)

    def merge(self, other: "Meter") -> "Meter":
        """Add ``other``'s batches after this meter's (the same bins, compat mode and metrics); returns self."""
        if other.n_bins != self.n_bins or other.compat != self.compat:
            raise InputError(f"cannot merge a meter of {other.n_bins} bins (compat {other.compat}) into one of "
                             f"{self.n_bins} bins (compat {self.compat})")
        if other.metrics != self.metrics:  # (``device`` may differ: it picks a pass, not a result)
            raise InputError("cannot merge meters asked for different metrics")
        if self._kind is not None and other._kind is not None and other._kind != self._kind:
            raise InputError(f"cannot merge a meter of {other._kind} into one of {self._kind}")
        if other._n == 0:
            return self
        if self._k is not None and other._k != self._k:
            raise InputError(f"cannot merge a meter of K = {other._k} classes into one of K = {self._k}")
        if self._n == 0:
            self._names, self._edges, self._device = other._names, other._edges, other._device
        self._sums = other._sums if self._sums is None else _added(self._sums, other._sums)
        self._columns = self._columns + other._columns
        if other._classwise is not None:
            self._classwise = other._classwise if self._classwise is None else merge_classwise(
                [self._classwise, other._classwise], self._n + other._n, other._k)
        self._n += other._n
        self._k, self._kind = other._k, self._kind or other._kind
        self._batches += other._batches
        self._max_label = max(self._max_label, other._max_label)
        return self

    # ------------------------------------------------------------------------------------- compute

    def _joined_columns(self):
        """The kept (confidences, correctness) of every batch, concatenated once (then kept so)."""
        if len(self._columns) > 1:
            if all(_is_tensor(c) for c, _ in self._columns) and len({c.device for c, _ in self._columns}) == 1:
                import torch

                self._columns = [(torch.cat([c for c, _ in self._columns]), torch.cat([r for _, r in self._columns]))]
            else:
                self._columns = [(np.concatenate([_host_array(c) for c, _ in self._columns]),
                                  np.concatenate([_host_array(r) for _, r in self._columns]))]
        return self._columns[0]

    def _sorted_sums(self, needed: frozenset):
        """(equal-mass BinStats | None, WeightedSamples | None) of the kept confidences."""
        if not needed & {"mass", "samples"}:
            return None, None
        conf, correct = self._joined_columns()
        if _is_tensor(conf) and "samples" not in needed:  # AdaECE alone: its edges selected on the device
            return _device_mass(conf, correct, self.n_bins), None
        conf, correct = _host_array(conf), _host_array(correct)
        ordered = sort_by_confidence(conf, correct)  # not in place: the columns stay in sample order
        mass = equal_mass_bins(conf, correct, self.n_bins, compat=self.compat, sorted_confidences=ordered[0]) \
            if "mass" in needed else None
        return mass, WeightedSamples(ordered[0], ordered[1], None) if "samples" in needed else None

    def compute(self) -> EvalReport:
        """The :class:`~calibrate_cli.evaluate.EvalReport` of every sample seen (InputError before any)."""
        if self._n == 0:
            raise InputError("the meter has seen no samples: call update(scores, labels) first")
        n, k, s, needed = self._n, self._k, self._sums, sums_needed(self._names)
        mass, samples = self._sorted_sums(needed)
        one = lambda v: None if v is None else np.array([v], dtype=np.float64)  # noqa: E731
        nll, nll_scale = s["nll"], 1.0
        if nll is not None and math.isinf(nll):  # finite terms whose sum overflows: kept × 2^-64 too
            nll, nll_scale = s["nll_small"], 1.0 / _NLL_SMALL
        gap = None
        if self._classwise is not None and "classwise_gap" in needed:
            if isinstance(self._classwise, SparseBinStats):  # Σ_b |gap| per class, as the summary's metrics do
                gap = (self._classwise.calibration_error() * n)[:, None]
            else:
                gap = self._classwise.sum_correct - self._classwise.sum_conf
            if self.compat:  # the reference code averages over classes 0..max(label)
                gap = gap[: self._max_label + 1]
            gap = gap[None]
        sums = MetricSums(
            n=n, width=BinSums(s["count"][None], s["sum_conf"][None], s["sum_correct"][None]),
            correct=one(s["correct"]), conf=one(s["conf"]),
            mass=None if mass is None else BinSums(mass.count[None], mass.sum_conf[None], mass.sum_correct[None]),
            nll=one(nll), nll_scale=nll_scale, nll_inf=one(s["nll_inf"]), brier=one(s["brier"]), top5=one(s["top5"]),
            s99=one(s["s99"]), s99_correct=one(s["s99_correct"]), classwise_gap=gap, samples=samples,
        )
        metrics = {name: None if math.isnan(float(v[0])) else float(v[0])
                   for name, v in metric_values(sums, self._names).items()}
        left_out = classwise_left_out(k) if self.metrics is None else ()
        warnings = [left_out_note(k, left_out)] if left_out else []
        n_inf = int(s["nll_inf"] or 0)
        if n_inf:
            warnings.append(f"scores: {n_inf} sample(s) give probability 0 to the true class: NLL is inf (not clipped)")
        per_class = () if gap is None else self._classwise.calibration_error()
        empty = BinStats(edges=np.zeros(1), count=np.zeros(0, dtype=np.int64), sum_conf=np.zeros(0),
                         sum_correct=np.zeros(0), n=n)
        return EvalReport(
            n=n, k=k, n_bins=self.n_bins, input_kind=self._kind, compat=self.compat, metrics=metrics,
            bins=BinStats(edges=self._edges, count=s["count"], sum_conf=s["sum_conf"], sum_correct=s["sum_correct"],
                          n=n),
            adaptive_bins=empty if mass is None else mass,
            classwise_ece_per_class=tuple(float(x) for x in per_class), warnings=tuple(warnings),
            device=self._device,
        )

    # ---------------------------------------------------------------------------- torch.distributed

    def all_reduce(self, group=None) -> "Meter":
        """Make this meter (on every rank of ``group``) the meter of all ranks' samples, in rank order:
        the sums and dense classwise cells all-reduced (equal to one process's up to the order of float64
        additions), the kept confidences all-gathered. Call it on every rank; every rank must have seen
        at least one batch. Tensors travel on CUDA with the NCCL backend, else on the CPU."""
        import torch
        import torch.distributed as dist

        if self._n == 0:
            raise InputError("all_reduce: this rank's meter has seen no samples")
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" \
            else torch.device("cpu")
        world = dist.get_world_size(group)
        s, m = self._sums, self.n_bins
        # the sums: one float64 vector (counts < 2^53 are exact), summed; absent sums travel as 0
        flat = np.concatenate([s["count"].astype(np.float64), s["sum_conf"], s["sum_correct"],
                               [0.0 if s[name] is None else s[name] for name in _SCALARS + ("nll", "nll_small")],
                               [float(self._n)]])
        total = torch.from_numpy(flat).to(device)
        dist.all_reduce(total, group=group)
        total = total.cpu().numpy()
        sums = {"count": total[:m].astype(np.int64), "sum_conf": total[m:2 * m], "sum_correct": total[2 * m:3 * m]}
        for j, name in enumerate(_SCALARS + ("nll", "nll_small")):
            sums[name] = None if s[name] is None else float(total[3 * m + j])
        n = int(total[-1])
        # the compat mode's largest label (max), and whether every rank's classwise cells are dense (min)
        dense = isinstance(self._classwise, BinStats)
        flags = torch.tensor([self._max_label, -int(dense)], dtype=torch.int64, device=device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=group)
        self._max_label, dense = int(flags[0].item()), flags[1].item() == -1
        if self._columns:
            self._columns = [_all_gathered(torch, dist, self._joined_columns(), device, world, group)]
        if self._classwise is not None:
            if dense:
                parts = []
                for array in (self._classwise.count, self._classwise.sum_conf, self._classwise.sum_correct):
                    t = torch.from_numpy(np.ascontiguousarray(array)).to(device)
                    dist.all_reduce(t, group=group)
                    parts.append(t.cpu().numpy())
                self._classwise = BinStats(edges=self._classwise.edges, count=parts[0], sum_conf=parts[1],
                                           sum_correct=parts[2], n=n)
            else:  # sparse cells somewhere: every rank's gathered and merged in rank order
                everyone = [None] * world
                dist.all_gather_object(everyone, self._classwise, group=group)
                self._classwise = merge_classwise(everyone, n, self._k)
        self._sums, self._n = sums, n
        return self


def _class_stats(stats, edges: np.ndarray, n: int, k: int) -> BinStats | SparseBinStats:
    """One batch's classwise cells (:func:`~calibrate_cli.engine.binning.class_bin_statistics`' tuple)."""
    if isinstance(stats[0], str):
        _, keys, count, sum_p, sum_y = stats
        return SparseBinStats(edges=edges, n=n, n_classes=k, keys=keys, counts=count, sums_conf=sum_p,
                              sums_correct=sum_y)
    count, sum_p, sum_y = stats
    return BinStats(edges=edges, count=count, sum_conf=sum_p, sum_correct=sum_y, n=n)


def _device_mass(conf, correct, n_bins: int) -> BinStats:
    """The equal-mass bins of the confidences ``conf`` (a device tensor): the edges from their order
    statistics selected on the device, the bins' sums there (the device pass's AdaECE)."""
    import torch

    from ..engine.sorting import order_statistics

    n = int(conf.shape[0])
    edges = equal_mass_edges_of(n, n_bins, lambda ranks: order_statistics(conf, ranks))
    idx = assign_bins(conf, torch.as_tensor(tie_tolerant(edges), dtype=torch.float64, device=conf.device))
    count, sum_conf, sum_correct = torch_bin_sums(idx[:, None], conf[:, None], correct[:, None], n_bins)
    return BinStats(edges=edges, count=count[0].cpu().numpy().astype(np.int64), sum_conf=sum_conf[0].cpu().numpy(),
                    sum_correct=sum_correct[0].cpu().numpy(), n=n)


def _all_gathered(torch, dist, columns, device, world: int, group):
    """Every rank's (confidences, correctness), concatenated in rank order: tensors on this rank's
    device where they were tensors, else numpy arrays (confidences in their dtype)."""
    conf, correct = columns
    here = conf.device if _is_tensor(conf) else None
    dtype = None if here is not None else conf.dtype
    block = torch.stack([torch.as_tensor(conf).to(device, torch.float64),
                         torch.as_tensor(correct).to(device, torch.float64)], dim=1)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([block.shape[0]], dtype=torch.int64, device=device), group=group)
    sizes = [int(x.item()) for x in sizes]
    padded = torch.zeros((max(sizes), 2), dtype=torch.float64, device=device)
    padded[: block.shape[0]] = block
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded, group=group)
    every = torch.cat([g[:size] for g, size in zip(gathered, sizes)])
    if here is not None:
        every = every.to(here)
        return every[:, 0].contiguous(), every[:, 1] != 0
    every = every.cpu().numpy()
    return every[:, 0].astype(dtype), every[:, 1] != 0
