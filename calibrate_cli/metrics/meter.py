"""``Meter``: every metric of :func:`~calibrate_cli.evaluate.evaluate`, accumulated batch by batch in an
evaluation loop (docs/meter.md: a PyTorch loop, Lightning, the Hugging Face Trainer).

Each :meth:`Meter.update` makes the one summary pass over its batch
(:func:`~calibrate_cli.evaluate.summarize_data`, float64), as for a shard: its per-sample columns are
kept, its classwise (K, M) statistics added to the running ones at once; the scores are not kept.
:meth:`Meter.compute` concatenates the columns (:func:`~calibrate_cli.engine.shards.merge_summaries`,
the rule of shards) and reports them as :func:`~calibrate_cli.engine.shards.report_from_shards` does:
the :class:`~calibrate_cli.evaluate.EvalReport` of the concatenated batches, within the numeric
contract (docs/conventions.md). Memory: one set of classwise statistics, and ~34 bytes per sample
(confidence, correctness, label, NLL, Brier and top-5 terms: what AdaECE, KS-CE, SmoothECE and an exact
merge need).

:meth:`Meter.all_reduce` (``torch.distributed``): the per-sample columns are all-gathered (in rank
order) and the dense classwise statistics all-reduced (summed), so every rank then holds the meter of
all ranks' samples.
"""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np

from ..engine.binning import BinStats
from ..engine.shards import merge_summaries
from ..engine.summary import PredictionSummary, check_compat
from ..errors import InputError
from ..evaluate import EvalReport, report_from_summary, summarize_data
from .functional import DEFAULT_N_BINS

__all__ = ["Meter"]

#: the per-sample columns of a summary, in the order they are packed for the all-gather
_COLUMNS = ("labels", "confidences", "correct", "nll", "brier", "top5")


def _host_array(x) -> np.ndarray:
    """A numpy view or copy of ``x``: a torch tensor is detached and copied to the host (float16 and
    bfloat16 upcast to float32, exactly); anything else through ``np.asarray``."""
    if type(x).__module__.startswith("torch"):
        x = x.detach()
        if x.is_floating_point() and x.element_size() < 4:
            x = x.float()  # numpy has no bfloat16; the upcast is exact
        return x.cpu().numpy()
    return x if isinstance(x, np.ndarray) else np.asarray(x)


class Meter:
    """Calibration metrics over many batches: ``update(scores, labels)`` per batch, ``compute()`` for
    the :class:`~calibrate_cli.evaluate.EvalReport` that :func:`~calibrate_cli.evaluate.evaluate` gives on
    the concatenated batches.

    ``scores``/``labels`` as :func:`~calibrate_cli.evaluate.evaluate` takes them, numpy arrays or torch
    tensors (any device: copied to the host, float64 accumulation). ``input_kind``: "logits" or
    "probs" for every batch; None: the first batch's, as :func:`~calibrate_cli.evaluate.evaluate`
    resolves it (logits, refusing scores that look like probabilities).

    >>> import numpy as np
    >>> meter = Meter(n_bins=4)
    >>> meter.update(np.array([[2.0, 0.0]]), np.array([0])).update(np.array([[0.0, 1.0]]), np.array([0]))
    Meter(n_bins=4, n=2)
    >>> meter.compute().metrics["accuracy"]
    0.5
    """

    def __init__(self, n_bins: int = DEFAULT_N_BINS, *, input_kind: str | None = None,
                 compat: str | None = None) -> None:
        self.n_bins = int(n_bins)
        self.input_kind = input_kind
        self.compat = check_compat(compat)
        self._samples: list[PredictionSummary] = []  # each batch's per-sample columns (classwise None)
        self._classwise: PredictionSummary | None = None  # the classwise statistics so far (no samples)
        self._kind: str | None = None

    def __repr__(self) -> str:
        return f"Meter(n_bins={self.n_bins}, n={self.n})"

    @property
    def n(self) -> int:
        """The number of samples seen so far."""
        return sum(s.n for s in self._samples)

    def reset(self) -> "Meter":
        """Forget every batch (e.g. at the start of an epoch)."""
        self._samples, self._classwise, self._kind = [], None, None
        return self

    def update(self, scores, labels) -> "Meter":
        """Summarise one batch: (B, K) logits or probabilities (or (B,) binary scores) and (B,) labels."""
        where = f"batch {len(self._samples) + 1}"
        data = summarize_data(
            # unstated: the first batch's kind (as evaluate resolves it) holds for every later batch, one of
            # which alone might look like probabilities (rows of 0s and a 1)
            _host_array(scores), _host_array(labels), input_kind=self.input_kind or self._kind, n_bins=self.n_bins,
            compat=self.compat, scores_name=f"{where} scores", labels_name=f"{where} labels",
        )
        kind = data.predictions.input_kind
        if self._kind is not None and kind != self._kind:
            raise InputError(f"{where}: scores read as {kind}, earlier batches as {self._kind}: give "
                             "Meter(input_kind=...)")
        if self._samples and data.summary.k != self._samples[0].k:
            raise InputError(f"{where}: K = {data.summary.k} classes, earlier batches K = {self._samples[0].k}")
        self._kind = kind
        self._add(data.summary)
        return self

    def _add(self, summary: PredictionSummary) -> None:
        """Keep ``summary``'s per-sample columns; add its classwise statistics to the running ones at once
        (K × M cells: kept per batch they would grow with the number of batches)."""
        self._samples.append(replace(summary, classwise=None))
        stub = _classwise_only(summary)
        self._classwise = stub if self._classwise is None else merge_summaries([self._classwise, stub])

    def merge(self, other: "Meter") -> "Meter":
        """Add ``other``'s batches after this meter's (the same bins and compat mode); returns self."""
        if other.n_bins != self.n_bins or other.compat != self.compat:
            raise InputError(f"cannot merge a meter of {other.n_bins} bins (compat {other.compat}) into one of "
                             f"{self.n_bins} bins (compat {self.compat})")
        if self._kind is not None and other._kind is not None and other._kind != self._kind:
            raise InputError(f"cannot merge a meter of {other._kind} into one of {self._kind}")
        if other._classwise is not None:
            self._samples = self._samples + other._samples
            self._classwise = other._classwise if self._classwise is None else merge_summaries(
                [self._classwise, other._classwise])
        self._kind = self._kind or other._kind
        return self

    def _merged(self) -> PredictionSummary | None:
        """The summary of every sample so far (the batches' columns concatenated once, then kept)."""
        if not self._samples:
            return None
        if len(self._samples) > 1:
            self._samples = [merge_summaries(self._samples)]
        return replace(self._samples[0], classwise=self._classwise.classwise)

    def compute(self) -> EvalReport:
        """The :class:`~calibrate_cli.evaluate.EvalReport` of every sample seen (InputError before any)."""
        merged = self._merged()
        if merged is None:
            raise InputError("the meter has seen no samples: call update(scores, labels) first")
        # not consumed: the kept summary's confidences must stay in sample order for later merges
        return report_from_summary(merged, input_kind=self._kind, n_bins=self.n_bins)

    def all_reduce(self, group=None) -> "Meter":
        """Make this meter (on every rank of ``group``) the meter of all ranks' samples, in rank order:
        the per-sample columns all-gathered, the dense classwise statistics all-reduced (sums: equal to
        one process's up to the order of float64 additions). Call it on every rank; every rank must have
        seen at least one batch. Tensors travel on CUDA with the NCCL backend, else on the CPU."""
        import torch
        import torch.distributed as dist

        s = self._merged()
        if s is None:
            raise InputError("all_reduce: this rank's meter has seen no samples")
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" \
            else torch.device("cpu")
        world = dist.get_world_size(group)
        present = [c for c in _COLUMNS if getattr(s, c) is not None]
        # one (N, C) float64 block: labels < 2^53 and 0/1 flags are exact in float64
        block = torch.from_numpy(np.stack([np.asarray(getattr(s, c), dtype=np.float64) for c in present], axis=1))
        sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
        dist.all_gather(sizes, torch.tensor([s.n], dtype=torch.int64, device=device), group=group)
        sizes = [int(x.item()) for x in sizes]
        padded = torch.zeros((max(sizes), len(present)), dtype=torch.float64, device=device)
        padded[: s.n] = block.to(device)
        gathered = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(gathered, padded, group=group)
        every = np.concatenate([g[:size].cpu().numpy() for g, size in zip(gathered, sizes)])
        columns = {name: every[:, j].astype(np.asarray(getattr(s, name)).dtype) for j, name in enumerate(present)}
        classwise = s.classwise
        # dense on every rank: summed; else (a rank with fewer samples than bins and K·M > 2^20 keeps
        # sparse cells) every rank's cells gathered and merged as the shards' summaries are
        # no classwise cells (not asked for: every rank has the same K and request) → nothing to join
        dense = torch.tensor([int(isinstance(classwise, BinStats))], dtype=torch.int64, device=device)
        if classwise is not None:
            dist.all_reduce(dense, op=dist.ReduceOp.MIN, group=group)
        if classwise is None:
            pass
        elif bool(dense.item()):
            parts = []
            for array in (classwise.count, classwise.sum_conf, classwise.sum_correct):
                t = torch.from_numpy(np.ascontiguousarray(array)).to(device)
                dist.all_reduce(t, group=group)
                parts.append(t.cpu().numpy())
            classwise = replace(classwise, count=parts[0], sum_conf=parts[1], sum_correct=parts[2], n=sum(sizes))
        else:
            everyone = [None] * world
            dist.all_gather_object(everyone, classwise, group=group)
            stubs = [replace(_classwise_only(s), classwise=c, n=c.n) for c in everyone]
            classwise = merge_summaries(stubs).classwise
        full = replace(s, n=sum(sizes), classwise=classwise, totals=None, sort_keys=None, width=None, in_order=None,
                       class_sorted=None, **columns)
        self._samples, self._classwise = [replace(full, classwise=None)], _classwise_only(full)
        return self


def _classwise_only(summary: PredictionSummary) -> PredictionSummary:
    """``summary`` with empty per-sample columns: its classwise statistics (and N) only, to merge."""
    empty = {f.name: getattr(summary, f.name)[:0] for f in fields(PredictionSummary)
             if isinstance(getattr(summary, f.name), np.ndarray)}
    return replace(summary, **empty)
